// Engine: the one interface over every way of running a model (the CPU reference today, the CUDA
// engine and the megakernel later). Generation, chat, bench and the server talk only to this.
//
// An engine owns one sequence: a KV cache holding `position()` tokens. prefill() appends a batch of
// tokens, decode() appends one; both return the logits that predict the token after the last one.
// truncate(n) rolls the cache back to its first n tokens (chat turns, prompt reuse).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "megaqwen/model/config.h"

namespace megaqwen {

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
};

}  // namespace megaqwen
