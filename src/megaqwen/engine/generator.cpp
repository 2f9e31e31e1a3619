#include "megaqwen/engine/generator.h"

#include <algorithm>
#include <chrono>

#include "megaqwen/engine/scoring.h"
#include "megaqwen/util/error.h"

namespace megaqwen {

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Length of the longest prefix of `text` made of whole UTF-8 characters (a truncated character at
// the end is held back; invalid bytes are passed through so nothing stalls forever).
size_t complete_utf8_prefix(std::string_view text) {
  size_t n = text.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    unsigned char c = static_cast<unsigned char>(text[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: look further back
    size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return need > back ? n - back : n;
  }
  return n;
}

}  // namespace

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::Eos: return "stop";
    case FinishReason::StopString: return "stop";
    case FinishReason::Length: return "length";
    case FinishReason::Cancelled: return "cancelled";
    case FinishReason::ContextFull: return "context_full";
  }
  return "?";
}

void Generator::reset() {
  engine_.truncate(0);
  cached_.clear();
}

std::optional<SavedSequence> Generator::save() {
  if (cached_.empty() || int(cached_.size()) != engine_.position()) return std::nullopt;
  std::shared_ptr<const EngineState> state = engine_.save_state();
  if (!state) return std::nullopt;
  return SavedSequence{cached_, std::move(state)};
}

void Generator::restore(const SavedSequence& saved) {
  if (!saved.state || saved.state->position() != int(saved.tokens.size()))
    fail("a saved sequence of {} tokens has no matching cache copy", saved.tokens.size());
  engine_.restore_state(*saved.state);
  cached_ = saved.tokens;
}

// Prefills `tokens` (the cache is empty), scoring each token by the logits of the position before
// it; returns the last position's logits (those that predict the first new token).
std::vector<float> Generator::prefill_scoring(std::span<const int32_t> tokens, int top,
                                              std::vector<TokenLogprob>& scored, const LogprobCallback& on_logprob) {
  std::vector<float> last;
  prefill_scored(engine_, tokens, [&](size_t i, std::span<const float> row) {
    cached_.push_back(tokens[i]);
    if (i + 1 < tokens.size()) {
      scored.push_back(token_logprob(row, tokens[i + 1], top));
      if (on_logprob) on_logprob(scored.back(), true);
    } else {
      last.assign(row.begin(), row.end());
    }
  });
  return last;
}

GenerationResult Generator::run(const GenerationRequest& req, const TokenCallback& on_token,
                                const LogprobCallback& on_logprob) {
  const auto start = std::chrono::steady_clock::now();
  if (req.prompt.empty()) fail("the prompt is empty");
  if (req.max_tokens < 0) fail("max_tokens must be >= 0, got {}", req.max_tokens);
  if (!req.stop_strings.empty() && !req.token_bytes) fail("stop strings need the tokenizer");
  for (const auto& s : req.stop_strings)
    if (s.empty()) fail("stop strings must not be empty");
  if (int64_t(req.prompt.size()) > engine_.context_size())
    fail("the prompt has {} tokens but the context holds {}", req.prompt.size(), engine_.context_size());
  if (req.logprobs && (*req.logprobs < 0 || *req.logprobs > kMaxTopLogprobs))
    fail("logprobs asks for {} alternatives; 0 .. {} are possible", *req.logprobs, kMaxTopLogprobs);
  Sampler sampler(req.sampling);
  const int top = req.logprobs.value_or(0);

  GenerationResult result;
  result.prompt_tokens = int(req.prompt.size());

  // Reuse the longest cached prefix, but always prefill at least one token to get fresh logits.
  // Scoring the prompt needs the logits of every position: nothing is reused then.
  size_t common = 0;
  const size_t limit = req.prompt_logprobs ? 0 : std::min(cached_.size(), req.prompt.size() - 1);
  while (common < limit && cached_[common] == req.prompt[common]) ++common;
  engine_.truncate(int(common));
  cached_.resize(common);
  result.reused_tokens = int(common);

  std::span<const int32_t> fresh(req.prompt.data() + common, req.prompt.size() - common);
  std::vector<float> logits;
  if (req.prompt_logprobs) {
    logits = prefill_scoring(fresh, top, result.prompt_logprobs, on_logprob);
  } else {
    auto out = engine_.prefill(fresh);
    logits.assign(out.begin(), out.end());
    cached_.insert(cached_.end(), fresh.begin(), fresh.end());
  }
  result.prefill_seconds = seconds_since(start);

  // Logprobs score the raw logits; the sampler rewrites its copy in place (penalties, temperature).
  std::vector<float> raw_logits;
  // Penalties see the prompt and the output, as transformers does.
  std::vector<int32_t> history = req.prompt;
  std::string pending;  // generated text not yet handed to the callback
  size_t longest_stop = 0;
  for (const auto& s : req.stop_strings) longest_stop = std::max(longest_stop, s.size());

  const auto decode_start = std::chrono::steady_clock::now();
  result.finish = FinishReason::Length;
  int produced = 0;
  // Takes one sampled token: eos, output text, stop strings, the callback, the budget. Returns true
  // when generation goes on (the token is then appended to the cache and the next one sampled).
  // `scored`: the token's log-probabilities when the device drew it with them (else, with
  // req.logprobs, they come from the host logits).
  auto accept = [&](int32_t token, const std::optional<TokenLogprob>& scored) -> bool {
    if (produced == 0) result.first_token_seconds = seconds_since(start);
    if (std::find(req.eos_ids.begin(), req.eos_ids.end(), token) != req.eos_ids.end()) {
      result.finish = FinishReason::Eos;
      return false;
    }
    result.tokens.push_back(token);
    history.push_back(token);
    ++produced;
    if (req.logprobs) {
      result.logprobs.push_back(scored ? *scored : token_logprob(raw_logits, token, top));
      if (on_logprob) on_logprob(result.logprobs.back(), false);
    }
    std::string_view emit;
    bool stopped = false;
    if (req.token_bytes) {
      pending += req.token_bytes(token);
      // A stop string ends the output just before it.
      size_t cut = std::string::npos;
      for (const auto& s : req.stop_strings) cut = std::min(cut, pending.find(s));
      if (cut != std::string::npos) {
        pending.resize(cut);
        stopped = true;
      }
      // Hold back a tail that could still grow into a stop string, and any partial character.
      size_t ready = stopped ? pending.size() : pending.size() - std::min(pending.size(), longest_stop ? longest_stop - 1 : 0);
      ready = complete_utf8_prefix(std::string_view(pending).substr(0, ready));
      result.text += pending.substr(0, ready);
      emit = std::string_view(result.text).substr(result.text.size() - ready);
      pending.erase(0, ready);
    }
    if (on_token && !on_token(token, emit)) {
      result.finish = FinishReason::Cancelled;
      return false;
    }
    if (stopped) {
      result.finish = FinishReason::StopString;
      return false;
    }
    if (std::find(req.end_ids.begin(), req.end_ids.end(), token) != req.end_ids.end()) {
      result.finish = FinishReason::Eos;
      return false;
    }
    return produced < req.max_tokens;  // no need to run the model for a token never sampled
  };

  // An engine that samples on its device (Engine::sample_on_device) keeps the logits there: then the
  // per-token loop never copies them to the host (decode_only instead of decode). An engine that runs
  // whole stretches of decode steps on its device (Engine::generate_on_device: the CUDA megakernel)
  // gets every step after the first in one call, with accept() called per token as it arrives. Both
  // score the tokens there when logprobs are asked for; an engine that cannot (nullopt) gets the
  // logits copied to the host and scored here.
  const int device_logprobs = req.logprobs ? top : kNoLogprobs;
  OutputConstraint* constraint = req.constraint.get();
  const bool host_draws = constraint != nullptr || !req.logit_bias.empty();
  bool device_sampling = false, device_runs = !host_draws;
  auto host_sample = [&]() -> int32_t {
    if (req.logprobs) raw_logits = logits;
    for (const LogitBias& b : req.logit_bias)
      if (b.token >= 0 && size_t(b.token) < logits.size()) logits[size_t(b.token)] += b.bias;
    if (constraint) constraint->mask(logits);
    const int32_t drawn = sampler.sample(logits, history);
    if (constraint) constraint->accept(drawn);
    return drawn;
  };
  // The next token and, when the device drew it with them, its log-probabilities.
  auto sample = [&]() -> DeviceDraw {
    std::optional<DeviceDraw> on_device =
        device_sampling ? engine_.sample_on_device(req.sampling, history, device_logprobs) : std::nullopt;
    return on_device ? std::move(*on_device) : DeviceDraw{host_sample(), std::nullopt};
  };
  int32_t token = 0;
  bool go = req.max_tokens > 0;
  if (go) {
    std::optional<DeviceDraw> first =
        host_draws ? std::nullopt : engine_.sample_on_device(req.sampling, history, device_logprobs);
    device_sampling = first.has_value();
    if (!first) first = DeviceDraw{host_sample(), std::nullopt};
    token = first->token;
    go = accept(token, first->logprob);
  }
  while (go) {
    if (engine_.position() >= engine_.context_size()) {
      result.finish = FinishReason::ContextFull;
      break;
    }
    if (device_runs) {
      const int room = engine_.context_size() - engine_.position();
      int32_t fed = token;
      const std::optional<int> drawn = engine_.generate_on_device(
          token, std::min(req.max_tokens - produced, room), req.eos_ids, req.sampling, history, device_logprobs,
          [&](const DeviceDraw& next) {
            cached_.push_back(fed);  // the engine appended the previous token before drawing this one
            fed = next.token;
            token = next.token;
            go = accept(next.token, next.logprob);
            return go;
          });
      // go is still true only when the context ran out: checked above. (A run that drew nothing
      // appended nothing: the per-token steps below take over rather than calling it again forever.)
      if (drawn && *drawn > 0) continue;
      device_runs = false;  // not for these params: per-token steps from here on
    }
    if (device_sampling) {
      engine_.decode_only(token);
    } else {
      auto out = engine_.decode(token);
      logits.assign(out.begin(), out.end());
    }
    cached_.push_back(token);
    const DeviceDraw next = sample();
    token = next.token;
    go = accept(token, next.logprob);
  }
  if (result.finish != FinishReason::StopString && !pending.empty()) {
    result.text += pending;
    if (on_token) on_token(-1, std::string_view(result.text).substr(result.text.size() - pending.size()));
  }
  result.decode_seconds = seconds_since(decode_start);
  return result;
}

}  // namespace megaqwen
