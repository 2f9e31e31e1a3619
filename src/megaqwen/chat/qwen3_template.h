// The Qwen3 chat template (tokenizer_config.json of Qwen/Qwen3-0.6B and the other Qwen3 hybrid-thinking
// models) translated by hand. ChatML turns (<|im_start|>role\n...<|im_end|>\n), tools listed as JSON in the
// system turn, tool calls as <tool_call> JSON, tool results grouped into one user turn, and thinking
// kept only for the assistant turns after the last real user message.
#pragma once

#include <cstdint>

#include "megaqwen/chat/chat_template.h"

namespace megaqwen {

// chat_template_fingerprint() of the template text this file translates.
inline constexpr std::uint64_t kQwen3TemplateFingerprint = 0x959a4551391a6549ULL;

class Qwen3Template final : public ChatTemplate::Renderer {
 public:
  std::string_view name() const override { return "qwen3"; }
  std::string render(const ChatRequest& request) const override;
  std::string generation_prompt(std::optional<bool> enable_thinking) const override;
};

}  // namespace megaqwen
