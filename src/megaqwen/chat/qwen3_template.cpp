// Each function below is one part of the Jinja template, in the template's order; comments quote the
// Jinja conditions whose Python semantics are easy to get wrong.
#include "megaqwen/chat/qwen3_template.h"

#include "megaqwen/chat/python_json.h"
#include "megaqwen/chat/python_string.h"
#include "megaqwen/util/error.h"

namespace megaqwen {
namespace {

constexpr std::string_view kToolsPreamble =
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
constexpr std::string_view kToolsPostamble =
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
    "<args-json-object>}\n</tool_call><|im_end|>\n";

// `message.content if message.content is string else ''`. The template silently renders any other
// content (a list of parts, a number) as nothing; losing the user's text that way is refused here.
std::string_view text_content(const ChatMessage& message, std::size_t index) {
  if (message.content.is_string()) return message.content.get_ref<const std::string&>();
  if (message.content.is_null()) return {};
  fail("chat request: messages[{}].content must be a string or null for the Qwen3 template, not {}", index,
       message.content.type_name());
}

// The system turn: the tool list (with the user's system prompt ahead of it) when there are tools,
// else the user's system prompt alone. The template concatenates messages[0].content with `+`,
// which fails in Jinja unless it is a string.
void render_system(std::string& out, const ChatRequest& request) {
  const ChatMessage& first = request.messages.front();
  const bool has_system = first.role == "system";
  if (has_system && !first.content.is_string()) {
    fail("chat request: messages[0].content, the system prompt, must be a string, not {}",
         first.content.is_null() ? "null" : first.content.type_name());
  }
  if (!request.tools.empty()) {
    out += "<|im_start|>system\n";
    if (has_system) out += first.content.get_ref<const std::string&>() + "\n\n";
    out += kToolsPreamble;
    for (const auto& tool : request.tools) {
      out += '\n';
      out += python_json_dumps(tool);
    }
    out += kToolsPostamble;
  } else if (has_system) {
    out += "<|im_start|>system\n" + first.content.get_ref<const std::string&>() + "<|im_end|>\n";
  }
}

// Index of the last "real" user query: the last user message whose content is a string not wrapped
// whole in <tool_response>...</tool_response> (such user turns carry tool results). Thinking is
// rendered only for assistant turns after it. Without one, it is the last index, so no history
// turn shows thinking.
std::size_t last_query_index(const std::vector<ChatMessage>& messages) {
  for (std::size_t i = messages.size(); i-- > 0;) {
    const ChatMessage& m = messages[i];
    if (m.role != "user" || !m.content.is_string()) continue;
    const std::string_view content = m.content.get_ref<const std::string&>();
    if (!(content.starts_with("<tool_response>") && content.ends_with("</tool_response>"))) return i;
  }
  return messages.size() - 1;
}

// `{"name": ..., "arguments": ...}` of one call: string arguments are already JSON text and go in
// verbatim, anything else through tojson.
void render_tool_call(std::string& out, const ChatToolCall& call, std::size_t index) {
  if (!call.arguments) fail("chat request: messages[{}]: tool call \"{}\" has no arguments", index, call.name);
  out += "<tool_call>\n{\"name\": \"";
  out += call.name;
  out += "\", \"arguments\": ";
  out += call.arguments->is_string() ? call.arguments->get<std::string>() : python_json_dumps(*call.arguments);
  out += "}\n</tool_call>";
}

void render_assistant(std::string& out, const ChatMessage& message, std::string_view content, std::size_t index,
                      bool after_last_query, bool is_last) {
  // reasoning_content wins; otherwise a <think>...</think> block leading the content is split off.
  std::string_view reasoning;
  if (message.reasoning_content) {
    reasoning = *message.reasoning_content;
  } else if (content.find("</think>") != std::string_view::npos) {
    reasoning = python::lstrip(
        python::split_last(python::rstrip(python::split_first(content, "</think>"), "\n"), "<think>"), "\n");
    content = python::lstrip(python::split_last(content, "</think>"), "\n");
  }

  // `loop.last or reasoning_content`: the final assistant turn always gets a think block (possibly
  // empty); earlier ones after the last query only when they have reasoning.
  if (after_last_query && (is_last || !reasoning.empty())) {
    out += "<|im_start|>assistant\n<think>\n";
    out += python::strip(reasoning, "\n");
    out += "\n</think>\n\n";
    out += python::lstrip(content, "\n");
  } else {
    out += "<|im_start|>assistant\n";
    out += content;
  }

  // A newline before each call except a first one that directly follows empty content (tested on
  // `content` before its lstrip above, as the template does).
  for (std::size_t i = 0; i < message.tool_calls.size(); ++i) {
    if (i > 0 || !content.empty()) out += '\n';
    render_tool_call(out, message.tool_calls[i], index);
  }
  out += "<|im_end|>\n";
}

}  // namespace

std::string Qwen3Template::render(const ChatRequest& request) const {
  const std::vector<ChatMessage>& messages = request.messages;
  // The template reads messages[0] unguarded; Jinja fails on an empty list.
  if (messages.empty()) fail("chat request: \"messages\" is empty");
  std::string out;
  render_system(out, request);
  const std::size_t last_query = last_query_index(messages);

  for (std::size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& message = messages[i];
    const std::string_view content = text_content(message, i);
    const bool is_last = i + 1 == messages.size();
    if (message.role == "user" || (message.role == "system" && i > 0)) {
      out += "<|im_start|>" + message.role + '\n';
      out += content;
      out += "<|im_end|>\n";
    } else if (message.role == "assistant") {
      render_assistant(out, message, content, i, i > last_query, is_last);
    } else if (message.role == "tool") {
      // Consecutive tool results share one user turn.
      if (i == 0 || messages[i - 1].role != "tool") out += "<|im_start|>user";
      out += "\n<tool_response>\n";
      out += content;
      out += "\n</tool_response>";
      if (is_last || messages[i + 1].role != "tool") out += "<|im_end|>\n";
    }
    // Otherwise nothing: the leading system message was rendered above, and the template drops
    // messages with roles it does not know.
  }

  if (request.add_generation_prompt) out += generation_prompt(request.enable_thinking);
  return out;
}

std::string Qwen3Template::generation_prompt(std::optional<bool> enable_thinking) const {
  // `enable_thinking is defined and enable_thinking is false`: only an explicit false pre-fills an
  // empty think block, which makes the model answer without thinking.
  std::string prompt = "<|im_start|>assistant\n";
  if (enable_thinking == false) prompt += "<think>\n\n</think>\n\n";
  return prompt;
}

}  // namespace megaqwen
