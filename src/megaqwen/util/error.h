// Error: the one exception type of the library. Every message names what is wrong
// (the file, the field, the tensor, the value) so the CLI can print it as one line.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace megaqwen {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace megaqwen
