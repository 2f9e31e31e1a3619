#include "megaqwen/engine/benchmark.h"

#include <algorithm>
#include <chrono>
#include <cstdint>

#include "megaqwen/util/error.h"

namespace megaqwen {

namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Token ids that look like text to the model: spread over the vocabulary, deterministic.
std::vector<int32_t> bench_tokens(int n, int vocab) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  uint32_t s = 2463534242u;
  for (auto& id : ids) {
    s ^= s << 13, s ^= s >> 17, s ^= s << 5;
    id = int32_t(s % uint32_t(std::min(vocab, 150000)));
  }
  return ids;
}

BenchResult summarize(std::string test, bool decode, int tokens, int depth, std::vector<double> seconds) {
  std::sort(seconds.begin(), seconds.end());
  BenchResult r;
  r.test = std::move(test);
  r.is_decode = decode;
  r.tokens = tokens;
  r.depth = depth;
  r.median_seconds = seconds[seconds.size() / 2];
  r.median_tok_s = tokens / r.median_seconds;
  r.min_tok_s = tokens / seconds.back();
  r.max_tok_s = tokens / seconds.front();
  return r;
}

}  // namespace

std::vector<BenchResult> run_benchmark(Engine& engine, const BenchPlan& plan, double weight_bytes) {
  if (plan.repeats < 1) fail("repeats must be at least 1");
  if (plan.logprobs < kNoLogprobs || plan.logprobs > kMaxTopLogprobs)
    fail("logprobs must be 0 .. {} alternatives, got {}", kMaxTopLogprobs, plan.logprobs);
  const int vocab = engine.config().vocab_size;
  std::vector<BenchResult> results;

  for (int n : plan.prompt_lengths) {
    if (n < 1 || n > engine.context_size()) fail("prompt length {} does not fit the context ({})", n, engine.context_size());
    const auto ids = bench_tokens(n, vocab);
    std::vector<double> seconds;
    for (int r = 0; r < plan.warmup + plan.repeats; ++r) {
      engine.truncate(0);
      const double t0 = now_seconds();
      engine.prefill(ids);
      if (r >= plan.warmup) seconds.push_back(now_seconds() - t0);
    }
    results.push_back(summarize("pp" + std::to_string(n), false, n, 0, seconds));
  }

  for (int depth : plan.depths) {
    const int n = plan.decode_tokens;
    if (depth < 1 || int64_t(depth) + n > engine.context_size())
      fail("decode at depth {} for {} tokens does not fit the context ({}); raise --ctx", depth, n, engine.context_size());
    const auto ids = bench_tokens(n + 1, vocab);
    // An engine that samples on its device is timed as generation runs it: decode_only, then a draw
    // whose id is copied back (the logits stay on the device). Otherwise decode() and the host Sampler.
    const SamplingParams& sampling = plan.sampling;
    Sampler host_sampler(sampling);
    const std::vector<int32_t> no_history;
    bool device_sampling = false;
    std::vector<double> seconds;
    double joules = 0, energy_seconds = 0;
    bool have_energy = bool(plan.energy_joules);
    for (int r = 0; r < plan.warmup + plan.repeats; ++r) {
      engine.truncate(0);
      engine.fill_cache_with_noise(depth - 1);  // the cache as if `depth - 1` tokens came before
      engine.decode(ids[0]);                    // position depth: not timed (first-touch effects)
      if (r == 0) device_sampling = engine.sample_on_device(sampling, no_history, plan.logprobs).has_value();
      const std::optional<double> e0 = have_energy ? plan.energy_joules() : std::nullopt;
      const double t0 = now_seconds();
      // An engine that runs whole stretches of steps on its device (the CUDA megakernel) is timed that
      // way: n steps in one call, as Generator runs them (tokens stream back as they appear). The fed
      // tokens are then the drawn ones; elsewhere the fixed ids (the cost per step is the same).
      const std::optional<int> run =
          engine.generate_on_device(ids[1], n, {}, sampling, no_history, plan.logprobs,
                                    [](const DeviceDraw&) { return true; });
      if (run && *run != n) fail("the device run drew {} tokens instead of {}", *run, n);
      for (int i = 1; i <= n && !run; ++i) {
        if (device_sampling) {
          engine.decode_only(ids[size_t(i)]);
          (void)engine.sample_on_device(sampling, no_history, plan.logprobs);
        } else {
          auto logits = engine.decode(ids[size_t(i)]);
          if (plan.logprobs >= 0) (void)token_logprob(logits, ids[size_t(i)], plan.logprobs);
          if (!sampling.greedy()) {
            std::vector<float> l(logits.begin(), logits.end());
            (void)host_sampler.sample(l, no_history);
          }
        }
      }
      const double elapsed = now_seconds() - t0;
      const std::optional<double> e1 = have_energy ? plan.energy_joules() : std::nullopt;
      if (r >= plan.warmup) {
        seconds.push_back(elapsed);
        if (e0 && e1) {
          joules += *e1 - *e0;
          energy_seconds += elapsed;
        } else {
          have_energy = false;
        }
      }
    }
    BenchResult res = summarize("tg" + std::to_string(n) + "@d" + std::to_string(depth), true, n, depth, seconds);
    if (have_energy && joules > 0) {
      res.joules = joules;
      res.average_watts = joules / energy_seconds;
      res.tokens_per_joule = double(n) * double(plan.repeats) / joules;
    }
    // Mean cached tokens read per step over the run: depth+1 .. depth+n.
    const double mean_cached = depth + (n + 1) / 2.0;
    res.bytes_per_token = weight_bytes + mean_cached * double(engine.kv_bytes_per_token()) +
                          double(engine.state_bytes_per_step());
    res.achieved_gb_s = res.bytes_per_token * res.median_tok_s / 1e9;
    results.push_back(res);
  }
  engine.truncate(0);
  return results;
}

}  // namespace megaqwen
