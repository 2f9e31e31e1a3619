// The gated delta rule over a long prompt in chunks of kDeltaChunk tokens: the same recurrence as
// delta_rule_kernel (gated_delta_net.cuh), rewritten so that only one step per chunk, not per token,
// is sequential. This is the "chunkwise" form of the DeltaNet papers (Yang et al., 2024), derived here
// for the decay-first order the CPU reference uses.
//
// Per token t of a chunk, with S0 the state before the chunk:
//   S_t = a_t S_{t-1} + k_t d_t^T,   d_t = b_t (v_t - a_t S_{t-1}^T k_t),   o_t = S_t^T q_t
// With G_t = sum_{s<=t} log a_s (cumulative log decay inside the chunk) and r_ts = exp(G_t - G_s):
//   a_t S_{t-1} = e^{G_t} S0 + sum_{s<t} r_ts k_s d_s^T
// so the writes d_t solve a unit lower-triangular system (I + A) D = diag(b) V - diag(b e^G) K S0,
// A_ts = b_t r_ts (k_t . k_s) for s < t. With X = (I + A)^-1:
//   D   = U - W S0,              U = X diag(b) V,   W = X diag(b e^G) K     (independent of S0)
//   O   = diag(e^G) Q S0 + P D,  P_ts = r_ts (q_t . k_s) for s <= t
//   S_C = e^{G_last} S0 + K^T diag(e^{G_last - G}) D
// Every exponent is a difference G_t - G_s with t >= s, or G itself: at most 0, so nothing overflows,
// and a strong decay underflows to the zero it should be.
//
// Three kernels:
//   delta_qk_norm_kernel        q and k l2-normalized (q scaled by 1/sqrt(dk)) into [T, nk, dk], with
//                               delta_rule_kernel's arithmetic; grid (T, nk), one warp each.
//   delta_chunk_prepare_kernel  per (chunk, value head), all in parallel: the gates, G, A and P from
//                               the chunk's q and k in shared memory, X by forward substitution (one
//                               lane per column), then W, U, P and G to the workspace.
//   delta_chunk_scan_kernel     per (value head, kDeltaScanCols value columns): S0's columns in shared
//                               memory, walked through the chunks in order: D = U - W S0, the outputs,
//                               then the next state. The only sequential part: T / kDeltaChunk steps.
// Rows of a chunk past the prompt's end carry b = 0, g = 0 and zero q, k, v, so they write nothing.
#pragma once

#include "megaqwen/cuda/kernels/common.cuh"
#include "megaqwen/cuda/kernels/gated_delta_net.cuh"  // softplus_f

namespace megaqwen::cuda {

constexpr int kDeltaChunk = 32;          // tokens per chunk (a warp's width: one lane per column of X)
constexpr int kDeltaChunkThreads = 256;  // threads of the prepare and scan kernels
constexpr int kDeltaScanCols = 16;       // value columns per scan block: 128 blocks at Qwen3.5-0.8B

struct DeltaChunkParams {
  const float* qkv;      // [T, Cc]: q [nk, dk] | k [nk, dk] | v [nv, dv], after the conv (read only)
  const float* b;        // [T, nv]
  const float* a;        // [T, nv]
  const float* A_log;    // [nv]
  const float* dt_bias;  // [nv]
  float* qn;             // [T, nk, dk]  normalized q (scaled), then read by both chunk kernels
  float* kn;             // [T, nk, dk]  normalized k
  float* W;              // [chunks, nv, C, dk]
  float* U;              // [chunks, nv, C, dv]
  float* P;              // [chunks, nv, C, C]
  float* G;              // [chunks, nv, C]
  float* states;         // [nv, dk, dv]
  float* o;              // [T, nv, dv]
  int T, nk, nv, dk, dv;
  float l2_eps;
};

// Grid (T, nk), 32 threads.
__global__ __launch_bounds__(32) void delta_qk_norm_kernel(const DeltaChunkParams p) {
  pdl_begin();
  const int lane = int(threadIdx.x), t = int(blockIdx.x), hk = int(blockIdx.y), Kd = p.nk * p.dk;
  const int Cc = 2 * Kd + p.nv * p.dv;
  const float* q = p.qkv + size_t(t) * size_t(Cc) + size_t(hk) * size_t(p.dk);
  const float* k = q + Kd;
  float sq = 0.0f, sk = 0.0f;
  for (int i = lane; i < p.dk; i += 32) {
    sq += q[i] * q[i];
    sk += k[i] * k[i];
  }
  const float rq = 1.0f / sqrtf(warp_sum(sq) + p.l2_eps), rk = 1.0f / sqrtf(warp_sum(sk) + p.l2_eps);
  const float q_scale = 1.0f / sqrtf(float(p.dk));
  const size_t row = (size_t(t) * size_t(p.nk) + size_t(hk)) * size_t(p.dk);
  for (int i = lane; i < p.dk; i += 32) {
    p.qn[row + size_t(i)] = (q[i] * rq) * q_scale;
    p.kn[row + size_t(i)] = k[i] * rk;
  }
}

// Grid (chunks, nv), kDeltaChunkThreads threads. Shared rows are padded by one float so that the
// lanes of a warp reading one column of 32 rows hit 32 banks.
template <int kMaxDk>
__global__ __launch_bounds__(kDeltaChunkThreads) void delta_chunk_prepare_kernel(const DeltaChunkParams p) {
  pdl_begin();
  constexpr int C = kDeltaChunk;
  __shared__ float ks[C][kMaxDk + 1], qs[C][kMaxDk + 1];
  __shared__ float A[C][C + 1], X[C][C + 1];
  __shared__ float beta[C], G[C], write_scale[C];
  const int tid = int(threadIdx.x), chunk = int(blockIdx.x), hv = int(blockIdx.y);
  const int t0 = chunk * C, n = min(C, p.T - t0), hk = hv / (p.nv / p.nk), dk = p.dk, dv = p.dv;
  const size_t out = size_t(chunk) * size_t(p.nv) + size_t(hv);  // this block's (chunk, head) record

  if (tid < C) {
    float bt = 0.0f, gt = 0.0f;
    if (tid < n) {
      const size_t at = size_t(t0 + tid) * size_t(p.nv) + size_t(hv);
      bt = 1.0f / (1.0f + expf(-p.b[at]));
      gt = -expf(p.A_log[hv]) * softplus_f(p.a[at] + p.dt_bias[hv]);
    }
    beta[tid] = bt;
    G[tid] = gt;
  }
  for (int e = tid; e < C * dk; e += kDeltaChunkThreads) {
    const int t = e / dk, i = e % dk;
    const size_t at = (size_t(t0 + t) * size_t(p.nk) + size_t(hk)) * size_t(dk) + size_t(i);
    ks[t][i] = t < n ? p.kn[at] : 0.0f;
    qs[t][i] = t < n ? p.qn[at] : 0.0f;
  }
  __syncthreads();
  if (tid == 0)
    for (int t = 1; t < C; ++t) G[t] += G[t - 1];
  __syncthreads();
  if (tid < C) {
    write_scale[tid] = beta[tid] * expf(G[tid]);
    p.G[out * C + size_t(tid)] = G[tid];
  }

  // A (strictly lower) and P (lower with the diagonal): one (t, s) pair per thread and pass, a warp
  // on one row t (k_t broadcast, k_s from 32 rows).
  float* P_out = p.P + out * size_t(C * C);
  for (int e = tid; e < C * C; e += kDeltaChunkThreads) {
    const int t = e / C, s = e % C;
    float kk = 0.0f, qk = 0.0f;
    if (s <= t)
      for (int i = 0; i < dk; ++i) {
        kk = fmaf(ks[t][i], ks[s][i], kk);
        qk = fmaf(qs[t][i], ks[s][i], qk);
      }
    const float r = s <= t ? expf(G[t] - G[s]) : 0.0f;
    A[t][s] = s < t ? beta[t] * r * kk : 0.0f;
    P_out[e] = r * qk;
  }
  __syncthreads();

  // X = (I + A)^-1 by forward substitution: X[t][j] = [t == j] - sum_{j <= s < t} A[t][s] X[s][j].
  // Lane j owns column j and reads only its own column's earlier rows, so no barrier inside.
  if (tid < C) {
    const int j = tid;
    for (int t = 0; t < C; ++t) {
      float x = t == j ? 1.0f : 0.0f;
      for (int s = j; s < t; ++s) x = fmaf(-A[t][s], X[s][j], x);
      X[t][j] = x;
    }
  }
  __syncthreads();

  // W = X diag(b e^G) K and U = X diag(b) V (X is lower triangular: s <= t).
  float* W_out = p.W + out * size_t(C) * size_t(dk);
  for (int e = tid; e < C * dk; e += kDeltaChunkThreads) {
    const int t = e / dk, i = e % dk;
    float acc = 0.0f;
    for (int s = 0; s <= t; ++s) acc = fmaf(X[t][s] * write_scale[s], ks[s][i], acc);
    W_out[e] = acc;
  }
  const int Kd = p.nk * dk, Cc = 2 * Kd + p.nv * dv;
  const float* V = p.qkv + size_t(t0) * size_t(Cc) + size_t(2 * Kd) + size_t(hv) * size_t(dv);
  float* U_out = p.U + out * size_t(C) * size_t(dv);
  for (int e = tid; e < C * dv; e += kDeltaChunkThreads) {
    const int t = e / dv, j = e % dv;
    float acc = 0.0f;
    for (int s = 0; s <= t && s < n; ++s) acc = fmaf(X[t][s] * beta[s], V[size_t(s) * size_t(Cc) + size_t(j)], acc);
    U_out[e] = acc;
  }
}

// Grid (nv, ceil(dv / kDeltaScanCols)), kDeltaChunkThreads threads: thread (row group, column).
template <int kMaxDk>
__global__ __launch_bounds__(kDeltaChunkThreads) void delta_chunk_scan_kernel(const DeltaChunkParams p) {
  pdl_begin();
  constexpr int C = kDeltaChunk, kCols = kDeltaScanCols, kGroups = kDeltaChunkThreads / kCols;
  static_assert(C % kGroups == 0, "every row group owns the same number of chunk rows");
  __shared__ float S[kMaxDk][kCols];  // the state's columns [j0, j0 + kCols)
  __shared__ float M[C][kMaxDk + 1];  // W, then e^G Q, then e^{G_last - G} K of the chunk
  __shared__ float D[C][kCols];       // the chunk's writes
  __shared__ float Ps[C][C + 1];
  __shared__ float Gs[C];
  const int tid = int(threadIdx.x), col = tid % kCols, group = tid / kCols, hv = int(blockIdx.x);
  const int j = int(blockIdx.y) * kCols + col, dk = p.dk, dv = p.dv, hk = hv / (p.nv / p.nk);
  const bool column = j < dv;
  float* S_head = p.states + size_t(hv) * size_t(dk) * size_t(dv);
  for (int i = group; i < dk; i += kGroups) S[i][col] = column ? S_head[size_t(i) * size_t(dv) + size_t(j)] : 0.0f;

  const int chunks = div_up(p.T, C);
  for (int chunk = 0; chunk < chunks; ++chunk) {
    const int t0 = chunk * C, n = min(C, p.T - t0);
    const size_t rec = size_t(chunk) * size_t(p.nv) + size_t(hv);
    const float* Wc = p.W + rec * size_t(C) * size_t(dk);
    const float* Uc = p.U + rec * size_t(C) * size_t(dv);
    const float* Pc = p.P + rec * size_t(C * C);
    const size_t qk_row0 = size_t(t0) * size_t(p.nk) + size_t(hk);  // row of token t: qk_row0 + t * nk

    for (int e = tid; e < C * dk; e += kDeltaChunkThreads) M[e / dk][e % dk] = Wc[e];
    if (tid < C) Gs[tid] = p.G[rec * C + size_t(tid)];
    __syncthreads();
    // D = U - W S0.
    for (int t = group; t < C; t += kGroups) {
      float acc = 0.0f;
      for (int i = 0; i < dk; ++i) acc = fmaf(M[t][i], S[i][col], acc);
      D[t][col] = (column ? Uc[size_t(t) * size_t(dv) + size_t(j)] : 0.0f) - acc;
    }
    __syncthreads();
    for (int e = tid; e < C * dk; e += kDeltaChunkThreads) {
      const int t = e / dk, i = e % dk;
      M[t][i] = t < n ? expf(Gs[t]) * p.qn[(qk_row0 + size_t(t) * size_t(p.nk)) * size_t(dk) + size_t(i)] : 0.0f;
    }
    for (int e = tid; e < C * C; e += kDeltaChunkThreads) Ps[e / C][e % C] = Pc[e];
    __syncthreads();
    // O = diag(e^G) Q S0 + P D.
    for (int t = group; t < n; t += kGroups) {
      float acc = 0.0f;
      for (int i = 0; i < dk; ++i) acc = fmaf(M[t][i], S[i][col], acc);
      for (int s = 0; s <= t; ++s) acc = fmaf(Ps[t][s], D[s][col], acc);
      if (column) p.o[(size_t(t0 + t) * size_t(p.nv) + size_t(hv)) * size_t(dv) + size_t(j)] = acc;
    }
    __syncthreads();
    const float G_last = Gs[C - 1];  // padded rows add g = 0, so this is the last real token's G
    for (int e = tid; e < C * dk; e += kDeltaChunkThreads) {
      const int t = e / dk, i = e % dk;
      M[t][i] =
          t < n ? expf(G_last - Gs[t]) * p.kn[(qk_row0 + size_t(t) * size_t(p.nk)) * size_t(dk) + size_t(i)] : 0.0f;
    }
    __syncthreads();
    // S = e^{G_last} S0 + K'^T D: each thread rewrites only its own elements.
    const float decay = expf(G_last);
    for (int i = group; i < dk; i += kGroups) {
      float acc = decay * S[i][col];
      for (int t = 0; t < C; ++t) acc = fmaf(M[t][i], D[t][col], acc);
      S[i][col] = acc;
    }
    __syncthreads();
  }
  if (column)
    for (int i = group; i < dk; i += kGroups) S_head[size_t(i) * size_t(dv) + size_t(j)] = S[i][col];
}

}  // namespace megaqwen::cuda
