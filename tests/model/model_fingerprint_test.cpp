// model_fingerprint (src/megaqwen/model/model_fingerprint.h): the same model gives the same digest
// however often it is loaded; other weights (another seed, one changed byte inside a sampled window
// of a large tensor, any byte of a small one), another config value or another RoPE give another.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "megaqwen/model/model.h"
#include "megaqwen/model/model_fingerprint.h"
#include "megaqwen/model/safetensors.h"
#include "megaqwen/model/synth.h"
#include "megaqwen/util/mapped_file.h"
#include "model/model_test_util.h"

namespace megaqwen {
namespace {

namespace fs = std::filesystem;

fs::path write_tiny(const std::string& suffix, uint64_t seed) {
  const fs::path dir = test::scratch_dir(suffix);
  write_synthetic_model({.preset = "tiny", .seed = seed, .dtype = DType::BF16, .out_dir = dir, .tokenizer_dir = {}, .threads = 2});
  return dir;
}

std::string fingerprint_of(const fs::path& dir, const std::string& rope_scaling = "") {
  return model_fingerprint(*load_model(dir.string(), rope_scaling));
}

// Adds one to the byte `offset` bytes into tensor `name` of the folder's model.safetensors.
void bump_byte(const fs::path& dir, const std::string& name, uint64_t offset) {
  const fs::path file = dir / "model.safetensors";
  uint64_t at = 0;
  {
    MappedFile mapped(file.string());
    const SafetensorsHeader h = parse_safetensors_header(mapped.bytes(), file.string());
    for (const TensorInfo& t : h.tensors)
      if (t.name == name) {
        ASSERT_LT(offset, t.end - t.begin);
        at = h.data_offset + t.begin + offset;
      }
    ASSERT_GT(at, 0u) << name;
  }
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(std::streamoff(at));
  char c = 0;
  f.get(c);
  f.seekp(std::streamoff(at));
  f.put(char(c + 1));
}

TEST(ModelFingerprint, SameModelSameDigestOtherWeightsOrConfigAnother) {
  const fs::path a = write_tiny("_a", 1);
  const std::string base = fingerprint_of(a);
  EXPECT_EQ(base.size(), 16u);
  EXPECT_EQ(base.find_first_not_of("0123456789abcdef"), std::string::npos) << base;
  EXPECT_EQ(fingerprint_of(a), base);  // loaded again
  EXPECT_NE(fingerprint_of(write_tiny("_b", 2)), base);

  // One byte at the start of the embedding (inside the first sampled window of a large tensor).
  const fs::path c = test::scratch_dir("_c");
  fs::copy(a, c, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  bump_byte(c, "model.embed_tokens.weight", 0);
  EXPECT_NE(fingerprint_of(c), base);
  // One byte in the middle of a small tensor (hashed whole).
  const fs::path d = test::scratch_dir("_d");
  fs::copy(a, d, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  bump_byte(d, "model.norm.weight", 5);
  EXPECT_NE(fingerprint_of(d), base);

  // Another RoPE over the same weights.
  EXPECT_NE(fingerprint_of(a, R"({"rope_type": "linear", "factor": 2.0})"), base);
  // Another config value the forward pass reads.
  const fs::path e = test::scratch_dir("_e");
  fs::copy(a, e, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  std::string config;
  {
    std::ifstream in(e / "config.json");
    config.assign(std::istreambuf_iterator<char>(in), {});
  }
  const size_t eps = config.find("\"rms_norm_eps\"");
  ASSERT_NE(eps, std::string::npos);
  const size_t value = config.find_first_of("0123456789", eps);
  const size_t end = config.find_first_of(",}\n", value);
  config.replace(value, end - value, "0.001");
  std::ofstream(e / "config.json") << config;
  EXPECT_NE(fingerprint_of(e), base);
}

}  // namespace
}  // namespace megaqwen
