// State files (src/megaqwen/engine/state_file.h) on every CPU engine: a sequence written to a file
// and read back by a fresh engine decodes bit-identically to one that never left, truncates like it;
// and every way a file can be wrong for the engine reading it (another engine's layout, another
// model, a longer sequence than the context, a damaged or doctored file) is refused by name.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "engine/hf_fixture.h"
#include "megaqwen/engine/cpu_engine.h"
#include "megaqwen/engine/cpu_qwen35_engine.h"
#include "megaqwen/engine/create_engine.h"
#include "megaqwen/engine/state_file.h"
#include "megaqwen/model/model_fingerprint.h"
#include "megaqwen/model/safetensors.h"
#include "megaqwen/util/error.h"
#include "megaqwen/util/mapped_file.h"

namespace megaqwen {
namespace {

namespace fs = std::filesystem;
using test::kLogitTolerance;
using test::decode_rest;
using test::relative_max_error;

bool bit_identical(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The tensors and metadata of a safetensors file, to doctor and write back.
struct FileContents {
  std::map<std::string, std::string> metadata;
  std::vector<std::pair<TensorSpec, std::vector<uint8_t>>> tensors;

  static FileContents read(const fs::path& path) {
    MappedFile file(path.string());
    const SafetensorsHeader h = parse_safetensors_header(file.bytes(), path.string());
    FileContents c{h.metadata, {}};
    for (const TensorInfo& t : h.tensors) {
      auto bytes = file.bytes().subspan(size_t(h.data_offset + t.begin), size_t(t.end - t.begin));
      c.tensors.emplace_back(TensorSpec{t.name, t.dtype, t.shape}, std::vector<uint8_t>(bytes.begin(), bytes.end()));
    }
    return c;
  }
  void write(const fs::path& path) const {
    std::vector<std::pair<TensorSpec, std::span<const uint8_t>>> views;
    for (const auto& [spec, bytes] : tensors) views.emplace_back(spec, bytes);
    write_safetensors(path, views, metadata);
  }
  std::pair<TensorSpec, std::vector<uint8_t>>& tensor(const std::string& name) {
    for (auto& t : tensors)
      if (t.first.name == name) return t;
    throw std::runtime_error("no tensor " + name);
  }
};

class StateFileTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    w_ = test::load_engine_workload(test::fixtures_dir() / GetParam());
    ASSERT_GE(ids_.size(), 64u);
    dir_ = fs::path(::testing::TempDir()) / ("megaqwen_state_file_" + std::to_string(::getpid()) + "_" +
                                             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::unique_ptr<Engine> engine(int context = 256, std::shared_ptr<const Model> model = nullptr) const {
    return create_engine(model ? model : w_.model, {.device = "cpu", .context = context, .threads = 2, .quiet = true});
  }
  bool hybrid() const { return w_.model->config.is_hybrid(); }

  // 40 tokens prefilled in two calls (20 + 20: the hybrid keeps snapshots at 20 and 40), written to
  // a file; returns its path.
  fs::path write_forty(const std::string& name = "forty.state") {
    auto e = engine();
    e->prefill(std::span(ids_).first(20));
    e->prefill(std::span(ids_).subspan(20, 20));
    const fs::path path = dir_ / name;
    write_state_file(path, *w_.model, *e, SavedSequence{std::vector<int32_t>(ids_.begin(), ids_.begin() + 40),
                                                        e->save_state()});
    return path;
  }

  // Expects loading `path` into a fresh engine to fail naming `words`.
  void expect_refused(const fs::path& path, const std::string& words, int context = 256) {
    auto e = engine(context);
    try {
      StateFile::open(path).load(*w_.model, *e);
      ADD_FAILURE() << "loaded a file that should be refused (" << words << ")";
    } catch (const Error& err) {
      EXPECT_NE(std::string(err.what()).find(words), std::string::npos) << err.what();
    }
  }
  // Writes a doctored copy of the forty-token file and expects it refused naming `words`.
  void expect_doctored_refused(const std::function<void(FileContents&)>& doctor, const std::string& words) {
    FileContents c = FileContents::read(write_forty());
    doctor(c);
    const fs::path path = dir_ / "doctored.state";
    c.write(path);
    expect_refused(path, words);
  }

  test::EngineWorkload w_;
  const std::vector<int32_t>& ids_ = w_.ids;
  fs::path dir_;
};

// Written, then read by a fresh engine: the same tokens, and decoding goes on bit-identically to an
// engine that never left the sequence.
TEST_P(StateFileTest, SequenceReadBackDecodesAsIfNeverLeft) {
  auto straight = engine();
  straight->prefill(std::span(ids_).first(20));
  straight->prefill(std::span(ids_).subspan(20, 20));
  const std::vector<float> expected = decode_rest(*straight, ids_, 40);

  const StateFile file = StateFile::open(write_forty());
  EXPECT_EQ(file.tokens(), std::vector<int32_t>(ids_.begin(), ids_.begin() + 40));
  EXPECT_EQ(file.model_name(), w_.model->dir.filename().string());
  auto e = engine();
  e->prefill(std::span(ids_).subspan(5, 9));  // something else in the cache first
  const SavedSequence saved = file.load(*w_.model, *e);
  EXPECT_EQ(saved.tokens, file.tokens());
  e->restore_state(*saved.state);
  EXPECT_EQ(e->position(), 40);
  EXPECT_TRUE(bit_identical(decode_rest(*e, ids_, 40), expected));

  // The same weights loaded again are another Model object but the same model: accepted.
  const test::EngineWorkload twin = test::load_engine_workload(test::fixtures_dir() / GetParam());
  auto twin_engine = engine(256, twin.model);
  twin_engine->restore_state(*file.load(*twin.model, *twin_engine).state);
  EXPECT_TRUE(bit_identical(decode_rest(*twin_engine, ids_, 40), expected));
}

// A sequence read from a file truncates like the original: onto the end of its first prefill call
// (the hybrid's snapshot there came with the file: nothing is replayed) and between (replayed).
TEST_P(StateFileTest, SequenceReadBackTruncatesLikeTheOriginal) {
  const StateFile file = StateFile::open(write_forty());
  for (int cut : {20, 13}) {
    auto straight = engine();
    straight->prefill(std::span(ids_).first(size_t(cut)));
    const std::vector<float> expected = decode_rest(*straight, std::span(ids_).first(60), size_t(cut));

    auto e = engine();
    e->restore_state(*file.load(*w_.model, *e).state);
    e->truncate(cut);
    if (auto* h = dynamic_cast<CpuHybridEngine*>(e.get())) {
      EXPECT_EQ(h->replayed_tokens(), cut == 20 ? 0 : 13);
    }
    const std::vector<float> actual = decode_rest(*e, std::span(ids_).first(60), size_t(cut));
    EXPECT_LE(relative_max_error(actual, expected), kLogitTolerance) << "cut at " << cut;
  }
}

TEST_P(StateFileTest, EmptySequenceRoundTrips) {
  auto e = engine();
  const fs::path path = dir_ / "empty.state";
  write_state_file(path, *w_.model, *e, SavedSequence{{}, e->save_state()});
  const StateFile file = StateFile::open(path);
  EXPECT_TRUE(file.tokens().empty());
  e->prefill(std::span(ids_).first(4));
  e->restore_state(*file.load(*w_.model, *e).state);
  EXPECT_EQ(e->position(), 0);
}

// Writing replaces an existing file whole; a write that cannot happen fails naming the file and
// leaves no temporary file behind.
TEST_P(StateFileTest, WritesReplaceAtomicallyAndFailuresLeaveNothing) {
  const fs::path path = write_forty("same.state");
  auto e = engine();
  e->prefill(std::span(ids_).first(7));
  write_state_file(path, *w_.model, *e, SavedSequence{std::vector<int32_t>(ids_.begin(), ids_.begin() + 7),
                                                      e->save_state()});
  EXPECT_EQ(StateFile::open(path).tokens().size(), 7u);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1);

  const fs::path nowhere = dir_ / "no-such-folder" / "x.state";
  try {
    write_state_file(nowhere, *w_.model, *e, SavedSequence{std::vector<int32_t>(ids_.begin(), ids_.begin() + 7),
                                                           e->save_state()});
    ADD_FAILURE() << "wrote into a missing folder";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find(nowhere.string()), std::string::npos) << err.what();
  }
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1);
  // A sequence whose tokens do not match its cache copy is not written.
  EXPECT_THROW(write_state_file(dir_ / "bad.state", *w_.model, *e, SavedSequence{{1, 2}, e->save_state()}), Error);
}

// Files another engine, another model or a shorter context cannot take.
TEST_P(StateFileTest, FilesForAnotherEngineModelOrContextAreRefused) {
  const fs::path path = write_forty();
  expect_refused(path, "holds 40 tokens but the context holds 32", 32);

  // Another model of the same architecture (other shapes and weights): its fingerprint differs.
  const std::string other_case = hybrid() ? "hf_qwen35/lf_wrapper_bf16" : "hf/gqa4_untied_bf16";
  const test::EngineWorkload other = test::load_engine_workload(test::fixtures_dir() / other_case);
  auto other_engine = engine(256, other.model);
  EXPECT_EQ(other_engine->state_format(), engine()->state_format());
  try {
    StateFile::open(path).load(*other.model, *other_engine);
    ADD_FAILURE() << "another model's engine loaded the file";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("made with another model"), std::string::npos) << err.what();
  }

  // The same weights with another RoPE (a --rope-scaling override): another model too.
  const auto stretched = load_model((test::fixtures_dir() / GetParam()).string(),
                                    R"({"rope_type": "linear", "factor": 2.0})");
  EXPECT_NE(model_fingerprint(*stretched), model_fingerprint(*w_.model));
  auto stretched_engine = engine(256, stretched);
  EXPECT_THROW(StateFile::open(path).load(*stretched, *stretched_engine), Error);

  // An engine of another layout: the CPU engine keeping its cache rounded to bf16.
  std::unique_ptr<Engine> rounded;
  if (hybrid())
    rounded = std::make_unique<CpuHybridEngine>(w_.model, CpuEngineOptions{.context = 256, .threads = 2, .bf16_kv_cache = true});
  else
    rounded = std::make_unique<CpuEngine>(w_.model, CpuEngineOptions{.context = 256, .threads = 2, .bf16_kv_cache = true});
  try {
    StateFile::open(path).load(*w_.model, *rounded);
    ADD_FAILURE() << "an engine of another state format loaded the file";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("another kind of engine"), std::string::npos) << err.what();
  }
}

// Damaged and doctored files: each refused with a message naming what is wrong.
TEST_P(StateFileTest, MalformedFilesAreRefusedByName) {
  const fs::path good = write_forty();
  // Not safetensors at all; cut short.
  const fs::path junk = dir_ / "junk.state";
  std::ofstream(junk) << "this is not a state file";
  EXPECT_THROW(StateFile::open(junk), Error);
  {
    const auto size = fs::file_size(good);
    fs::copy_file(good, dir_ / "short.state");
    fs::resize_file(dir_ / "short.state", size - 100);
    EXPECT_THROW(StateFile::open(dir_ / "short.state"), Error);
  }
  EXPECT_THROW(StateFile::open(dir_ / "missing.state"), Error);

  expect_doctored_refused([](FileContents& c) { c.metadata.erase("format"); }, "not a megaqwen state file");
  expect_doctored_refused([](FileContents& c) { c.metadata["format"] = "pt"; }, "not a megaqwen state file");
  expect_doctored_refused([](FileContents& c) { c.metadata["version"] = "2"; }, "version 2");
  expect_doctored_refused([](FileContents& c) { c.metadata.erase("model_fingerprint"); }, "model_fingerprint");
  expect_doctored_refused([](FileContents& c) { c.metadata["model_fingerprint"] = "0123456789abcdef"; },
                          "made with another model");
  expect_doctored_refused([](FileContents& c) { c.metadata["state_format"] = "cuda-qwen3-bf16"; },
                          "another kind of engine");
  // The token ids: missing, of another type, outside the vocabulary, more than the tensors hold.
  expect_doctored_refused([](FileContents& c) { std::erase_if(c.tensors, [](auto& t) { return t.first.name == "tokens"; }); },
                          "tokens is missing");
  expect_doctored_refused([](FileContents& c) { c.tensor("tokens").first.dtype = DType::F32; }, "tokens is F32");
  const int vocab = w_.model->config.vocab_size;
  expect_doctored_refused([&](FileContents& c) { std::memcpy(c.tensor("tokens").second.data() + 12, &vocab, 4); },
                          "token 3 is id " + std::to_string(vocab));
  expect_doctored_refused([](FileContents& c) {
    auto& t = c.tensor("tokens");
    t.first.shape = {41};
    t.second.resize(41 * 4, 0);
  }, "the tensor k is F32");
  // The cache tensors: misshapen, of another type, missing, one too many.
  expect_doctored_refused([](FileContents& c) {
    auto& k = c.tensor("k");
    k.first.shape.back() /= 2;
    k.second.resize(k.second.size() / 2);
  }, "the tensor k is F32");
  expect_doctored_refused([](FileContents& c) {
    auto& v = c.tensor("v");
    v.first.dtype = DType::BF16;
    v.second.resize(v.second.size() / 2);
  }, "the tensor v is BF16");
  expect_doctored_refused([](FileContents& c) { std::erase_if(c.tensors, [](auto& t) { return t.first.name == "v"; }); },
                          "the tensor v is missing");
  expect_doctored_refused([](FileContents& c) { c.tensors.emplace_back(TensorSpec{"extra", DType::U8, {1}}, std::vector<uint8_t>{7}); },
                          "the tensor extra is not part of this engine's state");
  // Values no cache holds.
  expect_doctored_refused([](FileContents& c) {
    const float inf = INFINITY;
    std::memcpy(c.tensor("v").second.data() + 4 * 5, &inf, 4);
  }, "the tensor v holds a non-finite value at element 5");
  expect_doctored_refused([](FileContents& c) {
    const float nan = NAN;
    std::memcpy(c.tensor("k").second.data(), &nan, 4);
  }, "the tensor k holds a non-finite value at element 0");
}

// The hybrid's DeltaNet part: states and snapshots missing, out of order, beyond the sequence.
TEST_P(StateFileTest, MalformedRecurrentStatesAreRefusedByName) {
  if (!hybrid()) GTEST_SKIP() << "a Qwen3 cache has no recurrent states";
  expect_doctored_refused([](FileContents& c) { std::erase_if(c.tensors, [](auto& t) { return t.first.name == "recurrent"; }); },
                          "the tensor recurrent is missing");
  expect_doctored_refused([](FileContents& c) {
    auto& p = c.tensor("snapshot_positions").second;  // {19, 20, 39, 40} -> {20, 19, 39, 40}
    std::swap_ranges(p.begin(), p.begin() + 4, p.begin() + 4);
  }, "must ascend");
  expect_doctored_refused([](FileContents& c) {
    const int32_t beyond = 41;
    std::memcpy(c.tensor("snapshot_positions").second.data() + 4, &beyond, 4);
  }, "outside the sequence of 40 tokens");
  expect_doctored_refused([](FileContents& c) {
    std::erase_if(c.tensors, [](auto& t) { return t.first.name == "snapshot.1.recurrent"; });
  }, "snapshot_positions");
  expect_doctored_refused([](FileContents& c) {
    std::erase_if(c.tensors, [](auto& t) { return t.first.name == "snapshot.1.conv"; });
  }, "the tensor snapshot.1.conv is missing");
}

INSTANTIATE_TEST_SUITE_P(Engines, StateFileTest,
                         ::testing::Values("hf/gqa2_bf16", "hf_qwen35/llf_text_untied_bf16", "hf_qwen35/fllf_text_bf16"),
                         test::fixture_case_name);

}  // namespace
}  // namespace megaqwen
