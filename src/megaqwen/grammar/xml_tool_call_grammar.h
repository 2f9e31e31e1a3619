// XmlToolCallGrammar: the tool calls a Qwen3.5 reply may write when the request forces one
// (tool_choice "required" or a named function), in the XML form its chat template teaches:
//
//   <tool_call>
//   <function=NAME>
//   <parameter=KEY>
//   VALUE
//   </parameter>
//   ...
//   </function>
//   </tool_call>
//
// compiled from the request's tools for XmlToolCallRecognizer. The server writes the opening
// ("<tool_call>\n<function=", and the name when one is forced); the grammar covers the rest: a name
// among the tools, then that tool's declared parameters in the schema's order (required ones never
// skipped), then free keys (none of the declared ones) where its schema allows extra properties,
// then the closing tags.
//
// A VALUE is what the server's tool-call parser will read back (server/tool_call_parser.h): for a
// parameter declared `"type": "string"` the text itself (its enum, length bounds and pattern
// honoured; it may not contain "</parameter>", which would end it early), for any other the JSON of
// a value valid under its schema (JsonGrammar), again without "</parameter>" in its bytes (a string
// writes that '/' as "\/"). A schema that fixes those bytes (an enum, const, property name or pattern
// spelling the tag) is refused. A tool whose parameters JsonGrammar refuses, or whose root is not an
// object schema, takes any keys with any text.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "megaqwen/grammar/json_grammar.h"

namespace megaqwen {

struct XmlToolCallGrammar {
  // Where a choice leads once one of its texts is written whole.
  struct Outcome {
    enum class Kind : uint8_t { Parameters, Value, Done } kind = Kind::Done;
    uint32_t tool = 0;
    uint32_t param = 0;  // Parameters: the next declared parameter; Value: the parameter
  };
  // Exactly one of `texts` (sorted, distinct) comes next.
  struct Choice {
    std::vector<std::string> texts;
    std::vector<Outcome> outcomes;  // per text
  };
  struct Value {
    enum class Kind : uint8_t {
      Text,      // the text itself: [min, max] code points, `pattern` (into the tool's grammar) or -1
      TextEnum,  // one of value_choice's texts
      Json,      // a JSON value of `node` in the tool's grammar
    } kind = Kind::Text;
    uint32_t min = 0, max = JsonGrammar::kUnbounded;
    int pattern = -1;
    int node = -1;
    int value_choice = -1;  // TextEnum: its texts end with the closing "\n</parameter>\n"
    int close_choice = -1;  // Text: "</parameter>\n" after the value's last newline; Json: "\n</parameter>\n"
  };
  struct Parameter {
    std::string key;
    bool required = false;
    Value value;
  };
  struct Tool {
    std::string name;
    std::vector<Parameter> params;
    std::optional<Value> extra;      // the value of a free key, where the schema allows them
    std::vector<int> params_choice;  // per position 0..params.size(): the next key or the end
    std::vector<std::string> declared_keys;  // sorted: a free key may not be one of them
    std::shared_ptr<const JsonGrammar> json;
  };

  static constexpr uint32_t kMaxFreeKeyBytes = 64;  // free keys: [A-Za-z0-9_.-]{1,64}

  std::vector<Tool> tools;
  std::vector<Choice> choices;
  int name_choice = -1;  // the name and ">\n"; -1 when the request named the tool
  int forced_tool = -1;  // the named tool

  // `tools`: the request's tool list (OpenAI's {"type": "function", "function": {"name",
  // "parameters"}}); `forced`: the named function, or "" for any of them. Throws Error when a tool
  // cannot be written in this form (a key the XML cannot carry, an enum value holding
  // "</parameter>"), naming it.
  static XmlToolCallGrammar from_tools(const std::vector<nlohmann::ordered_json>& tools, const std::string& forced);
};

}  // namespace megaqwen
