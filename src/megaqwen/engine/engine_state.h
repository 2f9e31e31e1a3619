// EngineState: a copy of the sequence an engine's cache holds (every KV row up to position() and any
// recurrent state), made by Engine::save_state() and put back by restore_state().
// The server's prompt cache keeps such copies of the conversations it has set aside, so a client who
// comes back after another client's request does not pay for its whole prompt again. Copying a cache
// costs a memcpy of its rows (on a GPU, a device-to-device copy), far less than prefilling the tokens.
//
// Each engine derives its own state type; restore_state() takes only its own kind, from the same
// loaded model, and fails naming the mismatch otherwise.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace megaqwen {

struct Model;

// Where an engine's saved states live: host memory (the CPU engines), or device memory (the CUDA
// engines, where a device-to-device copy costs microseconds and a trip over PCIe into fresh host pages
// could cost as much as prefilling the tokens again).
enum class StateMemory { Host, Device };
inline const char* state_memory_name(StateMemory m) { return m == StateMemory::Host ? "host" : "device"; }

class EngineState {
 public:
  virtual ~EngineState() = default;
  int position() const { return position_; }  // tokens the saved cache held
  virtual uint64_t bytes() const = 0;          // memory this copy holds (the engine's state_memory())
  const Model* model() const { return model_; }

 protected:
  EngineState(const Model* model, int position) : model_(model), position_(position) {}

 private:
  const Model* model_;
  int position_;
};

// The first `rows` rows of every layer of a cache laid out [layers, context, row elements], packed
// into [layers, rows, row elements] (the empty tail of the context is not copied).
template <class T>
std::vector<T> pack_cache_rows(const std::vector<T>& cache, size_t layers, size_t context, size_t row, size_t rows) {
  std::vector<T> out(layers * rows * row);
  for (size_t l = 0; l < layers; ++l)
    std::copy_n(cache.begin() + ptrdiff_t(l * context * row), rows * row, out.begin() + ptrdiff_t(l * rows * row));
  return out;
}

// The inverse: packed rows back into their places in the cache.
template <class T>
void unpack_cache_rows(const std::vector<T>& packed, size_t layers, size_t context, size_t row, size_t rows,
                       std::vector<T>& cache) {
  for (size_t l = 0; l < layers; ++l)
    std::copy_n(packed.begin() + ptrdiff_t(l * rows * row), rows * row, cache.begin() + ptrdiff_t(l * context * row));
}

}  // namespace megaqwen
