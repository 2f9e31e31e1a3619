#include "megaqwen/server/tool_call_parser.h"

#include <algorithm>
#include <random>

namespace megaqwen::server {

namespace {

using nlohmann::ordered_json;

std::string_view trim(std::string_view s) {
  const char* space = " \t\r\n";
  size_t b = s.find_first_not_of(space);
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(space) - b + 1);
}

// Values of an XML parameter lose one newline on each side: the template writes "\n{value}\n".
std::string_view strip_one_newline(std::string_view s) {
  if (s.starts_with('\n')) s.remove_prefix(1);
  if (s.ends_with('\n')) s.remove_suffix(1);
  return s;
}

// Model output may hold invalid UTF-8: replaced, never thrown.
std::string as_text(const ordered_json& j) { return j.dump(-1, ' ', false, ordered_json::error_handler_t::replace); }

std::optional<ParsedToolCall> parse_json_call(std::string_view body) {
  ordered_json call = ordered_json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!call.is_object() || !call.contains("name") || !call["name"].is_string()) return std::nullopt;
  ordered_json arguments = call.value("arguments", ordered_json::object());
  // Some models put the arguments in as a JSON string already.
  if (arguments.is_string()) arguments = ordered_json::parse(arguments.get<std::string>(), nullptr, false);
  if (!arguments.is_object()) return std::nullopt;
  return ParsedToolCall{call["name"].get<std::string>(), as_text(arguments)};
}

// The declared JSON "type" of a tool's parameter: a name, a list of names, or null when unknown.
ordered_json declared_type(const std::vector<ordered_json>& tools, const std::string& function,
                           const std::string& parameter) {
  for (const auto& tool : tools) {
    const auto fn = tool.find("function");
    if (fn == tool.end() || !fn->is_object() || fn->value("name", ordered_json()) != function) continue;
    const ordered_json* props = nullptr;
    if (auto p = fn->find("parameters"); p != fn->end() && p->is_object())
      if (auto q = p->find("properties"); q != p->end() && q->is_object()) props = &*q;
    if (!props) return nullptr;
    auto prop = props->find(parameter);
    if (prop == props->end() || !prop->is_object()) return nullptr;
    auto type = prop->find("type");
    return type != prop->end() ? *type : ordered_json(nullptr);
  }
  return nullptr;
}

bool type_allows(const ordered_json& type, const char* name) {
  if (type.is_string()) return type == name;
  return type.is_array() && std::find(type.begin(), type.end(), ordered_json(name)) != type.end();
}

// True, False and None, as the Qwen3.5 template renders a call's booleans and nulls (Python's
// str()); the model copies that form from the history. Read so only where the schema's type
// admits the value.
std::optional<ordered_json> python_literal(std::string_view value, const ordered_json& type) {
  if ((value == "True" || value == "False") && type_allows(type, "boolean")) return ordered_json(value == "True");
  if (value == "None" && type_allows(type, "null")) return ordered_json(nullptr);
  return std::nullopt;
}

std::optional<ParsedToolCall> parse_xml_call(std::string_view body, const std::vector<ordered_json>& tools) {
  constexpr std::string_view fn_open = "<function=", fn_close = "</function>";
  constexpr std::string_view p_open = "<parameter=", p_close = "</parameter>";
  if (!body.starts_with(fn_open) || !body.ends_with(fn_close)) return std::nullopt;
  size_t name_end = body.find('>');
  std::string name(trim(body.substr(fn_open.size(), name_end - fn_open.size())));
  if (name.empty() || name.find_first_of("<\n") != std::string::npos) return std::nullopt;
  std::string_view rest = body.substr(name_end + 1, body.size() - fn_close.size() - name_end - 1);

  ordered_json arguments = ordered_json::object();
  for (rest = trim(rest); !rest.empty(); rest = trim(rest)) {
    if (!rest.starts_with(p_open)) return std::nullopt;
    size_t key_end = rest.find('>');
    size_t value_end = rest.find(p_close);
    if (key_end == std::string_view::npos || value_end == std::string_view::npos || value_end < key_end)
      return std::nullopt;
    std::string key(trim(rest.substr(p_open.size(), key_end - p_open.size())));
    std::string value(strip_one_newline(rest.substr(key_end + 1, value_end - key_end - 1)));
    if (key.empty()) return std::nullopt;
    const ordered_json type = declared_type(tools, name, key);
    if (type == "string") {
      arguments[key] = value;
    } else if (const auto python = python_literal(value, type)) {
      arguments[key] = *python;
    } else {
      ordered_json parsed = ordered_json::parse(value, nullptr, false);
      arguments[key] = parsed.is_discarded() ? ordered_json(value) : parsed;
    }
    rest.remove_prefix(value_end + p_close.size());
  }
  return ParsedToolCall{std::move(name), as_text(arguments)};
}

}  // namespace

std::optional<ParsedToolCall> parse_tool_call(std::string_view body, const std::vector<ordered_json>& tools) {
  body = trim(body);
  if (body.starts_with('{')) return parse_json_call(body);
  if (body.starts_with('<')) return parse_xml_call(body, tools);
  return std::nullopt;
}

size_t find_tool_call_close(std::string_view text) {
  constexpr std::string_view close = "</tool_call>", p_open = "<parameter=", p_close = "</parameter>";
  constexpr size_t npos = std::string_view::npos;
  const size_t begin = text.find_first_not_of(" \t\r\n");
  if (begin != npos && text[begin] == '{') {
    bool in_string = false, escaped = false;
    for (size_t i = begin; i < text.size(); ++i) {
      const char c = text[i];
      if (escaped) {
        escaped = false;
      } else if (in_string) {
        escaped = c == '\\';
        in_string = c != '"';
      } else if (c == '"') {
        in_string = true;
      } else if (text.substr(i).starts_with(close)) {
        return i;
      }
    }
    return npos;
  }
  if (begin != npos && text[begin] == '<') {
    // A value runs from its "<parameter=" to the first "</parameter>" (parse_xml_call).
    for (size_t from = begin;;) {
      const size_t end = text.find(close, from), param = text.find(p_open, from);
      if (end == npos || param == npos || end < param) return end;
      const size_t value_end = text.find(p_close, param);
      if (value_end == npos) return npos;
      from = value_end + p_close.size();
    }
  }
  return text.find(close);
}

std::string make_tool_call_id() {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::uniform_int_distribution<size_t> pick(0, sizeof kAlphabet - 2);
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += kAlphabet[pick(rng)];
  return id;
}

}  // namespace megaqwen::server
