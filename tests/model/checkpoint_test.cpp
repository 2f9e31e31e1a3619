// Checkpoint: one model.safetensors or index + shards, mapped in place; resolve_model_dir: folders and
// Hugging Face ids in a (fake) hub cache.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "megaqwen/model/checkpoint.h"
#include "model/model_test_util.h"
#include "scoped_env.h"

namespace megaqwen {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::vector<float> values(size_t n, float base) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = base + float(i);
  return v;
}

std::span<const uint8_t> bytes(const std::vector<float>& v) {
  return {reinterpret_cast<const uint8_t*>(v.data()), v.size() * sizeof(float)};
}

// Writes `names` as F32 [2, 3] tensors (values 10*k + i) into dir/file.
void write_shard(const fs::path& dir, const std::string& file, const std::vector<std::string>& names,
                 std::vector<std::vector<float>>& keep) {
  std::vector<std::pair<TensorSpec, std::span<const uint8_t>>> tensors;
  for (const auto& name : names) {
    keep.push_back(values(6, float(10 * keep.size())));
    tensors.push_back({TensorSpec{name, DType::F32, {2, 3}}, bytes(keep.back())});
  }
  write_safetensors(dir / file, tensors);
}

void write_index(const fs::path& dir, const json& weight_map) {
  test::write_text(dir / "model.safetensors.index.json", json{{"metadata", {{"total_size", 0}}}, {"weight_map", weight_map}}.dump());
}

float first_value(const TensorView& t) {
  float f;
  std::memcpy(&f, t.data, 4);
  return f;
}

TEST(Checkpoint, SingleFile) {
  const auto dir = test::scratch_dir();
  std::vector<std::vector<float>> keep;
  write_shard(dir, "model.safetensors", {"a", "b"}, keep);
  const auto ckpt = Checkpoint::open(dir);
  ASSERT_EQ(ckpt->tensors().size(), 2u);
  ASSERT_EQ(ckpt->files().size(), 1u);
  EXPECT_EQ(ckpt->files()[0], (dir / "model.safetensors").string());
  EXPECT_EQ(ckpt->total_bytes(), 48u);
  const TensorView& b = ckpt->get("b");
  EXPECT_EQ(b.name(), "b");
  EXPECT_EQ(b.dtype(), DType::F32);
  EXPECT_EQ(b.shape(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(b.byte_size(), 24u);
  EXPECT_EQ(*b.file, ckpt->files()[0]);
  EXPECT_EQ(std::memcmp(b.data, keep[1].data(), 24), 0);
  EXPECT_EQ(ckpt->find("c"), nullptr);
  EXPECT_ERROR_HAS(ckpt->get("c"), "missing tensor 'c' in the checkpoint");
}

TEST(Checkpoint, Shards) {
  const auto dir = test::scratch_dir();
  std::vector<std::vector<float>> keep;
  write_shard(dir, "model-00001-of-00002.safetensors", {"a", "b"}, keep);
  write_shard(dir, "model-00002-of-00002.safetensors", {"c"}, keep);
  write_index(dir, {{"a", "model-00001-of-00002.safetensors"},
                    {"b", "model-00001-of-00002.safetensors"},
                    {"c", "model-00002-of-00002.safetensors"}});
  // A stray single file next to an index is ignored: the index wins.
  test::write_text(dir / "model.safetensors", "garbage");
  const auto ckpt = Checkpoint::open(dir);
  ASSERT_EQ(ckpt->files().size(), 2u);
  ASSERT_EQ(ckpt->tensors().size(), 3u);
  EXPECT_EQ(*ckpt->get("c").file, (dir / "model-00002-of-00002.safetensors").string());
  EXPECT_EQ(*ckpt->get("a").file, (dir / "model-00001-of-00002.safetensors").string());
  EXPECT_EQ(first_value(ckpt->get("a")), 0.0f);
  EXPECT_EQ(first_value(ckpt->get("b")), 10.0f);
  EXPECT_EQ(first_value(ckpt->get("c")), 20.0f);
  EXPECT_EQ(ckpt->total_bytes(), 72u);
}

TEST(Checkpoint, IndexListsTensorNotInItsShard) {
  const auto dir = test::scratch_dir();
  std::vector<std::vector<float>> keep;
  write_shard(dir, "s1.safetensors", {"a"}, keep);
  write_shard(dir, "s2.safetensors", {"c"}, keep);
  write_index(dir, {{"a", "s1.safetensors"}, {"c", "s1.safetensors"}});
  EXPECT_ERROR_HAS(Checkpoint::open(dir), (dir / "s1.safetensors").string().c_str(),
                   "the index lists tensor 'c' in this file, but it is not there");
}

TEST(Checkpoint, TensorInTwoShards) {
  const auto dir = test::scratch_dir();
  std::vector<std::vector<float>> keep;
  write_shard(dir, "s1.safetensors", {"a", "dup"}, keep);
  write_shard(dir, "s2.safetensors", {"dup"}, keep);
  write_index(dir, {{"a", "s1.safetensors"}, {"dup", "s2.safetensors"}});
  EXPECT_ERROR_HAS(Checkpoint::open(dir), "tensor 'dup' is stored in more than one shard");
}

TEST(Checkpoint, IndexNamesBadFiles) {
  const auto dir = test::scratch_dir();
  std::vector<std::vector<float>> keep;
  write_shard(dir, "s1.safetensors", {"a"}, keep);
  for (const char* bad : {"../x", "/etc/passwd", "sub/s1.safetensors", "..", ".", ""}) {
    SCOPED_TRACE(bad);
    write_index(dir, {{"a", bad}});
    EXPECT_ERROR_HAS(Checkpoint::open(dir), "model.safetensors.index.json: weight_map names '",
                     "which is not a file in the model folder");
  }
  write_index(dir, {{"a", "s1.safetensors"}, {"b", "missing.safetensors"}});
  EXPECT_ERROR_HAS(Checkpoint::open(dir), "cannot open", "missing.safetensors", "No such file");
  write_index(dir, {{"a", 3}});
  EXPECT_ERROR_HAS(Checkpoint::open(dir), "weight_map entry for 'a' is not a file name");
  write_index(dir, json::object());
  EXPECT_ERROR_HAS(Checkpoint::open(dir), "model.safetensors.index.json: weight_map is empty");
  test::write_text(dir / "model.safetensors.index.json", "{\"weight_map\": [1]}");
  EXPECT_ERROR_HAS(Checkpoint::open(dir), "model.safetensors.index.json: missing 'weight_map' object");
  test::write_text(dir / "model.safetensors.index.json", "{\"weight_map\": ");
  EXPECT_ERROR_HAS(Checkpoint::open(dir), "model.safetensors.index.json: not valid JSON");
  test::write_text(dir / "model.safetensors.index.json", "[]");
  EXPECT_ERROR_HAS(Checkpoint::open(dir), "missing 'weight_map' object");
}

TEST(Checkpoint, NoWeights) {
  const auto dir = test::scratch_dir();
  EXPECT_ERROR_HAS(Checkpoint::open(dir), dir.string().c_str(), "no model.safetensors or model.safetensors.index.json");
  fs::create_directory(dir / "model.safetensors");
  EXPECT_ERROR_HAS(Checkpoint::open(dir), "model.safetensors is not a regular file");
}

TEST(Checkpoint, BadFileNamedInMessage) {
  const auto dir = test::scratch_dir();
  test::write_text(dir / "model.safetensors", "");
  EXPECT_ERROR_HAS(Checkpoint::open(dir), (dir / "model.safetensors").string().c_str(), "truncated safetensors file (0 bytes");
  std::vector<std::vector<float>> keep;
  write_shard(dir, "model.safetensors", {"a", "b"}, keep);
  auto full = test::read_bytes(dir / "model.safetensors");
  full.resize(full.size() - 1);  // cut the last byte of "b"
  test::write_bytes(dir / "model.safetensors", full);
  EXPECT_ERROR_HAS(Checkpoint::open(dir), "tensor 'b': data_offsets [24, 48] run past the data section (47 bytes)");
}

using test::ScopedEnv;

TEST(ResolveModelDir, FoldersAndErrors) {
  const auto dir = test::scratch_dir();
  EXPECT_EQ(resolve_model_dir(dir.string()), dir);
  EXPECT_ERROR_HAS(resolve_model_dir(""), "no model given");
  EXPECT_ERROR_HAS(resolve_model_dir((dir / "nope").string()), "model folder '", "nope' does not exist");
  EXPECT_ERROR_HAS(resolve_model_dir("./nope"), "model folder './nope' does not exist");
  test::write_text(dir / "file", "x");
  EXPECT_ERROR_HAS(resolve_model_dir((dir / "file").string()), "file is not a folder");
}

TEST(ResolveModelDir, HubCache) {
  const auto cache = test::scratch_dir();
  ScopedEnv hub("HF_HUB_CACHE", cache.string());
  ScopedEnv old_hub("HUGGINGFACE_HUB_CACHE", std::nullopt);
  ScopedEnv home("HF_HOME", std::nullopt);
  ScopedEnv xdg("XDG_CACHE_HOME", std::nullopt);
  ScopedEnv user_home("HOME", (cache / "home").string());

  const fs::path repo = cache / "models--Org--Name";
  fs::create_directories(repo / "snapshots" / "abc123");
  fs::create_directories(repo / "snapshots" / "def456");
  fs::create_directories(repo / "refs");
  test::write_text(repo / "refs" / "main", "abc123\n");
  EXPECT_EQ(resolve_model_dir("Org/Name"), repo / "snapshots" / "abc123");
  test::write_text(repo / "refs" / "main", "def456");
  EXPECT_EQ(resolve_model_dir("Org/Name"), repo / "snapshots" / "def456");
  // refs/main naming a missing snapshot, or no refs at all: the one snapshot there is.
  fs::remove_all(repo / "snapshots" / "def456");
  EXPECT_EQ(resolve_model_dir("Org/Name"), repo / "snapshots" / "abc123");
  fs::remove_all(repo / "refs");
  EXPECT_EQ(resolve_model_dir("Org/Name"), repo / "snapshots" / "abc123");

  EXPECT_ERROR_HAS(resolve_model_dir("Org/Other"),
                   "model 'Org/Other' is not a folder and was not found in the Hugging Face cache (looked in ",
                   (cache / "models--Org--Other").string().c_str(), (cache / "home" / ".cache" / "huggingface" / "hub").string().c_str());
  // Not an id: more than one slash, a leading dot, a trailing slash.
  EXPECT_ERROR_HAS(resolve_model_dir("a/b/c"), "model folder 'a/b/c' does not exist");
  EXPECT_ERROR_HAS(resolve_model_dir("../Org/Name"), "does not exist");
  EXPECT_ERROR_HAS(resolve_model_dir("Org/"), "model folder 'Org/' does not exist");
  // A repo folder without snapshots is skipped.
  fs::create_directories(cache / "models--Org--Empty");
  EXPECT_ERROR_HAS(resolve_model_dir("Org/Empty"), "was not found in the Hugging Face cache");
}

}  // namespace
}  // namespace megaqwen
