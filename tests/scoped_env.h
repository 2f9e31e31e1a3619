// An environment variable set (or unset) for one scope, its old value restored after: for tests of
// behaviour chosen by the environment (the Hugging Face cache, the megakernel's MEGAQWEN_MK_* switches).
#pragma once

#include <cstdlib>
#include <optional>
#include <string>

namespace megaqwen::test {

class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::optional<std::string>& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) ::setenv(name, value->c_str(), 1);
    else ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_) ::setenv(name_, old_->c_str(), 1);
    else ::unsetenv(name_);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

}  // namespace megaqwen::test
