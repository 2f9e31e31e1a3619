// MegakernelDecoder: what both CUDA engines (CudaEngine, CudaHybridEngine) do with the decode
// megakernel: choose it (the DecodeKernel option, MEGAQWEN_DECODE), say what decodes or why not the
// megakernel, and run whole stretches of decode steps in it, drawing as the per-operator device
// sampler would (Engine::generate_on_device).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "megaqwen/engine/engine.h"
#include "megaqwen/model/config.h"
#include "megaqwen/sampling/sampler.h"

namespace megaqwen::cuda {

namespace mk {
class Megakernel;
struct Binding;
}  // namespace mk

// Which kernel runs decode steps that Generator hands over whole (Engine::generate_on_device):
// Auto takes the megakernel where it applies (a compiled model shape, sm_90+, one CTA per SM fits)
// and the per-operator path otherwise; Megakernel fails at construction where it does not apply.
// The environment variable MEGAQWEN_DECODE=auto|megakernel|per-op overrides Auto.
enum class DecodeKernel { Auto, Megakernel, PerOp };
DecodeKernel parse_decode_kernel(const std::string& name);  // "auto", "megakernel", "per-op"

class MegakernelDecoder {
 public:
  MegakernelDecoder();  // per-operator decode
  // Chooses by `requested` and builds the megakernel over bind()'s buffers where it applies.
  MegakernelDecoder(DecodeKernel requested, const ModelConfig& config, int device, cudaStream_t stream,
                    const std::function<mk::Binding()>& bind);
  ~MegakernelDecoder();
  MegakernelDecoder(MegakernelDecoder&&) noexcept;
  MegakernelDecoder& operator=(MegakernelDecoder&&) noexcept;

  bool active() const { return megakernel_ != nullptr; }
  const mk::Megakernel* megakernel() const { return megakernel_.get(); }
  const std::string& note() const { return note_; }  // what decodes, or why not the megakernel
  std::string device_suffix() const;                  // ", decode: megakernel" or ", decode: per-op"
  std::string profile() const;                        // the kernel's timing report (timing builds), or empty
  // Why generate() would refuse these params and logprobs (empty: it runs them; the note when inactive).
  std::string unsupported_reason(const SamplingParams& params, int logprobs = kNoLogprobs) const;
  // Whether generate_on_device should hand this run to the kernel.
  bool serves(const SamplingParams& params, std::span<const int32_t> eos_ids, int logprobs) const;
  // Feeds `token` at `position`, then every drawn token but the last, for at most max_tokens draws
  // (the caller keeps them within the context), scoring each with `logprobs` alternatives (or not:
  // kNoLogprobs). Before each on_draw call, appended(fed) reports the token that draw appended to
  // the cache (fed first, then the drawn ones), also when on_draw throws. logits_out: device
  // [max_tokens, V] raw logits of every step (tests), or null.
  int generate(int position, int32_t token, int max_tokens, std::span<const int32_t> eos_ids,
               const SamplingParams& params, std::span<const int32_t> history, int logprobs, const DrawSink& on_draw,
               float* logits_out, const std::function<void(int32_t)>& appended);

 private:
  std::unique_ptr<mk::Megakernel> megakernel_;
  std::string note_ = "per-op";
  int vocab_ = 0;
};

}  // namespace megaqwen::cuda
