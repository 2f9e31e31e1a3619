#include "megaqwen/server/reply_parser.h"

#include <algorithm>

namespace megaqwen::server {

namespace {

constexpr std::string_view kThinkOpen = "<think>", kThinkClose = "</think>";
constexpr std::string_view kToolOpen = "<tool_call>", kToolClose = "</tool_call>";

// Length of the longest suffix of `text` that is a proper prefix of `tag` (it may still become the tag).
size_t partial_tag_suffix(std::string_view text, std::string_view tag) {
  for (size_t n = std::min(text.size(), tag.size() - 1); n > 0; --n)
    if (tag.starts_with(text.substr(text.size() - n))) return n;
  return 0;
}

}  // namespace

ReplyParser::ReplyParser(bool starts_in_thinking, std::vector<nlohmann::ordered_json> tools, bool parse_tool_calls)
    : state_(starts_in_thinking ? State::Reasoning : State::Start),
      parse_tool_calls_(parse_tool_calls),
      tools_(std::move(tools)) {}

ReplyDelta ReplyParser::feed(std::string_view text) {
  buffer_ += text;
  ReplyDelta out;
  step(out, false);
  return out;
}

ReplyDelta ReplyParser::finish() {
  ReplyDelta out;
  step(out, true);
  return out;
}

void ReplyParser::step(ReplyDelta& out, bool at_end) {
  auto emit_content = [&](std::string_view text) {
    if (!content_started_) {
      size_t b = text.find_first_not_of('\n');
      text = b == std::string_view::npos ? std::string_view() : text.substr(b);
      content_started_ = !text.empty();
    }
    out.content += text;
  };
  for (;;) {
    switch (state_) {
      case State::Start: {
        // A reply that opens with <think> (after any newlines) is reasoning first.
        size_t b = buffer_.find_first_not_of(" \n");
        if (b == std::string::npos && !at_end) return;
        std::string_view rest = b == std::string::npos ? std::string_view() : std::string_view(buffer_).substr(b);
        if (rest.starts_with(kThinkOpen)) {
          buffer_.erase(0, b + kThinkOpen.size());
          state_ = State::Reasoning;
        } else if (kThinkOpen.starts_with(rest) && !rest.empty() && !at_end) {
          return;  // "<thi": wait for more
        } else {
          state_ = State::Content;
        }
        break;
      }
      case State::Reasoning: {
        if (!reasoning_started_) {
          buffer_.erase(0, std::min(buffer_.find_first_not_of('\n'), buffer_.size()));
          reasoning_started_ = !buffer_.empty();
        }
        size_t close = buffer_.find(kThinkClose);
        if (close != std::string::npos) {
          std::string_view reasoning = std::string_view(buffer_).substr(0, close);
          while (reasoning.ends_with('\n')) reasoning.remove_suffix(1);  // the template's own newline
          out.reasoning += reasoning;
          buffer_.erase(0, close + kThinkClose.size());
          state_ = State::Content;
          break;
        }
        // Hold back a partial "</think>" and the newlines that may precede it.
        size_t keep = at_end ? 0 : partial_tag_suffix(buffer_, kThinkClose);
        size_t ready = buffer_.size() - keep;
        if (!at_end)
          while (ready > 0 && buffer_[ready - 1] == '\n') --ready;
        out.reasoning += buffer_.substr(0, ready);
        buffer_.erase(0, ready);
        return;
      }
      case State::Content: {
        if (!parse_tool_calls_) {
          emit_content(buffer_);
          buffer_.clear();
          return;
        }
        size_t open = buffer_.find(kToolOpen);
        if (open != std::string::npos) {
          emit_content(std::string_view(buffer_).substr(0, open));
          buffer_.erase(0, open + kToolOpen.size());
          state_ = State::ToolCall;
          break;
        }
        size_t keep = at_end ? 0 : partial_tag_suffix(buffer_, kToolOpen);
        emit_content(std::string_view(buffer_).substr(0, buffer_.size() - keep));
        buffer_.erase(0, buffer_.size() - keep);
        return;
      }
      case State::ToolCall: {
        size_t close = find_tool_call_close(buffer_);
        // At the end, a call whose strings or values never closed ends at its first tag as text.
        if (close == std::string::npos && at_end) close = buffer_.find(kToolClose);
        if (close == std::string::npos) {
          if (!at_end) return;
          // Cut off inside a call (token budget): what there is stays visible as content.
          emit_content(std::string(kToolOpen) + buffer_);
          buffer_.clear();
          state_ = State::Content;
          return;
        }
        std::string_view body = std::string_view(buffer_).substr(0, close);
        if (auto call = parse_tool_call(body, tools_)) {
          out.tool_calls.push_back(std::move(*call));
        } else {
          emit_content(std::string(kToolOpen) + std::string(body) + std::string(kToolClose));
        }
        buffer_.erase(0, close + kToolClose.size());
        state_ = State::Content;
        break;
      }
    }
  }
}

}  // namespace megaqwen::server
