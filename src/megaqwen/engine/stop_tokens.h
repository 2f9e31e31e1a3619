// The token ids that end a generation for a model: every eos id in config.json and
// generation_config.json, plus Qwen's end-of-turn and end-of-text tokens as the tokenizer spells
// them (<|im_end|>, <|endoftext|>), since published configs list only some of them.
#pragma once

#include <cstdint>
#include <vector>

#include "megaqwen/model/config.h"
#include "megaqwen/sampling/sampler.h"
#include "megaqwen/tokenizer/tokenizer.h"

namespace megaqwen {

// Sorted, without duplicates. `tokenizer` may be null (a folder without tokenizer files).
std::vector<int32_t> stop_token_ids(const ModelConfig& config, const GenerationDefaults& defaults,
                                    const Tokenizer* tokenizer);

}  // namespace megaqwen
