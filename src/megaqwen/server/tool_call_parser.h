// Tool calls in a Qwen reply: the text between <tool_call> and </tool_call>, in either of the two
// formats the Qwen chat templates teach the model:
//   Qwen3 (Hermes style):   {"name": "get_weather", "arguments": {"city": "Paris"}}
//   Qwen3.5 (XML style):    <function=get_weather>
//                           <parameter=city>
//                           Paris
//                           </parameter>
//                           </function>
// XML parameter values are text; they are typed with the tool's JSON schema when the request gave one
// (a "string" parameter stays a string; True, False and None, the forms the template writes, are
// booleans and null where the parameter's type admits them), else read as JSON when they parse as JSON.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace megaqwen::server {

struct ParsedToolCall {
  std::string name;
  std::string arguments;  // a JSON object as text, as OpenAI's function.arguments carries it
};

// The call in one block's body (the text between the tags); nullopt when it is neither format or is
// malformed (the caller then keeps the block as plain content).
std::optional<ParsedToolCall> parse_tool_call(std::string_view body,
                                              const std::vector<nlohmann::ordered_json>& tools = {});

// Where the call that `text` (what follows "<tool_call>") begins ends: the first "</tool_call>" that
// is not inside one of its JSON strings (the JSON form) or parameter values (the XML form), read as
// parse_tool_call reads them, so an argument may hold the tag; npos while none has arrived. Each
// answer depends only on the text up to the tag, so a reply streamed in pieces splits as a whole one.
size_t find_tool_call_close(std::string_view text);

// "call_" and 24 random letters and digits: the id OpenAI clients echo back in tool messages.
std::string make_tool_call_id();

}  // namespace megaqwen::server
