#include "megaqwen/cuda/device_setup.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>

#include "megaqwen/cuda/cuda_check.h"
#include "megaqwen/cuda/kernels.h"
#include "megaqwen/cuda/programmatic_launch.h"
#include "megaqwen/util/error.h"

namespace megaqwen::cuda {

namespace {
double gib(uint64_t bytes) { return double(bytes) / double(1ull << 30); }
constexpr int kDefaultContext = 4096;
std::atomic<bool> g_programmatic_launch{false};
}  // namespace

void set_programmatic_launch(bool on) { g_programmatic_launch.store(on, std::memory_order_relaxed); }
bool programmatic_launch() { return g_programmatic_launch.load(std::memory_order_relaxed); }

bool parse_programmatic_launch(const std::string& value) {
  if (value != "on" && value != "off")
    fail("MEGAQWEN_PDL must be 'on' (kernels launched while their predecessor finishes: programmatic dependent "
         "launch, sm_90 and newer) or 'off'; got '{}'",
         value);
  return value == "on";
}

int resolve_cuda_context(const ModelConfig& c, int requested) {
  const int context = requested > 0 ? requested : std::min(c.context_limit(), kDefaultContext);
  c.check_context(context);
  return context;
}

cudaDeviceProp open_cuda_device(int device, std::string* name) {
  std::string why;
  if (!device_usable(&why, device)) fail("--device cuda: {}", why);
  CUDA_CHECK(cudaSetDevice(device));
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  bool pdl = false;
  if (const char* env = std::getenv("MEGAQWEN_PDL"); env && *env) pdl = parse_programmatic_launch(env) && prop.major >= 9;
  set_programmatic_launch(pdl);
  if (name)
    *name = "cuda:" + std::to_string(device) + " (" + prop.name + ", sm_" + std::to_string(prop.major) +
            std::to_string(prop.minor) + ", " + std::to_string(prop.multiProcessorCount) + " SMs, " +
            std::to_string(int(std::lround(gib(prop.totalGlobalMem)))) + " GiB" +
            (pdl ? ", programmatic dependent launch" : "") + ")";
  return prop;
}

void check_prefill_attention_fits(const cudaDeviceProp& prop, int head_dim, bool tensor_cores) {
  const size_t need = tensor_cores ? attention_prefill_tc_smem_bytes(head_dim) : attention_prefill_smem_bytes(head_dim);
  if (need > size_t(prop.sharedMemPerBlockOptin))
    fail("{} allows {} bytes of shared memory per block; the {} prefill attention for head_dim {} needs {}", prop.name,
         prop.sharedMemPerBlockOptin, tensor_cores ? "tensor-core" : "fp32", head_dim, need);
}

void check_memory_fits(const cudaDeviceProp& prop, const CudaMemoryPlan& plan, int context) {
  size_t free_bytes = 0, total_bytes = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  if (plan.total() <= free_bytes) return;
  const std::string states =
      plan.states ? fmt::format(", recurrent states and snapshots {:.2f}", gib(plan.states)) : std::string();
  fail(
      "the model does not fit on {}: it needs {:.2f} GiB (weights {:.2f}, KV cache {:.2f} for {} tokens{}, buffers "
      "{:.2f}, reserve {:.2f}) but {:.2f} GiB of {:.2f} are free; ask for a smaller --ctx",
      prop.name, gib(plan.total()), gib(plan.weights), gib(plan.kv_cache), context, states, gib(plan.activations),
      gib(plan.reserve), gib(free_bytes), gib(total_bytes));
}

uint64_t device_memory_free() {
  size_t free_bytes = 0, total_bytes = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  return free_bytes;
}

}  // namespace megaqwen::cuda
