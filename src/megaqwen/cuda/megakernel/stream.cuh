// Weight streaming, decoupled from dependencies: a ring of C::kStages shared-memory buffers that
// thread 0 fills with cp.async.bulk (the Hopper bulk copy engine: one instruction per chunk, no
// registers, completion counted in bytes on an mbarrier), in the schedule's order (schedule.cuh).
//
//   prime()    at kernel start: issue chunks 0 .. kStages-1
//   wait()     all threads: wait for the oldest unconsumed chunk's mbarrier phase; returns its buffer
//   release()  all threads: __syncthreads (everyone is done reading the buffer), then thread 0 refills
//              that buffer with chunk consumed + kStages and asks L2 to prefetch the chunk kL2Ahead
//              beyond it (cp.async.bulk.prefetch.L2)
//   release_deferred() / flush()  release() split in two for a stage's last chunk: the buffer is
//              free at once, but its refill waits until the stage has signalled its counter (flush),
//              so the refill's address arithmetic is not on the path to the next CTA's wait
//   drain()    at exit: wait for every chunk still in flight (a CTA must not exit with a bulk copy
//              pending into its shared memory)
// Because a buffer is refilled as soon as it is consumed, the next kStages-1 chunks are in flight
// while the CTA waits on a counter for the current stage's input: the weight stream never waits for
// activations. Chunk i uses buffer i mod kStages; its mbarrier completes once per fill, so the phase
// parity to wait for is (i / kStages) & 1.
#pragma once

#include <cstdint>

#include "megaqwen/cuda/megakernel/schedule.cuh"
#include "megaqwen/cuda/megakernel/sync.cuh"

namespace megaqwen::cuda::mk {

#if defined(MEGAQWEN_SIMT)
// The host SIMT emulator (tests/simt) models mbarriers and bulk copies itself, with Hopper's rules
// checked (sizes and alignment, shared-memory bounds, copies in flight at exit).
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) { simt::mbarrier_init(bar, count); }
__device__ __forceinline__ void fence_mbar_init() {}
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  simt::mbarrier_arrive_expect_tx(bar, bytes);
}
__device__ __forceinline__ bool mbar_try_wait(uint64_t* bar, uint32_t parity) {
  return simt::mbarrier_try_wait_parity(bar, parity);
}
__device__ __forceinline__ void bulk_copy_g2s(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  simt::bulk_copy_g2s(dst, src, bytes, bar);
}
__device__ __forceinline__ void prefetch_l2(const void* src, uint32_t bytes) { simt::bulk_prefetch_l2(src, bytes); }
__device__ __forceinline__ void prefetch_l1(const void*) {}  // a hint: nothing to emulate
#else
__device__ __forceinline__ uint32_t smem_u32(const void* p) { return uint32_t(__cvta_generic_to_shared(p)); }

__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void fence_mbar_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ bool mbar_try_wait(uint64_t* bar, uint32_t parity) {
  uint32_t done;
  asm volatile(
      "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(done)
      : "r"(smem_u32(bar)), "r"(parity)
      : "memory");
  return done != 0;
}
// Global -> shared bulk copy; bytes a multiple of 16, both addresses 16-byte aligned.
__device__ __forceinline__ void bulk_copy_g2s(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   smem_u32(dst)),
               "l"(src), "r"(bytes), "r"(smem_u32(bar))
               : "memory");
}
__device__ __forceinline__ void prefetch_l2(const void* src, uint32_t bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(src), "r"(bytes) : "memory");
}
// A hint that the line holding p will be read soon (through L1: __ldg). No registers held.
__device__ __forceinline__ void prefetch_l1(const void* p) { asm volatile("prefetch.global.L1 [%0];" ::"l"(p)); }
#endif

template <class C>
struct WeightStream {
  uint8_t* buf;   // kStages * kBufBytes of shared memory
  uint64_t* bar;  // kStages mbarriers in shared memory
  const Schedule<C>* sched;
  const Params* p;
  uint32_t issued = 0, consumed = 0;  // identical in every thread
  uint32_t pending = 0;               // refills deferred by release_deferred()
  unsigned long long weight_wait_ns = 0;  // timing builds: thread 0's time in wait(), summed (StageTimer)

  __device__ void init(uint8_t* buffers, uint64_t* barriers, const Schedule<C>* s, const Params* params) {
    buf = buffers;
    bar = barriers;
    sched = s;
    p = params;
    if (threadIdx.x == 0) {
      for (int i = 0; i < C::kStages; ++i) mbar_init(bar + i, 1);
      fence_mbar_init();
    }
    __syncthreads();
  }
  __device__ void issue() {
    // A CTA that owns no rows of any matrix (more CTAs than rows everywhere, e.g. a small vocabulary)
    // has an empty chunk list: chunk() would take s % 0. It issues nothing (and drain() waits for nothing).
    // The timing probe kProbeNoWeights copies nothing (and wait() takes the buffers as they are).
    if (sched->per_token == 0) return;
    if (threadIdx.x == 0 && !(p->probe & kProbeNoWeights)) {
      const Chunk ch = sched->chunk(*p, issued);
      uint64_t* b = bar + issued % C::kStages;
      mbar_arrive_expect_tx(b, ch.bytes);
      bulk_copy_g2s(buf + size_t(issued % C::kStages) * C::kBufBytes, ch.src, ch.bytes, b);
      if constexpr (C::kL2Ahead > 0) {
        const Chunk ahead = sched->chunk(*p, issued + C::kL2Ahead);
        prefetch_l2(ahead.src, ahead.bytes);
      }
    }
    ++issued;
  }
  __device__ void prime() {
    for (int i = 0; i < C::kStages; ++i) issue();
  }
  __device__ const uint8_t* wait() {
    uint64_t* b = bar + consumed % C::kStages;
    const uint32_t parity = (consumed / C::kStages) & 1u;
#if MEGAQWEN_MK_TIMING
    const unsigned long long t0 = threadIdx.x == 0 ? global_ns() : 0;
#endif
    if (!(p->probe & kProbeNoWeights))
      while (!mbar_try_wait(b, parity)) {
      }
#if MEGAQWEN_MK_TIMING
    if (threadIdx.x == 0) weight_wait_ns += global_ns() - t0;
#endif
    return buf + size_t(consumed % C::kStages) * C::kBufBytes;
  }
  __device__ void release() {
    __syncthreads();
    ++consumed;
    issue();
  }
  __device__ void release_deferred() {
    __syncthreads();
    ++consumed;
    ++pending;
  }
  // All threads: issues the deferred refills.
  __device__ void flush() {
    for (; pending > 0; --pending) issue();
  }
  __device__ void drain() {
    flush();
    while (consumed < issued) {
      wait();
      ++consumed;
    }
    __syncthreads();
  }
};

}  // namespace megaqwen::cuda::mk
