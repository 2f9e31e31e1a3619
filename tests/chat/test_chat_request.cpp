// parse_chat_request: malformed requests fail with an Error naming the field, never crash.
#include <gtest/gtest.h>

#include "megaqwen/chat/chat_request.h"
#include "megaqwen/util/error.h"

namespace megaqwen {
namespace {

using nlohmann::ordered_json;

// The Error message of parsing `request`, or "" when it parses.
std::string parse_error(const char* request) {
  try {
    parse_chat_request(ordered_json::parse(request));
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ChatRequest, ParsesTheOpenAiShape) {
  const ChatRequest request = parse_chat_request(ordered_json::parse(R"({
    "messages": [{"role": "user", "content": "hi"},
                 {"role": "assistant", "content": null, "reasoning_content": "r",
                  "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {"b": 1, "a": 2}}},
                                 {"name": "flat", "arguments": "{}"},
                                 {"function": {"name": "bare"}}]}],
    "tools": [{"type": "function"}], "add_generation_prompt": true, "enable_thinking": false})"));
  ASSERT_EQ(request.messages.size(), 2u);
  EXPECT_EQ(request.messages[0].content, "hi");
  EXPECT_TRUE(request.messages[1].content.is_null());
  EXPECT_EQ(request.messages[1].reasoning_content, "r");
  ASSERT_EQ(request.messages[1].tool_calls.size(), 3u);
  EXPECT_EQ(request.messages[1].tool_calls[0].name, "f");
  EXPECT_EQ(request.messages[1].tool_calls[0].arguments->dump(), R"({"b":1,"a":2})");  // order kept
  EXPECT_EQ(request.messages[1].tool_calls[1].name, "flat");
  EXPECT_EQ(*request.messages[1].tool_calls[1].arguments, "{}");
  EXPECT_FALSE(request.messages[1].tool_calls[2].arguments.has_value());
  EXPECT_EQ(request.tools.size(), 1u);
  EXPECT_TRUE(request.add_generation_prompt);
  EXPECT_EQ(request.enable_thinking, false);
}

TEST(ChatRequest, DefaultsWhenOptionalFieldsAreMissingOrNull) {
  const ChatRequest request = parse_chat_request(ordered_json::parse(
      R"({"messages": [{"role": "user"}], "tools": null, "enable_thinking": null})"));
  EXPECT_TRUE(request.messages[0].content.is_null());
  EXPECT_TRUE(request.tools.empty());
  EXPECT_FALSE(request.add_generation_prompt);
  EXPECT_FALSE(request.enable_thinking.has_value());
}

TEST(ChatRequest, RejectsMalformedShapes) {
  EXPECT_NE(parse_error("[]").find("must be a JSON object"), std::string::npos);
  EXPECT_NE(parse_error("{}").find("\"messages\" must be an array, not missing"), std::string::npos);
  EXPECT_NE(parse_error(R"({"messages": {"role": "user"}})").find("\"messages\" must be an array"), std::string::npos);
  EXPECT_EQ(parse_error(R"({"messages": []})"), "");  // templates word this error themselves
  EXPECT_NE(parse_error(R"({"messages": ["hi"]})").find("messages[0] must be an object"), std::string::npos);
  EXPECT_NE(parse_error(R"({"messages": [{"content": "x"}]})").find("messages[0].role must be a string, not missing"),
            std::string::npos);
  EXPECT_NE(parse_error(R"({"messages": [{"role": "user"}, {"role": ["user"]}]})").find("messages[1].role"),
            std::string::npos);
  EXPECT_NE(parse_error(R"({"messages": [{"role": "assistant", "reasoning_content": 1}]})")
                .find("messages[0].reasoning_content must be a string"),
            std::string::npos);
  EXPECT_NE(parse_error(R"({"messages": [{"role": "assistant", "tool_calls": {"name": "f"}}]})")
                .find("messages[0].tool_calls must be an array"),
            std::string::npos);
  EXPECT_NE(parse_error(R"({"messages": [{"role": "assistant", "tool_calls": ["f"]}]})")
                .find("messages[0].tool_calls[0] must be an object"),
            std::string::npos);
  EXPECT_NE(parse_error(R"({"messages": [{"role": "assistant", "tool_calls": [{"function": "f"}]}]})")
                .find("messages[0].tool_calls[0].function must be an object"),
            std::string::npos);
  EXPECT_NE(parse_error(R"({"messages": [{"role": "assistant", "tool_calls": [{"function": {"arguments": {}}}]}]})")
                .find("messages[0].tool_calls[0].function.name must be a string"),
            std::string::npos);
  EXPECT_NE(parse_error(R"({"messages": [{"role": "user"}], "tools": {}})").find("\"tools\" must be an array"),
            std::string::npos);
  EXPECT_NE(parse_error(R"({"messages": [{"role": "user"}], "add_generation_prompt": "yes"})")
                .find("\"add_generation_prompt\" must be true or false"),
            std::string::npos);
  EXPECT_NE(parse_error(R"({"messages": [{"role": "user"}], "enable_thinking": 0})")
                .find("\"enable_thinking\" must be true or false"),
            std::string::npos);
}

}  // namespace
}  // namespace megaqwen
