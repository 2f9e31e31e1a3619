// The Split pre-tokenizer of tokenizer.json with behavior "Isolated": every regex match is a piece,
// and so is every stretch of text between matches. HF runs the pattern with Oniguruma; here PCRE2
// (UTF + UCP, JIT-compiled when available) runs it after a small dialect translation (see .cpp).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace megaqwen {

class RegexSplitter {
 public:
  // `pattern` in Oniguruma syntax as stored in tokenizer.json; `literal` for a {"String": ...}
  // pattern. Throws Error when PCRE2 rejects it.
  RegexSplitter(std::string_view pattern, bool literal);

  // Appends the pieces of `text` (valid UTF-8) to `pieces`, in order; they cover all of `text`.
  void split(std::string_view text, std::vector<std::string_view>& pieces) const;

  const std::string& pattern() const { return pattern_; }

 private:
  struct Compiled;
  std::string pattern_;
  std::shared_ptr<const Compiled> compiled_;
};

// Rewrites the Oniguruma escapes whose meaning differs in PCRE2. Exposed for tests.
std::string onig_to_pcre2(std::string_view pattern);

}  // namespace megaqwen
