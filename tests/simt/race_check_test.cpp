// The race checker (race_check.h) on small co-resident kernels built from the megakernel's own
// dependency primitives (sync.cuh: signal_add, wait_at_least, take_ticket): each ordering bug those
// primitives exist to prevent is reported, on every run and whatever order the threads ran in, and
// each correct form is not. Compiled with -fsanitize=thread (the checker's instrumentation).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "simt/race_check.h"
#include "simt/simt.h"
// The emulator first: sync.cuh's MEGAQWEN_SIMT forms use it.
#include "megaqwen/cuda/megakernel/sync.cuh"

namespace {

namespace mk = megaqwen::cuda::mk;
using simt::MemoryOrder;

constexpr int kThreads = 64;

// Runs a co-resident grid under the checker and returns its report ("" when it found nothing),
// resetting the fault injection afterwards.
template <class F>
std::string check(int blocks, F&& body, simt::Order threads = simt::Order::Forward, uint64_t seed = 1) {
  simt::race::set_throw_on_race(false);
  simt::Options o;
  o.coresident = true;
  o.threads = threads;
  o.blocks = threads;
  o.seed = seed;
  o.stack_bytes = 64 * 1024;
  simt::launch(dim3(unsigned(blocks)), dim3(kThreads), body, o);
  mk::g_sync_faults = 0;
  simt::race::set_throw_on_race(true);
  return simt::race::last_report();
}

bool has_addr2line() { return std::system("command -v addr2line > /dev/null 2>&1") == 0; }

// Block 0 writes data, then signals; block 1 waits for the signal and copies data to out: the
// megakernel's edge between two stages.
struct Edge {
  std::vector<float> data = std::vector<float>(kThreads, 0.0f), out = std::vector<float>(kThreads, 0.0f);
  uint32_t counter = 0;
  void operator()() {
    const int t = int(threadIdx.x);
    if (blockIdx.x == 0) {
      data[size_t(t)] = float(t) + 0.5f;
      mk::signal_add(&counter, 1u);
    } else {
      mk::wait_at_least(&counter, 1u);
      out[size_t(t)] = data[size_t(t)];
    }
  }
};

TEST(SimtRaceCheck, ASignalAndWaitOrderTheEdge) {
  for (simt::Order order : {simt::Order::Forward, simt::Order::Reverse, simt::Order::Random}) {
    Edge e;
    EXPECT_EQ(check(
                  2, [&] { e(); }, order),
              "");
    for (int t = 0; t < kThreads; ++t) ASSERT_EQ(e.out[size_t(t)], float(t) + 0.5f);
  }
  EXPECT_GT(simt::race::totals().checked_accesses, 0u);
}

TEST(SimtRaceCheck, EachMissingOrderingOfTheEdgeIsReported) {
  struct Case {
    uint32_t fault;
    const char* what;
  };
  for (const Case& c : {Case{mk::kFaultRelaxedRelease, "a relaxed add instead of red.release"},
                        Case{mk::kFaultNoAcquireFence, "relaxed polls without the acquire fence"},
                        Case{mk::kFaultNoBarrierBeforeSignal, "a signal before the block's writes are all done"}})
    for (simt::Order order : {simt::Order::Forward, simt::Order::Random}) {
      SCOPED_TRACE(c.what);
      Edge e;
      mk::g_sync_faults = c.fault;
      const std::string report = check(
          2, [&] { e(); }, order);
      // The values still arrive (memory is sequentially consistent here): only the checker sees it.
      ASSERT_NE(report, "");
      EXPECT_NE(report.find("read by block 1"), std::string::npos) << report;
      EXPECT_NE(report.find("write by block 0"), std::string::npos) << report;
      if (has_addr2line()) {
        EXPECT_NE(report.find("race_check_test.cpp"), std::string::npos) << report;
      }
    }
}

TEST(SimtRaceCheck, ReadsBeforeTheBarrierThatSharesTheAcquireAreReported) {
  // Thread 0 waits, but the other threads read at once: the acquire reaches them only at a barrier.
  std::vector<float> data(kThreads, 1.0f);
  uint32_t counter = 0;
  float sink = 0;
  const std::string report = check(2, [&] {
    const int t = int(threadIdx.x);
    if (blockIdx.x == 0) {
      data[size_t(t)] = 2.0f;
      mk::signal_add(&counter, 1u);
    } else {
      if (t == 0) {
        while (mk::ld_relaxed(&counter) < 1u) {
        }
        mk::fence_acq_rel_gpu();
      }
      if (t == 1) sink += data[1];  // no __syncthreads after thread 0's acquire
    }
  });
  EXPECT_NE(report.find("read by block 1 thread 1"), std::string::npos) << report;
  (void)sink;
}

TEST(SimtRaceCheck, AReadWithoutAnyWaitIsReportedEvenWhenItHappensLast) {
  // Block 0's threads run first here and finish their writes, so block 1 reads the right values:
  // still a race (on a GPU the blocks run at the same time).
  std::vector<float> data(kThreads, 1.0f), out(kThreads, 0.0f);
  const std::string report = check(2, [&] {
    const int t = int(threadIdx.x);
    if (blockIdx.x == 0)
      data[size_t(t)] = 2.0f;
    else
      out[size_t(t)] = data[size_t(t)];
  });
  EXPECT_NE(report, "");
}

// A buffer reused across rounds (the megakernel's tokens): the producer may overwrite it only after
// the consumer said it has read it (here through a second counter).
void reuse_kernel(std::vector<float>& data, std::vector<float>& out, uint32_t* ready, uint32_t* consumed,
                  bool wait_for_consumer) {
  const int t = int(threadIdx.x);
  for (uint32_t round = 0; round < 3; ++round) {
    if (blockIdx.x == 0) {
      if (wait_for_consumer && round > 0) mk::wait_at_least(consumed, round);
      data[size_t(t)] = float(round);
      mk::signal_add(ready, 1u);
    } else {
      mk::wait_at_least(ready, round + 1);
      out[size_t(t)] += data[size_t(t)];
      mk::signal_add(consumed, 1u);
    }
  }
}

TEST(SimtRaceCheck, ABufferRewrittenBeforeItsReaderIsDoneIsReported) {
  for (bool wait : {true, false}) {
    SCOPED_TRACE(wait ? "the producer waits for the consumer" : "the producer runs ahead");
    std::vector<float> data(kThreads, 0.0f), out(kThreads, 0.0f);
    uint32_t ready = 0, consumed = 0;
    const std::string report = check(2, [&] { reuse_kernel(data, out, &ready, &consumed, wait); });
    if (wait) {
      EXPECT_EQ(report, "");
    } else {
      // Either side can come first: block 1 reads a later round's write, or block 0 overwrites
      // what block 1 has not finished reading.
      EXPECT_NE(report.find("write by block 0"), std::string::npos) << report;
      EXPECT_NE(report.find("read by block 1"), std::string::npos) << report;
    }
  }
}

// Every block writes its partial, then takes a ticket; the last one merges all partials (the
// attention splits' and the LM head's pattern).
TEST(SimtRaceCheck, TheLastTicketSeesEveryPartialUnlessTheTicketIsRelaxed) {
  for (uint32_t fault : {0u, uint32_t(mk::kFaultRelaxedRelease)}) {
    SCOPED_TRACE(fault ? "relaxed tickets" : "acq_rel tickets");
    constexpr int kBlocks = 5;
    std::vector<float> partial(kBlocks * kThreads, 0.0f);
    float total = 0;
    uint32_t ticket = 0;
    mk::g_sync_faults = fault;
    const std::string report = check(kBlocks, [&] {
      const int t = int(threadIdx.x), b = int(blockIdx.x);
      partial[size_t(b * kThreads + t)] = float(b + 1);
      __syncthreads();
      // "Am I last" reaches the block's threads through a word only this block touches.
      static uint32_t flags[kBlocks];
      if (t == 0) flags[b] = mk::take_ticket(&ticket) == kBlocks - 1;
      __syncthreads();
      if (flags[b] && t == 0) {
        for (int i = 0; i < kBlocks * kThreads; ++i) total += partial[size_t(i)];
      }
    });
    EXPECT_EQ(total, float(kThreads * (1 + 2 + 3 + 4 + 5)));
    if (fault) {
      EXPECT_NE(report.find("read by block"), std::string::npos) << report;
    } else {
      EXPECT_EQ(report, "");
    }
  }
}

TEST(SimtRaceCheck, HappensBeforeIsTransitiveThroughAMiddleBlock) {
  // Block 2 waits only for block 1, which waited for block 0: block 0's data is ordered for it.
  std::vector<float> data(kThreads, 0.0f), out(kThreads, 0.0f);
  uint32_t first = 0, second = 0;
  const std::string report = check(3, [&] {
    const int t = int(threadIdx.x);
    if (blockIdx.x == 0) {
      data[size_t(t)] = 3.0f;
      mk::signal_add(&first, 1u);
    } else if (blockIdx.x == 1) {
      mk::wait_at_least(&first, 1u);
      mk::signal_add(&second, 1u);
    } else {
      mk::wait_at_least(&second, 1u);
      out[size_t(t)] = data[size_t(t)];
    }
  });
  EXPECT_EQ(report, "");
  EXPECT_EQ(out[7], 3.0f);
}

TEST(SimtRaceCheck, AtomicsDoNotRaceEachOtherButAPlainReadOfThemDoes) {
  uint32_t count = 0, seen = 0;
  std::string report = check(4, [&] { atomicAdd(&count, 1u); });
  EXPECT_EQ(report, "");
  EXPECT_EQ(count, 4u * kThreads);
  report = check(2, [&] {
    if (blockIdx.x == 0)
      atomicAdd(&count, 1u);
    else if (threadIdx.x == 0)
      seen = count;  // a plain read of another block's atomic writes
  });
  EXPECT_NE(report.find("atomic write by block 0"), std::string::npos) << report;
  (void)seen;
}

// ld.global.nc (__ldg) and cp.async.bulk assume memory that does not change while the kernel runs:
// reading memory the launch writes through them is reported even when a wait orders the two.
TEST(SimtRaceCheck, ReadOnlyPathsOfMemoryWrittenInTheLaunchAreReported) {
  std::vector<float> weights(kThreads, 1.0f), data(kThreads, 0.0f), out(kThreads, 0.0f);
  uint32_t counter = 0;
  std::vector<float> per_block(2 * kThreads, 0.0f);
  EXPECT_EQ(check(2, [&] { per_block[blockIdx.x * kThreads + threadIdx.x] = __ldg(&weights[threadIdx.x]); }), "");

  std::string report = check(2, [&] {
    const int t = int(threadIdx.x);
    if (blockIdx.x == 0) {
      data[size_t(t)] = 2.0f;
      mk::signal_add(&counter, 1u);
    } else {
      mk::wait_at_least(&counter, 1u);
      out[size_t(t)] = __ldg(&data[size_t(t)]);  // ordered, but through the non-coherent cache
    }
  });
  EXPECT_NE(report.find("through __ldg"), std::string::npos) << report;

  report = check(1, [&] {
    const int t = int(threadIdx.x);
    out[size_t(t)] = __ldg(&data[size_t(t)]);
    data[size_t(t)] = 5.0f;  // the same thread, after its own __ldg
  });
  EXPECT_NE(report.find("through __ldg"), std::string::npos) << report;

  // A bulk copy (the weight ring's path) of memory the block itself just wrote.
  alignas(16) static float staged[kThreads];
  simt::race::set_throw_on_race(false);
  simt::Options o;
  o.coresident = true;
  o.dynamic_shared_bytes = sizeof staged + 16;
  simt::launch(
      dim3(1), dim3(kThreads),
      [&] {
        const int t = int(threadIdx.x);
        staged[t] = float(t);
        __syncthreads();
        auto* smem = simt::dynamic_shared<uint8_t>();
        auto* bar = reinterpret_cast<uint64_t*>(smem + sizeof staged);
        if (t == 0) {
          simt::mbarrier_init(bar, 1);
          simt::mbarrier_arrive_expect_tx(bar, sizeof staged);
          simt::bulk_copy_g2s(smem, staged, sizeof staged, bar);
        }
        __syncthreads();
        while (!simt::mbarrier_try_wait_parity(bar, 0)) {
        }
      },
      o);
  simt::race::set_throw_on_race(true);
  EXPECT_NE(simt::race::last_report().find("through cp.async.bulk"), std::string::npos) << simt::race::last_report();
}

TEST(SimtRaceCheck, ARaceFailsTheLaunchByDefault) {
  std::vector<float> data(kThreads, 1.0f);
  float sink = 0;
  simt::Options o;
  o.coresident = true;
  try {
    simt::launch(
        dim3(2), dim3(kThreads),
        [&] {
          if (blockIdx.x == 0)
            data[threadIdx.x] = 2.0f;
          else
            sink += data[threadIdx.x];
        },
        o);
    FAIL() << "the race went unreported";
  } catch (const simt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("simt race check"), std::string::npos) << e.what();
  }
  (void)sink;
}

}  // namespace
