#include "megaqwen/engine/create_engine.h"

#include <cstdio>
#include <cstdlib>
#include <string>

#include "megaqwen/engine/cpu_amx_matmul.h"
#include "megaqwen/engine/cpu_engine.h"
#include "megaqwen/engine/cpu_qwen35_engine.h"
#include "megaqwen/util/error.h"

#ifdef MEGAQWEN_HAVE_CUDA
#include "megaqwen/cuda/cublas_gemm.h"
#include "megaqwen/cuda/cuda_check.h"
#include "megaqwen/cuda/cuda_engine.h"
#include "megaqwen/cuda/cuda_hybrid_engine.h"
#endif

namespace megaqwen {

bool cuda_available(std::string* why) {
#ifdef MEGAQWEN_HAVE_CUDA
  if (!cuda::device_usable(why)) return false;
  std::string missing;
  if (!cuda::cublas_loadable(&missing)) {  // the CUDA engine's prefill needs it (opened at run time)
    if (why) *why = "cuBLAS could not be opened (" + missing + "); put libcublas.so.13's folder on LD_LIBRARY_PATH";
    return false;
  }
  return true;
#else
  if (why) *why = "this build of megaqwen has no CUDA engine (nvcc was not found at configure time)";
  return false;
#endif
}

std::unique_ptr<Engine> create_engine(std::shared_ptr<const Model> model, const EngineOptions& options) {
  const std::string& device = options.device;
  if (device != "auto" && device != "cpu" && device != "cuda")
    fail("unknown device '{}'; choose auto, cpu or cuda", device);
  const bool hybrid = model->config.is_hybrid();  // Qwen3.5: Gated DeltaNet + gated attention
  std::string why;
  const bool want_cuda = device == "cuda" || (device == "auto" && cuda_available(&why));
  if (device == "cuda" && !cuda_available(&why)) fail("--device cuda: {}", why);
#ifdef MEGAQWEN_HAVE_CUDA
  if (want_cuda) {
    cuda::CudaEngineOptions o;
    o.context = options.context;
    o.decode_kernel = cuda::parse_decode_kernel(options.decode_kernel);
    // MEGAQWEN_PREFILL_ATTENTION=fp32 picks the exact CUDA-core prefill attention (tc: the default).
    if (const char* env = std::getenv("MEGAQWEN_PREFILL_ATTENTION"); env && *env) {
      const std::string v = env;
      if (v != "fp32" && v != "tc") fail("MEGAQWEN_PREFILL_ATTENTION={}: choose fp32 or tc", v);
      o.tensor_core_prefill = v == "tc";
    }
    // MEGAQWEN_DELTANET_PREFILL=sequential runs Qwen3.5's delta rule token by token in prefill.
    if (const char* env = std::getenv("MEGAQWEN_DELTANET_PREFILL"); env && *env) {
      const std::string v = env;
      if (v != "chunked" && v != "sequential") fail("MEGAQWEN_DELTANET_PREFILL={}: choose chunked or sequential", v);
      o.chunked_delta_rule = v == "chunked";
    }
    if (hybrid) return std::make_unique<cuda::CudaHybridEngine>(std::move(model), o);
    return std::make_unique<cuda::CudaEngine>(std::move(model), o);
  }
#else
  (void)want_cuda;
#endif
  if (device == "auto" && !options.quiet)
    std::fprintf(stderr, "megaqwen: no usable GPU (%s); running on the CPU\n", why.c_str());
  CpuEngineOptions cpu;
  cpu.context = options.context;
  cpu.threads = options.threads;
  cpu.bf16_kv_cache = options.bf16_kv_cache;
  cpu.amx_prefill = options.amx_prefill;
  cpu.huge_pages = options.huge_pages;
  std::string no_amx;
  if (options.amx_prefill && !cpu::amx_available(&no_amx) && !options.quiet)
    std::fprintf(stderr, "megaqwen: --amx-prefill needs AMX (%s); prefill stays fp32\n", no_amx.c_str());
  if (hybrid) return std::make_unique<CpuHybridEngine>(std::move(model), cpu);
  return std::make_unique<CpuEngine>(std::move(model), cpu);
}

}  // namespace megaqwen
