// Which weight rows each CTA owns, and the order its weight chunks stream through shared memory.
//
// Every matrix of a token's forward pass is cut by rows into `ctas` contiguous ranges (ceil(rows /
// ctas) rows each, gate/up rounded to whole pairs), and each range into chunks of at most kBufBytes.
// A CTA's chunk sequence for one token is
//   layer 0: qkv chunks, o chunks, gate_up chunks, down chunks; layer 1: ...; then lm_head chunks
// and it repeats identically every token, so chunk s of the launch is chunk (s mod per_token) of this
// list: the stream (stream.cuh) can run ahead into the next token's layer-0 weights while the LM
// head of this token is still being reduced. A CTA whose range of a matrix is empty has no chunks for
// it but still takes part in that stage's counters.
// Qwen3-0.6B on 132 CTAs: qkv 32 rows (64 KB, 1 chunk), o 8 rows (32 KB), gate_up 48 rows (2 chunks:
// 32 + 16), down 8 rows (48 KB), lm_head 1,152 rows (36 chunks of 32) -> 5 x 28 + 36 = 176 per token.
#pragma once

#include <cstdint>

#include "megaqwen/cuda/megakernel/configs.cuh"
#include "megaqwen/cuda/megakernel/layout.h"

namespace megaqwen::cuda::mk {

enum class Mat : int { Qkv = 0, O, GateUp, Down, Lm, Count };

struct Part {
  int row0 = 0, rows = 0, chunk_rows = 1, chunks = 0;
};

struct Chunk {
  const uint16_t* src;
  uint32_t bytes;
};

MEGAQWEN_MK_HD constexpr int imin(int a, int b) { return a < b ? a : b; }
MEGAQWEN_MK_HD constexpr int imax(int a, int b) { return a > b ? a : b; }

// Rows of kv group g (its G query heads, its k head and its v head) among the stacked q | k | v rows
// [row0, row0 + rows): what stage A adds to QkvReady[l][g] (the groups' counts sum to (G + 2) * D).
template <class C>
MEGAQWEN_MK_HD constexpr int qkv_group_rows(int row0, int rows, int g) {
  auto overlap = [&](int a, int b) { return imax(0, imin(b, row0 + rows) - imax(a, row0)); };
  return overlap(g * C::G * C::D, (g + 1) * C::G * C::D) + overlap(C::Q + g * C::D, C::Q + (g + 1) * C::D) +
         overlap(C::Q + C::KV + g * C::D, C::Q + C::KV + (g + 1) * C::D);
}

// Host and device (the host-side plan test, tests/megakernel, checks every compiled config with it).
template <class C>
struct Schedule {
  Part part[int(Mat::Count)];
  int per_layer = 0, per_token = 0;

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

  MEGAQWEN_MK_HD void init(int cta, int ctas, int vocab) {
    part[int(Mat::Qkv)] = split<C::H>(C::QKV_ROWS, 1, cta, ctas);
    part[int(Mat::O)] = split<C::Q>(C::H, 1, cta, ctas);
    part[int(Mat::GateUp)] = split<C::H>(2 * C::I, 2, cta, ctas);
    part[int(Mat::Down)] = split<C::I>(C::H, 1, cta, ctas);
    part[int(Mat::Lm)] = split<C::H>(vocab, 1, cta, ctas);
    per_layer = 0;
    for (int m = 0; m < int(Mat::Lm); ++m) per_layer += part[m].chunks;
    per_token = C::L * per_layer + part[int(Mat::Lm)].chunks;
  }

  MEGAQWEN_MK_HD static int width(Mat m) { return m == Mat::O ? C::Q : m == Mat::Down ? C::I : C::H; }

  // Chunk s of the launch (s counts on across tokens).
  MEGAQWEN_MK_HD Chunk chunk(const Params& p, uint32_t s) const {
    int j = int(s % uint32_t(per_token));
    Mat m = Mat::Lm;
    const uint16_t* base = p.lm_head;
    if (j < C::L * per_layer) {
      const int l = j / per_layer;
      j -= l * per_layer;
      int mi = 0;
      while (j >= part[mi].chunks) j -= part[mi++].chunks;
      m = Mat(mi);
      const LayerWeights* lw = p.layers + l;
      base = mi == 0 ? lw->qkv : mi == 1 ? lw->o : mi == 2 ? lw->gate_up : lw->down;  // no indexed array: no stack
    } else {
      j -= C::L * per_layer;
    }
    const Part& pt = part[int(m)];
    const int row = pt.row0 + j * pt.chunk_rows;
    const int n = imin(pt.chunk_rows, pt.row0 + pt.rows - row);
    const int K = width(m);
    return {base + size_t(row) * size_t(K), uint32_t(n) * uint32_t(K) * 2u};
  }
};

}  // namespace megaqwen::cuda::mk
