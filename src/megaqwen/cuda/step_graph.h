// StepGraph: a decode step's fixed kernel sequence, captured from a stream into a CUDA graph the
// first time it runs and replayed after that (one launch instead of a few hundred). The sequence must
// read everything that changes between steps (token, position) from device memory, so one graph
// serves every step. Move-only; the graph is destroyed with the object.
#pragma once

#include <cuda_runtime_api.h>

#include <functional>
#include <utility>

namespace megaqwen::cuda {

class StepGraph {
 public:
  StepGraph() = default;
  ~StepGraph();
  StepGraph(const StepGraph&) = delete;
  StepGraph& operator=(const StepGraph&) = delete;
  StepGraph(StepGraph&& other) noexcept : exec_(std::exchange(other.exec_, nullptr)) {}
  StepGraph& operator=(StepGraph&& other) noexcept {
    std::swap(exec_, other.exec_);
    return *this;
  }

  // Launches the graph on `stream`, capturing `enqueue` (which puts the step's kernels on `stream`)
  // first if there is none yet. A capture or instantiation that fails throws and keeps no graph, so
  // the next call tries again.
  void launch(cudaStream_t stream, const std::function<void()>& enqueue);

 private:
  cudaGraphExec_t exec_ = nullptr;
};

}  // namespace megaqwen::cuda
