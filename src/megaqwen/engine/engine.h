// Engine: the one interface over every way of running a model (the CPU reference today, the CUDA
// engine and the megakernel later). Generation, chat, bench and the server talk only to this.
//
// An engine owns one sequence: a KV cache holding `position()` tokens. prefill() appends a batch of
// tokens, decode() appends one; both return the logits that predict the token after the last one.
// truncate(n) rolls the cache back to its first n tokens (chat turns, prompt reuse).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "megaqwen/engine/engine_state.h"
#include "megaqwen/engine/state_tensors.h"
#include "megaqwen/model/config.h"
#include "megaqwen/sampling/logprobs.h"
#include "megaqwen/sampling/sampler.h"

namespace megaqwen {

// A token drawn on the device (Engine::sample_on_device, generate_on_device), with its
// log-probabilities (log_softmax of the raw logits, as token_logprob() computes them on the host, to
// float rounding) when the call asked for them.
struct DeviceDraw {
  int32_t token = 0;
  std::optional<TokenLogprob> logprob;
};
// Called per drawn token; false stops the run.
using DrawSink = std::function<bool(const DeviceDraw&)>;
// The `logprobs` argument of the device calls: none.
inline constexpr int kNoLogprobs = -1;

class Engine {
 public:
  virtual ~Engine() = default;

  virtual const ModelConfig& config() const = 0;
  virtual std::string device_name() const = 0;  // e.g. "cpu (2 threads)"
  virtual int context_size() const = 0;         // KV cache capacity in tokens
  virtual int position() const = 0;             // tokens now in the cache

  // Appends `tokens` to the cache and returns the logits after the last of them (vocab_size floats,
  // valid until the next call). Throws Error if a token id is out of range or the context overflows.
  virtual std::span<const float> prefill(std::span<const int32_t> tokens) = 0;
  // As prefill, but writes the logits of every appended position: out is [tokens.size(), vocab].
  virtual void prefill_all_logits(std::span<const int32_t> tokens, std::vector<float>& out) = 0;
  // One token: the decode step.
  virtual std::span<const float> decode(int32_t token) = 0;
  // Keeps the first n tokens of the cache (n <= position()).
  virtual void truncate(int n) = 0;
  // Benchmarks only: fills the cache up to `n` tokens with deterministic noise instead of a real
  // prefill, so decode speed at a deep position can be measured without a long prompt.
  virtual void fill_cache_with_noise(int n) = 0;
  // Bytes of KV cache one decode step reads per cached token (for achieved-bandwidth figures).
  virtual uint64_t kv_bytes_per_token() const = 0;
  // Bytes of fixed-size recurrent state one decode step reads and writes back (Qwen3.5's DeltaNet
  // states and conv windows), whatever the position; 0 for a pure KV cache.
  virtual uint64_t state_bytes_per_step() const { return 0; }

  // Optional: a copy of the sequence in the cache (engine_state.h), for the server's prompt cache;
  // nullptr where this engine cannot make one. The cache is left as it was.
  virtual std::unique_ptr<EngineState> save_state() { return nullptr; }
  // Where save_state() keeps its copies, and how much of that memory is free now (nullopt: unknown).
  virtual StateMemory state_memory() const { return StateMemory::Host; }
  virtual std::optional<uint64_t> state_memory_available() const;
  // Puts a saved sequence back: position() becomes state.position() and the cache holds what it held
  // then, so decoding goes on exactly as it would have. Throws Error, leaving the engine unchanged, for
  // a state of another kind of engine or another model, or one longer than the context.
  virtual void restore_state(const EngineState& state);

  // Optional: saved sequences as files (state_file.h). state_format() names the layout of
  // state_tensors() ("" where this engine writes none); a file is read back only by an engine of the
  // same format, over the same weights.
  virtual std::string state_format() const { return {}; }
  // One of this engine's saved states as named host tensors (a device copy comes over to the host).
  virtual std::vector<StateTensor> state_tensors(const EngineState& state) const;
  // The inverse: the state of a sequence of `tokens` from tensors named and shaped as state_tensors()
  // writes them (checked by `source`, so a misshapen one fails by name). Restore it with restore_state().
  virtual std::unique_ptr<EngineState> state_from_tensors(std::span<const int32_t> tokens,
                                                          const StateTensorSource& source) const;

  // Optional: sampling where the logits are (the CUDA engine), so only the token id crosses to the
  // host. sample_on_device() draws from the logits of the latest prefill / decode / decode_only with
  // `params`; `history` holds the tokens the penalties look at (prompt and generated, as for Sampler),
  // and its length keys the random draw (same seed + same history = same token). nullopt: this engine
  // does not sample on its device, or not with these params (the same for every call with them); use
  // Sampler on the returned logits. The draws follow Sampler's
  // rules (penalties, temperature, top-k, top-p, min-p; greedy = argmax, lowest id on ties) but not
  // its random stream, so only greedy runs are token-identical across engines. `logprobs` (0 ..
  // kMaxTopLogprobs; kNoLogprobs for none) also scores the drawn token with that many alternatives;
  // an engine that cannot returns nullopt for it.
  virtual std::optional<DeviceDraw> sample_on_device(const SamplingParams& params, std::span<const int32_t> history,
                                                     int logprobs) {
    (void)params, (void)history, (void)logprobs;
    return std::nullopt;
  }
  // Appends one token like decode() without handing the logits to the host: for callers that sample
  // with sample_on_device(). Engines without device sampling just decode.
  virtual void decode_only(int32_t token) { decode(token); }
  // Optional: many decode steps in one go on the device (the CUDA megakernel). Appends `token`, draws
  // the next token from its logits with `params` as sample_on_device would with `history` (the tokens
  // the penalties count, `token` included; its length keys the first draw, step + 1 the next, ...),
  // hands it to on_draw as soon as it exists (scored as sample_on_device scores with `logprobs`),
  // appends it and goes on (each drawn token joins the history), until on_draw returns false, a
  // drawn token is in `eos_ids`, or `max_tokens` were drawn.
  // `history` is read before the first on_draw call (the caller may grow it from the callback). The
  // last drawn token is never appended (as Generator never decodes a token it will not sample after).
  // The caller keeps the run inside the context (position() + max_tokens <= context_size()).
  // Returns the number of tokens drawn (position() grew by exactly that), or nullopt when this engine
  // or these params have no such path (nothing was done: use decode_only + sample_on_device).
  // Optional: where decode time went, by stage, as text (the megakernel's timing slots, in builds that
  // compile them in: cmake -DMEGAQWEN_MK_TIMING=ON); empty when this build or engine does not measure it.
  virtual std::string decode_profile() const { return {}; }
  virtual std::optional<int> generate_on_device(int32_t token, int max_tokens, std::span<const int32_t> eos_ids,
                                                const SamplingParams& params, std::span<const int32_t> history,
                                                int logprobs, const DrawSink& on_draw) {
    (void)token, (void)max_tokens, (void)eos_ids, (void)params, (void)history, (void)logprobs, (void)on_draw;
    return std::nullopt;
  }

 protected:
  // For implementations, before appending `tokens`: every id within the vocabulary and room for all
  // of them in the cache; throws Error naming the problem, leaving the engine unchanged.
  void check_new_tokens(std::span<const int32_t> tokens) const;
  // For restore_state(): `state` as this engine's own kind S, made from `model` and no longer than
  // the context; throws Error naming the mismatch otherwise.
  template <class S>
  const S& restorable_state(const EngineState& state, const Model* model) const {
    check_restorable(state, model, dynamic_cast<const S*>(&state) != nullptr);
    return static_cast<const S&>(state);
  }

 private:
  void check_restorable(const EngineState& state, const Model* model, bool same_kind) const;
};

}  // namespace megaqwen
