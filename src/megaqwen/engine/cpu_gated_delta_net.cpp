#include "megaqwen/engine/cpu_gated_delta_net.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "megaqwen/engine/cpu_ops.h"

namespace megaqwen::cpu {

void causal_conv(const WeightMatrix& conv, float* state, float* qkv, int64_t T, ThreadPool& pool) {
  const int64_t C = conv.rows, K = conv.cols;
  // The inputs in time order: K-1 remembered rows, then this chunk's T rows.
  std::vector<float> in(size_t((K - 1 + T) * C));
  std::copy_n(state, (K - 1) * C, in.data());
  std::copy_n(qkv, T * C, in.data() + (K - 1) * C);
  pool.parallel_for(size_t(C), [&](size_t c0, size_t c1) {
    std::vector<float> taps(static_cast<size_t>(K));
    for (size_t ch = c0; ch < c1; ++ch) {
      matrix_row(conv, int64_t(ch), taps.data());
      for (int64_t t = 0; t < T; ++t) {
        float acc = 0;
        for (int64_t j = 0; j < K; ++j) acc += taps[size_t(j)] * in[size_t((t + j) * C) + ch];
        qkv[size_t(t * C) + ch] = silu(acc);
      }
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

void delta_rule(const DeltaNetShape& s, float* states, const float* qkv, const float* beta, const float* g,
                int64_t T, float* o, ThreadPool& pool) {
  const int64_t C = s.conv_dim(), Kd = s.key_dim(), per_key = s.nv / s.nk, dk = s.dk, dv = s.dv;
  pool.parallel_for(size_t(s.nv), [&](size_t h0, size_t h1) {
    std::vector<float> m(static_cast<size_t>(dv)), d(static_cast<size_t>(dv));
    for (size_t hv = h0; hv < h1; ++hv) {
      float* S = states + hv * size_t(dk * dv);
      const int64_t hk = int64_t(hv) / per_key;
      for (int64_t t = 0; t < T; ++t) {
        const float* qt = qkv + t * C + hk * dk;
        const float* kt = qkv + t * C + Kd + hk * dk;
        const float* vt = qkv + t * C + 2 * Kd + int64_t(hv) * dv;
        const float alpha = std::exp(g[t * s.nv + int64_t(hv)]), b = beta[t * s.nv + int64_t(hv)];
        for (int64_t i = 0; i < dk * dv; ++i) S[i] *= alpha;
        std::fill(m.begin(), m.end(), 0.0f);
        for (int64_t i = 0; i < dk; ++i) axpy(kt[i], S + i * dv, m.data(), dv);
        for (int64_t j = 0; j < dv; ++j) d[size_t(j)] = b * (vt[j] - m[size_t(j)]);
        for (int64_t i = 0; i < dk; ++i) axpy(kt[i], d.data(), S + i * dv, dv);
        float* ot = o + (t * s.nv + int64_t(hv)) * dv;
        std::fill(ot, ot + dv, 0.0f);
        for (int64_t i = 0; i < dk; ++i) axpy(qt[i], S + i * dv, ot, dv);
      }
    }
  });
}

}  // namespace megaqwen::cpu
