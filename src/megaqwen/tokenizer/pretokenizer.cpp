#include "megaqwen/tokenizer/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "megaqwen/util/error.h"

namespace megaqwen {
namespace {

// Oniguruma's Unicode \s is the White_Space property. PCRE2's \s (with UCP) is instead the Z
// categories plus \t..\r, which adds U+180E MONGOLIAN VOWEL SEPARATOR (Zs in old Unicode data).
// So \s and \S are spelled out as the White_Space set, which Unicode keeps stable.
constexpr std::string_view kWhiteSpace =
    "\\x{09}-\\x{0D}\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}"
    "\\x{202F}\\x{205F}\\x{3000}";

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof buffer);
  return reinterpret_cast<const char*>(buffer);
}

}  // namespace

std::string onig_to_pcre2(std::string_view pattern) {
  std::string out;
  out.reserve(pattern.size() + 64);
  bool in_class = false;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[++i];
      if (e == 's') {
        out += in_class ? std::string(kWhiteSpace) : "[" + std::string(kWhiteSpace) + "]";
      } else if (e == 'S') {
        if (in_class) fail("pre-tokenizer regex: \\S inside a character class is not supported");
        out += "[^" + std::string(kWhiteSpace) + "]";
      } else {
        out += c;
        out += e;
      }
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal member, not the end of the class.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];
      continue;
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

struct RegexSplitter::Compiled {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Compiled() { pcre2_code_free(code); }
};

namespace {

// Per-thread match state: PCRE2 match data and JIT stacks must not be shared between threads.
struct MatchScratch {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  pcre2_jit_stack* jit_stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
  MatchScratch() { pcre2_jit_stack_assign(context, nullptr, jit_stack); }
  ~MatchScratch() {
    pcre2_jit_stack_free(jit_stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
};

MatchScratch& scratch() {
  thread_local MatchScratch s;
  return s;
}

}  // namespace

RegexSplitter::RegexSplitter(std::string_view pattern, bool literal)
    : pattern_(pattern) {
  const std::string translated = literal ? std::string(pattern) : onig_to_pcre2(pattern);
  int error = 0;
  PCRE2_SIZE offset = 0;
  const uint32_t options = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
  auto compiled = std::make_shared<Compiled>();
  compiled->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                                 options, &error, &offset, nullptr);
  if (compiled->code == nullptr) {
    fail("pre-tokenizer regex does not compile at offset {}: {} (pattern: {})", offset,
         pcre2_message(error), pattern);
  }
  compiled->jit = pcre2_jit_compile(compiled->code, PCRE2_JIT_COMPLETE) == 0;
  compiled_ = std::move(compiled);
}

void RegexSplitter::split(std::string_view text, std::vector<std::string_view>& pieces) const {
  MatchScratch& s = scratch();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  std::size_t gap_start = 0;  // end of the previous match
  std::size_t pos = 0;
  while (pos < text.size()) {
    // The caller guarantees valid UTF-8, so PCRE2's own check (a full scan per call) is skipped.
    const int rc = compiled_->jit
        ? pcre2_jit_match(compiled_->code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, s.data, s.context)
        : pcre2_match(compiled_->code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, s.data, s.context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) fail("pre-tokenizer regex failed on a {}-byte text: {}", text.size(), pcre2_message(rc));
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(s.data);
    const std::size_t start = ovector[0], end = ovector[1];
    if (end == start) {
      // An empty match makes no piece; step over one character and search again.
      pos = start + 1;
      while (pos < text.size() && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80) ++pos;
      continue;
    }
    if (start > gap_start) pieces.push_back(text.substr(gap_start, start - gap_start));
    pieces.push_back(text.substr(start, end - start));
    gap_start = pos = end;
  }
  if (gap_start < text.size()) pieces.push_back(text.substr(gap_start));
}

}  // namespace megaqwen
