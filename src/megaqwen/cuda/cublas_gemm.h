// Batched-prefill GEMMs through cuBLAS: C [T, N] fp32 (+)= A [T, K] bf16 x W^T, W [N, K] bf16 as
// stored (a Linear weight, row-major [out, in]), fp32 accumulation (CUBLAS_COMPUTE_32F).
//
// cuBLAS is opened at run time (dlopen of libcublas.so.13, then .so) rather than linked: the CUDA
// runtime is static, and the GPU machine has cuBLAS only inside PyTorch's wheels, so binaries built
// here must start there (and the CPU-only paths must work on machines with no cuBLAS at all). The
// error when it cannot be found names the library and LD_LIBRARY_PATH. scripts/gpu-check.sh puts the
// directory of PyTorch's copy on LD_LIBRARY_PATH.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>

namespace megaqwen::cuda {

class CublasGemm {
 public:
  explicit CublasGemm(cudaStream_t stream);
  ~CublasGemm();
  CublasGemm(const CublasGemm&) = delete;
  CublasGemm& operator=(const CublasGemm&) = delete;

  // C[t, n] = beta * C[t, n] + sum_k A[t, k] * W[n, k], for t < T, n < N. C row stride ldc (>= N).
  void gemm(const uint16_t* A, const uint16_t* W, float* C, int T, int N, int K, float beta, int ldc);

  // The bf16-split product: C (+)= (A_hi + A_lo) W^T as two GEMMs (A_lo may be null: one GEMM).
  void gemm_split(const uint16_t* A_hi, const uint16_t* A_lo, const uint16_t* W, float* C, int T, int N, int K,
                  float beta);

  std::string library_path() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Whether cuBLAS can be opened; `why` says which names were tried.
bool cublas_loadable(std::string* why);

}  // namespace megaqwen::cuda
