// NFC normalization (the `NFC` normalizer of tokenizer.json), computed by utf8proc. Most text is
// already in NFC, so a per-code-point table first proves that cheaply and utf8proc runs only when
// some character could change.
#pragma once

#include <string>
#include <string_view>

namespace megaqwen {

// True when every character of `text` (valid UTF-8) is one that NFC leaves alone whatever its
// neighbours are: no decomposition change, combining class 0, never the second of a composition.
// Such a string is already in NFC.
bool is_trivially_nfc(std::string_view text);

// Appends NFC(text) to `out`; `text` must be valid UTF-8.
void append_nfc(std::string_view text, std::string& out);

}  // namespace megaqwen
