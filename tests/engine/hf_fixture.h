// Reading the Hugging Face parity fixtures (tests/fixtures/hf, made by tools/make_hf_fixtures.py), the
// comparison metric the engine tests share, and the workload the engine behaviour tests run on.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "megaqwen/engine/engine.h"
#include "megaqwen/model/model.h"
#include "test_paths.h"

namespace megaqwen::test {

inline std::filesystem::path hf_fixtures_dir() { return fixtures_dir() / "hf"; }
// Qwen3.5 hybrid cases (tools/make_hf_fixtures_qwen35.py), same format.
inline std::filesystem::path hf_qwen35_fixtures_dir() { return fixtures_dir() / "hf_qwen35"; }

// The case folders under `root` (each has config.json and expected.json), sorted by name.
inline std::vector<std::string> fixture_cases(const std::filesystem::path& root) {
  std::vector<std::string> cases;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(root, ec))
    if (entry.is_directory() && std::filesystem::exists(entry.path() / "expected.json"))
      cases.push_back(entry.path().filename().string());
  std::sort(cases.begin(), cases.end());
  return cases;
}
inline std::vector<std::string> hf_fixture_cases() { return fixture_cases(hf_fixtures_dir()); }

inline nlohmann::json read_json(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path.string());
  std::stringstream text;
  text << in.rdbuf();
  return nlohmann::json::parse(text.str());
}

// A raw little-endian float32 file.
inline std::vector<float> read_f32_file(const std::filesystem::path& path) {
  static_assert(std::endian::native == std::endian::little, "the fixtures are little-endian float32");
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw std::runtime_error("cannot read " + path.string());
  const auto bytes = static_cast<size_t>(in.tellg());
  if (bytes % sizeof(float) != 0) throw std::runtime_error(path.string() + ": size is not a multiple of 4");
  std::vector<float> out(bytes / sizeof(float));
  in.seekg(0);
  in.read(reinterpret_cast<char*>(out.data()), std::streamsize(bytes));
  return out;
}

// The comparison metric: max|a - b| / max|b| over one position's logits, b the reference.
//
// Both sides compute in fp32 from the same stored weights (upcast exactly), so they differ only by the
// order of summation (vectorized dot products, a different softmax/attention loop, chunked prefill):
// about 1e-7 relative per op, growing to ~1e-6 over a few layers. 1e-4 leaves ample room for that
// while any real mistake (a wrong RoPE pairing or theta, a missing norm weight, a wrong kv head, an
// off-by-one in the causal mask) moves logits by 1e-2 or more relative.
inline constexpr double kLogitTolerance = 1e-4;

inline double relative_max_error(std::span<const float> actual, std::span<const float> expected) {
  double max_diff = 0, max_ref = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    const double a = actual[i], b = expected[i];
    max_diff = std::max(max_diff, std::isfinite(a) ? std::abs(a - b) : INFINITY);
    max_ref = std::max(max_ref, std::abs(b));
  }
  return max_ref > 0 ? max_diff / max_ref : max_diff;
}

// The greedy choice: the highest logit, the lowest id on ties.
inline int32_t argmax(std::span<const float> logits) {
  int32_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i)
    if (logits[i] > logits[size_t(best)]) best = int32_t(i);
  return best;
}

// One fixture case as the engine behaviour tests use it: its model and its longest recorded sequence
// (70 random ids), the workload of those tests.
struct EngineWorkload {
  std::shared_ptr<const Model> model;
  std::vector<int32_t> ids;

  int vocab() const { return model->config.vocab_size; }
  // Position `pos`'s logits in `all`, laid out [positions, vocab] as prefill_all_logits writes them.
  std::span<const float> row(const std::vector<float>& all, size_t pos) const {
    return std::span<const float>(all).subspan(pos * size_t(vocab()), size_t(vocab()));
  }
};

// `dir`: a case folder (config.json, weights, expected.json).
inline EngineWorkload load_engine_workload(const std::filesystem::path& dir) {
  EngineWorkload w;
  w.model = load_model(dir.string());
  const nlohmann::json expected = read_json(dir / "expected.json");
  for (const nlohmann::json& seq : expected.at("sequences")) {
    auto ids = seq.at("ids").get<std::vector<int32_t>>();
    if (ids.size() > w.ids.size()) w.ids = std::move(ids);
  }
  return w;
}

// The logits of every position of `ids`, from one prefill_all_logits call on `engine`.
inline std::vector<float> prefill_logits(Engine& engine, std::span<const int32_t> ids) {
  std::vector<float> out;
  engine.prefill_all_logits(ids, out);
  return out;
}

// The fixture of one engine's own tests (EngineT: CpuEngine, CpuHybridEngine) on one case. A test
// suite derives from it and loads its case in SetUpTestSuite: w_ = load_engine_workload(dir).
template <class EngineT>
class EngineWorkloadTest : public ::testing::Test {
 protected:
  static void TearDownTestSuite() { w_ = {}; }

  std::span<const float> row(const std::vector<float>& all, size_t pos) const { return w_.row(all, pos); }
  EngineT engine(int threads = 2, int context = 256) const {
    return EngineT(w_.model, {.context = context, .threads = threads});
  }
  // Logits of every position of ids_, from one prefill.
  std::vector<float> whole_prefill() const {
    EngineT e = engine();
    return prefill_logits(e, w_.ids);
  }

  static inline EngineWorkload w_;
  const std::shared_ptr<const Model>& model_ = w_.model;
  const std::vector<int32_t>& ids_ = w_.ids;
};

// The logits of decoding ids[from..] one token at a time, concatenated.
inline std::vector<float> decode_rest(Engine& e, std::span<const int32_t> ids, size_t from) {
  std::vector<float> out;
  for (size_t pos = from; pos < ids.size(); ++pos) {
    auto l = e.decode(ids[pos]);
    out.insert(out.end(), l.begin(), l.end());
  }
  return out;
}

// A parameterized suite's name for a fixture case: "hf/gqa2_bf16" -> "hf_gqa2_bf16" (test names take
// letters, digits and '_').
inline std::string fixture_case_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string name = info.param;
  std::replace_if(name.begin(), name.end(), [](char c) { return !std::isalnum(static_cast<unsigned char>(c)); }, '_');
  return name;
}

}  // namespace megaqwen::test
