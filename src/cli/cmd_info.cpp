// megaqwen info --model DIR: what a model folder holds (shapes, parameters, bytes, dtypes).
#include <cstdio>
#include <map>
#include <string>

#include "cli/commands.h"
#include "cli/common_options.h"
#include "megaqwen/model/model.h"

namespace megaqwen::cli {

void add_info_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("info", "Show a model's shapes, parameter count, bytes and dtypes");
  auto args = std::make_shared<ModelArgs>();
  args->add_to(cmd, /*with_engine=*/false);
  cmd->callback([args] {
    auto m = args->load();
    const ModelConfig& c = m->config;
    std::map<std::string, std::pair<int, uint64_t>> by_dtype;  // dtype -> (tensors, bytes)
    for (const auto& [name, t] : m->checkpoint->tensors()) {
      auto& e = by_dtype[dtype_name(t.dtype())];
      e.first += 1;
      e.second += t.byte_size();
    }
    std::printf("model          %s\n", m->dir.string().c_str());
    std::printf("architecture   %s\n", c.model_type.c_str());
    std::printf("layers         %d\n", c.num_layers);
    std::printf("hidden         %d\n", c.hidden_size);
    std::printf("heads          %d query, %d key/value (GQA %d), head_dim %d\n", c.num_heads, c.num_kv_heads,
                c.num_heads / c.num_kv_heads, c.head_dim);
    if (c.is_hybrid()) {
      std::string pattern;
      for (size_t i = 0; i < c.layer_types.size(); ++i)
        pattern += (i ? "," : "") + std::string(c.layer_types[i] == LayerType::FullAttention ? "F" : "L");
      std::printf("layer types    %d Gated DeltaNet (L), %d gated full attention (F): %s\n",
                  c.count_layers(LayerType::LinearAttention), c.count_layers(LayerType::FullAttention), pattern.c_str());
      std::printf("deltanet       %d key heads x %d, %d value heads x %d, conv kernel %d\n", c.linear_num_key_heads,
                  c.linear_key_head_dim, c.linear_num_value_heads, c.linear_value_head_dim, c.linear_conv_kernel);
      std::printf("rotary         %d of %d dims per head (partial_rotary_factor %g)\n", c.rotary_dim, c.head_dim,
                  c.partial_rotary_factor);
    }
    std::printf("intermediate   %d\n", c.intermediate_size);
    std::printf("vocabulary     %d\n", c.vocab_size);
    std::printf("context        %d (max_position_embeddings)\n", c.max_position_embeddings);
    std::printf("rope_theta     %g\n", c.rope_theta);
    if (c.rope_scaling.type == RopeScaling::Type::Linear)
      std::printf("rope scaling   linear x%g: context up to %d\n", c.rope_scaling.factor, c.context_limit());
    if (c.rope_scaling.type == RopeScaling::Type::Yarn)
      std::printf("rope scaling   YaRN x%g of %d (attention factor %.4f): context up to %d\n", c.rope_scaling.factor,
                  c.rope_scaling.original_max_position_embeddings, c.rope_scaling.attention_factor, c.context_limit());
    std::printf("rms_norm_eps   %g\n", c.rms_norm_eps);
    std::printf("lm_head        %s\n", c.tie_word_embeddings ? "tied to the embedding" : "separate");
    std::printf("parameters     %lld (%.3f B)\n", (long long)c.parameter_count(), double(c.parameter_count()) / 1e9);
    std::printf("files          %zu\n", m->checkpoint->files().size());
    for (const auto& [dtype, e] : by_dtype)
      std::printf("dtype %-8s %d tensors, %.1f MB\n", dtype.c_str(), e.first, double(e.second) / 1e6);
    std::printf("weight bytes   %.1f MB in all, %.1f MB read per decoded token\n",
                double(m->checkpoint->total_bytes()) / 1e6, double(m->weight_bytes_per_token()) / 1e6);
    if (m->qwen35) {
      // Parts of a Qwen3.5 folder the text engines do not run: left unread in the mapped files.
      const Qwen35Weights& w = *m->qwen35;
      std::printf("skipped        vision tower (model.visual.*): %d tensors, %.1f MB; MTP head (mtp.*): %d tensors, "
                  "%.1f MB\n", w.vision_tensors, double(w.vision_bytes) / 1e6, w.mtp_tensors, double(w.mtp_bytes) / 1e6);
    }
  });
}

}  // namespace megaqwen::cli
