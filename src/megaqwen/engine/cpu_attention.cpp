// cpu::causal_attention: softmax(q K^T * scale) V over the cache, per query head.
//
// One or a few new tokens (decode, short prefills) are bound by reading the cache. Reading one kv
// head's rows (D floats out of every kv_heads * D) at a time is a strided walk that ran at a quarter
// of the memory bandwidth; instead each work item takes a run of positions for all heads, reading
// whole rows in order, and the runs' partial softmaxes are merged (attention_split).
//
// A prompt is bound by arithmetic instead (every key is used by every later query), and runs as two
// matrix products on the matmul micro-kernel (cpu_panel_product.h), 32 queries of one head at a time:
//   S^T = K Q^T   the block's queries packed as the panel ([d][32]), the cached keys read in place;
//   O^T = V^T P^T the softmax weights, computed in place down the columns of S^T, are the panel
//                 ([position][32]); the values transposed once per call, each dim's row read in place.
// A query's masked positions get weight 0, which adds exact zeros, so a token's output does not depend
// on which block it shares or how the prompt was cut into calls.
#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "megaqwen/engine/cpu_exp.h"
#include "megaqwen/engine/cpu_ops.h"
#include "megaqwen/engine/cpu_simd.h"
#include "megaqwen/engine/cpu_panel_product.h"

namespace megaqwen::cpu {

namespace {

// Cached positions per work item of decode attention: at Qwen3-0.6B's shapes 1 MiB of K and V per
// item, so a 4k context splits into 32 items and even a few hundred positions use two threads.
constexpr int64_t kSplitPositions = 128;
constexpr int64_t kBlockedMinTokens = 8;  // fewer new tokens take attention_split
constexpr int64_t kQueryBlock = kPanelWidth;

// Index u of a parallel loop over `count` items whose cost grows with the index, reordered
// 0, count-1, 1, count-2, ...: the pool's contiguous chunks then get as many long items as short ones.
inline int64_t zigzag(int64_t u, int64_t count) { return u % 2 == 0 ? u / 2 : count - 1 - u / 2; }

// One work item of attention_split: the n positions of a run (k_rows, v_rows: whole cache rows) for
// every head of one token. The dot products and the value sums are inlined 16-lane loops (the lanes
// of cpu::dot), the exps vectorized (cpu_exp.h) and summed in position order.
MQ_VECTOR_CLONES_AVX512 void attend_run(const float* __restrict qt, const float* __restrict k_rows,
                                        const float* __restrict v_rows, int64_t n, int64_t heads, int64_t group,
                                        int64_t D, float scale, float* __restrict scores, float* __restrict maxes,
                                        float* __restrict sums, float* __restrict o) {
  constexpr int64_t kLanes = 16;
  const int64_t row = heads / group * D, C = kSplitPositions, body = D / kLanes * kLanes;
  for (int64_t j = 0; j < n; ++j) {
    const float* k_row = k_rows + j * row;
    for (int64_t h = 0; h < heads; ++h) {
      const float *a = qt + h * D, *b = k_row + h / group * D;
      float acc[kLanes] = {};
      for (int64_t i = 0; i < body; i += kLanes)
        for (int64_t l = 0; l < kLanes; ++l) acc[l] += a[i + l] * b[i + l];
      float dot = 0;
      for (int64_t l = 0; l < kLanes; ++l) dot += acc[l];
      for (int64_t i = body; i < D; ++i) dot += a[i] * b[i];
      scores[h * C + j] = dot * scale;
    }
  }
  for (int64_t h = 0; h < heads; ++h) {
    float* sh = scores + h * C;
    float m = -INFINITY, sum = 0;
    for (int64_t j = 0; j < n; ++j) m = std::max(m, sh[j]);
    for (int64_t j = 0; j < n; ++j) sh[j] = exp_nonpositive(sh[j] - m);
    for (int64_t j = 0; j < n; ++j) sum += sh[j];
    maxes[h] = m;
    sums[h] = sum;
  }
  for (int64_t e = 0; e < heads * D; ++e) o[e] = 0.0f;
  for (int64_t j = 0; j < n; ++j) {
    const float* v_row = v_rows + j * row;
    for (int64_t h = 0; h < heads; ++h) {
      const float p = scores[h * C + j], *x = v_row + h / group * D;
      float* y = o + h * D;
      for (int64_t d = 0; d < D; ++d) y[d] += p * x[d];
    }
  }
}

// Decode and short prefills: a work item is one token and a run of kSplitPositions cached positions,
// for every head. It reads whole cache rows (all kv heads of a position, contiguous), so each thread
// streams memory in order; items split a long context across all threads. Each item keeps, per head,
// its running max m, the sum s of exp(score - m) and the unnormalized sum o of exp(score - m) v; the
// items of a token are then merged in position order (flash-decoding's split): results do not depend
// on the thread count or on which call computed a token.
void attention_split(const float* q, int64_t tokens, int64_t heads, int64_t kv_heads, int64_t D,
                     int64_t first_position, const float* k_cache, const float* v_cache, float scale, float* out,
                     ThreadPool& pool) {
  const int64_t group = heads / kv_heads, row = kv_heads * D, C = kSplitPositions;
  // Token t owns items [first_item[t], first_item[t + 1]).
  std::vector<int64_t> first_item(static_cast<size_t>(tokens + 1));
  for (int64_t t = 0; t < tokens; ++t) first_item[size_t(t + 1)] = first_item[size_t(t)] + (first_position + t + C) / C;
  const int64_t items = first_item.back();
  std::vector<float> maxes(static_cast<size_t>(items * heads)), sums(maxes.size()), partial(maxes.size() * size_t(D));

  pool.parallel_for(size_t(items), [&](size_t i0, size_t i1) {
    std::vector<float> scores(static_cast<size_t>(heads * C));  // [head][position in the run]
    for (size_t i = i0; i < i1; ++i) {
      const auto it = std::upper_bound(first_item.begin(), first_item.end(), int64_t(i));
      const int64_t t = (it - first_item.begin()) - 1, j0 = (int64_t(i) - first_item[size_t(t)]) * C;
      const int64_t n = std::min(C, first_position + t + 1 - j0);
      attend_run(q + t * heads * D, k_cache + j0 * row, v_cache + j0 * row, n, heads, group, D, scale, scores.data(),
                 &maxes[i * size_t(heads)], &sums[i * size_t(heads)], &partial[i * size_t(heads * D)]);
    }
  });

  // out = sum_c o_c e^(m_c - M) / sum_c s_c e^(m_c - M), M the largest m_c, over the token's runs in order.
  pool.parallel_for(size_t(tokens * heads), [&](size_t u0, size_t u1) {
    for (size_t u = u0; u < u1; ++u) {
      const int64_t t = int64_t(u) / heads, h = int64_t(u) % heads;
      const int64_t c0 = first_item[size_t(t)], c1 = first_item[size_t(t + 1)];
      float M = -INFINITY, S = 0;
      for (int64_t c = c0; c < c1; ++c) M = std::max(M, maxes[size_t(c * heads + h)]);
      float* o = out + (t * heads + h) * D;
      std::fill_n(o, D, 0.0f);
      for (int64_t c = c0; c < c1; ++c) {
        const float w = std::exp(maxes[size_t(c * heads + h)] - M);
        S += sums[size_t(c * heads + h)] * w;
        axpy(w, &partial[size_t((c * heads + h) * D)], o, D);
      }
      for (int64_t d = 0; d < D; ++d) o[d] /= S;
    }
  });
}

// V^T for the P V product of attention_blocked: vt[(g * D + d) * keys + k] = v_cache[k * row + g * D + d],
// so each (kv head, dim) is one contiguous row over the positions. Written in tiles of 16 positions:
// every row of the tile is read once, every output run is 64 bytes.
void transpose_values(const float* v_cache, int64_t keys, int64_t row, float* vt, ThreadPool& pool) {
  constexpr int64_t kTile = 16;
  const int64_t tiles = (keys + kTile - 1) / kTile;
  pool.parallel_for(size_t(tiles), [&](size_t i0, size_t i1) {
    for (size_t i = i0; i < i1; ++i) {
      const int64_t k0 = int64_t(i) * kTile, k1 = std::min(keys, k0 + kTile);
      for (int64_t c = 0; c < row; ++c)
        for (int64_t k = k0; k < k1; ++k) vt[c * keys + k] = v_cache[k * row + c];
    }
  });
}

// The softmax of attention_blocked down each column of st ([key][32 queries], the block's scores), in
// place: key k is seen by query j iff j >= k - base and j < nq; the others get weight 0, and the column
// sums go to sums[32]. Both passes walk the keys in order, so a query's sum is accumulated in the
// same order as a row-wise pass would; each key's 32 columns form one vector.
MQ_VECTOR_CLONES_AVX512 void column_softmax(float* __restrict st, int64_t n, int64_t base, int64_t nq, float scale,
                                            float* __restrict sums) {
  constexpr int64_t W = kPanelWidth;
  alignas(64) float max_score[W];
  for (int64_t j = 0; j < W; ++j) max_score[j] = -INFINITY, sums[j] = 0.0f;
  for (int64_t k = 0; k < n; ++k) {
    float* sk = st + k * W;
    const int64_t first_seen = k - base;
    for (int64_t j = 0; j < W; ++j) {
      const float scaled = sk[j] * scale, s = ((j >= first_seen) & (j < nq)) ? scaled : -INFINITY;
      sk[j] = s;
      max_score[j] = std::max(max_score[j], s);
    }
  }
  for (int64_t k = 0; k < n; ++k) {
    float* sk = st + k * W;
    const int64_t first_seen = k - base;
    for (int64_t j = 0; j < W; ++j) {
      const float e = exp_nonpositive(sk[j] - max_score[j]), p = ((j >= first_seen) & (j < nq)) ? e : 0.0f;
      sk[j] = p;
      sums[j] += p;
    }
  }
}

void attention_blocked(const float* q, int64_t tokens, int64_t heads, int64_t kv_heads, int64_t D,
                       int64_t first_position, const float* k_cache, const float* v_cache, float scale, float* out,
                       ThreadPool& pool) {
  const int64_t group = heads / kv_heads, row = kv_heads * D, W = kPanelWidth;
  const int64_t blocks = (tokens + kQueryBlock - 1) / kQueryBlock, keys = first_position + tokens;
  // Transposed once per call, shared by every block and every head of a kv group (copying V per block
  // and head moved ~30x the cache's bytes at a 2k context).
  const auto vt = std::make_unique_for_overwrite<float[]>(size_t(keys * row));
  transpose_values(v_cache, keys, row, vt.get(), pool);

  pool.parallel_for(size_t(blocks * heads), [&](size_t i0, size_t i1) {
    std::vector<float> q_panel(size_t(D * W)), st(size_t(keys * W)), ot(size_t(D * W));
    alignas(64) float sums[kPanelWidth];
    for (size_t i = i0; i < i1; ++i) {
      const int64_t b = zigzag(int64_t(i) / heads, blocks), h = int64_t(i) % heads, g = h / group;
      const int64_t t0 = b * kQueryBlock, nq = std::min(kQueryBlock, tokens - t0);
      const int64_t base = first_position + t0;  // query j sees positions <= base + j
      const int64_t n = base + nq;               // keys the block's last query sees

      for (int64_t d = 0; d < D; ++d)
        for (int64_t j = 0; j < W; ++j) q_panel[size_t(d * W + j)] = j < nq ? q[((t0 + j) * heads + h) * D + d] : 0.0f;
      panel_product(q_panel.data(), D, k_cache + g * D, row, n, st.data());  // st[key][query]

      column_softmax(st.data(), n, base, nq, scale, sums);

      // O^T = V^T P^T: the weights are the panel as they stand, V^T's rows are read in place.
      panel_product(st.data(), n, vt.get() + g * D * keys, keys, D, ot.data());  // ot[dim][query]
      for (int64_t j = 0; j < nq; ++j) {
        float* oj = out + ((t0 + j) * heads + h) * D;
        for (int64_t d = 0; d < D; ++d) oj[d] = ot[size_t(d * W + j)] / sums[j];
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
    attention_split(q, tokens, heads, kv_heads, head_dim, first_position, k_cache, v_cache, scale, out, pool);
}

}  // namespace megaqwen::cpu
