// CpuEngine: the Qwen3 forward pass in fp32 on the CPU. It is the oracle every GPU path is tested
// against, so it is written for clarity: forward() below reads like the model's math in
// ../shared/docs/qwen-models.md, and each operation is one function in cpu_ops.h.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "megaqwen/engine/engine.h"
#include "megaqwen/model/model.h"
#include "megaqwen/util/thread_pool.h"

namespace megaqwen {

struct CpuEngineOptions {
  int context = 0;  // KV cache capacity; 0: min(the model's context limit, 4096)
  int threads = 0;  // 0: one per hardware thread
  // Store k and v rounded to bf16, as the CUDA engines' cache does (kept in fp32 otherwise). For the
  // GPU tests: against such a reference the cache's rounding cancels, and the bounds can be tight.
  bool bf16_kv_cache = false;
  // Round every matrix product's input to bf16 (the CUDA prefill with split_activations off rounds
  // its GEMM inputs so). For the GPU tests only: decode rounds too, where the GPU's GEMVs do not.
  bool bf16_matmul_inputs = false;
  // --amx-prefill: products over several tokens (prefill, scoring) of bf16 weights run on the AMX
  // tile units, the input split into bf16 hi + lo (cpu_amx_matmul.h), where the processor has them;
  // elsewhere this changes nothing. Decode stays fp32. Off by default: the engine is the fp32 oracle.
  bool amx_prefill = false;
  // Transparent huge pages for what decode streams every token. The weights (Checkpoint::
  // use_huge_pages: the page cache's own where the kernel maps them so, else a copy): decode ~25%
  // faster than from 4 KiB pages; and the KV cache (advised before it is first filled): ~10% at
  // 4k-16k cached tokens. Off (--no-huge-pages): the weights stay in the file's map as the kernel
  // maps it, read in as first touched, never copied, and the cache is plain memory.
  bool huge_pages = true;
};

// How the CPU engines multiply: cpu::matmul; of the input rounded to bf16 (bf16_matmul_inputs); or,
// over several tokens and with bf16 weights, on AMX (amx_prefill, where available).
struct CpuProducts {
  bool bf16_inputs = false;
  bool amx_prefill = false;
  static CpuProducts from(const CpuEngineOptions& options);
  void run(const WeightMatrix& w, const float* in, int64_t tokens, float* out, ThreadPool& pool) const;
};

// What the CPU engines do with options.huge_pages: the model's weights into huge pages where
// the kernel has them (a copy only where the machine has the memory to spare); true when they are.
bool place_weights_in_huge_pages(const Model& model, const CpuEngineOptions& options);

// The CPU engines' device line: "cpu (N threads)", what the cache rounds to when it is not fp32,
// whether prefill runs on AMX and whether the weights are in huge pages.
std::string cpu_device_name(size_t threads, bool bf16_kv_cache, const CpuProducts& products, bool huge_pages);

class CpuEngine final : public Engine {
 public:
  CpuEngine(std::shared_ptr<const Model> model, CpuEngineOptions options = {});

  const ModelConfig& config() const override { return model_->config; }
  std::string device_name() const override;
  int context_size() const override { return context_; }
  int position() const override { return position_; }

  std::span<const float> prefill(std::span<const int32_t> tokens) override;
  void prefill_all_logits(std::span<const int32_t> tokens, std::vector<float>& out) override;
  std::span<const float> decode(int32_t token) override;
  void truncate(int n) override;
  void fill_cache_with_noise(int n) override;
  uint64_t kv_bytes_per_token() const override;
  std::unique_ptr<EngineState> save_state() override;
  void restore_state(const EngineState& state) override;
  std::string state_format() const override;
  std::vector<StateTensor> state_tensors(const EngineState& state) const override;
  std::unique_ptr<EngineState> state_from_tensors(std::span<const int32_t> tokens,
                                                  const StateTensorSource& source) const override;

 private:
  // Runs `tokens` at positions position_.. and advances position_. Writes logits for every token to
  // `all_logits` when given, and the last token's logits to logits_.
  void forward(std::span<const int32_t> tokens, float* all_logits);
  void forward_chunk(std::span<const int32_t> tokens, float* all_logits);
  void project(const WeightMatrix& w, const float* in, int64_t tokens, float* out) {
    products_.run(w, in, tokens, out, pool_);
  }

  std::shared_ptr<const Model> model_;
  ThreadPool pool_;
  bool bf16_kv_cache_ = false;
  CpuProducts products_;
  bool weights_in_huge_pages_ = false;
  int context_ = 0;
  int position_ = 0;
  std::vector<float> inv_freq_;     // [D/2] RoPE frequencies
  std::vector<float> k_cache_;      // [L, context, kv_heads, D]: k after norm and RoPE
  std::vector<float> v_cache_;      // [L, context, kv_heads, D]
  std::vector<float> logits_;       // [V]
};

}  // namespace megaqwen
