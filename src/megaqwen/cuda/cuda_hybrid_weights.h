// CudaHybridWeights: a Qwen3.5 hybrid checkpoint's language model on the GPU, uploaded once, in the
// layout the CUDA kernels want (model/gpu_layout.h): linear weights bf16, projections that read the
// same input stacked into one matrix (one GEMV in decode; row ranges of it in prefill), SwiGLU rows
// interleaved, and every (1 + w) RMSNorm weight stored with its 1 folded in, so the Qwen3 norm
// kernels serve. The DeltaNet's A_log, dt_bias and gated-norm weight are fp32, its conv taps bf16.
#pragma once

#include <cstdint>
#include <vector>

#include "megaqwen/cuda/device_buffer.h"
#include "megaqwen/model/model.h"

namespace megaqwen::cuda {

struct CudaHybridLayerWeights {
  LayerType type = LayerType::LinearAttention;
  DeviceBuffer<float> input_norm;  // [H], 1 + w
  // Gated full attention (type FullAttention).
  DeviceBuffer<uint16_t> qgkv;  // [2Q + 2KV, H]: q | gate | k | v
  DeviceBuffer<float> q_norm;   // [D], 1 + w
  DeviceBuffer<float> k_norm;   // [D], 1 + w
  DeviceBuffer<uint16_t> o;     // [H, Q]
  // Gated DeltaNet (type LinearAttention).
  DeviceBuffer<uint16_t> in_proj;  // [C + Vd + 2nv, H]: qkv | z | b | a
  DeviceBuffer<uint16_t> conv;     // [C, K]
  DeviceBuffer<float> A_log;       // [nv]
  DeviceBuffer<float> dt_bias;     // [nv]
  DeviceBuffer<float> gated_norm;  // [dv], plain weight
  DeviceBuffer<uint16_t> out;      // [H, Vd]
  // SwiGLU MLP.
  DeviceBuffer<float> post_norm;   // [H], 1 + w
  DeviceBuffer<uint16_t> gate_up;  // [2I, H], rows interleaved (gate 2i, up 2i + 1)
  DeviceBuffer<uint16_t> down;     // [H, I]
};

struct CudaHybridWeights {
  DeviceBuffer<uint16_t> embed;  // [V, H]
  std::vector<CudaHybridLayerWeights> layers;
  DeviceBuffer<float> final_norm;      // [H], 1 + w
  DeviceBuffer<uint16_t> lm_head_own;  // [V, H]; empty when tied
  const uint16_t* lm_head = nullptr;   // lm_head_own or embed
  bool converted = false;              // some linear tensor was not bf16 and was rounded at upload
};

// Bytes upload_hybrid_weights will allocate on the device (for the memory check before allocating).
uint64_t hybrid_weight_device_bytes(const ModelConfig& c);

CudaHybridWeights upload_hybrid_weights(const Model& model);

}  // namespace megaqwen::cuda
