// A small JSON Schema validator for the keywords JsonGrammar supports, with the standard (looser)
// semantics: what the constrained output writes must validate here. Test-only.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdio>
#include <regex>
#include <string>
#include <vector>

namespace megaqwen::test {

using ojson = nlohmann::ordered_json;

inline size_t code_points(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// An independent reading of the formats JsonGrammar generates: calendar dates, RFC 3339 times with an
// offset, date-times, UUIDs, addresses with one '@' and a dotted domain, IPv4 without leading zeros.
inline bool is_date(const std::string& s) {
  int y, m, d;
  char extra;
  if (s.size() != 10 || std::sscanf(s.c_str(), "%4d-%2d-%2d%c", &y, &m, &d, &extra) != 3) return false;
  static const int days[] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  const bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
  return m >= 1 && m <= 12 && d >= 1 && d <= (m == 2 ? (leap ? 29 : 28) : days[m - 1]);
}
inline bool is_time(const std::string& s) {
  static const std::regex re(R"(^(\d\d):(\d\d):(\d\d)(\.\d+)?(Z|[+-](\d\d):(\d\d))$)");
  std::smatch m;
  if (!std::regex_match(s, m, re)) return false;
  const bool offset_ok = m[5] == "Z" || (std::stoi(m[6]) < 24 && std::stoi(m[7]) < 60);
  return std::stoi(m[1]) < 24 && std::stoi(m[2]) < 60 && std::stoi(m[3]) < 60 && offset_ok;
}
inline bool format_ok(const std::string& f, const std::string& s) {
  if (f == "date") return is_date(s);
  if (f == "time") return is_time(s);
  if (f == "date-time") return s.size() > 11 && s[10] == 'T' && is_date(s.substr(0, 10)) && is_time(s.substr(11));
  if (f == "uuid") return std::regex_match(s, std::regex("^[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}$"));
  if (f == "email") {
    const size_t at = s.find('@');
    return at != std::string::npos && at > 0 && s.find('@', at + 1) == std::string::npos &&
           s.find('.', at) != std::string::npos && s.back() != '.' && s.find("..") == std::string::npos;
  }
  if (f == "ipv4") {
    std::vector<std::string> parts(1);
    for (char c : s) {
      if (c == '.') parts.emplace_back();
      else parts.back().push_back(c);
    }
    bool ok = parts.size() == 4;
    for (const std::string& part : parts)
      ok = ok && !part.empty() && part.size() <= 3 && (part.size() == 1 || part[0] != '0') &&
           part.find_first_not_of("0123456789") == std::string::npos && std::stoi(part) <= 255;
    return ok;
  }
  return false;
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
    // pattern: ECMAScript, searched (std::regex reads bytes: test patterns keep to ASCII classes).
    if (schema.contains("pattern") &&
        !std::regex_search(v.get<std::string>(), std::regex(schema["pattern"].get<std::string>(), std::regex::ECMAScript)))
      return false;
    if (schema.contains("format") && !format_ok(schema["format"].get<std::string>(), v.get<std::string>())) return false;
    const size_t n = code_points(v.get<std::string>());
    if (schema.contains("minLength") && n < schema["minLength"].get<size_t>()) return false;
    if (schema.contains("maxLength") && n > schema["maxLength"].get<size_t>()) return false;
  }
  return true;
}

}  // namespace megaqwen::test
