// The GPT-2 byte-level alphabet: every byte has a printable stand-in character, so a vocabulary of
// strings can hold arbitrary bytes. Printable Latin-1 bytes stand for themselves; the other 68
// (controls, space, DEL, NBSP, soft hyphen...) map in order to U+0100.. (space is U+0120 'Ġ').
// Vocabulary and merges files spell tokens in this alphabet; the engine works on raw bytes.
#pragma once

#include <string>
#include <string_view>

namespace megaqwen::byte_level {

// The stand-in character of each byte.
char32_t char_of_byte(unsigned char byte);

// Raw bytes -> the spelling used in vocab.json / merges.
std::string spell(std::string_view bytes);

// A vocabulary spelling -> the raw bytes it stands for. Like HF's ByteLevel decoder, a spelling
// holding any character outside the alphabet is taken as literal UTF-8 instead.
std::string unspell(std::string_view spelling);

}  // namespace megaqwen::byte_level
