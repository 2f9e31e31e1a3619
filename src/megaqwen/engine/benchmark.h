// The decode and prefill benchmark behind `megaqwen bench`, for any engine: warm-up, repeats,
// median and spread, and achieved bandwidth (weight bytes + KV cache bytes read per token).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "megaqwen/engine/engine.h"
#include "megaqwen/sampling/sampler.h"

namespace megaqwen {

struct BenchPlan {
  std::vector<int> prompt_lengths = {128};  // prefill tests
  std::vector<int> depths = {1};            // decode tests: cache position the decode starts at
  int decode_tokens = 32;                   // tokens per decode measurement
  int repeats = 3;
  int warmup = 1;
  // How decode steps draw their tokens (greedy by default: the figure peers are compared on). Other
  // modes measure what token selection costs (e.g. the megakernel's in-kernel top-k).
  SamplingParams sampling = [] {
    SamplingParams g;
    g.temperature = 0;
    return g;
  }();
  // Decode draws also scored (0..kMaxTopLogprobs alternatives; kNoLogprobs: not): what a logprob
  // request costs (on a GPU the scoring runs where the token is drawn, in the megakernel too).
  int logprobs = kNoLogprobs;
  // Optional: the device's cumulative energy counter in joules (NVML on a GPU). When set, decode
  // tests also report average power and tokens per joule over their timed repeats.
  std::function<std::optional<double>()> energy_joules;
};

struct BenchResult {
  std::string test;       // "pp128" (prefill 128 tokens) or "tg32@d1024" (decode 32 at depth 1024)
  bool is_decode = false;
  int tokens = 0, depth = 0;
  double median_tok_s = 0, min_tok_s = 0, max_tok_s = 0;
  double median_seconds = 0;           // per repeat
  double bytes_per_token = 0;          // decode: weights + KV cache read + recurrent state read and written,
                                       // per token (mean over the run)
  double achieved_gb_s = 0;            // decode: bytes_per_token x median tok/s
  double joules = 0;                   // decode with an energy counter: energy over the timed repeats
  double average_watts = 0, tokens_per_joule = 0;  // from `joules` (0 when not measured)
};

// `weight_bytes_per_token`: weight bytes one decode step streams (Qwen3Weights::bytes_per_token).
std::vector<BenchResult> run_benchmark(Engine& engine, const BenchPlan& plan, double weight_bytes_per_token);

}  // namespace megaqwen
