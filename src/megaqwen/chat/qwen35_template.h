// The Qwen3.5 chat template (chat_template.jinja of Qwen/Qwen3.5-0.8B) translated by hand. Same ChatML
// turns as Qwen3, but: tool calls in XML form (<function=name><parameter=key>value</parameter>),
// argument values printed with Python's str() unless they are objects or lists, content trimmed and
// allowed as a list of parts (text, image, video), thinking off by default, and several requests
// refused with the template's own raise_exception messages.
#pragma once

#include <cstdint>

#include "megaqwen/chat/chat_template.h"

namespace megaqwen {

// chat_template_fingerprint() of the template text this file translates.
inline constexpr std::uint64_t kQwen35TemplateFingerprint = 0x407bbcdeb62737b7ULL;

class Qwen35Template final : public ChatTemplate::Renderer {
 public:
  std::string_view name() const override { return "qwen3.5"; }
  std::string render(const ChatRequest& request) const override;
  std::string generation_prompt(std::optional<bool> enable_thinking) const override;
};

}  // namespace megaqwen
