#include "megaqwen/tokenizer/byte_level.h"

#include <array>

#include "megaqwen/tokenizer/utf8.h"

namespace megaqwen::byte_level {
namespace {

struct Tables {
  std::array<char32_t, 256> char_of{};
  std::array<int, 0x144> byte_of{};  // stand-ins are all below U+0144; -1 = not a stand-in

  Tables() {
    byte_of.fill(-1);
    char32_t next_extra = 0x100;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      char_of[b] = printable ? char32_t(b) : next_extra++;
      byte_of[char_of[b]] = b;
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

char32_t char_of_byte(unsigned char byte) { return tables().char_of[byte]; }

std::string spell(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) utf8::append_codepoint(out, tables().char_of[b]);
  return out;
}

std::string unspell(std::string_view spelling) {
  const Tables& t = tables();
  std::string out;
  out.reserve(spelling.size());
  std::size_t i = 0;
  while (i < spelling.size()) {
    const utf8::Step step = utf8::next(spelling, i);
    if (!step.valid) return std::string(spelling);
    const char32_t cp = utf8::decode(spelling, i, step.length);
    if (cp >= t.byte_of.size() || t.byte_of[cp] < 0) return std::string(spelling);
    out += static_cast<char>(t.byte_of[cp]);
    i += step.length;
  }
  return out;
}

}  // namespace megaqwen::byte_level
