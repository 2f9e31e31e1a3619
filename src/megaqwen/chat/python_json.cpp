#include "megaqwen/chat/python_json.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <system_error>

#include "megaqwen/util/error.h"

namespace megaqwen {
namespace {

// json.dumps escapes only '"', '\\' and the C0 control characters (ensure_ascii=False keeps every
// other character, DEL and non-ASCII included, as its raw UTF-8 bytes).
void append_json_string(std::string& out, const std::string& text) {
  out += '"';
  for (const char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += fmt::format("\\u{:04x}", static_cast<unsigned char>(c));
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

// json.dumps prints non-finite floats as JavaScript literals (allow_nan=True is the default).
std::string python_json_float(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "Infinity" : "-Infinity";
  return python_float_repr(value);
}

void append_json(std::string& out, const nlohmann::ordered_json& value) {
  using Type = nlohmann::ordered_json::value_t;
  switch (value.type()) {
    case Type::null: out += "null"; return;
    case Type::boolean: out += value.get<bool>() ? "true" : "false"; return;
    case Type::number_integer: out += std::to_string(value.get<std::int64_t>()); return;
    case Type::number_unsigned: out += std::to_string(value.get<std::uint64_t>()); return;
    case Type::number_float: out += python_json_float(value.get<double>()); return;
    case Type::string: append_json_string(out, value.get_ref<const std::string&>()); return;
    case Type::array: {
      out += '[';
      bool first = true;
      for (const auto& item : value) {
        if (!first) out += ", ";
        first = false;
        append_json(out, item);
      }
      out += ']';
      return;
    }
    case Type::object: {
      out += '{';
      bool first = true;
      for (const auto& [key, item] : value.items()) {
        if (!first) out += ", ";
        first = false;
        append_json_string(out, key);
        out += ": ";
        append_json(out, item);
      }
      out += '}';
      return;
    }
    case Type::binary:
    case Type::discarded: break;
  }
  fail("cannot print a JSON {} value as Python's json.dumps would", value.type_name());
}

}  // namespace

std::string python_float_repr(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  // Shortest round-trip digits, as Python's repr uses; to_chars in scientific form gives them as
  // d[.ddd]e±XX, from which Python's layout is rebuilt.
  char buffer[64];
  const auto [end, error] = std::to_chars(buffer, buffer + sizeof buffer, value, std::chars_format::scientific);
  if (error != std::errc{}) fail("cannot format the float {}", value);
  const std::string scientific(buffer, end);

  const std::size_t e = scientific.find('e');
  std::string mantissa = scientific.substr(0, e);
  const int exponent = std::atoi(scientific.c_str() + e + 1);
  const bool negative = mantissa[0] == '-';
  if (negative) mantissa.erase(0, 1);
  std::string digits;
  for (const char c : mantissa) {
    if (c != '.') digits += c;
  }

  // Python switches to exponent notation when the decimal point would sit more than 16 digits to
  // the right of the first digit or 4 or more places left of it (repr(1e16) == '1e+16',
  // repr(1e-05) == '1e-05', repr(0.0001) == '0.0001').
  const int point = exponent + 1;  // digits before the decimal point
  std::string text = negative ? "-" : "";
  if (point > 16 || point <= -4) {
    text += digits[0];
    if (digits.size() > 1) text += '.' + digits.substr(1);
    text += fmt::format("e{}{:02d}", exponent < 0 ? '-' : '+', std::abs(exponent));
  } else if (point <= 0) {
    text += "0." + std::string(static_cast<std::size_t>(-point), '0') + digits;
  } else if (static_cast<std::size_t>(point) >= digits.size()) {
    text += digits + std::string(static_cast<std::size_t>(point) - digits.size(), '0') + ".0";
  } else {
    text += digits.substr(0, static_cast<std::size_t>(point)) + '.' + digits.substr(static_cast<std::size_t>(point));
  }
  return text;
}

std::string python_json_dumps(const nlohmann::ordered_json& value) {
  std::string out;
  append_json(out, value);
  return out;
}

std::string python_str(const nlohmann::ordered_json& value) {
  using Type = nlohmann::ordered_json::value_t;
  switch (value.type()) {
    case Type::null: return "None";
    case Type::boolean: return value.get<bool>() ? "True" : "False";
    case Type::number_integer: return std::to_string(value.get<std::int64_t>());
    case Type::number_unsigned: return std::to_string(value.get<std::uint64_t>());
    case Type::number_float: return python_float_repr(value.get<double>());
    case Type::string: return value.get<std::string>();
    default: break;
  }
  fail("cannot print a JSON {} as Python's str() would", value.type_name());
}

}  // namespace megaqwen
