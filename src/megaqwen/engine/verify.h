// verify: one engine checked against the CPU reference on the same model and tokens, as a user can run
// it on their own machine (`megaqwen verify`). Three phases, each judged position by position:
//
//   prefill     the candidate's batched prefill logits over the first tokens of the sequence
//   decode      the candidate's decode step, one token at a time, over the rest of the sequence
//   generation  greedy tokens drawn by the candidate through Generator (the path `generate` takes:
//               the megakernel, or device sampling, or host argmax), each judged against the
//               reference's logits at that point of the candidate's own sequence, so one near-tie
//               flip does not make every later position disagree
//
// The reference sees every sequence in one batched prefill (CpuEngine::prefill_all_logits, the path
// the transformers parity tests hold to ~3e-6). Per position (p = softmax of the reference logits,
// q = of the candidate's): relative error max|cand - ref| / max|ref|, KL(p || q) in nats, and whether
// the two top-1 ids agree. A disagreement is a near-tie, counted as agreement, when the reference
// logits of the two ids differ by no more than the phase's tie tolerance: twice the median over the
// phase's positions of max|cand - ref| (each of the two logits may be off by the typical error), but
// at most twice the error the bounds accept (rel_error_max x the median max|ref|), so that a broken
// engine's large errors do not make every flip a "near-tie".
// The median, not the position's own error: a flip always lies within twice its own position's
// error, so that rule could never fail; against the typical error, a position whose error is out of
// line with the rest and flips a clear winner is a mismatch, while the uniform rounding of a bf16 KV
// cache flips only true near-ties. Generated tokens (no candidate logits: the megakernel hands over
// ids only) are near-ties when their reference logit is within the decode phase's tolerance of the
// top-1 (the prefill phase's when nothing was decoded).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "megaqwen/engine/engine.h"

namespace megaqwen {

// The verdict's bounds, the same as the GPU tests' and tools/verify_hf.py's: a bf16 KV cache moves
// logits by ~1e-3 relative (KL ~1e-5), while a structural bug (RoPE pairing, mask, kv head, norm)
// moves them by 1e-1 or more (KL 0.1-1) on random and real weights alike.
struct VerifyThresholds {
  double rel_error_max = 2e-2;  // worst position of the prefill and decode phases
  double kl_mean_max = 1e-3;    // mean over the prefill and decode positions
  double kl_max_max = 2e-2;     // worst position
  double top1_min = 0.99;       // (agreements + near-ties) / positions, in every phase
};

struct LogitComparison {
  double rel_error = 0;  // max|cand - ref| / max|ref|
  double max_abs = 0;    // max|cand - ref|
  double ref_scale = 0;  // max|ref|
  double kl = 0;         // KL(softmax(ref) || softmax(cand)), nats
  int32_t ref_top1 = 0, cand_top1 = 0;
  double ref_gap = 0;    // ref[ref_top1] - ref[cand_top1] (0 when they agree)
  bool finite = true;    // every candidate logit is finite
};
// Compares one position's logits (same length, non-empty). Lowest id wins a top-1 tie, as in Sampler.
LogitComparison compare_logits(std::span<const float> reference, std::span<const float> candidate);

struct PhaseResult {
  std::string name;
  int positions = 0, agree = 0, near_ties = 0, non_finite = 0;
  double worst_rel_error = 0, worst_abs = 0, mean_kl = 0, max_kl = 0;
  double tie_tolerance = 0;  // near-tie bound on the reference's logit gap (absolute)
  int worst_position = -1;  // sequence position of worst_rel_error
  // Disagreements that are not near-ties, as "position P: reference top-1 A, candidate B, gap G".
  std::vector<std::string> mismatches;
  double top1_rate() const { return positions ? double(agree + near_ties) / positions : 1.0; }
};

// One phase judged from its positions' comparisons (compare_logits; the first is sequence position
// first_position): the tie tolerance from all of them, then each position. verify_engine's prefill
// and decode phases; the GPU tests judge their own logit rows with it.
PhaseResult judge_phase(std::string name, std::span<const LogitComparison> compared, int first_position,
                        const VerifyThresholds& thresholds = {});

struct VerifyOptions {
  std::vector<int32_t> tokens;  // the sequence: prefill_tokens of them prefilled, the rest decoded
  int prefill_tokens = 0;       // >= 1, <= tokens.size()
  int generate_tokens = 0;      // greedy tokens drawn after the sequence (0: no generation phase)
  VerifyThresholds thresholds;
};

struct VerifyReport {
  std::string reference_device, candidate_device;
  std::vector<PhaseResult> phases;        // prefill, decode (when any), generation (when any)
  std::vector<int32_t> generated;         // the candidate's greedy tokens
  std::vector<std::string> failures;      // empty: the candidate passed
  bool passed() const { return failures.empty(); }
};

// Runs the three phases. Both engines are reset (truncate(0)) first and left holding the sequence;
// each needs a context of tokens.size() + generate_tokens. Throws Error on bad options.
VerifyReport verify_engine(Engine& reference, Engine& candidate, const VerifyOptions& options);

}  // namespace megaqwen
