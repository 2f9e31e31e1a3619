// Python's json.dumps and str(), reproduced byte for byte. Chat templates print tool definitions and
// tool-call arguments with `tojson` (json.dumps(ensure_ascii=False)) and argument values with `string`
// (str()); a prompt only matches what the model was trained on if these match Python exactly.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace megaqwen {

// json.dumps(value, ensure_ascii=False) with the default separators (", " and ": "), keys in their
// given order, floats as Python's repr prints them (1.0, 1e-05, 1e+16), control characters as \u00XX.
std::string python_json_dumps(const nlohmann::ordered_json& value);

// repr(float) of a double: the shortest digits that round-trip, in Python's layout.
std::string python_float_repr(double value);

// str(value) for a JSON scalar as Python sees it after json.loads: strings as is, True/False/None,
// ints in decimal, floats as repr. Objects and arrays would print as Python dict/list reprs, which no
// template here needs, so they are an Error.
std::string python_str(const nlohmann::ordered_json& value);

}  // namespace megaqwen
