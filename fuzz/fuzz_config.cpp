// libFuzzer target: arbitrary bytes as config.json. parse_model_config must either return a config
// that satisfies its documented invariants or throw megaqwen::Error; any other exception, crash,
// sanitizer report, leak or hang is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string_view>

#include "megaqwen/model/config.h"
#include "megaqwen/util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const megaqwen::ModelConfig c = megaqwen::parse_model_config(text, "fuzz/config.json");
    // The checks later code relies on.
    if (c.hidden_size < 1 || c.num_layers < 1 || c.num_heads < 1 || c.num_kv_heads < 1 || c.head_dim < 2 ||
        c.head_dim % 2 != 0 || c.num_heads % c.num_kv_heads != 0 || c.intermediate_size < 1 || c.vocab_size < 1 ||
        c.max_position_embeddings < 1 || !(c.rope_theta >= 1.0) || !(c.rms_norm_eps > 0.0))
      std::abort();
    if (c.bos_token_id < -1 || c.bos_token_id >= c.vocab_size) std::abort();
    for (int32_t id : c.eos_token_ids)
      if (id < 0 || id >= c.vocab_size) std::abort();
    // Qwen3.5 hybrids: what the hybrid engine and its kernels index with.
    if (c.architecture == megaqwen::Architecture::Qwen3_5) {
      if (c.layer_types.size() != size_t(c.num_layers)) std::abort();
      if (c.rotary_dim < 2 || c.rotary_dim % 2 != 0 || c.rotary_dim > c.head_dim) std::abort();
      int mrope = 0;
      for (int s : c.mrope_section) mrope += s;
      if (mrope > c.rotary_dim / 2) std::abort();
      if (c.linear_num_key_heads < 1 || c.linear_num_value_heads % c.linear_num_key_heads != 0 ||
          c.linear_key_head_dim < 1 || c.linear_value_head_dim < 1 || c.linear_conv_kernel < 1)
        std::abort();
    } else if (c.rotary_dim != c.head_dim) {
      std::abort();
    }
    (void)c.parameter_count();  // must not overflow (UBSan) for any accepted config
  } catch (const megaqwen::Error&) {
    // Rejected with a message: the expected outcome for bad input.
  } catch (const std::exception& e) {
    std::fprintf(stderr, "unexpected exception: %s\n", e.what());
    std::abort();
  }
  return 0;
}
