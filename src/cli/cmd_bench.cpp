// megaqwen bench: prefill and decode speed of a model on a device, with achieved bandwidth against
// the machine's measured memory bandwidth; a markdown table like llama-bench's and a JSON record.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/commands.h"
#include "cli/common_options.h"
#include "megaqwen/engine/benchmark.h"
#include "megaqwen/model/model.h"
#include "megaqwen/util/error.h"
#include "megaqwen/util/memory_bandwidth.h"

#ifdef MEGAQWEN_HAVE_CUDA
#include "megaqwen/cuda/gpu_probe.h"
#endif

#include "build_info.h"  // MEGAQWEN_GIT_COMMIT, generated at build time

namespace megaqwen::cli {

namespace {

std::vector<int> parse_int_list(const std::string& text, const char* flag) {
  std::vector<int> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (item.empty()) continue;
    size_t used = 0;
    int v = 0;
    try {
      v = std::stoi(item, &used);
    } catch (...) {
      used = 0;
    }
    if (used != item.size() || v < 0) fail("{}: '{}' is not a non-negative integer", flag, item);
    if (v > 0) out.push_back(v);
  }
  return out;
}

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("bench", "Measure prefill and decode speed and achieved memory bandwidth");
  struct Args {
    ModelArgs model;
    std::string prompt_lens = "128", depths = "1", json;
    BenchPlan plan;
    SamplingArgs sampling;
    bool measure_bandwidth = true;
  };
  auto a = std::make_shared<Args>();
  a->model.add_to(cmd);
  cmd->add_option("--prompt-len", a->prompt_lens, "Prefill tests: comma-separated prompt lengths (0: none)")->capture_default_str();
  cmd->add_option("--depth", a->depths, "Decode tests: comma-separated cache positions to decode at")->capture_default_str();
  cmd->add_option("--tokens", a->plan.decode_tokens, "Tokens per decode measurement")->capture_default_str()->check(CLI::Range(1, 1 << 30));
  cmd->add_option("--repeats", a->plan.repeats, "Timed repeats per test (median reported)")->capture_default_str()->check(CLI::Range(1, 1 << 30));
  cmd->add_option("--warmup", a->plan.warmup, "Untimed runs before each test")->capture_default_str()->check(CLI::Range(0, 1 << 30));
  cmd->add_option("--json", a->json, "Write the results as JSON to this file");
  cmd->add_flag("!--no-bandwidth-probe", a->measure_bandwidth, "Skip measuring the machine's memory bandwidth");
  // Decode draws greedy unless sampling flags say otherwise (generation_config.json is not consulted:
  // benchmarks compare like with like); e.g. --temp 0.6 --top-k 20 --top-p 0.95 for Qwen3's defaults.
  a->sampling.add_to(cmd);
  cmd->add_option("--logprobs", a->plan.logprobs,
                  "Score every decode draw with its log-probability and N alternatives (0-20): what a logprob request costs")
      ->check(CLI::Range(0, kMaxTopLogprobs));
  cmd->callback([a] {
    a->plan.sampling = a->sampling.resolve(a->plan.sampling);
    a->plan.prompt_lengths = parse_int_list(a->prompt_lens, "--prompt-len");
    a->plan.depths = parse_int_list(a->depths, "--depth");
    auto model = a->model.load();
    EngineOptions options = a->model.engine;
    if (options.context == 0) {  // just enough context for the deepest test
      int need = 1;
      for (int n : a->plan.prompt_lengths) need = std::max(need, n);
      for (int d : a->plan.depths) need = std::max(need, d + a->plan.decode_tokens);
      options.context = std::min(need, model->config.context_limit());
    }
    auto engine = create_engine(model, options);
    const double weight_bytes = double(model->weight_bytes_per_token());

    // On a GPU the reference bandwidth is a measured device-to-device copy (bytes read + written),
    // and NVML's energy counter, when present, gives average power and tokens per joule.
    const bool on_gpu = engine->device_name().rfind("cuda", 0) == 0;
    nlohmann::ordered_json gpu_json;
    double bandwidth = 0;
    std::string bandwidth_label = "measured memory read bandwidth";
#ifdef MEGAQWEN_HAVE_CUDA
    std::unique_ptr<cuda::NvmlEnergy> energy;
    if (on_gpu) {
      const cuda::GpuInfo g = cuda::gpu_info(0);
      gpu_json = {{"name", g.name}, {"compute_capability", std::to_string(g.cc_major) + "." + std::to_string(g.cc_minor)},
                  {"sm_count", g.sm_count}, {"memory_bytes", g.memory_bytes}};
      if (a->measure_bandwidth) {
        bandwidth = cuda::measure_d2d_bandwidth_gb_s(0);
        bandwidth_label = "measured device-to-device copy bandwidth (read + write)";
        gpu_json["d2d_copy_bandwidth_gb_s"] = bandwidth;
      }
      std::string why;
      energy = cuda::NvmlEnergy::open(0, &why);
      if (energy) {
        a->plan.energy_joules = [e = energy.get()] { return e->joules(); };
        gpu_json["nvml_energy"] = true;
      } else {
        gpu_json["nvml_energy"] = false;
        gpu_json["nvml_unavailable_because"] = why;
      }
    }
#endif
    if (a->measure_bandwidth && !on_gpu) {
      ThreadPool pool(options.threads);
      bandwidth = measure_read_bandwidth(pool);
    }
    std::vector<BenchResult> results = run_benchmark(*engine, a->plan, weight_bytes);
    // On a shared machine one probe can land in a busy moment and read low (decode then shows above
    // 100%); the ceiling is the best the machine did, so it is probed again after the tests.
    if (a->measure_bandwidth && !on_gpu) {
      ThreadPool pool(options.threads);
      bandwidth = std::max(bandwidth, measure_read_bandwidth(pool));
    }

    const ModelConfig& c = model->config;
    std::printf("\nmodel: %s (%s, %.3f B params, %.1f MB of weights read per token)\n", model->dir.string().c_str(),
                c.model_type.c_str(), double(c.parameter_count()) / 1e9, weight_bytes / 1e6);
    std::printf("device: %s", engine->device_name().c_str());
    if (bandwidth > 0) std::printf(", %s %.1f GB/s", bandwidth_label.c_str(), bandwidth);
    const bool with_energy = std::any_of(results.begin(), results.end(), [](const BenchResult& r) { return r.joules > 0; });
    std::printf("\n\n| test | t/s (median) | min .. max | GB/s | %% of memory BW |%s\n|---|---:|---:|---:|---:|%s\n",
                with_energy ? " W | tok/J |" : "", with_energy ? "---:|---:|" : "");
    for (const auto& r : results) {
      std::string gb = r.is_decode ? std::to_string(r.achieved_gb_s).substr(0, 6) : "-";
      std::string pct = r.is_decode && bandwidth > 0 ? std::to_string(100.0 * r.achieved_gb_s / bandwidth).substr(0, 5) : "-";
      std::printf("| %s | %.2f | %.2f .. %.2f | %s | %s |", r.test.c_str(), r.median_tok_s, r.min_tok_s,
                  r.max_tok_s, gb.c_str(), pct.c_str());
      if (with_energy) {
        if (r.joules > 0) std::printf(" %.1f | %.3f |", r.average_watts, r.tokens_per_joule);
        else std::printf(" - | - |");
      }
      std::printf("\n");
    }
    std::printf("\npp N: prefill of N prompt tokens; tgN@dD: N decode steps starting at cache position D.\n");
    const SamplingParams& sp = a->plan.sampling;
    if (!sp.greedy())
      std::printf("decode draws: temperature %g, top-k %d, top-p %g, min-p %g, penalties %g / %g / %g\n", sp.temperature,
                  sp.top_k, sp.top_p, sp.min_p, sp.repetition_penalty, sp.presence_penalty, sp.frequency_penalty);
    if (a->plan.logprobs >= 0)
      std::printf("decode draws scored: log-probability and %d alternatives per token\n", a->plan.logprobs);
    // Timing builds only (cmake -DMEGAQWEN_MK_TIMING=ON): the megakernel's per-stage waits and work over every
    // decode step of this run, warm-ups and all depths included.
    const std::string profile = engine->decode_profile();
    if (!profile.empty()) std::printf("\n%s", profile.c_str());

    if (!a->json.empty()) {
      nlohmann::ordered_json j;
      j["date"] = utc_now();
      j["commit"] = MEGAQWEN_GIT_COMMIT;
      j["device"] = engine->device_name();
      j["model"] = {{"path", model->dir.string()}, {"model_type", c.model_type}, {"parameters", c.parameter_count()},
                    {"layers", c.num_layers}, {"hidden", c.hidden_size}, {"weight_bytes_per_token", weight_bytes}};
      if (on_gpu) {
        j["gpu"] = gpu_json;
        j["memory_bandwidth_kind"] = "device-to-device copy, read + write";
      }
      j["memory_read_bandwidth_gb_s"] = bandwidth;
      const SamplingParams& sp = a->plan.sampling;
      j["plan"] = {{"decode_tokens", a->plan.decode_tokens}, {"repeats", a->plan.repeats}, {"warmup", a->plan.warmup},
                   {"sampling", {{"temperature", sp.temperature}, {"top_k", sp.top_k}, {"top_p", sp.top_p},
                                 {"min_p", sp.min_p}, {"repetition_penalty", sp.repetition_penalty},
                                 {"presence_penalty", sp.presence_penalty}, {"frequency_penalty", sp.frequency_penalty},
                                 {"seed", sp.seed}}},
                   {"logprobs", a->plan.logprobs}};
      for (const auto& r : results)
        j["results"].push_back({{"test", r.test}, {"kind", r.is_decode ? "decode" : "prefill"}, {"tokens", r.tokens},
                                {"depth", r.depth}, {"median_tok_s", r.median_tok_s}, {"min_tok_s", r.min_tok_s},
                                {"max_tok_s", r.max_tok_s}, {"median_seconds", r.median_seconds},
                                {"bytes_per_token", r.bytes_per_token}, {"achieved_gb_s", r.achieved_gb_s},
                                {"fraction_of_memory_bandwidth", bandwidth > 0 ? r.achieved_gb_s / bandwidth : 0.0},
                                {"joules", r.joules}, {"average_watts", r.average_watts},
                                {"tokens_per_joule", r.tokens_per_joule}});
      if (!profile.empty()) j["decode_profile"] = profile;
      std::ofstream out(a->json);
      if (!out || !(out << j.dump(2) << "\n")) fail("cannot write {}", a->json);
    }
  });
}

}  // namespace megaqwen::cli
