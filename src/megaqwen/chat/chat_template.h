// ChatTemplate: turns a chat request into the exact prompt text a model's Jinja chat template would
// produce. There is no Jinja engine: each supported template is translated by hand into a Renderer
// (qwen3_template.cpp, ...) and recognized by the exact text of the template it translates, so a
// model folder whose template differs in any byte is refused instead of rendered approximately.
// tests/fixtures/chat holds renders by the real Jinja template that the translations must match.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "megaqwen/chat/chat_request.h"

namespace megaqwen {

class ChatTemplate {
 public:
  // One template's rules. Implementations are stateless.
  class Renderer {
   public:
    virtual ~Renderer() = default;
    virtual std::string_view name() const = 0;
    // The whole prompt; throws Error where the Jinja template would fail or raise.
    virtual std::string render(const ChatRequest& request) const = 0;
    // The text that opens the assistant's reply (what add_generation_prompt appends).
    virtual std::string generation_prompt(std::optional<bool> enable_thinking) const = 0;
  };

  // The template of a model folder: chat_template.jinja if present (as transformers prefers it), else
  // the "chat_template" key of tokenizer_config.json. Error if there is none or it is not one we know.
  static ChatTemplate load(const std::filesystem::path& model_dir);
  // The renderer for a template's text; Error if the text is not one of the known templates.
  static ChatTemplate from_text(std::string_view template_text);

  // request: {"messages": [...], "tools": [...]?, "add_generation_prompt": bool?, "enable_thinking": bool?}
  // (see chat_request.h). Throws Error on a malformed request or where the template refuses it.
  std::string render(const nlohmann::ordered_json& request) const;
  std::string render(const ChatRequest& request) const { return renderer_->render(request); }

  std::string_view name() const { return renderer_->name(); }  // "qwen3", ...
  std::string generation_prompt(std::optional<bool> enable_thinking) const {
    return renderer_->generation_prompt(enable_thinking);
  }

 private:
  explicit ChatTemplate(std::shared_ptr<const Renderer> renderer) : renderer_(std::move(renderer)) {}
  std::shared_ptr<const Renderer> renderer_;
};

// 64-bit FNV-1a of a template's text without its trailing newlines (Jinja drops a final newline, and
// chat_template.jinja files often add one): the identity by which templates are recognized.
std::uint64_t chat_template_fingerprint(std::string_view template_text);

}  // namespace megaqwen
