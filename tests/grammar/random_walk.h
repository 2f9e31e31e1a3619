// Random byte walks through a grammar recognizer (JsonRecognizer, XmlToolCallRecognizer): at each
// step the bytes the recognizer allows, of which there must be one until the text is whole; a random
// one, plain ASCII now and then (so strings are not all random high bytes), and past `soft_limit`
// bytes one the policy picks to close the text, so the walk ends. Test-only.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace megaqwen::test {

// The first of the bytes that close a JSON value which `fits` holds, or -1.
inline int json_closer(const std::vector<uint8_t>& fits) {
  for (uint8_t closer : {'"', '}', ']', '0', 'n', 't'})
    if (std::find(fits.begin(), fits.end(), closer) != fits.end()) return closer;
  return -1;
}

// Policy: `bool stop(state, text, rng)`: end the walk here (called only on whole texts);
// `bool must_close(state)`: past soft_limit, close at every step rather than half of them;
// `int closer(state, fits, rng)`: the closing byte to take, or -1 for none.
template <class Recognizer, class Policy>
std::string random_byte_walk(const Recognizer& r, std::mt19937_64& rng, size_t soft_limit, const Policy& policy) {
  typename Recognizer::State state = r.state(), next;
  std::string text;
  while (true) {
    const bool whole = Recognizer::complete(state);
    if (whole && policy.stop(state, text, rng)) return text;
    std::vector<uint8_t> fits;
    for (int b = 0; b < 256; ++b) {
      r.step(state, uint8_t(b), next);
      if (!next.empty()) fits.push_back(uint8_t(b));
    }
    if (fits.empty()) {
      EXPECT_TRUE(whole) << "dead end after: " << text;
      return text;
    }
    int pick = fits[rng() % fits.size()];
    if (text.size() > soft_limit && (rng() % 2 == 0 || policy.must_close(state))) {
      // (half the time unless the policy insists: a pattern may need other bytes to end)
      if (const int closer = policy.closer(state, fits, rng); closer >= 0) pick = closer;
    } else if (rng() % 4 == 0) {
      std::vector<uint8_t> plain;
      for (uint8_t b : fits)
        if (b < 0x80) plain.push_back(b);
      if (!plain.empty()) pick = plain[rng() % plain.size()];
    }
    r.step(state, uint8_t(pick), next);
    state.swap(next);
    text += char(pick);
    if (text.size() > 20000) {
      ADD_FAILURE() << "the walk does not end: ..." << text.substr(text.size() - 300);
      return text;
    }
  }
}

}  // namespace megaqwen::test
