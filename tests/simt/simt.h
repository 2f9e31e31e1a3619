// simt: a host-side SIMT emulator that runs CUDA block-level device code on the CPU, so CPU-only CI
// can execute the real device functions (the megakernel's selection primitives, ...) and check them.
//
// Model. A launch runs the grid's blocks one after another (tickets and "last block merges" flows
// work, spin-waits on other blocks do not), or, with Options::coresident, all of them at once: the
// fibers of every block share one run queue, as a persistent kernel's CTAs share the GPU, and a
// thread that spins on memory another block writes calls simt::poll() in its loop to let the others
// run (the megakernel's counter waits do, under MEGAQWEN_SIMT). A block is N threads (N a multiple of 32, at most 1024), one fiber per thread with its own
// stack, on the calling OS thread (no OS threads). Scheduling is cooperative: a fiber runs until it
// reaches a synchronization point and then the next runnable fiber runs (a direct fiber-to-fiber
// switch; x86-64: a few instructions of assembly, elsewhere ucontext). Synchronization points:
//   __syncthreads (and _count/_and/_or)   block barrier: every thread of the block must arrive
//   __shfl*_sync, __ballot_sync, __any/__all_sync, __syncwarp
//                                         warp collectives: the 32 lanes of the warp all arrive,
//                                         then exchange; the mask must be full (asserted)
// Between two synchronization points a thread runs alone, so atomics are plain read-modify-writes,
// fences order nothing (an Observer hears of both: race_check.h checks the memory model with them),
// and the order in which threads resume is a choice the emulator makes: Options
// can resume them in thread order, reverse order, or a seeded random order, which exposes code that
// relies on an order CUDA does not guarantee (e.g. lanes of a warp reading a value another lane of
// the same warp writes without a __syncwarp in between: real hardware usually runs those in lockstep,
// the CUDA model does not promise it).
//
// Use (the body runs once per thread; shared memory is a per-block object given to it):
//   struct Shared { float red[64]; int last; };
//   simt::launch_shared<Shared>(dim3(ctas), dim3(512), [&](Shared& sh) { /* device code */ });
//   simt::launch(dim3(1), dim3(256), [&] { /* device code without shared memory */ });
// Cost (emulator compiled with -O2): ~20-40 ns per thread per synchronization point, so a 512-thread
// block through ~30 barriers and shuffle rounds takes ~0.3 ms.
//
// Errors are reported by simt::launch throwing simt::Error with a readable message:
//   - barrier divergence / deadlock: some threads exited (or wait at a warp collective) while others
//     wait at a __syncthreads; threads waiting at different __syncthreads (Options::strict_sites);
//   - warp divergence: lanes of a warp at different collectives (or one lane exited / waits at a
//     block barrier while others wait at a collective); a partial mask;
//   - an exception thrown by device code (including __trap()), or use of threadIdx & co outside
//     a kernel;
//   - co-resident grids: threads that only poll, with nothing else happening, for 2 million polls
//     (a spin on a counter no one will advance), with every unfinished block's state;
//   - Hopper bulk copies (simt::bulk_copy_g2s): a size that is not a positive multiple of 16, a
//     misaligned address, a destination outside the block's dynamic shared memory, an uninitialized
//     mbarrier, a block that exits with a copy still in flight.
// Stack overflow hits a guard page (SIGSEGV) rather than corrupting memory.
//
// The CUDA names (threadIdx, __syncthreads, __shfl_xor_sync, atomicAdd, __ldcg, __float_as_uint,
// dim3, uint4, ...) are provided in the global namespace with CUDA's semantics, so a header written for
// nvcc compiles unchanged when this file stands in for the CUDA headers (tests/simt/shim). Not
// provided: __shared__ (the test allocates a block's shared memory: launch_shared<T> gives every block
// a fresh T, filled with the byte 0xA5 so uninitialized reads show), texture/surface objects,
// cooperative groups, grid-wide synchronization.
#pragma once

#include <math.h>

#include <bit>
#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>
#if __has_include(<source_location>)
#include <source_location>
#endif

// ---- qualifiers (host code: nothing to say) ----
#define __host__
#define __device__
#define __global__
#define __forceinline__ inline
#define __noinline__
#define __restrict__ __restrict
#define __launch_bounds__(...)
#define __grid_constant__
#define __align__(n) alignas(n)
// __shared__ is deliberately not defined: a function-scope __shared__ variable cannot be per block on
// the host. Give the block's shared memory to the kernel body instead (simt::launch_shared).

// ---- built-in vector types ----
struct uint2 { unsigned x, y; };
struct uint3 { unsigned x, y, z; };
struct alignas(16) uint4 { unsigned x, y, z, w; };
struct int2 { int x, y; };
struct int3 { int x, y, z; };
struct alignas(16) int4 { int x, y, z, w; };
struct alignas(8) float2 { float x, y; };
struct float3 { float x, y, z; };
struct alignas(16) float4 { float x, y, z, w; };
struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
  constexpr operator uint3() const { return {x, y, z}; }
};
constexpr int warpSize = 32;
inline uint2 make_uint2(unsigned x, unsigned y) { return {x, y}; }
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }
inline int2 make_int2(int x, int y) { return {x, y}; }
inline int4 make_int4(int x, int y, int z, int w) { return {x, y, z, w}; }
inline float2 make_float2(float x, float y) { return {x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }

namespace simt {

// Where a synchronization call is (the call site, through a default argument).
#if defined(__cpp_lib_source_location)
using Site = std::source_location;
#else  // e.g. clang 14 with libstdc++ 12: the same from the builtins std::source_location is made of
struct Site {
  const char* file_ = "";
  unsigned line_ = 0, column_ = 0;
  static constexpr Site current(const char* f = __builtin_FILE(), unsigned l = __builtin_LINE()) noexcept {
    return Site{f, l, 0};
  }
  constexpr const char* file_name() const noexcept { return file_; }
  constexpr unsigned line() const noexcept { return line_; }
  constexpr unsigned column() const noexcept { return column_; }
};
#endif

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The order in which runnable threads resume (threads) and the grid's blocks run (blocks).
enum class Order { Forward, Reverse, Random };

// When a bulk copy's bytes land in shared memory: at once (AtIssue), or only when a thread first
// finds its mbarrier's phase incomplete (AtWait: code that reads the buffer before waiting reads
// stale bytes).
enum class CopyTiming { AtIssue, AtWait };

struct Options {
  Order threads = Order::Forward;
  Order blocks = Order::Forward;     // sequential: the order blocks run; coresident: the initial queue
  bool coresident = false;           // every block resident at once (at most 131,072 threads in all)
  CopyTiming copies = CopyTiming::AtWait;
  // 0..1, how unevenly warps and blocks advance. A random half of the blocks (co-resident grids) and a
  // random half of each block's warps get a probability in [skew / 2, skew] of giving up their turn
  // whenever one of their threads would run next, so they lag and the others reach their waits early
  // (a wait that passes too soon, a buffer refilled while a slow warp still reads it, then shows as
  // wrong data). 0: every runnable thread in turn.
  double skew = 0.0;
  uint64_t seed = 1;                 // for Order::Random
  bool strict_sites = true;          // all threads of a barrier / lanes of a collective at the same call site
  size_t dynamic_shared_bytes = 0;   // simt::dynamic_shared() of every block (0xA5-filled)
  size_t stack_bytes = 256 * 1024;   // per thread (virtual; pages are committed when touched)
};

// Memory orders of the atomic operations device code performs (PTX .relaxed / .acquire / .release /
// .acq_rel, and the fences).
enum class MemoryOrder : uint8_t { Relaxed, Acquire, Release, AcqRel, SeqCst };
enum class AtomicKind : uint8_t { Load, Store, ReadModifyWrite };

// Watches what the emulator alone cannot judge: the memory model. The emulator runs every access
// sequentially consistent, so code that forgets a fence or an acquire still computes the right
// values here; an Observer is told of every launch, every completed block barrier, every atomic
// (with its order) and every fence, and can check that each access to memory another block touched
// is ordered after it (tests/simt/race_check.h). The running thread is detail::g_regs.
class Observer {
 public:
  virtual ~Observer() = default;
  virtual void launch_begin(uint64_t blocks, int threads_per_block, bool coresident) = 0;
  // What the observer found wrong in the launch ("" if nothing); simt::launch throws it as an Error.
  virtual std::string launch_end() = 0;
  virtual void barrier_completed(int block) = 0;  // every thread of `block` passed a __syncthreads
  // pc: where in the device code (a return address), for reports.
  virtual void atomic(const void* p, size_t bytes, AtomicKind kind, MemoryOrder order, const void* pc) = 0;
  virtual void fence(MemoryOrder order) = 0;
  // A read through a path that assumes the memory does not change during the launch: `how` is
  // "__ldg" (ld.global.nc, the non-coherent read-only cache) or "cp.async.bulk" (the async proxy).
  virtual void read_only(const void* p, size_t bytes, const char* how, const void* pc) = 0;
};
// At most one; nullptr (the default) observes nothing.
void set_observer(Observer* observer);

namespace detail {

struct ThreadRegs {
  uint3 thread_idx;
  uint3 block_idx;
  dim3 block_dim;
  dim3 grid_dim;
  int linear = 0, lane = 0, warp = 0;
  int block = 0;  // the block's linear index in the grid
  // This thread's fiber stack and its block's shared memory: what an Observer leaves out (private to
  // the thread or the block).
  const char* stack_lo = nullptr;
  const char* stack_hi = nullptr;
  const char* shared_lo = nullptr;
  const char* shared_hi = nullptr;
};
extern thread_local constinit const ThreadRegs* g_regs;  // the running fiber's, null outside a kernel
extern Observer* g_observer;

// Atomics and the sync primitives below are not instrumented by a race-checking build
// (-fsanitize=thread, tests/simt/race_check.h): they tell the Observer what they are instead.
#if defined(__clang__) || defined(__GNUC__)
#define SIMT_UNINSTRUMENTED __attribute__((no_sanitize("thread")))
#else
#define SIMT_UNINSTRUMENTED
#endif
// Tells the Observer of a read-only-path read (its return address is the device code's call site).
void read_only_access(const void* p, size_t bytes, const char* how);

// Inlined into the atomic it describes, so the return address is the device code's call site.
SIMT_UNINSTRUMENTED __attribute__((always_inline)) inline void note_atomic(const void* p, size_t bytes, AtomicKind kind,
                                                                           MemoryOrder order) {
  if (g_observer && g_regs) g_observer->atomic(p, bytes, kind, order, __builtin_return_address(0));
}

[[noreturn]] void outside_kernel(const char* what);
[[noreturn]] void fault(const std::string& message);  // device-side error: aborts the launch
inline const ThreadRegs& regs(const char* what) {
  if (!g_regs) outside_kernel(what);
  return *g_regs;
}

// Block barrier: returns how many threads passed a nonzero pred.
int block_barrier(const char* what, int pred, const Site& loc);
// Warp collective: returns the 32 lanes' values (valid until this lane's next collective).
const uint64_t* warp_collective(const char* what, unsigned mask, uint64_t bits, const Site& loc);
void* dynamic_shared();
int block_threads();

using Body = void (*)(void* ctx, void* shared);
void launch(dim3 grid, dim3 block, size_t shared_bytes, size_t shared_align, Body body, void* ctx, const Options& o);

template <class T>
uint64_t to_bits(T v) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 8, "warp collectives move up to 8 bytes");
  uint64_t b = 0;
  std::memcpy(&b, &v, sizeof(T));
  return b;
}
template <class T>
T from_bits(uint64_t b) {
  T v;
  std::memcpy(&v, &b, sizeof(T));
  return v;
}

}  // namespace detail

// Runs body() on every thread of every block of the grid.
template <class F>
void launch(dim3 grid, dim3 block, F&& body, const Options& o = {}) {
  using Fn = std::remove_reference_t<F>;
  detail::launch(grid, block, 0, 1, [](void* ctx, void*) { (*static_cast<Fn*>(ctx))(); },
                 const_cast<void*>(static_cast<const void*>(&body)), o);
}

// Runs body(shared) on every thread; each block gets its own Shared (filled with 0xA5 bytes, as
// uninitialized shared memory), the stand-in for the kernel's __shared__ variables.
template <class Shared, class F>
void launch_shared(dim3 grid, dim3 block, F&& body, const Options& o = {}) {
  static_assert(std::is_trivially_default_constructible_v<Shared> && std::is_trivially_destructible_v<Shared>,
                "shared memory holds trivial types");
  using Fn = std::remove_reference_t<F>;
  detail::launch(grid, block, sizeof(Shared), alignof(Shared),
                 [](void* ctx, void* shared) { (*static_cast<Fn*>(ctx))(*static_cast<Shared*>(shared)); },
                 const_cast<void*>(static_cast<const void*>(&body)), o);
}

// ---- spinning and Hopper's asynchronous copies (for device code built with MEGAQWEN_SIMT) ----
// One iteration of a spin-wait: the other runnable threads (of every resident block) take a turn.
void poll(const char* what, const Site& loc = Site::current());
// mbarrier with arrival count and transaction bytes, as PTX mbarrier.{init, arrive.expect_tx,
// try_wait.parity}; the barrier lives in the block's shared memory (its state is kept aside).
void mbarrier_init(uint64_t* bar, unsigned count);
void mbarrier_arrive_expect_tx(uint64_t* bar, unsigned bytes);
// True once the phase of parity `parity` has completed; otherwise lands the copies that barrier
// waits for (CopyTiming::AtWait), polls once and returns false.
bool mbarrier_try_wait_parity(uint64_t* bar, unsigned parity, const Site& loc = Site::current());
// cp.async.bulk global -> shared, completing `bytes` transaction bytes on `bar` (Options::copies).
void bulk_copy_g2s(void* dst, const void* src, unsigned bytes, uint64_t* bar);
// cp.async.bulk.prefetch.L2: only its alignment rules are checked.
void bulk_prefetch_l2(const void* src, unsigned bytes);

// The block's dynamic shared memory (Options::dynamic_shared_bytes), as `extern __shared__`.
template <class T = unsigned char>
T* dynamic_shared() {
  return static_cast<T*>(detail::dynamic_shared());
}
inline int lane_id() { return detail::regs("lane_id").lane; }

// PTX's ordered atomics (ld.acquire, st.release, red.release, atom.acq_rel, fence.*) for device
// code that spells its memory orders out (the megakernel's sync.cuh under MEGAQWEN_SIMT). Here they
// are plain accesses (memory is sequentially consistent); the order goes to the Observer.
SIMT_UNINSTRUMENTED inline uint32_t atomic_load(const uint32_t* p, MemoryOrder order) {
  detail::note_atomic(p, 4, AtomicKind::Load, order);
  return *p;
}
SIMT_UNINSTRUMENTED inline void atomic_store(uint32_t* p, uint32_t v, MemoryOrder order) {
  detail::note_atomic(p, 4, AtomicKind::Store, order);
  *p = v;
}
// 64-bit words (the megakernel's flagged words: value and epoch in one single-copy-atomic access).
SIMT_UNINSTRUMENTED inline uint64_t atomic_load(const uint64_t* p, MemoryOrder order) {
  detail::note_atomic(p, 8, AtomicKind::Load, order);
  return *p;
}
SIMT_UNINSTRUMENTED inline void atomic_store(uint64_t* p, uint64_t v, MemoryOrder order) {
  detail::note_atomic(p, 8, AtomicKind::Store, order);
  *p = v;
}
SIMT_UNINSTRUMENTED inline uint32_t atomic_fetch_add(uint32_t* p, uint32_t v, MemoryOrder order) {
  detail::note_atomic(p, 4, AtomicKind::ReadModifyWrite, order);
  const uint32_t old = *p;
  *p = old + v;
  return old;
}
SIMT_UNINSTRUMENTED inline void fence(MemoryOrder order) {
  if (detail::g_observer && detail::g_regs) detail::g_observer->fence(order);
}
inline bool in_kernel() { return detail::g_regs != nullptr; }

}  // namespace simt

// ---- per-thread built-in variables ----
#define threadIdx (::simt::detail::regs("threadIdx").thread_idx)
#define blockIdx (::simt::detail::regs("blockIdx").block_idx)
#define blockDim (::simt::detail::regs("blockDim").block_dim)
#define gridDim (::simt::detail::regs("gridDim").grid_dim)

// ---- block synchronization ----
inline void __syncthreads(const ::simt::Site loc = ::simt::Site::current()) {
  ::simt::detail::block_barrier("__syncthreads", 0, loc);
}
inline int __syncthreads_count(int pred, const ::simt::Site loc = ::simt::Site::current()) {
  return ::simt::detail::block_barrier("__syncthreads_count", pred != 0, loc);
}
inline int __syncthreads_and(int pred, const ::simt::Site loc = ::simt::Site::current()) {
  return ::simt::detail::block_barrier("__syncthreads_and", pred != 0, loc) == ::simt::detail::block_threads();
}
inline int __syncthreads_or(int pred, const ::simt::Site loc = ::simt::Site::current()) {
  return ::simt::detail::block_barrier("__syncthreads_or", pred != 0, loc) != 0;
}
// Fibers are cooperative: memory is coherent and ordered between synchronization points. The GPU-
// and system-scope fences still reach the Observer; a block-scope fence orders nothing between blocks.
inline void __threadfence() { ::simt::fence(::simt::MemoryOrder::SeqCst); }
inline void __threadfence_block() {}
inline void __threadfence_system() { ::simt::fence(::simt::MemoryOrder::SeqCst); }
[[noreturn]] inline void __trap() { ::simt::detail::fault("__trap() called"); }
inline void __nanosleep(unsigned) {}

// ---- warp collectives (full mask only) ----
inline void __syncwarp(unsigned mask = 0xffffffffu, const ::simt::Site loc = ::simt::Site::current()) {
  ::simt::detail::warp_collective("__syncwarp", mask, 0, loc);
}
// No notion of a partially active warp: every lane is reported active.
inline unsigned __activemask() { return 0xffffffffu; }

template <class T>
T __shfl_sync(unsigned mask, T var, int src_lane, int width = warpSize,
              const ::simt::Site loc = ::simt::Site::current()) {
  const uint64_t* all = ::simt::detail::warp_collective("__shfl_sync", mask, ::simt::detail::to_bits(var), loc);
  const int lane = ::simt::lane_id(), base = lane & ~(width - 1);
  return ::simt::detail::from_bits<T>(all[base + (src_lane & (width - 1))]);
}
template <class T>
T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = warpSize,
                 const ::simt::Site loc = ::simt::Site::current()) {
  const uint64_t* all = ::simt::detail::warp_collective("__shfl_up_sync", mask, ::simt::detail::to_bits(var), loc);
  const int lane = ::simt::lane_id(), in_seg = lane & (width - 1);
  return in_seg >= int(delta) ? ::simt::detail::from_bits<T>(all[lane - int(delta)]) : var;
}
template <class T>
T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = warpSize,
                   const ::simt::Site loc = ::simt::Site::current()) {
  const uint64_t* all = ::simt::detail::warp_collective("__shfl_down_sync", mask, ::simt::detail::to_bits(var), loc);
  const int lane = ::simt::lane_id(), in_seg = lane & (width - 1);
  return in_seg + int(delta) < width ? ::simt::detail::from_bits<T>(all[lane + int(delta)]) : var;
}
template <class T>
T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = warpSize,
                  const ::simt::Site loc = ::simt::Site::current()) {
  const uint64_t* all = ::simt::detail::warp_collective("__shfl_xor_sync", mask, ::simt::detail::to_bits(var), loc);
  const int lane = ::simt::lane_id(), src = lane ^ (lane_mask & 31);
  // PTX shfl.bfly: a source past the end of the lane's segment reads the lane's own value.
  return src < ((lane & ~(width - 1)) + width) ? ::simt::detail::from_bits<T>(all[src]) : var;
}
inline unsigned __ballot_sync(unsigned mask, int pred, const ::simt::Site loc = ::simt::Site::current()) {
  const uint64_t* all = ::simt::detail::warp_collective("__ballot_sync", mask, pred != 0, loc);
  unsigned bits = 0;
  for (int l = 0; l < 32; ++l) bits |= unsigned(all[l] != 0) << l;
  return bits;
}
inline int __any_sync(unsigned mask, int pred, const ::simt::Site loc = ::simt::Site::current()) {
  const uint64_t* all = ::simt::detail::warp_collective("__any_sync", mask, pred != 0, loc);
  for (int l = 0; l < 32; ++l)
    if (all[l]) return 1;
  return 0;
}
inline int __all_sync(unsigned mask, int pred, const ::simt::Site loc = ::simt::Site::current()) {
  const uint64_t* all = ::simt::detail::warp_collective("__all_sync", mask, pred != 0, loc);
  for (int l = 0; l < 32; ++l)
    if (!all[l]) return 0;
  return 1;
}

// ---- atomics: plain read-modify-write (one fiber runs at a time), relaxed for the Observer ----
#define SIMT_RMW(T, a) ::simt::detail::note_atomic(a, sizeof(T), ::simt::AtomicKind::ReadModifyWrite, ::simt::MemoryOrder::Relaxed)
#define SIMT_ATOMIC_ARITH(T)                                                                       \
  SIMT_UNINSTRUMENTED inline T atomicAdd(T* a, T v) { SIMT_RMW(T, a); T o = *a; *a = o + v; return o; } \
  SIMT_UNINSTRUMENTED inline T atomicSub(T* a, T v) { SIMT_RMW(T, a); T o = *a; *a = o - v; return o; } \
  SIMT_UNINSTRUMENTED inline T atomicExch(T* a, T v) { SIMT_RMW(T, a); T o = *a; *a = v; return o; }
SIMT_ATOMIC_ARITH(int)
SIMT_ATOMIC_ARITH(unsigned)
SIMT_ATOMIC_ARITH(unsigned long long)
SIMT_ATOMIC_ARITH(float)
SIMT_ATOMIC_ARITH(double)
#undef SIMT_ATOMIC_ARITH
#define SIMT_ATOMIC_INT(T)                                                                                 \
  SIMT_UNINSTRUMENTED inline T atomicMax(T* a, T v) { SIMT_RMW(T, a); T o = *a; *a = o > v ? o : v; return o; } \
  SIMT_UNINSTRUMENTED inline T atomicMin(T* a, T v) { SIMT_RMW(T, a); T o = *a; *a = o < v ? o : v; return o; } \
  SIMT_UNINSTRUMENTED inline T atomicAnd(T* a, T v) { SIMT_RMW(T, a); T o = *a; *a = o & v; return o; }         \
  SIMT_UNINSTRUMENTED inline T atomicOr(T* a, T v) { SIMT_RMW(T, a); T o = *a; *a = o | v; return o; }          \
  SIMT_UNINSTRUMENTED inline T atomicXor(T* a, T v) { SIMT_RMW(T, a); T o = *a; *a = o ^ v; return o; }         \
  SIMT_UNINSTRUMENTED inline T atomicCAS(T* a, T cmp, T v) { SIMT_RMW(T, a); T o = *a; if (o == cmp) *a = v; return o; }
SIMT_ATOMIC_INT(int)
SIMT_ATOMIC_INT(unsigned)
SIMT_ATOMIC_INT(unsigned long long)
#undef SIMT_ATOMIC_INT
SIMT_UNINSTRUMENTED inline unsigned atomicInc(unsigned* a, unsigned v) {
  SIMT_RMW(unsigned, a);
  unsigned o = *a;
  *a = o >= v ? 0u : o + 1u;
  return o;
}
SIMT_UNINSTRUMENTED inline unsigned atomicDec(unsigned* a, unsigned v) {
  SIMT_RMW(unsigned, a);
  unsigned o = *a;
  *a = (o == 0u || o > v) ? v : o - 1u;
  return o;
}
#undef SIMT_RMW

// ---- cache-hinted loads and stores: plain ones ----
template <class T> T __ldg(const T* p) {
  if (::simt::detail::g_observer) ::simt::detail::read_only_access(p, sizeof(T), "__ldg");
  return *p;
}
template <class T> T __ldcg(const T* p) { return *p; }
template <class T> T __ldca(const T* p) { return *p; }
template <class T> T __ldcs(const T* p) { return *p; }
template <class T> T __ldlu(const T* p) { return *p; }
template <class T> T __ldcv(const T* p) { return *p; }
template <class T> void __stcg(T* p, std::type_identity_t<T> v) { *p = v; }
template <class T> void __stwb(T* p, std::type_identity_t<T> v) { *p = v; }
template <class T> void __stcs(T* p, std::type_identity_t<T> v) { *p = v; }
template <class T> void __stwt(T* p, std::type_identity_t<T> v) { *p = v; }

// ---- bit reinterpretation and integer intrinsics ----
inline unsigned __float_as_uint(float f) { return std::bit_cast<unsigned>(f); }
inline float __uint_as_float(unsigned u) { return std::bit_cast<float>(u); }
inline int __float_as_int(float f) { return std::bit_cast<int>(f); }
inline float __int_as_float(int i) { return std::bit_cast<float>(i); }
inline long long __double_as_longlong(double d) { return std::bit_cast<long long>(d); }
inline double __longlong_as_double(long long l) { return std::bit_cast<double>(l); }
// cvt.rni.u64.f64: round to nearest even, NaN -> 0, saturating.
inline unsigned long long __double2ull_rn(double x) {
  if (!(x > 0.0)) return 0;
  return x >= 0x1p64 ? ~0ull : (unsigned long long)(std::nearbyint(x));
}
// cvt.rni.u64.f32: the same for a float.
inline unsigned long long __float2ull_rn(float x) {
  if (!(x > 0.0f)) return 0;
  return x >= 0x1p64f ? ~0ull : (unsigned long long)(std::nearbyint(x));
}
inline int __popc(unsigned x) { return std::popcount(x); }
inline int __popcll(unsigned long long x) { return std::popcount(x); }
inline int __clz(int x) { return std::countl_zero(unsigned(x)); }
inline int __clzll(long long x) { return std::countl_zero((unsigned long long)(x)); }
inline int __ffs(int x) { return x == 0 ? 0 : std::countr_zero(unsigned(x)) + 1; }
inline int __ffsll(long long x) { return x == 0 ? 0 : std::countr_zero((unsigned long long)(x)) + 1; }
inline unsigned __brev(unsigned x) {
  unsigned r = 0;
  for (int i = 0; i < 32; ++i) r |= ((x >> i) & 1u) << (31 - i);
  return r;
}

// ---- arithmetic with explicit rounding: exact IEEE operations, never contracted into an FMA
// (the volatile store pins each result) ----
inline float __fadd_rn(float a, float b) { volatile float r = a + b; return r; }
inline float __fsub_rn(float a, float b) { volatile float r = a - b; return r; }
inline float __fmul_rn(float a, float b) { volatile float r = a * b; return r; }
inline float __fdiv_rn(float a, float b) { volatile float r = a / b; return r; }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline double __dadd_rn(double a, double b) { volatile double r = a + b; return r; }
inline double __dmul_rn(double a, double b) { volatile double r = a * b; return r; }
inline double __fma_rn(double a, double b, double c) { return std::fma(a, b, c); }
// The fast-math intrinsics are approximations on a GPU; here they are the libm functions.
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline float __saturatef(float x) { return x != x ? 0.0f : x < 0.0f ? 0.0f : x > 1.0f ? 1.0f : x; }
// fmaxf, fminf, expf, exp, log, sqrtf, fmaf, fmax, INFINITY, ...: <math.h> (global namespace).

// ---- integer min / max (CUDA's global overloads) ----
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline unsigned min(int a, unsigned b) { return min(unsigned(a), b); }
inline unsigned max(int a, unsigned b) { return max(unsigned(a), b); }
inline unsigned min(unsigned a, int b) { return min(a, unsigned(b)); }
inline unsigned max(unsigned a, int b) { return max(a, unsigned(b)); }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
inline float min(float a, float b) { return fminf(a, b); }
inline float max(float a, float b) { return fmaxf(a, b); }
inline double min(double a, double b) { return fmin(a, b); }
inline double max(double a, double b) { return fmax(a, b); }
