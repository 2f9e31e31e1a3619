// The simt emulator itself (tests/simt/simt.h): CUDA semantics of the built-in variables, block
// barriers, warp shuffles / votes, atomics and shared memory, the thread and block orders, and the
// readable errors for what would hang or be undefined on a GPU (barrier and warp divergence, partial
// masks, exceptions, use outside a kernel); co-resident grids (blocks that spin on each other, the
// spin deadlock report, skew) and Hopper's mbarriers and bulk copies with their rules.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "megaqwen/cuda/kernels/common.cuh"  // through shim/: the emulator stands in for the CUDA headers

namespace {

using simt::Order;

// Runs the launch expecting simt::Error; returns its message ("" if none was thrown).
template <class Launch>
std::string error_of(Launch&& launch) {
  try {
    launch();
  } catch (const simt::Error& e) {
    return e.what();
  }
  return "";
}

TEST(SimtEmulator, BuiltInVariablesCoverTheGridAndBlock) {
  const dim3 grid(3, 2, 2), block(8, 4, 2);
  std::set<std::vector<unsigned>> seen;
  simt::launch(grid, block, [&] {
    EXPECT_EQ(blockDim.x, 8u);
    EXPECT_EQ(blockDim.y * blockDim.z, 8u);
    EXPECT_EQ(gridDim.x * gridDim.y * gridDim.z, 12u);
    seen.insert({blockIdx.x, blockIdx.y, blockIdx.z, threadIdx.x, threadIdx.y, threadIdx.z});
  });
  EXPECT_EQ(seen.size(), size_t(12 * 64));
  for (const auto& s : seen) {
    EXPECT_LT(s[0], 3u);
    EXPECT_LT(s[1], 2u);
    EXPECT_LT(s[2], 2u);
    EXPECT_LT(s[3], 8u);
    EXPECT_LT(s[4], 4u);
    EXPECT_LT(s[5], 2u);
  }
}

TEST(SimtEmulator, ShufflesFollowCudaSemantics) {
  for (int width : {32, 16, 8, 4}) {
    std::vector<int> x(64), up(64), down(64), idx(64), mine(64);
    simt::launch(dim3(1), dim3(64), [&] {
      const int t = int(threadIdx.x), v = 1000 + t;
      x[size_t(t)] = __shfl_xor_sync(0xffffffffu, v, 3, width);
      up[size_t(t)] = __shfl_up_sync(0xffffffffu, v, 2, width);
      down[size_t(t)] = __shfl_down_sync(0xffffffffu, v, 5, width);
      idx[size_t(t)] = __shfl_sync(0xffffffffu, v, 7, width);
      mine[size_t(t)] = __shfl_sync(0xffffffffu, v, t + 1);  // srcLane is taken modulo the width
    });
    for (int t = 0; t < 64; ++t) {
      const int lane = t % 32, seg = lane & ~(width - 1), in = lane & (width - 1), wbase = t - lane;
      SCOPED_TRACE("width " + std::to_string(width) + " thread " + std::to_string(t));
      const int xs = lane ^ 3;
      EXPECT_EQ(x[size_t(t)], 1000 + wbase + (xs < seg + width ? xs : lane));
      EXPECT_EQ(up[size_t(t)], 1000 + (in >= 2 ? t - 2 : t));
      EXPECT_EQ(down[size_t(t)], 1000 + (in + 5 < width ? t + 5 : t));
      EXPECT_EQ(idx[size_t(t)], 1000 + wbase + seg + (7 & (width - 1)));
      EXPECT_EQ(mine[size_t(t)], 1000 + wbase + (lane + 1) % 32);
    }
  }
}

TEST(SimtEmulator, ShufflesMoveAnyEightByteValue) {
  std::vector<double> d(32);
  std::vector<unsigned long long> u(32);
  simt::launch(dim3(1), dim3(32), [&] {
    const int t = int(threadIdx.x);
    d[size_t(t)] = __shfl_xor_sync(0xffffffffu, 0.5 + t, 1);
    u[size_t(t)] = __shfl_down_sync(0xffffffffu, (1ull << 40) + unsigned(t), 1);
  });
  for (int t = 0; t < 32; ++t) {
    EXPECT_EQ(d[size_t(t)], 0.5 + (t ^ 1));
    EXPECT_EQ(u[size_t(t)], (1ull << 40) + unsigned(t < 31 ? t + 1 : t));
  }
}

TEST(SimtEmulator, VotesAndBlockReductions) {
  std::vector<unsigned> ballot(128);
  std::vector<int> any(128), all(128), count(128), band(128), band_false(128), bor(128), bor_false(128);
  std::vector<float> sum(128), mx(128);
  simt::launch_shared<float[32]>(dim3(1), dim3(128), [&](float (&scratch)[32]) {
    const int t = int(threadIdx.x);
    ballot[size_t(t)] = __ballot_sync(0xffffffffu, t % 3 == 0);
    any[size_t(t)] = __any_sync(0xffffffffu, t == 40);
    all[size_t(t)] = __all_sync(0xffffffffu, t < 96);
    count[size_t(t)] = __syncthreads_count(t % 5 == 0);
    band[size_t(t)] = __syncthreads_and(t < 200);
    band_false[size_t(t)] = __syncthreads_and(t != 77);  // one thread false: 0 for all
    bor[size_t(t)] = __syncthreads_or(t == 127);
    bor_false[size_t(t)] = __syncthreads_or(t > 1000);  // none true
    sum[size_t(t)] = megaqwen::cuda::block_sum(float(t), scratch);  // common.cuh, blockDim-driven
    mx[size_t(t)] = megaqwen::cuda::block_max(float((t * 37) % 128), scratch);
  });
  for (int t = 0; t < 128; ++t) {
    unsigned want = 0;
    for (int l = 0; l < 32; ++l) want |= unsigned((t - t % 32 + l) % 3 == 0) << l;
    EXPECT_EQ(ballot[size_t(t)], want);
    EXPECT_EQ(__popc(ballot[size_t(t)]), std::popcount(want));
    EXPECT_EQ(any[size_t(t)], t / 32 == 1);
    EXPECT_EQ(all[size_t(t)], t < 96);
    EXPECT_EQ(count[size_t(t)], 26);
    EXPECT_EQ(band[size_t(t)], 1);
    EXPECT_EQ(band_false[size_t(t)], 0);
    EXPECT_EQ(bor[size_t(t)], 1);
    EXPECT_EQ(bor_false[size_t(t)], 0);
    EXPECT_EQ(sum[size_t(t)], 127.0f * 128.0f / 2.0f);
    EXPECT_EQ(mx[size_t(t)], 127.0f);
  }
}

TEST(SimtEmulator, LargestBlockAndWarpSumFromCommon) {
  std::vector<float> out(1024);
  simt::launch_shared<float[32]>(dim3(2), dim3(1024), [&](float (&scratch)[32]) {
    const float s = megaqwen::cuda::block_sum(1.0f, scratch);
    if (blockIdx.x == 1) out[threadIdx.x] = s + megaqwen::cuda::warp_sum(float(threadIdx.x % 32));
  });
  for (float v : out) EXPECT_EQ(v, 1024.0f + 496.0f);
}

TEST(SimtEmulator, AtomicsAndBitCasts) {
  int i = 0;
  unsigned u = 0, mx = 0;
  float f = 0.0f;
  unsigned long long ull = 0;
  simt::launch(dim3(4), dim3(256), [&] {
    atomicAdd(&i, 1);
    atomicAdd(&u, 2u);
    atomicAdd(&f, 0.5f);
    atomicAdd(&ull, 1ull << 33);
    atomicMax(&mx, blockIdx.x * 1000u + threadIdx.x);
  });
  EXPECT_EQ(i, 1024);
  EXPECT_EQ(u, 2048u);
  EXPECT_EQ(f, 512.0f);
  EXPECT_EQ(ull, 1024ull << 33);
  EXPECT_EQ(mx, 3255u);
  EXPECT_EQ(__float_as_uint(-2.0f), 0xc0000000u);
  EXPECT_EQ(__uint_as_float(0x3f800000u), 1.0f);
  EXPECT_EQ(__float_as_int(__int_as_float(-7)), -7);
  EXPECT_EQ(__fadd_rn(1.0f, 0x1.0p-24f), 1.0f);  // ties to even
  EXPECT_EQ(__fmul_rn(3.0f, 0.5f), 1.5f);
  EXPECT_EQ(min(3, -4), -4);
  EXPECT_EQ(max(3u, 9u), 9u);
  EXPECT_EQ(__ffs(8), 4);
  EXPECT_EQ(__clz(1), 31);
  EXPECT_EQ(__brev(1u), 0x80000000u);
}

TEST(SimtEmulator, SharedMemoryIsFreshPoisonedAndPerBlock) {
  struct Shared {
    uint32_t word[64];
    int flag;
  };
  std::vector<uint32_t> first_read(8);
  std::vector<int> sums(8);
  simt::Options o;
  o.dynamic_shared_bytes = 256;
  simt::launch_shared<Shared>(dim3(8), dim3(64), [&](Shared& s) {
    const int t = int(threadIdx.x);
    if (t == 0) first_read[blockIdx.x] = s.word[5];  // never written before: the poison
    __syncthreads();
    s.word[t] = blockIdx.x + 1;
    simt::dynamic_shared<int>()[t] = int(blockIdx.x);
    __syncthreads();
    if (t == 0) {
      int total = 0;
      for (int k = 0; k < 64; ++k) total += int(s.word[k]) + simt::dynamic_shared<int>()[k];
      sums[blockIdx.x] = total;
    }
  }, o);
  for (int b = 0; b < 8; ++b) {
    EXPECT_EQ(first_read[size_t(b)], 0xa5a5a5a5u) << "block " << b << " saw another block's shared memory";
    EXPECT_EQ(sums[size_t(b)], 64 * (b + 1) + 64 * b);
  }
}

TEST(SimtEmulator, ThreadOrderDecidesWhoResumesFirst) {
  for (Order order : {Order::Forward, Order::Reverse, Order::Random}) {
    std::vector<int> after;
    simt::Options o;
    o.threads = order;
    o.seed = 7;
    simt::launch(dim3(1), dim3(64), [&] {
      __syncthreads();
      after.push_back(int(threadIdx.x));
    }, o);
    std::vector<int> sorted = after;
    std::sort(sorted.begin(), sorted.end());
    std::vector<int> ids(64);
    std::iota(ids.begin(), ids.end(), 0);
    EXPECT_EQ(sorted, ids);
    if (order == Order::Forward) {
      EXPECT_EQ(after, ids);
    }
    if (order == Order::Reverse) {
      EXPECT_EQ(after, std::vector<int>(ids.rbegin(), ids.rend()));
    }
    if (order == Order::Random) {
      EXPECT_NE(after, ids);
    }
  }
}

TEST(SimtEmulator, BlockOrderDecidesWhichBlockTakesTheLastTicket) {
  for (Order order : {Order::Forward, Order::Reverse, Order::Random}) {
    unsigned ticket = 0;
    std::vector<unsigned> ran;
    int last_block = -1;
    simt::Options o;
    o.blocks = order;
    o.seed = 3;
    simt::launch(dim3(6), dim3(32), [&] {
      if (threadIdx.x == 0) {
        ran.push_back(blockIdx.x);
        __threadfence();
        if (atomicAdd(&ticket, 1u) == gridDim.x - 1) last_block = int(blockIdx.x);
      }
    }, o);
    ASSERT_EQ(ran.size(), 6u);
    EXPECT_EQ(last_block, int(ran.back()));
    if (order == Order::Forward) {
      EXPECT_EQ(last_block, 5);
    }
    if (order == Order::Reverse) {
      EXPECT_EQ(last_block, 0);
    }
  }
}

TEST(SimtEmulator, ExitedThreadsAtABarrierAreReported) {
  const std::string m = error_of([] {
    simt::launch(dim3(1), dim3(64), [] {
      if (threadIdx.x == 40) return;
      __syncthreads();
    });
  });
  EXPECT_NE(m.find("barrier divergence"), std::string::npos) << m;
  EXPECT_NE(m.find("1 thread(s) exited"), std::string::npos) << m;
  EXPECT_NE(m.find("63 wait at __syncthreads"), std::string::npos) << m;
  EXPECT_NE(m.find("simt_emulator_test.cpp"), std::string::npos) << m;
}

TEST(SimtEmulator, BarriersAtDifferentSitesAreReported) {
  auto divergent = [] {
    if (threadIdx.x < 32) __syncthreads();
    else __syncthreads();
  };
  const std::string m = error_of([&] { simt::launch(dim3(1), dim3(64), divergent); });
  EXPECT_NE(m.find("barrier divergence"), std::string::npos) << m;
  simt::Options lax;
  lax.strict_sites = false;  // sm_70+ lets any bar.sync 0 meet: allowed when asked
  EXPECT_EQ(error_of([&] { simt::launch(dim3(1), dim3(64), divergent, lax); }), "");
}

TEST(SimtEmulator, WarpCollectiveDivergenceIsReported) {
  std::string m = error_of([] {
    simt::launch(dim3(1), dim3(64), [] {
      if (threadIdx.x != 35) __shfl_xor_sync(0xffffffffu, 1, 1);
    });
  });
  EXPECT_NE(m.find("deadlock"), std::string::npos) << m;
  EXPECT_NE(m.find("warp 1"), std::string::npos) << m;
  EXPECT_NE(m.find("3 (exited)"), std::string::npos) << m;

  m = error_of([] {
    simt::launch(dim3(1), dim3(32), [] {
      if (threadIdx.x == 0) __ballot_sync(0xffffffffu, 1);
      else __shfl_sync(0xffffffffu, 1, 0);
    });
  });
  EXPECT_NE(m.find("warp divergence"), std::string::npos) << m;

  m = error_of([] {
    simt::launch(dim3(1), dim3(64), [] {
      if (threadIdx.x < 32) __syncthreads();
      else __syncwarp();
    });
  });
  EXPECT_NE(m.find("deadlock"), std::string::npos) << m;
}

TEST(SimtEmulator, PartialMasksAreRejected) {
  const std::string m = error_of([] {
    simt::launch(dim3(1), dim3(32), [] { __shfl_down_sync(0x0000ffffu, 1.0f, 1); });
  });
  EXPECT_NE(m.find("mask 0x0000ffff"), std::string::npos) << m;
}

TEST(SimtEmulator, DeviceExceptionsAndTrapAbortTheLaunch) {
  std::string m = error_of([] {
    simt::launch(dim3(2), dim3(64), [] {
      __syncthreads();
      if (blockIdx.x == 1 && threadIdx.x == 9) throw std::out_of_range("index 77");
      __syncthreads();
    });
  });
  EXPECT_NE(m.find("thread (9,0,0)"), std::string::npos) << m;
  EXPECT_NE(m.find("block (1,0,0)"), std::string::npos) << m;
  EXPECT_NE(m.find("index 77"), std::string::npos) << m;
  m = error_of([] { simt::launch(dim3(1), dim3(32), [] { if (threadIdx.x == 4) __trap(); }); });
  EXPECT_NE(m.find("__trap"), std::string::npos) << m;
  // The next launch runs normally after an aborted one.
  int n = 0;
  simt::launch(dim3(1), dim3(96), [&] {
    __syncthreads();
    atomicAdd(&n, 1);
  });
  EXPECT_EQ(n, 96);
}

TEST(SimtEmulator, MisuseIsReported) {
  EXPECT_NE(error_of([] { (void)threadIdx.x; }).find("outside a kernel"), std::string::npos);
  EXPECT_NE(error_of([] { __syncthreads(); }).find("outside a kernel"), std::string::npos);
  EXPECT_NE(error_of([] { simt::launch(dim3(1), dim3(48), [] {}); }).find("multiple of 32"), std::string::npos);
  EXPECT_NE(error_of([] { simt::launch(dim3(1), dim3(2048), [] {}); }).find("32..1024"), std::string::npos);
  EXPECT_NE(error_of([] {
              simt::launch(dim3(1), dim3(32), [] {
                if (threadIdx.x == 0) simt::launch(dim3(1), dim3(32), [] {});
              });
            }).find("inside a kernel"),
            std::string::npos);
}

// ---- co-resident grids ----

// A chain: block b waits for block b - 1's flag, then sets its own; the blocks run in reverse
// order, so every one but block 0 spins first. Only a co-resident grid can finish this.
TEST(SimtEmulator, CoresidentBlocksWaitOnEachOther) {
  for (Order order : {Order::Forward, Order::Reverse, Order::Random}) {
    std::vector<unsigned> flag(6, 0);
    std::vector<int> finish_order;
    simt::Options o;
    o.coresident = true;
    o.blocks = order;
    o.threads = order;
    o.skew = 0.5;
    simt::launch(dim3(6), dim3(64), [&] {
      const unsigned b = blockIdx.x;
      if (threadIdx.x == 0 && b > 0)
        while (flag[b - 1] == 0) simt::poll("flag");
      __syncthreads();
      if (threadIdx.x == 0) {
        flag[b] = 1;
        finish_order.push_back(int(b));
      }
    }, o);
    EXPECT_EQ(finish_order, (std::vector<int>{0, 1, 2, 3, 4, 5}));
  }
}

TEST(SimtEmulator, SequentialBlocksCannotWaitOnALaterBlock) {
  std::vector<unsigned> flag(2, 0);
  const std::string m = error_of([&] {
    simt::launch(dim3(2), dim3(32), [&] {
      if (blockIdx.x == 0)
        while (flag[1] == 0) simt::poll("flag of block 1");
      flag[blockIdx.x] = 1;
    });
  });
  EXPECT_NE(m.find("deadlock: threads spin"), std::string::npos) << m;
  EXPECT_NE(m.find("flag of block 1"), std::string::npos) << m;
}

TEST(SimtEmulator, SpinOnMemoryNoOneWritesIsADeadlockWithEveryBlocksState) {
  unsigned never = 0;
  simt::Options o;
  o.coresident = true;
  const std::string m = error_of([&] {
    simt::launch(dim3(3), dim3(64), [&] {
      if (blockIdx.x == 1 && threadIdx.x == 0)
        while (never == 0) simt::poll("the never flag");
      __syncthreads();
    }, o);
  });
  EXPECT_NE(m.find("deadlock: threads spin on memory"), std::string::npos) << m;
  EXPECT_NE(m.find("block (1,0,0): 63 thread(s) wait at __syncthreads"), std::string::npos) << m;
  EXPECT_NE(m.find("1 poll (first: thread (0,0,0)"), std::string::npos) << m;
  EXPECT_NE(m.find("the never flag"), std::string::npos) << m;
}

TEST(SimtEmulator, CoresidentGridOverTheThreadCapIsRefused) {
  simt::Options o;
  o.coresident = true;
  EXPECT_NE(error_of([&] { simt::launch(dim3(129), dim3(1024), [] {}, o); }).find("at most 131,072"), std::string::npos);
}

// ---- mbarriers and bulk copies ----

struct alignas(16) CopyShared {
  uint64_t bar[2];
  uint8_t buf[2][256];
};

// A two-buffer ring of bulk copies, as the megakernel's weight stream: thread 0 arms the mbarrier
// with the byte count and issues the copy; everyone waits on the phase parity, reads, and the
// buffer is refilled after a barrier. Under both copy timings the data arrive intact; right after
// the issue the buffer holds the new bytes under AtIssue and still the old ones under AtWait.
TEST(SimtEmulator, BulkCopiesCompleteTheirMbarrierPhases) {
  std::vector<uint8_t> src(8 * 256);
  for (size_t i = 0; i < src.size(); ++i) src[i] = uint8_t(i * 7 + i / 256 * 13 + 3);  // chunks differ
  for (simt::CopyTiming timing : {simt::CopyTiming::AtIssue, simt::CopyTiming::AtWait}) {
    simt::Options o;
    o.copies = timing;
    o.threads = Order::Random;
    o.dynamic_shared_bytes = sizeof(CopyShared);
    int bad = 0, stale_after_issue = 0;
    simt::launch(dim3(1), dim3(64), [&] {
      auto& s = *simt::dynamic_shared<CopyShared>();
      auto issue = [&](int b, int chunk) {
        simt::mbarrier_arrive_expect_tx(&s.bar[b], 256);
        simt::bulk_copy_g2s(s.buf[b], src.data() + size_t(chunk) * 256, 256, &s.bar[b]);
        stale_after_issue += s.buf[b][5] != src[size_t(chunk) * 256 + 5];
      };
      if (threadIdx.x == 0) {
        simt::mbarrier_init(&s.bar[0], 1);
        simt::mbarrier_init(&s.bar[1], 1);
        std::memset(s.buf, 0, sizeof s.buf);
        issue(0, 0);
        issue(1, 1);
      }
      __syncthreads();
      for (int chunk = 0; chunk < 8; ++chunk) {
        const int b = chunk % 2;
        while (!simt::mbarrier_try_wait_parity(&s.bar[b], unsigned(chunk / 2) & 1u)) {
        }
        for (int i = int(threadIdx.x); i < 256; i += 64)
          if (s.buf[b][i] != src[size_t(chunk) * 256 + size_t(i)]) ++bad;
        __syncthreads();
        if (threadIdx.x == 0 && chunk + 2 < 8) issue(b, chunk + 2);
      }
    }, o);
    EXPECT_EQ(bad, 0);
    EXPECT_EQ(stale_after_issue, timing == simt::CopyTiming::AtWait ? 8 : 0);
  }
}

TEST(SimtEmulator, BulkCopyRulesAreEnforced) {
  alignas(16) static uint8_t src[512];
  simt::Options o;
  o.dynamic_shared_bytes = sizeof(CopyShared);
  auto copy_error = [&](auto&& body) {
    return error_of([&] {
      simt::launch(dim3(1), dim3(32), [&] {
        auto& s = *simt::dynamic_shared<CopyShared>();
        if (threadIdx.x == 0) body(s);
      }, o);
    });
  };
  EXPECT_NE(copy_error([](CopyShared& s) {
              simt::mbarrier_init(&s.bar[0], 1);
              simt::bulk_copy_g2s(s.buf[0], src, 24, &s.bar[0]);
            }).find("multiple of 16"),
            std::string::npos);
  EXPECT_NE(copy_error([](CopyShared& s) {
              simt::mbarrier_init(&s.bar[0], 1);
              simt::bulk_copy_g2s(s.buf[0], src + 8, 32, &s.bar[0]);
            }).find("16-byte aligned"),
            std::string::npos);
  EXPECT_NE(copy_error([](CopyShared& s) {
              simt::mbarrier_init(&s.bar[0], 1);
              simt::bulk_copy_g2s(s.buf[1] + 128, src, 256, &s.bar[0]);
            }).find("outside the block's dynamic shared memory"),
            std::string::npos);
  EXPECT_NE(copy_error([](CopyShared& s) { simt::bulk_copy_g2s(s.buf[0], src, 32, &s.bar[0]); }).find("never initialized"),
            std::string::npos);
  EXPECT_NE(copy_error([](CopyShared& s) {
              simt::mbarrier_init(&s.bar[0], 1);
              simt::mbarrier_arrive_expect_tx(&s.bar[0], 32);
              simt::bulk_copy_g2s(s.buf[0], src, 32, &s.bar[0]);  // never waited for (AtWait: still in flight)
            }).find("exited with 1 bulk copy(ies)"),
            std::string::npos);
  EXPECT_NE(copy_error([](CopyShared& s) {
              simt::mbarrier_init(&s.bar[0], 1);
              simt::mbarrier_arrive_expect_tx(&s.bar[0], 32);
              simt::mbarrier_arrive_expect_tx(&s.bar[0], 32);
            }).find("arrivals are all in"),
            std::string::npos);
  EXPECT_NE(copy_error([](CopyShared&) { simt::bulk_prefetch_l2(src + 4, 64); }).find("misaligned"), std::string::npos);
}

}  // namespace
