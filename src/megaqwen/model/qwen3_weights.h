// Qwen3Weights: typed, shape-checked views of a Qwen3 checkpoint's tensors (no copies).
// Linear weights are [out, in] row-major, as Hugging Face stores them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "megaqwen/model/checkpoint.h"
#include "megaqwen/model/config.h"

namespace megaqwen {

struct WeightMatrix {  // [rows, cols] row-major in `dtype`
  const uint8_t* data = nullptr;
  DType dtype = DType::BF16;
  int64_t rows = 0, cols = 0;
  const std::string* name = nullptr;
  uint64_t byte_size() const { return uint64_t(rows) * uint64_t(cols) * dtype_size(dtype); }
};

struct WeightVector {  // [size] in `dtype`
  const uint8_t* data = nullptr;
  DType dtype = DType::BF16;
  int64_t size = 0;
  uint64_t byte_size() const { return uint64_t(size) * dtype_size(dtype); }
};

struct Qwen3LayerWeights {
  WeightVector input_norm;  // [H]
  WeightMatrix q;           // [heads*D, H]
  WeightMatrix k, v;        // [kv_heads*D, H]
  WeightVector q_norm;      // [D]
  WeightVector k_norm;      // [D]
  WeightMatrix o;           // [H, heads*D]
  WeightVector post_norm;   // [H]
  WeightMatrix gate, up;    // [I, H]
  WeightMatrix down;        // [H, I]
};

struct Qwen3Weights {
  WeightMatrix embed;       // [V, H]
  std::vector<Qwen3LayerWeights> layers;
  WeightVector final_norm;  // [H]
  WeightMatrix lm_head;     // [V, H]; the embedding itself when tied
  uint64_t bytes_per_token() const;  // weight bytes one decode step reads (embedding: one row)
};

// The binding steps every weight binder shares: the tensor must be present, BF16, F16 or F32, of
// exactly `shape`, and aligned for its dtype; the error names the tensor.
const TensorView& bind_tensor(const Checkpoint& checkpoint, const std::string& name, std::vector<int64_t> shape);
WeightMatrix bind_matrix(const Checkpoint& checkpoint, const std::string& name, int64_t rows, int64_t cols);
WeightVector bind_vector(const Checkpoint& checkpoint, const std::string& name, int64_t size);

// Binds every expected tensor, checking presence, dtype (BF16, F16 or F32) and exact shape; the error
// names the tensor. `checkpoint` must outlive the result.
Qwen3Weights bind_qwen3_weights(const Checkpoint& checkpoint, const ModelConfig& config);

}  // namespace megaqwen
