// Each function below is one part of the Jinja template, in the template's order. Errors the template
// raises with raise_exception carry its exact message; other Jinja failures (a TypeError from `+` or
// the `items` filter) get a message of ours.
#include "megaqwen/chat/qwen35_template.h"

#include "megaqwen/chat/python_json.h"
#include "megaqwen/chat/python_string.h"
#include "megaqwen/util/error.h"

namespace megaqwen {
namespace {

using nlohmann::ordered_json;

constexpr std::string_view kToolsPreamble = "# Tools\n\nYou have access to the following functions:\n\n<tools>";
constexpr std::string_view kToolsPostamble =
    "\n</tools>"
    "\n\nIf you choose to call a function ONLY reply in the following format with NO suffix:\n\n<tool_call>\n"
    "<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n</parameter>\n"
    "<parameter=example_parameter_2>\nThis is the value for the second parameter\nthat can span\nmultiple lines\n"
    "</parameter>\n</function>\n</tool_call>\n\n<IMPORTANT>\nReminder:\n- Function calls MUST follow the specified "
    "format: an inner <function=...></function> block must be nested within <tool_call></tool_call> XML tags\n"
    "- Required parameters MUST be specified\n- You may provide optional reasoning for your function call in "
    "natural language BEFORE the function call, but NOT after\n- If there is no function call available, answer "
    "the question like normal with your current knowledge and do not tell the user about function calls\n"
    "</IMPORTANT>";
constexpr std::string_view kVisionImage = "<|vision_start|><|image_pad|><|vision_end|>";
constexpr std::string_view kVisionVideo = "<|vision_start|><|video_pad|><|vision_end|>";

[[noreturn]] void raise_exception(std::string_view message) { throw Error(std::string(message)); }

// `item.type == kind` for a content part (an object).
bool part_is(const ordered_json& part, std::string_view kind) {
  const auto it = part.find("type");
  return it != part.end() && it->is_string() && it->get_ref<const std::string&>() == kind;
}

// The template's render_content macro followed by `|trim`. String content as is; a list of parts
// concatenated (text as is, images and videos as one placeholder each); null as nothing. The
// add_vision_id variable ("Picture 1: ") is never set by a chat request, so it is not implemented.
std::string render_content(const ordered_json& content, bool is_system_content) {
  std::string text;
  if (content.is_string()) {
    text = content.get<std::string>();
  } else if (content.is_array()) {
    for (const ordered_json& part : content) {
      // `'image' in item` is a key test for objects but a substring test for strings; parts that are
      // not objects are refused rather than matched by substring.
      if (!part.is_object()) fail("chat request: content parts must be objects, not {}", part.type_name());
      if (part.contains("image") || part.contains("image_url") || part_is(part, "image")) {
        if (is_system_content) raise_exception("System message cannot contain images.");
        text += kVisionImage;
      } else if (part.contains("video") || part_is(part, "video")) {
        if (is_system_content) raise_exception("System message cannot contain videos.");
        text += kVisionVideo;
      } else if (part.contains("text")) {
        text += python_str(part.at("text"));
      } else {
        raise_exception("Unexpected item type in content.");
      }
    }
  } else if (!content.is_null()) {
    raise_exception("Unexpected content type.");
  }
  return std::string(python::strip_whitespace(text));
}

// The system turn: the tool list followed by the (trimmed, non-empty) system prompt when there are
// tools, else the system prompt alone, even when empty.
void render_system(std::string& out, const ChatRequest& request) {
  const ChatMessage& first = request.messages.front();
  const bool has_system = first.role == "system";
  if (!request.tools.empty()) {
    out += "<|im_start|>system\n";
    out += kToolsPreamble;
    for (const ordered_json& tool : request.tools) {
      out += '\n';
      out += python_json_dumps(tool);
    }
    out += kToolsPostamble;
    if (has_system) {
      const std::string content = render_content(first.content, /*is_system_content=*/true);
      if (!content.empty()) out += "\n\n" + content;
    }
    out += "<|im_end|>\n";
  } else if (has_system) {
    out += "<|im_start|>system\n" + render_content(first.content, true) + "<|im_end|>\n";
  }
}

// The last user message whose trimmed content is not wrapped whole in <tool_response> tags; the
// template refuses a conversation without one.
std::size_t last_query_index(const std::vector<ChatMessage>& messages) {
  for (std::size_t i = messages.size(); i-- > 0;) {
    if (messages[i].role != "user") continue;
    const std::string content = render_content(messages[i].content, false);
    const std::string_view view = content;
    if (!(view.starts_with("<tool_response>") && view.ends_with("</tool_response>"))) return i;
  }
  raise_exception("No user query found in messages.");
}

// One <parameter=key> block: objects and lists as JSON, everything else through Python's str().
void render_parameter(std::string& out, const std::string& key, const ordered_json& value) {
  out += "<parameter=" + key + ">\n";
  out += value.is_object() || value.is_array() ? python_json_dumps(value) : python_str(value);
  out += "\n</parameter>\n";
}

void render_tool_calls(std::string& out, const std::vector<ChatToolCall>& calls, std::string_view content,
                       std::size_t index) {
  for (std::size_t i = 0; i < calls.size(); ++i) {
    const ChatToolCall& call = calls[i];
    // The first call is set off by a blank line only when there is visible content before it.
    if (i > 0) {
      out += '\n';
    } else if (!python::strip_whitespace(content).empty()) {
      out += "\n\n";
    }
    out += "<tool_call>\n<function=" + call.name + ">\n";
    if (call.arguments) {
      // The `items` filter takes mappings only: JSON-string arguments are a TypeError in Jinja.
      if (!call.arguments->is_object()) {
        fail("chat request: messages[{}]: the arguments of tool call \"{}\" must be an object for the Qwen3.5 "
             "template, not {}",
             index, call.name, call.arguments->type_name());
      }
      for (const auto& [key, value] : call.arguments->items()) render_parameter(out, key, value);
    }
    out += "</function>\n</tool_call>";
  }
}

void render_assistant(std::string& out, const ChatMessage& message, std::string content, std::size_t index,
                      bool after_last_query) {
  // reasoning_content wins; otherwise a <think>...</think> block leading the content is split off.
  std::string reasoning;
  if (message.reasoning_content) {
    reasoning = *message.reasoning_content;
  } else if (content.find("</think>") != std::string::npos) {
    const std::string_view view = content;
    reasoning = python::lstrip(
        python::split_last(python::rstrip(python::split_first(view, "</think>"), "\n"), "<think>"), "\n");
    content = python::lstrip(python::split_last(view, "</think>"), "\n");
  }
  reasoning = python::strip_whitespace(reasoning);

  // Unlike Qwen3, every assistant turn after the last query shows its (possibly empty) thinking.
  out += "<|im_start|>assistant\n";
  if (after_last_query) out += "<think>\n" + reasoning + "\n</think>\n\n";
  out += content;
  render_tool_calls(out, message.tool_calls, content, index);
  out += "<|im_end|>\n";
}

}  // namespace

std::string Qwen35Template::render(const ChatRequest& request) const {
  const std::vector<ChatMessage>& messages = request.messages;
  if (messages.empty()) raise_exception("No messages provided.");
  std::string out;
  render_system(out, request);
  const std::size_t last_query = last_query_index(messages);

  for (std::size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& message = messages[i];
    const std::string content = render_content(message.content, false);
    if (message.role == "system") {
      if (i != 0) raise_exception("System message must be at the beginning.");
    } else if (message.role == "user") {
      out += "<|im_start|>user\n" + content + "<|im_end|>\n";
    } else if (message.role == "assistant") {
      render_assistant(out, message, content, i, i > last_query);
    } else if (message.role == "tool") {
      // Consecutive tool results share one user turn. `loop.previtem` is undefined for the first
      // message, so a leading tool message gets no turn opener.
      if (i > 0 && messages[i - 1].role != "tool") out += "<|im_start|>user";
      out += "\n<tool_response>\n" + content + "\n</tool_response>";
      if (i + 1 == messages.size() || messages[i + 1].role != "tool") out += "<|im_end|>\n";
    } else {
      raise_exception("Unexpected message role.");
    }
  }

  if (request.add_generation_prompt) out += generation_prompt(request.enable_thinking);
  return out;
}

std::string Qwen35Template::generation_prompt(std::optional<bool> enable_thinking) const {
  // `enable_thinking is defined and enable_thinking is true`: thinking is off unless asked for, and
  // when on the reply opens inside the think block.
  return enable_thinking == true ? "<|im_start|>assistant\n<think>\n" : "<|im_start|>assistant\n<think>\n\n</think>\n\n";
}

}  // namespace megaqwen
