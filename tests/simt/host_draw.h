// Exact host computations of the device's token selection, shared by the emulator suites
// (topk_select_simt_test.cpp, megakernel_simt_test.cpp, kernels_simt_test.cpp): the CPU Sampler's
// transformed logits and candidates, the Gumbel-perturbed value, and the filtered draw the
// megakernel's merge_and_draw must make.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <string>
#include <tuple>
#include <vector>

#include "megaqwen/cuda/kernels/common.cuh"  // uniform_at (through shim/: the emulator)
#include "megaqwen/sampling/sampler.h"
#include "megakernel/select_test_args.h"

namespace megaqwen::test {

inline std::vector<int32_t> counts_of(const std::vector<int32_t>& history, int V) {
  std::vector<int32_t> c(size_t(V), 0);
  for (int32_t id : history) ++c[size_t(id)];
  return c;
}

// The CPU Sampler's transformed logits (penalties, temperature); NaN given as -inf, which is what
// select_value makes of it (the Sampler's sort needs ordered values).
inline std::vector<float> sampler_transformed(std::vector<float> logits, const SamplingParams& p, const std::vector<int32_t>& history,
                                              std::vector<Sampler::Candidate>* dist = nullptr) {
  for (float& l : logits)
    if (l != l) l = -INFINITY;
  Sampler s(p);
  auto d = s.distribution(logits, history);  // transforms `logits` in place
  if (dist) *dist = std::move(d);
  return logits;
}

// A transformed logit plus the Gumbel(0, 1) noise keyed by (seed, step, id), in double, as the
// device's select_value / transform_logit compute it.
inline float gumbel_value(float transformed, uint64_t seed, uint64_t step, int id) {
  const double u = std::max(cuda::uniform_at(seed, step, uint32_t(id)), 0x1.0p-60);
  return float(double(transformed) - std::log(-std::log(u)));
}

inline int32_t lowest_argmax(const std::vector<float>& v) {
  int32_t best = 0;
  for (size_t i = 1; i < v.size(); ++i)
    if (v[i] > v[size_t(best)]) best = int32_t(i);
  return best;
}

// How many of the K candidates (probabilities probs / total, best first) survive the top-p prefix
// and the min-p floor, in the device samplers' arithmetic.
inline int kept_after_cuts(const std::vector<double>& probs, double total, int K, float top_p, float min_p) {
  int keep = K;
  if (top_p < 1.0f) {
    double mass = 0.0;
    int n = 0;
    while (n < keep) {
      mass += probs[size_t(n++)] / total;
      if (mass >= double(top_p)) break;
    }
    keep = n;
  }
  if (min_p > 0.0f) {
    const double floor = double(min_p) * (probs[0] / total);
    int n = 1;
    while (n < keep && probs[size_t(n)] / total >= floor) ++n;
    keep = n;
  }
  return keep;
}

// The filtered draw the kernel must make, computed on the host: the Sampler's candidates (their
// order), the kernel's K = top_k list (value desc, id asc; the Sampler's kept candidates are its
// prefix), and merge_and_draw's arithmetic on them: fp64 exp(v - top) (the difference taken in double,
// as the kernel), normalized by the sum over the K, the top-p prefix, the min-p floor, r = u * mass
// with u = cuda::uniform_at(seed, step, 0xffffffff), subtract until negative.
struct HostDraw {
  int32_t id = -1;
  std::vector<int32_t> top;  // the K candidates, best first
  std::vector<float> top_v;
  size_t keep = 0;
};
inline HostDraw host_filtered_draw(const std::vector<float>& logits, const SamplingParams& p, const std::vector<int32_t>& history,
                            uint64_t step) {
  std::vector<Sampler::Candidate> dist;
  const std::vector<float> t = sampler_transformed(logits, p, history, &dist);
  const int V = int(t.size()), K = p.top_k;
  std::vector<int32_t> order(static_cast<size_t>(V));
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + K, order.end(), [&](int32_t a, int32_t b) {
    return t[size_t(a)] > t[size_t(b)] || (t[size_t(a)] == t[size_t(b)] && a < b);
  });
  HostDraw h;
  h.top.assign(order.begin(), order.begin() + K);
  for (int32_t i : h.top) h.top_v.push_back(t[size_t(i)]);
  EXPECT_LE(dist.size(), size_t(K));
  for (size_t j = 0; j < dist.size() && j < size_t(K); ++j)
    EXPECT_EQ(dist[j].id, h.top[j]) << "the Sampler's candidate " << j << " is not the kernel's";
  std::vector<double> probs(static_cast<size_t>(K));
  const float top = h.top_v[0];
  double total = 0.0;
  for (int i = 0; i < K; ++i) probs[size_t(i)] = std::exp(double(h.top_v[size_t(i)]) - double(top));
  for (int i = 0; i < K; ++i) total += probs[size_t(i)];
  const int keep = kept_after_cuts(probs, total, K, p.top_p, p.min_p);
  h.keep = size_t(keep);
  EXPECT_EQ(h.keep, dist.size()) << "kept candidates: the kernel's arithmetic vs the Sampler's";
  double mass = 0.0;
  for (int i = 0; i < keep; ++i) mass += probs[size_t(i)] / total;
  double r = cuda::uniform_at(p.seed, step, 0xffffffffu) * mass;
  h.id = h.top[size_t(keep - 1)];
  for (int i = 0; i < keep; ++i) {
    r -= probs[size_t(i)] / total;
    if (r < 0) {
      h.id = h.top[size_t(i)];
      break;
    }
  }
  return h;
}

// The draw nucleus_draw (kernels/nucleus.cuh) must make, on the host, from the transformed values t:
// fixed-point weights round(expf(v - top) * 2^45) (the emulator's expf is this libm's), the sorted
// order (value descending, id ascending), the top-p prefix (the shortest reaching ceil(top_p *
// total)), the min-p prefix (weights >= min_p * 2^45), the shorter of the two, r = floor(u * kept
// mass) with u = uniform_at(seed, step, 0xffffffff), and the id ending the shortest prefix whose mass
// exceeds r. Also the kept ids, best first, with their probabilities (weight / kept mass).
struct NucleusDraw {
  int32_t id = -1;
  std::vector<Sampler::Candidate> kept;
};
inline NucleusDraw host_nucleus_draw(const std::vector<float>& t, float top_p, float min_p, uint64_t seed, uint64_t step) {
  const int V = int(t.size());
  std::vector<int32_t> order(static_cast<size_t>(V));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return t[size_t(a)] > t[size_t(b)]; });
  NucleusDraw h;
  const float top = t[size_t(order[0])];
  if (!(top > -INFINITY && top < INFINITY)) {
    h.id = order[0];
    return h;
  }
  std::vector<uint64_t> w(static_cast<size_t>(V));
  uint64_t total = 0, minp_mass = 0;
  for (int j = 0; j < V; ++j) {
    const float e = std::exp(t[size_t(order[size_t(j)])] - top);
    w[size_t(j)] = uint64_t(std::nearbyint(double(e) * 0x1p45));
    total += w[size_t(j)];
    if (w[size_t(j)] > 0 && double(w[size_t(j)]) >= double(min_p) * 0x1p45) minp_mass += w[size_t(j)];
  }
  // The end (exclusive) of the shortest prefix whose mass reaches `target`, and that mass.
  auto prefix = [&](uint64_t target) {
    uint64_t mass = 0;
    int n = 0;
    while (n < V && mass < target) mass += w[size_t(n++)];
    return std::pair<int, uint64_t>(n, mass);
  };
  uint64_t kept = total;
  int keep = V;
  if (top_p < 1.0f) {
    const double want = std::ceil(double(top_p) * double(total));
    const uint64_t target = want < 1.0 ? 1 : want >= double(total) ? total : uint64_t(want);
    std::tie(keep, kept) = prefix(target);
  }
  if (min_p > 0.0f && minp_mass < kept) std::tie(keep, kept) = prefix(minp_mass);
  while (keep > 0 && w[size_t(keep - 1)] == 0) --keep;  // weightless values are never drawn
  for (int j = 0; j < keep; ++j) h.kept.push_back({order[size_t(j)], double(w[size_t(j)]) / double(kept)});
  uint64_t r = uint64_t(cuda::uniform_at(seed, step, 0xffffffffu) * double(kept));
  if (r >= kept) r = kept - 1;
  h.id = order[size_t(prefix(r + 1).first - 1)];
  return h;
}

// The kept candidates of two samplers agree: the same ids in the same order, probabilities within tol.
inline void expect_same_candidates(const std::vector<Sampler::Candidate>& got, const std::vector<Sampler::Candidate>& want,
                                   double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what << ": kept candidates";
  for (size_t j = 0; j < want.size(); ++j) {
    ASSERT_EQ(got[j].id, want[j].id) << what << " candidate " << j;
    ASSERT_NEAR(got[j].prob, want[j].prob, tol) << what << " candidate " << j;
  }
}

// The Sampler's distribution as a probability per id (0 for the ids it filters out).
inline std::vector<double> probabilities(const std::vector<Sampler::Candidate>& dist, int V) {
  std::vector<double> want(size_t(V), 0.0);
  for (const auto& d : dist) want[size_t(d.id)] = d.prob;
  return want;
}

// Drawn frequencies against the Sampler's probabilities: within 5 sd + 1e-3, sd = sqrt(p (1 - p) /
// draws), and never an id the Sampler filters out.
inline void expect_frequencies_follow(const std::vector<double>& freq, const std::vector<double>& want, int draws,
                                      const std::string& label) {
  for (size_t i = 0; i < want.size(); ++i) {
    const double sd = std::sqrt(want[i] * (1 - want[i]) / draws);
    EXPECT_NEAR(freq[i], want[i], 5 * sd + 1e-3) << "id " << i << ", " << label;
    if (want[i] == 0.0) {
      EXPECT_EQ(freq[i], 0.0) << "id " << i << " is filtered out but was drawn, " << label;
    }
  }
}

}  // namespace megaqwen::test
