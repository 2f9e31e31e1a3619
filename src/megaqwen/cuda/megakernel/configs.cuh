// Per-model compile-time configuration of the megakernel. The kernel is compiled once per supported
// Qwen3 shape, so every loop bound, row width and shared-memory offset is a constant; the host
// (runner.cpp) picks the config whose shape equals the loaded model's config and otherwise keeps the
// per-operator path. Budgets are static_asserts: a config that would not fit one CTA per SM (227 KB
// of shared memory on Hopper) does not compile.
//
// Shared memory of one CTA:
//   kStages weight buffers of kBufBytes  the streaming ring (stream.cuh): chunks of weight rows
//   kVecFloats * 4 bytes                 the stage's input vector (normalized x, attn, act) or, in
//                                        stage B, the attention scratch (aliased: stages run in turn)
//   small: reductions, flags, mbarriers
// kBufBytes is the largest multiple of 1 KB (at most 64 KB) that fits beside the rest, and must hold
// at least two rows of the widest matrix (a gate/up pair).
#pragma once

#include <cstddef>

#include "megaqwen/cuda/megakernel/layout.h"

namespace megaqwen::cuda::mk {

constexpr int cmax(int a, int b) { return a > b ? a : b; }

constexpr size_t kSmemLimit = 227 * 1024;  // Hopper: max dynamic shared memory per block (opt-in)

// The weight ring's buffer size for a vector / scratch region of `scratch_floats`: the largest
// multiple of 1 KB (at most 64 KB) that fits kStages times beside it and the small region.
constexpr size_t ring_buffer_bytes(int stages, int scratch_floats, size_t small_bytes) {
  size_t room = (kSmemLimit - size_t(scratch_floats) * 4 - small_bytes) / size_t(stages);
  room = room / 1024 * 1024;
  return room > 64 * 1024 ? size_t(64 * 1024) : room;
}

template <int H_, int L_, int HEADS_, int KV_HEADS_, int D_, int I_>
struct Config {
  static constexpr bool kHybrid = false;
  static constexpr int H = H_, L = L_, HEADS = HEADS_, KV_HEADS = KV_HEADS_, D = D_, I = I_;
  static constexpr int G = HEADS / KV_HEADS;          // query heads per kv head (GQA group)
  static constexpr int Q = HEADS * D, KV = KV_HEADS * D;
  static constexpr int QKV_ROWS = Q + 2 * KV;
  static constexpr int R = D;                         // rotary dims
  static constexpr int GROUPS = KV_HEADS;             // counter groups per layer (layout.h)
  static constexpr int WIDEST = cmax(cmax(H, Q), I);  // the widest weight row
  static constexpr int kQkvRowFloats = QKV_ROWS;      // per layer in Params::qkv
  static constexpr int kAttnRowFloats = Q;            // per layer in Params::attn

  static constexpr int kStages = 3;                   // weight buffers in the ring
  static constexpr int kL2Ahead = 2;                  // chunks prefetched into L2 beyond the ring
  static constexpr int kVecFloats = cmax(cmax(H, Q), I);
  static constexpr int kAttnScratchFloats = kWarps * G * D + 2 * kWarps * G + G * D;  // o, (m, l), q
  static constexpr int kScratchFloats = cmax(kVecFloats, kAttnScratchFloats);
  static constexpr size_t kSmallBytes = 1024;         // reductions, flags, mbarriers
  static constexpr size_t kBufBytes = ring_buffer_bytes(kStages, kScratchFloats, kSmallBytes);
  static constexpr size_t kSmemBytes = kStages * kBufBytes + size_t(kScratchFloats) * 4 + kSmallBytes;

  static_assert(HEADS % KV_HEADS == 0, "query heads must be a multiple of kv heads");
  static_assert(D == 128, "Qwen3 configs: 128-dim heads");
  static_assert(G <= 8, "q registers: at most 8 query heads per kv head");
  static_assert(H % 8 == 0 && Q % 8 == 0 && I % 8 == 0, "rows are read as 16-byte groups (and bulk copies need 16 B)");
  static_assert(kBufBytes >= size_t(2) * 2 * WIDEST, "a weight buffer must hold two rows of the widest matrix");
  static_assert(kSmemBytes <= kSmemLimit, "shared memory over the per-block limit: one CTA per SM impossible");
  static_assert(kStages * kBufBytes % 128 == 0, "the vector region must stay 128-byte aligned");
};

// A Qwen3.5 hybrid: gated-attention layers (q | gate | k | v projection, partial RoPE over the first
// R dims, sigmoid output gate) and Gated DeltaNet layers (NK key heads of DK, NV value heads of DV,
// a depthwise conv of CONV_K taps over the CD = 2 NK DK + NV DV channels of q, k, v). Which layer is
// which comes at run time (Params::delta_layers); the shapes here fix every loop bound.
template <int H_, int L_, int HEADS_, int KV_HEADS_, int D_, int I_, int R_, int NK_, int NV_, int DK_, int DV_,
          int CONV_K_>
struct HybridConfig {
  static constexpr bool kHybrid = true;
  static constexpr int H = H_, L = L_, HEADS = HEADS_, KV_HEADS = KV_HEADS_, D = D_, I = I_, R = R_;
  static constexpr int G = HEADS / KV_HEADS;
  static constexpr int Q = HEADS * D, KV = KV_HEADS * D;
  static constexpr int QKV_ROWS = 2 * Q + 2 * KV;     // q | gate | k | v
  static constexpr int NK = NK_, NV = NV_, DK = DK_, DV = DV_, CONV_K = CONV_K_;
  static constexpr int VPK = NV / NK;                 // value heads per key head
  static constexpr int CD = 2 * NK * DK + NV * DV;    // conv channels: q | k | v
  static constexpr int VD = NV * DV;
  static constexpr int IN_ROWS = CD + VD + 2 * NV;    // in_proj: qkv | z | b | a
  static constexpr int DELTA_COLS = delta_columns(DV);  // value columns per stage B' item
  static constexpr int DELTA_ITEMS = NV * (DV / DELTA_COLS);
  static constexpr int GROUPS = cmax(KV_HEADS, NK);
  static constexpr int WIDEST = cmax(cmax(cmax(H, Q), I), VD);
  static constexpr int kQkvRowFloats = cmax(QKV_ROWS, IN_ROWS);
  static constexpr int kAttnRowFloats = cmax(Q, VD);

  static constexpr int kStages = 3;
  static constexpr int kL2Ahead = 2;
  static constexpr int kVecFloats = WIDEST;
  // o, (m, l), q rows, and one more row for the k head's rotation (R < D pairs cross lanes)
  static constexpr int kAttnScratchFloats = kWarps * G * D + 2 * kWarps * G + (G + 1) * D;
  // q, k, the two column reductions of stage B' (kThreads partial sums), m and o of its columns
  static constexpr int kDeltaScratchFloats = 2 * DK + kThreads + 2 * DELTA_COLS;
  static constexpr int kScratchFloats = cmax(cmax(kVecFloats, kAttnScratchFloats), kDeltaScratchFloats);
  static constexpr size_t kSmallBytes = 1024;
  static constexpr size_t kBufBytes = ring_buffer_bytes(kStages, kScratchFloats, kSmallBytes);
  static constexpr size_t kSmemBytes = kStages * kBufBytes + size_t(kScratchFloats) * 4 + kSmallBytes;

  static_assert(HEADS % KV_HEADS == 0 && NV % NK == 0, "query heads per kv head and value heads per key head");
  static_assert(D == 64 || D == 128 || D == 256, "attention maps a head row onto D / 8 lanes of 8 bf16");
  static_assert(R % 2 == 0 && R <= D, "rotary dims: pairs within the head");
  static_assert(G <= 8, "q registers: at most 8 query heads per kv head");
  static_assert(DK <= 128 && DV % DELTA_COLS == 0, "DeltaNet heads: key dims per head, whole column blocks");
  static_assert(kThreads % DELTA_COLS == 0, "stage B' threads: (column, row group)");
  static_assert(L <= kMaxLayers, "Params::delta_layers is a 64-bit mask");
  static_assert(H % 8 == 0 && Q % 8 == 0 && I % 8 == 0 && VD % 8 == 0, "rows are read as 16-byte groups");
  static_assert(kBufBytes >= size_t(2) * 2 * WIDEST, "a weight buffer must hold two rows of the widest matrix");
  static_assert(kSmemBytes <= kSmemLimit, "shared memory over the per-block limit: one CTA per SM impossible");
  static_assert(kStages * kBufBytes % 128 == 0, "the vector region must stay 128-byte aligned");
};

// The one-stage MLP's down^T product (stage_mlp_one_stage.cuh) on a CTA of config C: thread (r, g)
// holds column group g (8 outputs, one 16-byte load per row: a warp reads 512 contiguous bytes of a
// row, conflict-free) and sums units r, r + kRowSets, ...; the kRowSets partials of each output are
// then added in order (fixed order: bit-reproducible for a given CTA count).
template <class C>
struct OneStageMlp {
  static_assert(C::H % 8 == 0 && C::H / 8 <= kThreads, "down^T rows: one 16-byte column group per thread");
  static constexpr int kGroups = C::H / 8;
  static constexpr int kRowSets = kThreads / kGroups < 16 ? kThreads / kGroups : 16;
  static constexpr int kActive = kGroups * kRowSets;  // threads with a (row set, group)
  static constexpr int kPartialFloats = kRowSets * C::H;
  static constexpr int kActOffset = cmax(C::H, kPartialFloats);
  // Units one CTA can own (the runner refuses a grid that gives a CTA more).
  static constexpr int kMaxUnits = C::kScratchFloats - kActOffset;
  static_assert(kMaxUnits >= 16, "the vector region has no room for the CTA's act");
};

// The compiled shapes. tiny-test is the synthetic preset the GPU tests use (synth --preset tiny).
using ConfigQwen3_06B = Config<1024, 28, 16, 8, 128, 3072>;
using ConfigQwen3_17B = Config<2048, 28, 16, 8, 128, 6144>;
using ConfigQwen3_4B = Config<2560, 36, 32, 8, 128, 9728>;
using ConfigTinyTest = Config<64, 2, 4, 2, 128, 128>;
// Qwen3.5-0.8B's language model, and the two tiny hybrid presets the GPU tests use (synth --preset
// tiny-hybrid: [DeltaNet, attention]; tiny-hybrid-gqa: [attention, DeltaNet, DeltaNet] with two
// value heads per key head).
using ConfigQwen35_08B = HybridConfig<1024, 24, 8, 2, 256, 3584, 64, 16, 16, 128, 128, 4>;
using ConfigTinyHybrid = HybridConfig<64, 2, 4, 2, 64, 128, 16, 2, 2, 32, 32, 4>;
using ConfigTinyHybridGqa = HybridConfig<64, 3, 4, 1, 64, 96, 16, 2, 4, 16, 32, 4>;

// Budget facts worth seeing at compile time for the main target.
static_assert(ConfigQwen3_06B::kBufBytes == 64 * 1024, "Qwen3-0.6B: three 64 KB weight buffers");
static_assert(ConfigQwen3_06B::kSmemBytes <= 212 * 1024, "Qwen3-0.6B: ~210 KB of shared memory");
static_assert(ConfigQwen35_08B::kBufBytes == 52 * 1024,
              "Qwen3.5-0.8B: three 52 KB weight buffers beside 70 KB of attention scratch");

}  // namespace megaqwen::cuda::mk
