// libFuzzer target: a JSON Schema (the input up to its first NUL byte; the whole input when there is
// none) and a reply (the bytes after it). JsonGrammar::from_schema must compile the schema or throw
// megaqwen::Error; the recognizer then reads the reply, and whenever it calls a prefix a whole value
// that prefix must parse as JSON. A walk that always takes the first allowed byte must never reach
// a state with no byte allowed before the value is whole. Any other exception, crash, sanitizer
// report or hang is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "megaqwen/grammar/json_recognizer.h"
#include "megaqwen/util/error.h"

namespace {

void must_parse(const std::string& text) {
  try {
    (void)nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "the recognizer took text that is not JSON: %s\n%s\n", e.what(), text.c_str());
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string_view schema_text = input.substr(0, nul);
  const std::string_view reply = nul == std::string_view::npos ? std::string_view() : input.substr(nul + 1);
  nlohmann::ordered_json schema;
  try {
    schema = nlohmann::ordered_json::parse(schema_text);
  } catch (const std::exception&) {
    return 0;  // not JSON: not this target's subject
  }
  try {
    auto grammar = std::make_shared<const megaqwen::JsonGrammar>(megaqwen::JsonGrammar::from_schema(schema));
    megaqwen::JsonRecognizer r(grammar);
    std::string taken;
    for (char c : reply) {
      if (!r.advance(std::string_view(&c, 1))) break;
      taken += c;
      if (r.complete()) must_parse(taken);
    }
    // From there, the first allowed byte each time (bounded): no dead end before a whole value.
    megaqwen::JsonRecognizer::State state = r.state(), next;
    for (int step = 0; step < 256 && !megaqwen::JsonRecognizer::complete(state); ++step) {
      bool moved = false;
      for (int b = 0; b < 256 && !moved; ++b) {
        r.step(state, uint8_t(b), next);
        if (!next.empty()) {
          state.swap(next);
          taken += char(b);
          moved = true;
        }
      }
      if (!moved) {
        std::fprintf(stderr, "dead end after: %s\n", taken.c_str());
        std::abort();
      }
    }
    if (megaqwen::JsonRecognizer::complete(state)) must_parse(taken);
  } catch (const megaqwen::Error&) {
    // Refused with a message: the expected outcome for schemas it cannot honour.
  } catch (const std::exception& e) {
    std::fprintf(stderr, "unexpected exception: %s\n", e.what());
    std::abort();
  }
  return 0;
}
