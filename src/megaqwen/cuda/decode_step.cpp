#include "megaqwen/cuda/decode_step.h"

#include <cstdlib>
#include <string>

#include "megaqwen/cuda/cuda_check.h"

namespace megaqwen::cuda {

DecodeStep::DecodeStep(size_t vocab_size) : io_(2), host_logits_(vocab_size) {
  if (const char* env = std::getenv("MEGAQWEN_PEROP_PROFILE"); env && *env && std::string(env) != "0")
    profile_ = std::make_unique<KernelProfile>();
}

DecodeStep::~DecodeStep() {
  if (exec_) cudaGraphExecDestroy(exec_);
}

void DecodeStep::run(cudaStream_t stream, int32_t token, int position, bool use_graph,
                     const std::function<void()>& enqueue) {
  const int32_t in[2] = {token, position};  // pageable: staged before cudaMemcpyAsync returns
  CUDA_CHECK(cudaMemcpyAsync(io_.data(), in, sizeof in, cudaMemcpyHostToDevice, stream));
  if (profile_) {  // eager, each kernel between two events (the graph would hide the launches)
    KernelProfile::Scope scope(profile_.get());
    enqueue();
    profile_->count_step();
    return;
  }
  if (!use_graph) {
    enqueue();
    return;
  }
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

std::span<const float> DecodeStep::logits_to_host(const float* logits, cudaStream_t stream) {
  CUDA_CHECK(cudaMemcpyAsync(host_logits_.data(), logits, host_logits_.size() * sizeof(float), cudaMemcpyDeviceToHost,
                             stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  return {host_logits_.data(), host_logits_.size()};
}

}  // namespace megaqwen::cuda
