// cuBLAS on the emulated device (shim/cublas_v2.h): handles bound to emulated streams, and GemmEx for
// the types the CUDA engine uses (bf16 A and B, fp32 C and compute) with cuBLAS's column-major
// conventions and argument checks; the product runs as stream work, in fp32 (a fused multiply-add per
// term, k ascending). Device operands must lie inside live device allocations (a range outside one is
// an execution failure, where a GPU would fault).
#include <cublas_v2.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "simt/emulated_runtime.h"

struct cublasContext {
  cudaStream_t stream = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};

namespace {
float bf16_value(const void* base, size_t i) {
  uint16_t h;
  std::memcpy(&h, static_cast<const unsigned char*>(base) + 2 * i, 2);
  const uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
}  // namespace

cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  *handle = new cublasContext;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t handle, void* workspace, size_t bytes) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (bytes > 0 && !simt_runtime::device_range(workspace, bytes)) return CUBLAS_STATUS_INVALID_VALUE;
  handle->workspace = workspace;
  handle->workspace_bytes = bytes;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t) {
  return handle ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_INITIALIZED;
}
const char* cublasGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}

// C[m x n] = alpha op(A)[m x k] op(B)[k x n] + beta C, all column-major; op(X) = X (N) or X^T (T).
cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                            int k, const void* alpha, const void* A, cudaDataType Atype, int lda, const void* B,
                            cudaDataType Btype, int ldb, const void* beta, void* C, cudaDataType Ctype, int ldc,
                            cublasComputeType_t compute, cublasGemmAlgo_t) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (Atype != CUDA_R_16BF || Btype != CUDA_R_16BF || Ctype != CUDA_R_32F || compute != CUBLAS_COMPUTE_32F)
    return CUBLAS_STATUS_NOT_SUPPORTED;  // the emulation covers what the engine uses
  if (transa == CUBLAS_OP_C || transb == CUBLAS_OP_C) return CUBLAS_STATUS_NOT_SUPPORTED;
  const int a_rows = transa == CUBLAS_OP_N ? m : k, a_cols = transa == CUBLAS_OP_N ? k : m;
  const int b_rows = transb == CUBLAS_OP_N ? k : n, b_cols = transb == CUBLAS_OP_N ? n : k;
  if (m < 0 || n < 0 || k < 0 || lda < std::max(1, a_rows) || ldb < std::max(1, b_rows) || ldc < std::max(1, m))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
  auto extent = [](int rows, int cols, int ld, size_t elem) {
    return rows == 0 || cols == 0 ? 0 : (size_t(cols - 1) * size_t(ld) + size_t(rows)) * elem;
  };
  const size_t a_bytes = extent(a_rows, a_cols, lda, 2), b_bytes = extent(b_rows, b_cols, ldb, 2),
               c_bytes = extent(m, n, ldc, 4);
  if ((a_bytes && !simt_runtime::device_range(A, a_bytes)) || (b_bytes && !simt_runtime::device_range(B, b_bytes)) ||
      !simt_runtime::device_range(C, c_bytes)) {
    std::fprintf(stderr, "emulated cuBLAS: a GemmEx operand leaves its device allocation\n");
    return CUBLAS_STATUS_EXECUTION_FAILED;
  }
  // Host scalars (the default pointer mode) are read at the call.
  const float al = *static_cast<const float*>(alpha), be = *static_cast<const float*>(beta);
  simt_runtime::enqueue_work(handle->stream, "cublasGemmEx", [=] {
    float* c = static_cast<float*>(C);
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < m; ++i) {
        float acc = 0.0f;
        for (int p = 0; p < k; ++p) {
          const float a = transa == CUBLAS_OP_N ? bf16_value(A, size_t(p) * lda + i) : bf16_value(A, size_t(i) * lda + p);
          const float b = transb == CUBLAS_OP_N ? bf16_value(B, size_t(j) * ldb + p) : bf16_value(B, size_t(p) * ldb + j);
          acc = std::fma(a, b, acc);
        }
        float& out = c[size_t(j) * ldc + i];
        out = be == 0.0f ? al * acc : al * acc + be * out;  // beta 0: C is not read (it may hold NaN)
      }
  });
  return CUBLAS_STATUS_SUCCESS;
}
