// The megakernel's shared layout: the ONE place host and device agree on counter ids, stage ids,
// timing slots, limits and the kernel's parameter block. Plain C++ (no CUDA headers): included by the
// host runner (runner.cpp), the tests, and every device file of this folder.
//
// Counters (uint32, in one device array, each on its own 128-byte line): they only ever count UP
// during a launch (zeroed once per launch by one cudaMemsetAsync, never per token). A waiter compares
// with a target that grows with the token index t inside the launch ("epoch"): e.g. stage D of layer
// l waits until ODone[l] >= (t + 1) * ctas. Writers add with red.release.gpu, waiters spin with
// ld.acquire.gpu (sync.cuh).
//
//   counter             indexed by      added by                        per token   waited on by
//   QkvReady[l][g]      layer, group    stage A, rows of group g it      (G+2)*D     stage B (kv head g)
//                                       wrote (q heads of g, k_g, v_g)
//   AttnTicket[l][g]    layer, group    stage B, one per split           splits      (ticket: last split merges)
//   AttnReady[l]        layer           stage B: every split adds 1      kv_heads    stage C
//                                       (C merges), or the merging       * splits
//                                       split adds `splits` (B merged)
//   ODone[l]            layer           stage C, every CTA once          ctas        stage D
// Qwen3.5 hybrids use the same counters for both mixers (a group is a kv head of a gated-attention
// layer, or a key head of a DeltaNet layer with its value heads; counts per token in the stage files):
//   QkvReady[l][g]      gated attention: (2G+2)*D rows (q, gate, k, v); DeltaNet: stage A' (in_proj
//                       + conv), the rows of key head g and of its value heads (q, k, v, z, b, a)
//   AttnReady[l]        DeltaNet: stage B', one per (value head, column block) item; waited on by C'
//   ODone[l]            DeltaNet: stage C' (gated norm + out_proj), every CTA once
//   MlpDone[l]          layer           stage D, every CTA once          ctas        stage E
//   DownDone[l]         layer           stage E, every CTA once          ctas        stage A of l+1, LM head
//   (with the one-stage MLP, Params::x_fixed, stage D does E's work and signals DownDone itself:
//   MlpDone stays at 0)
//   (ODone, MlpDone and DownDone stay at 0 with flagged vectors, Params::x_words: the data carries
//   its own epoch and the readers poll it; in the Qwen3 configs QkvReady and AttnReady too,
//   Params::qkv_words; DownDone counts on with the one-stage MLP: its sums carry no epoch)
//   LmTicket            -               LM head, every CTA once          ctas        (ticket: last CTA selects)
//   Step                -               the selecting CTA: = t + 1       1           every CTA, next token
//   Done / StopSeen     -               flags (0/1), not counters
#pragma once

#include <cstdint>

// Per-stage timing slots: configure with -DMEGAQWEN_MK_TIMING=ON, which defines it
// as 1 for megakernel.cu (off by default: no cost).
#ifndef MEGAQWEN_MK_TIMING
#define MEGAQWEN_MK_TIMING 0
#endif

// Counter arithmetic runs on both sides.
#if defined(__CUDACC__)
#define MEGAQWEN_MK_HD __host__ __device__
#else
#define MEGAQWEN_MK_HD
#endif

namespace megaqwen::cuda::mk {

// ---- limits ----
constexpr int kThreads = 512;          // threads per CTA (16 warps); one CTA per SM
constexpr int kWarps = kThreads / 32;
constexpr int kMaxSplits = 32;         // attention splits per kv head (partials are sized for this)
constexpr int kMinAttnChunk = 64;      // positions: fewer per split would only add merge work
constexpr int kMaxEos = 8;             // eos ids the kernel checks itself
constexpr int kCounterStride = 32;     // uint32 words between counters (128 bytes: no false sharing)
constexpr int kMaxLayers = 64;         // Params::delta_layers is a 64-bit mask
constexpr int kLaunchTokenCap = 4096;  // tokens one launch may draw (mailbox size); the runner relaunches
constexpr int kMaxTopK = 64;           // filtered sampling in the kernel: top_k in 1..kMaxTopK (else per-op)
constexpr int kSelectTestMembers = 1024;  // select_test_kernel's nucleus member buffer (at most)
constexpr int kSelPerThread = 20;      // keys per thread of the top-k selection: a CTA's vocabulary slice
                                       // and ctas x top_k candidates must each be <= kThreads x this
constexpr int kMaxLogprobTop = 20;     // alternatives per logprob record (sampling/logprobs.h: kMaxTopLogprobs)

// ---- ablations ----
// Choices that can be switched back at run time (Params::ablate, MEGAQWEN_MK_ABLATE = the sum of the
// bits) so a benchmark measures what each one buys (docs/MEGAKERNEL.md). 0: everything on.
constexpr uint32_t kAblateDeferredRefill = 1;  // refill the weight ring before a stage's signal, not after it
constexpr uint32_t kAblateFences = 2;          // a __threadfence before every release add, ticket and Step store
constexpr uint32_t kAblateRelaxedSpin = 4;     // poll counters relaxed, then one fence.acq_rel (the first
                                               // default; 5% slower than ld.acquire polls on the H200)
constexpr uint32_t kAblateSplitMerge = 8;      // the last attention split to arrive merges every token
                                               // (ticket -> merge -> AttnReady) instead of stage C
constexpr uint32_t kAblateAll = kAblateDeferredRefill | kAblateFences | kAblateRelaxedSpin | kAblateSplitMerge;

// ---- timing probes ----
// What-if runs that break the results on purpose (Params::probe, MEGAQWEN_MK_PROBE): each removes one
// of the two things a token's time is made of, so a benchmark can split it (docs/MEGAKERNEL.md,
// "Timing probes"). The drawn tokens are meaningless; only the time counts.
constexpr uint32_t kProbeNoWaits = 1;    // the stages' input waits (QkvReady, AttnReady, ODone, MlpDone,
                                         // DownDone) return at once: what is left is the weight stream,
                                         // the work and one grid-wide edge per token (the LM head's ticket
                                         // and Step, kept, so a CTA never runs more than a token ahead)
constexpr uint32_t kProbeNoWeights = 2;  // the weight stream copies nothing and never waits: the stages
                                         // multiply whatever the ring's buffers hold; what is left is the
                                         // chain of edges and the work
constexpr uint32_t kProbeAll = kProbeNoWaits | kProbeNoWeights;

// ---- attention work split ----
// Splits per kv head for `ctas` CTAs: one (kv head, split) item per CTA.
MEGAQWEN_MK_HD constexpr int attention_splits(int ctas, int kv_heads) {
  const int s = ctas / kv_heads;
  return s < 1 ? 1 : s > kMaxSplits ? kMaxSplits : s;
}
// Positions per split for n = position + 1 cached rows: at least kMinAttnChunk, a multiple of 8.
// Split s covers [s * chunk, min(n, (s + 1) * chunk)); ceil(n / chunk) <= splits are non-empty.
MEGAQWEN_MK_HD constexpr int attention_chunk(int n, int splits) {
  const int per = (n + splits - 1) / splits;
  return ((per > kMinAttnChunk ? per : kMinAttnChunk) + 7) & ~7;
}
// The positions [begin, end) split `split` of `splits` reads for n cached rows (empty past the used
// splits); the one split whose range ends at n holds the new position and appends its k and v.
struct AttentionSplit {
  int begin, end;
  MEGAQWEN_MK_HD constexpr bool empty() const { return begin >= end; }
  MEGAQWEN_MK_HD constexpr bool appends(int n) const { return begin < end && end == n; }
};
MEGAQWEN_MK_HD constexpr AttentionSplit attention_split(int n, int splits, int split) {
  const int chunk = attention_chunk(n, splits), begin = split * chunk;
  return {begin, begin + chunk < n ? begin + chunk : n};
}
// How many splits are non-empty (the first ones): what the merge reads.
MEGAQWEN_MK_HD constexpr int attention_used_splits(int n, int splits) {
  const int chunk = attention_chunk(n, splits);
  return (n + chunk - 1) / chunk;
}
// Who merges the splits of a token's attention. With at most Params::merge_splits non-empty splits
// (the default kMergeInOProjMaxSplits: positions up to 256 on the H200's 16 splits of 64), every
// stage-C CTA merges them itself while loading its input, so the layer has one serial hop fewer
// (no ticket round trip, no merge by one CTA and no second release-acquire before stage C); with
// more, each CTA would read `used` times the merged vector from L2, so the last split to arrive
// merges once and stage C reads the result. n grows through a launch, so a launch may switch from
// the first form to the second, never back; every CTA decides the same from n alone. Qwen3.5 hybrids
// always take the second (Ctx::o_proj_merges: register pressure).
constexpr int kMergeInOProjMaxSplits = 4;
MEGAQWEN_MK_HD constexpr bool merge_in_o_proj(int n, int splits, int merge_splits) {
  return attention_used_splits(n, splits) <= merge_splits;
}

// ---- MLP work split ----
// The intermediate units (gate/up pairs) of each CTA: ceil(2I / ctas) rows rounded up to whole pairs,
// as schedule.cuh splits gate_up (the last CTAs may get fewer). The one-stage MLP keeps a CTA's act in
// shared memory (configs.cuh, OneStageMlp::kMaxUnits), so the runner checks this against it.
MEGAQWEN_MK_HD constexpr int one_stage_units_per_cta(int intermediate, int ctas) {
  const int pair_rows = (2 * intermediate + ctas - 1) / ctas;
  return (pair_rows + 1) / 2;
}

// ---- DeltaNet work split ----
// Value columns per stage B' item (hybrid configs): NV * DV / delta_columns(DV) items per layer.
MEGAQWEN_MK_HD constexpr int delta_columns(int dv) { return dv < 16 ? dv : 16; }

// ---- stages (timing slots, schedule) ----
enum class Stage : int { Qkv = 0, Attention, OProj, Mlp, Down, LmHead, Select, Count };
constexpr int kStageCount = int(Stage::Count);
// Timing (compiled in with -DMEGAQWEN_MK_TIMING=1): per CTA and stage, nanoseconds summed over the
// launch: slot 0 waiting for the input counter, slot 1 working (loads, math, stores, signal), slot 2
// waiting for weight chunks still in flight (the ring's mbarriers; not counted in slot 1).
constexpr int kTimingSlots = 3;
inline const char* stage_name(Stage s) {
  constexpr const char* names[] = {"A qkv", "B attention", "C o_proj", "D gate_up", "E down", "lm_head", "select"};
  return names[int(s)];
}

// ---- counters ----
enum class Counter : int { QkvReady = 0, AttnTicket, AttnReady, ODone, MlpDone, DownDone, LmTicket, Step, Done, StopSeen };

struct CounterLayout {
  int layers = 0, kv_heads = 0;  // kv_heads: groups per layer (hybrid: max(kv heads, DeltaNet key heads))
  // Index (in counters, before the stride) of counter `c` for layer l and kv head g.
  MEGAQWEN_MK_HD constexpr int slot(Counter c, int l = 0, int g = 0) const {
    const int LG = layers * kv_heads;
    switch (c) {
      case Counter::QkvReady: return l * kv_heads + g;
      case Counter::AttnTicket: return LG + l * kv_heads + g;
      case Counter::AttnReady: return 2 * LG + l;
      case Counter::ODone: return 2 * LG + layers + l;
      case Counter::MlpDone: return 2 * LG + 2 * layers + l;
      case Counter::DownDone: return 2 * LG + 3 * layers + l;
      case Counter::LmTicket: return 2 * LG + 4 * layers;
      case Counter::Step: return 2 * LG + 4 * layers + 1;
      case Counter::Done: return 2 * LG + 4 * layers + 2;
      case Counter::StopSeen: return 2 * LG + 4 * layers + 3;
    }
    return 0;
  }
  MEGAQWEN_MK_HD constexpr int count() const { return 2 * layers * kv_heads + 4 * layers + 4; }
  MEGAQWEN_MK_HD constexpr int words() const { return count() * kCounterStride; }
  MEGAQWEN_MK_HD constexpr int word(Counter c, int l = 0, int g = 0) const { return slot(c, l, g) * kCounterStride; }
};

// ---- the kernel's parameters ----
// bf16 data as uint16_t bit patterns (this header has no CUDA types). Shapes: H hidden, Q = heads*D,
// KV = kv_heads*D, I intermediate, V vocabulary, L layers, S = kMaxSplits.
// One layer's weights and cache. Qwen3.5 hybrids (norm weights with their 1 + w folded in at upload,
// cuda_hybrid_weights.h): a gated-attention layer uses qkv (q | gate | k | v rows), o, the norms and its
// cache; a DeltaNet layer (Params::delta_layers) uses in_proj ... conv_state instead of qkv, o and the cache.
struct LayerWeights {
  const uint16_t* qkv;      // [Q + 2KV, H] bf16: q, k, v rows stacked (cuda_weights.h); hybrid [2Q + 2KV, H]
  const uint16_t* o;        // [H, Q] bf16
  const uint16_t* gate_up;  // [2I, H] bf16, gate row i at 2i, up row i at 2i + 1
  const uint16_t* down;     // [H, I] bf16
  const float* input_norm;  // [H]
  const float* post_norm;   // [H]
  const float* q_norm;      // [D]
  const float* k_norm;      // [D]
  uint16_t* k_cache;        // this layer's bf16 [context, kv_heads, D], shared with the per-operator path
  uint16_t* v_cache;
  // Gated DeltaNet (kernels/gated_delta_net.cuh has the layouts).
  const uint16_t* in_proj;  // [CD + VD + 2NV, H] bf16: qkv | z | b | a (CD = 2 NK DK + NV DV, VD = NV DV)
  const uint16_t* conv;     // [CD, CONV_K] bf16 taps
  const float* A_log;       // [NV]
  const float* dt_bias;     // [NV]
  const float* gated_norm;  // [DV], plain weight
  const uint16_t* out;      // [H, VD] bf16
  float* state;             // [NV, DK, DV] fp32 recurrent state
  float* conv_state;        // [CONV_K - 1, CD] fp32, the last inputs oldest first
  // The one-stage MLP (Params::x_fixed) streams down transposed: row u holds intermediate unit u's
  // weights into all H outputs, so a CTA's gate/up units and its down rows are the same units.
  const uint16_t* down_t;   // [I, H] bf16, or null (the two-stage MLP reads down)
};

// The host's side of the token stream: pinned, mapped (cudaHostAllocMapped) memory the kernel writes
// while it runs and the host polls. The host sets every slot to -1 before a launch; the kernel's one
// 32-bit store of an id (>= 0) is both the data and its valid flag, so no fence (a PCIe round trip)
// orders anything on the token's critical path, and slots may land in any order.
struct Mailbox {
  volatile int32_t stop;      // the host sets 1 to ask the kernel to stop after the current token
  volatile int32_t finished;  // the kernel sets 1 when it will draw no more tokens
  volatile int32_t tokens[kLaunchTokenCap];  // -1: not drawn (yet)
};

// One drawn token's log-probabilities (logprob.cuh): log_softmax of the step's raw logits at the
// token, and its `n` most likely ids with theirs (value descending, lowest id first on ties). In mapped
// host memory for the megakernel, written before the token's mailbox slot (the slot is its valid flag).
struct LogprobRecord {
  float logprob;
  int32_t n;
  int32_t ids[kMaxLogprobTop];
  float logprobs[kMaxLogprobTop];
};

// The per-CTA halves of the logprob reduction (logprob.cuh), in device memory: each CTA's log-sum-exp
// part of its vocabulary slice and its best `top` raw logits.
struct LogprobParts {
  float* lse = nullptr;       // [ctas, 2]: (max, sum of exp(x - max)) over the slice
  float* cand_v = nullptr;    // [ctas, top] the slice's best raw logits (id order) ...
  int32_t* cand_i = nullptr;  //             ... and their ids
  int32_t* cand_n = nullptr;  // [ctas]      how many (min(top, rows))
};

struct Params {
  // Weights (read-only for the whole launch).
  const LayerWeights* layers;  // [L] (device memory)
  const uint16_t* embed;       // [V, H] bf16
  const uint16_t* lm_head;     // [V, H] bf16 (== embed when tied)
  const float* final_norm;     // [H]
  const float* inv_freq;       // [R/2] RoPE inverse frequencies (rope_inverse_frequencies; R = D for Qwen3)
  uint64_t delta_layers;       // bit l set: layer l is a Gated DeltaNet layer (hybrid configs only)
  int context;                 // rows of each layer's KV cache
  // Workspace written during the launch (every buffer written once per token: no reuse hazards
  // inside a token; across tokens the Step barrier orders them).
  float* x;           // [L + 1, H]  x[l] = residual entering layer l (x[0] unused: the embedding row)
  float* xmid;        // [L, H]      after the attention block
  float* qkv;         // [L, max(Q + 2KV, IN)] raw projections (DeltaNet: q, k, v after conv + SiLU)
  float* attn;        // [L, max(Q, VD)] merged attention output (written when the last split merges:
                      // merge_in_o_proj false), or the DeltaNet's o before its norm
  float* act;         // [L, I]      silu(gate) * up
  // Flagged vectors (MEGAQWEN_MK_VECTORS=flagged; null: off, the floats above and the counters): x,
  // xmid and act as 64-bit words that each hold a value and the epoch (t + 1) of the token that wrote
  // it (sync.cuh, flagged_word), zeroed before each launch. Their readers poll the words themselves
  // instead of waiting on ODone / MlpDone / DownDone, which then stay at 0: one L2 round trip per
  // edge instead of the release's store drain, the counter's poll and the data's load. x, xmid and
  // act above are then neither written nor read.
  uint64_t* x_words;     // [L + 1, H]
  uint64_t* xmid_words;  // [L, H]
  uint64_t* act_words;   // [L, I]
  // The same for qkv, the attention partials and the merged attention in the Qwen3 configs (null in
  // the hybrids, whose DeltaNet layers keep QkvReady and AttnReady): stage B polls its group's q / k /
  // v words instead of QkvReady, the mergers (stage C, or the last split) poll the partials, stage C
  // the merged words, so QkvReady and AttnReady stay at 0 (AttnTicket still counts the splits).
  uint64_t* qkv_words;         // [L, Q + 2KV]
  uint64_t* partial_o_words;   // [L, heads, S, D]
  uint64_t* partial_ml_words;  // [L, heads, S, 2]
  uint64_t* attn_words;        // [L, Q]
  // The one-stage MLP (MEGAQWEN_MK_MLP=one-stage; null: off, the two stages D and E): layer l's down
  // projection as a 64-bit fixed-point sum (fixed_sum.cuh), row l + 1 of the half for token t's
  // parity (Ctx::mlp_sum). Stage D adds every CTA's partial over its own intermediate units into all
  // H words with red.add (integer sums are exact in any order, so runs stay bit-identical), then
  // signals DownDone; the readers of x[l + 1] (stages A, C and the LM head) take xmid[l] + the sum in
  // fp32 (Ctx::residual). The half for parity 0 is zeroed before each launch; during token t every CTA
  // zeroes its share of the other half, for token t + 1 (Ctx::clear_next_mlp_sums). x above is then
  // neither written nor read, nor is act (the CTA keeps its units' act in shared memory), nor, with
  // flagged vectors, x_words.
  unsigned long long* x_fixed;  // [2, L + 1, H] (row 0 of each half unused: the embedding row)
  float* partial_o;   // [L, heads, S, D]
  float* partial_ml;  // [L, heads, S, 2]
  float* best_v;      // [ctas]      per-CTA best transformed logit
  int32_t* best_i;    // [ctas]      and its id
  uint32_t* counters; // CounterLayout::words()
  int32_t* tokens;    // [max_tokens] drawn tokens (device copy)
  Mailbox* mailbox;   // mapped host memory (device pointer)
  float* logits_out;  // optional [max_tokens, V]: raw logits of every step (tests); null: not written
  unsigned long long* timing;  // optional [ctas, kStageCount, kTimingSlots] (MEGAQWEN_MK_TIMING builds)
  // The run.
  int first_token;    // fed at step 0
  int pos0;           // its position
  int max_tokens;     // draws at most this many (1..kLaunchTokenCap); step t feeds position pos0 + t
  int splits;         // attention splits per kv head (1..kMaxSplits)
  int merge_splits;   // stage C merges the splits when at most this many are non-empty (0..kMaxSplits;
                      // 0: the last split always merges); merge_in_o_proj
  int vocab;
  int n_eos;
  int32_t eos[kMaxEos];
  float eps;
  float l2_eps;           // DeltaNet q / k l2 norm (cpu::kDeltaNetL2NormEps)
  float attn_scale_log2;  // log2(e) / sqrt(D)
  uint32_t ablate;        // kAblate* bits (0 in production)
  uint32_t probe;         // kProbe* bits: timing probes whose results are meaningless (0 in production)
  // Token selection (select.cuh). Every mode first applies the penalties (counts != null) and the
  // temperature to the raw logit, as the CPU Sampler. Then either
  //   top_k == 0: argmax: greedy (temperature 1, no gumbel) or argmax(l / T + Gumbel(seed, step0 + t, id));
  //   top_k  > 0: the top top_k values, softmax over them, top_p / min_p cuts, one draw keyed by
  //               (seed, step0 + t), as the per-operator path's filtered sampler;
  //   nucleus:    (top_k 0, gumbel off) top_p / min_p over all V values (kernels/nucleus.cuh), one
  //               draw keyed by (seed, step0 + t), as the per-operator path's nucleus sampler.
  float temperature;
  int gumbel;
  uint64_t seed, step0;
  int32_t* counts;    // [V] occurrences of each id in the history; the selecting CTA adds each drawn
                      // token. Null: no penalties.
  float repetition_penalty, presence_penalty, frequency_penalty;
  int top_k;          // 0 or 1..kMaxTopK (<= vocab)
  int nucleus;        // 1: nucleus mode (top_k 0, gumbel 0)
  float top_p, min_p;
  float* sel_vals;    // [V]           top_k > 0 or nucleus: the transformed logits of the step
  float* cand_v;      // [ctas, top_k] each CTA's top candidates (id order) ...
  int32_t* cand_i;    //               ... and their ids
  int32_t* cand_n;    // [ctas]        how many each CTA has (min(top_k, its rows))
  // Log-probabilities of every drawn token (logprob.cuh): with lp_records (null: off), each token's
  // record, with logprob_top (0..kMaxLogprobTop) alternatives, at lp_records[t].
  LogprobRecord* lp_records;  // [kLaunchTokenCap], mapped host memory (device pointer), or null
  int logprob_top;
  float* lp_raw;              // [V] the step's raw logits, when logits_out is null
  LogprobParts lp_parts;
};

// The token selection alone (select_test_kernel, for tests): the inputs a step's LM head would have.
struct SelectTestArgs {
  const float* logits = nullptr;  // [V] raw logits
  int V = 0;
  float temperature = 1.0f;
  bool gumbel = false;
  uint64_t seed = 0, step = 0;
  const int32_t* counts = nullptr;  // [V] or null
  float repetition_penalty = 1.0f, presence_penalty = 0.0f, frequency_penalty = 0.0f;
  int top_k = 0;
  bool nucleus = false;  // top_k 0, gumbel off: top-p / min-p over all V
  int member_capacity = kSelectTestMembers;  // nucleus: shared-memory members (0: search all V every pass)
  float top_p = 1.0f, min_p = 0.0f;
  // scratch and result
  float* best_v = nullptr;
  int32_t* best_i = nullptr;
  float* sel_vals = nullptr;
  float* cand_v = nullptr;
  int32_t* cand_i = nullptr;
  int32_t* cand_n = nullptr;
  uint32_t* ticket = nullptr;
  int32_t* out = nullptr;
};

// The logprob reduction alone (token_logprobs_kernel): the per-operator path's device logprobs, and
// the tests of the megakernel's primitives.
struct LogprobArgs {
  const float* logits = nullptr;  // [V] raw logits
  int V = 0;
  const int32_t* token = nullptr;  // [1] the id to score (device memory: the sampler's output)
  int top = 0;                     // 0..kMaxLogprobTop
  LogprobParts parts;              // scratch: [blocks] and [blocks, top]
  uint32_t* ticket = nullptr;      // one uint32, zeroed before each launch
  LogprobRecord* out = nullptr;    // [1]
};

}  // namespace megaqwen::cuda::mk
