// libFuzzer target: forced Qwen3.5 tool calls. The input is a request's tool list as JSON (up to its
// first NUL byte) and a reply (the bytes after it). XmlToolCallGrammar::from_tools must compile the
// tools or throw megaqwen::Error; the recognizer then reads the reply, and whenever it calls a
// prefix a whole call, the server's parser must read that call back as one of the tools with JSON
// arguments, and its reply parser must find that call's end (streamed or whole). A walk that always
// takes the first allowed byte (bounded) must never reach a state with no byte allowed before the
// call is whole. Any other exception, crash, sanitizer report or hang is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "recognizer_walk.h"
#include "megaqwen/grammar/xml_tool_call_recognizer.h"
#include "megaqwen/server/reply_parser.h"
#include "megaqwen/server/tool_call_parser.h"
#include "megaqwen/util/error.h"

namespace {

using nlohmann::ordered_json;

void must_parse(const std::string& call, const std::vector<ordered_json>& tools,
                const megaqwen::XmlToolCallGrammar& grammar) {
  const std::string close = "</tool_call>";
  const auto parsed = megaqwen::server::parse_tool_call("<function=" + call.substr(0, call.size() - close.size()), tools);
  bool known = false;
  if (parsed)
    for (const auto& t : grammar.tools) known = known || t.name == parsed->name;
  if (!parsed || !known || !ordered_json::parse(parsed->arguments).is_object()) {
    std::fprintf(stderr, "the recognizer took a call the parser does not read back:\n%s\n", call.c_str());
    std::abort();
  }
  // The server's reply parser finds where the call ends, in one piece and byte by byte.
  for (const bool by_byte : {false, true}) {
    megaqwen::server::ReplyParser reply(false, tools, true);
    const std::string text = "<tool_call>\n<function=" + call;
    std::vector<megaqwen::server::ParsedToolCall> calls;
    std::string content;
    auto take = [&](const megaqwen::server::ReplyDelta& d) {
      calls.insert(calls.end(), d.tool_calls.begin(), d.tool_calls.end());
      content += d.content;
    };
    if (by_byte)
      for (char c : text) take(reply.feed(std::string_view(&c, 1)));
    else
      take(reply.feed(text));
    take(reply.finish());
    if (calls.size() != 1 || !content.empty() || calls[0].name != parsed->name ||
        calls[0].arguments != parsed->arguments) {
      std::fprintf(stderr, "the reply parser split the call differently:\n%s\n", call.c_str());
      std::abort();
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto [tools_text, reply] = megaqwen::fuzz::split_at_nul(data, size);
  std::vector<ordered_json> tools;
  try {
    // The shape the request parser guarantees: a list of {"function": {"name": string, ...}}.
    const ordered_json list = ordered_json::parse(tools_text);
    if (!list.is_array() || list.empty()) return 0;
    for (const ordered_json& t : list) {
      if (!t.is_object() || !t.contains("function") || !t["function"].is_object() ||
          !t["function"].contains("name") || !t["function"]["name"].is_string())
        return 0;
      tools.push_back(t);
    }
  } catch (const std::exception&) {
    return 0;  // not a tool list: not this target's subject
  }
  try {
    auto grammar = std::make_shared<const megaqwen::XmlToolCallGrammar>(megaqwen::XmlToolCallGrammar::from_tools(tools, ""));
    megaqwen::XmlToolCallRecognizer r(grammar);
    // A newline, then '<' and '/', lead out of text values; else the first allowed byte (bounded).
    megaqwen::fuzz::read_then_walk(r, reply, 512, "\n</", [&](const std::string& call) { must_parse(call, tools, *grammar); });
  } catch (const megaqwen::Error&) {
    // Refused with a message: tools the XML form cannot carry.
  } catch (const std::exception& e) {
    std::fprintf(stderr, "unexpected exception: %s\n", e.what());
    std::abort();
  }
  return 0;
}
