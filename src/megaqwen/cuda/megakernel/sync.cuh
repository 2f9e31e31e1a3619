// Dependency primitives of the megakernel: counters in global memory that count up across tokens.
//
// signal(): every thread's writes of the stage are done (the caller's __syncthreads orders them before
//   thread 0's next operation), then thread 0 adds with red.release.gpu (no return value: a
//   fire-and-forget reduction at L2). Release is cumulative over what the barrier ordered before it,
//   so no separate fence is needed (CUTLASS's GenericBarrier does the same).
// wait_at_least(): thread 0 polls with ld.acquire.gpu until the target is reached; a __syncthreads
//   hands that view to the whole CTA (cooperative groups' grid barrier pattern, without the barrier:
//   only the CTAs that need a result wait for it). The other form, relaxed polls and then one
//   fence.acq_rel (chosen first to spare the SM's L1 an invalidation per poll), measured 5% slower on
//   the H200 (2026-11-28: 1,077 against 1,128 tok/s at position 1); kAblateRelaxedSpin keeps it.
// ticket(): atom.add.acq_rel.gpu, for "the last one to arrive does the merge" (attention splits,
//   the LM head's token selection).
// `ablate` (Params::ablate) puts back the conservative forms, so a benchmark can measure each
// choice: kAblateFences adds a __threadfence before every release / ticket, kAblateRelaxedSpin polls
// relaxed and fences once.
// Data produced inside the launch is read with ld.global.cg (__ldcg: L2, not the incoherent L1) and
// never through the read-only path (__ldg), which is kept for the weights.
#pragma once

#include <cstdint>

#include "megaqwen/cuda/megakernel/layout.h"

namespace megaqwen::cuda::mk {

#if defined(MEGAQWEN_SIMT)
// The host SIMT emulator (tests/simt) runs this code in CPU CI. Its threads interleave only at
// synchronization points, so memory is sequentially consistent there; each primitive states the
// memory order of its PTX twin below, which the emulator's race checker (tests/simt/race_check.h)
// holds every access of the kernel to. A poll lets the other CTAs run (simt::poll).
// g_sync_faults: fault injection for that checker's test, each bit removing one ordering the
// protocol relies on (0 outside that test).
inline uint32_t g_sync_faults = 0;
enum : uint32_t {
  kFaultRelaxedRelease = 1,         // release adds, tickets and the Step store become relaxed
  kFaultNoAcquireFence = 2,         // the wait's acquire is left out: ld.acquire polls become relaxed,
                                    // the fence after relaxed polls is dropped
  kFaultNoBarrierBeforeSignal = 4,  // signal_add releases without first waiting for the CTA's writes
  kFaultIgnoreEpoch = 8,            // a flagged word is taken whatever epoch it carries
};
__device__ __forceinline__ simt::MemoryOrder release_order(simt::MemoryOrder o) {
  return (g_sync_faults & kFaultRelaxedRelease) ? simt::MemoryOrder::Relaxed : o;
}
__device__ __forceinline__ uint32_t ld_acquire(const uint32_t* p) {
  simt::poll("ld.acquire");
  return simt::atomic_load(
      p, (g_sync_faults & kFaultNoAcquireFence) ? simt::MemoryOrder::Relaxed : simt::MemoryOrder::Acquire);
}
__device__ __forceinline__ uint32_t ld_relaxed(const uint32_t* p) {
  simt::poll("ld.relaxed");
  return simt::atomic_load(p, simt::MemoryOrder::Relaxed);
}
__device__ __forceinline__ void fence_acq_rel_gpu() {
  if (!(g_sync_faults & kFaultNoAcquireFence)) simt::fence(simt::MemoryOrder::AcqRel);
}
__device__ __forceinline__ void red_release_add(uint32_t* p, uint32_t v) {
  simt::atomic_fetch_add(p, v, release_order(simt::MemoryOrder::Release));
}
__device__ __forceinline__ void st_release(uint32_t* p, uint32_t v) {
  simt::atomic_store(p, v, release_order(simt::MemoryOrder::Release));
}
__device__ __forceinline__ uint32_t atom_add_acq_rel(uint32_t* p, uint32_t v) {
  return simt::atomic_fetch_add(p, v, release_order(simt::MemoryOrder::AcqRel));
}
__device__ __forceinline__ void red_relaxed_add(uint32_t* p, uint32_t v) {
  simt::atomic_fetch_add(p, v, simt::MemoryOrder::Relaxed);
}
// No poll here: a flagged word is loaded many at a time, and the spin around them (spin_round) lets
// the other threads run once per round, not once per word.
__device__ __forceinline__ uint64_t ld_relaxed_u64(const uint64_t* p) {
  return simt::atomic_load(p, simt::MemoryOrder::Relaxed);
}
__device__ __forceinline__ void st_relaxed_u64(uint64_t* p, uint64_t v) {
  simt::atomic_store(p, v, simt::MemoryOrder::Relaxed);
}
#else
__device__ __forceinline__ uint32_t ld_acquire(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ uint32_t ld_relaxed(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void fence_acq_rel_gpu() { asm volatile("fence.acq_rel.gpu;" ::: "memory"); }
__device__ __forceinline__ void red_release_add(uint32_t* p, uint32_t v) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void st_release(uint32_t* p, uint32_t v) {
  asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
// A count that orders nothing (the flagged words carry their own epochs): no store drain first.
__device__ __forceinline__ void red_relaxed_add(uint32_t* p, uint32_t v) {
  asm volatile("red.relaxed.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ uint32_t atom_add_acq_rel(uint32_t* p, uint32_t v) {
  uint32_t old;
  asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(v) : "memory");
  return old;
}
// Naturally aligned 64-bit scalar accesses are single-copy atomic (PTX memory model): a reader sees
// a flagged word's value and epoch from the same store.
__device__ __forceinline__ uint64_t ld_relaxed_u64(const uint64_t* p) {
  uint64_t v;
  asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void st_relaxed_u64(uint64_t* p, uint64_t v) {
  asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
#endif


__device__ __forceinline__ void nanosleep_hint() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
  __nanosleep(32);
#endif
}

// One more round of a thread's spin on flagged words another CTA writes: backs off after 64 rounds
// (on the emulator: the other threads take a turn).
__device__ __forceinline__ void spin_round(int spins) {
#if defined(MEGAQWEN_SIMT)
  simt::poll("flagged words");
#endif
  if (spins > 64) nanosleep_hint();
}

// Block-wide: returns once *counter >= target (wrap-free: counters stay far below 2^31 in a launch).
// kSkipWait in `ablate`: returns after the barrier without polling (the timing probe kProbeNoWaits).
constexpr uint32_t kSkipWait = 1u << 31;
__device__ __forceinline__ void wait_at_least(const uint32_t* counter, uint32_t target, uint32_t ablate = 0) {
  if (threadIdx.x == 0 && !(ablate & kSkipWait)) {
    int spins = 0;
    if (!(ablate & kAblateRelaxedSpin)) {
      while (int32_t(ld_acquire(counter) - target) < 0)
        if (++spins > 64) nanosleep_hint();
    } else {
      while (int32_t(ld_relaxed(counter) - target) < 0)
        if (++spins > 64) nanosleep_hint();
      fence_acq_rel_gpu();
    }
  }
  __syncthreads();
}

// Thread 0 only, after a __syncthreads that ordered the CTA's writes: adds with release semantics.
__device__ __forceinline__ void release_add(uint32_t* counter, uint32_t amount, uint32_t ablate = 0) {
  if (ablate & kAblateFences) __threadfence();
  red_release_add(counter, amount);
}

// Block-wide: the caller has finished writing (all threads); adds `amount` with release semantics.
__device__ __forceinline__ void signal_add(uint32_t* counter, uint32_t amount, uint32_t ablate = 0) {
#if defined(MEGAQWEN_SIMT)
  if (!(g_sync_faults & kFaultNoBarrierBeforeSignal))
#endif
    __syncthreads();
  if (threadIdx.x == 0) release_add(counter, amount, ablate);
}

// Thread 0 only (after a __syncthreads): the ticket (old value) of an acq_rel add of 1.
__device__ __forceinline__ uint32_t take_ticket(uint32_t* counter, uint32_t ablate = 0) {
  if (ablate & kAblateFences) __threadfence();
  return atom_add_acq_rel(counter, 1u);
}

// Flagged words (the LL protocol of NCCL): a 32-bit value and the epoch (round, token) that wrote it,
// in one 64-bit word. A reader polls the data itself until every word it needs carries the epoch it
// expects: no counter to poll first, no release before the signal, so one L2 round trip per edge
// instead of the store drain, the counter's and the data's. Costs twice the bytes of the vector.
__device__ __forceinline__ uint64_t flagged_word(float v, uint32_t epoch) {
  return uint64_t(__float_as_uint(v)) | (uint64_t(epoch) << 32);
}
__device__ __forceinline__ uint32_t flag_of(uint64_t w) { return uint32_t(w >> 32); }
__device__ __forceinline__ float value_of(uint64_t w) { return __uint_as_float(uint32_t(w)); }
__device__ __forceinline__ bool has_epoch(uint64_t w, uint32_t epoch) {
#if defined(MEGAQWEN_SIMT)
  if (g_sync_faults & kFaultIgnoreEpoch) return true;
#endif
  return flag_of(w) == epoch;
}

// Thread-level: w[j] = *addr(j) for j < N (with kMaySkip, addr(j) null: skipped), each polled until
// it carries `epoch`; all N loads in flight at once. Every poller of flagged words goes through here.
template <int N, bool kMaySkip = true, class Addr>
__device__ __forceinline__ void load_flagged_each(Addr&& addr, uint32_t epoch, uint64_t (&w)[N]) {
#pragma unroll
  for (int j = 0; j < N; ++j) {
    const uint64_t* a = addr(j);
    w[j] = !kMaySkip || a ? ld_relaxed_u64(a) : (uint64_t(epoch) << 32);
  }
  for (int spins = 0;; ++spins) {
    bool ready = true;
#pragma unroll
    for (int j = 0; j < N; ++j) {
      if (has_epoch(w[j], epoch)) continue;
      ready = false;
      w[j] = ld_relaxed_u64(addr(j));
    }
    if (ready) return;
    spin_round(spins);
  }
}

// Thread-level: loads the words src[i], i = threadIdx.x + j * kThreads (j < PER, i < n), into w,
// polling each until it carries `epoch`.
template <int PER>
__device__ __forceinline__ void load_flagged(const uint64_t* src, int n, uint32_t epoch, uint64_t (&w)[PER]) {
  load_flagged_each<PER>(
      [&](int j) -> const uint64_t* {
        const int i = int(threadIdx.x) + j * kThreads;
        return i < n ? src + i : nullptr;
      },
      epoch, w);
}

// Thread-level: v[e] = the value of src[32 e] (src: this lane's first word of a row a warp reads),
// each polled until it carries `epoch`; all E loads in flight at once.
template <int E>
__device__ __forceinline__ void load_flagged_lane(const uint64_t* src, uint32_t epoch, float (&v)[E]) {
  uint64_t w[E];
  load_flagged_each<E, false>([&](int e) { return src + 32 * e; }, epoch, w);
#pragma unroll
  for (int e = 0; e < E; ++e) v[e] = value_of(w[e]);
}

// Thread-level: the value of one flagged word, polled until it carries `epoch`.
__device__ __forceinline__ float load_flagged_value(const uint64_t* p, uint32_t epoch) {
  uint64_t w = ld_relaxed_u64(p);
  for (int spins = 0; !has_epoch(w, epoch); ++spins) {
    spin_round(spins);
    w = ld_relaxed_u64(p);
  }
  return value_of(w);
}

// Block-wide: the values of src[0, N) into out (shared memory) once each word carries `epoch`. Thread
// x writes out[x + j * kThreads], the elements the norm loops give it, so a caller that reads only
// those needs no barrier. Up to BATCH words per thread in flight at once (more: batches, in series;
// a smaller BATCH where the registers are scarce).
template <int N, int BATCH = 8>
__device__ __forceinline__ void load_flagged_vec(const uint64_t* src, uint32_t epoch, float* out) {
  constexpr int kPer = (N + kThreads - 1) / kThreads, kBatch = kPer < BATCH ? kPer : BATCH;
#pragma unroll 1
  for (int b = 0; b < kPer; b += kBatch) {
    uint64_t w[kBatch];
    load_flagged<kBatch>(src + b * kThreads, N - b * kThreads, epoch, w);
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int i = int(threadIdx.x) + (b + j) * kThreads;
      if (i < N) out[i] = value_of(w[j]);
    }
  }
}

__device__ __forceinline__ void store_flagged(uint64_t* p, float v, uint32_t epoch) {
  st_relaxed_u64(p, flagged_word(v, epoch));
}

// Per-stage timing (MEGAQWEN_MK_TIMING=1): %globaltimer in ns, thread 0, summed per CTA and stage.
__device__ __forceinline__ unsigned long long global_ns() {
#if defined(MEGAQWEN_SIMT)
  return 0;
#else
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
#endif
}
// weight_ns: the weight stream's running total of its mbarrier waits (WeightStream::weight_wait_ns).
struct StageTimer {
#if MEGAQWEN_MK_TIMING
  unsigned long long* slots;
  const unsigned long long* weight_ns;
  unsigned long long t0 = 0, t1 = 0, w0 = 0;
  __device__ StageTimer(unsigned long long* timing, int cta, Stage s, const unsigned long long* weight_wait_ns)
      : slots(timing ? timing + (size_t(cta) * kStageCount + int(s)) * kTimingSlots : nullptr),
        weight_ns(weight_wait_ns) {
    if (slots && threadIdx.x == 0) t0 = t1 = global_ns(), w0 = *weight_ns;
  }
  __device__ void waited() {
    if (slots && threadIdx.x == 0) t1 = global_ns();
  }
  __device__ ~StageTimer() {
    if (slots && threadIdx.x == 0) {
      const unsigned long long t2 = global_ns(), weights = *weight_ns - w0;
      slots[0] += t1 - t0;
      slots[1] += t2 - t1 - weights;
      slots[2] += weights;
    }
  }
#else
  __device__ StageTimer(unsigned long long*, int, Stage, const unsigned long long*) {}
  __device__ void waited() {}
#endif
};

}  // namespace megaqwen::cuda::mk
