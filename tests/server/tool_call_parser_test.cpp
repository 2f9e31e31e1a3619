// Tool calls parsed from crafted model output in both Qwen formats (the tiny test model only
// produces noise, so the parser's rules are pinned here).
#include "megaqwen/server/tool_call_parser.h"

#include <gtest/gtest.h>

namespace megaqwen::server {
namespace {

using nlohmann::ordered_json;

TEST(ToolCallParser, HermesJson) {
  auto call = parse_tool_call("\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3}}\n");
  ASSERT_TRUE(call);
  EXPECT_EQ(call->name, "get_weather");
  EXPECT_EQ(ordered_json::parse(call->arguments), ordered_json::parse(R"({"city": "Paris", "days": 3})"));
}

TEST(ToolCallParser, HermesJsonWithStringArgumentsAndNoArguments) {
  auto call = parse_tool_call(R"({"name": "f", "arguments": "{\"x\": 1}"})");
  ASSERT_TRUE(call);
  EXPECT_EQ(call->arguments, R"({"x":1})");
  auto bare = parse_tool_call(R"({"name": "now"})");
  ASSERT_TRUE(bare);
  EXPECT_EQ(bare->arguments, "{}");
}

TEST(ToolCallParser, RejectsMalformedJson) {
  EXPECT_FALSE(parse_tool_call(R"({"name": "f", "arguments": {"x": 1})"));  // unbalanced
  EXPECT_FALSE(parse_tool_call(R"({"arguments": {}})"));                    // no name
  EXPECT_FALSE(parse_tool_call(R"({"name": 7, "arguments": {}})"));
  EXPECT_FALSE(parse_tool_call(R"({"name": "f", "arguments": [1, 2]})"));  // not an object
  EXPECT_FALSE(parse_tool_call("just some text"));
  EXPECT_FALSE(parse_tool_call(""));
}

TEST(ToolCallParser, QwenXmlFormat) {
  const char* body =
      "\n<function=get_weather>\n<parameter=city>\nSan Francisco\n</parameter>\n<parameter=days>\n3\n</parameter>\n"
      "<parameter=options>\n{\"units\": \"metric\"}\n</parameter>\n</function>\n";
  auto call = parse_tool_call(body);
  ASSERT_TRUE(call);
  EXPECT_EQ(call->name, "get_weather");
  EXPECT_EQ(ordered_json::parse(call->arguments),
            ordered_json::parse(R"({"city": "San Francisco", "days": 3, "options": {"units": "metric"}})"));
}

TEST(ToolCallParser, XmlValuesFollowTheToolSchema) {
  // "zip" is declared a string: "02139" must not become the number 2139.
  std::vector<ordered_json> tools = {ordered_json::parse(
      R"({"type": "function", "function": {"name": "lookup", "parameters": {"type": "object",
          "properties": {"zip": {"type": "string"}, "limit": {"type": "integer"}}}}})")};
  auto call = parse_tool_call("<function=lookup>\n<parameter=zip>\n02139\n</parameter>\n<parameter=limit>\n5\n"
                              "</parameter>\n</function>",
                              tools);
  ASSERT_TRUE(call);
  EXPECT_EQ(ordered_json::parse(call->arguments), ordered_json::parse(R"({"zip": "02139", "limit": 5})"));
}

TEST(ToolCallParser, XmlReadsThePythonFormsTheTemplateWritesWhereTheSchemaTypesThem) {
  // The Qwen3.5 template renders booleans and nulls with Python's str(): True, False, None.
  std::vector<ordered_json> tools = {ordered_json::parse(
      R"({"type": "function", "function": {"name": "alarm", "parameters": {"type": "object",
          "properties": {"loud": {"type": "boolean"}, "note": {"type": ["string", "null"]},
                         "label": {"type": "string"}}}}})")};
  auto call = parse_tool_call("<function=alarm>\n<parameter=loud>\nTrue\n</parameter>\n<parameter=note>\nNone\n"
                              "</parameter>\n<parameter=label>\nFalse\n</parameter>\n<parameter=x>\nTrue\n"
                              "</parameter>\n</function>",
                              tools);
  ASSERT_TRUE(call);
  // label is declared a string, x is not declared: both keep the text.
  EXPECT_EQ(ordered_json::parse(call->arguments),
            ordered_json::parse(R"({"loud": true, "note": null, "label": "False", "x": "True"})"));
}

TEST(ToolCallParser, XmlMultilineValueKeepsInnerNewlines) {
  auto call = parse_tool_call("<function=write>\n<parameter=text>\nline 1\nline 2\n</parameter>\n</function>");
  ASSERT_TRUE(call);
  EXPECT_EQ(ordered_json::parse(call->arguments)["text"], "line 1\nline 2");
}

TEST(ToolCallParser, RejectsMalformedXml) {
  EXPECT_FALSE(parse_tool_call("<function=f>\n<parameter=x>\n1\n</function>"));  // unclosed parameter
  EXPECT_FALSE(parse_tool_call("<function=>\n</function>"));                     // no name
  EXPECT_FALSE(parse_tool_call("<function=f>\nstray text\n</function>"));
  EXPECT_FALSE(parse_tool_call("<function=f>"));                                 // unclosed function
}

TEST(ToolCallParser, InvalidUtf8InAValueIsReplacedNotThrown) {
  auto call = parse_tool_call("<function=f>\n<parameter=x>\nab\xff\n</parameter>\n</function>");
  ASSERT_TRUE(call);
  EXPECT_EQ(ordered_json::parse(call->arguments)["x"], "ab\xEF\xBF\xBD");
}

TEST(ToolCallParser, IdsAreUniqueAndWellFormed) {
  const std::string a = make_tool_call_id(), b = make_tool_call_id();
  EXPECT_NE(a, b);
  ASSERT_EQ(a.size(), 29u);
  EXPECT_TRUE(a.starts_with("call_"));
  for (char c : a.substr(5)) EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(c))) << a;
}

}  // namespace
}  // namespace megaqwen::server
