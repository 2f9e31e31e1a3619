#include "megaqwen/chat/chat_request.h"

#include "megaqwen/util/error.h"

namespace megaqwen {
namespace {

using nlohmann::ordered_json;

// The field's value, or null when the key is missing.
const ordered_json& field(const ordered_json& object, const char* key) {
  static const ordered_json null_value;
  const auto it = object.find(key);
  return it == object.end() ? null_value : *it;
}

std::optional<bool> optional_bool(const ordered_json& request, const char* key) {
  const ordered_json& value = field(request, key);
  if (value.is_null()) return std::nullopt;
  if (!value.is_boolean()) fail("chat request: \"{}\" must be true or false, not {}", key, value.type_name());
  return value.get<bool>();
}

ChatToolCall parse_tool_call(const ordered_json& call, const std::string& where) {
  if (!call.is_object()) fail("chat request: {} must be an object, not {}", where, call.type_name());
  // OpenAI nests name and arguments under "function"; a flat {"name", "arguments"} is accepted too,
  // as the templates do.
  const ordered_json* function = &call;
  std::string function_where = where;
  if (const ordered_json& nested = field(call, "function"); !nested.is_null()) {
    if (!nested.is_object()) fail("chat request: {}.function must be an object, not {}", where, nested.type_name());
    function = &nested;
    function_where += ".function";
  }
  const ordered_json& name = field(*function, "name");
  if (!name.is_string()) fail("chat request: {}.name must be a string, not {}", function_where, name.type_name());
  ChatToolCall parsed{name.get<std::string>(), std::nullopt};
  if (const auto it = function->find("arguments"); it != function->end()) parsed.arguments = *it;
  return parsed;
}

ChatMessage parse_message(const ordered_json& message, const std::string& where) {
  if (!message.is_object()) fail("chat request: {} must be an object, not {}", where, message.type_name());
  ChatMessage parsed;
  const ordered_json& role = field(message, "role");
  if (!role.is_string()) {
    fail("chat request: {}.role must be a string, not {}", where, role.is_null() ? "missing" : role.type_name());
  }
  parsed.role = role.get<std::string>();
  parsed.content = field(message, "content");

  const ordered_json& reasoning = field(message, "reasoning_content");
  if (reasoning.is_string()) {
    parsed.reasoning_content = reasoning.get<std::string>();
  } else if (!reasoning.is_null()) {
    fail("chat request: {}.reasoning_content must be a string, not {}", where, reasoning.type_name());
  }

  const ordered_json& calls = field(message, "tool_calls");
  if (!calls.is_null() && !calls.is_array()) {
    fail("chat request: {}.tool_calls must be an array, not {}", where, calls.type_name());
  }
  if (calls.is_array()) {
    for (std::size_t i = 0; i < calls.size(); ++i) {
      parsed.tool_calls.push_back(parse_tool_call(calls[i], fmt::format("{}.tool_calls[{}]", where, i)));
    }
  }
  return parsed;
}

}  // namespace

ChatRequest parse_chat_request(const ordered_json& request) {
  if (!request.is_object()) fail("chat request must be a JSON object, not {}", request.type_name());
  ChatRequest parsed;

  const ordered_json& messages = field(request, "messages");
  if (!messages.is_array()) {
    fail("chat request: \"messages\" must be an array, not {}", messages.is_null() ? "missing" : messages.type_name());
  }
  for (std::size_t i = 0; i < messages.size(); ++i) {
    parsed.messages.push_back(parse_message(messages[i], fmt::format("messages[{}]", i)));
  }

  const ordered_json& tools = field(request, "tools");
  if (!tools.is_null() && !tools.is_array()) fail("chat request: \"tools\" must be an array, not {}", tools.type_name());
  if (tools.is_array()) parsed.tools.assign(tools.begin(), tools.end());

  parsed.add_generation_prompt = optional_bool(request, "add_generation_prompt").value_or(false);
  parsed.enable_thinking = optional_bool(request, "enable_thinking");
  return parsed;
}

}  // namespace megaqwen
