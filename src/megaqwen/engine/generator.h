// Generator: runs generation requests on one engine and remembers which tokens its KV cache holds,
// so a prompt that extends the previous conversation only prefills the new part (chat turns,
// the server's prefix reuse). Stops on an eos id, the token budget, a stop string, or the caller.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "megaqwen/engine/engine.h"
#include "megaqwen/sampling/logprobs.h"
#include "megaqwen/sampling/output_constraint.h"
#include "megaqwen/sampling/sampler.h"

namespace megaqwen {

enum class FinishReason { Eos, Length, StopString, Cancelled, ContextFull };
const char* finish_reason_name(FinishReason reason);  // "stop", "length", ...

struct GenerationRequest {
  std::vector<int32_t> prompt;             // the whole prompt, including any earlier turns
  int max_tokens = 256;                    // budget of generated tokens
  SamplingParams sampling;
  std::vector<int32_t> eos_ids;            // generation stops on any of these (not emitted)
  std::vector<int32_t> end_ids;            // generation stops after any of these (emitted; finish Eos)
  std::vector<std::string> stop_strings;   // stops when the output text contains one (not emitted)
  // The raw bytes of a token (Tokenizer::token_bytes); needed for text and stop strings.
  std::function<std::string_view(int32_t)> token_bytes;
  // Log-probabilities (sampling/logprobs.h). nullopt: none. Else every generated token's, with this
  // many alternatives (0 .. kMaxTopLogprobs), scored where the engine draws (the CUDA engines on the
  // device, in the megakernel too; otherwise from the host logits).
  std::optional<int> logprobs;
  // Also score the prompt: result.prompt_logprobs for prompt[1 ..], with `logprobs` alternatives (0
  // when nullopt). The whole prompt is prefilled again (a cached prefix has no logits to give).
  bool prompt_logprobs = false;
  // Structured output (JsonConstraint): masks every draw and follows the tokens drawn. It needs the
  // logits on the host, so decode runs per step there (no device sampling, no megakernel runs).
  // Log-probabilities still score the unmasked logits.
  std::shared_ptr<OutputConstraint> constraint;
  // Added to these tokens' logits before every draw (OpenAI's logit_bias), ahead of the penalties
  // and the constraint. Drawn on the host like a constraint; log-probabilities score the logits
  // without it.
  std::vector<LogitBias> logit_bias;
};

struct GenerationResult {
  std::vector<int32_t> tokens;   // generated, excluding a final eos
  std::string text;              // output text up to any stop string (when token_bytes was given)
  FinishReason finish = FinishReason::Length;
  int prompt_tokens = 0;
  int reused_tokens = 0;         // prompt tokens already in the cache, not prefilled again
  double prefill_seconds = 0, decode_seconds = 0;
  double first_token_seconds = 0;  // request start to the first generated token
  std::vector<TokenLogprob> logprobs;         // one per element of `tokens`, when requested
  std::vector<TokenLogprob> prompt_logprobs;  // prompt[1 ..] (the first token has no context), when requested
};

// Called per generated token with the text it completes (whole UTF-8 characters, held back while it
// could still be the start of a stop string). Return false to cancel. After the last token, text
// still held back (a partial character or a possible stop-string start that never completed) comes
// in one more call with token -1.
using TokenCallback = std::function<bool(int32_t token, std::string_view text)>;
// With request.prompt_logprobs: called per scored prompt token (of_prompt true), as the prefill
// scores them. With request.logprobs: called per generated token (the eos excepted), just before its
// TokenCallback.
using LogprobCallback = std::function<void(const TokenLogprob&, bool of_prompt)>;

// A sequence set aside (PromptCache): its tokens and the engine's host copy of the cache that held them.
struct SavedSequence {
  std::vector<int32_t> tokens;
  std::shared_ptr<const EngineState> state;
};

class Generator {
 public:
  explicit Generator(Engine& engine) : engine_(engine) {}

  // Reuses the longest cached prefix of request.prompt (always prefilling at least its last token),
  // prefills the rest, then samples until a stop condition.
  GenerationResult run(const GenerationRequest& request, const TokenCallback& on_token = {},
                       const LogprobCallback& on_logprob = {});
  // The tokens the engine's KV cache holds now, in order.
  const std::vector<int32_t>& cached_tokens() const { return cached_; }
  void reset();  // empties the cache
  // The sequence in the cache now, copied to host memory (Engine::save_state); nullopt when the
  // engine cannot copy its cache or the cache holds nothing.
  std::optional<SavedSequence> save();
  // The cache holds `saved` again, as if its tokens had just been prefilled.
  void restore(const SavedSequence& saved);
  Engine& engine() { return engine_; }
  const Engine& engine() const { return engine_; }

 private:
  std::vector<float> prefill_scoring(std::span<const int32_t> tokens, int top, std::vector<TokenLogprob>& scored,
                                     const LogprobCallback& on_logprob);

  Engine& engine_;
  std::vector<int32_t> cached_;  // the tokens in the engine's cache, in order
};

}  // namespace megaqwen
