#include "megaqwen/cuda/step_graph.h"

#include "megaqwen/cuda/cuda_check.h"

namespace megaqwen::cuda {

StepGraph::~StepGraph() {
  if (exec_) cudaGraphExecDestroy(exec_);
}

void StepGraph::launch(cudaStream_t stream, const std::function<void()>& enqueue) {
  if (!exec_) {
    cudaGraph_t graph = nullptr;
    CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    try {
      enqueue();
    } catch (...) {
      cudaStreamEndCapture(stream, &graph);
      if (graph) cudaGraphDestroy(graph);
      throw;
    }
    CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    cudaGraphExec_t exec = nullptr;
    const cudaError_t status = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    CUDA_CHECK(status);
    exec_ = exec;
  }
  CUDA_CHECK(cudaGraphLaunch(exec_, stream));
}

}  // namespace megaqwen::cuda
