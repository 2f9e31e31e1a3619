// A chat request as the templates read it: the OpenAI-style JSON checked once for the shapes every
// template relies on, so each template's rendering code deals only with its own rules.
//
//   {"messages": [{"role": "system" | "user" | "assistant" | "tool" | ..., "content": ...,
//                  "reasoning_content": "...", "tool_calls": [{"type": "function",
//                  "function": {"name": "...", "arguments": {...} or "<JSON text>"}}]}, ...],
//    "tools": [...], "add_generation_prompt": bool, "enable_thinking": bool}
//
// Missing and null fields mean the same thing, except for tool-call arguments, where the templates
// tell them apart. Keys the templates never read (tool_call_id, name, sampling options) are ignored.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

namespace megaqwen {

struct ChatToolCall {
  std::string name;
  // An object, a string of JSON text (printed verbatim), or any other JSON value; nullopt when the
  // call has no "arguments" key at all.
  std::optional<nlohmann::ordered_json> arguments;
};

struct ChatMessage {
  std::string role;  // any string: templates decide what they do with roles they don't know
  nlohmann::ordered_json content;  // as given (null when missing): each template decides what it accepts
  std::optional<std::string> reasoning_content;
  std::vector<ChatToolCall> tool_calls;
};

struct ChatRequest {
  std::vector<ChatMessage> messages;  // may be empty: templates word that error themselves
  std::vector<nlohmann::ordered_json> tools;  // tool definitions, printed as given
  bool add_generation_prompt = false;
  std::optional<bool> enable_thinking;  // nullopt: the template's default
};

// Checks the shapes and throws Error naming the offending field (e.g. "messages[2].role").
ChatRequest parse_chat_request(const nlohmann::ordered_json& request);

}  // namespace megaqwen
