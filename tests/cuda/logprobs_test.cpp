// Device log-probabilities (megakernel/logprob.cuh, run alone by mk::launch_token_logprobs: the
// per-operator path's scoring and the megakernel's LM-head reduction): against the host's
// token_logprob() on the same logits, for any block count, with the best alternatives planted at
// every block's slice edges, ties to the lowest id, -inf / NaN logits, logits large enough to
// overflow a naive exp. (Through the engines: tests/cuda/cuda_engine_test.cpp, megakernel_test.cpp.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "cuda/gpu_test_util.h"
#include "megaqwen/cuda/megakernel/megakernel.h"
#include "megaqwen/sampling/logprobs.h"
#include "megaqwen/util/error.h"

namespace megaqwen {
namespace {

using namespace test;
using cuda::mk::LogprobRecord;

// The record of `token` over device logits [V] with `blocks` blocks.
LogprobRecord device_logprobs(const cuda::DeviceBuffer<float>& logits, int V, int32_t token, int top, int blocks) {
  const size_t B = size_t(blocks);
  cuda::DeviceBuffer<float> lse(2 * B), cand_v(B * cuda::mk::kMaxLogprobTop);
  cuda::DeviceBuffer<int32_t> cand_i(B * cuda::mk::kMaxLogprobTop), cand_n(B), tok(1);
  cuda::DeviceBuffer<uint32_t> ticket(1);
  cuda::DeviceBuffer<LogprobRecord> out(1);
  CUDA_CHECK(cudaMemset(ticket.data(), 0, 4));
  CUDA_CHECK(cudaMemset(out.data(), 0xff, sizeof(LogprobRecord)));  // poison: unwritten fields show
  CUDA_CHECK(cudaMemcpy(tok.data(), &token, 4, cudaMemcpyHostToDevice));
  cuda::mk::LogprobArgs a;
  a.logits = logits.data();
  a.V = V;
  a.token = tok.data();
  a.top = top;
  a.parts = {lse.data(), cand_v.data(), cand_i.data(), cand_n.data()};
  a.ticket = ticket.data();
  a.out = out.data();
  cuda::mk::launch_token_logprobs(a, blocks, nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  return download(out)[0];
}

// The device record equals the host's token_logprob: the same ids in the same order, log-probabilities
// within `tol` (float sums on the device, double on the host).
void expect_record_matches(const LogprobRecord& got, const std::vector<float>& logits, int32_t token, int top,
                           double tol, const std::string& where) {
  const TokenLogprob want = token_logprob(logits, token, top);
  EXPECT_NEAR(got.logprob, want.logprob, tol) << where;
  ASSERT_EQ(got.n, int(want.top.size())) << where;
  for (int i = 0; i < got.n; ++i) {
    EXPECT_EQ(got.ids[i], want.top[size_t(i)].token) << where << " rank " << i;
    EXPECT_NEAR(got.logprobs[i], want.top[size_t(i)].logprob, tol) << where << " rank " << i;
  }
}

// |log Z| is at most ~25 here: float rounding of the partial sums stays far below 1e-5.
constexpr double kTol = 1e-5;

TEST(CudaLogprobs, MatchTheHostAtAnyBlockCount) {
  MQ_REQUIRE_GPU();
  const std::vector<int> vocabs =
      kEmulatedDevice ? std::vector<int>{1, 31, 1000, 4097} : std::vector<int>{1, 31, 1000, 4097, 151936, 248320};
  for (int V : vocabs) {
    const auto logits = random_floats(size_t(V), uint64_t(V) + 5, -10, 10);
    const auto d = upload(logits);
    for (int blocks : {1, 3, 7, cuda::mk::token_logprob_blocks(V), cuda::mk::kMaxLogprobBlocks}) {
      if ((V + blocks - 1) / blocks > cuda::mk::kThreads * cuda::mk::kSelPerThread) continue;  // beyond a block's slice
      if (kEmulatedDevice && blocks == cuda::mk::kMaxLogprobBlocks && V > 1000) continue;
      for (int top : {0, 1, 5, kMaxTopLogprobs}) {
        const int32_t token = int32_t((uint64_t(V) * 7919 + uint64_t(top)) % uint64_t(V));
        const std::string where = "V " + std::to_string(V) + " blocks " + std::to_string(blocks) + " top " +
                                  std::to_string(top);
        expect_record_matches(device_logprobs(d, V, token, top, blocks), logits, token, top, kTol, where);
      }
    }
  }
}

TEST(CudaLogprobs, BestAlternativesPlantedAtEverySliceEdge) {
  MQ_REQUIRE_GPU();
  const int V = kEmulatedDevice ? 4097 : 151936;
  auto logits = random_floats(size_t(V), 17, -10, 10);
  // Five blocks where a slice fits the selection's registers (a 151,936-id vocabulary needs 15).
  const int capacity = cuda::mk::kThreads * cuda::mk::kSelPerThread;
  for (int blocks : {std::max(5, (V + capacity - 1) / capacity), cuda::mk::token_logprob_blocks(V)}) {
    const std::vector<int> spots = slice_edge_ids(V, blocks);
    // The first kMaxTopLogprobs spots get the largest values, descending: each must come out in place.
    auto planted = logits;
    for (size_t k = 0; k < spots.size() && k < size_t(kMaxTopLogprobs); ++k) planted[size_t(spots[k])] = 40.0f - float(k);
    const auto d = upload(planted);
    const LogprobRecord r = device_logprobs(d, V, spots[1], kMaxTopLogprobs, blocks);
    expect_record_matches(r, planted, spots[1], kMaxTopLogprobs, kTol, "blocks " + std::to_string(blocks));
    EXPECT_EQ(r.ids[0], spots[0]);
  }
}

// Slices wider than the selection's registers would lose their tails: the launcher refuses them
// (the log-sum-exp alone has no such limit).
TEST(CudaLogprobs, SlicesBeyondTheSelectionAreRefused) {
  MQ_REQUIRE_GPU();
  const int capacity = cuda::mk::kThreads * cuda::mk::kSelPerThread;
  const int V = 2 * capacity + 1;  // two blocks leave capacity + 1 ids in the first
  const auto logits = random_floats(size_t(V), 23, -10, 10);
  const auto d = upload(logits);
  EXPECT_THROW(device_logprobs(d, V, 5, 1, 2), Error);
  EXPECT_THROW(device_logprobs(d, V, 5, 1, 0), Error);
  EXPECT_THROW(device_logprobs(d, V, 5, kMaxTopLogprobs + 1, 3), Error);
  expect_record_matches(device_logprobs(d, V, 5, 0, 2), logits, 5, 0, kTol, "top 0, 2 blocks");
  expect_record_matches(device_logprobs(d, V, 5, 3, 3), logits, 5, 3, kTol, "top 3, 3 blocks");
}

TEST(CudaLogprobs, TiesGoToTheLowestIdAndInfNanWeighNothing) {
  MQ_REQUIRE_GPU();
  const int V = 3000;
  std::vector<float> logits(size_t(V), -INFINITY);
  // Ten tied values across the slices, then a few lower ones; NaN at one id.
  for (int i : {2999, 17, 1500, 600, 601, 2000, 42, 2998, 1, 900}) logits[size_t(i)] = 3.0f;
  for (int i : {5, 2500, 1200}) logits[size_t(i)] = 1.0f;
  const auto with_nan = [&] {
    auto l = logits;
    l[700] = NAN;
    return l;
  }();
  const auto d = upload(with_nan);
  for (int blocks : {1, 4, 11}) {
    const LogprobRecord r = device_logprobs(d, V, 600, 12, blocks);
    // The host reference without the NaN (token_logprob does not define NaN): it must weigh nothing.
    expect_record_matches(r, logits, 600, 12, kTol, "blocks " + std::to_string(blocks));
    EXPECT_NEAR(r.logprob, -std::log(10.0 + 3.0 * std::exp(-2.0)), kTol);
    const std::vector<int32_t> tied = {1, 17, 42, 600, 601, 900, 1500, 2000, 2998, 2999};
    for (int k = 0; k < 10; ++k) EXPECT_EQ(r.ids[k], tied[size_t(k)]) << "rank " << k;
    // A token at -inf has no finite log-probability.
    EXPECT_EQ(device_logprobs(d, V, 3, 0, blocks).logprob, -INFINITY);
  }
}

TEST(CudaLogprobs, LargeLogitsDoNotOverflow) {
  MQ_REQUIRE_GPU();
  const int V = 5000;
  auto logits = random_floats(size_t(V), 9, 990, 1000);
  const auto d = upload(logits);
  expect_record_matches(device_logprobs(d, V, 123, 3, cuda::mk::token_logprob_blocks(V)), logits, 123, 3, 1e-4,
                        "logits near 1000");
}

}  // namespace
}  // namespace megaqwen
