// json_excerpt: a short, one-line rendering of an untrusted JSON value for error messages.
// nlohmann's dump() recurses once per nesting level and prints everything, so dumping a hostile
// value (a million nested arrays, a 50 MB string) would overflow the stack or flood stderr; this
// stops at a few levels and a few hundred characters.
#pragma once

#include <string>

namespace megaqwen {

namespace detail {

template <typename Json>
void json_excerpt_into(const Json& v, std::string& out, int depth, size_t max_chars) {
  if (out.size() > max_chars) return;
  if (v.is_array() || v.is_object()) {
    const bool array = v.is_array();
    if (depth >= 3) {
      out += array ? "[...]" : "{...}";
      return;
    }
    out += array ? '[' : '{';
    bool first = true;
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (!first) out += ", ";
      first = false;
      if (out.size() > max_chars) {
        out += "...";
        break;
      }
      if (!array) json_excerpt_into(Json(it.key()), out, depth + 1, max_chars), out += ": ";
      json_excerpt_into(*it, out, depth + 1, max_chars);
    }
    out += array ? ']' : '}';
    return;
  }
  if (v.is_string()) {
    const auto& s = v.template get_ref<const typename Json::string_t&>();
    if (s.size() > max_chars) {
      out += Json(s.substr(0, max_chars)).dump(-1, ' ', /*ensure_ascii=*/true,
                                                Json::error_handler_t::replace);
      out.insert(out.size() - 1, "...");
      return;
    }
  }
  out += v.dump(-1, ' ', /*ensure_ascii=*/true, Json::error_handler_t::replace);
}

}  // namespace detail

template <typename Json>
std::string json_excerpt(const Json& v, size_t max_chars = 120) {
  std::string out;
  detail::json_excerpt_into(v, out, 0, max_chars);
  if (out.size() > max_chars + 40) out.resize(max_chars), out += "...";
  return out;
}

}  // namespace megaqwen
