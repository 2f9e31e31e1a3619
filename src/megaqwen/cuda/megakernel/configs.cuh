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

template <int H_, int L_, int HEADS_, int KV_HEADS_, int D_, int I_>
struct Config {
  static constexpr int H = H_, L = L_, HEADS = HEADS_, KV_HEADS = KV_HEADS_, D = D_, I = I_;
  static constexpr int G = HEADS / KV_HEADS;          // query heads per kv head (GQA group)
  static constexpr int Q = HEADS * D, KV = KV_HEADS * D;
  static constexpr int QKV_ROWS = Q + 2 * KV;

  static constexpr int kStages = 3;                   // weight buffers in the ring
  static constexpr int kL2Ahead = 2;                  // chunks prefetched into L2 beyond the ring
  static constexpr int kVecFloats = cmax(cmax(H, Q), I);
  static constexpr int kAttnScratchFloats = kWarps * G * D + 2 * kWarps * G + G * D;  // o, (m, l), q
  static constexpr int kScratchFloats = cmax(kVecFloats, kAttnScratchFloats);
  static constexpr size_t kSmallBytes = 1024;         // reductions, flags, mbarriers
  static constexpr size_t kBufBytes = [] {
    size_t room = (kSmemLimit - size_t(kScratchFloats) * 4 - kSmallBytes) / kStages;
    room = room / 1024 * 1024;
    return room > 64 * 1024 ? size_t(64 * 1024) : room;
  }();
  static constexpr size_t kSmemBytes = kStages * kBufBytes + size_t(kScratchFloats) * 4 + kSmallBytes;

  static_assert(HEADS % KV_HEADS == 0, "query heads must be a multiple of kv heads");
  static_assert(D == 128, "the attention stage maps a 128-dim row onto 16 lanes x 8 bf16");
  static_assert(G <= 8, "q registers: at most 8 query heads per kv head");
  static_assert(H % 8 == 0 && Q % 8 == 0 && I % 8 == 0, "rows are read as 16-byte groups (and bulk copies need 16 B)");
  static_assert(kBufBytes >= size_t(2) * 2 * cmax(cmax(H, Q), I), "a weight buffer must hold two rows of the widest matrix");
  static_assert(kSmemBytes <= kSmemLimit, "shared memory over the per-block limit: one CTA per SM impossible");
  static_assert(kStages * kBufBytes % 128 == 0, "the vector region must stay 128-byte aligned");
};

// The compiled shapes. tiny-test is the synthetic preset the GPU tests use (synth --preset tiny).
using ConfigQwen3_06B = Config<1024, 28, 16, 8, 128, 3072>;
using ConfigQwen3_17B = Config<2048, 28, 16, 8, 128, 6144>;
using ConfigQwen3_4B = Config<2560, 36, 32, 8, 128, 9728>;
using ConfigTinyTest = Config<64, 2, 4, 2, 128, 128>;

// Budget facts worth seeing at compile time for the main target.
static_assert(ConfigQwen3_06B::kBufBytes == 64 * 1024, "Qwen3-0.6B: three 64 KB weight buffers");
static_assert(ConfigQwen3_06B::kSmemBytes <= 212 * 1024, "Qwen3-0.6B: ~210 KB of shared memory");

}  // namespace megaqwen::cuda::mk
