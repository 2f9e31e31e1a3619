// The Gated DeltaNet's time mixing (Qwen3.5's linear-attention layers) on the CPU, one function per
// step, in fp32: the reference CpuHybridEngine runs and the GPU kernels are tested against.
//
// Channels of one token after in_proj_qkv: q [nk, dk] | k [nk, dk] | v [nv, dv] (C = 2 nk dk + nv dv).
// Per layer the recurrent state S is [nv, dk, dv] (S[i][j]: key i, value j) and the conv state holds
// the last K-1 pre-conv inputs [K-1, C], oldest first. Value head hv reads key head hv / (nv / nk).
#pragma once

#include <cstdint>

#include "megaqwen/model/qwen35_weights.h"
#include "megaqwen/util/thread_pool.h"

namespace megaqwen::cpu {

struct DeltaNetShape {
  int64_t nk = 0, nv = 0, dk = 0, dv = 0;
  int64_t key_dim() const { return nk * dk; }
  int64_t value_dim() const { return nv * dv; }
  int64_t conv_dim() const { return 2 * key_dim() + value_dim(); }
};

// transformers' l2norm inside the gated delta rule (torch_recurrent_gated_delta_rule) uses this eps.
constexpr double kDeltaNetL2NormEps = 1e-6;

// Depthwise causal conv over time per channel, then SiLU, in place on qkv [T, C]:
// out[t][ch] = silu(sum_j w[ch][j] * in[t - (K-1) + j][ch]), inputs before this chunk from `state`
// [K-1, C], which then keeps the chunk's last K-1 inputs. conv is [C, K].
void causal_conv(const WeightMatrix& conv, float* state, float* qkv, int64_t T, ThreadPool& pool);

// Per token and head, in place on qkv [T, C]: q and k l2-normalized (kDeltaNetL2NormEps), q scaled by
// 1/sqrt(dk); from b, a [T, nv]: the write strength beta = sigmoid(b) and the log decay
// g = -exp(A_log) softplus(a + dt_bias), both [T, nv].
void delta_net_gates(const DeltaNetShape& s, const WeightVector& A_log, const WeightVector& dt_bias, float* qkv,
                     const float* b, const float* a, int64_t T, float* beta, float* g);

// The gated delta rule over states [nv, dk, dv] for T tokens of qkv [T, C] (after the gates), one
// thread per value head (results do not depend on the thread count). Per token, in this order:
//   S = alpha S                    (alpha = exp(g): the decay comes first)
//   m_j = sum_i S[i][j] k_i        (what the decayed state recalls for k)
//   S[i][j] += k_i beta (v_j - m_j)
//   o_j = sum_i S[i][j] q_i
// o is [T, nv, dv].
void delta_rule(const DeltaNetShape& s, float* states, const float* qkv, const float* beta, const float* g,
                int64_t T, float* o, ThreadPool& pool);

}  // namespace megaqwen::cpu
