// python_json_dumps and python_str against what CPython prints (values checked with Python 3).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "megaqwen/chat/python_json.h"
#include "megaqwen/util/error.h"

namespace megaqwen {
namespace {

using nlohmann::ordered_json;

TEST(PythonFloatRepr, MatchesPythonLayouts) {
  const std::pair<double, const char*> cases[] = {
      {1.0, "1.0"},
      {0.0, "0.0"},
      {-0.0, "-0.0"},
      {0.1, "0.1"},
      {-12.5, "-12.5"},
      {100.0, "100.0"},
      {0.0001, "0.0001"},
      {0.00012, "0.00012"},
      {1e-05, "1e-05"},
      {1.5e-05, "1.5e-05"},
      {2.5e-07, "2.5e-07"},
      {1e15, "1000000000000000.0"},
      {1e16, "1e+16"},
      {1234567890123456.7, "1234567890123456.8"},
      {123456789012345680.0, "1.2345678901234568e+17"},
      {1e22, "1e+22"},
      {0.30000000000000004, "0.30000000000000004"},
      {5e-324, "5e-324"},
      {1.7976931348623157e308, "1.7976931348623157e+308"},
      {1.5e300, "1.5e+300"},
  };
  for (const auto& [value, expected] : cases) EXPECT_EQ(python_float_repr(value), expected) << expected;
  EXPECT_EQ(python_float_repr(std::numeric_limits<double>::infinity()), "inf");
  EXPECT_EQ(python_float_repr(std::nan("")), "nan");
}

TEST(PythonJsonDumps, ScalarsAndContainers) {
  EXPECT_EQ(python_json_dumps(nullptr), "null");
  EXPECT_EQ(python_json_dumps(true), "true");
  EXPECT_EQ(python_json_dumps(-5), "-5");
  EXPECT_EQ(python_json_dumps(18446744073709551615ULL), "18446744073709551615");
  EXPECT_EQ(python_json_dumps(2.0), "2.0");
  EXPECT_EQ(python_json_dumps(ordered_json::array()), "[]");
  EXPECT_EQ(python_json_dumps(ordered_json::object()), "{}");
  EXPECT_EQ(python_json_dumps(ordered_json::parse(R"([1, [], {"b": 1e-5, "a": [true, null]}])")),
            R"([1, [], {"b": 1e-05, "a": [true, null]}])");
  // json.dumps writes non-finite floats as JavaScript literals.
  EXPECT_EQ(python_json_dumps(std::numeric_limits<double>::infinity()), "Infinity");
  EXPECT_EQ(python_json_dumps(-std::numeric_limits<double>::infinity()), "-Infinity");
  EXPECT_EQ(python_json_dumps(std::nan("")), "NaN");
}

TEST(PythonJsonDumps, KeepsKeyOrder) {
  EXPECT_EQ(python_json_dumps(ordered_json::parse(R"({"z": 1, "a": 2, "m": {"y": 0, "b": 0}})")),
            R"({"z": 1, "a": 2, "m": {"y": 0, "b": 0}})");
}

TEST(PythonJsonDumps, EscapesLikePython) {
  // json.dumps("\"\\\n\r\t\b\f\x00\x1f\x7f é😀\u2028", ensure_ascii=False)
  const std::string text = std::string("\"\\\n\r\t\b\f") + '\0' + "\x1f\x7f \xc3\xa9\xf0\x9f\x98\x80\xe2\x80\xa8";
  EXPECT_EQ(python_json_dumps(text),
            "\"\\\"\\\\\\n\\r\\t\\b\\f\\u0000\\u001f\x7f \xc3\xa9\xf0\x9f\x98\x80\xe2\x80\xa8\"");
  EXPECT_EQ(python_json_dumps("</script> & <>"), "\"</script> & <>\"");  // no HTML escaping
}

TEST(PythonStr, Scalars) {
  EXPECT_EQ(python_str("text"), "text");
  EXPECT_EQ(python_str(nullptr), "None");
  EXPECT_EQ(python_str(true), "True");
  EXPECT_EQ(python_str(false), "False");
  EXPECT_EQ(python_str(42), "42");
  EXPECT_EQ(python_str(1e-5), "1e-05");
  EXPECT_THROW(python_str(ordered_json::array()), Error);
}

}  // namespace
}  // namespace megaqwen
