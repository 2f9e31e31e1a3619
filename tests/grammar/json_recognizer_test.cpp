// JsonRecognizer over grammars compiled from schemas: the JSON it must take (compact and pretty),
// what it must refuse, and random byte walks: every prefix it allows can be completed, and every
// whole value it allows parses and validates against the schema.
#include "megaqwen/grammar/json_recognizer.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "grammar/random_walk.h"
#include "grammar/schema_validator.h"
#include "megaqwen/util/error.h"

namespace megaqwen {
namespace {

using test::ojson;

std::shared_ptr<const JsonGrammar> grammar_of(const ojson& schema) {
  return std::make_shared<const JsonGrammar>(JsonGrammar::from_schema(schema));
}

bool accepts(const std::shared_ptr<const JsonGrammar>& g, std::string_view text) {
  JsonRecognizer r(g);
  return r.advance(text) && r.complete();
}

// Whether `text` is a prefix the recognizer allows (not necessarily whole).
bool allows_prefix(const std::shared_ptr<const JsonGrammar>& g, std::string_view text) {
  JsonRecognizer r(g);
  return r.advance(text);
}

const ojson kPerson = ojson::parse(R"({
  "type": "object",
  "properties": {
    "name": {"type": "string", "minLength": 1, "maxLength": 8},
    "age": {"type": "integer"},
    "email": {"type": ["string", "null"]},
    "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "minItems": 1, "maxItems": 3},
    "score": {"type": "number"}
  },
  "required": ["name", "age"],
  "additionalProperties": false
})");

const ojson kTree = ojson::parse(R"({
  "$defs": {"node": {"type": "object", "properties": {
    "value": {"type": "integer"},
    "children": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2}},
    "required": ["value"]}},
  "$ref": "#/$defs/node"
})");

const ojson kAmbiguous = ojson::parse(R"({"anyOf": [
  {"type": "object", "properties": {"a": {"const": 1}}, "required": ["a"]},
  {"type": "object", "properties": {"a": {"const": 12}, "b": {"type": "boolean"}}, "required": ["a", "b"]},
  {"type": "array", "items": {"type": "number"}}
]})");

const ojson kEnum = ojson::parse(R"({"enum": [1, 12, 123, "x", null, true, {"k": [1]}, -0.5]})");

const ojson kExtra = ojson::parse(R"({"type": "object", "properties": {"id": {"type": "integer"}},
  "required": ["id"], "additionalProperties": {"type": "string", "maxLength": 3}})");

const ojson kFormats = ojson::parse(R"({"type": "object", "required": ["id", "code", "answer", "day", "at", "mail"],
  "properties": {"id": {"type": "string", "format": "uuid"}, "code": {"type": "string", "pattern": "^[a-z]{2,4}-\\d+$"},
                 "answer": {"type": "string", "pattern": "^(yes|no)$"}, "day": {"type": "string", "format": "date"},
                 "at": {"type": "string", "format": "date-time"}, "mail": {"type": "string", "format": "email"},
                 "free": {"type": "string", "pattern": "[^\"\\\\]z"}}})");

// Found by fuzz_json_schema: a pattern asking for control characters, which JSON can only write as
// \u escapes (once as the regex's escape, once as the character itself).
const ojson kControl = ojson::parse(R"({"type": "object", "required": ["c", "d"], "properties": {
  "c": {"type": "string", "pattern": "^a\\u0001(b|\\u0000)$"}, "d": {"type": "string", "pattern": "^\u001f+$"}}})");

const ojson kOddKeys = ojson::parse(R"({"type": "object", "properties": {
  "a\"b": {"type": "string"}, "ü": {"type": "boolean"}, "": {"type": "null"}}, "required": ["a\"b", "ü", ""]})");

TEST(JsonRecognizer, TakesConformingValuesCompactAndPretty) {
  const std::vector<std::pair<ojson, std::vector<ojson>>> cases = {
      {kPerson,
       {ojson::parse(R"({"name": "Ann", "age": 30})"),
        ojson::parse(R"({"name": "Bob Lee", "age": -7, "email": null, "tags": ["a", "c"], "score": 1.5e3})"),
        ojson::parse(R"({"name": "Żółw", "age": 0, "email": "z@x.pl", "score": -0.25})"),
        ojson::parse(R"({"name": "x", "age": 1, "tags": ["b", "b", "b"]})")}},
      {kTree,
       {ojson::parse(R"({"value": 1})"),
        ojson::parse(R"({"value": 1, "children": [{"value": 2}, {"value": 3, "children": [{"value": 4}]}]})")}},
      {kAmbiguous,
       {ojson::parse(R"({"a": 1})"), ojson::parse(R"({"a": 12, "b": false})"), ojson::parse("[1, 2.5, -3e-2]"),
        ojson::parse("[]")}},
      {kEnum, {1, 12, 123, "x", nullptr, true, ojson::parse(R"({"k": [1]})"), -0.5}},
      {kExtra, {ojson::parse(R"({"id": 5})"), ojson::parse(R"({"id": 5, "zz": "abc", "q": ""})")}},
      {kOddKeys, {ojson::parse(R"({"a\"b": "\n\u00e9", "ü": true, "": null})")}},
      {ojson::parse(R"({"type": "number"})"), {0, -1, 3.25, 1e99, -2.5e-7, 12345678901234567}},
      {ojson::parse(R"({"type": "integer"})"), {0, -15, 900}},
      {ojson::parse("true"), {ojson::parse(R"({"x": [1, {"y": null}], "s": "\t\u0001"})"), "s", 0.5, false}},
  };
  for (const auto& [schema, values] : cases) {
    const auto g = grammar_of(schema);
    for (const ojson& v : values) {
      EXPECT_TRUE(accepts(g, v.dump())) << schema.dump() << "\n  " << v.dump();
      if (schema != kEnum) {  // enum values are matched as compact text
        EXPECT_TRUE(accepts(g, v.dump(2))) << schema.dump() << "\n  " << v.dump(2);
      }
      EXPECT_TRUE(accepts(g, "\n\n " + v.dump())) << "leading whitespace: " << v.dump();
    }
  }
}

TEST(JsonRecognizer, RefusesWhatTheSchemaDoesNot) {
  const auto person = grammar_of(kPerson);
  for (const char* bad : {
           R"({"age": 3, "name": "Ann"})",                  // declared order
           R"({"name": "Ann"})",                            // required age
           R"({"name": "", "age": 3})",                     // minLength
           R"({"name": "abcdefghi", "age": 3})",            // maxLength (9 characters)
           R"({"name": "Ann", "age": 3.5})",                // integer
           R"({"name": "Ann", "age": 3, "x": 1})",          // additionalProperties false
           R"({"name": "Ann", "age": 3, "tags": []})",      // minItems
           R"({"name": "Ann", "age": 3, "tags": ["a","a","a","a"]})",  // maxItems
           R"({"name": "Ann", "age": 3, "tags": ["d"]})",   // enum
           R"({"name": "Ann", "age": 03})",                 // leading zero
           R"({"name": "Ann", "age": 3,})",                 // trailing comma
           R"({"name": "A\x", "age": 3})",                  // bad escape
           R"({"name": "\ud83d\ude00", "age": 3})",         // surrogate escapes
           "{\"name\": \"A\x01\", \"age\": 3}",             // raw control character
           "{\"name\": \"\xC0\xAF\", \"age\": 3}",          // overlong UTF-8
           "{\"name\": \"\xED\xA0\x80\", \"age\": 3}",      // UTF-8 surrogate
           R"({"name": "Ann", "age": 3} )",                 // bytes after the value
           R"([])",
       })
    EXPECT_FALSE(accepts(person, bad)) << bad;
  const auto amb = grammar_of(kAmbiguous);
  for (const char* bad : {R"({"a": 12})", R"({"a": 1, "b": true})", R"({"a": 123})", R"(["x"])"})
    EXPECT_FALSE(accepts(amb, bad)) << bad;
  const auto extra = grammar_of(kExtra);
  EXPECT_FALSE(accepts(extra, R"({"zz": "a", "id": 5})"));  // extra keys after the declared ones
  EXPECT_FALSE(accepts(extra, R"({"id": 5, "zz": "abcd"})"));
  const auto control = grammar_of(kControl);
  EXPECT_TRUE(accepts(control, R"({"c": "a\u0001b", "d": "\u001F"})"));
  EXPECT_TRUE(accepts(control, R"({"c": "a\u0001\u0000", "d": "\u001f\u001f"})"));
  for (const char* bad : {R"({"c": "a\u0002b", "d": "\u001f"})", R"({"c": "a\u0001bb", "d": "\u001f"})",
                          R"({"c": "a\u0001b", "d": "\u0020"})", "{\"c\": \"a\x01b\", \"d\": \"\\u001f\"}"})
    EXPECT_FALSE(accepts(control, bad)) << bad;
  EXPECT_FALSE(allows_prefix(control, R"({"c": "a\u1)"));  // no character it could become is allowed
  const auto e = grammar_of(kEnum);
  for (const char* bad : {"2", "1234", "\"y\"", "false", "{\"k\": [2]}", "-0.50", "{\"k\":[1]} "})
    EXPECT_FALSE(accepts(e, bad)) << bad;
  // Prefixes: a number may still grow; an unfinished object is not whole.
  EXPECT_TRUE(allows_prefix(e, "12"));
  EXPECT_TRUE(accepts(e, "12"));
  EXPECT_TRUE(allows_prefix(person, "{\"name\": \"A"));
  EXPECT_FALSE(accepts(person, "{\"name\": \"A\""));
}

TEST(JsonRecognizer, BoundsWhitespaceNumbersAndDepth) {
  const auto any = std::make_shared<const JsonGrammar>(JsonGrammar::object());
  EXPECT_TRUE(allows_prefix(any, std::string(JsonRecognizer::kMaxWhitespace, ' ')));
  EXPECT_FALSE(allows_prefix(any, std::string(JsonRecognizer::kMaxWhitespace + 1, ' ')));
  EXPECT_TRUE(accepts(any, "{\"a\":" + std::string(JsonRecognizer::kMaxWhitespace, '\n') + "1}"));
  EXPECT_FALSE(accepts(any, "[]")) << "json_object means an object";
  const auto number = grammar_of(ojson::parse(R"({"type": "number"})"));
  EXPECT_TRUE(accepts(number, std::string(JsonRecognizer::kMaxNumberBytes, '7')));
  EXPECT_FALSE(allows_prefix(number, std::string(JsonRecognizer::kMaxNumberBytes + 1, '7')));
  // At the byte limit a number must be able to end: "1e" with one byte left would be stuck.
  EXPECT_FALSE(allows_prefix(number, std::string(JsonRecognizer::kMaxNumberBytes - 1, '1') + "e"));
  EXPECT_TRUE(accepts(number, std::string(JsonRecognizer::kMaxNumberBytes - 2, '1') + "e5"));
  EXPECT_TRUE(accepts(number, "-1.5E+99"));
  EXPECT_FALSE(allows_prefix(number, "1e999")) << "exponents of two digits";
  const auto integer = grammar_of(ojson::parse(R"({"type": "integer"})"));
  EXPECT_TRUE(accepts(integer, "-99999999999999999"));
  EXPECT_TRUE(accepts(integer, "999999999999999999"));
  EXPECT_FALSE(allows_prefix(integer, "9999999999999999999")) << "19 digits could pass int64";
  std::string deep = "{\"a\":";
  for (int i = 0; i < 40; ++i) deep += "[";
  EXPECT_FALSE(allows_prefix(any, deep));
  std::string ok = "{\"a\":";
  for (int i = 0; i < JsonRecognizer::kMaxDepth - 2; ++i) ok += "[";
  EXPECT_TRUE(allows_prefix(any, ok));
}

// A random byte walk (random_walk.h) that may end at any whole value, and past `soft_limit` bytes
// does, preferring the bytes that close a value.
std::string random_walk(const std::shared_ptr<const JsonGrammar>& g, std::mt19937_64& rng, size_t soft_limit) {
  struct Policy {
    size_t soft_limit;
    bool stop(const JsonRecognizer::State&, const std::string& text, std::mt19937_64& rng) const {
      return rng() % 3 == 0 || text.size() > soft_limit;
    }
    bool must_close(const JsonRecognizer::State&) const { return false; }
    int closer(const JsonRecognizer::State&, const std::vector<uint8_t>& fits, std::mt19937_64&) const {
      return test::json_closer(fits);
    }
  };
  return test::random_byte_walk(JsonRecognizer(g), rng, soft_limit, Policy{soft_limit});
}

TEST(JsonRecognizer, RandomWalksNeverDeadEndAndAlwaysValidate) {
  std::mt19937_64 rng(20261121);
  const std::vector<ojson> schemas = {kPerson, kTree, kAmbiguous, kEnum, kExtra, kOddKeys, kFormats, kControl,
                                      ojson::parse(R"({"type": "object"})"), ojson::parse("{}")};
  for (const ojson& schema : schemas) {
    const auto g = grammar_of(schema);
    for (int i = 0; i < 60; ++i) {
      const std::string text = random_walk(g, rng, 40 + 10 * size_t(i % 8));
      ojson v;
      try {
        v = ojson::parse(text);
      } catch (const std::exception& e) {
        ADD_FAILURE() << schema.dump() << "\n  not JSON: " << text << "\n  " << e.what();
        continue;
      }
      EXPECT_TRUE(test::validates(v, schema, schema)) << schema.dump() << "\n  " << text;
    }
  }
}

// A free key (additionalProperties) equal to a declared name would give that property a value of
// another schema (or repeat it): refused, however it is spelled. Free keys use only the escapes JSON
// writes (no \u, no \/), so an equal name is equal bytes.
TEST(JsonRecognizer, FreeKeysAreNeverADeclaredName) {
  const auto g = grammar_of(ojson::parse(R"({"type": "object",
      "properties": {"a": {"type": "integer"}, "b\"c": {"type": "integer"}, "é": {"type": "integer"}},
      "additionalProperties": {"type": "string"}})"));
  EXPECT_TRUE(accepts(g, R"({"a": 1, "c": "x", "bb": "y"})"));
  EXPECT_TRUE(accepts(g, R"({"c": "x"})"));
  EXPECT_TRUE(accepts(g, R"({"a": 1, "b\"": "x", "b\"cd": "y", "éé": "z", "\n": "w"})"));
  EXPECT_FALSE(accepts(g, R"({"a": 1, "b\"c": "x"})"));   // a declared name, another schema
  EXPECT_FALSE(accepts(g, R"({"b\"c": 1, "a": "x"})"));   // a skipped declared name
  EXPECT_FALSE(accepts(g, R"({"a": 1, "é": "x"})"));      // UTF-8 names too
  EXPECT_FALSE(accepts(g, R"({"a": 1, "a": 2})"));        // never twice
  EXPECT_FALSE(accepts(g, R"({"\u0061": "x"})"));        // no \u in free keys
  EXPECT_FALSE(accepts(g, R"({"x\/y": "x"})"));          // nor \/
  EXPECT_TRUE(accepts(g, R"({"b\"c": 1})"));
}

TEST(JsonRecognizer, FollowsTheSchemaKeyOrder) {
  const auto g = grammar_of(kPerson);
  std::mt19937_64 rng(7);
  for (int i = 0; i < 40; ++i) {
    const ojson v = ojson::parse(random_walk(g, rng, 60));
    std::vector<std::string> keys;
    for (const auto& [k, unused] : v.items()) keys.push_back(k);
    ASSERT_GE(keys.size(), 2u);
    EXPECT_EQ(keys[0], "name");
    EXPECT_EQ(keys[1], "age");
    const std::vector<std::string> order = {"name", "age", "email", "tags", "score"};
    for (size_t k = 1; k < keys.size(); ++k)
      EXPECT_LT(std::find(order.begin(), order.end(), keys[k - 1]), std::find(order.begin(), order.end(), keys[k]));
  }
}

// A forced tool call among 256 tools: an anyOf of 256 objects that share their first bytes.
TEST(JsonRecognizer, ManyAlternativesNarrowDown) {
  ojson alternatives = ojson::array();
  for (int i = 0; i < 256; ++i)
    alternatives.push_back({{"type", "object"},
                            {"properties", {{"name", {{"const", "tool" + std::to_string(i)}}}, {"arguments", {{"type", "object"}}}}},
                            {"required", {"name", "arguments"}},
                            {"additionalProperties", false}});
  const auto g = grammar_of({{"anyOf", alternatives}});
  JsonRecognizer r(g);
  ASSERT_TRUE(r.advance("{\"name\": \"tool1"));
  EXPECT_GT(r.state().size(), 100u);
  ASSERT_TRUE(r.advance("37\", \"arguments\": {\"x\": [1]}}"));
  EXPECT_TRUE(r.complete());
  EXPECT_FALSE(accepts(g, "{\"name\": \"tool256\", \"arguments\": {}}"));
}

// anyOfs nested through shared $refs: 2^30 paths to one leaf, read in linear time.
TEST(JsonRecognizer, NestedAlternativesExpandOnce) {
  ojson defs = ojson::object();
  for (int i = 0; i < 30; ++i) {
    const std::string next = i + 1 < 30 ? fmt::format("#/$defs/d{}", i + 1) : std::string("#/$defs/leaf");
    defs[fmt::format("d{}", i)] = {{"anyOf", {{{"$ref", next}}, {{"$ref", next}}}}};
  }
  defs["leaf"] = {{"type", "integer"}};
  const auto g = grammar_of({{"$defs", defs}, {"$ref", "#/$defs/d0"}});
  EXPECT_TRUE(accepts(g, "123"));
  EXPECT_FALSE(allows_prefix(g, "\"x"));
}

// Masks are cached by cache_key: string lengths far from both bounds share one key, others do not.
TEST(JsonRecognizer, CacheKeysMergeLengthsNoPieceCanTellApart) {
  const auto g = grammar_of(ojson::parse(R"({"type": "string", "minLength": 5, "maxLength": 300})"));
  auto key_after = [&](size_t chars) {
    JsonRecognizer r(g);
    std::string text(chars + 1, 'a');
    text[0] = '"';
    EXPECT_TRUE(r.advance(text));
    return r.cache_key(128);
  };
  EXPECT_EQ(key_after(5), key_after(6));
  EXPECT_EQ(key_after(10), key_after(172));
  EXPECT_NE(key_after(172), key_after(173)) << "a 128-byte piece could reach maxLength from 173";
  EXPECT_NE(key_after(4), key_after(5)) << "below minLength the closing quote is refused";
}

TEST(JsonRecognizer, AStepThatFailsLeavesTheStateAsItWas) {
  JsonRecognizer r(grammar_of(kPerson));
  ASSERT_TRUE(r.advance("{\"na"));
  const JsonRecognizer::State before = r.state();
  EXPECT_FALSE(r.advance("mx"));
  EXPECT_EQ(r.state(), before);
  EXPECT_TRUE(r.advance("me\":\"Al\",\"age\":1}"));
  EXPECT_TRUE(r.complete());
}

}  // namespace
}  // namespace megaqwen
