// The megakernel's token selection (src/megaqwen/cuda/megakernel/topk.cuh and select.cuh) executed on
// the host by the simt emulator (simt.h): the real device code, kThreads = 512 threads per block, one
// fiber per thread, checked against CPU references. The CPU-only counterpart of the Megakernel.*
// selection tests in tests/cuda/megakernel_test.cpp.
//
//   SimtTopK:   kth_largest + compact_top_k against the CPU's top K (value descending, lowest index
//               on ties; slots in index order) for n from 1 to 10,240 (kThreads * kSelPerThread; 15
//               sizes around the warp, block and keys-per-thread boundaries), K from 1 to 64 (7 values),
//               random keys, many ties, all-equal keys, special floats and raw 32-bit keys;
//               exclusive_scan; sort_candidates against std::sort (value desc, id asc, -inf / INT_MAX
//               padding).
//   SimtSelect: select_test_kernel's multi-CTA flow (per-CTA best or candidates, a ticket, the last CTA
//               merges and draws) for the argmax modes (greedy winner planted at every CTA slice
//               edge, ties to the lowest id across CTA boundaries, NaN never winning, penalties, Gumbel)
//               and the filtered mode (top_k / top_p / min_p, penalties), V = 40..151,936 over 1, 5,
//               132 CTAs. Filtered draws are compared with an exact host computation of the same draw
//               (the CPU Sampler's candidates, u = uniform_at(seed, step, 0xffffffff), merge_and_draw's
//               arithmetic): the same token, every draw. Plus a statistical check against
//               Sampler::distribution (bound stated at the test).
//
// Thread order: the emulator resumes threads after each synchronization point in forward, reverse or
// seeded random order (simt::Options); CUDA promises none, so results must not depend on it. This
// suite found a warp-level race in kth_largest this way (warp 0 read s.remaining while another lane
// of the warp could already have rewritten it, no __syncwarp in between; under forward order a lane
// could then match a second bin and the "K-th largest" became a larger key; since fixed in topk.cuh:
// both values are read between the pass's two barriers). SimtTopK.KthLargestIsIndependentOfLaneOrder
// and SimtSelect.FilteredDrawIsIndependentOfLaneOrder are its regression tests, and
// SimtTopK.EmulatorCatchesThePreFixWarpRace runs a verbatim copy of the old code to keep the emulator
// able to catch it. The other tests run in forward order, several also in reverse and random order.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <iterator>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "megaqwen/cuda/megakernel/select.cuh"  // topk.cuh, common.cuh (through shim/: the emulator)
#include "megaqwen/sampling/sampler.h"
#include "megakernel/select_test_args.h"
#include "simt/host_draw.h"
#include "test_random.h"

namespace megaqwen {
namespace {

using cuda::uniform_at;
using cuda::mk::FilterRule;
using cuda::mk::kMaxTopK;
using cuda::mk::kSelPerThread;
using cuda::mk::kThreads;
using cuda::mk::KeyBlock;
using cuda::mk::SelectTestArgs;
using cuda::mk::SelectShared;
using cuda::mk::TopKShared;
using simt::Order;
using test::counts_of;
using test::greedy_select;
using test::host_filtered_draw;
using test::HostDraw;
using test::lowest_argmax;
using test::sampler_transformed;
using test::select_args;

constexpr int kCap = kThreads * kSelPerThread;  // 10,240 keys per block

simt::Options threads_in(Order order, uint64_t seed = 1) {
  simt::Options o;
  o.threads = order;
  o.seed = seed;
  return o;
}
const char* order_name(Order o) { return o == Order::Forward ? "forward" : o == Order::Reverse ? "reverse" : "random"; }

using test::random_floats;

// ===================================== topk.cuh =====================================

enum class Keys { Random, Ties, Equal, Special, Raw };
const char* keys_name(Keys k) {
  constexpr const char* names[] = {"random", "ties", "equal", "special", "raw"};
  return names[int(k)];
}

std::vector<uint32_t> make_keys(Keys kind, int n, uint64_t seed) {
  using cuda::order_key;
  std::mt19937_64 rng(seed);
  std::vector<uint32_t> k(static_cast<size_t>(n));
  const float special[] = {-INFINITY, INFINITY, 0.0f, -0.0f, 1e-45f, -1e-45f, 3.4e38f, -3.4e38f, 1.0f, -1.0f, 0.5f};
  for (auto& key : k) {
    switch (kind) {
      case Keys::Random: key = order_key(std::uniform_real_distribution<float>(-8.0f, 8.0f)(rng)); break;
      case Keys::Ties: key = order_key(float(int(rng() % 4)) - 1.5f); break;
      case Keys::Equal: key = order_key(0.75f); break;
      case Keys::Special:
        key = rng() % 2 ? order_key(special[rng() % std::size(special)])
                        : order_key(std::uniform_real_distribution<float>(-1.0f, 1.0f)(rng));
        break;
      case Keys::Raw: key = uint32_t(1 + rng() % 0xffffffffull); break;  // any key but the padding 0
    }
  }
  return k;
}

struct TopKRun {
  std::vector<uint32_t> kth, take_eq;  // what every thread got
  std::vector<int> slot_index;         // slot -> index (-1: never emitted)
  std::vector<uint32_t> slot_key;
  int bad_emits = 0, bad_reads = 0;
};

// One block: load_keys, kth_largest, compact_top_k, as cta_top_k runs them.
TopKRun run_topk(const std::vector<uint32_t>& keys, int K, const simt::Options& o) {
  const int n = int(keys.size());
  TopKRun r;
  r.kth.assign(kThreads, 0);
  r.take_eq.assign(kThreads, 0);
  r.slot_index.assign(size_t(K), -1);
  r.slot_key.assign(size_t(K), 0);
  simt::launch_shared<TopKShared>(dim3(1), dim3(kThreads), [&](TopKShared& s) {
    KeyBlock kb;
    cuda::mk::load_keys(kb, n, [&](int i) {
      if (i < 0 || i >= n) return ++r.bad_reads, 0u;
      return keys[size_t(i)];
    });
    int take_eq = 0;
    const uint32_t kth = cuda::mk::kth_largest(kb, K, s, take_eq);
    r.kth[threadIdx.x] = kth;
    r.take_eq[threadIdx.x] = uint32_t(take_eq);
    cuda::mk::compact_top_k(kb, kth, take_eq, s, [&](int slot, int i, uint32_t key) {
      if (slot < 0 || slot >= K || r.slot_index[size_t(slot)] != -1) return void(++r.bad_emits);
      r.slot_index[size_t(slot)] = i;
      r.slot_key[size_t(slot)] = key;
    });
  }, o);
  return r;
}

std::string hex(uint32_t v) {
  char b[16];
  std::snprintf(b, sizeof b, "0x%08x", v);
  return b;
}

// The run against the CPU: the top K by (key desc, index asc); kth / take_eq the same in every thread.
testing::AssertionResult topk_matches(const std::vector<uint32_t>& keys, int K, const TopKRun& r) {
  const int n = int(keys.size());
  std::vector<int> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + K, order.end(), [&](int a, int b) {
    return keys[size_t(a)] > keys[size_t(b)] || (keys[size_t(a)] == keys[size_t(b)] && a < b);
  });
  const uint32_t kth = keys[size_t(order[size_t(K - 1)])];
  int take_eq = 0;
  for (int j = 0; j < K; ++j) take_eq += keys[size_t(order[size_t(j)])] == kth;
  std::vector<int> want(order.begin(), order.begin() + K);
  std::sort(want.begin(), want.end());  // slots are in index order
  auto fail = [&]() {
    return testing::AssertionFailure() << "n " << n << " K " << K << ": ";
  };
  if (r.bad_reads) return fail() << r.bad_reads << " key reads outside [0, n)";
  if (r.bad_emits) return fail() << r.bad_emits << " emits with a slot outside [0, K) or repeated";
  for (int t = 0; t < kThreads; ++t) {
    if (r.kth[size_t(t)] != kth)
      return fail() << "thread " << t << " got K-th key " << hex(r.kth[size_t(t)]) << ", CPU " << hex(kth) << " (value "
                    << cuda::key_value(r.kth[size_t(t)]) << " vs " << cuda::key_value(kth) << ")";
    if (int(r.take_eq[size_t(t)]) != take_eq)
      return fail() << "thread " << t << " got take_eq " << r.take_eq[size_t(t)] << ", CPU " << take_eq;
  }
  for (int j = 0; j < K; ++j) {
    if (r.slot_index[size_t(j)] != want[size_t(j)])
      return fail() << "slot " << j << " holds index " << r.slot_index[size_t(j)] << ", CPU " << want[size_t(j)];
    if (r.slot_key[size_t(j)] != keys[size_t(want[size_t(j)])]) return fail() << "slot " << j << " has the wrong key";
  }
  return testing::AssertionSuccess();
}

TEST(SimtTopK, OrderKeyIsTheFloatOrder) {
  using cuda::key_value;
  using cuda::order_key;
  const std::vector<float> v = {-INFINITY, -3.4e38f, -2.0f, -1.0f, -1e-45f, 0.0f, 1e-45f, 1e-3f, 1.0f, 2.5f, 3.4e38f, INFINITY};
  for (size_t i = 0; i < v.size(); ++i) {
    EXPECT_EQ(key_value(order_key(v[i])), v[i]);
    EXPECT_GT(order_key(v[i]), 0u) << "key 0 is the padding, below every real value";
    if (i > 0) {
      EXPECT_LT(order_key(v[i - 1]), order_key(v[i])) << v[i - 1] << " < " << v[i];
    }
  }
  EXPECT_EQ(order_key(-0.0f), order_key(0.0f));
}

// (a) every n / K / key shape: the emitted set is the CPU's top K, slots 0..K-1 in index order, once.
TEST(SimtTopK, KthLargestAndCompactTopKMatchTheCpu) {
  const std::vector<int> ns = {1, 2, 31, 32, 33, 64, 511, 512, 513, 1151, 2047, 4097, 7000, kCap - 1, kCap};
  const std::vector<int> Ks = {1, 2, 3, 16, 33, 63, 64};
  int runs = 0;
  for (Keys kind : {Keys::Random, Keys::Ties, Keys::Equal, Keys::Special, Keys::Raw})
    for (int n : ns)
      for (int K : Ks) {
        if (K > n) continue;
        if (kind == Keys::Equal && K != 1 && K != 33 && K != 64) continue;  // one shape: fewer K
        const auto keys = make_keys(kind, n, uint64_t(n) * 131 + uint64_t(K));
        const Order order = runs % 3 == 0 ? Order::Forward : runs % 3 == 1 ? Order::Random : Order::Reverse;
        EXPECT_TRUE(topk_matches(keys, K, run_topk(keys, K, threads_in(order, uint64_t(runs)))))
            << keys_name(kind) << ", " << order_name(order) << " thread order";
        ++runs;
      }
  EXPECT_GT(runs, 300);
}

// Regression test of the warp-0 race (see the top of this file), under every thread order:
//   keys: 3 huge values (top byte 0xd0: lane 26 owns bin 0xd0 of the first pass) and 100 values in
//   [2, 8) (bin 0xc0, lane 24), K = 5. Lane 24 finds the 5th key in bin 0xc0 and writes remaining = 2;
//   with the race, lane 26, resumed after it, read 2, saw above = 0 < 2 <= 3 in its own bins and
//   overwrote prefix with 0xd0: kth_largest returned one of the huge keys (3e10 in forward order) instead
//   of the 5th largest (6.9).
TEST(SimtTopK, KthLargestIsIndependentOfLaneOrder) {
  std::vector<uint32_t> planted;
  for (float big : {1e10f, 2e10f, 3e10f}) planted.push_back(cuda::order_key(big));
  for (int i = 0; i < 100; ++i) planted.push_back(cuda::order_key(2.0f + 0.05f * float(i)));
  for (Order order : {Order::Forward, Order::Reverse, Order::Random}) {
    EXPECT_TRUE(topk_matches(planted, 5, run_topk(planted, 5, threads_in(order, 11))))
        << "planted case, " << order_name(order) << " thread order";
    int wrong = 0;
    for (int trial = 0; trial < 12; ++trial) {
      const int n = 200 + 811 * trial, K = 4 + 5 * trial;
      const auto keys = make_keys(Keys::Random, n, 900 + uint64_t(trial));
      wrong += !topk_matches(keys, K, run_topk(keys, K, threads_in(order, uint64_t(trial))));
    }
    EXPECT_EQ(wrong, 0) << "random keys with a wrong K-th key (of 12), " << order_name(order) << " thread order";
  }
}

// kth_largest as it was before the race fix, verbatim but for the name: warp 0 reads s.remaining
// after its shuffles, while the lane that finds the K-th key's bin may already have rewritten it.
uint32_t kth_largest_before_fix(const KeyBlock& kb, int K, TopKShared& s, int& take_eq) {
  using cuda::kFullMask;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (threadIdx.x == 0) s.prefix = 0, s.remaining = uint32_t(K);
  uint32_t mask = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    if (threadIdx.x < 256) s.hist[threadIdx.x] = 0;
    __syncthreads();
    const uint32_t prefix = s.prefix;
#pragma unroll
    for (int j = 0; j < kSelPerThread; ++j)
      if (j < kb.per && (kb.key[j] & mask) == prefix) atomicAdd(&s.hist[(kb.key[j] >> shift) & 255u], 1u);
    __syncthreads();
    if (warp == 0) {
      uint32_t c[8], local = 0;
#pragma unroll
      for (int b = 0; b < 8; ++b) local += c[b] = s.hist[8 * lane + b];
      uint32_t suffix = local;  // sum over lanes >= lane
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const uint32_t v = __shfl_down_sync(kFullMask, suffix, o);
        if (lane + o < 32) suffix += v;
      }
      const uint32_t above = suffix - local, remaining = s.remaining;
      if (above < remaining && remaining <= suffix) {
        uint32_t cum = above;
        for (int b = 7; b >= 0; --b) {
          if (cum + c[b] >= remaining) {
            s.prefix = prefix | (uint32_t(8 * lane + b) << shift);
            s.remaining = remaining - cum;
            break;
          }
          cum += c[b];
        }
      }
    }
    mask |= 0xffu << shift;
    __syncthreads();
  }
  take_eq = int(s.remaining);
  return s.prefix;
}

// The emulator keeps catching the race this suite found: on the planted case above, the pre-fix code
// returns a wrong key in forward thread order and the right one in reverse order (the lanes above the
// writer then read first); the current kth_largest is right in both.
TEST(SimtTopK, EmulatorCatchesThePreFixWarpRace) {
  std::vector<uint32_t> keys;
  for (float big : {1e10f, 2e10f, 3e10f}) keys.push_back(cuda::order_key(big));
  for (int i = 0; i < 100; ++i) keys.push_back(cuda::order_key(2.0f + 0.05f * float(i)));
  const uint32_t want = cuda::order_key(2.0f + 0.05f * 98.0f);  // the 5th largest
  for (Order order : {Order::Forward, Order::Reverse})
    for (bool fixed : {false, true}) {
      uint32_t got = 0;
      simt::launch_shared<TopKShared>(dim3(1), dim3(kThreads), [&](TopKShared& s) {
        KeyBlock kb;
        cuda::mk::load_keys(kb, int(keys.size()), [&](int i) { return keys[size_t(i)]; });
        int take_eq = 0;
        const uint32_t kth = fixed ? cuda::mk::kth_largest(kb, 5, s, take_eq) : kth_largest_before_fix(kb, 5, s, take_eq);
        if (threadIdx.x == 0) got = kth;
      }, threads_in(order));
      if (!fixed && order == Order::Forward) {
        EXPECT_NE(got, want) << "the emulator no longer exposes the pre-fix race";
      } else {
        EXPECT_EQ(got, want) << (fixed ? "current" : "pre-fix") << " code, " << order_name(order) << " thread order";
      }
    }
}

TEST(SimtTopK, ExclusiveScanUnderEveryThreadOrder) {
  std::mt19937 rng(5);
  for (Order order : {Order::Forward, Order::Reverse, Order::Random}) {
    std::vector<int> v(kThreads), got(kThreads), total(kThreads);
    for (int& x : v) x = int(rng() % 21);
    simt::launch_shared<TopKShared>(dim3(1), dim3(kThreads), [&](TopKShared& s) {
      int t = 0;
      got[threadIdx.x] = cuda::mk::exclusive_scan(v[threadIdx.x], s, t);
      total[threadIdx.x] = t;
      // Twice in a row (the scratch is reusable after the call).
      const int again = cuda::mk::exclusive_scan(1, s, t);
      if (again != int(threadIdx.x) || t != kThreads) got[threadIdx.x] = -1;
    }, threads_in(order, 9));
    int prefix = 0;
    for (int i = 0; i < kThreads; ++i) {
      ASSERT_EQ(got[size_t(i)], prefix) << order_name(order) << " thread " << i;
      prefix += v[size_t(i)];
    }
    for (int t : total) ASSERT_EQ(t, prefix);
  }
}

// (b) the bitonic sort of <= kMaxTopK (value, id) pairs against std::sort, -inf / INT_MAX padding.
TEST(SimtTopK, SortCandidatesMatchesStdSort) {
  std::mt19937_64 rng(17);
  int cases = 0;
  for (Order order : {Order::Forward, Order::Reverse, Order::Random})
    for (int k : {0, 1, 2, 3, 5, 31, 32, 33, 63, 64})
      for (int shape = 0; shape < 3; ++shape) {
        // shape 0: distinct values; 1: heavy ties (the id decides); 2: -inf, +-0, +inf, denormals.
        std::vector<float> v(kMaxTopK, -INFINITY);
        std::vector<int32_t> id(kMaxTopK, INT_MAX);
        for (int j = 0; j < k; ++j) {
          const float special[] = {-INFINITY, 0.0f, -0.0f, INFINITY, 1e-40f, -2.0f};
          v[size_t(j)] = shape == 0   ? std::uniform_real_distribution<float>(-5, 5)(rng)
                         : shape == 1 ? float(int(rng() % 3))
                                      : special[rng() % 6];
          id[size_t(j)] = int32_t(rng() % 151936);
        }
        std::vector<std::pair<float, int32_t>> want;
        for (int j = 0; j < kMaxTopK; ++j) want.push_back({v[size_t(j)], id[size_t(j)]});
        std::sort(want.begin(), want.end(), [](const auto& a, const auto& b) {
          return cuda::mk::ranks_before(a.first, a.second, b.first, b.second);
        });
        std::vector<float> got_v(kMaxTopK);
        std::vector<int32_t> got_i(kMaxTopK);
        simt::launch_shared<TopKShared>(dim3(1), dim3(kThreads), [&](TopKShared& s) {
          const int t = int(threadIdx.x);
          if (t < kMaxTopK) s.cand_v[t] = v[size_t(t)], s.cand_i[t] = id[size_t(t)];
          cuda::mk::sort_candidates(s);  // starts with __syncthreads: the writes above are visible
          if (t < kMaxTopK) got_v[size_t(t)] = s.cand_v[t], got_i[size_t(t)] = s.cand_i[t];
        }, threads_in(order, uint64_t(k)));
        for (int j = 0; j < kMaxTopK; ++j) {
          ASSERT_EQ(got_i[size_t(j)], want[size_t(j)].second)
              << "position " << j << ", k " << k << " shape " << shape << ", " << order_name(order);
          ASSERT_EQ(__float_as_uint(got_v[size_t(j)]), __float_as_uint(want[size_t(j)].first)) << "position " << j;
        }
        ++cases;
      }
  EXPECT_EQ(cases, 90);
}

// ===================================== select.cuh =====================================

// select_test_kernel's __shared__ variables (megakernel.cuh).
struct FlowShared {
  float red[64];
  int last;
  SelectShared s;
  cuda::NucleusMember members[cuda::mk::kSelectTestMembers];
};

// What the selecting CTA saw (test instrumentation, after the draw).
struct Merged {
  std::vector<float> v;
  std::vector<int32_t> i;
  std::vector<int32_t> chosen_by_thread;
};

// select_test_kernel (megakernel.cuh): select.cuh's select_over_logits with its __shared__ variables
// in `sh` and the ticket as __threadfence + atomicAdd (sync.cuh's is inline PTX; the emulator runs one
// block at a time). The lines marked "test" record what the selecting CTA drew from.
void select_test_body(const SelectTestArgs a, FlowShared& sh, Merged* merged) {
  using namespace cuda::mk;
  const int id = select_over_logits(a, sh.red, sh.last, sh.s, sh.members, a.member_capacity, [&] {
    __threadfence();
    return atomicAdd(a.ticket, 1u);
  });
  if (id < 0) return;
  if (threadIdx.x == 0) a.out[0] = id;
  if (merged) merged->chosen_by_thread[threadIdx.x] = id;  // test
  if (a.top_k > 0 && merged) {                               // test
    if (threadIdx.x == 0) {
      merged->v.assign(sh.s.topk.cand_v, sh.s.topk.cand_v + a.top_k);
      merged->i.assign(sh.s.topk.cand_i, sh.s.topk.cand_i + a.top_k);
    }
  }
}

// The selection over host logits with its scratch (poisoned before every launch, so an entry read
// before it is written shows), as the GPU test's Selector.
struct Selector {
  int ctas, V;
  simt::Options options = threads_in(Order::Forward);
  std::vector<float> best_v, sel_vals, cand_v;
  std::vector<int32_t> best_i, cand_i, cand_n;
  Merged merged;
  Selector(int ctas_, int V_) : ctas(ctas_), V(V_) {}

  int32_t select(SelectTestArgs a) {
    best_v.assign(size_t(ctas), NAN);
    best_i.assign(size_t(ctas), -7);
    sel_vals.assign(size_t(V), NAN);
    cand_v.assign(size_t(ctas) * kMaxTopK, NAN);
    cand_i.assign(size_t(ctas) * kMaxTopK, -7);
    cand_n.assign(size_t(ctas), -7);
    merged = Merged{};
    merged.chosen_by_thread.assign(kThreads, -9);
    uint32_t ticket = 0;
    int32_t out = -1;  // a selection that writes nothing shows
    a.V = V;
    a.best_v = best_v.data();
    a.best_i = best_i.data();
    a.sel_vals = sel_vals.data();
    a.cand_v = cand_v.data();
    a.cand_i = cand_i.data();
    a.cand_n = cand_n.data();
    a.ticket = &ticket;
    a.out = &out;
    simt::launch_shared<FlowShared>(dim3(unsigned(ctas)), dim3(kThreads),
                                    [&](FlowShared& sh) { select_test_body(a, sh, &merged); }, options);
    EXPECT_EQ(ticket, uint32_t(ctas));
    return out;
  }
};



// The selecting CTA's sorted list is the host's top K (ids exactly; values as order_key sees them),
// every thread returned the same id, and each CTA's candidates are its slice's top min(K, rows) in id
// order with their transformed values.
void expect_filtered_state(const Selector& sel, const HostDraw& h, const std::vector<float>& transformed, int K,
                           const std::string& what) {
  using cuda::order_key;
  ASSERT_EQ(sel.merged.i.size(), size_t(K)) << what << ": the selecting CTA never ran merge_and_draw";
  for (int j = 0; j < K; ++j) {
    ASSERT_EQ(sel.merged.i[size_t(j)], h.top[size_t(j)]) << what << ": merged candidate " << j;
    ASSERT_EQ(order_key(sel.merged.v[size_t(j)]), order_key(h.top_v[size_t(j)])) << what << ": merged value " << j;
  }
  for (int32_t c : sel.merged.chosen_by_thread) ASSERT_EQ(c, sel.merged.chosen_by_thread[0]) << what;
  const int per = (sel.V + sel.ctas - 1) / sel.ctas;
  for (int c = 0; c < sel.ctas; ++c) {
    const int begin = std::min(sel.V, c * per), end = std::min(sel.V, begin + per), k = std::min(K, end - begin);
    ASSERT_EQ(sel.cand_n[size_t(c)], k) << what << ": CTA " << c;
    std::vector<int32_t> ids(size_t(end - begin));
    std::iota(ids.begin(), ids.end(), begin);
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](int32_t a, int32_t b) {
      return order_key(transformed[size_t(a)]) > order_key(transformed[size_t(b)]) ||
             (order_key(transformed[size_t(a)]) == order_key(transformed[size_t(b)]) && a < b);
    });
    std::sort(ids.begin(), ids.begin() + k);
    for (int j = 0; j < k; ++j) {
      ASSERT_EQ(sel.cand_i[size_t(c) * size_t(K) + size_t(j)], ids[size_t(j)]) << what << ": CTA " << c << " slot " << j;
      ASSERT_EQ(order_key(sel.cand_v[size_t(c) * size_t(K) + size_t(j)]), order_key(transformed[size_t(ids[size_t(j)])]))
          << what << ": CTA " << c << " slot " << j;
    }
  }
}

// (c) argmax: the winner planted at every CTA slice edge (and at both ends), for V = 1000 and the
// Qwen vocabulary over 1, 5 and 132 CTAs; ties to the lowest id across CTA boundaries.
//   - every slice at once: a winner planted at the first (then the last) id of every slice, with
//     values that make the first, the last, a shuffled CTA, or all of them (a tie across every CTA
//     boundary) the overall winner: each CTA's own result (best_v / best_i) and the merge are checked;
//   - one winner per launch at every edge for 1 and 5 CTAs; for 132 CTAs (each launch runs 132
//     blocks) at both ends and the edges of every 16th CTA and of the last ones;
//   - ties: two equal winners in different CTAs (far apart, both sides of a boundary, the ends), in
//     forward, reverse and random block order (the merging CTA changes).
// The argmax flow does not use kth_largest: it runs in forward and random thread order.
TEST(SimtSelect, GreedyWinnerInEveryCtaSliceAndAtTheEdges) {
  for (int V : {1000, 151936}) {
    const auto base = random_floats(size_t(V), uint64_t(V) + 5, -10, 10);
    std::vector<float> l = base;
    for (int ctas : {1, 5, 132}) {
      SCOPED_TRACE("V " + std::to_string(V) + " ctas " + std::to_string(ctas));
      Selector sel(ctas, V);
      sel.options = threads_in(Order::Forward);
      auto select = [&]() { return sel.select(greedy_select(l.data())); };
      EXPECT_EQ(select(), argmax(base));
      const int per = (V + ctas - 1) / ctas, slices = (V + per - 1) / per;
      std::vector<int> perm(static_cast<size_t>(slices));
      std::iota(perm.begin(), perm.end(), 0);
      std::shuffle(perm.begin(), perm.end(), std::mt19937(uint32_t(V + ctas)));
      for (int edge = 0; edge < 2; ++edge)
        for (int pattern = 0; pattern < 4; ++pattern) {
          auto spot = [&](int b) { return edge == 0 ? b * per : std::min(V, (b + 1) * per) - 1; };
          auto value = [&](int b) {
            const int rank = pattern == 0 ? b : pattern == 1 ? slices - 1 - b : pattern == 2 ? perm[size_t(b)] : 0;
            return 100.0f + 0.5f * float(rank);
          };
          int want = -1;
          for (int b = 0; b < slices; ++b) {
            l[size_t(spot(b))] = value(b);
            if (want < 0 || value(b) > l[size_t(want)]) want = spot(b);
          }
          EXPECT_EQ(select(), want) << (edge ? "last" : "first") << " ids, pattern " << pattern;
          for (int b = 0; b < ctas; ++b) {
            const bool empty = b >= slices;
            EXPECT_EQ(sel.best_i[size_t(b)], empty ? INT_MAX : spot(b)) << "CTA " << b;
            EXPECT_EQ(sel.best_v[size_t(b)], empty ? -INFINITY : value(b)) << "CTA " << b;
          }
          for (int b = 0; b < slices; ++b) l[size_t(spot(b))] = base[size_t(spot(b))];
        }
      std::vector<int> spots = {0, V - 1};
      for (int b = 0; b < slices; ++b)
        if (ctas < 100 || b % 16 == 0 || b >= slices - 2) {
          spots.push_back(b * per);
          spots.push_back(std::min(V, (b + 1) * per) - 1);
        }
      for (int at : spots) {
        l[size_t(at)] = 100.0f;
        ASSERT_EQ(select(), at) << "winner at " << at;
        EXPECT_EQ(sel.best_i[size_t(at / per)], at) << "the CTA owning " << at;
        l[size_t(at)] = base[size_t(at)];
      }
      const std::vector<std::pair<int, int>> ties = {{std::min(V - 1, per + 3), std::max(0, V - 2)},
                                                     {std::max(0, per - 1), std::min(V - 1, per)},
                                                     {V - 1, 0}};
      for (auto [a, b] : ties)
        for (Order blocks : {Order::Forward, Order::Reverse, Order::Random}) {
          if (ctas > 100 && blocks != Order::Forward && a != ties[0].first) continue;
          sel.options = threads_in(Order::Random, uint64_t(a + b));
          sel.options.blocks = blocks;
          l[size_t(a)] = l[size_t(b)] = 200.0f;
          EXPECT_EQ(select(), std::min(a, b)) << "tie " << a << "/" << b << ", block order " << order_name(blocks);
          l[size_t(a)] = base[size_t(a)];
          l[size_t(b)] = base[size_t(b)];
        }
    }
  }
}

// NaN logits become -inf: never chosen over a number, wherever they sit (and all-NaN draws id 0,
// as select_test_kernel maps an empty result).
TEST(SimtSelect, NanNeverWins) {
  const int V = 4000;
  const auto base = random_floats(size_t(V), 12, -3, 3);
  const int best = argmax(base);
  for (int ctas : {1, 5, 132}) {
    Selector sel(ctas, V);
    const int per = (V + ctas - 1) / ctas;
    std::vector<float> l = base;
    // NaN at the winner, at the start of every slice, and the whole slice of the winner's CTA but it.
    l[size_t(best)] = NAN;
    std::vector<float> rest = base;
    rest[size_t(best)] = -INFINITY;
    const int second = argmax(rest);
    for (int b = 0; b * per < V; ++b)
      if (b * per != second) l[size_t(b * per)] = NAN;
    for (int i = (second / per) * per; i < std::min(V, (second / per + 1) * per); ++i)
      if (i != second) l[size_t(i)] = NAN;
    EXPECT_EQ(sel.select(greedy_select(l.data())), second) << "ctas " << ctas;
    // NaN next to +inf and -inf.
    l = base;
    l[3] = NAN;
    l[size_t(V - 2)] = INFINITY;
    l[size_t(V - 1)] = NAN;
    EXPECT_EQ(sel.select(greedy_select(l.data())), V - 2) << "ctas " << ctas;
    // Only NaN and -inf: every value is -inf, the lowest id wins.
    std::vector<float> none(size_t(V), NAN);
    none[7] = -INFINITY;
    EXPECT_EQ(sel.select(greedy_select(none.data())), 0) << "ctas " << ctas;
    // Filtered: a NaN is a -inf candidate, never above a number.
    l = base;
    l[size_t(best)] = NAN;
    SamplingParams p;
    p.top_k = 8;
    p.top_p = 1e-6f;  // the best candidate
    p.seed = 4;
    EXPECT_EQ(sel.select(select_args(l.data(), p, nullptr, 0)), second) << "filtered, ctas " << ctas;
  }
}

// Greedy with penalties: the kernel's transform is the CPU Sampler's, so the choice is the same.
TEST(SimtSelect, GreedyWithPenaltiesMatchesTheSampler) {
  const int V = 151936;
  const auto logits = random_floats(size_t(V), 21, -4, 4);
  std::vector<int32_t> order(static_cast<size_t>(V));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return logits[size_t(a)] > logits[size_t(b)]; });
  // The history repeats the top ids so the penalties change the winner.
  const std::vector<int32_t> history = {order[0], order[0], order[1], order[2], order[2], order[2], 5, V - 1};
  const auto counts = counts_of(history, V);
  int combos = 0;
  for (float rep : {1.0f, 1.5f, 0.7f})
    for (float presence : {0.0f, 1.0f})
      for (float frequency : {0.0f, 0.8f}) {
        Selector sel(combos % 3 == 0 ? 132 : 5, V);
        sel.options = threads_in(Order::Random, uint64_t(combos));
        const SamplingParams p = test::sampling_params(0.0f, 0, 1.0f, 0.0f, rep, presence, frequency, 0);  // greedy
        Sampler cpu(p);
        std::vector<float> l = logits;
        EXPECT_EQ(sel.select(select_args(logits.data(), p, counts.data(), 0)), cpu.sample(l, history))
            << "repetition " << rep << " presence " << presence << " frequency " << frequency;
        ++combos;
      }
}

// Plain sampling (Gumbel-max): the kernel's draw is argmax(l / T + Gumbel(seed, step, id)); the host
// computes the same from the Sampler's transformed logits, exactly.
TEST(SimtSelect, GumbelDrawIsTheExactHostDraw) {
  struct Case {
    int V, ctas;
    float temperature, repetition, presence, frequency;
  };
  const Case cases[] = {{40, 5, 0.8f, 1.0f, 0.0f, 0.0f}, {1000, 1, 1.0f, 1.2f, 0.0f, 0.4f}, {1000, 132, 0.5f, 1.0f, 0.0f, 0.0f},
                        {151936, 132, 1.1f, 1.3f, 0.5f, 0.2f}};
  for (const Case& c : cases) {
    const auto logits = random_floats(size_t(c.V), uint64_t(c.V) + 9, -2, 2);
    const std::vector<int32_t> history = {3, 3, 7, 11, 11, 11, c.V - 1};
    const auto counts = counts_of(history, c.V);
    SamplingParams p;
    p.temperature = c.temperature;
    p.repetition_penalty = c.repetition;
    p.presence_penalty = c.presence;
    p.frequency_penalty = c.frequency;
    p.seed = 99;
    const auto t = sampler_transformed(logits, p, history, nullptr);
    Selector sel(c.ctas, c.V);
    const int steps = c.ctas == 132 ? 2 : 12;
    for (int step = 0; step < steps; ++step) {
      std::vector<float> g(static_cast<size_t>(c.V));
      for (int i = 0; i < c.V; ++i) g[size_t(i)] = test::gumbel_value(t[size_t(i)], p.seed, uint64_t(step), i);
      EXPECT_EQ(sel.select(select_args(logits.data(), p, counts.data(), uint64_t(step))), lowest_argmax(g))
          << "V " << c.V << " ctas " << c.ctas << " step " << step;
    }
  }
}

// (c) filtered: the drawn id is the exact host draw, and the candidates on the way are exact.
TEST(SimtSelect, FilteredDrawIsTheExactHostDraw) {
  struct Case {
    int V, ctas;
    float temperature;
    int top_k;
    float top_p, min_p, repetition, presence, frequency;
    int steps;
    bool ties;  // logits on a 0.25 grid: many equal values, ties to the lowest id
  };
  const Case cases[] = {
      {40, 5, 1.0f, 20, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 6, false},    // K > a slice: partial per-CTA lists
      {40, 1, 0.7f, 40, 0.8f, 0.0f, 1.0f, 0.0f, 0.0f, 6, false},    // K = V
      {1000, 1, 1.0f, 1, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 2, false},   // top_k 1: the argmax
      {1000, 1, 0.9f, 64, 0.95f, 0.05f, 1.3f, 0.5f, 0.2f, 6, false},
      {1000, 5, 1.3f, 17, 0.9f, 0.1f, 1.0f, 0.0f, 0.0f, 6, true},
      {1000, 5, 0.6f, 64, 1.0f, 0.2f, 1.2f, 0.0f, 0.4f, 6, false},
      {1000, 132, 1.0f, 64, 0.9f, 0.0f, 1.0f, 0.0f, 0.0f, 2, true},  // 8-id slices, 7 empty CTAs
      {kCap, 1, 1.0f, 33, 0.7f, 0.0f, 1.0f, 0.0f, 0.0f, 3, false},   // a slice of exactly kCap ids
      {5 * kCap, 5, 0.8f, 64, 1.0f, 0.02f, 1.0f, 1.0f, 0.0f, 2, true},
      {151936, 132, 0.7f, 64, 0.95f, 0.0f, 1.3f, 0.5f, 0.2f, 2, false},  // 132 x 64 merged keys
  };
  for (const Case& c : cases) {
    auto logits = random_floats(size_t(c.V), uint64_t(c.V) * 7 + uint64_t(c.top_k), -8, 8);
    if (c.ties)
      for (float& x : logits) x = std::round(x * 4.0f) / 4.0f;
    std::vector<int32_t> history = {0, 3, 3, 7, 11, 11, 11, c.V - 1};
    for (int j = 0; j < 5; ++j) history.push_back(lowest_argmax(logits) - j > 0 ? lowest_argmax(logits) - j : j);
    const auto counts = counts_of(history, c.V);
    SamplingParams p = test::sampling_params(c.temperature, c.top_k, c.top_p, c.min_p, c.repetition, c.presence,
                                                    c.frequency, 1234 + uint64_t(c.V));
    const auto t = sampler_transformed(logits, p, history, nullptr);
    Selector sel(c.ctas, c.V);
    const size_t index = size_t(&c - cases);
    sel.options = threads_in(index % 3 == 0 ? Order::Forward : index % 3 == 1 ? Order::Random : Order::Reverse, index);
    sel.options.blocks = index % 2 ? Order::Random : Order::Forward;  // the merging CTA changes
    for (int step = 0; step < c.steps; ++step) {
      const std::string what = "V " + std::to_string(c.V) + " ctas " + std::to_string(c.ctas) + " k " +
                               std::to_string(c.top_k) + " step " + std::to_string(step) + ", " +
                               order_name(sel.options.threads) + " thread order";
      const HostDraw h = host_filtered_draw(logits, p, history, uint64_t(step));
      EXPECT_EQ(sel.select(select_args(logits.data(), p, counts.data(), uint64_t(step))), h.id) << what;
      expect_filtered_state(sel, h, t, c.top_k, what);
    }
  }
}

// Nucleus mode (top-p / min-p, top-k off): the drawn id is host_nucleus_draw's over the Sampler's
// transformed values, in every thread of the selecting CTA, whatever CTA merges: 1, 5 and 132 CTAs,
// small and Qwen-sized vocabularies, flat distributions (thousands kept), ties on a 0.25 grid, min-p
// alone, both cuts with penalties; with the boundary bin searched in the shared member buffer and,
// with no buffer (capacity 0), over all V values. The host's kept set is the Sampler's.
TEST(SimtSelect, NucleusDrawIsTheExactHostDraw) {
  struct Case {
    int V, ctas;
    float temperature, top_p, min_p, repetition, presence, frequency;
    int steps;
    bool ties;
  };
  const Case cases[] = {
      {40, 5, 0.8f, 0.9f, 0.0f, 1.0f, 0.0f, 0.0f, 8, false},
      {1000, 1, 1.0f, 0.95f, 0.05f, 1.3f, 0.5f, 0.2f, 6, false},
      {1000, 5, 2.0f, 0.9f, 0.0f, 1.0f, 0.0f, 0.0f, 6, true},
      {1000, 132, 0.7f, 1.0f, 0.1f, 1.0f, 0.0f, 0.0f, 2, false},      // min-p alone, 7 empty CTAs
      {151936, 132, 1.5f, 0.95f, 0.0f, 1.0f, 0.0f, 0.0f, 2, false},   // Qwen vocabulary, flat
      {151936, 132, 0.6f, 0.9f, 0.02f, 1.3f, 0.5f, 0.2f, 2, true},
  };
  for (const Case& c : cases) {
    const size_t index = size_t(&c - cases);
    auto logits = random_floats(size_t(c.V), uint64_t(c.V) * 3 + index, -8, 8);
    if (c.ties)
      for (float& x : logits) x = std::round(x * 4.0f) / 4.0f;
    const std::vector<int32_t> history = {0, 3, 3, 7, 11, 11, 11, c.V - 1};
    const auto counts = counts_of(history, c.V);
    const SamplingParams p = test::sampling_params(c.temperature, 0, c.top_p, c.min_p, c.repetition, c.presence,
                                                   c.frequency, 4321 + uint64_t(c.V));
    std::vector<Sampler::Candidate> dist;
    const auto t = sampler_transformed(logits, p, history, &dist);
    Selector sel(c.ctas, c.V);
    sel.options = threads_in(index % 3 == 0 ? Order::Forward : index % 3 == 1 ? Order::Random : Order::Reverse, index);
    sel.options.blocks = index % 2 ? Order::Random : Order::Forward;
    for (int step = 0; step < c.steps; ++step) {
      const std::string what = "case " + std::to_string(index) + " V " + std::to_string(c.V) + " ctas " +
                               std::to_string(c.ctas) + " step " + std::to_string(step);
      const test::NucleusDraw h = test::host_nucleus_draw(t, c.top_p, c.min_p, p.seed, uint64_t(step));
      if (step == 0) test::expect_same_candidates(h.kept, dist, 1e-6, what + ": the host's nucleus vs the Sampler's");
      SelectTestArgs a = select_args(logits.data(), p, counts.data(), uint64_t(step));
      ASSERT_TRUE(a.nucleus && !a.gumbel && a.top_k == 0) << what;
      for (int capacity : {cuda::mk::kSelectTestMembers, 0}) {
        a.member_capacity = capacity;
        EXPECT_EQ(sel.select(a), h.id) << what << ", member capacity " << capacity;
        // Every thread of the selecting CTA returns the id (-9: it returned none).
        for (size_t t = 0; t < sel.merged.chosen_by_thread.size(); ++t) {
          ASSERT_EQ(sel.merged.chosen_by_thread[t], h.id) << what << ": thread " << t << " of the selecting CTA";
        }
      }
    }
  }
}

// As the GPU test: the top k of the full vocabulary wherever the winners sit (all in one CTA's slice, on
// slice edges, at both ends, tied across CTA boundaries: the lowest ids win). With a planted top k of
// equal values the draw is uniform over them; the merged list and the draw are checked exactly.
TEST(SimtSelect, FilteredSelectionFindsTheTopKAcrossCtaSlices) {
  const int V = 151936, ctas = 132, per = (V + ctas - 1) / ctas;
  const auto base = random_floats(size_t(V), 77, -8, 8);
  std::vector<float> l = base;
  Selector sel(ctas, V);
  const int k = 16;
  std::vector<std::vector<int>> layouts;
  layouts.push_back({});
  for (int i = 0; i < k; ++i) layouts.back().push_back(5 * per + 3 + i);  // all in CTA 5
  layouts.push_back({0, V - 1});
  for (int b = 1; layouts.back().size() < size_t(k); b += 9) {  // slice edges
    layouts.back().push_back(b * per - 1);
    layouts.back().push_back(b * per);
  }
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 3;
  for (const auto& planted : layouts) {
    for (int i : planted) l[size_t(i)] = 50.0f;
    const auto t = sampler_transformed(l, p, {}, nullptr);
    for (int top_k : {k, 4}) {  // 4: smaller than the tie, the lowest ids of it
      p.top_k = top_k;
      std::vector<int> sorted = planted;
      std::sort(sorted.begin(), sorted.end());
      for (uint64_t step : {0ull, 1ull}) {
        const HostDraw h = host_filtered_draw(l, p, {}, step);
        ASSERT_TRUE(std::equal(h.top.begin(), h.top.end(), sorted.begin())) << "host reference";
        const int32_t id = sel.select(select_args(l.data(), p, nullptr, step));
        EXPECT_EQ(id, h.id) << "top_k " << top_k << " step " << step;
        expect_filtered_state(sel, h, t, top_k, "planted, top_k " + std::to_string(top_k));
      }
    }
    for (int i : planted) l[size_t(i)] = base[size_t(i)];
  }
}

// Draw frequencies of the emulated selection against the CPU Sampler's probabilities: filtered
// (top-k / top-p / min-p with penalties: 2,000 draws), Gumbel-max (penalties: 1,000 draws) and
// nucleus (top-p and min-p, no top-k, penalties: 1,000 draws), V = 40 over 5 CTAs (8 ids per slice:
// top_k 20 exceeds a slice). Bound: a probability's standard error is sd = sqrt(p (1 - p) / draws)
// (<= 0.0112 at 2,000 draws, 0.0158 at 1,000); every id's frequency must be within 5 sd + 1e-3 of the
// Sampler's probability, and ids the Sampler filters out are never drawn. Every draw is also the
// exact host draw (host_filtered_draw; host_nucleus_draw; Gumbel: the argmax of the host's l / T +
// Gumbel(seed, step, id)): this checks the law that exact draw follows.
TEST(SimtSelect, DrawsFollowTheSamplerDistribution) {
  const int V = 40, ctas = 5;
  const auto logits = random_floats(size_t(V), 5, -2, 2);
  const std::vector<int32_t> history = {3, 3, 7, 11, 11, 11, 39};
  const auto counts = counts_of(history, V);
  struct Case {
    float temperature;
    int top_k;
    float top_p, min_p, repetition, presence, frequency;
    int draws;
  };
  const Case cases[] = {{0.6f, 20, 0.95f, 0.02f, 1.3f, 0.5f, 0.2f, 2000},
                        {0.8f, 0, 1.0f, 0.0f, 1.2f, 0.0f, 0.4f, 1000},
                        {0.9f, 0, 0.9f, 0.02f, 1.2f, 0.3f, 0.0f, 1000}};  // nucleus
  Selector sel(ctas, V);
  for (const Case& c : cases) {
    const SamplingParams p =
        test::sampling_params(c.temperature, c.top_k, c.top_p, c.min_p, c.repetition, c.presence, c.frequency, 1234);
    std::vector<Sampler::Candidate> dist;
    const auto t = sampler_transformed(logits, p, history, &dist);
    std::vector<double> freq(size_t(V), 0.0);
    int inexact = 0;
    for (int s = 0; s < c.draws; ++s) {
      const int32_t id = sel.select(select_args(logits.data(), p, counts.data(), uint64_t(s)));
      ASSERT_GE(id, 0) << "step " << s;
      ASSERT_LT(id, V);
      freq[size_t(id)] += 1.0 / c.draws;
      int32_t exact = -1;
      if (c.top_k > 0) {
        exact = host_filtered_draw(logits, p, history, uint64_t(s)).id;
      } else if (c.top_p < 1.0f || c.min_p > 0.0f) {
        exact = test::host_nucleus_draw(t, p.top_p, p.min_p, p.seed, uint64_t(s)).id;
      } else {
        std::vector<float> g(static_cast<size_t>(V));
        for (int i = 0; i < V; ++i) g[size_t(i)] = test::gumbel_value(t[size_t(i)], p.seed, uint64_t(s), i);
        exact = lowest_argmax(g);
      }
      inexact += id != exact;
    }
    EXPECT_EQ(inexact, 0) << "draws that differ from the exact host draw, top_k " << c.top_k;
    test::expect_frequencies_follow(freq, test::probabilities(dist, V), c.draws, "top_k " + std::to_string(c.top_k));
  }
}

// Regression test of the warp-0 race (see the top of this file): the filtered draw in every thread
// order. With the race, on logits of the scale of real ones, every one of these draws under forward
// order differed from the exact host draw: a CTA's kth_largest returned a key above its true K-th, so
// it emitted fewer than K candidates and the merge read unwritten ones.
TEST(SimtSelect, FilteredDrawIsIndependentOfLaneOrder) {
  const int V = 1000;
  for (Order order : {Order::Forward, Order::Reverse, Order::Random}) {
    int wrong = 0, draws = 0;
    for (int trial = 0; trial < 4; ++trial) {
      const auto logits = random_floats(size_t(V), 300 + uint64_t(trial), -8, 8);
      SamplingParams p;
      p.temperature = 0.7f;
      p.top_k = 16 + 16 * trial;
      p.seed = 8;
      Selector sel(5, V);
      sel.options = threads_in(order, uint64_t(trial));
      for (uint64_t step = 0; step < 3; ++step, ++draws)
        wrong += sel.select(select_args(logits.data(), p, nullptr, step)) != host_filtered_draw(logits, p, {}, step).id;
    }
    EXPECT_EQ(wrong, 0) << "draws (of " << draws << ") that differ from the exact host draw, " << order_name(order)
                        << " thread order";
  }
}

}  // namespace
}  // namespace megaqwen
