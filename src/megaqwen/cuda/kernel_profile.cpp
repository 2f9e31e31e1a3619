#include "megaqwen/cuda/kernel_profile.h"

#include <cxxabi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "megaqwen/cuda/cuda_check.h"

namespace megaqwen::cuda {

namespace {

thread_local KernelProfile* t_active = nullptr;

}  // namespace

std::string kernel_short_name(std::string name) {
  if (name.rfind("void ", 0) == 0) name.erase(0, 5);
  int depth = 0;
  for (size_t i = 0; i < name.size(); ++i) {
    const char ch = name[i];
    if (ch == '<') ++depth;
    else if (ch == '>') --depth;
    else if (ch == '(' && depth == 0 && i > 0) {
      name.resize(i);
      break;
    }
  }
  for (const char* ns : {"megaqwen::cuda::mk::", "megaqwen::cuda::", "megaqwen::"}) {
    for (size_t at; (at = name.find(ns)) != std::string::npos;) name.erase(at, std::char_traits<char>::length(ns));
  }
  return name;
}

KernelProfile* active_kernel_profile() { return t_active; }

std::string kernel_display_name(const void* kernel) {
  const char* mangled = nullptr;
  if (cudaFuncGetName(&mangled, kernel) != cudaSuccess || !mangled) {
    (void)cudaGetLastError();  // not a kernel the runtime knows (the emulator): not an error to keep
    char buf[32];
    std::snprintf(buf, sizeof buf, "kernel %p", kernel);
    return buf;
  }
  int status = 0;
  std::unique_ptr<char, decltype(&std::free)> demangled(abi::__cxa_demangle(mangled, nullptr, nullptr, &status),
                                                        &std::free);
  return kernel_short_name(status == 0 && demangled ? demangled.get() : mangled);
}

KernelProfile::~KernelProfile() {
  for (cudaEvent_t e : events_) cudaEventDestroy(e);
}

KernelProfile::Scope::Scope(KernelProfile* profile) : profile_(profile), outer_(t_active) {
  if (profile_) t_active = profile_;
}

KernelProfile::Scope::~Scope() noexcept(false) {
  if (!profile_) return;
  t_active = outer_;
  // While unwinding (a launch failed), leave the events: the next scope reuses them.
  if (std::uncaught_exceptions() > 0) {
    profile_->pending_.clear();
    profile_->events_used_ = 0;
    return;
  }
  profile_->collect();
}

cudaEvent_t KernelProfile::take_event() {
  if (events_used_ == events_.size()) {
    cudaEvent_t e = nullptr;
    CUDA_CHECK(cudaEventCreate(&e));
    events_.push_back(e);
  }
  return events_[events_used_++];
}

void KernelProfile::before_launch(const void* kernel, cudaStream_t stream) {
  Pending p{kernel, take_event(), take_event()};
  CUDA_CHECK(cudaEventRecord(p.start, stream));
  pending_.push_back(p);
}

void KernelProfile::after_launch(cudaStream_t stream) { CUDA_CHECK(cudaEventRecord(pending_.back().end, stream)); }

void KernelProfile::collect() {
  for (const Pending& p : pending_) {
    CUDA_CHECK(cudaEventSynchronize(p.end));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, p.start, p.end));
    auto [it, fresh] = totals_.try_emplace(p.kernel);
    Total& t = it->second;
    if (fresh) {
      t.name = kernel_display_name(p.kernel);
      t.first_seen = totals_.size();
    }
    ++t.launches;
    t.ms += double(ms);
  }
  pending_.clear();
  events_used_ = 0;
}

uint64_t KernelProfile::launches() const {
  uint64_t n = 0;
  for (const auto& [kernel, t] : totals_) n += t.launches;
  return n;
}

std::string KernelProfile::report() const {
  if (steps_ == 0 || totals_.empty()) return {};
  std::vector<const Total*> rows;
  double total_ms = 0;
  for (const auto& [kernel, t] : totals_) {
    rows.push_back(&t);
    total_ms += t.ms;
  }
  std::sort(rows.begin(), rows.end(), [](const Total* a, const Total* b) {
    return a->ms != b->ms ? a->ms > b->ms : a->first_seen < b->first_seen;
  });
  const double steps = double(steps_);
  std::string out = "per-op decode kernels (MEGAQWEN_PEROP_PROFILE, " + std::to_string(steps_) +
                    " steps without the CUDA graph; each kernel timed between two events, us per step):\n";
  char line[256];
  std::snprintf(line, sizeof line, "  %-56s %9s %10s %7s %10s\n", "kernel", "launches", "us", "share", "us/launch");
  out += line;
  uint64_t launches = 0;
  for (const Total* t : rows) {
    std::string name = t->name.size() > 56 ? t->name.substr(0, 53) + "..." : t->name;
    std::snprintf(line, sizeof line, "  %-56s %9.1f %10.1f %6.1f%% %10.2f\n", name.c_str(), double(t->launches) / steps,
                  1e3 * t->ms / steps, total_ms > 0 ? 100.0 * t->ms / total_ms : 0.0, 1e3 * t->ms / double(t->launches));
    out += line;
    launches += t->launches;
  }
  std::snprintf(line, sizeof line, "  %-56s %9.1f %10.1f %6.1f%%\n", "total", double(launches) / steps,
                1e3 * total_ms / steps, 100.0);
  out += line;
  return out;
}

}  // namespace megaqwen::cuda
