// Stage A' (Qwen3.5 DeltaNet layers; stage A's mixer_input): RMSNorm(x) redundantly, this CTA's rows
// of the stacked in_proj (qkv | z | b | a), and for the conv channels among them (rows < CD: q, k, v) the depthwise causal
// conv over the channel's last CONV_K inputs and SiLU, in the epilogue. The conv is per channel, so
// the CTA that computes a channel's projection is the only one that reads and shifts that channel's
// conv state: no other CTA waits for it or races on it (ownership is fixed for the launch).
//   in:      x[l] (the embedding row for l = 0), input_norm[l] (1 + w folded in); weights in_proj[l]
//            rows [row0, row0 + rows); conv taps and conv state of its channels
//   out:     qkv[l][row]: q, k, v after conv + SiLU, z, b, a raw; conv state shifted by this token
//   bytes:   weights IN_ROWS * H * 2 per token over all CTAs (Qwen3.5-0.8B: 16.8 MB; ~128 KB per CTA);
//            conv state 2 * 4 * (CONV_K - 1) * rows read + written, taps 2 * CONV_K * rows
//   waits:   DownDone[l - 1] >= ctas * (t + 1) (layer 0: the Step wait at the token start)
//   signals: QkvReady[l][g] += rows of group g (key head g with its value heads) among its rows
#pragma once

#include "megaqwen/cuda/megakernel/stage_qkv.cuh"  // mixer_input

namespace megaqwen::cuda::mk {

// Channel ch's conv over [state (oldest first), in] with its CONV_K taps, then SiLU; shifts `in` into
// the state. The arithmetic of kernels/gated_delta_net.cuh's causal_conv_kernel, term for term.
template <class C>
__device__ __forceinline__ float conv_silu(const LayerWeights& w, int ch, float in) {
  constexpr int K = C::CONV_K;
  const unsigned short* taps = reinterpret_cast<const unsigned short*>(w.conv) + size_t(ch) * K;
  float* state = w.conv_state + ch;  // [K - 1, CD]
  float past[K - 1];
#pragma unroll
  for (int j = 0; j < K - 1; ++j) past[j] = state[size_t(j) * C::CD];
  float acc = 0.0f;
#pragma unroll
  for (int j = 0; j < K; ++j)
    acc = fmaf(__uint_as_float(uint32_t(__ldg(taps + j)) << 16), j < K - 1 ? past[j] : in, acc);
#pragma unroll
  for (int j = 0; j < K - 1; ++j) state[size_t(j) * C::CD] = j < K - 2 ? past[j + 1] : in;
  return acc / (1.0f + expf(-acc));
}

template <class C>
__device__ void stage_delta_in(Ctx<C>& c, int l) {
  const LayerWeights& w = c.p.layers[l];
  mixer_input(c, l, Mat::In, C::NK, [&](int row, float a) { return row < C::CD ? conv_silu<C>(w, row, a) : a; },
              [](int row0, int rows, int g) { return delta_group_rows<C>(row0, rows, g); });
}

}  // namespace megaqwen::cuda::mk
