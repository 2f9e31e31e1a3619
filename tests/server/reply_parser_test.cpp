// ReplyParser: reasoning, content and tool calls split apart, and the same split whether the reply
// arrives whole or one character at a time (tags cut anywhere).
#include "megaqwen/server/reply_parser.h"

#include <gtest/gtest.h>

namespace megaqwen::server {
namespace {

struct Split {
  std::string reasoning, content;
  std::vector<ParsedToolCall> calls;
};

Split collect(ReplyParser parser, const std::vector<std::string>& pieces) {
  Split s;
  auto add = [&](const ReplyDelta& d) {
    s.reasoning += d.reasoning;
    s.content += d.content;
    s.calls.insert(s.calls.end(), d.tool_calls.begin(), d.tool_calls.end());
  };
  for (const auto& p : pieces) add(parser.feed(p));
  add(parser.finish());
  return s;
}

std::vector<std::string> whole(const std::string& text) { return {text}; }
std::vector<std::string> by_char(const std::string& text) {
  std::vector<std::string> pieces;
  for (char c : text) pieces.emplace_back(1, c);
  return pieces;
}

void expect_same_both_ways(const ReplyParser& parser, const std::string& text, const Split& want) {
  for (const auto& pieces : {whole(text), by_char(text)}) {
    Split got = collect(parser, pieces);
    EXPECT_EQ(got.reasoning, want.reasoning) << "pieces: " << pieces.size();
    EXPECT_EQ(got.content, want.content) << "pieces: " << pieces.size();
    ASSERT_EQ(got.calls.size(), want.calls.size()) << "pieces: " << pieces.size();
    for (size_t i = 0; i < got.calls.size(); ++i) {
      EXPECT_EQ(got.calls[i].name, want.calls[i].name);
      EXPECT_EQ(got.calls[i].arguments, want.calls[i].arguments);
    }
  }
}

TEST(ReplyParser, ThinkingThenAnswer) {
  expect_same_both_ways(ReplyParser(false, {}, false), "<think>\nLet me see.\n</think>\n\nThe answer is 4.",
                        {"Let me see.", "The answer is 4.", {}});
}

TEST(ReplyParser, PlainAnswerHasNoReasoning) {
  expect_same_both_ways(ReplyParser(false, {}, false), "Hello <b>there</b> <thinking aloud>",
                        {"", "Hello <b>there</b> <thinking aloud>", {}});
}

TEST(ReplyParser, PromptOpenedTheThinkBlock) {
  // Qwen3.5 with thinking on: the reply starts inside <think> without the tag.
  expect_same_both_ways(ReplyParser(true, {}, false), "hmm\n\nok\n</think>\n\nDone", {"hmm\n\nok", "Done", {}});
}

TEST(ReplyParser, UnfinishedThinkingStaysReasoning) {
  expect_same_both_ways(ReplyParser(false, {}, false), "<think>\nstill going", {"still going", "", {}});
}

TEST(ReplyParser, ToolCallsBetweenContent) {
  const std::string text =
      "<think>\nneed weather\n</think>\n\nChecking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
      "{\"city\": \"Oslo\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>";
  expect_same_both_ways(ReplyParser(false, {}, true), text,
                        {"need weather",
                         "Checking.\n\n",
                         {{"get_weather", R"({"city":"Oslo"})"}, {"now", "{}"}}});
}

TEST(ReplyParser, ToolCallTagsAreTextWhenToolsAreOff) {
  const std::string text = "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>";
  expect_same_both_ways(ReplyParser(false, {}, false), text, {"", text, {}});
}

TEST(ReplyParser, MalformedOrUnfinishedToolCallStaysContent) {
  const std::string bad = "<tool_call>\nnot json\n</tool_call>";
  expect_same_both_ways(ReplyParser(false, {}, true), "a " + bad + " b", {"", "a " + bad + " b", {}});
  expect_same_both_ways(ReplyParser(false, {}, true), "x <tool_call>\n{\"name\": \"f\"",
                        {"", "x <tool_call>\n{\"name\": \"f\"", {}});
}

TEST(ReplyParser, AnArgumentMayHoldTheClosingTag) {
  // Inside a JSON string (Qwen3) or a parameter's value (Qwen3.5) "</tool_call>" is the argument's text.
  const std::string json = "<tool_call>\n{\"name\": \"say\", \"arguments\": {\"text\": \"a \\\"</tool_call>\"}}\n</tool_call>ok";
  expect_same_both_ways(ReplyParser(false, {}, true), json, {"", "ok", {{"say", R"({"text":"a \"</tool_call>"})"}}});
  const std::string xml =
      "<tool_call>\n<function=say>\n<parameter=text>\n</tool_call>\n</parameter>\n<parameter=n>\n2\n</parameter>\n"
      "</function>\n</tool_call>\n<tool_call>\n<function=now>\n</function>\n</tool_call>";
  expect_same_both_ways(ReplyParser(false, {}, true), xml,
                        {"", "", {{"say", R"({"text":"</tool_call>","n":2})"}, {"now", "{}"}}});
  // A string or value that never closes: at the end the call ends at its first tag, as text.
  const std::string open = "<tool_call>\n{\"name\": \"f\", \"x\": \"</tool_call> b";
  expect_same_both_ways(ReplyParser(false, {}, true), open, {"", open, {}});
  const std::string open_xml = "<tool_call>\n<function=f>\n<parameter=x>\n</tool_call> b";
  expect_same_both_ways(ReplyParser(false, {}, true), open_xml, {"", open_xml, {}});
}

TEST(ReplyParser, HoldsBackOnlyWhatCouldBeATag) {
  ReplyParser parser(false, {}, true);
  EXPECT_EQ(parser.feed("Hi <tool").content, "Hi ");  // "<tool" may begin <tool_call>
  EXPECT_EQ(parser.feed("s are fun").content, "<tools are fun");
  ReplyParser thinking(false, {}, false);
  ReplyDelta first = thinking.feed("<thi");  // may still be <think>
  EXPECT_TRUE(first.empty());
  EXPECT_EQ(thinking.feed("nk>\nabc\n</thi").reasoning, "abc");  // the newline may precede </think>
  EXPECT_EQ(thinking.feed("nk>\nok").content, "ok");
}

}  // namespace
}  // namespace megaqwen::server
