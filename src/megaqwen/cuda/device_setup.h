// What both CUDA engines do before allocating: pick and check the device, describe it, and compare
// the engine's memory plan with the device's free memory, failing with the numbers when it does not
// fit (so a too-large --ctx is an error naming sizes, not an allocation failure halfway through).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "megaqwen/model/config.h"

namespace megaqwen::cuda {

// The KV cache capacity for a requested context (0: min(context limit, 4096)); fails
// beyond the model's context limit (ModelConfig::context_limit).
int resolve_cuda_context(const ModelConfig& c, int requested);

// Bytes an engine needs on the device.
struct CudaMemoryPlan {
  uint64_t weights = 0, kv_cache = 0, states = 0, activations = 0, reserve = 0;  // states: recurrent + snapshots
  uint64_t total() const { return weights + kv_cache + states + activations + reserve; }
};

// cuBLAS workspace, CUDA context, graph, allocator slack.
constexpr uint64_t kDeviceReserveBytes = 512ull << 20;

// Makes `device` current after checking that it is usable (fails naming why not); `name` gets its
// description, e.g. "cuda:0 (NVIDIA H200, sm_90, 132 SMs, 140 GiB)". Sets launch.cuh's programmatic
// launch from MEGAQWEN_PDL (on / off, default off; on is honoured on sm_90 and newer, and named in
// the description).
cudaDeviceProp open_cuda_device(int device, std::string* name);

// MEGAQWEN_PDL's value: "on" or "off"; throws megaqwen::Error naming the variable otherwise.
bool parse_programmatic_launch(const std::string& value);

// Fails when the prefill attention's shared memory for head_dim (the tensor-core kernel's or the fp32
// one's) exceeds the device's per-block limit.
void check_prefill_attention_fits(const cudaDeviceProp& prop, int head_dim, bool tensor_cores);

// Fails with the plan's parts and the device's free memory when the plan does not fit.
void check_memory_fits(const cudaDeviceProp& prop, const CudaMemoryPlan& plan, int context);

// Free memory on the current device now (the prompt cache's check before a saved sequence).
uint64_t device_memory_free();

}  // namespace megaqwen::cuda
