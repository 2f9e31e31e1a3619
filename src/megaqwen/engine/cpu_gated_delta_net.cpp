#include "megaqwen/engine/cpu_gated_delta_net.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "megaqwen/engine/cpu_ops.h"
#include "megaqwen/engine/cpu_simd.h"

namespace megaqwen::cpu {

void causal_conv(const WeightMatrix& conv, float* state, float* qkv, int64_t T, ThreadPool& pool) {
  const int64_t C = conv.rows, K = conv.cols;
  // The inputs in time order: K-1 remembered rows, then this chunk's T rows.
  std::vector<float> in(static_cast<size_t>((K - 1 + T) * C));
  std::copy_n(state, (K - 1) * C, in.data());
  std::copy_n(qkv, T * C, in.data() + (K - 1) * C);
  // Time outermost over a block of channels, so each step reads K contiguous row pieces (walking one
  // channel through time would touch a new cache line at every step).
  pool.parallel_for(size_t(C), [&](size_t c0, size_t c1) {
    const auto n = static_cast<int64_t>(c1 - c0);
    std::vector<float> taps(static_cast<size_t>(K * n)), row(static_cast<size_t>(K)), acc(static_cast<size_t>(n));
    for (int64_t c = 0; c < n; ++c) {
      matrix_row(conv, int64_t(c0) + c, row.data());
      for (int64_t j = 0; j < K; ++j) taps[size_t(j * n + c)] = row[size_t(j)];
    }
    for (int64_t t = 0; t < T; ++t) {
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t j = 0; j < K; ++j) {
        const float* x = in.data() + (t + j) * C + int64_t(c0);
        const float* w = taps.data() + j * n;
        for (int64_t c = 0; c < n; ++c) acc[size_t(c)] += w[c] * x[c];
      }
      float* out = qkv + t * C + int64_t(c0);
      for (int64_t c = 0; c < n; ++c) out[c] = silu(acc[size_t(c)]);
    }
  }, 64);
  std::copy_n(in.data() + T * C, (K - 1) * C, state);
}

void delta_net_gates(const DeltaNetShape& s, const WeightVector& A_log, const WeightVector& dt_bias, float* qkv,
                     const float* b, const float* a, int64_t T, float* beta, float* g) {
  const int64_t C = s.conv_dim(), Kd = s.key_dim();
  const float q_scale = 1.0f / std::sqrt(float(s.dk));
  for (int64_t t = 0; t < T; ++t) {
    float* row = qkv + t * C;
    for (int64_t hk = 0; hk < s.nk; ++hk) {
      float* qh = row + hk * s.dk;
      float* kh = row + Kd + hk * s.dk;
      l2_normalize(qh, s.dk, kDeltaNetL2NormEps);
      l2_normalize(kh, s.dk, kDeltaNetL2NormEps);
      for (int64_t i = 0; i < s.dk; ++i) qh[i] *= q_scale;
    }
    for (int64_t hv = 0; hv < s.nv; ++hv) {
      const int64_t at = t * s.nv + hv;
      beta[at] = sigmoid(b[at]);
      g[at] = -std::exp(weight_at(A_log, hv)) * softplus(a[at] + weight_at(dt_bias, hv));
    }
  }
}

namespace {

// One token through one value head's state S [dk, dv], in the order delta_rule's header gives, but
// in two passes over S instead of four (S is 64 KiB at 128 x 128: it lives in L2, and the passes were
// what prefill waited on). Each lane j does the same operations in the same order as the four-step
// form. m is scratch [dv]; o receives [dv].
MQ_VECTOR_CLONES void delta_step(float* __restrict S, const float* __restrict k, const float* __restrict q,
                                 const float* __restrict v, float alpha, float beta, int64_t dk, int64_t dv,
                                 float* __restrict m, float* __restrict o) {
  for (int64_t j = 0; j < dv; ++j) m[j] = 0.0f;
  for (int64_t i = 0; i < dk; ++i) {  // S = alpha S; m = S^T k
    float* __restrict s = S + i * dv;
    const float ki = k[i];
    for (int64_t j = 0; j < dv; ++j) {
      s[j] *= alpha;
      m[j] += ki * s[j];
    }
  }
  for (int64_t j = 0; j < dv; ++j) m[j] = beta * (v[j] - m[j]);  // m now holds the write d
  for (int64_t j = 0; j < dv; ++j) o[j] = 0.0f;
  for (int64_t i = 0; i < dk; ++i) {  // S += k d^T; o = S^T q
    float* __restrict s = S + i * dv;
    const float ki = k[i], qi = q[i];
    for (int64_t j = 0; j < dv; ++j) {
      s[j] += ki * m[j];
      o[j] += qi * s[j];
    }
  }
}

}  // namespace

void delta_rule(const DeltaNetShape& s, float* states, const float* qkv, const float* beta, const float* g,
                int64_t T, float* o, ThreadPool& pool) {
  const int64_t C = s.conv_dim(), Kd = s.key_dim(), per_key = s.nv / s.nk, dk = s.dk, dv = s.dv;
  pool.parallel_for(size_t(s.nv), [&](size_t h0, size_t h1) {
    std::vector<float> m(static_cast<size_t>(dv));
    for (size_t hv = h0; hv < h1; ++hv) {
      float* S = states + hv * size_t(dk * dv);
      const int64_t hk = int64_t(hv) / per_key;
      for (int64_t t = 0; t < T; ++t) {
        const float* row = qkv + t * C;
        const int64_t at = t * s.nv + int64_t(hv);
        delta_step(S, row + Kd + hk * dk, row + hk * dk, row + 2 * Kd + int64_t(hv) * dv, std::exp(g[at]), beta[at],
                   dk, dv, m.data(), o + at * dv);
      }
    }
  });
}

}  // namespace megaqwen::cpu
