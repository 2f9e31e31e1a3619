// Synthetic models and weight binding: the tiny preset loads, runs on the CPU engine with realistic
// logits, is deterministic in its seed; bind_qwen3_weights refuses missing, misshapen, wrongly typed
// and misaligned tensors, naming them.
#include <gtest/gtest.h>
#include <unistd.h>

#include <bit>
#include <cmath>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "megaqwen/engine/cpu_engine.h"
#include "megaqwen/engine/cpu_qwen35_engine.h"
#include "megaqwen/engine/create_engine.h"
#include "megaqwen/model/model.h"
#include "megaqwen/model/synth.h"
#include "megaqwen/util/bf16.h"
#include "megaqwen/util/error.h"
#include "model/model_test_util.h"

namespace megaqwen {
namespace {

namespace fs = std::filesystem;

fs::path write_tiny(const std::string& suffix, uint64_t seed, DType dtype) {
  const fs::path dir = test::scratch_dir(suffix);
  write_synthetic_model({.preset = "tiny", .seed = seed, .dtype = dtype, .out_dir = dir, .tokenizer_dir = {}, .threads = 2});
  return dir;
}

float element(const TensorView& t, int64_t i) {
  switch (t.dtype()) {
    case DType::BF16: return bf16_to_f32(reinterpret_cast<const uint16_t*>(t.data)[i]);
    case DType::F16: return f16_to_f32(reinterpret_cast<const uint16_t*>(t.data)[i]);
    default: return reinterpret_cast<const float*>(t.data)[i];
  }
}

struct Stats {
  double mean = 0, std = 0;
  int64_t zeros = 0, non_finite = 0;
};
Stats stats(const TensorView& t) {
  Stats s;
  const int64_t n = t.info->element_count();
  double sum = 0, sum2 = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float v = element(t, i);
    if (!std::isfinite(v)) ++s.non_finite;
    if (v == 0.0f) ++s.zeros;
    sum += v, sum2 += double(v) * v;
  }
  s.mean = sum / double(n);
  s.std = std::sqrt(std::max(0.0, sum2 / double(n) - s.mean * s.mean));
  return s;
}

// Copies the model in `from` to a new folder, passing each tensor's spec through `edit` (nullopt drops
// the tensor; a changed spec gets zero bytes).
fs::path rewrite(const fs::path& from, const std::string& suffix,
                 const std::function<std::optional<TensorSpec>(const TensorSpec&)>& edit,
                 const std::vector<TensorSpec>& extra = {}) {
  const fs::path dir = test::scratch_dir(suffix);
  fs::copy_file(from / "config.json", dir / "config.json");
  const auto original = Checkpoint::open(from);
  std::vector<TensorSpec> specs;
  std::vector<const TensorView*> sources;
  for (const TensorInfo& t : parse_safetensors_header(test::read_bytes(from / "model.safetensors"), "x").tensors) {
    const TensorSpec spec{t.name, t.dtype, t.shape};
    if (auto out = edit(spec)) {
      const bool same = out->dtype == spec.dtype && out->shape == spec.shape;
      specs.push_back(*out);
      sources.push_back(same ? &original->get(t.name) : nullptr);
    }
  }
  for (const TensorSpec& spec : extra) {  // appended tensors, zero-filled
    specs.push_back(spec);
    sources.push_back(nullptr);
  }
  SafetensorsWriter writer(dir / "model.safetensors", specs);
  for (size_t i = 0; i < specs.size(); ++i) {
    if (sources[i]) {
      writer.write({sources[i]->data, sources[i]->byte_size()});
    } else {
      writer.write(std::vector<uint8_t>(specs[i].byte_size(), 0));
    }
  }
  writer.finish();
  return dir;
}

// F16 weights go through f32_to_f16 / f16_to_f32; the portable versions (used where the compiler has
// no _Float16, e.g. clang 14 in the fuzz build) must agree bit for bit.
TEST(F16Conversion, PortableMatchesCompiler) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float a = f16_to_f32(uint16_t(h)), b = f16_to_f32_soft(uint16_t(h));
    if (std::isnan(a)) {
      ASSERT_TRUE(std::isnan(b)) << h;
    } else {
      ASSERT_EQ(std::bit_cast<uint32_t>(a), std::bit_cast<uint32_t>(b)) << h;
    }
    if (!std::isnan(a)) {
      ASSERT_EQ(f32_to_f16_soft(a), h) << h;  // every half round-trips
    }
  }
  // A spread of all floats (a prime stride) and the rounding boundaries around the largest half.
  for (uint64_t u = 0; u < (uint64_t(1) << 32); u += 4099) {
    const float f = std::bit_cast<float>(uint32_t(u));
    if (std::isnan(f)) continue;
    ASSERT_EQ(f32_to_f16(f), f32_to_f16_soft(f)) << std::hex << u;
  }
  for (float f : {65504.0f, 65519.99f, 65520.0f, 1e10f, 0x1p-24f, 0x1p-25f, 0x1.8p-25f, 0x1p-26f, 6.1e-5f})
    for (float s : {1.0f, -1.0f}) ASSERT_EQ(f32_to_f16(s * f), f32_to_f16_soft(s * f)) << s * f;
  EXPECT_EQ(f32_to_f16_soft(65520.0f), 0x7c00);
  EXPECT_EQ(f32_to_f16_soft(0x1p-25f), 0x0000);    // a tie rounds to even (zero)
  EXPECT_EQ(f32_to_f16_soft(0x1.8p-25f), 0x0001);
  EXPECT_TRUE(std::isnan(f16_to_f32_soft(f32_to_f16_soft(std::nanf("")))));
}

class SynthTiny : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { dir_ = new fs::path(write_tiny("_suite_bf16", 7, DType::BF16)); }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
  }
  static fs::path* dir_;
};
fs::path* SynthTiny::dir_ = nullptr;

TEST_F(SynthTiny, WritesAFolderThatLoads) {
  EXPECT_TRUE(fs::exists(*dir_ / "config.json"));
  EXPECT_TRUE(fs::exists(*dir_ / "generation_config.json"));
  EXPECT_FALSE(fs::exists(*dir_ / "tokenizer.json"));  // no --tokenizer given
  const auto model = load_model(dir_->string());
  const ModelConfig& c = model->config;
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.num_layers, 2);
  EXPECT_EQ(c.num_heads, 4);
  EXPECT_EQ(c.num_kv_heads, 2);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.intermediate_size, 128);
  EXPECT_EQ(c.vocab_size, 151936);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.torch_dtype, "bfloat16");
  // embed + 2 x 11 per layer + final norm; the head is tied.
  EXPECT_EQ(model->checkpoint->tensors().size(), 1u + 2 * 11 + 1);
  EXPECT_EQ(model->checkpoint->find("lm_head.weight"), nullptr);
  EXPECT_EQ(model->weights.lm_head.data, model->weights.embed.data);
  EXPECT_EQ(model->weights.layers.size(), 2u);
  EXPECT_EQ(model->weights.layers[1].q.rows, 4 * 128);
  EXPECT_EQ(model->weights.layers[1].k.rows, 2 * 128);
  EXPECT_EQ(model->weights.layers[0].down.cols, 128);
  EXPECT_EQ(uint64_t(c.parameter_count()) * 2, model->checkpoint->total_bytes());
}

TEST_F(SynthTiny, WeightsAreFiniteNonZeroAndScaled) {
  const auto ckpt = Checkpoint::open(*dir_);
  for (const auto& [name, t] : ckpt->tensors()) {
    SCOPED_TRACE(name);
    EXPECT_EQ(t.dtype(), DType::BF16);
    const Stats s = stats(t);
    EXPECT_EQ(s.non_finite, 0);
    EXPECT_LT(double(s.zeros), 0.01 * double(t.info->element_count()) + 1);
    EXPECT_GT(s.std, 0.0);
  }
  // Norm weights near 1 (U[0.9, 1.1]: std 0.1/sqrt(3)); linear weights with std 1/sqrt(in);
  // the embedding with std 2.5/sqrt(H).
  const Stats norm = stats(ckpt->get("model.layers.0.input_layernorm.weight"));
  EXPECT_NEAR(norm.mean, 1.0, 0.03);
  EXPECT_NEAR(norm.std, 0.1 / std::sqrt(3.0), 0.02);
  const Stats q = stats(ckpt->get("model.layers.1.self_attn.q_proj.weight"));
  EXPECT_NEAR(q.mean, 0.0, 0.005);
  EXPECT_NEAR(q.std, 1.0 / 8.0, 0.005);
  const Stats down = stats(ckpt->get("model.layers.0.mlp.down_proj.weight"));
  EXPECT_NEAR(down.std, 1.0 / std::sqrt(128.0), 0.005);
  const Stats embed = stats(ckpt->get("model.embed_tokens.weight"));
  EXPECT_NEAR(embed.mean, 0.0, 0.002);
  EXPECT_NEAR(embed.std, 2.5 / 8.0, 0.003);
}

TEST_F(SynthTiny, RealisticLogitsOnTheCpuEngine) {
  const auto model = load_model(dir_->string());
  CpuEngine engine(model, {.context = 64, .threads = 2});
  const std::vector<int32_t> prompt = {151644, 872, 198, 9707, 11, 1879, 0, 151935};
  const auto first = engine.prefill(prompt);
  const std::vector<float> logits(first.begin(), first.end());
  ASSERT_EQ(logits.size(), size_t(model->config.vocab_size));
  EXPECT_EQ(engine.position(), 8);
  double sum = 0, sum2 = 0;
  float lo = logits[0], hi = logits[0];
  for (float v : logits) {
    ASSERT_TRUE(std::isfinite(v));
    sum += v, sum2 += double(v) * v;
    lo = std::min(lo, v), hi = std::max(hi, v);
  }
  const double mean = sum / double(logits.size());
  const double std = std::sqrt(sum2 / double(logits.size()) - mean * mean);
  EXPECT_GT(std, 0.5);
  EXPECT_LT(std, 20.0);
  EXPECT_LT(std::abs(mean), std);
  EXPECT_GT(hi - lo, 1.0f);
  // A decode step continues from there with different, still finite logits.
  const auto next = engine.decode(42);
  EXPECT_EQ(engine.position(), 9);
  int differ = 0;
  for (size_t i = 0; i < next.size(); ++i) {
    ASSERT_TRUE(std::isfinite(next[i]));
    differ += next[i] != logits[i];
  }
  EXPECT_GT(differ, int(next.size()) / 2);
  EXPECT_ERROR_HAS(engine.decode(151936), "token id 151936 is out of range (vocabulary size 151936)");
}

TEST_F(SynthTiny, SameSeedSameBytesOtherSeedOtherBytes) {
  const auto again = write_tiny("_again", 7, DType::BF16);
  const auto other = write_tiny("_other", 8, DType::BF16);
  const auto a = test::read_bytes(*dir_ / "model.safetensors");
  const auto b = test::read_bytes(again / "model.safetensors");
  const auto c = test::read_bytes(other / "model.safetensors");
  ASSERT_EQ(a.size(), b.size());
  EXPECT_TRUE(a == b);
  ASSERT_EQ(a.size(), c.size());  // same shapes; the seed is only in the metadata string, same length
  // Compare whole bf16 values (single bytes repeat: values of one scale share their exponent byte).
  const auto h = parse_safetensors_header(a, "a");
  size_t same = 0, total = 0;
  for (size_t i = h.data_offset; i + 1 < a.size(); i += 2, ++total) same += a[i] == c[i] && a[i + 1] == c[i + 1];
  EXPECT_LT(double(same), 0.01 * double(total));
  EXPECT_EQ(test::read_bytes(*dir_ / "config.json"), test::read_bytes(other / "config.json"));
  fs::remove_all(again);
  fs::remove_all(other);
}

TEST_F(SynthTiny, F16AndF32VariantsLoadAndAgree) {
  const auto model = load_model(dir_->string());
  const std::vector<int32_t> prompt = {1, 2, 3, 500, 150000};
  CpuEngine bf16_engine(model, {.context = 16, .threads = 2});
  const auto ref_span = bf16_engine.prefill(prompt);
  const std::vector<float> ref(ref_span.begin(), ref_span.end());
  for (DType dtype : {DType::F16, DType::F32}) {
    SCOPED_TRACE(dtype_name(dtype));
    const auto dir = write_tiny(std::string("_") + dtype_name(dtype), 7, dtype);
    const auto m = load_model(dir.string());
    EXPECT_EQ(m->weights.embed.dtype, dtype);
    EXPECT_EQ(m->weights.layers[0].q.dtype, dtype);
    EXPECT_EQ(m->config.torch_dtype, dtype == DType::F16 ? "float16" : "float32");
    CpuEngine engine(m, {.context = 16, .threads = 2});
    const auto logits = engine.prefill(prompt);
    // The same seeded values, only rounded differently: bf16 keeps each weight to 2^-9 relative, which
    // through the tiny model's two layers moves the logits by under 1% of the largest.
    double err = 0, norm = 0;
    for (size_t i = 0; i < logits.size(); ++i) {
      err = std::max(err, double(std::abs(logits[i] - ref[i])));
      norm = std::max(norm, double(std::abs(ref[i])));
    }
    EXPECT_LT(err, 0.02 * norm);  // measured 0.7% (f16) and 0.65% (f32) of the largest logit
    EXPECT_GT(err, 0.0);  // it really is a different file
    fs::remove_all(dir);
  }
  EXPECT_ERROR_HAS(write_tiny("_i8", 7, DType::I8), "synthetic weights can be BF16, F16 or F32, not I8");
  EXPECT_ERROR_HAS(write_synthetic_model({.preset = "huge", .out_dir = test::scratch_dir("_huge"), .tokenizer_dir = {}, .threads = 1}),
                   "unknown preset 'huge'; choose one of: tiny, qwen3-0.6b, qwen3-1.7b, qwen3-4b");
}

TEST_F(SynthTiny, MissingTensorNamed) {
  const auto dir = rewrite(*dir_, "_missing", [](const TensorSpec& s) -> std::optional<TensorSpec> {
    if (s.name == "model.layers.1.mlp.up_proj.weight") return std::nullopt;
    return s;
  });
  EXPECT_ERROR_HAS(load_model(dir.string()), "missing tensor 'model.layers.1.mlp.up_proj.weight' (expected shape [128, 64])");
  const auto no_norm = rewrite(*dir_, "_missing_norm", [](const TensorSpec& s) -> std::optional<TensorSpec> {
    if (s.name == "model.norm.weight") return std::nullopt;
    return s;
  });
  EXPECT_ERROR_HAS(load_model(no_norm.string()), "missing tensor 'model.norm.weight' (expected shape [64])");
}

TEST_F(SynthTiny, UntiedHeadNeedsLmHead) {
  const auto dir = rewrite(*dir_, "_untied", [](const TensorSpec& s) { return std::optional(s); });
  std::string config = std::string(reinterpret_cast<const char*>(test::read_bytes(dir / "config.json").data()),
                                   test::read_bytes(dir / "config.json").size());
  const auto at = config.find("\"tie_word_embeddings\": true");
  ASSERT_NE(at, std::string::npos);
  config.replace(at, std::string("\"tie_word_embeddings\": true").size(), "\"tie_word_embeddings\": false");
  test::write_text(dir / "config.json", config);
  EXPECT_ERROR_HAS(load_model(dir.string()), "missing tensor 'lm_head.weight' (expected shape [151936, 64])");
}

TEST_F(SynthTiny, WrongShapeNamed) {
  const auto dir = rewrite(*dir_, "_shape", [](const TensorSpec& s) {
    TensorSpec out = s;
    if (s.name == "model.layers.0.self_attn.k_proj.weight") out.shape = {64, 256};  // transposed
    return std::optional(out);
  });
  EXPECT_ERROR_HAS(load_model(dir.string()),
                   "tensor 'model.layers.0.self_attn.k_proj.weight' has shape [64, 256], expected [256, 64]");
  const auto flat = rewrite(*dir_, "_rank", [](const TensorSpec& s) {
    TensorSpec out = s;
    if (s.name == "model.layers.1.self_attn.q_norm.weight") out.shape = {1, 128};
    return std::optional(out);
  });
  EXPECT_ERROR_HAS(load_model(flat.string()), "tensor 'model.layers.1.self_attn.q_norm.weight' has shape [1, 128], expected [128]");
}

TEST_F(SynthTiny, UnsupportedDTypeNamed) {
  const auto dir = rewrite(*dir_, "_i32", [](const TensorSpec& s) {
    TensorSpec out = s;
    if (s.name == "model.layers.1.self_attn.k_norm.weight") out.dtype = DType::I32;
    return std::optional(out);
  });
  EXPECT_ERROR_HAS(load_model(dir.string()),
                   "tensor 'model.layers.1.self_attn.k_norm.weight' has dtype I32; supported: BF16, F16, F32");
}

// Regression: a header whose length is odd leaves every BF16 tensor at an odd address; the engines
// read weights in place through uint16_t pointers, so binding must refuse it.
TEST_F(SynthTiny, MisalignedTensorsRefused) {
  const auto dir = test::scratch_dir("_misaligned");
  fs::copy_file(*dir_ / "config.json", dir / "config.json");
  auto bytes = test::read_bytes(*dir_ / "model.safetensors");
  const auto h = parse_safetensors_header(bytes, "x");
  const uint64_t len = h.data_offset - 8 + 1;
  bytes.insert(bytes.begin() + long(h.data_offset), ' ');
  for (int i = 0; i < 8; ++i) bytes[size_t(i)] = uint8_t(len >> (8 * i));
  test::write_bytes(dir / "model.safetensors", bytes);
  EXPECT_EQ(Checkpoint::open(dir)->tensors().size(), 24u);  // the file itself is valid
  EXPECT_ERROR_HAS(load_model(dir.string()), "tensor 'model.embed_tokens.weight' is misaligned in",
                   "its BF16 data does not start at a multiple of 2 bytes");
}

// --- Qwen3.5 hybrid presets ----------------------------------------------------------------------

// Both tiny hybrid presets load with the published dtypes (A_log and the gated norm in F32), the name
// prefix of their form, and run on the hybrid engine with realistic logits.
// Vocabulary and layer overrides (the emulator tests' small models): the config, the tensors and the
// special ids follow; a model with them runs on the CPU engine; bad values are named.
TEST(SynthOverrides, VocabularyAndLayersOverrideThePreset) {
  const fs::path dir = fs::temp_directory_path() / ("megaqwen-synth-override-" + std::to_string(::getpid()));
  SynthOptions o;
  o.preset = "qwen3-0.6b";
  o.vocab_size = 300;
  o.num_layers = 1;
  o.out_dir = dir;
  write_synthetic_model(o);
  {
    const auto model = load_model(dir.string());
    const ModelConfig& c = model->config;
    EXPECT_EQ(c.vocab_size, 300);
    EXPECT_EQ(c.num_layers, 1);
    EXPECT_EQ(c.hidden_size, 1024);
    EXPECT_EQ(c.bos_token_id, -1);
    EXPECT_EQ(c.eos_token_ids, std::vector<int32_t>{299});
    EXPECT_EQ(model->weights.embed.rows, 300);
    EXPECT_EQ(model->weights.layers.size(), 1u);
    CpuEngine cpu(model, {.context = 16, .threads = 1});
    const std::vector<int32_t> prompt{1, 299, 7};
    const auto logits = cpu.prefill(prompt);
    ASSERT_EQ(logits.size(), 300u);
    for (float l : logits) ASSERT_TRUE(std::isfinite(l));
  }
  fs::remove_all(dir);

  auto error_of = [](const SynthOptions& bad) -> std::string {
    try {
      write_synthetic_model(bad);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  SynthOptions bad = o;
  bad.num_layers = -1;
  EXPECT_NE(error_of(bad).find("-1 layers"), std::string::npos);
  bad = o;
  bad.vocab_size = -5;
  EXPECT_NE(error_of(bad).find("-5 tokens"), std::string::npos);
  bad = o;
  bad.tokenizer_dir = "/nonexistent";
  EXPECT_NE(error_of(bad).find("cannot take the tokenizer files"), std::string::npos);
  fs::remove_all(dir);
}

// A hybrid preset's layer count override repeats or cuts its layer pattern.
TEST(SynthQwen35, LayerCountRepeatsThePattern) {
  const fs::path dir = test::scratch_dir("_hybrid_layers");
  write_synthetic_model(
      {.preset = "tiny-hybrid", .seed = 0, .dtype = DType::BF16, .out_dir = dir, .tokenizer_dir = {}, .vocab_size = 300,
       .num_layers = 5, .threads = 2});
  const auto model = load_model(dir.string());
  using enum LayerType;
  EXPECT_EQ(model->config.layer_types,
            (std::vector<LayerType>{LinearAttention, FullAttention, LinearAttention, FullAttention, LinearAttention}));
  EXPECT_EQ(model->qwen35->layers.size(), 5u);
  fs::remove_all(dir);
}

TEST(SynthQwen35, TinyHybridPresetsLoadAndRun) {
  for (const std::string preset : {"tiny-hybrid", "tiny-hybrid-gqa"}) {
    SCOPED_TRACE(preset);
    const fs::path dir = test::scratch_dir("_" + preset);
    write_synthetic_model({.preset = preset, .seed = 3, .dtype = DType::BF16, .out_dir = dir, .tokenizer_dir = {},
                           .threads = 2});
    const auto model = load_model(dir.string());
    const ModelConfig& c = model->config;
    ASSERT_TRUE(model->qwen35.has_value());
    EXPECT_EQ(c.layer_types, find_synth_preset(preset).config.layer_types);
    EXPECT_EQ(model->qwen35->prefix, preset == "tiny-hybrid" ? "model.language_model." : "model.");
    int64_t f32_elements = 0;
    for (const auto& [name, t] : model->checkpoint->tensors()) {
      const bool f32 = name.ends_with("linear_attn.A_log") || name.ends_with("linear_attn.norm.weight");
      EXPECT_EQ(t.dtype(), f32 ? DType::F32 : DType::BF16) << name;
      if (f32) f32_elements += t.info->element_count();
      const Stats st = stats(t);
      EXPECT_EQ(st.non_finite, 0) << name;
      EXPECT_GT(st.std, 0.0) << name;
    }
    EXPECT_EQ(model->checkpoint->total_bytes(), uint64_t(c.parameter_count()) * 2 + uint64_t(f32_elements) * 2);
    // The (1 + w) norms are stored zero-centred, the gated norm's plain weight around 1.
    const std::string& m = model->qwen35->prefix;
    EXPECT_NEAR(stats(model->checkpoint->get(m + "norm.weight")).mean, 0.0, 0.03);
    const int linear = c.layer_types[0] == LayerType::LinearAttention ? 0 : 1;
    EXPECT_NEAR(stats(model->checkpoint->get(m + "layers." + std::to_string(linear) + ".linear_attn.norm.weight")).mean,
                1.0, 0.05);

    auto engine = create_engine(model, {.device = "cpu", .context = 64, .threads = 2, .quiet = true});
    const std::vector<int32_t> prompt = {248045, 846, 198, 9419, 11, 1879, 0, 248319};
    const auto first = engine->prefill(prompt);
    double sum = 0, sum2 = 0;
    for (float v : first) {
      ASSERT_TRUE(std::isfinite(v));
      sum += v, sum2 += double(v) * v;
    }
    const double mean = sum / double(first.size());
    EXPECT_GT(std::sqrt(sum2 / double(first.size()) - mean * mean), 0.5);
    for (float v : engine->decode(42)) ASSERT_TRUE(std::isfinite(v));
    EXPECT_EQ(engine->position(), 9);
  }
}

// The vision tower and the MTP head are counted and skipped (never bound); missing and misshapen
// language-model tensors are refused by name.
TEST(SynthQwen35, SkipsVisionAndMtpAndNamesBadTensors) {
  const fs::path dir = test::scratch_dir("_hybrid");
  write_synthetic_model({.preset = "tiny-hybrid", .seed = 5, .dtype = DType::BF16, .out_dir = dir, .tokenizer_dir = {},
                         .threads = 2});
  const std::string p = "model.language_model.layers.0.linear_attn.";
  const auto with_extras = rewrite(dir, "_extras", [](const TensorSpec& s) { return std::optional(s); },
                                   {{"model.visual.patch_embed.proj.weight", DType::BF16, {8, 4}},
                                    {"model.visual.merger.linear_fc2.bias", DType::F32, {16}},
                                    {"mtp.fc.weight", DType::BF16, {64, 128}}});
  const auto model = load_model(with_extras.string());
  EXPECT_EQ(model->qwen35->vision_tensors, 2);
  EXPECT_EQ(model->qwen35->vision_bytes, 8u * 4 * 2 + 16 * 4);
  EXPECT_EQ(model->qwen35->mtp_tensors, 1);
  EXPECT_EQ(model->qwen35->mtp_bytes, 64u * 128 * 2);
  EXPECT_EQ(model->weight_bytes_per_token(), load_model(dir.string())->weight_bytes_per_token());

  const auto no_a_log = rewrite(dir, "_no_alog", [&](const TensorSpec& s) {
    return s.name == p + "A_log" ? std::nullopt : std::optional(s);
  });
  EXPECT_ERROR_HAS(load_model(no_a_log.string()), "missing tensor '" + p + "A_log' (expected shape [2])");
  const auto flat_conv = rewrite(dir, "_conv2d", [&](const TensorSpec& s) {
    TensorSpec out = s;
    if (s.name == p + "conv1d.weight") out.shape = {s.shape[0], s.shape[2]};
    return std::optional(out);
  });
  EXPECT_ERROR_HAS(load_model(flat_conv.string()), "tensor '" + p + "conv1d.weight' has shape [192, 4], expected [192, 1, 4]");
  const auto short_gate = rewrite(dir, "_noqgate", [](const TensorSpec& s) {
    TensorSpec out = s;
    if (s.name == "model.language_model.layers.1.self_attn.q_proj.weight") out.shape = {256, 64};
    return std::optional(out);
  });
  EXPECT_ERROR_HAS(load_model(short_gate.string()),
                   "tensor 'model.language_model.layers.1.self_attn.q_proj.weight' has shape [256, 64], expected [512, 64]");
}

}  // namespace
}  // namespace megaqwen
