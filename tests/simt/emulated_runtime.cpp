// The emulated CUDA runtime (shim/cuda_runtime_api.h): allocations known by range, streams as queues
// that run when the host waits (or, in the concurrent mode, on a worker thread per created stream),
// graphs as recorded queues, kernels run by the simt emulator one at a time. A mutex guards the state.
#include "simt/emulated_runtime.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace simt_runtime {
namespace {

enum class Kind { Device, Pinned, Mapped };
struct Allocation {
  size_t bytes = 0;
  Kind kind = Kind::Device;
};

using Work = std::function<void()>;

struct Graph {
  std::vector<Work> nodes;
  bool invalid = false;
};

struct Stream {
  bool blocking = true;  // waits for / is waited for by the legacy stream
  std::deque<Work> queue;
  Graph* capture = nullptr;  // while capturing: work is recorded, not queued
  // Concurrent mode: a worker runs the queue as work arrives; `busy` while it runs an item.
  std::thread worker;
  bool busy = false, quit = false;
};

struct State {
  std::recursive_mutex mutex;
  DeviceConfig config;
  std::map<uintptr_t, Allocation> allocations;  // by base address
  uint64_t device_bytes = 0;
  Stream legacy;  // stream 0
  std::vector<std::unique_ptr<Stream>> streams;
  std::map<const void*, int> max_dynamic_smem;  // cudaFuncAttributeMaxDynamicSharedMemorySize per kernel
  bool fault = false;                           // a kernel faulted: the context is unusable (sticky)
  int captures = 0;                             // streams capturing now
  Stats stats;
  std::mutex kernel_mutex;                      // one emulated kernel at a time (any thread)
};

State& state() {
  static State* s = [] {
    State* st = new State;  // never destroyed: static buffers may be freed after main
    const char* env = std::getenv("MEGAQWEN_EMULATED_STREAMS");
    st->config.concurrent = env && std::string(env) == "concurrent";
    if (const char* sched = std::getenv("MEGAQWEN_EMULATED_SCHEDULE"); sched && std::string(sched) == "random") {
      st->config.kernel_options.threads = simt::Order::Random;
      st->config.kernel_options.blocks = simt::Order::Random;
      st->config.kernel_options.skew = 0.5;
      st->config.kernel_options.seed = 7;
    }
    return st;
  }();
  return *s;
}

thread_local cudaError_t t_last_error = cudaSuccess;

cudaError_t fail(cudaError_t e) {
  t_last_error = e;
  return e;
}

constexpr size_t kDefaultDynamicSmem = 48 * 1024;

// The live allocation holding [p, p + bytes), or null.
const Allocation* find(const void* p, size_t bytes, uintptr_t* base = nullptr) {
  State& s = state();
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  auto it = s.allocations.upper_bound(a);
  if (it == s.allocations.begin()) return nullptr;
  --it;
  if (a < it->first || a + bytes > it->first + it->second.bytes || a + bytes < a) return nullptr;
  if (base) *base = it->first;
  return &it->second;
}
bool is_device(const void* p, size_t bytes) {
  const Allocation* a = find(p, bytes);
  return a && (a->kind == Kind::Device || a->kind == Kind::Mapped);
}
bool is_pinned(const void* p, size_t bytes) {
  const Allocation* a = find(p, bytes);
  return a && (a->kind == Kind::Pinned || a->kind == Kind::Mapped);
}

Stream* stream_of(cudaStream_t handle) {
  State& s = state();
  if (!handle) return &s.legacy;
  for (auto& st : s.streams)
    if (reinterpret_cast<cudaStream_t>(st.get()) == handle) return st.get();
  return nullptr;
}

// Runs one item of work; a kernel that throws faults the context (sticky).
void run_work(Work& w) {
  try {
    w();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "emulated CUDA device: a kernel faulted: %s\n", e.what());
    std::lock_guard lock(state().mutex);
    state().fault = true;
  }
}

// Concurrent mode: a created stream's worker thread.
void worker_loop(Stream* st) {
  State& s = state();
  std::unique_lock lock(s.mutex);
  for (;;) {
    while (st->queue.empty() && !st->quit) {
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::microseconds(50));
      lock.lock();
    }
    if (st->queue.empty()) return;  // quit
    Work w = std::move(st->queue.front());
    st->queue.pop_front();
    st->busy = true;
    lock.unlock();
    if (!s.fault) run_work(w);
    lock.lock();
    st->busy = false;
  }
}

// Runs a stream's queued work in order (concurrent mode: waits until its worker is done; the caller
// holds the state mutex once, which is released while waiting). After a kernel faulted, the rest of
// the queue is dropped and every later wait reports cudaErrorLaunchFailure.
cudaError_t drain(Stream& st) {
  State& s = state();
  if (st.worker.joinable()) {
    while (!st.queue.empty() || st.busy) {
      s.mutex.unlock();
      std::this_thread::sleep_for(std::chrono::microseconds(50));
      s.mutex.lock();
    }
    return s.fault ? cudaErrorLaunchFailure : cudaSuccess;
  }
  while (!st.queue.empty() && !s.fault) {
    Work w = std::move(st.queue.front());
    st.queue.pop_front();
    run_work(w);
  }
  if (s.fault) {
    st.queue.clear();
    return cudaErrorLaunchFailure;
  }
  return cudaSuccess;
}

// The legacy stream's synchronous behaviour: blocking streams first, then its own queue.
cudaError_t drain_legacy() {
  State& s = state();
  for (auto& st : s.streams)
    if (st->blocking) drain(*st);
  return drain(s.legacy);
}

// Whether the calling thread may make a call that synchronizes (none while a capture is open:
// cudaStreamCaptureModeGlobal / ThreadLocal prohibit them).
bool capture_forbids_sync() { return state().captures > 0; }

cudaError_t enqueue(cudaStream_t handle, Work w) {
  Stream* st = stream_of(handle);
  if (!st) return fail(cudaErrorInvalidResourceHandle);
  if (st->capture) {
    st->capture->nodes.push_back(std::move(w));
  } else {
    if (!handle && capture_forbids_sync()) return fail(cudaErrorStreamCaptureUnsupported);
    st->queue.push_back(std::move(w));
  }
  return cudaSuccess;
}

}  // namespace

void configure(const DeviceConfig& config) {
  std::lock_guard lock(state().mutex);
  state().config = config;
}
const DeviceConfig& config() { return state().config; }

void reset_fault() {
  std::lock_guard lock(state().mutex);
  state().fault = false;
  t_last_error = cudaSuccess;
}

Stats stats() {
  std::lock_guard lock(state().mutex);
  Stats out = state().stats;
  out.device_bytes = state().device_bytes;
  return out;
}

bool device_range(const void* p, size_t bytes) {
  std::lock_guard lock(state().mutex);
  return is_device(p, bytes);
}

void enqueue_work(cudaStream_t stream, const char*, std::function<void()> work) {
  std::lock_guard lock(state().mutex);
  enqueue(stream, std::move(work));
}

void enqueue_kernel(cudaStream_t stream, const KernelLaunch& k, std::function<void()> body) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  const uint64_t threads = uint64_t(k.block.x) * k.block.y * k.block.z;
  int smem_cap = int(kDefaultDynamicSmem);
  if (auto it = s.max_dynamic_smem.find(k.func); it != s.max_dynamic_smem.end()) smem_cap = it->second;
  const bool ok = threads >= 1 && threads <= 1024 && k.block.x <= 1024 && k.block.y <= 1024 && k.block.z <= 64 &&
                  k.grid.x >= 1 && k.grid.x <= 0x7fffffffu && k.grid.y >= 1 && k.grid.y <= 65535 && k.grid.z >= 1 &&
                  k.grid.z <= 65535 && k.dynamic_smem <= size_t(smem_cap);
  if (!ok) {
    std::fprintf(stderr,
                 "emulated CUDA device: invalid launch of a %s: grid (%u, %u, %u), block (%u, %u, %u), %zu bytes of "
                 "dynamic shared memory (allowed: %d)\n",
                 k.name, k.grid.x, k.grid.y, k.grid.z, k.block.x, k.block.y, k.block.z, k.dynamic_smem, smem_cap);
    fail(cudaErrorInvalidConfiguration);
    return;
  }
  if (k.coresident) {
    const uint64_t per_sm = std::min<uint64_t>(2048 / threads, 32);
    if (uint64_t(k.grid.x) * k.grid.y * k.grid.z > per_sm * uint64_t(s.config.sms))
      std::fprintf(stderr, "emulated CUDA device: a persistent grid larger than the device can hold at once\n");
  }
  simt::Options o = s.config.kernel_options;
  o.coresident = k.coresident;
  o.dynamic_shared_bytes = k.dynamic_smem;
  if (k.coresident) o.stack_bytes = std::min<size_t>(o.stack_bytes, 64 * 1024);
  const dim3 grid = k.grid, block = k.block;
  enqueue(stream, [grid, block, o, body = std::move(body)] {
    {
      std::lock_guard one_kernel(state().kernel_mutex);
      simt::launch(grid, block, body, o);
    }
    std::lock_guard lock(state().mutex);
    ++state().stats.kernels;
  });
}

}  // namespace simt_runtime

using simt_runtime::fail;
using simt_runtime::state;

// ---- device ----
cudaError_t cudaGetDeviceCount(int* count) {
  *count = state().config.devices;
  return state().config.devices > 0 ? cudaSuccess : fail(cudaErrorNoDevice);
}
cudaError_t cudaGetDevice(int* device) {
  *device = 0;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) {
  return device >= 0 && device < state().config.devices ? cudaSuccess : fail(cudaErrorInvalidDevice);
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (device < 0 || device >= state().config.devices) return fail(cudaErrorInvalidDevice);
  const simt_runtime::DeviceConfig& c = state().config;
  *prop = cudaDeviceProp{};
  std::snprintf(prop->name, sizeof prop->name, "simt emulated sm_%d%d device", c.major, c.minor);
  prop->totalGlobalMem = c.memory;
  prop->sharedMemPerBlock = simt_runtime::kDefaultDynamicSmem;
  prop->sharedMemPerBlockOptin = c.smem_optin;
  prop->sharedMemPerMultiprocessor = c.smem_per_sm;
  prop->major = c.major;
  prop->minor = c.minor;
  prop->multiProcessorCount = c.sms;
  prop->maxThreadsPerBlock = 1024;
  prop->maxThreadsPerMultiProcessor = 2048;
  prop->warpSize = 32;
  return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (device < 0 || device >= state().config.devices) return fail(cudaErrorInvalidDevice);
  *value = attr == cudaDevAttrMemoryClockRate ? 3201000 : 6144;  // H200-like: kHz, bits
  return cudaSuccess;
}
cudaError_t cudaDeviceGetPCIBusId(char* bus_id, int length, int device) {
  if (device < 0 || device >= state().config.devices) return fail(cudaErrorInvalidDevice);
  std::snprintf(bus_id, size_t(length), "0000:00:00.0");  // not a real bus: NVML finds no device there
  return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize() {
  auto& s = state();
  std::lock_guard lock(s.mutex);
  if (simt_runtime::capture_forbids_sync()) return fail(cudaErrorStreamCaptureUnsupported);
  cudaError_t e = simt_runtime::drain(s.legacy);
  for (auto& st : s.streams)
    if (simt_runtime::drain(*st) != cudaSuccess) e = cudaErrorLaunchFailure;
  return e == cudaSuccess ? e : fail(e);
}
cudaError_t cudaGetLastError() {
  const cudaError_t e = simt_runtime::t_last_error;
  simt_runtime::t_last_error = cudaSuccess;
  return state().fault ? cudaErrorLaunchFailure : e;
}
cudaError_t cudaPeekAtLastError() { return state().fault ? cudaErrorLaunchFailure : simt_runtime::t_last_error; }
const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDeviceFunction: return "cudaErrorInvalidDeviceFunction";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaErrorStreamCaptureUnsupported: return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated: return "cudaErrorStreamCaptureInvalidated";
  }
  return "cudaErrorUnknown";
}
const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDeviceFunction: return "invalid device function";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
  }
  return "unknown error";
}

// ---- memory ----
namespace {
cudaError_t allocate(void** ptr, size_t bytes, simt_runtime::Kind kind) {
  auto& s = state();
  std::lock_guard lock(s.mutex);
  *ptr = nullptr;
  if (kind == simt_runtime::Kind::Device && simt_runtime::capture_forbids_sync())
    return fail(cudaErrorStreamCaptureUnsupported);
  if (bytes == 0) return cudaSuccess;
  if (kind == simt_runtime::Kind::Device && s.device_bytes + bytes > s.config.memory)
    return fail(cudaErrorMemoryAllocation);
  void* p = nullptr;  // exactly `bytes` (no rounding), so AddressSanitizer sees a kernel that overruns
  if (posix_memalign(&p, 256, bytes) != 0) return fail(cudaErrorMemoryAllocation);
  std::memset(p, 0xff, bytes);  // undefined contents: NaN floats, -1 ints
  s.allocations[reinterpret_cast<uintptr_t>(p)] = {bytes, kind};
  if (kind == simt_runtime::Kind::Device) s.device_bytes += bytes;
  *ptr = p;
  return cudaSuccess;
}
cudaError_t release(void* ptr, bool device) {
  auto& s = state();
  std::lock_guard lock(s.mutex);
  if (!ptr) return cudaSuccess;
  auto it = s.allocations.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == s.allocations.end() || (it->second.kind == simt_runtime::Kind::Device) != device)
    return fail(cudaErrorInvalidValue);
  // cudaFree waits for the device: queued work may still use the memory.
  if (device) {
    simt_runtime::drain(s.legacy);
    for (auto& st : s.streams) simt_runtime::drain(*st);
    s.device_bytes -= it->second.bytes;
  }
  std::free(ptr);
  s.allocations.erase(it);
  return cudaSuccess;
}
}  // namespace

cudaError_t cudaMalloc(void** ptr, size_t bytes) { return allocate(ptr, bytes, simt_runtime::Kind::Device); }
cudaError_t cudaFree(void* ptr) { return release(ptr, true); }
cudaError_t cudaMallocHost(void** ptr, size_t bytes) { return allocate(ptr, bytes, simt_runtime::Kind::Pinned); }
cudaError_t cudaHostAlloc(void** ptr, size_t bytes, unsigned flags) {
  return allocate(ptr, bytes, flags & cudaHostAllocMapped ? simt_runtime::Kind::Mapped : simt_runtime::Kind::Pinned);
}
cudaError_t cudaFreeHost(void* ptr) { return release(ptr, false); }
cudaError_t cudaHostGetDevicePointer(void** device_ptr, void* host_ptr, unsigned) {
  std::lock_guard lock(state().mutex);
  uintptr_t base = 0;
  const simt_runtime::Allocation* a = simt_runtime::find(host_ptr, 1, &base);
  if (!a || a->kind != simt_runtime::Kind::Mapped) return fail(cudaErrorInvalidValue);
  *device_ptr = host_ptr;  // unified addressing
  return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  std::lock_guard lock(state().mutex);
  *total_bytes = state().config.memory;
  *free_bytes = state().config.memory - state().device_bytes;
  return cudaSuccess;
}

namespace {
// Checks a copy's ranges against its kind; returns how the host side behaves.
enum class HostSide { None, Pageable, Pinned };
cudaError_t check_copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind& kind, HostSide* host) {
  using simt_runtime::is_device;
  using simt_runtime::is_pinned;
  if (kind == cudaMemcpyDefault) {
    const bool d = is_device(dst, bytes), s = is_device(src, bytes);
    kind = d && s ? cudaMemcpyDeviceToDevice : d ? cudaMemcpyHostToDevice : s ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost;
  }
  *host = HostSide::None;
  switch (kind) {
    case cudaMemcpyHostToDevice:
      if (!is_device(dst, bytes)) return cudaErrorInvalidValue;
      *host = is_pinned(src, bytes) ? HostSide::Pinned : HostSide::Pageable;
      return cudaSuccess;
    case cudaMemcpyDeviceToHost:
      if (!is_device(src, bytes)) return cudaErrorInvalidValue;
      *host = is_pinned(dst, bytes) ? HostSide::Pinned : HostSide::Pageable;
      return cudaSuccess;
    case cudaMemcpyDeviceToDevice:
      return is_device(dst, bytes) && is_device(src, bytes) ? cudaSuccess : cudaErrorInvalidValue;
    default: return cudaErrorInvalidValue;
  }
}
}  // namespace

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  auto& s = state();
  std::lock_guard lock(s.mutex);
  if (bytes == 0) return cudaSuccess;
  if (s.fault) return fail(cudaErrorLaunchFailure);
  if (simt_runtime::capture_forbids_sync()) return fail(cudaErrorStreamCaptureUnsupported);
  HostSide host;
  if (const cudaError_t e = check_copy(dst, src, bytes, kind, &host); e != cudaSuccess) return fail(e);
  if (simt_runtime::drain_legacy() != cudaSuccess) return fail(cudaErrorLaunchFailure);
  std::memmove(dst, src, bytes);
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream) {
  auto& s = state();
  std::lock_guard lock(s.mutex);
  if (bytes == 0) return cudaSuccess;
  if (s.fault) return fail(cudaErrorLaunchFailure);
  simt_runtime::Stream* st = simt_runtime::stream_of(stream);
  if (!st) return fail(cudaErrorInvalidResourceHandle);
  HostSide host;
  if (const cudaError_t e = check_copy(dst, src, bytes, kind, &host); e != cudaSuccess) return fail(e);
  if (host == HostSide::Pageable && st->capture) {
    st->capture->invalid = true;  // graphs cannot hold copies of pageable memory
    return fail(cudaErrorStreamCaptureUnsupported);
  }
  if (host == HostSide::Pageable && kind == cudaMemcpyHostToDevice) {
    // CUDA stages pageable memory before returning: the caller may reuse it at once.
    auto staged = std::make_shared<std::vector<unsigned char>>(static_cast<const unsigned char*>(src),
                                                               static_cast<const unsigned char*>(src) + bytes);
    return simt_runtime::enqueue(stream, [dst, staged] { std::memcpy(dst, staged->data(), staged->size()); });
  }
  if (host == HostSide::Pageable && kind == cudaMemcpyDeviceToHost) {
    // To pageable memory the call returns only once the copy is done (the stream's work first).
    if (simt_runtime::drain(*st) != cudaSuccess) return fail(cudaErrorLaunchFailure);
    std::memcpy(dst, src, bytes);
    return cudaSuccess;
  }
  return simt_runtime::enqueue(stream, [dst, src, bytes] { std::memmove(dst, src, bytes); });
}

cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t stream) {
  auto& s = state();
  std::lock_guard lock(s.mutex);
  if (bytes == 0) return cudaSuccess;
  if (s.fault) return fail(cudaErrorLaunchFailure);
  if (!simt_runtime::is_device(dst, bytes)) return fail(cudaErrorInvalidValue);
  return simt_runtime::enqueue(stream, [dst, value, bytes] { std::memset(dst, value, bytes); });
}
// Asynchronous for device memory, on the legacy stream (non-blocking streams do not wait for it).
cudaError_t cudaMemset(void* dst, int value, size_t bytes) { return cudaMemsetAsync(dst, value, bytes, nullptr); }

// ---- streams and graphs ----
cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, cudaStreamDefault); }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags) {
  auto& s = state();
  std::lock_guard lock(s.mutex);
  auto st = std::make_unique<simt_runtime::Stream>();
  st->blocking = !(flags & cudaStreamNonBlocking);
  if (s.config.concurrent) st->worker = std::thread(simt_runtime::worker_loop, st.get());
  *stream = reinterpret_cast<cudaStream_t>(st.get());
  s.streams.push_back(std::move(st));
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  auto& s = state();
  std::lock_guard lock(s.mutex);
  for (auto it = s.streams.begin(); it != s.streams.end(); ++it)
    if (reinterpret_cast<cudaStream_t>(it->get()) == stream) {
      simt_runtime::Stream* st = it->get();
      simt_runtime::drain(*st);  // destruction lets queued work finish
      if (st->capture) return fail(cudaErrorStreamCaptureUnsupported);
      if (st->worker.joinable()) {
        st->quit = true;
        s.mutex.unlock();  // the worker takes the mutex to see `quit`
        st->worker.join();
        s.mutex.lock();
      }
      std::erase_if(s.streams, [st](const auto& p) { return p.get() == st; });
      return cudaSuccess;
    }
  return fail(cudaErrorInvalidResourceHandle);
}
cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  auto& s = state();
  std::lock_guard lock(s.mutex);
  simt_runtime::Stream* st = simt_runtime::stream_of(stream);
  if (!st) return fail(cudaErrorInvalidResourceHandle);
  if (st->capture) {
    st->capture->invalid = true;
    return fail(cudaErrorStreamCaptureUnsupported);
  }
  if (simt_runtime::capture_forbids_sync()) return fail(cudaErrorStreamCaptureUnsupported);
  const cudaError_t e = stream ? simt_runtime::drain(*st) : simt_runtime::drain_legacy();
  return e == cudaSuccess ? e : fail(e);
}
// Lazy mode: the queue runs now ("not ready" never happens). Concurrent mode: not ready while the
// stream's worker has work.
cudaError_t cudaStreamQuery(cudaStream_t stream) {
  {
    std::lock_guard lock(state().mutex);
    simt_runtime::Stream* st = simt_runtime::stream_of(stream);
    if (st && st->worker.joinable() && !st->capture && (!st->queue.empty() || st->busy)) return cudaErrorNotReady;
  }
  return cudaStreamSynchronize(stream);
}

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode) {
  auto& s = state();
  std::lock_guard lock(s.mutex);
  simt_runtime::Stream* st = simt_runtime::stream_of(stream);
  if (!st || !stream) return fail(cudaErrorInvalidResourceHandle);  // the legacy stream cannot be captured
  if (st->capture) return fail(cudaErrorStreamCaptureUnsupported);
  st->capture = new simt_runtime::Graph;
  ++s.captures;
  return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  auto& s = state();
  std::lock_guard lock(s.mutex);
  *graph = nullptr;
  simt_runtime::Stream* st = simt_runtime::stream_of(stream);
  if (!st || !st->capture) return fail(cudaErrorInvalidValue);
  simt_runtime::Graph* g = std::exchange(st->capture, nullptr);
  --s.captures;
  if (g->invalid) {
    delete g;
    return fail(cudaErrorStreamCaptureInvalidated);
  }
  *graph = reinterpret_cast<cudaGraph_t>(g);
  return cudaSuccess;
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long) {
  if (!graph) return fail(cudaErrorInvalidValue);
  *exec = reinterpret_cast<cudaGraphExec_t>(new simt_runtime::Graph(*reinterpret_cast<simt_runtime::Graph*>(graph)));
  return cudaSuccess;
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  auto& s = state();
  std::lock_guard lock(s.mutex);
  if (!exec) return fail(cudaErrorInvalidValue);
  if (s.fault) return fail(cudaErrorLaunchFailure);
  for (const auto& node : reinterpret_cast<simt_runtime::Graph*>(exec)->nodes)
    if (const cudaError_t e = simt_runtime::enqueue(stream, node); e != cudaSuccess) return e;
  ++s.stats.graph_launches;
  return cudaSuccess;
}
cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  delete reinterpret_cast<simt_runtime::Graph*>(graph);
  return cudaSuccess;
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  delete reinterpret_cast<simt_runtime::Graph*>(exec);
  return cudaSuccess;
}

// ---- events ----
namespace simt_runtime {
namespace {
struct Event {
  cudaStream_t stream = nullptr;  // where it was last recorded
  bool done = false;
  std::chrono::steady_clock::time_point when;
};
}  // namespace
}  // namespace simt_runtime

cudaError_t cudaEventCreate(cudaEvent_t* event) {
  *event = reinterpret_cast<cudaEvent_t>(new simt_runtime::Event);
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  std::lock_guard lock(state().mutex);
  delete reinterpret_cast<simt_runtime::Event*>(event);
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  std::lock_guard lock(state().mutex);
  auto* e = reinterpret_cast<simt_runtime::Event*>(event);
  if (!e) return fail(cudaErrorInvalidResourceHandle);
  e->stream = stream;
  e->done = false;
  return simt_runtime::enqueue(stream, [e] {
    std::lock_guard inner(state().mutex);
    e->when = std::chrono::steady_clock::now();
    e->done = true;
  });
}
cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  auto* e = reinterpret_cast<simt_runtime::Event*>(event);
  if (!e) return fail(cudaErrorInvalidResourceHandle);
  return cudaStreamSynchronize(e->stream);
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  std::lock_guard lock(state().mutex);
  auto* a = reinterpret_cast<simt_runtime::Event*>(start);
  auto* b = reinterpret_cast<simt_runtime::Event*>(end);
  if (!a || !b) return fail(cudaErrorInvalidResourceHandle);
  if (!a->done || !b->done) return fail(cudaErrorNotReady);
  *ms = float(std::chrono::duration<double, std::milli>(b->when - a->when).count());
  return cudaSuccess;
}

// ---- kernel attributes ----
cudaError_t cudaFuncGetName(const char** name, const void* func) {
  if (!name || !func) return fail(cudaErrorInvalidValue);
  return fail(cudaErrorInvalidDeviceFunction);
}
cudaError_t simt_runtime_func_set_attribute(const void* func, cudaFuncAttribute attr, int value) {
  auto& s = state();
  std::lock_guard lock(s.mutex);
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize || value < 0 || size_t(value) > s.config.smem_optin)
    return fail(cudaErrorInvalidValue);
  s.max_dynamic_smem[func] = value;
  return cudaSuccess;
}
cudaError_t simt_runtime_occupancy(int* blocks, const void* func, int threads, size_t dynamic_smem) {
  auto& s = state();
  std::lock_guard lock(s.mutex);
  if (threads < 1 || threads > 1024) return fail(cudaErrorInvalidValue);
  int cap = int(simt_runtime::kDefaultDynamicSmem);
  if (auto it = s.max_dynamic_smem.find(func); it != s.max_dynamic_smem.end()) cap = it->second;
  if (dynamic_smem > size_t(cap)) {
    *blocks = 0;
    return cudaSuccess;
  }
  const int by_threads = std::min(2048 / threads, 32);
  const int by_smem = int(s.config.smem_per_sm / (dynamic_smem + 1024));  // 1 KB reserved per block
  *blocks = std::min(by_threads, by_smem);
  return cudaSuccess;
}
