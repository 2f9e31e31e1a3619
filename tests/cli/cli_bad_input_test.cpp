// The real `megaqwen` binary on bad input: every case must end with exit status 1 and exactly one
// line on stderr, "megaqwen: error: ..." naming the problem; never a crash, a hang or an internal error.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "megaqwen/tokenizer/tokenizer.h"
#include "test_paths.h"

namespace megaqwen {
namespace {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

struct RunResult {
  int status = -1;  // exit status; -1 when killed by a signal
  int signal = 0;
  std::string out, err;
};

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
void write_file(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), std::streamsize(bytes.size()));
}

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// Per process: ctest runs each case in its own process, possibly in parallel.
fs::path work_dir() { return fs::path(testing::TempDir()) / ("megaqwen_cli_bad_input_" + std::to_string(::getpid())); }

// Runs the binary with `args` under a 60 s timeout (a hang is killed: status 137, signal 9); stdin
// holds `input`.
RunResult run(const std::vector<std::string>& args, const std::string& input = "") {
  std::string command = "timeout -s KILL 60 " + shell_quote(test::megaqwen_binary());
  for (const auto& a : args) command.append(" ").append(shell_quote(a));
  const fs::path in = work_dir() / "stdin.txt", out = work_dir() / "stdout.txt", err = work_dir() / "stderr.txt";
  write_file(in, input);
  command += " <" + shell_quote(in.string()) + " >" + shell_quote(out.string()) + " 2>" + shell_quote(err.string());
  const int raw = std::system(command.c_str());
  RunResult r;
  if (WIFEXITED(raw)) {
    r.status = WEXITSTATUS(raw);
    if (r.status > 128) r.signal = r.status - 128;  // the shell's report of a signal death
  } else if (WIFSIGNALED(raw)) {
    r.signal = WTERMSIG(raw);
  }
  r.out = read_file(out);
  r.err = read_file(err);
  return r;
}

std::string describe(const std::vector<std::string>& args) {
  std::string s = "megaqwen";
  for (const auto& a : args) s.append(" ").append(shell_quote(a));
  return s;
}

// The contract: status 1, one stderr line "megaqwen: error: ..." holding every expected part.
void expect_one_error_line(const std::vector<std::string>& args, const std::vector<std::string>& parts,
                           const std::string& input = "") {
  SCOPED_TRACE(describe(args));
  const RunResult r = run(args, input);
  EXPECT_EQ(r.signal, 0) << "killed by signal " << r.signal << "\nstderr: " << r.err;
  EXPECT_NE(r.status, 124) << "timed out";
  EXPECT_EQ(r.status, 1) << "stderr: " << r.err;
  ASSERT_FALSE(r.err.empty());
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "stderr: " << r.err;
  EXPECT_EQ(r.err.back(), '\n');
  EXPECT_EQ(r.err.rfind("megaqwen: error: ", 0), 0u) << "stderr: " << r.err;
  EXPECT_EQ(r.err.find("internal error"), std::string::npos) << r.err;
  for (const auto& part : parts) EXPECT_NE(r.err.find(part), std::string::npos) << "missing '" << part << "' in: " << r.err;
}

// The header of a safetensors file as JSON (key order kept), and the file rebuilt from an edited one.
struct SafetensorsFile {
  ordered_json header;
  std::string data;

  static SafetensorsFile read(const fs::path& path) {
    const std::string bytes = read_file(path);
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | uint8_t(bytes[size_t(i)]);
    return {ordered_json::parse(bytes.substr(8, n)), bytes.substr(8 + n)};
  }
  void write(const fs::path& path) const {
    std::string text = header.dump();
    text.append((8 - text.size() % 8) % 8, ' ');
    std::string len(8, '\0');
    for (int i = 0; i < 8; ++i) len[size_t(i)] = char(uint64_t(text.size()) >> (8 * i));
    write_file(path, len + text + data);
  }
};

class CliBadInput : public ::testing::Test {
 protected:
  // One synthetic tiny model (no tokenizer files) for the whole suite.
  static void SetUpTestSuite() {
    fs::remove_all(work_dir());
    fs::create_directories(work_dir());
    const RunResult r = run({"synth", "--preset", "tiny", "--seed", "3", "--out", model().string(), "-t", "2"});
    ASSERT_EQ(r.status, 0) << r.err;
    ASSERT_TRUE(fs::exists(model() / "model.safetensors"));
  }
  static void TearDownTestSuite() { fs::remove_all(work_dir()); }
  static fs::path model() { return work_dir() / "tiny"; }

  // A copy of the tiny model's folder under `name`, its config.json and model.safetensors written by
  // the edit functions (empty: copied unchanged).
  static fs::path variant(const std::string& name, const std::function<void(ordered_json&)>& edit_config,
                          const std::function<void(SafetensorsFile&)>& edit_weights) {
    const fs::path dir = work_dir() / name;
    fs::remove_all(dir);
    fs::create_directories(dir);
    ordered_json config = ordered_json::parse(read_file(model() / "config.json"));
    if (edit_config) edit_config(config);
    write_file(dir / "config.json", config.dump(2));
    if (edit_weights) {
      SafetensorsFile file = SafetensorsFile::read(model() / "model.safetensors");
      edit_weights(file);
      file.write(dir / "model.safetensors");
    } else {
      fs::copy_file(model() / "model.safetensors", dir / "model.safetensors");
    }
    return dir;
  }
  static std::vector<std::string> generate(const fs::path& dir, std::vector<std::string> extra = {"--ids", "1 2 3"}) {
    std::vector<std::string> args = {"generate", "-m", dir.string(), "-d", "cpu", "-t", "2", "-n", "2"};
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  }
};

TEST_F(CliBadInput, GoodModelGeneratesIdsWithoutATokenizer) {
  const RunResult r = run(generate(model(), {"--ids", "1 2 3", "--greedy"}));
  ASSERT_EQ(r.status, 0) << r.err;
  // Two generated ids, printed as numbers since there is no tokenizer.
  int count = 0;
  for (size_t i = 0; i < r.out.size();) {
    while (i < r.out.size() && std::isspace(uint8_t(r.out[i]))) ++i;
    if (i == r.out.size()) break;
    size_t j = i;
    while (j < r.out.size() && std::isdigit(uint8_t(r.out[j]))) ++j;
    ASSERT_GT(j, i) << "not an id list: " << r.out;
    EXPECT_LT(std::stol(r.out.substr(i, j - i)), 151936);
    ++count, i = j;
  }
  EXPECT_EQ(count, 2) << r.out;
  EXPECT_NE(r.err.find("finish: length"), std::string::npos) << r.err;
  EXPECT_EQ(run({"info", "-m", model().string()}).status, 0);
}

// generate --logit-bias: a ban moves the greedy choice off the token, a large bias forces one.
TEST_F(CliBadInput, GenerateLogitBias) {
  const auto first_id = [](const std::string& out) { return std::stol(out.substr(out.find_first_not_of(" \n"))); };
  const RunResult plain = run(generate(model(), {"--ids", "1 2 3", "--greedy"}));
  ASSERT_EQ(plain.status, 0) << plain.err;
  const long top = first_id(plain.out);
  const RunResult banned = run(generate(model(), {"--ids", "1 2 3", "--greedy", "--logit-bias", std::to_string(top) + "-inf"}));
  ASSERT_EQ(banned.status, 0) << banned.err;
  EXPECT_NE(first_id(banned.out), top) << banned.out;
  const RunResult forced = run(generate(model(), {"--ids", "1 2 3", "--temp", "1", "--logit-bias", "77+1000",
                                                  "--logit-bias", "78+500"}));
  ASSERT_EQ(forced.status, 0) << forced.err;
  EXPECT_EQ(forced.out.substr(forced.out.find_first_not_of(" \n")).substr(0, 5), "77 77") << forced.out;
  for (const char* bad : {"77", "x+1", "77+", "+1", "77+inf", "77+1e3", "77*2"})
    expect_one_error_line(generate(model(), {"--ids", "1", "--logit-bias", bad}), {"--logit-bias", bad});
  expect_one_error_line(generate(model(), {"--ids", "1", "--logit-bias", "151936-1"}),
                        {"token id 151936 is out of range (vocabulary size 151936)"});
}

// generate --logprobs: after the ids, one stderr line per generated token (index, its log-probability,
// then the N best of its position, best first); greedy tokens are their position's best. Out of range: one error line.
TEST_F(CliBadInput, GenerateLogprobsPrintsEveryTokensScore) {
  const RunResult r = run(generate(model(), {"--ids", "1 2 3", "--greedy", "--logprobs", "2"}));
  ASSERT_EQ(r.status, 0) << r.err;
  std::istringstream out(r.out), err(r.err);
  std::vector<std::string> ids{std::istream_iterator<std::string>(out), {}};
  ASSERT_EQ(ids.size(), 2u) << r.out;
  std::string line;
  int rows = 0;
  while (std::getline(err, line)) {
    if (line.rfind("  ", 0) != 0) continue;
    std::istringstream fields(line);
    int index = -1;
    double logprob = 1;
    std::string token, bar, first;
    fields >> index >> logprob >> token >> bar >> first;
    EXPECT_EQ(index, rows) << line;
    EXPECT_LE(logprob, 0.0) << line;
    EXPECT_EQ(token, ids[size_t(rows)]) << line;
    EXPECT_EQ(bar, "|") << line;
    EXPECT_EQ(first, ids[size_t(rows)]) << "greedy: the best alternative is the token itself: " << line;
    EXPECT_EQ(std::count(line.begin(), line.end(), ','), 1) << "two alternatives: " << line;
    ++rows;
  }
  EXPECT_EQ(rows, 2) << r.err;
  expect_one_error_line(generate(model(), {"--ids", "1 2 3", "--logprobs", "21"}), {"--logprobs", "21"});
}

// generate --json-schema on the tiny model with the real tokenizer: the sampled output is JSON of
// the schema; bad schemas and flag mixes end with one error line.
TEST_F(CliBadInput, GenerateJsonSchemaWritesValidJson) {
  const fs::path dir = work_dir() / "tiny-tokenizer";
  const std::string tokenizer = (test::shared_dir() / "models/qwen3-0.6b").string();
  ASSERT_EQ(run({"synth", "--preset", "tiny", "--seed", "4", "--out", dir.string(), "--tokenizer", tokenizer}).status, 0);
  auto json_run = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {"generate", "-m", dir.string(), "-d", "cpu", "-t", "2"};
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  };
  const std::string schema =
      R"({"type": "object", "properties": {"ok": {"type": "boolean"}, "n": {"type": "integer"}}, "required": ["ok", "n"]})";
  for (const char* seed : {"1", "2", "3"}) {
    const RunResult r = run(json_run({"--prompt", "JSON:", "-n", "300", "--temp", "1", "--seed", seed, "--json-schema", schema}));
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.err.find("finish: stop"), std::string::npos) << r.err;
    const ordered_json v = ordered_json::parse(r.out);
    EXPECT_TRUE(v.at("ok").is_boolean()) << r.out;
    EXPECT_TRUE(v.at("n").is_number_integer()) << r.out;
  }
  const fs::path file = work_dir() / "schema.json";
  write_file(file, R"({"type": "string", "maxLength": 5})");
  const RunResult r = run(json_run({"--prompt", "x", "-n", "40", "--seed", "1", "--json-schema", fmt::format("@{}", file.string())}));
  ASSERT_EQ(r.status, 0) << r.err;
  ASSERT_TRUE(ordered_json::parse(r.out).is_string()) << r.out;
  EXPECT_LE(ordered_json::parse(r.out).get<std::string>().size(), 5u * 4) << r.out;
  expect_one_error_line(json_run({"--prompt", "x", "--json-schema", R"({"type": "integer", "minimum": 1})"}),
                        {"--json-schema", "\"minimum\" is not supported"});
  expect_one_error_line(json_run({"--prompt", "x", "--json-schema", R"js({"type": "string", "pattern": "(?=a)"})js"}),
                        {"--json-schema.pattern", "lookaround"});
  expect_one_error_line(json_run({"--prompt", "x", "--json-schema", "{"}), {"--json-schema: not JSON"});
  expect_one_error_line(json_run({"--prompt", "x", "--json-schema", "@/no/such/file"}), {"cannot read /no/such/file"});
  expect_one_error_line(json_run({"--prompt", "x", "--json", "--ignore-eos"}), {"--ignore-eos"});
}

// bench on the tiny model: the markdown table on stdout and the JSON record (plan, sampling, one
// result per test with consistent figures); bad plans end with one error line.
// generate --prompt-cache FILE: the first run writes the file, the second reuses the prompt from it
// (the summary says so) and prints the same greedy ids; --prompt-cache-ro leaves the file as it was;
// a file that is not a state file, or one from another model, is one error line naming it.
TEST_F(CliBadInput, GeneratePromptCacheReusesThePromptAcrossRuns) {
  const std::string cache = (work_dir() / "run.state").string();
  const std::vector<std::string> args = generate(model(), {"--ids", "5 6 7 8 9 10 11 12", "--greedy", "--prompt-cache", cache});
  const RunResult first = run(args);
  ASSERT_EQ(first.status, 0) << first.err;
  EXPECT_NE(first.err.find("saved 9 tokens to the prompt cache " + cache), std::string::npos) << first.err;
  const RunResult second = run(args);
  ASSERT_EQ(second.status, 0) << second.err;
  EXPECT_EQ(second.out, first.out);
  EXPECT_NE(second.err.find("prompt 8 tokens (7 from the cache)"), std::string::npos) << second.err;

  const auto written = fs::last_write_time(cache);
  const std::string before = read_file(cache);
  std::vector<std::string> read_only = generate(model(), {"--ids", "5 6 7 1", "--greedy", "--prompt-cache", cache,
                                                          "--prompt-cache-ro"});
  const RunResult ro = run(read_only);
  ASSERT_EQ(ro.status, 0) << ro.err;
  EXPECT_NE(ro.err.find("prompt 4 tokens (3 from the cache)"), std::string::npos) << ro.err;
  EXPECT_EQ(fs::last_write_time(cache), written);
  EXPECT_EQ(read_file(cache), before);

  write_file(work_dir() / "junk.state", "not a state file at all");
  expect_one_error_line(generate(model(), {"--ids", "1 2", "--prompt-cache", (work_dir() / "junk.state").string()}),
                        {"junk.state"});
  const fs::path other = variant("other-eps", [](ordered_json& c) { c["rms_norm_eps"] = 1e-3; }, {});
  expect_one_error_line(generate(other, {"--ids", "5 6", "--prompt-cache", cache}), {cache, "made with another model"});
}

TEST_F(CliBadInput, BenchWritesTableAndJson) {
  const fs::path json = work_dir() / "bench.json";
  const RunResult r = run({"bench", "-m", model().string(), "-d", "cpu", "-t", "2", "--prompt-len", "8", "--depth", "1,16",
                           "--tokens", "4", "--repeats", "2", "--warmup", "0", "--no-bandwidth-probe", "--temp", "0.7",
                           "--top-k", "5", "--json", json.string()});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("| tg4@d16 |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("decode draws: temperature 0.7, top-k 5"), std::string::npos) << r.out;
  const ordered_json j = ordered_json::parse(read_file(json));
  EXPECT_EQ(j["plan"]["repeats"], 2);
  EXPECT_FLOAT_EQ(j["plan"]["sampling"]["temperature"].get<float>(), 0.7f);
  EXPECT_EQ(j["plan"]["sampling"]["top_k"], 5);
  ASSERT_EQ(j["results"].size(), 3u);
  EXPECT_EQ(j["results"][0]["test"], "pp8");
  EXPECT_EQ(j["results"][0]["kind"], "prefill");
  for (int i : {1, 2}) {
    const auto& d = j["results"][size_t(i)];
    EXPECT_EQ(d["kind"], "decode");
    EXPECT_EQ(d["tokens"], 4);
    EXPECT_GT(d["median_tok_s"].get<double>(), 0.0);
    EXPECT_LE(d["min_tok_s"].get<double>(), d["median_tok_s"].get<double>());
    EXPECT_GE(d["max_tok_s"].get<double>(), d["median_tok_s"].get<double>());
    EXPECT_NEAR(d["achieved_gb_s"].get<double>(), d["bytes_per_token"].get<double>() * d["median_tok_s"].get<double>() / 1e9,
                1e-9 * d["achieved_gb_s"].get<double>() + 1e-12);
  }
  // Deeper positions read more cache per token.
  EXPECT_GT(j["results"][2]["bytes_per_token"].get<double>(), j["results"][1]["bytes_per_token"].get<double>());
  EXPECT_EQ(j["results"][2]["depth"], 16);

  const std::vector<std::string> base = {"bench", "-m", model().string(), "-d", "cpu", "--no-bandwidth-probe", "--prompt-len", "0"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  };
  expect_one_error_line(with({"--depth", "1,x"}), {"--depth: 'x' is not a non-negative integer"});
  expect_one_error_line(with({"--depth", "100", "--tokens", "8", "--ctx", "64"}), {"decode at depth 100", "raise --ctx"});
  expect_one_error_line(with({"--repeats", "0"}), {"--repeats"});
  expect_one_error_line(with({"--top-p", "3"}), {"top_p must be in (0, 1], got 3"});
}

// YaRN in config.json: info shows it, and --ctx may go past max_position_embeddings (40,960) up to
// original x factor; beyond that, and without scaling, one error line with the numbers.
TEST_F(CliBadInput, YarnStretchesTheContext) {
  const fs::path yarn = variant("yarn", [](ordered_json& c) {
    c["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 32768}};
  }, {});
  const RunResult info = run({"info", "-m", yarn.string()});
  ASSERT_EQ(info.status, 0) << info.err;
  EXPECT_NE(info.out.find("rope scaling   YaRN x4 of 32768 (attention factor 1.1386): context up to 131072"),
            std::string::npos)
      << info.out;
  const RunResult ok = run(generate(yarn, {"--ids", "1 2 3", "--ctx", "50000"}));
  EXPECT_EQ(ok.status, 0) << ok.err;
  expect_one_error_line(generate(yarn, {"--ids", "1 2 3", "--ctx", "131073"}),
                        {"context 131073 exceeds the model's 131072 positions (max_position_embeddings 40960, "
                         "stretched by its rope_scaling factor 4)"});
  expect_one_error_line(generate(model(), {"--ids", "1 2 3", "--ctx", "50000"}),
                        {"context 50000 exceeds the model's max_position_embeddings 40960"});
  // The same from the command line, config.json untouched; an override of "{}" turns scaling off.
  const std::string yarn_json = R"({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768})";
  const RunResult flag_info = run({"info", "-m", model().string(), "--rope-scaling", yarn_json});
  ASSERT_EQ(flag_info.status, 0) << flag_info.err;
  EXPECT_NE(flag_info.out.find("context up to 131072"), std::string::npos) << flag_info.out;
  EXPECT_EQ(run(generate(model(), {"--ids", "1 2 3", "--ctx", "50000", "--rope-scaling", yarn_json})).status, 0);
  expect_one_error_line(generate(yarn, {"--ids", "1 2 3", "--ctx", "50000", "--rope-scaling", "{}"}),
                        {"context 50000 exceeds the model's max_position_embeddings 40960"});
  expect_one_error_line(generate(model(), {"--ids", "1 2 3", "--rope-scaling", R"({"rope_type": "longrope"})"}),
                        {"--rope-scaling: rope_type 'longrope' is not supported (default, linear and yarn are)"});
  expect_one_error_line(generate(model(), {"--ids", "1 2 3", "--rope-scaling", "yarn"}),
                        {"--rope-scaling: not a JSON object"});
  // A context the scaling allows but this machine cannot hold: refused before the cache is made.
  const fs::path huge = variant("yarn-huge", [](ordered_json& c) {
    c["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 512.0}, {"original_max_position_embeddings", 32768}};
  }, {});
  expect_one_error_line(generate(huge, {"--ids", "1 2 3", "--ctx", "16000000"}),
                        {"a KV cache of 16000000 tokens needs ", " GiB of memory available; ask for a smaller --ctx"});
}

TEST_F(CliBadInput, MissingFolder) {
  const std::string missing = (work_dir() / "no-such-model").string();
  expect_one_error_line({"generate", "-m", missing, "--ids", "1"}, {"model folder '" + missing + "' does not exist"});
  expect_one_error_line({"info", "-m", missing}, {"does not exist"});
  expect_one_error_line({"info", "-m", "Nobody/NoSuchModel"},
                        {"model 'Nobody/NoSuchModel' is not a folder and was not found in the Hugging Face cache"});
  expect_one_error_line({"info", "-m", (model() / "config.json").string()}, {"config.json is not a folder"});
  // A name the OS refuses outright (too long) is still a user error, not an internal one.
  expect_one_error_line({"info", "-m", std::string(5000, 'a')}, {});
}

TEST_F(CliBadInput, FolderWithoutConfig) {
  const fs::path dir = work_dir() / "empty";
  fs::create_directories(dir);
  expect_one_error_line(generate(dir), {"config.json: cannot read config.json (is this a model folder?)"});
  // Config but no weights.
  fs::copy_file(model() / "config.json", dir / "config.json", fs::copy_options::overwrite_existing);
  expect_one_error_line(generate(dir), {"no model.safetensors or model.safetensors.index.json"});
}

TEST_F(CliBadInput, BadConfigs) {
  const auto set = [](const char* key, ordered_json value) {
    return [key, value](ordered_json& c) { c[key] = value; };
  };
  expect_one_error_line(generate(variant("llama", set("model_type", "llama"), {})),
                        {"config.json: unsupported architecture 'llama'", "supported: qwen3"});
  expect_one_error_line(generate(variant("qwen3next", set("model_type", "qwen3_next"), {})),
                        {"unsupported architecture 'qwen3_next'"});
  // A Qwen3 config relabelled qwen3_5 lacks the wrapper's language model.
  expect_one_error_line(generate(variant("qwen35", set("model_type", "qwen3_5"), {})), {"missing required field 'text_config'"});
  expect_one_error_line(generate(variant("scaling", set("rope_scaling", {{"rope_type", "yarn"}}), {})),
                        {"config.json: missing required field 'rope_scaling.factor'"});
  expect_one_error_line(generate(variant("dynamic", set("rope_scaling", {{"rope_type", "dynamic"}, {"factor", 2}}), {})),
                        {"rope_scaling.rope_type 'dynamic' is not supported (default, linear and yarn are)"});
  expect_one_error_line(generate(variant("hidden", set("hidden_size", "64"), {})),
                        {"field 'hidden_size' must be an integer, got \"64\""});
  expect_one_error_line(generate(variant("nolayers", [](ordered_json& c) { c.erase("num_hidden_layers"); }, {})),
                        {"missing required field 'num_hidden_layers'"});
  const fs::path broken = variant("badjson", {}, {});
  write_file(broken / "config.json", "{\"model_type\": \"qwen3\", ");
  expect_one_error_line(generate(broken), {"config.json: not valid JSON"});
  // Untrusted text with a newline in it stays on one line.
  expect_one_error_line(generate(variant("newline", set("model_type", "evil\nline"), {})),
                        {"unsupported architecture 'evil\\nline'"});
}

TEST_F(CliBadInput, TruncatedWeights) {
  const fs::path dir = variant("truncated", {}, {});
  std::string bytes = read_file(dir / "model.safetensors");
  write_file(dir / "model.safetensors", bytes.substr(0, bytes.size() / 2));
  expect_one_error_line(generate(dir), {"model.safetensors: tensor 'model.embed_tokens.weight': data_offsets",
                                        "run past the data section", "truncated file?"});
  write_file(dir / "model.safetensors", bytes.substr(0, 5));
  expect_one_error_line(generate(dir), {"truncated safetensors file (5 bytes, no header length)"});
  write_file(dir / "model.safetensors", bytes.substr(0, 100));
  expect_one_error_line(generate(dir), {"exceeds the file (100 bytes): truncated file?"});
}

TEST_F(CliBadInput, LyingHeaders) {
  expect_one_error_line(generate(variant("oob", {}, [](SafetensorsFile& f) {
                          f.header["model.norm.weight"]["data_offsets"] = {f.data.size() + 2, f.data.size() + 130};
                        })),
                        {"tensor 'model.norm.weight': data_offsets", "run past the data section"});
  expect_one_error_line(generate(variant("overlap", {}, [](SafetensorsFile& f) {
                          f.header["model.norm.weight"]["data_offsets"] = {64, 192};
                        })),
                        {"tensors 'model.embed_tokens.weight' and 'model.norm.weight' overlap in the data section"});
  expect_one_error_line(generate(variant("bytesize", {}, [](SafetensorsFile& f) {
                          f.header["model.norm.weight"]["shape"] = {65};
                        })),
                        {"tensor 'model.norm.weight': 128 bytes stored but shape [65] of BF16 needs 130"});
  expect_one_error_line(generate(variant("dtype", {}, [](SafetensorsFile& f) {
                          f.header["model.norm.weight"]["dtype"] = "Q4_K";
                        })),
                        {"tensor 'model.norm.weight': unknown dtype \"Q4_K\""});

  const fs::path huge = variant("hugelen", {}, {});
  std::string bytes = read_file(huge / "model.safetensors");
  std::string patched = bytes;
  for (int i = 0; i < 8; ++i) patched[size_t(i)] = char(i == 7 ? 0x80 : 0);  // 2^63
  write_file(huge / "model.safetensors", patched);
  expect_one_error_line(generate(huge), {"safetensors header length 9223372036854775808 is implausibly large"});
  patched = bytes;
  patched[8] = 'x';  // the header's opening brace
  write_file(huge / "model.safetensors", patched);
  expect_one_error_line(generate(huge), {"model.safetensors: safetensors header is not valid JSON"});
  // Odd header length: every tensor misaligned.
  SafetensorsFile f = SafetensorsFile::read(model() / "model.safetensors");
  std::string text = f.header.dump() + " ";
  text.append((8 - text.size() % 8) % 8 + 1, ' ');
  std::string len(8, '\0');
  for (int i = 0; i < 8; ++i) len[size_t(i)] = char(uint64_t(text.size()) >> (8 * i));
  write_file(huge / "model.safetensors", len + text + f.data);
  expect_one_error_line(generate(huge), {"tensor 'model.embed_tokens.weight' is misaligned"});
}

TEST_F(CliBadInput, MissingOrMisshapenTensor) {
  expect_one_error_line(generate(variant("missing", {}, [](SafetensorsFile& f) {
                          const ordered_json entry = f.header["model.norm.weight"];  // copy: the insert may reallocate
                          f.header["model.norm.weight_renamed"] = entry;
                          f.header.erase("model.norm.weight");
                        })),
                        {"missing tensor 'model.norm.weight' (expected shape [64])"});
  expect_one_error_line(generate(variant("shape", {}, [](SafetensorsFile& f) {
                          f.header["model.layers.1.self_attn.k_proj.weight"]["shape"] = {64, 256};
                        })),
                        {"tensor 'model.layers.1.self_attn.k_proj.weight' has shape [64, 256], expected [256, 64]"});
  expect_one_error_line(generate(variant("i16", {}, [](SafetensorsFile& f) {
                          f.header["model.layers.0.self_attn.q_norm.weight"]["dtype"] = "I16";
                        })),
                        {"tensor 'model.layers.0.self_attn.q_norm.weight' has dtype I16; supported: BF16, F16, F32"});
  // A config whose shapes disagree with the weights.
  expect_one_error_line(generate(variant("cfgshape", [](ordered_json& c) { c["intermediate_size"] = 256; }, {})),
                        {"tensor 'model.layers.0.mlp.gate_proj.weight' has shape [128, 64], expected [256, 64]"});
}

// verify on the tiny model with --device cpu (the candidate is then the CPU engine's decode path and
// generation loop against its batched prefill): the table, PASS, exit 0 and the JSON report; bad
// requests end with one error line.
TEST_F(CliBadInput, VerifyReportsAndWritesJson) {
  const fs::path json = work_dir() / "verify.json";
  const RunResult r = run({"verify", "-m", model().string(), "-d", "cpu", "-t", "2", "--positions", "40", "--decode", "8",
                           "-n", "8", "--json", json.string()});
  ASSERT_EQ(r.status, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("| prefill | 32 | 32 | 0 |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| decode | 8 | 8 | 0 |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| generation | 8 | 8 | 0 |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\nPASS\n"), std::string::npos) << r.out;
  const ordered_json j = ordered_json::parse(read_file(json));
  EXPECT_EQ(j["passed"], true);
  EXPECT_EQ(j["tokens"], 40);
  EXPECT_EQ(j["prefill_tokens"], 32);
  EXPECT_EQ(j["generated"].size(), 8u);
  EXPECT_EQ(j["candidate"].get<std::string>().rfind("cpu", 0), 0u) << j["candidate"];
  ASSERT_EQ(j["phases"].size(), 3u);
  EXPECT_EQ(j["phases"][1]["phase"], "decode");
  EXPECT_LT(j["phases"][1]["worst_rel_error"].get<double>(), 1e-4);
  EXPECT_TRUE(j["failures"].empty());
  // A prompt shorter than --decode: all but its first token are decoded.
  const RunResult short_prompt = run({"verify", "-m", model().string(), "-d", "cpu", "-t", "2", "--ids", "5 6 7", "-n", "2"});
  ASSERT_EQ(short_prompt.status, 0) << short_prompt.err;
  EXPECT_NE(short_prompt.out.find("3 (1 prefilled, 2 decoded one by one)"), std::string::npos) << short_prompt.out;

  const std::vector<std::string> base = {"verify", "-m", model().string(), "-d", "cpu", "-t", "2"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  };
  expect_one_error_line(with({"--ids", "1 999999999"}), {"token id 999999999 is outside the vocabulary [0, 151936)"});
  expect_one_error_line(with({"--ids", "1", "--prompt", "hi"}), {"give at most one of --prompt TEXT or --ids"});
  expect_one_error_line(with({"--prompt", "hello"}), {"has no tokenizer", "give --ids instead"});
  expect_one_error_line(with({"-n", "50000"}), {"160 tokens + 50000 generated exceed the model's 40960 positions"});
  expect_one_error_line(with({"--positions", "0"}), {"--positions"});
}

// verify --bf16-kv-cache: the CPU candidate rounds its cache as the CUDA engines do, so its logits
// move off the fp32 reference by that rounding alone (more than the decode path's own 1e-6, inside
// verify's bounds); it is refused for any other device.
TEST_F(CliBadInput, VerifyWithTheGpusBf16CacheOnTheCpu) {
  const fs::path json = work_dir() / "verify-bf16.json";
  const RunResult r = run({"verify", "-m", model().string(), "-d", "cpu", "-t", "2", "--positions", "40", "--decode",
                           "8", "-n", "8", "--bf16-kv-cache", "--json", json.string()});
  ASSERT_EQ(r.status, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("candidate: cpu (2 threads, KV cache rounded to bf16"), std::string::npos) << r.out;
  const ordered_json j = ordered_json::parse(read_file(json));
  for (int phase : {0, 1}) {
    const double err = j["phases"][phase]["worst_rel_error"].get<double>();
    EXPECT_GT(err, 1e-5) << j["phases"][phase]["phase"];
    EXPECT_LT(err, 2e-2) << j["phases"][phase]["phase"];
  }
  expect_one_error_line({"verify", "-m", model().string(), "-d", "auto", "--bf16-kv-cache"},
                        {"--bf16-kv-cache is for --device cpu"});
}

// perplexity on a tiny model with the Qwen3 tokenizer: the running value per window, the final line
// and the JSON agree; what cannot be measured ends with one error line.
TEST_F(CliBadInput, PerplexityReportsAndRefuses) {
  const fs::path with_tokenizer = work_dir() / "tiny-tok";
  const RunResult synth = run({"synth", "--preset", "tiny", "--seed", "3", "--out", with_tokenizer.string(), "-t", "2",
                               "--tokenizer", test::qwen3_tokenizer_dir().string()});
  ASSERT_EQ(synth.status, 0) << synth.err;
  const fs::path text = work_dir() / "text.txt", json = work_dir() / "ppl.json";
  std::string words;
  for (int i = 0; i < 200; ++i) words += "The quick brown fox " + std::to_string(i) + " jumps over the lazy dog. ";
  write_file(text, words);
  const std::vector<std::string> base = {"perplexity", "-m", with_tokenizer.string(), "-d", "cpu", "-t", "2"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  };
  const RunResult r = run(with({"-f", text.string(), "-w", "64", "--windows", "3", "--json", json.string()}));
  ASSERT_EQ(r.status, 0) << r.err << r.out;
  const ordered_json j = ordered_json::parse(read_file(json));
  EXPECT_EQ(j["windows"], 3);
  EXPECT_EQ(j["window"], 64);
  EXPECT_EQ(j["scored_tokens"], 3 * 31);
  EXPECT_EQ(j["per_window"].size(), 3u);
  const double ppl = j["perplexity"].get<double>();
  EXPECT_NEAR(ppl, std::exp(j["mean_nll"].get<double>()), 1e-9 * ppl);
  EXPECT_NE(r.out.find("[1/3] "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(fmt::format("[3/3] {:.4f}\n", ppl)), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(fmt::format("PPL = {:.4f} +/- ", ppl)), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("over 93 tokens (3 windows of 64)"), std::string::npos) << r.out;

  // A special token's spelling in the text is scored as characters, as llama-perplexity does.
  const std::string chat_text = words + "<|im_start|>user\nhi<|im_end|><|endoftext|>";
  const RunResult special = run(with({"--text", chat_text, "-w", "64", "--windows", "1", "--json", json.string()}));
  ASSERT_EQ(special.status, 0) << special.err;
  const ordered_json js = ordered_json::parse(read_file(json));
  const Tokenizer tok = Tokenizer::load(test::qwen3_tokenizer_dir());
  EXPECT_EQ(js["text_tokens"], tok.encode(chat_text, SpecialTokens::kAsText).size());
  EXPECT_GT(js["text_tokens"], tok.encode(chat_text).size());

  expect_one_error_line(with({"--text", "too short"}), {"fewer than one window of 512"});
  expect_one_error_line(with({"-f", (work_dir() / "missing.txt").string()}), {"cannot read", "missing.txt"});
  expect_one_error_line(with({}), {"give exactly one of --file PATH or --text TEXT"});
  expect_one_error_line(with({"--text", words, "-w", "64", "-c", "32"}), {"window of 64 tokens exceeds the context of 32"});
  expect_one_error_line({"perplexity", "-m", model().string(), "--text", "x"}, {"has no tokenizer"});
}

TEST_F(CliBadInput, BadTokenIds) {
  expect_one_error_line(generate(model(), {"--ids", "1 999999999"}),
                        {"token id 999999999 is out of range (vocabulary size 151936)"});
  expect_one_error_line(generate(model(), {"--ids", "5 -1"}), {"token id -1 is out of range"});
  expect_one_error_line(generate(model(), {"--ids", "abc"}), {"'abc' is not a token id"});
  expect_one_error_line(generate(model(), {"--ids", "1 2x"}), {"'2x' is not a token id"});
  expect_one_error_line(generate(model(), {"--ids", "99999999999999999999"}), {"'99999999999999999999' is not a token id"});
  expect_one_error_line(generate(model(), {"--ids", " , "}), {"the prompt is empty"});
  expect_one_error_line(generate(model(), {}), {"give exactly one of --prompt TEXT, --file FILE or --ids"});
  expect_one_error_line(generate(model(), {"--ids", "1", "--file", (work_dir() / "missing.txt").string()}),
                        {"give exactly one of"});
  expect_one_error_line(generate(model(), {"--file", (work_dir() / "missing.txt").string()}), {"cannot read", "missing.txt"});
  // Text needs a tokenizer, which this folder does not have.
  expect_one_error_line(generate(model(), {"--prompt", "hello"}), {"has no tokenizer", "give --ids instead"});
}

// tokenize --jsonl: one JSON string per line to one array of ids per line, and back with --decode
// (the ids are the Qwen3 tokenizer's, as HF gives them).
TEST_F(CliBadInput, TokenizeJsonLines) {
  const std::string tokenizer = (test::shared_dir() / "models/qwen3-0.6b").string();
  RunResult r = run({"tokenize", "--model", tokenizer, "--jsonl"},
                    "\"Hello world\"\n\"<|im_start|>user\\nHi<|im_end|>\"\n\"\"\n");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "[9707,1879]\n[151644,872,198,13048,151645]\n[]\n");
  r = run({"tokenize", "--model", tokenizer, "--jsonl", "--decode"}, "[9707,1879]\n[]\n[151645]\n");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "\"Hello world\"\n\"\"\n\"<|im_end|>\"\n");

  const std::vector<std::string> encode = {"tokenize", "--model", tokenizer, "--jsonl"};
  expect_one_error_line(encode, {"line 2 is not JSON"}, "\"a\"\nnope\n");
  expect_one_error_line(encode, {"line 1 is not a JSON string"}, "[1, 2]\n");
  std::vector<std::string> decode = encode;
  decode.push_back("--decode");
  expect_one_error_line(decode, {"line 1 is not an array of token ids"}, "\"text\"\n");
  expect_one_error_line(decode, {"line 2 holds \"x\", which is not a token id"}, "[1]\n[1, \"x\"]\n");
  expect_one_error_line(decode, {"200000"}, "[200000]\n");
}

TEST_F(CliBadInput, PromptLongerThanContext) {
  std::string ids;
  for (int i = 1; i <= 20; ++i) ids += std::to_string(i) + " ";
  expect_one_error_line(generate(model(), {"--ids", ids, "--ctx", "8"}), {"the prompt has 20 tokens but the context holds 8"});
  expect_one_error_line(generate(model(), {"--ids", "1", "--ctx", "100000"}),
                        {"context 100000 exceeds the model's max_position_embeddings 40960"});
  expect_one_error_line(generate(model(), {"--ids", "1", "--ctx", "-1"}),
                        {"--ctx: Value -1 not in range 0 to 2147483647 (run with --help for usage)"});
  expect_one_error_line(generate(model(), {"--ids", "1", "--threads", "-4"}), {"--threads: Value -4 not in range"});
}

TEST_F(CliBadInput, BadDeviceAndFlags) {
  std::vector<std::string> args = {"generate", "-m", model().string(), "--ids", "1 2", "--device", "tpu"};
  expect_one_error_line(args, {"unknown device 'tpu'; choose auto, cpu or cuda"});
  expect_one_error_line({"generate", "-m", model().string(), "--ids", "1", "--no-such-flag"}, {"--no-such-flag"});
  expect_one_error_line({"generate", "--ids", "1"}, {"--model is required"});
  expect_one_error_line({"generate", "-m", model().string(), "--ids", "1", "-n", "lots"}, {"--max-tokens", "lots"});
  expect_one_error_line({"generate", "-m", model().string(), "--ids", "1", "--ctx", "many"}, {"--ctx", "many"});
  expect_one_error_line({"frobnicate", "-m", "x"}, {"unknown command 'frobnicate'; commands: info, synth, generate"});
  expect_one_error_line({}, {"A subcommand is required"});
  expect_one_error_line({"synth", "--preset", "huge", "--out", (work_dir() / "huge").string()}, {"unknown preset 'huge'"});
  expect_one_error_line({"synth", "--dtype", "q4", "--out", (work_dir() / "q4").string()}, {"--dtype must be bf16, f16 or f32, not 'q4'"});
}

TEST_F(CliBadInput, BadSamplingValues) {
  expect_one_error_line(generate(model(), {"--ids", "1 2", "--top-p", "0"}), {"top_p must be in (0, 1], got 0"});
  expect_one_error_line(generate(model(), {"--ids", "1 2", "--top-p", "1.5"}), {"top_p must be in (0, 1], got 1.5"});
  expect_one_error_line(generate(model(), {"--ids", "1 2", "--temp", "-1"}), {"temperature must be >= 0, got -1"});
  expect_one_error_line(generate(model(), {"--ids", "1 2", "--temp", "nan"}), {"temperature must be >= 0"});
  expect_one_error_line(generate(model(), {"--ids", "1 2", "--top-k", "-3"}), {"top_k must be >= 0, got -3"});
  expect_one_error_line(generate(model(), {"--ids", "1 2", "--min-p", "2"}), {"min_p must be in [0, 1], got 2"});
  expect_one_error_line(generate(model(), {"--ids", "1 2", "--repeat-penalty", "0"}), {"repetition_penalty must be > 0"});
  expect_one_error_line(generate(model(), {"--ids", "1 2", "--temp", "hot"}), {"--temp", "hot"});
}

}  // namespace
}  // namespace megaqwen
