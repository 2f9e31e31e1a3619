// CudaWeights: a Qwen3 checkpoint's weights on the GPU, uploaded once.
//
// Linear weights stay bf16 (as published checkpoints store them); an f16 or f32 checkpoint is
// converted to bf16 on the host during upload, which the CPU reference does not do, so such a model
// matches the CPU engine only to bf16 precision. The layout (stacked qkv, interleaved gate/up) is
// model/gpu_layout.h's.
#pragma once

#include <cstdint>
#include <vector>

#include "megaqwen/cuda/device_buffer.h"
#include "megaqwen/model/model.h"

namespace megaqwen::cuda {

struct CudaLayerWeights {
  DeviceBuffer<float> input_norm;    // [H]
  DeviceBuffer<uint16_t> qkv;        // [Q + 2KV, H] bf16
  DeviceBuffer<float> q_norm;        // [D]
  DeviceBuffer<float> k_norm;        // [D]
  DeviceBuffer<uint16_t> o;          // [H, Q] bf16
  DeviceBuffer<float> post_norm;     // [H]
  DeviceBuffer<uint16_t> gate_up;    // [2I, H] bf16, rows interleaved (gate 2i, up 2i + 1)
  DeviceBuffer<uint16_t> down;       // [H, I] bf16
};

struct CudaWeights {
  DeviceBuffer<uint16_t> embed;      // [V, H] bf16
  std::vector<CudaLayerWeights> layers;
  DeviceBuffer<float> final_norm;    // [H]
  DeviceBuffer<uint16_t> lm_head_own;  // [V, H] bf16; empty when tied
  const uint16_t* lm_head = nullptr;   // lm_head_own or embed
  bool converted = false;            // some tensor was not bf16 and was converted at upload

  uint64_t device_bytes() const;
};

// Bytes upload_weights will allocate on the device (for the memory check before allocating).
uint64_t weight_device_bytes(const Model& model);

CudaWeights upload_weights(const Model& model);

// One tensor to the device (synchronous copies; the engines synchronize the device before first use).
DeviceBuffer<uint16_t> upload_bf16(const std::vector<uint16_t>& host);
DeviceBuffer<uint16_t> upload_matrix(const WeightMatrix& w);  // as bf16, converted if stored otherwise
DeviceBuffer<float> upload_f32(const std::vector<float>& host);
DeviceBuffer<float> upload_vector(const WeightVector& w);     // as fp32

}  // namespace megaqwen::cuda
