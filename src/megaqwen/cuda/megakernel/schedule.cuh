// Which weight rows each CTA owns, and the order its weight chunks stream through shared memory.
//
// Every matrix of a token's forward pass is cut by rows into `ctas` contiguous ranges (ceil(rows /
// ctas) rows each, gate/up rounded to whole pairs), and each range into chunks of at most kBufBytes.
// A CTA's chunk sequence for one token is
//   layer 0: qkv chunks, o chunks, gate_up chunks, down chunks; layer 1: ...; then lm_head chunks
// (a hybrid's DeltaNet layers stream in_proj and out_proj chunks where attention layers have qkv, o)
// and it repeats identically every token, so chunk s of the launch is chunk (s mod per_token) of this
// list: the stream (stream.cuh) can run ahead into the next token's layer-0 weights while the LM
// head of this token is still being reduced. A CTA whose range of a matrix is empty has no chunks for
// it but still takes part in that stage's counters.
// Qwen3-0.6B on 132 CTAs: qkv 32 rows (64 KB, 1 chunk), o 8 rows (32 KB), gate_up 48 rows (2 chunks:
// 32 + 16), down 8 rows (48 KB), lm_head 1,152 rows (36 chunks of 32) -> 5 x 28 + 36 = 176 per token.
// The one-stage MLP (Params::x_fixed) streams down^T instead of down: the rows of the CTA's own
// gate/up units (0.6B: 24 rows of 2 KB, 48 KB, 1 chunk), in place of its 8 rows of down.
#pragma once

#include <cstdint>

#include "megaqwen/cuda/megakernel/configs.cuh"
#include "megaqwen/cuda/megakernel/layout.h"

namespace megaqwen::cuda::mk {

// In, Out: a DeltaNet's in_proj, out_proj. DownT: down^T [I, H] (the one-stage MLP's, in place of Down).
enum class Mat : int { Qkv = 0, O, GateUp, Down, In, Out, DownT, Lm, Count };

struct Part {
  int row0 = 0, rows = 0, chunk_rows = 1, chunks = 0;
};

struct Chunk {
  const uint16_t* src;
  uint32_t bytes;
};

MEGAQWEN_MK_HD constexpr int imin(int a, int b) { return a < b ? a : b; }
MEGAQWEN_MK_HD constexpr int imax(int a, int b) { return a > b ? a : b; }

// Rows of kv group g (its G query heads, its k head and its v head; hybrid: also its G gate heads)
// among the stacked q | k | v (hybrid q | gate | k | v) rows [row0, row0 + rows): what stage A adds
// to QkvReady[l][g] (the groups' counts sum to (G + 2) * D, hybrid (2G + 2) * D).
template <class C>
MEGAQWEN_MK_HD constexpr int qkv_group_rows(int row0, int rows, int g) {
  auto overlap = [&](int a, int b) { return imax(0, imin(b, row0 + rows) - imax(a, row0)); };
  constexpr int k0 = C::kHybrid ? 2 * C::Q : C::Q;  // where the k rows start
  int n = overlap(g * C::G * C::D, (g + 1) * C::G * C::D) + overlap(k0 + g * C::D, k0 + (g + 1) * C::D) +
          overlap(k0 + C::KV + g * C::D, k0 + C::KV + (g + 1) * C::D);
  if constexpr (C::kHybrid) n += overlap(C::Q + g * C::G * C::D, C::Q + (g + 1) * C::G * C::D);
  return n;
}

// Rows of DeltaNet group g (key head g and its VPK value heads: q_g, k_g, their v, z, b and a rows)
// among the stacked in_proj rows [row0, row0 + rows): what stage A' adds to QkvReady[l][g]; the
// groups' counts sum to delta_group_count<C>() each.
template <class C>
MEGAQWEN_MK_HD constexpr int delta_group_rows(int row0, int rows, int g) {
  auto overlap = [&](int a, int n) { return imax(0, imin(a + n, row0 + rows) - imax(a, row0)); };
  constexpr int VH = C::VPK * C::DV;  // value-head rows of one group
  return overlap(g * C::DK, C::DK) + overlap(C::NK * C::DK + g * C::DK, C::DK) +
         overlap(2 * C::NK * C::DK + g * VH, VH) + overlap(C::CD + g * VH, VH) + overlap(C::CD + C::VD + g * C::VPK, C::VPK) +
         overlap(C::CD + C::VD + C::NV + g * C::VPK, C::VPK);
}
template <class C>
MEGAQWEN_MK_HD constexpr int delta_group_count() {
  return 2 * C::DK + 2 * C::VPK * C::DV + 2 * C::VPK;
}

// Host and device (the host-side plan test, tests/megakernel, checks every compiled config with it).
template <class C>
struct Schedule {
  Part part[int(Mat::Count)];
  uint64_t delta_layers = 0;  // Params::delta_layers
  bool one_stage_mlp = false;  // Params::x_fixed set: the layer's last matrix is DownT, not Down
  int per_attn_layer = 0, per_delta_layer = 0, per_token = 0;

  template <int K>
  MEGAQWEN_MK_HD static Part split(int rows, int align, int cta, int ctas) {
    Part p;
    int rpc = (rows + ctas - 1) / ctas;
    rpc = (rpc + align - 1) / align * align;
    p.row0 = imin(rows, cta * rpc);
    p.rows = imin(rows, p.row0 + rpc) - p.row0;
    p.chunk_rows = int(C::kBufBytes / (size_t(K) * 2)) / align * align;
    p.chunks = (p.rows + p.chunk_rows - 1) / p.chunk_rows;
    return p;
  }

  MEGAQWEN_MK_HD void init(int cta, int ctas, int vocab, uint64_t delta_mask = 0, bool one_stage = false) {
    one_stage_mlp = one_stage;
    part[int(Mat::Qkv)] = split<C::H>(C::QKV_ROWS, 1, cta, ctas);
    part[int(Mat::O)] = split<C::Q>(C::H, 1, cta, ctas);
    part[int(Mat::GateUp)] = split<C::H>(2 * C::I, 2, cta, ctas);
    if (one_stage) {
      // The units of the CTA's gate/up pairs: pair i is unit i, so its act never leaves the CTA.
      const Part& gu = part[int(Mat::GateUp)];
      Part& dt = part[int(Mat::DownT)];
      dt.row0 = gu.row0 / 2;
      dt.rows = gu.rows / 2;
      dt.chunk_rows = int(C::kBufBytes / (size_t(C::H) * 2));
      dt.chunks = (dt.rows + dt.chunk_rows - 1) / dt.chunk_rows;
      part[int(Mat::Down)] = Part{0, 0, 1, 0};
    } else {
      part[int(Mat::Down)] = split<C::I>(C::H, 1, cta, ctas);
      part[int(Mat::DownT)] = Part{0, 0, 1, 0};
    }
    if constexpr (C::kHybrid) {
      part[int(Mat::In)] = split<C::H>(C::IN_ROWS, 1, cta, ctas);
      part[int(Mat::Out)] = split<C::VD>(C::H, 1, cta, ctas);
    } else {
      part[int(Mat::In)] = part[int(Mat::Out)] = Part{0, 0, 1, 0};
    }
    part[int(Mat::Lm)] = split<C::H>(vocab, 1, cta, ctas);
    delta_layers = C::kHybrid ? delta_mask : 0;
    const int mlp = part[int(Mat::GateUp)].chunks + part[int(down_mat())].chunks;
    per_attn_layer = part[int(Mat::Qkv)].chunks + part[int(Mat::O)].chunks + mlp;
    per_delta_layer = part[int(Mat::In)].chunks + part[int(Mat::Out)].chunks + mlp;
    per_token = part[int(Mat::Lm)].chunks;
    for (int l = 0; l < C::L; ++l) per_token += layer_chunks(l);
  }

  MEGAQWEN_MK_HD bool is_delta(int l) const { return C::kHybrid && ((delta_layers >> l) & 1u); }
  MEGAQWEN_MK_HD int layer_chunks(int l) const { return is_delta(l) ? per_delta_layer : per_attn_layer; }

  // The MLP's second matrix: Down (stage E's rows), or DownT (the one-stage MLP's units).
  MEGAQWEN_MK_HD Mat down_mat() const { return one_stage_mlp ? Mat::DownT : Mat::Down; }
  // The i-th matrix a layer streams.
  MEGAQWEN_MK_HD Mat layer_mat(bool delta, int i) const {
    return i == 0 ? (delta ? Mat::In : Mat::Qkv) : i == 1 ? (delta ? Mat::Out : Mat::O) : i == 2 ? Mat::GateUp : down_mat();
  }

  MEGAQWEN_MK_HD static int width(Mat m) {
    if (m == Mat::O) return C::Q;
    if (m == Mat::Down) return C::I;  // DownT rows are H wide
    if constexpr (C::kHybrid) {
      if (m == Mat::Out) return C::VD;
    }
    return C::H;
  }

  // Chunk s of the launch (s counts on across tokens). Each layer streams its mixer's two matrices
  // (attention: Qkv, O; DeltaNet: In, Out), then GateUp, Down (one-stage MLP: DownT); the LM head ends the token.
  MEGAQWEN_MK_HD Chunk chunk(const Params& p, uint32_t s) const {
    int j = int(s % uint32_t(per_token));
    Mat m = Mat::Lm;
    const uint16_t* base = p.lm_head;
    int l = 0;
    if constexpr (C::kHybrid) {
      while (l < C::L && j >= layer_chunks(l)) j -= layer_chunks(l++);
    } else {
      l = per_attn_layer > 0 ? imin(C::L, j / per_attn_layer) : C::L;
      j -= l * per_attn_layer;
    }
    if (l < C::L) {
      const bool delta = is_delta(l);
      int mi = 0;
      while (j >= part[int(layer_mat(delta, mi))].chunks) j -= part[int(layer_mat(delta, mi++))].chunks;
      m = layer_mat(delta, mi);
      const LayerWeights* lw = p.layers + l;
      // no indexed array: no stack
      base = mi == 2   ? lw->gate_up
             : mi == 3 ? (one_stage_mlp ? lw->down_t : lw->down)
             : mi == 0 ? (delta ? lw->in_proj : lw->qkv)
                       : (delta ? lw->out : lw->o);
    }
    const Part& pt = part[int(m)];
    const int row = pt.row0 + j * pt.chunk_rows;
    const int n = imin(pt.chunk_rows, pt.row0 + pt.rows - row);
    const int K = width(m);
    return {base + size_t(row) * size_t(K), uint32_t(n) * uint32_t(K) * 2u};
  }
};

}  // namespace megaqwen::cuda::mk
