// A small JSON Schema validator for the keywords JsonGrammar supports, with the standard (looser)
// semantics: what the constrained output writes must validate here. Test-only.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace megaqwen::test {

using ojson = nlohmann::ordered_json;

inline size_t code_points(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

inline bool validates(const ojson& v, const ojson& schema, const ojson& root) {
  if (schema.is_boolean()) return schema.get<bool>();
  if (schema.contains("$ref"))
    return validates(v, root.at(ojson::json_pointer(schema["$ref"].get<std::string>().substr(1))), root);
  for (const char* key : {"anyOf", "oneOf"})
    if (schema.contains(key)) {
      bool any = false;
      for (const ojson& alt : schema[key]) any = any || validates(v, alt, root);
      if (!any) return false;
    }
  if (schema.contains("allOf"))
    for (const ojson& s : schema["allOf"])
      if (!validates(v, s, root)) return false;
  if (schema.contains("const") && v != schema["const"]) return false;
  if (schema.contains("enum")) {
    bool found = false;
    for (const ojson& e : schema["enum"]) found = found || e == v;
    if (!found) return false;
  }
  if (schema.contains("type")) {
    const ojson types = schema["type"].is_array() ? schema["type"] : ojson::array({schema["type"]});
    bool ok = false;
    for (const ojson& t : types) {
      const std::string name = t.get<std::string>();
      ok = ok || (name == "object" && v.is_object()) || (name == "array" && v.is_array()) ||
           (name == "string" && v.is_string()) || (name == "number" && v.is_number()) ||
           (name == "integer" && v.is_number_integer()) || (name == "boolean" && v.is_boolean()) ||
           (name == "null" && v.is_null());
    }
    if (!ok) return false;
  }
  if (v.is_object()) {
    const ojson props = schema.value("properties", ojson::object());
    if (schema.contains("required"))
      for (const ojson& r : schema["required"])
        if (!v.contains(r.get<std::string>())) return false;
    for (const auto& [key, value] : v.items()) {
      if (props.contains(key)) {
        if (!validates(value, props[key], root)) return false;
      } else if (schema.contains("additionalProperties")) {
        if (!validates(value, schema["additionalProperties"], root)) return false;
      }
    }
  }
  if (v.is_array()) {
    if (schema.contains("minItems") && v.size() < schema["minItems"].get<size_t>()) return false;
    if (schema.contains("maxItems") && v.size() > schema["maxItems"].get<size_t>()) return false;
    if (schema.contains("items"))
      for (const ojson& item : v)
        if (!validates(item, schema["items"], root)) return false;
  }
  if (v.is_string()) {
    const size_t n = code_points(v.get<std::string>());
    if (schema.contains("minLength") && n < schema["minLength"].get<size_t>()) return false;
    if (schema.contains("maxLength") && n > schema["maxLength"].get<size_t>()) return false;
  }
  return true;
}

}  // namespace megaqwen::test
