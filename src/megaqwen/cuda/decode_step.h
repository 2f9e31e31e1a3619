// DecodeStep: the host side of one decode step, shared by both CUDA engines. The step reads what
// changes between steps (the token and its position) from a 2-int device buffer written before each
// launch, so its fixed kernel sequence is captured into a CUDA graph the first time it runs and
// replayed after that (one launch instead of a few hundred). It also brings logits back to the host
// (pinned memory, so the copy is asynchronous until the one synchronization). With
// MEGAQWEN_PEROP_PROFILE=1 it runs the step without the graph, each kernel timed (kernel_profile.h).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <utility>

#include "megaqwen/cuda/device_buffer.h"
#include "megaqwen/cuda/kernel_profile.h"

namespace megaqwen::cuda {

class DecodeStep {
 public:
  DecodeStep() = default;
  explicit DecodeStep(size_t vocab_size);
  ~DecodeStep();
  DecodeStep(const DecodeStep&) = delete;
  DecodeStep& operator=(const DecodeStep&) = delete;
  DecodeStep(DecodeStep&& other) noexcept
      : io_(std::move(other.io_)),
        host_logits_(std::move(other.host_logits_)),
        exec_(std::exchange(other.exec_, nullptr)),
        profile_(std::move(other.profile_)) {}
  DecodeStep& operator=(DecodeStep&& other) noexcept {
    std::swap(io_, other.io_);
    std::swap(host_logits_, other.host_logits_);
    std::swap(exec_, other.exec_);
    std::swap(profile_, other.profile_);
    return *this;
  }

  // Where the step's kernels read the token and its position.
  const int32_t* token() const { return io_.data(); }
  const int32_t* position() const { return io_.data() + 1; }

  // Writes token and position, then runs the step on `stream`: the graph captured from `enqueue`
  // (which puts the step's kernels on `stream`) on first use, or `enqueue` itself without a graph.
  // A capture or instantiation that fails throws and keeps no graph, so the next call tries again.
  void run(cudaStream_t stream, int32_t token, int position, bool use_graph, const std::function<void()>& enqueue);

  // logits [V] (device, written by work on `stream`) on the host, valid until the next call.
  std::span<const float> logits_to_host(const float* logits, cudaStream_t stream);

  // MEGAQWEN_PEROP_PROFILE: the per-kernel times of the steps run so far (null: not profiling). The
  // engines also time their device sampling into it (KernelProfile::Scope).
  KernelProfile* profile() const { return profile_.get(); }
  std::string profile_report() const { return profile_ ? profile_->report() : std::string(); }

 private:
  DeviceBuffer<int32_t> io_;         // [2]: token, position
  PinnedBuffer<float> host_logits_;  // [V]
  cudaGraphExec_t exec_ = nullptr;
  std::unique_ptr<KernelProfile> profile_;
};

}  // namespace megaqwen::cuda
