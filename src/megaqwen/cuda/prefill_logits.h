// The end of a prefill chunk, shared by both CUDA engines: final RMSNorm and LM head over the rows
// whose logits are wanted. With `all_logits` (host [T, V]), every row of the chunk in passes of
// kLogitRows (the logits of a whole chunk at once would be T x 600 KB); otherwise only the chunk's
// last row, and only for the prompt's last chunk. Either way `last_logits` (device [V]) ends up with
// the logits of the prompt's last token when `last_chunk`.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "megaqwen/cuda/cublas_gemm.h"
#include "megaqwen/cuda/device_buffer.h"

namespace megaqwen::cuda {

constexpr int kLogitRows = 128;  // rows of the LM head per pass when every row's logits are wanted

struct PrefillLogitsArgs {
  const float* x;  // [T, H] residual stream after the last layer
  int T, H, V;
  const float* final_norm;  // [H], the scale as the norm kernel applies it
  float eps;
  const uint16_t* lm_head;  // [V, H] bf16
  uint16_t* hi;             // [>= min(T, kLogitRows), H] scratch for the bf16 split
  uint16_t* lo;             // same, or null (bf16-only activations)
  float* all_logits;        // host [T, V] or null
  bool last_chunk;
  float* last_logits;  // device [V]
};

// rows_scratch is resized to [kLogitRows, V] on first use with all_logits. Synchronizes the stream
// when it copies to the host.
void prefill_logits(CublasGemm& gemm, const PrefillLogitsArgs& a, DeviceBuffer<float>& rows_scratch,
                    cudaStream_t stream);

}  // namespace megaqwen::cuda
