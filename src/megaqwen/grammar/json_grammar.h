// JsonGrammar: the JSON a constrained reply may take (the server's `response_format`, generate's
// --json-schema), compiled from a JSON Schema into a small graph of nodes that JsonRecognizer walks
// byte by byte.
//
// What generation needs is narrower than validation: every prefix the recognizer allows must be
// completable, and what it completes must validate. So objects write their declared properties in
// the schema's order (required ones never skipped, optional ones may be left out), as OpenAI's
// strict mode and llama.cpp's schema grammars do; extra keys only where additionalProperties allows
// them, after the declared ones. Strings may follow a `pattern` or a `format` (StringPattern). A
// keyword that would constrain values in a way not enforced here (minimum, uniqueItems, a format
// without a pattern of its own, ...) is refused with an Error naming it, never silently dropped.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "megaqwen/grammar/string_pattern.h"

namespace megaqwen {

struct JsonGrammar {
  enum class Kind : uint8_t {
    Object,    // properties in order, then (additional >= 0) any keys with values of `additional`
    Array,     // items of node `items`, count in [min, max]
    String,    // length in characters (escapes count one) in [min, max]
    Number,    // JSON number
    Integer,   // JSON number without fraction or exponent
    Literals,  // exactly one of `literals` (compact JSON texts): enum, const, true/false, null
    AnyOf,     // a value of any of `alternatives`
  };
  static constexpr uint32_t kUnbounded = std::numeric_limits<uint32_t>::max();
  static constexpr size_t kMaxProperties = 64;  // per object schema (the key matcher's bit mask)
  static constexpr size_t kMaxLiteralBytes = 4096;  // an enum / const value's JSON, a property name

  struct Property {
    std::string key_text;  // the key as JSON writes it, without the opening quote ("a\"b" -> a\"b")
    int node = -1;
    bool required = false;
  };
  struct Node {
    Kind kind = Kind::AnyOf;
    std::vector<Property> properties;
    int additional = -1;
    int items = -1;
    uint32_t min = 0, max = kUnbounded;
    std::vector<std::string> literals;  // sorted, distinct
    std::vector<int> alternatives;
    int pattern = -1;  // String: index into `patterns` (pattern or format), -1 for any text
  };

  std::vector<Node> nodes;
  std::vector<StringPattern> patterns;
  int root = -1;
  int any = -1;         // any JSON value
  int key_string = -1;  // a free object key

  // Any JSON object (response_format {"type": "json_object"}).
  static JsonGrammar object();
  // The grammar of `schema` (draft 2020-12 keywords: type, properties, required,
  // additionalProperties, items, minItems, maxItems, minLength, maxLength, pattern, format (date,
  // time, date-time, uuid, email, ipv4), enum, const, anyOf, oneOf,
  // allOf of one schema, $ref into #/$defs or #/definitions; annotations such as title or description
  // are ignored). Throws Error naming the schema path (from `name`) and what it cannot honour.
  static JsonGrammar from_schema(const nlohmann::ordered_json& schema, const std::string& name = "schema");
};

}  // namespace megaqwen
