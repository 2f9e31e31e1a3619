// `megaqwen generate --device cuda` end to end on the emulated device (megaqwen_emulated: the real CLI
// linked with the emulated CUDA engine): the megakernel and the per-operator path print the same
// tokens as the CPU engine for a greedy run, the megakernel's seeded sampled run equals the
// per-operator path's, --device auto takes the device and says which kernel decodes; verify passes
// both decode kernels; bench and chat with --device cuda run through too.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "test_paths.h"

namespace megaqwen {
namespace {

namespace fs = std::filesystem;

struct Output {
  int status = -1;
  std::string out;
};

// Runs `command` through the shell and collects its stdout (and its stderr, unless stdout_only).
Output run(const std::string& command, bool stdout_only = false) {
  Output r;
  FILE* p = popen((stdout_only ? command : command + " 2>&1").c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  r.status = pclose(p);
  return r;
}

// The tokens a generate run printed (its stdout; the notes on stderr are left out). A run that fails
// fails the test here: two runs failing alike would otherwise compare equal.
std::string tokens_of(const std::string& command) {
  const Output r = run(command, true);
  if (r.status == 0) return r.out;
  ADD_FAILURE() << command << "\nexit status " << r.status << ", stdout: " << r.out;
  return "exit status " + std::to_string(r.status) + " of " + command;
}

class EmulatedCli : public ::testing::Test {
 protected:
  static void TearDownTestSuite() { fs::remove_all(test::process_temp_dir("megaqwen-test-emulated-cli")); }
  static const fs::path& model() {
    static const fs::path dir = [] {
      const fs::path d = test::process_temp_dir("megaqwen-test-emulated-cli") / "tiny";
      const Output r = run(std::string(MEGAQWEN_BINARY) + " synth --preset tiny --seed 3 -t 2 --out " + d.string());
      EXPECT_EQ(r.status, 0) << r.out;
      return d;
    }();
    return dir;
  }
  static std::string generate(const std::string& binary, const std::string& args) {
    return tokens_of(binary + " generate -m " + model().string() + " -t 2 -n 6 --ids \"151644 872 198\" " + args);
  }
  // `bench -d cuda` on `dir` (prefill of 16, decode of 2 at depths 1 and 300, one repeat): its JSON
  // record, after checking that it ran and printed the deep decode row.
  static nlohmann::json bench_on_device(const fs::path& dir, const std::string& json_name) {
    const fs::path json = test::process_temp_dir("megaqwen-test-emulated-cli") / json_name;
    const Output r = run(std::string(MEGAQWEN_EMULATED_BINARY) + " bench -m " + dir.string() +
                         " -d cuda --prompt-len 16 --depth 1,300 --tokens 2 --repeats 1 --warmup 0"
                         " --no-bandwidth-probe --json " + json.string());
    EXPECT_EQ(r.status, 0) << r.out;
    EXPECT_NE(r.out.find("| tg2@d300 |"), std::string::npos) << r.out;
    std::ifstream in(json);
    return nlohmann::json::parse(in);
  }
};

TEST_F(EmulatedCli, GreedyOnTheEmulatedDeviceEqualsTheCpu) {
  const std::string cpu = generate(MEGAQWEN_BINARY, "-d cpu --greedy");
  ASSERT_FALSE(cpu.empty());
  EXPECT_EQ(generate(MEGAQWEN_EMULATED_BINARY, "-d cuda --greedy --decode-kernel megakernel"), cpu);
  EXPECT_EQ(generate(MEGAQWEN_EMULATED_BINARY, "-d cuda --greedy --decode-kernel per-op"), cpu);
}

TEST_F(EmulatedCli, SampledRunsAgreeBetweenTheDeviceDecodeKernels) {
  const std::string args = "-d cuda --temp 0.8 --top-k 20 --top-p 0.9 -s 7";
  const std::string mk = generate(MEGAQWEN_EMULATED_BINARY, args + " --decode-kernel megakernel");
  EXPECT_EQ(mk, generate(MEGAQWEN_EMULATED_BINARY, args + " --decode-kernel per-op"));
  EXPECT_EQ(mk.find("exit status"), std::string::npos) << mk;
}

TEST_F(EmulatedCli, AutoTakesTheDeviceAndSaysWhichKernelDecodes) {
  const Output r = run(std::string(MEGAQWEN_EMULATED_BINARY) + " generate -m " + model().string() +
                       " -n 2 --greedy --ids \"1 2 3\"");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("cuda:0 (simt emulated sm_90 device"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("decode: megakernel"), std::string::npos) << r.out;
}

// `megaqwen verify --device cuda`: both decode kernels pass against the CPU reference (prefill with the
// cuBLAS calls, per-op decode logits, and greedy tokens drawn by the megakernel or by device argmax),
// and the report names the kernel that generated.
TEST_F(EmulatedCli, VerifyPassesBothDecodeKernels) {
  for (const std::string kernel : {"megakernel", "per-op"}) {
    const fs::path json = test::process_temp_dir("megaqwen-test-emulated-cli") / ("verify-" + kernel + ".json");
    const Output r = run(std::string(MEGAQWEN_EMULATED_BINARY) + " verify -m " + model().string() +
                         " -d cuda -t 2 --positions 12 --decode 4 -n 6 --decode-kernel " + kernel + " --json " +
                         json.string());
    ASSERT_EQ(r.status, 0) << r.out;
    EXPECT_NE(r.out.find("\nPASS\n"), std::string::npos) << r.out;
    std::ifstream in(json);
    const auto j = nlohmann::json::parse(in);
    EXPECT_EQ(j["passed"], true) << j.dump(2);
    EXPECT_NE(j["candidate"].get<std::string>().find("decode: " + kernel), std::string::npos) << j["candidate"];
    ASSERT_EQ(j["phases"].size(), 3u);
    EXPECT_EQ(j["phases"][2]["positions"], 6);
    // The device keeps a bf16 KV cache: its logits differ from the fp32 CPU's, but within bounds.
    EXPECT_GT(j["phases"][1]["worst_rel_error"].get<double>(), 0.0);
    EXPECT_LE(j["phases"][1]["worst_rel_error"].get<double>(), 2e-2);
  }
}

// A Qwen3.5 hybrid on the emulated device: `verify --device cuda` runs CudaHybridEngine (per-op
// decode) against the CPU hybrid engine and passes, with either prefill attention and either form of
// the delta rule; the megakernel is refused by name.
TEST_F(EmulatedCli, VerifyPassesTheHybridEngine) {
  const fs::path dir = test::process_temp_dir("megaqwen-test-emulated-cli") / "tiny-hybrid";
  const Output s = run(std::string(MEGAQWEN_BINARY) + " synth --preset tiny-hybrid --vocab-size 4099 --seed 3 -t 2 --out " +
                       dir.string());
  ASSERT_EQ(s.status, 0) << s.out;
  const Output r = run(std::string(MEGAQWEN_EMULATED_BINARY) + " verify -m " + dir.string() +
                       " -d cuda -t 2 --positions 20 --decode 4 -n 6");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("\nPASS\n"), std::string::npos) << r.out;
  // auto: the megakernel decodes (the emulated device is an sm_90 part with 16 SMs).
  EXPECT_NE(r.out.find("decode: megakernel (Qwen3.5 hybrid)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("prefill attention: tc"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("DeltaNet prefill: chunked"), std::string::npos) << r.out;
  // The token-by-token delta rule on request (20 prompt tokens: the chunked form's range), and a
  // clear refusal of an unknown choice.
  const Output seq = run("MEGAQWEN_DELTANET_PREFILL=sequential " + std::string(MEGAQWEN_EMULATED_BINARY) +
                         " verify -m " + dir.string() + " -d cuda -t 2 --positions 20 --decode 2 -n 2");
  ASSERT_EQ(seq.status, 0) << seq.out;
  EXPECT_NE(seq.out.find("DeltaNet prefill: sequential"), std::string::npos) << seq.out;
  const Output bad_rule = run("MEGAQWEN_DELTANET_PREFILL=parallel " + std::string(MEGAQWEN_EMULATED_BINARY) +
                              " generate -m " + dir.string() + " -d cuda -t 2 -n 2 --ids \"1 2 3\"");
  EXPECT_NE(bad_rule.status, 0) << bad_rule.out;
  EXPECT_NE(bad_rule.out.find("MEGAQWEN_DELTANET_PREFILL=parallel: choose chunked or sequential"), std::string::npos)
      << bad_rule.out;
  // The exact prefill attention on request, and a clear refusal of an unknown choice.
  const Output fp32 = run("MEGAQWEN_PREFILL_ATTENTION=fp32 " + std::string(MEGAQWEN_EMULATED_BINARY) + " verify -m " +
                          dir.string() + " -d cuda -t 2 --positions 8 --decode 2 -n 2");
  ASSERT_EQ(fp32.status, 0) << fp32.out;
  EXPECT_NE(fp32.out.find("prefill attention: fp32"), std::string::npos) << fp32.out;
  const Output bad = run("MEGAQWEN_PREFILL_ATTENTION=fast " + std::string(MEGAQWEN_EMULATED_BINARY) + " generate -m " +
                         dir.string() + " -d cuda -t 2 -n 2 --ids \"1 2 3\"");
  EXPECT_NE(bad.status, 0) << bad.out;
  EXPECT_NE(bad.out.find("MEGAQWEN_PREFILL_ATTENTION=fast: choose fp32 or tc"), std::string::npos) << bad.out;
  // The per-operator decode on request.
  const Output perop = run(std::string(MEGAQWEN_EMULATED_BINARY) + " verify -m " + dir.string() +
                           " -d cuda -t 2 --positions 20 --decode 2 -n 8 --decode-kernel per-op");
  ASSERT_EQ(perop.status, 0) << perop.out;
  EXPECT_NE(perop.out.find("decode: per-op (Qwen3.5 hybrid)"), std::string::npos) << perop.out;
}

// `megaqwen bench --device cuda`: the benchmark's GPU path (device description, NVML's absence with
// its reason, prefill and decode at two cache positions, the JSON record) runs through; the numbers
// are the emulator's and mean nothing.
TEST_F(EmulatedCli, BenchRunsItsGpuPathAndWritesItsRecord) {
  const auto j = bench_on_device(model(), "bench.json");
  EXPECT_EQ(j["device"].get<std::string>().rfind("cuda:0 (simt emulated sm_90 device", 0), 0u) << j["device"];
  EXPECT_EQ(j["gpu"]["sm_count"], 16);
  EXPECT_EQ(j["gpu"]["nvml_energy"], false);
  EXPECT_FALSE(j["gpu"]["nvml_unavailable_because"].get<std::string>().empty());
  ASSERT_EQ(j["results"].size(), 3u) << j.dump(2);
  for (const auto& result : j["results"]) EXPECT_GT(result["median_tok_s"].get<double>(), 0.0) << result.dump();
  EXPECT_EQ(j["results"][2]["depth"], 300);
}

// The same for a Qwen3.5 hybrid: decode from a noise-filled cache and noise DeltaNet states at depth
// 300, and bytes per token that count the states read and written each step besides weights and KV.
TEST_F(EmulatedCli, BenchRunsTheHybridEngine) {
  const fs::path dir = test::process_temp_dir("megaqwen-test-emulated-cli") / "tiny-hybrid-bench";
  const Output s = run(std::string(MEGAQWEN_BINARY) + " synth --preset tiny-hybrid-gqa --vocab-size 4099 --seed 4 -t 2 "
                       "--out " + dir.string());
  ASSERT_EQ(s.status, 0) << s.out;
  const auto j = bench_on_device(dir, "bench-hybrid.json");
  EXPECT_NE(j["device"].get<std::string>().find("Qwen3.5 hybrid"), std::string::npos) << j["device"];
  ASSERT_EQ(j["results"].size(), 3u) << j.dump(2);
  // tiny-hybrid-gqa: 2 DeltaNet layers of 4 x 16 x 32 state floats and a 3 x 192 conv window, read and
  // written (2 x 4 bytes); 1 attention layer of 1 x 64 bf16 k and v per cached token.
  const double weights = j["model"]["weight_bytes_per_token"].get<double>();
  const double state = 2.0 * 2 * 4 * (4 * 16 * 32 + 3 * 192), kv_per_token = 2 * 64 * 2;
  const auto& deep = j["results"][2];
  EXPECT_EQ(deep["depth"], 300);
  EXPECT_DOUBLE_EQ(deep["bytes_per_token"].get<double>(), weights + state + (300 + 1.5) * kv_per_token) << deep.dump();
}

// `megaqwen chat --device cuda`: a scripted two-turn conversation (the real Qwen3 tokenizer and chat
// template) replies as on the CPU, and the second turn reuses the first turn's cache on the device.
TEST_F(EmulatedCli, ChatOnTheEmulatedDeviceRepliesAsTheCpuAndReusesTheCache) {
  const fs::path dir = test::process_temp_dir("megaqwen-test-emulated-chat");
  const fs::path chat_model = dir / "tiny-tokenizer";
  const Output made = run(std::string(MEGAQWEN_BINARY) + " synth --preset tiny --seed 3 -t 2 --out " +
                          chat_model.string() + " --tokenizer " + test::qwen3_tokenizer_dir().string());
  ASSERT_EQ(made.status, 0) << made.out;
  {
    std::FILE* f = std::fopen((dir / "script.txt").c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs("Hello there\n/stats\nTell me more\n/stats\n/quit\n", f);
    std::fclose(f);
  }
  auto chat = [&](const std::string& binary, const std::string& device) {
    return tokens_of(binary + " chat --model " + chat_model.string() + " -n 4 --greedy -t 2 --device " + device +
                     " < " + (dir / "script.txt").string());
  };
  // The transcript without the [stats] lines (they hold timings).
  auto replies = [](const std::string& out) {
    std::string kept, line;
    for (char c : out) {
      line += c;
      if (c != '\n') continue;
      if (line.find("[stats]") == std::string::npos) kept += line;
      line.clear();
    }
    return kept + line;
  };
  const std::string cpu = chat(MEGAQWEN_BINARY, "cpu"), gpu = chat(MEGAQWEN_EMULATED_BINARY, "cuda");
  EXPECT_EQ(replies(gpu), replies(cpu));
  const size_t second = gpu.find("[stats]", gpu.find("[stats]") + 1);
  ASSERT_NE(second, std::string::npos) << gpu;
  const std::string stats = gpu.substr(second, gpu.find('\n', second) - second);
  EXPECT_EQ(stats.find("(0 reused"), std::string::npos) << "the second turn reused nothing: " << stats;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace megaqwen
