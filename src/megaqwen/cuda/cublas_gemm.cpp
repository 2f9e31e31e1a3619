#include "megaqwen/cuda/cublas_gemm.h"

#include <cublas_v2.h>
#include <dlfcn.h>

#include <mutex>

#include "megaqwen/cuda/cuda_check.h"
#include "megaqwen/cuda/device_buffer.h"
#include "megaqwen/util/error.h"

namespace megaqwen::cuda {

namespace {

// The cuBLAS entry points we use, resolved once. The types come from the headers (decltype), so a
// mismatch with cublas_api.h is a compile error, not a crash.
struct CublasApi {
  void* handle = nullptr;
  std::string path, error;
  decltype(&::cublasCreate_v2) create = nullptr;
  decltype(&::cublasDestroy_v2) destroy = nullptr;
  decltype(&::cublasSetStream_v2) set_stream = nullptr;
  decltype(&::cublasSetWorkspace_v2) set_workspace = nullptr;
  decltype(&::cublasSetMathMode) set_math_mode = nullptr;
  // cublasGemmEx is overloaded in C++ (a cublasComputeType_t and a legacy cudaDataType_t compute
  // argument); the static_cast below fails to compile if this signature is not one of them.
  using GemmEx = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                                    const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                                    cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
  GemmEx gemm_ex = nullptr;
  decltype(&::cublasGetStatusString) status_string = nullptr;
};

// Unevaluated, so the symbol is not referenced (cuBLAS is not linked).
static_assert(sizeof(static_cast<CublasApi::GemmEx>(&::cublasGemmEx)) == sizeof(void*));

const CublasApi& cublas_api() {
  static CublasApi api;
  static std::once_flag once;
  std::call_once(once, [] {
#if defined(MEGAQWEN_SIMT)
    // The emulated device (tests/simt) brings its own cuBLAS, linked in.
    api.handle = reinterpret_cast<void*>(&api);
    api.path = "emulated cuBLAS (tests/simt)";
    api.create = &::cublasCreate_v2;
    api.destroy = &::cublasDestroy_v2;
    api.set_stream = &::cublasSetStream_v2;
    api.set_workspace = &::cublasSetWorkspace_v2;
    api.set_math_mode = &::cublasSetMathMode;
    api.gemm_ex = static_cast<CublasApi::GemmEx>(&::cublasGemmEx);
    api.status_string = &::cublasGetStatusString;
    return;
#endif
    for (const char* name : {"libcublas.so.13", "libcublas.so.12", "libcublas.so"}) {
      api.handle = dlopen(name, RTLD_NOW | RTLD_LOCAL);
      if (api.handle) {
        api.path = name;
        break;
      }
      api.error += std::string(api.error.empty() ? "" : "; ") + dlerror();
    }
    if (!api.handle) return;
    auto resolve = [&](auto& fn, const char* symbol) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(api.handle, symbol));
      if (!fn) api.error += std::string(api.error.empty() ? "" : "; ") + "missing symbol " + symbol;
    };
    resolve(api.create, "cublasCreate_v2");
    resolve(api.destroy, "cublasDestroy_v2");
    resolve(api.set_stream, "cublasSetStream_v2");
    resolve(api.set_workspace, "cublasSetWorkspace_v2");
    resolve(api.set_math_mode, "cublasSetMathMode");
    resolve(api.gemm_ex, "cublasGemmEx");
    resolve(api.status_string, "cublasGetStatusString");
  });
  return api;
}

const CublasApi& require_cublas() {
  const CublasApi& api = cublas_api();
  if (!api.handle || !api.create || !api.destroy || !api.set_stream || !api.set_workspace || !api.set_math_mode ||
      !api.gemm_ex || !api.status_string)
    fail("the CUDA engine's prefill needs cuBLAS (libcublas.so.13), which could not be opened: {}. Put the folder "
         "holding it on LD_LIBRARY_PATH (e.g. PyTorch's site-packages/nvidia/cu13/lib)", api.error);
  return api;
}

void check(const CublasApi& api, cublasStatus_t status, const char* call) {
  if (status != CUBLAS_STATUS_SUCCESS) fail("cuBLAS error {} in {}", api.status_string(status), call);
}

constexpr size_t kWorkspaceBytes = size_t(32) << 20;  // cuBLAS's recommendation for Hopper

}  // namespace

bool cublas_loadable(std::string* why) {
  const CublasApi& api = cublas_api();
  const bool ok = api.handle && api.create && api.destroy && api.set_stream && api.set_workspace &&
                  api.set_math_mode && api.gemm_ex && api.status_string;
  if (!ok && why) *why = api.error;
  return ok;
}

struct CublasGemm::Impl {
  const CublasApi* api = nullptr;
  cublasHandle_t handle = nullptr;
  DeviceBuffer<uint8_t> workspace;
};

CublasGemm::CublasGemm(cudaStream_t stream) : impl_(std::make_unique<Impl>()) {
  impl_->api = &require_cublas();
  const CublasApi& api = *impl_->api;
  check(api, api.create(&impl_->handle), "cublasCreate");
  check(api, api.set_stream(impl_->handle, stream), "cublasSetStream");
  // An explicit workspace keeps cuBLAS from allocating during a call.
  impl_->workspace.resize(kWorkspaceBytes);
  check(api, api.set_workspace(impl_->handle, impl_->workspace.data(), kWorkspaceBytes), "cublasSetWorkspace");
  // Default math: bf16 inputs with fp32 accumulation and output (no reduced-precision reductions).
  check(api, api.set_math_mode(impl_->handle, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
}

CublasGemm::~CublasGemm() {
  if (impl_ && impl_->handle) impl_->api->destroy(impl_->handle);
}

std::string CublasGemm::library_path() const { return impl_->api->path; }

void CublasGemm::gemm(const uint16_t* A, const uint16_t* W, float* C, int T, int N, int K, float beta, int ldc) {
  if (T == 0 || N == 0) return;
  const CublasApi& api = *impl_->api;
  const float alpha = 1.0f;
  // Row-major C[T, N] = A[T, K] W[N, K]^T is, column-major, C^T[N, T] = W^T... : cuBLAS sees W as a
  // column-major [K, N] matrix (op T -> [N, K]) and A as column-major [K, T].
  check(api,
        api.gemm_ex(impl_->handle, CUBLAS_OP_T, CUBLAS_OP_N, N, T, K, &alpha, W, CUDA_R_16BF, K, A, CUDA_R_16BF, K,
                    &beta, C, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
        "cublasGemmEx");
}

void CublasGemm::gemm_split(const uint16_t* A_hi, const uint16_t* A_lo, const uint16_t* W, float* C, int T, int N,
                            int K, float beta) {
  gemm(A_hi, W, C, T, N, K, beta, N);
  if (A_lo) gemm(A_lo, W, C, T, N, K, 1.0f, N);
}

}  // namespace megaqwen::cuda
