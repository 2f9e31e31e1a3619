// JsonGrammar::from_schema: what it compiles to, and the clear errors for schemas it cannot honour.
#include "megaqwen/grammar/json_grammar.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "megaqwen/util/error.h"

namespace megaqwen {
namespace {

using ojson = nlohmann::ordered_json;
using Kind = JsonGrammar::Kind;

std::string error_of(const std::string& schema) {
  try {
    JsonGrammar::from_schema(ojson::parse(schema), "response_format.json_schema.schema");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(JsonGrammar, CompilesPropertiesInOrderWithTheirKeysAsJsonWritesThem) {
  const JsonGrammar g = JsonGrammar::from_schema(ojson::parse(
      R"({"type": "object", "properties": {"z": {"type": "string"}, "a\"b": {"type": "integer"}, "é": {}},
          "required": ["a\"b"]})"));
  const JsonGrammar::Node& root = g.nodes[size_t(g.root)];
  ASSERT_EQ(root.kind, Kind::Object);
  ASSERT_EQ(root.properties.size(), 3u);
  EXPECT_EQ(root.properties[0].key_text, "z\"");
  EXPECT_EQ(root.properties[1].key_text, "a\\\"b\"");
  EXPECT_EQ(root.properties[2].key_text, "é\"");
  EXPECT_FALSE(root.properties[0].required);
  EXPECT_TRUE(root.properties[1].required);
  EXPECT_EQ(g.nodes[size_t(root.properties[1].node)].kind, Kind::Integer);
  EXPECT_EQ(root.properties[2].node, g.any);
  EXPECT_EQ(root.additional, -1) << "declared properties and no additionalProperties: no extra keys";
}

TEST(JsonGrammar, EnumsBecomeSortedDistinctLiteralsOfTheirType) {
  const JsonGrammar g =
      JsonGrammar::from_schema(ojson::parse(R"({"type": "string", "enum": ["b", "a", "b", 3, null]})"));
  const JsonGrammar::Node& n = g.nodes[size_t(g.root)];
  ASSERT_EQ(n.kind, Kind::Literals);
  EXPECT_EQ(n.literals, (std::vector<std::string>{"\"a\"", "\"b\""}));
}

TEST(JsonGrammar, TypeListsAndNullableBecomeAlternatives) {
  const JsonGrammar g = JsonGrammar::from_schema(ojson::parse(R"({"type": ["string", "null"], "maxLength": 4})"));
  const JsonGrammar::Node& n = g.nodes[size_t(g.root)];
  ASSERT_EQ(n.kind, Kind::AnyOf);
  ASSERT_EQ(n.alternatives.size(), 2u);
  EXPECT_EQ(g.nodes[size_t(n.alternatives[0])].kind, Kind::String);
  EXPECT_EQ(g.nodes[size_t(n.alternatives[0])].max, 4u);
  EXPECT_EQ(g.nodes[size_t(n.alternatives[1])].literals, (std::vector<std::string>{"null"}));
}

TEST(JsonGrammar, NamesThePathAndKeywordItCannotHonour) {
  const std::string p = "response_format.json_schema.schema";
  EXPECT_NE(error_of(R"({"type": "object", "properties": {"d": {"type": "string", "format": "uri"}}})")
                .find(p + ".properties.d.format: the format \"uri\" is not supported"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"type": "integer", "minimum": 0})").find(p + ": the keyword \"minimum\" is not supported"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"type": "string", "pattern": "(a)\\1"})").find(p + ".pattern: in the pattern: backreferences"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"type": "string", "pattern": "^a", "maxLength": 3})").find("beside a pattern"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"type": "string", "pattern": "a{70}"})").find("too long to generate"), std::string::npos);
  EXPECT_NE(error_of(R"({"type": "string", "pattern": "[^\\s\\S]"})").find("empty character class"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"type": "strin"})").find("unknown type \"strin\""), std::string::npos);
  EXPECT_NE(error_of(R"({"type": "string", "minLength": 3, "maxLength": 2})").find("no value fits"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"type": "array", "minItems": -1})").find(p + ".minItems: must be a non-negative integer"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"properties": {"a": {}}, "required": ["b"]})").find("\"b\" is not among the properties"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"enum": []})").find("non-empty"), std::string::npos);
  EXPECT_NE(error_of(R"({"type": "integer", "enum": ["a"]})").find("no enum value is of the schema's type"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"$ref": "#/$defs/missing"})").find("points at nothing"), std::string::npos);
  EXPECT_NE(error_of(R"({"$ref": "https://example.com/s.json"})").find("only references inside the schema"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"$ref": "#"})").find("cycle"), std::string::npos);
  EXPECT_NE(error_of(R"({"anyOf": []})").find("non-empty list"), std::string::npos);
  EXPECT_NE(error_of("false").find("admits no value"), std::string::npos);
  EXPECT_NE(error_of("[1]").find("must be an object or a boolean"), std::string::npos);
  EXPECT_NE(error_of(R"({"type": "array", "items": [{}]})").find("tuple form"), std::string::npos);
  std::string many = R"({"type": "object", "properties": {)";
  for (int i = 0; i < 65; ++i) many += fmt::format("{}\"p{}\": {{}}", i ? "," : "", i);
  EXPECT_NE(error_of(many + "}}").find("at most 64"), std::string::npos);
  // Literals are matched byte by byte with a 16-bit position: bounded well below it.
  const std::string long_text(JsonGrammar::kMaxLiteralBytes, 'x');
  EXPECT_NE(error_of(R"({"enum": [")" + long_text + R"("]})").find("an enum or const value of 4098 bytes (as JSON); at most 4096"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"properties": {")" + long_text + R"(": {}}})").find("a property name of 4098 bytes"),
            std::string::npos);
  EXPECT_EQ(error_of(R"({"const": ")" + long_text.substr(2) + R"("})"), "");
}

TEST(JsonGrammar, AcceptsAnnotationsAndPydanticStyleSchemas) {
  // What pydantic's model_json_schema() writes for a model with an optional nested model.
  const ojson schema = ojson::parse(R"({
    "$defs": {"Address": {"properties": {"city": {"title": "City", "type": "string"}},
                          "required": ["city"], "title": "Address", "type": "object"}},
    "properties": {
      "name": {"title": "Name", "type": "string", "description": "who"},
      "address": {"anyOf": [{"$ref": "#/$defs/Address"}, {"type": "null"}], "default": null}},
    "required": ["name"], "title": "Person", "type": "object"})");
  EXPECT_NO_THROW(JsonGrammar::from_schema(schema));
}

}  // namespace
}  // namespace megaqwen
