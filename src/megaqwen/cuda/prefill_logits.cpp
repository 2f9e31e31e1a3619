#include "megaqwen/cuda/prefill_logits.h"

#include <algorithm>

#include "megaqwen/cuda/cuda_check.h"
#include "megaqwen/cuda/kernels.h"

namespace megaqwen::cuda {

void prefill_logits(CublasGemm& gemm, const PrefillLogitsArgs& a, DeviceBuffer<float>& rows_scratch,
                    cudaStream_t stream) {
  const size_t H = size_t(a.H), V = size_t(a.V);
  if (!a.all_logits) {
    if (!a.last_chunk) return;
    rms_norm_split(a.x + size_t(a.T - 1) * H, a.final_norm, 1, a.H, a.eps, a.hi, a.lo, stream);
    gemm.gemm_split(a.hi, a.lo, a.lm_head, a.last_logits, 1, a.V, a.H, 0.0f);
    return;
  }
  if (rows_scratch.size() == 0) rows_scratch.resize(size_t(kLogitRows) * V);
  for (int r0 = 0; r0 < a.T; r0 += kLogitRows) {
    const int rows = std::min(kLogitRows, a.T - r0);
    rms_norm_split(a.x + size_t(r0) * H, a.final_norm, rows, a.H, a.eps, a.hi, a.lo, stream);
    gemm.gemm_split(a.hi, a.lo, a.lm_head, rows_scratch.data(), rows, a.V, a.H, 0.0f);
    CUDA_CHECK(cudaMemcpyAsync(a.all_logits + size_t(r0) * V, rows_scratch.data(), size_t(rows) * V * sizeof(float),
                               cudaMemcpyDeviceToHost, stream));
    if (a.last_chunk && r0 + rows == a.T)
      CUDA_CHECK(cudaMemcpyAsync(a.last_logits, rows_scratch.data() + size_t(rows - 1) * V, V * sizeof(float),
                                 cudaMemcpyDeviceToDevice, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));  // rows_scratch is reused by the next pass
  }
}

}  // namespace megaqwen::cuda
