#include "megaqwen/engine/engine.h"

#include "megaqwen/util/error.h"
#include "megaqwen/util/host_memory.h"

namespace megaqwen {

void Engine::check_new_tokens(std::span<const int32_t> tokens) const {
  const int vocab = config().vocab_size;
  for (int32_t t : tokens)
    if (t < 0 || t >= vocab) fail("token id {} is out of range (vocabulary size {})", t, vocab);
  if (int64_t(position()) + int64_t(tokens.size()) > context_size())
    fail("the context is full: {} tokens in the cache + {} new > context size {}", position(), tokens.size(),
         context_size());
}

std::optional<uint64_t> Engine::state_memory_available() const { return available_host_memory(); }

void Engine::restore_state(const EngineState&) {
  fail("this engine ({}) cannot restore a saved sequence", device_name());
}

std::vector<StateTensor> Engine::state_tensors(const EngineState&) const {
  fail("this engine ({}) cannot write a saved sequence to a file", device_name());
}

std::unique_ptr<EngineState> Engine::state_from_tensors(std::span<const int32_t>, const StateTensorSource&) const {
  fail("this engine ({}) cannot read a saved sequence from a file", device_name());
}

void Engine::check_restorable(const EngineState& state, const Model* model, bool same_kind) const {
  if (!same_kind) fail("cannot restore a saved sequence made by another kind of engine than {}", device_name());
  if (state.model() != model) fail("cannot restore a saved sequence made with another model");
  if (state.position() < 0 || state.position() > context_size())
    fail("cannot restore a saved sequence of {} tokens: the context holds {}", state.position(), context_size());
}

}  // namespace megaqwen
