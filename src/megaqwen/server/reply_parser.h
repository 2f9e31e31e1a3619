// ReplyParser: splits a Qwen reply, as it streams in, into what OpenAI's API returns apart:
// reasoning (inside <think>...</think>), content, and tool calls (<tool_call>...</tool_call> blocks,
// when the request offered tools). Text that could still be the start of a tag is held back until
// the next piece decides it, so every piece it returns is final. The same parser serves streamed
// and whole replies, so both agree.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>
#include <vector>

#include "megaqwen/server/tool_call_parser.h"

namespace megaqwen::server {

struct ReplyDelta {
  std::string reasoning;
  std::string content;
  std::vector<ParsedToolCall> tool_calls;
  bool empty() const { return reasoning.empty() && content.empty() && tool_calls.empty(); }
};

class ReplyParser {
 public:
  // starts_in_thinking: the prompt already opened the think block (Qwen3.5 with thinking on).
  // tools: the request's tool definitions; empty turns tool-call parsing off.
  ReplyParser(bool starts_in_thinking, std::vector<nlohmann::ordered_json> tools, bool parse_tool_calls);

  ReplyDelta feed(std::string_view text);  // the next piece of generated text
  ReplyDelta finish();                     // the end: whatever was held back

 private:
  enum class State { Start, Reasoning, Content, ToolCall };
  void step(ReplyDelta& out, bool at_end);

  State state_;
  bool parse_tool_calls_;
  bool content_started_ = false;    // leading newlines of the content are dropped until then
  bool reasoning_started_ = false;  // likewise for the reasoning
  std::string buffer_;              // received, not yet returned
  std::vector<nlohmann::ordered_json> tools_;
};

}  // namespace megaqwen::server
