// KernelProfile: the GPU time of each kernel of the per-operator decode path, to find where a step's
// time goes (MEGAQWEN_PEROP_PROFILE=1; `megaqwen bench` prints the table and keeps it in its JSON).
// While a profile is active on a thread (KernelProfile::Scope), every launch_kernel (launch.cuh) on
// that thread records an event before and after its kernel; the scope's end waits for them and
// adds each launch's time, start event to end event, to its kernel's total. The step then runs
// without its CUDA graph (a graph hides its launches), so the profiled step is slower than the real
// one by the launch gaps the graph removes; each kernel's own time is what it costs in the graph.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace megaqwen::cuda {

class KernelProfile {
 public:
  KernelProfile() = default;
  ~KernelProfile();
  KernelProfile(const KernelProfile&) = delete;
  KernelProfile& operator=(const KernelProfile&) = delete;

  // Makes `profile` the thread's active profile for its lifetime; at its end waits for the launches
  // it saw (their end events, whatever their streams) and adds their times. A null profile: nothing.
  class Scope {
   public:
    explicit Scope(KernelProfile* profile);
    ~Scope() noexcept(false);
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    KernelProfile* profile_;
    KernelProfile* outer_;
  };

  // The launch hooks (launch.cuh), on the thread whose profile this is.
  void before_launch(const void* kernel, cudaStream_t stream);
  void after_launch(cudaStream_t stream);

  void count_step() { ++steps_; }  // one decode step ran under this profile
  uint64_t steps() const { return steps_; }
  uint64_t launches() const;  // kernel launches timed so far
  // The table: per kernel, launches and microseconds per step, share of the total, sorted by time;
  // empty before the first step.
  std::string report() const;

 private:
  void collect();  // waits for the pending launches, adds their times
  cudaEvent_t take_event();

  struct Pending {
    const void* kernel;
    cudaEvent_t start, end;
  };
  struct Total {
    std::string name;
    uint64_t launches = 0;
    double ms = 0;
    size_t first_seen = 0;  // order of first launch: ties in the table keep the step's order
  };
  std::vector<cudaEvent_t> events_;  // every event this profile created, reused from scope to scope
  size_t events_used_ = 0;
  std::vector<Pending> pending_;
  std::unordered_map<const void*, Total> totals_;
  uint64_t steps_ = 0;
};

// The profile the launches of this thread are timed into, or null (the normal case).
KernelProfile* active_kernel_profile();

// A kernel's name for the report: the runtime's name (cudaFuncGetName) demangled, without namespaces
// and parameter list; where the runtime has none, "kernel <address>".
std::string kernel_display_name(const void* kernel);
// A demangled kernel name as the report shows it: "void megaqwen::cuda::gemv_kernel<(megaqwen::cuda::
// GemvOut)1>(uint4 const*, ...)" -> "gemv_kernel<(GemvOut)1>" (no return type, namespaces, parameters).
std::string kernel_short_name(std::string demangled);

}  // namespace megaqwen::cuda
