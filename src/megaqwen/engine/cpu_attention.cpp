// cpu::causal_attention: softmax(q K^T * scale) V over the cache, per query head.
//
// One or a few new tokens (decode, short prefills) take one query at a time: a dot product with each
// cached key, then the weighted sum of the values. That is bound by reading the cache, whose rows for
// one kv head are D floats out of every kv_heads * D, a stride the hardware prefetchers do not
// follow, so the rows a few positions ahead are prefetched explicitly.
//
// A prompt is bound by arithmetic instead (every key is used by every later query), and runs as two
// matrix products on the matmul micro-kernel (cpu_panel_product.h), 32 queries of one head at a time:
//   S^T = K Q^T   the block's queries packed as the panel ([d][32]), the cached keys read in place;
//   O   = P V     the values packed 32 dims at a time ([position][32], a contiguous copy), the
//                 softmax weights P read in place.
// A query's masked positions get weight 0, which adds exact zeros, so a token's output does not depend
// on which block it shares or how the prompt was cut into calls.
#include <algorithm>
#include <cmath>
#include <vector>

#include "megaqwen/engine/cpu_ops.h"
#include "megaqwen/engine/cpu_panel_product.h"

namespace megaqwen::cpu {

namespace {

constexpr int64_t kPrefetchAhead = 8;     // cache rows requested ahead of the one being read
constexpr int64_t kBlockedMinTokens = 8;  // fewer new tokens take one query at a time
constexpr int64_t kQueryBlock = kPanelWidth;

inline void prefetch(const float* p, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) __builtin_prefetch(p + i);
}

// Index u of a parallel loop over `count` items whose cost grows with the index, reordered
// 0, count-1, 1, count-2, ...: the pool's contiguous chunks then get as many long items as short ones.
inline int64_t zigzag(int64_t u, int64_t count) { return u % 2 == 0 ? u / 2 : count - 1 - u / 2; }

void attention_per_query(const float* q, int64_t tokens, int64_t heads, int64_t kv_heads, int64_t D,
                         int64_t first_position, const float* k_cache, const float* v_cache, float scale, float* out,
                         ThreadPool& pool) {
  const int64_t group = heads / kv_heads, row = kv_heads * D;
  pool.parallel_for(size_t(tokens * heads), [&](size_t i0, size_t i1) {
    std::vector<float> scores(size_t(first_position + tokens));
    for (size_t i = i0; i < i1; ++i) {
      const int64_t t = zigzag(int64_t(i) / heads, tokens), h = int64_t(i) % heads, g = h / group;
      const int64_t n = first_position + t + 1;
      const float* qh = q + (t * heads + h) * D;
      float max_score = -INFINITY;
      for (int64_t j = 0; j < n; ++j) {
        if (j + kPrefetchAhead < n) prefetch(k_cache + (j + kPrefetchAhead) * row + g * D, D);
        scores[size_t(j)] = dot(qh, k_cache + j * row + g * D, D) * scale;
        max_score = std::max(max_score, scores[size_t(j)]);
      }
      float sum = 0;
      for (int64_t j = 0; j < n; ++j) sum += (scores[size_t(j)] = std::exp(scores[size_t(j)] - max_score));
      float* o = out + (t * heads + h) * D;
      std::fill(o, o + D, 0.0f);
      for (int64_t j = 0; j < n; ++j) {
        if (j + kPrefetchAhead < n) prefetch(v_cache + (j + kPrefetchAhead) * row + g * D, D);
        axpy(scores[size_t(j)] / sum, v_cache + j * row + g * D, o, D);
      }
    }
  });
}

void attention_blocked(const float* q, int64_t tokens, int64_t heads, int64_t kv_heads, int64_t D,
                       int64_t first_position, const float* k_cache, const float* v_cache, float scale, float* out,
                       ThreadPool& pool) {
  const int64_t group = heads / kv_heads, row = kv_heads * D, W = kPanelWidth;
  const int64_t blocks = (tokens + kQueryBlock - 1) / kQueryBlock, most_keys = first_position + tokens;
  pool.parallel_for(size_t(blocks * heads), [&](size_t i0, size_t i1) {
    const size_t panel = size_t(most_keys * W);
    std::vector<float> q_panel(size_t(D * W)), st(panel), p(panel), v_panel(panel), o(size_t(W * W));
    std::vector<float> sums(static_cast<size_t>(W));
    for (size_t i = i0; i < i1; ++i) {
      const int64_t b = zigzag(int64_t(i) / heads, blocks), h = int64_t(i) % heads, g = h / group;
      const int64_t t0 = b * kQueryBlock, nq = std::min(kQueryBlock, tokens - t0);
      const int64_t n = first_position + t0 + nq;  // keys the block's last query sees

      for (int64_t d = 0; d < D; ++d)
        for (int64_t j = 0; j < W; ++j) q_panel[size_t(d * W + j)] = j < nq ? q[((t0 + j) * heads + h) * D + d] : 0.0f;
      panel_product(q_panel.data(), D, k_cache + g * D, row, n, st.data());  // st[key][query]

      for (int64_t j = 0; j < nq; ++j) {
        const int64_t seen = first_position + t0 + j + 1;
        float* pj = &p[size_t(j * n)];
        float max_score = -INFINITY;
        for (int64_t k = 0; k < seen; ++k) max_score = std::max(max_score, pj[k] = st[size_t(k * W + j)] * scale);
        float sum = 0;
        for (int64_t k = 0; k < seen; ++k) sum += (pj[k] = std::exp(pj[k] - max_score));
        std::fill(pj + seen, pj + n, 0.0f);
        sums[size_t(j)] = sum;
      }

      for (int64_t d0 = 0; d0 < D; d0 += W) {
        const int64_t nd = std::min(W, D - d0);
        for (int64_t k = 0; k < n; ++k) {
          float* dst = &v_panel[size_t(k * W)];
          std::copy_n(v_cache + k * row + g * D + d0, nd, dst);
          std::fill(dst + nd, dst + W, 0.0f);
        }
        panel_product(v_panel.data(), n, p.data(), n, nq, o.data());  // o[query][dim]
        for (int64_t j = 0; j < nq; ++j) {
          float* oj = out + ((t0 + j) * heads + h) * D + d0;
          for (int64_t dd = 0; dd < nd; ++dd) oj[dd] = o[size_t(j * W + dd)] / sums[size_t(j)];
        }
      }
    }
  });
}

}  // namespace

void causal_attention(const float* q, int64_t tokens, int64_t heads, int64_t kv_heads, int64_t head_dim,
                      int64_t first_position, const float* k_cache, const float* v_cache, float scale, float* out,
                      ThreadPool& pool) {
  if (tokens >= kBlockedMinTokens)
    attention_blocked(q, tokens, heads, kv_heads, head_dim, first_position, k_cache, v_cache, scale, out, pool);
  else
    attention_per_query(q, tokens, heads, kv_heads, head_dim, first_position, k_cache, v_cache, scale, out, pool);
}

}  // namespace megaqwen::cpu
