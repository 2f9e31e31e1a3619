// What the grammar fuzz targets share (fuzz_json_schema, fuzz_tool_call): the input split at its
// first NUL byte into the grammar's source and a reply, the reply read byte by byte, and then a walk
// to a whole text that must never reach a state allowing no byte. Header-only: each target is one
// translation unit.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>

namespace megaqwen::fuzz {

// (source, reply): the bytes before the first NUL, and those after it (none without a NUL).
inline std::pair<std::string_view, std::string_view> split_at_nul(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  return {input.substr(0, nul), nul == std::string_view::npos ? std::string_view() : input.substr(nul + 1)};
}

// Feeds `reply` to `r` while it fits, calling on_whole(taken) whenever the text so far is whole;
// then, for at most `steps` bytes, takes the first of `preferred` that fits or else the lowest byte
// that does, aborting at a dead end. Returns the text taken; on_whole has seen it if it ended whole.
template <class Recognizer, class OnWhole>
std::string read_then_walk(Recognizer& r, std::string_view reply, int steps, std::string_view preferred,
                           const OnWhole& on_whole) {
  std::string taken;
  for (char c : reply) {
    if (!r.advance(std::string_view(&c, 1))) break;
    taken += c;
    if (r.complete()) on_whole(taken);
  }
  typename Recognizer::State state = r.state(), next;
  auto try_byte = [&](uint8_t b) {
    r.step(state, b, next);
    if (next.empty()) return false;
    state.swap(next);
    taken += char(b);
    return true;
  };
  for (int step = 0; step < steps && !Recognizer::complete(state); ++step) {
    bool moved = false;
    for (char p : preferred)
      if (!moved) moved = try_byte(uint8_t(p));
    for (int b = 0; b < 256 && !moved; ++b) moved = try_byte(uint8_t(b));
    if (!moved) {
      std::fprintf(stderr, "dead end after: %s\n", taken.c_str());
      std::abort();
    }
  }
  if (Recognizer::complete(state)) on_whole(taken);
  return taken;
}

}  // namespace megaqwen::fuzz
