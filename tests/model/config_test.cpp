// parse_model_config / load_model_config: the real Qwen3-0.6B config, and every way a config.json can
// be wrong, each refused with a message naming the file and the field.
#include <gtest/gtest.h>

#include <cmath>

#include <nlohmann/json.hpp>
#include <string>

#include "megaqwen/model/config.h"
#include "megaqwen/model/synth.h"
#include "model/model_test_util.h"
#include "test_paths.h"

namespace megaqwen {
namespace {

using nlohmann::json;

json real_config() {
  std::ifstream in(test::qwen3_tokenizer_dir() / "config.json");
  return json::parse(in);
}

ModelConfig parse(const json& j) { return parse_model_config(j.dump(), "cfg.json"); }

// The real config with `key` set to `value` (or erased when value is discarded).
json with(const std::string& key, const json& value) {
  json j = real_config();
  j[key] = value;
  return j;
}
json without(const std::string& key) {
  json j = real_config();
  j.erase(key);
  return j;
}

TEST(Config, RealQwen3_0_6B) {
  const ModelConfig c = load_model_config(test::qwen3_tokenizer_dir());
  EXPECT_EQ(c.architecture, Architecture::Qwen3);
  EXPECT_EQ(c.model_type, "qwen3");
  EXPECT_EQ(c.hidden_size, 1024);
  EXPECT_EQ(c.num_layers, 28);
  EXPECT_EQ(c.num_heads, 16);
  EXPECT_EQ(c.num_kv_heads, 8);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.q_dim(), 2048);
  EXPECT_EQ(c.kv_dim(), 1024);
  EXPECT_EQ(c.intermediate_size, 3072);
  EXPECT_EQ(c.vocab_size, 151936);
  EXPECT_EQ(c.max_position_embeddings, 40960);
  EXPECT_DOUBLE_EQ(c.rope_theta, 1000000.0);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.torch_dtype, "bfloat16");
  EXPECT_EQ(c.bos_token_id, 151643);
  EXPECT_EQ(c.eos_token_ids, std::vector<int32_t>{151645});
  // 0.6B: embedding 155.6M + 28 layers of ~15.7M + final norm, head tied.
  EXPECT_EQ(c.parameter_count(), 596049920);
}

TEST(Config, SynthJsonRoundTrips) {
  for (const auto& preset : synth_presets()) {
    const ModelConfig c = parse_model_config(model_config_json(preset.config), preset.name);
    EXPECT_EQ(c.hidden_size, preset.config.hidden_size);
    EXPECT_EQ(c.num_layers, preset.config.num_layers);
    EXPECT_EQ(c.num_kv_heads, preset.config.num_kv_heads);
    EXPECT_EQ(c.head_dim, preset.config.head_dim);
    EXPECT_EQ(c.eos_token_ids, preset.config.eos_token_ids);
    EXPECT_EQ(c.parameter_count(), preset.config.parameter_count());
    EXPECT_EQ(c.architecture, preset.config.architecture);
    EXPECT_EQ(c.model_type, preset.config.model_type);
    EXPECT_EQ(c.layer_types, preset.config.layer_types);
    EXPECT_EQ(c.rotary_dim, preset.config.is_hybrid() ? preset.config.rotary_dim : preset.config.head_dim);
    EXPECT_EQ(c.mrope_section, preset.config.mrope_section);
    EXPECT_EQ(c.linear_conv_dim(), preset.config.linear_conv_dim());
    EXPECT_EQ(c.tie_word_embeddings, preset.config.tie_word_embeddings);
    EXPECT_EQ(c.num_heads, preset.config.num_heads);
    EXPECT_EQ(c.intermediate_size, preset.config.intermediate_size);
    EXPECT_EQ(c.vocab_size, preset.config.vocab_size);
    EXPECT_EQ(c.rope_theta, preset.config.rope_theta);
    EXPECT_EQ(c.rms_norm_eps, preset.config.rms_norm_eps);
    EXPECT_EQ(c.max_position_embeddings, preset.config.max_position_embeddings);
    EXPECT_EQ(c.bos_token_id, preset.config.bos_token_id);
    EXPECT_EQ(c.torch_dtype, preset.config.torch_dtype);
    EXPECT_EQ(c.partial_rotary_factor, preset.config.partial_rotary_factor);
    EXPECT_EQ(c.linear_conv_kernel, preset.config.linear_conv_kernel);
  }
}

// --- Qwen3.5 ------------------------------------------------------------------------------------

std::filesystem::path qwen35_dir() { return test::shared_dir() / "models" / "qwen3.5-0.8b"; }
json real_qwen35_config() {
  std::ifstream in(qwen35_dir() / "config.json");
  return json::parse(in);
}
// The real wrapper config with text_config[key] set to `value` (erased when value is discarded).
json with_text(const std::string& key, const json& value) {
  json j = real_qwen35_config();
  if (value.is_discarded()) j["text_config"].erase(key);
  else j["text_config"][key] = value;
  return j;
}
const json kErase = json(json::value_t::discarded);

TEST(Config, RealQwen3_5_0_8B) {
  const ModelConfig c = load_model_config(qwen35_dir());
  EXPECT_EQ(c.architecture, Architecture::Qwen3_5);
  EXPECT_TRUE(c.is_hybrid());
  EXPECT_EQ(c.model_type, "qwen3_5");
  EXPECT_EQ(c.hidden_size, 1024);
  EXPECT_EQ(c.num_layers, 24);
  ASSERT_EQ(c.layer_types.size(), 24u);
  for (int i = 0; i < 24; ++i)
    EXPECT_EQ(c.layer_types[size_t(i)], i % 4 == 3 ? LayerType::FullAttention : LayerType::LinearAttention) << i;
  EXPECT_EQ(c.count_layers(LayerType::FullAttention), 6);
  EXPECT_EQ(c.num_heads, 8);
  EXPECT_EQ(c.num_kv_heads, 2);
  EXPECT_EQ(c.head_dim, 256);
  EXPECT_DOUBLE_EQ(c.partial_rotary_factor, 0.25);
  EXPECT_EQ(c.rotary_dim, 64);
  EXPECT_EQ(c.mrope_section, (std::vector<int>{11, 11, 10}));
  EXPECT_TRUE(c.mrope_interleaved);
  EXPECT_TRUE(c.attn_output_gate);
  EXPECT_DOUBLE_EQ(c.rope_theta, 1e7);
  EXPECT_EQ(c.linear_num_key_heads, 16);
  EXPECT_EQ(c.linear_num_value_heads, 16);
  EXPECT_EQ(c.linear_key_head_dim, 128);
  EXPECT_EQ(c.linear_value_head_dim, 128);
  EXPECT_EQ(c.linear_conv_kernel, 4);
  EXPECT_EQ(c.linear_conv_dim(), 6144);
  EXPECT_EQ(c.intermediate_size, 3584);
  EXPECT_EQ(c.vocab_size, 248320);
  EXPECT_EQ(c.max_position_embeddings, 262144);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.eos_token_ids, std::vector<int32_t>{248044});
  EXPECT_EQ(c.mtp_num_hidden_layers, 1);
  EXPECT_EQ(c.torch_dtype, "bfloat16");
  // Language model only: embedding 254.3M, 18 DeltaNet + 6 attention layers, final norm, tied head.
  EXPECT_EQ(c.parameter_count(), 752393024);
  // The synthetic preset has the same shapes.
  EXPECT_EQ(find_synth_preset("qwen3.5-0.8b").config.parameter_count(), c.parameter_count());
}

TEST(Config, Qwen35TextOnlyAndDefaults) {
  // The qwen3_5_text form: the text config at the top level.
  json text = real_qwen35_config()["text_config"];
  const ModelConfig t = parse(text);
  EXPECT_EQ(t.model_type, "qwen3_5_text");
  EXPECT_EQ(t.layer_types.size(), 24u);
  EXPECT_EQ(t.parameter_count(), 752393024);
  // layer_types absent: every full_attention_interval-th layer is full attention (transformers' rule).
  text.erase("layer_types");
  text["full_attention_interval"] = 3;
  const ModelConfig by_interval = parse(text);
  for (int i = 0; i < 24; ++i)
    EXPECT_EQ(by_interval.layer_types[size_t(i)], i % 3 == 2 ? LayerType::FullAttention : LayerType::LinearAttention);
  // transformers' defaults: head_dim 256, partial rotary 0.25 (also as a top-level field).
  text.erase("head_dim");
  text["rope_parameters"].erase("partial_rotary_factor");
  EXPECT_EQ(parse(text).rotary_dim, 64);
  text["partial_rotary_factor"] = 0.5;
  EXPECT_EQ(parse(text).rotary_dim, 128);
  // The wrapper's own tie flag wins over the text config's.
  json wrapper = real_qwen35_config();
  wrapper["tie_word_embeddings"] = false;
  EXPECT_FALSE(parse(wrapper).tie_word_embeddings);
  wrapper.erase("tie_word_embeddings");
  EXPECT_TRUE(parse(wrapper).tie_word_embeddings);
}

TEST(Config, Qwen35ErrorsNameTheField) {
  json no_text = real_qwen35_config();
  no_text.erase("text_config");
  EXPECT_ERROR_HAS(parse(no_text), "cfg.json: missing required field 'text_config'");
  no_text["text_config"] = json::array();
  EXPECT_ERROR_HAS(parse(no_text), "field 'text_config' must be an object");
  EXPECT_ERROR_HAS(parse(with_text("model_type", "qwen3")), "text_config.model_type 'qwen3' is not qwen3_5_text");
  for (const char* key : {"linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
                          "linear_value_head_dim", "linear_conv_kernel_dim", "hidden_size", "vocab_size"}) {
    SCOPED_TRACE(key);
    EXPECT_ERROR_HAS(parse(with_text(key, kErase)), "missing required field", std::string("text_config.") + key);
  }
  EXPECT_ERROR_HAS(parse(with_text("linear_num_key_heads", "16")), "'text_config.linear_num_key_heads' must be an integer");
  EXPECT_ERROR_HAS(parse(with_text("linear_num_value_heads", 24)),
                   "linear_num_value_heads 24 is not a multiple of linear_num_key_heads 16");
  EXPECT_ERROR_HAS(parse(with_text("layer_types", json::array({"linear_attention"}))),
                   "text_config.layer_types has 1 entries but num_hidden_layers is 24");
  json bad_type = real_qwen35_config();
  bad_type["text_config"]["layer_types"][5] = "sliding_attention";
  EXPECT_ERROR_HAS(parse(bad_type), "text_config.layer_types[5] = \"sliding_attention\" is not 'full_attention' or 'linear_attention'");
  EXPECT_ERROR_HAS(parse(with_text("layer_types", "all")), "'text_config.layer_types' must be an array");
  EXPECT_ERROR_HAS(parse(with_text("attn_output_gate", false)), "text_config.attn_output_gate = false is not supported");
  EXPECT_ERROR_HAS(parse(with_text("mlp_only_layers", json::array({0}))), "text_config.mlp_only_layers [0] is not supported");
  EXPECT_ERROR_HAS(parse(with_text("hidden_act", "gelu")), "unsupported hidden_act 'gelu'");
  json rope = real_qwen35_config();
  rope["text_config"]["rope_parameters"]["rope_type"] = "dynamic";
  EXPECT_ERROR_HAS(parse(rope), "text_config.rope_parameters.rope_type 'dynamic' is not supported (default, linear and yarn are)");
  rope["text_config"]["rope_parameters"]["rope_type"] = "yarn";
  EXPECT_ERROR_HAS(parse(rope), "missing required field 'text_config.rope_parameters.factor'");
  rope["text_config"]["rope_parameters"]["factor"] = 4;
  EXPECT_EQ(parse(rope).rope_scaling.type, RopeScaling::Type::Yarn);
  EXPECT_EQ(parse(rope).context_limit(), 4 * 262144);  // original_max_position_embeddings defaults to the context
  rope = real_qwen35_config();
  rope["text_config"]["rope_scaling"] = {{"type", "linear"}, {"factor", 2}};  // the legacy form is read too
  EXPECT_EQ(parse(rope).rope_scaling.type, RopeScaling::Type::Linear);
  rope["text_config"]["rope_parameters"]["rope_type"] = "yarn";
  rope["text_config"]["rope_parameters"]["factor"] = 4;
  EXPECT_ERROR_HAS(parse(rope), "text_config.rope_scaling and rope_parameters both scale RoPE");
  rope = real_qwen35_config();
  rope["text_config"]["rope_parameters"]["partial_rotary_factor"] = 0.003;
  EXPECT_ERROR_HAS(parse(rope), "partial_rotary_factor 0.003 of head_dim 256 gives 0 rotary dims");
  rope = real_qwen35_config();
  rope["text_config"]["rope_parameters"]["mrope_section"] = {20, 20, 10};
  EXPECT_ERROR_HAS(parse(rope), "text_config.rope_parameters.mrope_section sums to 50 frequencies, more than the 32");
  rope = real_qwen35_config();
  rope["text_config"]["rope_parameters"].erase("rope_theta");
  EXPECT_ERROR_HAS(parse(rope), "missing required field 'text_config.rope_theta'");
}

TEST(Config, OptionalFieldsDefault) {
  json j = real_config();
  for (const char* k : {"num_key_value_heads", "head_dim", "bos_token_id", "eos_token_id", "tie_word_embeddings",
                        "torch_dtype", "hidden_act", "rope_scaling", "attention_bias"})
    j.erase(k);
  const ModelConfig c = parse(j);
  EXPECT_EQ(c.num_kv_heads, 16);          // defaults to num_attention_heads
  EXPECT_EQ(c.head_dim, 1024 / 16);       // hidden_size / heads when absent
  EXPECT_EQ(c.bos_token_id, -1);
  EXPECT_TRUE(c.eos_token_ids.empty());
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.torch_dtype, "");
}

TEST(Config, EosListAndNulls) {
  json j = with("eos_token_id", json::array({151645, 151643}));
  j["rope_scaling"] = json::object();  // {} means no scaling
  j["sliding_window"] = nullptr;
  EXPECT_EQ(parse(j).eos_token_ids, (std::vector<int32_t>{151645, 151643}));
  EXPECT_EQ(parse(with("head_dim", nullptr)).head_dim, 64);  // null = absent
}

TEST(Config, MissingRequiredFields) {
  for (const char* key : {"hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size",
                          "max_position_embeddings", "rope_theta", "rms_norm_eps"}) {
    SCOPED_TRACE(key);
    EXPECT_ERROR_HAS(parse(without(key)), "cfg.json", "missing required field", key);
    EXPECT_ERROR_HAS(parse(with(key, nullptr)), "missing required field", key);
  }
  EXPECT_ERROR_HAS(parse(without("model_type")), "cfg.json: missing required field 'model_type'");
  EXPECT_ERROR_HAS(parse(with("model_type", "")), "missing required field 'model_type'");
}

TEST(Config, WrongTypes) {
  EXPECT_ERROR_HAS(parse(with("hidden_size", "1024")), "field 'hidden_size' must be an integer, got \"1024\"");
  EXPECT_ERROR_HAS(parse(with("hidden_size", 1024.5)), "field 'hidden_size' must be an integer, got 1024.5");
  EXPECT_ERROR_HAS(parse(with("num_hidden_layers", true)), "'num_hidden_layers' must be an integer, got true");
  EXPECT_ERROR_HAS(parse(with("vocab_size", json::array({1}))), "'vocab_size' must be an integer, got [1]");
  EXPECT_ERROR_HAS(parse(with("rope_theta", "1e6")), "field 'rope_theta' must be a number");
  EXPECT_ERROR_HAS(parse(with("tie_word_embeddings", 1)), "'tie_word_embeddings' must be true or false, got 1");
  EXPECT_ERROR_HAS(parse(with("torch_dtype", 16)), "'torch_dtype' must be a string, got 16");
  EXPECT_ERROR_HAS(parse(with("model_type", 3)), "'model_type' must be a string");
  EXPECT_ERROR_HAS(parse(with("eos_token_id", "x")), "'eos_token_id' must be an integer");
  EXPECT_ERROR_HAS(parse(with("eos_token_id", json::array({1, "x"}))), "'eos_token_id' must be an integer");
}

TEST(Config, OutOfRange) {
  EXPECT_ERROR_HAS(parse(with("hidden_size", 0)), "field 'hidden_size' = 0 is out of range [1, 65536]");
  EXPECT_ERROR_HAS(parse(with("hidden_size", -5)), "'hidden_size' = -5 is out of range");
  EXPECT_ERROR_HAS(parse(with("hidden_size", 1 << 17)), "'hidden_size' = 131072 is out of range");
  EXPECT_ERROR_HAS(parse(with("num_hidden_layers", 100000)), "'num_hidden_layers' = 100000 is out of range");
  EXPECT_ERROR_HAS(parse(with("vocab_size", 18446744073709551615ull)),
                   "'vocab_size' = 18446744073709551615 is out of range");
  EXPECT_ERROR_HAS(parse(with("vocab_size", int64_t(1) << 40)), "'vocab_size' = 1099511627776 is out of range");
  EXPECT_ERROR_HAS(parse(with("head_dim", 1)), "'head_dim' = 1 is out of range");
  EXPECT_ERROR_HAS(parse(with("head_dim", 7)), "head_dim 7 must be even");
  EXPECT_ERROR_HAS(parse(with("rope_theta", 0)), "'rope_theta' = 0 is out of range");
  EXPECT_ERROR_HAS(parse(with("rope_theta", 1e300)), "'rope_theta' = 1e+300 is out of range");
  EXPECT_ERROR_HAS(parse(with("rms_norm_eps", -1e-6)), "'rms_norm_eps' = -1e-06 is out of range");
  EXPECT_ERROR_HAS(parse(with("rms_norm_eps", 0)), "'rms_norm_eps' = 0 is out of range");
  EXPECT_ERROR_HAS(parse(with("num_key_value_heads", 3)),
                   "num_attention_heads 16 is not a multiple of num_key_value_heads 3");
  EXPECT_ERROR_HAS(parse(with("bos_token_id", 151936)), "'bos_token_id' = 151936 is out of range [-1, 151935]");
  EXPECT_ERROR_HAS(parse(with("eos_token_id", json::array({151645, 200000}))),
                   "'eos_token_id' = 200000 is out of range [0, 151935]");
  EXPECT_ERROR_HAS(parse(with("eos_token_id", -1)), "'eos_token_id' = -1 is out of range");
  json j = without("head_dim");
  j["hidden_size"] = 1000;
  j["num_attention_heads"] = 16;
  EXPECT_ERROR_HAS(parse(j), "no 'head_dim' and hidden_size 1000 is not a multiple of num_attention_heads 16");
}

TEST(Config, OtherArchitecturesNamed) {
  json llama = with("model_type", "llama");
  llama["architectures"] = {"LlamaForCausalLM"};
  EXPECT_ERROR_HAS(parse(llama),
                   "cfg.json: unsupported architecture 'llama' (LlamaForCausalLM); supported: qwen3, qwen3_5, qwen3_5_text");
  EXPECT_ERROR_HAS(parse(with("model_type", "qwen3_next")), "unsupported architecture 'qwen3_next'");
  EXPECT_ERROR_HAS(parse(with("model_type", "qwen3_moe")), "unsupported architecture 'qwen3_moe'");
  EXPECT_ERROR_HAS(parse(with("model_type", "qwen2")), "unsupported architecture 'qwen2' (Qwen3ForCausalLM)");
}

TEST(Config, UnsupportedFeatures) {
  EXPECT_ERROR_HAS(parse(with("rope_scaling", {{"rope_type", "dynamic"}, {"factor", 4.0}})),
                   "rope_scaling.rope_type 'dynamic' is not supported (default, linear and yarn are)");
  EXPECT_ERROR_HAS(parse(with("rope_scaling", {{"type", "longrope"}})), "rope_scaling.type 'longrope' is not supported");
  EXPECT_ERROR_HAS(parse(with("rope_scaling", "linear")), "rope_scaling \"linear\" must be an object");
  EXPECT_ERROR_HAS(parse(with("attention_bias", true)), "attention_bias = true is not supported");
  EXPECT_ERROR_HAS(parse(with("attention_bias", "yes")), "'attention_bias' must be true or false");
  EXPECT_ERROR_HAS(parse(with("use_sliding_window", true)), "use_sliding_window = true is not supported");
  EXPECT_ERROR_HAS(parse(with("hidden_act", "gelu")), "unsupported hidden_act 'gelu' (only silu)");
}

TEST(Config, RopeScaling) {
  // Qwen3's documented YaRN setting, in the published (legacy) form.
  const json yarn = {{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 32768}};
  ModelConfig c = parse(with("rope_scaling", yarn));
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::Yarn);
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 4.0);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 32768);
  EXPECT_DOUBLE_EQ(c.rope_scaling.beta_fast, 32);
  EXPECT_DOUBLE_EQ(c.rope_scaling.beta_slow, 1);
  EXPECT_TRUE(c.rope_scaling.truncate);
  EXPECT_NEAR(c.rope_scaling.attention_factor, 0.1 * std::log(4.0) + 1, 1e-12);
  EXPECT_EQ(c.context_limit(), 131072);  // 32768 x 4, beyond max_position_embeddings
  EXPECT_NO_THROW(c.check_context(131072));
  EXPECT_ERROR_HAS(c.check_context(131073),
                   "context 131073 exceeds the model's 131072 positions (max_position_embeddings 40960, stretched by "
                   "its rope_scaling factor 4)");
  EXPECT_FLOAT_EQ(c.rope_scaling.amplitude(), float(0.1 * std::log(4.0) + 1));
  // The same in transformers 5's form, and with the older "type" key.
  json v5 = without("rope_theta");
  v5["rope_parameters"] = yarn;
  v5["rope_parameters"]["rope_theta"] = 1e6;
  EXPECT_EQ(parse(v5).rope_scaling.type, RopeScaling::Type::Yarn);
  EXPECT_EQ(parse(with("rope_scaling", {{"type", "yarn"}, {"factor", 2.0}})).rope_scaling.type, RopeScaling::Type::Yarn);
  // mscale / mscale_all_dim set the attention factor when it is not given; given, it wins.
  json ms = yarn;
  ms["mscale"] = 1.0;
  ms["mscale_all_dim"] = 0.5;
  EXPECT_NEAR(parse(with("rope_scaling", ms)).rope_scaling.attention_factor,
              (0.1 * std::log(4.0) + 1) / (0.05 * std::log(4.0) + 1), 1e-12);
  ms["attention_factor"] = 1.5;
  EXPECT_DOUBLE_EQ(parse(with("rope_scaling", ms)).rope_scaling.attention_factor, 1.5);
  // Linear: the context stretches by the factor; no attention factor.
  c = parse(with("rope_scaling", {{"rope_type", "linear"}, {"factor", 2.0}}));
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::Linear);
  EXPECT_EQ(c.context_limit(), 81920);
  EXPECT_EQ(c.rope_scaling.amplitude(), 1.0f);
  // Without scaling, the context is max_position_embeddings and the message says so.
  EXPECT_ERROR_HAS(parse(real_config()).check_context(40961), "context 40961 exceeds the model's max_position_embeddings 40960");
  // Bad values name their field.
  EXPECT_ERROR_HAS(parse(with("rope_scaling", {{"rope_type", "yarn"}})), "missing required field 'rope_scaling.factor'");
  EXPECT_ERROR_HAS(parse(with("rope_scaling", {{"rope_type", "linear"}, {"factor", 0.5}})),
                   "field 'rope_scaling.factor' = 0.5 is out of range");
  EXPECT_ERROR_HAS(parse(with("rope_scaling", {{"rope_type", "yarn"}, {"factor", 2}, {"truncate", "no"}})),
                   "'rope_scaling.truncate' must be true or false");
  json both = with("rope_scaling", yarn);
  both["rope_parameters"] = yarn;
  EXPECT_ERROR_HAS(parse(both), "rope_scaling and rope_parameters both scale RoPE; give one");
}

TEST(Config, RopeScalingOverride) {
  ModelConfig c = parse(real_config());
  override_rope_scaling(c, R"({"rope_type": "yarn", "factor": 4, "original_max_position_embeddings": 32768})", "--rope-scaling");
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::Yarn);
  EXPECT_EQ(c.context_limit(), 131072);
  override_rope_scaling(c, "{}", "--rope-scaling");
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::None);
  EXPECT_EQ(c.context_limit(), 40960);
  EXPECT_ERROR_HAS(override_rope_scaling(c, R"({"rope_type": "yarn"})", "--rope-scaling"),
                   "--rope-scaling: missing required field 'factor'");
  EXPECT_ERROR_HAS(override_rope_scaling(c, "[1]", "--rope-scaling"), "--rope-scaling: not a JSON object: [1]");
}

TEST(Config, RopeParameters) {
  // transformers >= 5 moves rope_theta under rope_parameters.
  json j = without("rope_theta");
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 5e5}};
  EXPECT_DOUBLE_EQ(parse(j).rope_theta, 5e5);
  j["rope_parameters"] = {{"rope_theta", 5e5}};  // rope_type defaults to plain RoPE
  EXPECT_DOUBLE_EQ(parse(j).rope_theta, 5e5);
  j["rope_theta"] = 1e6;  // a top-level value wins
  EXPECT_DOUBLE_EQ(parse(j).rope_theta, 1e6);
  j.erase("rope_theta");
  j["rope_parameters"] = {{"rope_type", "dynamic"}, {"rope_theta", 5e5}, {"factor", 4}};
  EXPECT_ERROR_HAS(parse(j), "cfg.json: rope_parameters.rope_type 'dynamic' is not supported (default, linear and yarn are)");
  j["rope_parameters"] = {{"rope_type", "default"}};
  EXPECT_ERROR_HAS(parse(j), "missing required field 'rope_parameters.rope_theta'");
  j["rope_parameters"] = {{"rope_theta", 0.5}};
  EXPECT_ERROR_HAS(parse(j), "field 'rope_parameters.rope_theta' = 0.5 is out of range");
  j["rope_parameters"] = json::array({1e6});
  EXPECT_ERROR_HAS(parse(j), "field 'rope_parameters' must be an object");
}

TEST(Config, NotJsonOrNotAnObject) {
  EXPECT_ERROR_HAS(parse_model_config("", "c.json"), "c.json: not valid JSON");
  EXPECT_ERROR_HAS(parse_model_config("{\"model_type\": \"qwen3\",", "c.json"), "c.json: not valid JSON");
  EXPECT_ERROR_HAS(parse_model_config("{'model_type': 'qwen3'}", "c.json"), "not valid JSON");
  EXPECT_ERROR_HAS(parse_model_config("{} trailing", "c.json"), "not valid JSON");
  EXPECT_ERROR_HAS(parse_model_config("\xff\xfe{}", "c.json"), "not valid JSON");
  EXPECT_ERROR_HAS(parse_model_config("[1, 2]", "c.json"), "c.json: expected a JSON object at the top level");
  EXPECT_ERROR_HAS(parse_model_config("\"qwen3\"", "c.json"), "expected a JSON object");
  EXPECT_ERROR_HAS(parse_model_config("null", "c.json"), "expected a JSON object");
}

// Regression: error messages used to dump() the offending value, which recurses once per nesting
// level (a stack overflow on a hostile file) and copies it whole into the message.
TEST(Config, HostileValuesGiveShortMessages) {
  const int depth = 1'000'000;
  std::string nested = std::string(depth, '[') + std::string(depth, ']');
  const std::string text = real_config().dump();
  std::string hostile = text;
  hostile.insert(1, "\"rope_scaling\": " + nested + ",");
  hostile.erase(hostile.find("\"rope_scaling\":null"), std::string("\"rope_scaling\":null,").size());
  const std::string msg = test::error_of([&] { parse_model_config(hostile, "c.json"); });
  EXPECT_NE(msg.find("rope_scaling [[[[...]]]] must be an object"), std::string::npos) << msg.substr(0, 300);
  EXPECT_LT(msg.size(), 300u);

  std::string deep_int = text;
  deep_int.replace(deep_int.find("\"hidden_size\":1024"), std::string("\"hidden_size\":1024").size(),
                   "\"hidden_size\":" + nested);
  EXPECT_ERROR_HAS(parse_model_config(deep_int, "c.json"), "'hidden_size' must be an integer, got [[[[...]]]]");

  const std::string long_string(10'000'000, 'x');
  const std::string msg2 = test::error_of([&] { parse(with("torch_dtype", json::array({long_string}))); });
  EXPECT_NE(msg2.find("'torch_dtype' must be a string, got [\"xxxx"), std::string::npos) << msg2.substr(0, 300);
  EXPECT_LT(msg2.size(), 400u);
}

TEST(Config, LoadFromFolder) {
  const auto dir = test::scratch_dir();
  EXPECT_ERROR_HAS(load_model_config(dir), "config.json: cannot read config.json (is this a model folder?)");
  test::write_text(dir / "config.json", "{\"model_type\": \"llama\"}");
  EXPECT_ERROR_HAS(load_model_config(dir), (dir / "config.json").string().c_str(), "unsupported architecture 'llama'");
  test::write_text(dir / "config.json", model_config_json(find_synth_preset("tiny").config));
  EXPECT_EQ(load_model_config(dir).hidden_size, 64);
}

}  // namespace
}  // namespace megaqwen
