#include "megaqwen/engine/stop_tokens.h"

#include <algorithm>

namespace megaqwen {

std::vector<int32_t> stop_token_ids(const ModelConfig& config, const GenerationDefaults& defaults,
                                    const Tokenizer* tokenizer) {
  std::vector<int32_t> ids = defaults.eos_token_ids;
  ids.insert(ids.end(), config.eos_token_ids.begin(), config.eos_token_ids.end());
  if (tokenizer)
    for (const char* name : {"<|im_end|>", "<|endoftext|>"})
      if (auto id = tokenizer->token_id(name)) ids.push_back(*id);
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

}  // namespace megaqwen
