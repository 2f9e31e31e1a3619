#include "megaqwen/engine/engine.h"

#include "megaqwen/util/error.h"

namespace megaqwen {

void Engine::check_new_tokens(std::span<const int32_t> tokens) const {
  const int vocab = config().vocab_size;
  for (int32_t t : tokens)
    if (t < 0 || t >= vocab) fail("token id {} is out of range (vocabulary size {})", t, vocab);
  if (int64_t(position()) + int64_t(tokens.size()) > context_size())
    fail("the context is full: {} tokens in the cache + {} new > context size {}", position(), tokens.size(),
         context_size());
}

}  // namespace megaqwen
