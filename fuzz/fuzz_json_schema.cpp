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

#include "recognizer_walk.h"
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
  const auto [schema_text, reply] = megaqwen::fuzz::split_at_nul(data, size);
  nlohmann::ordered_json schema;
  try {
    schema = nlohmann::ordered_json::parse(schema_text);
  } catch (const std::exception&) {
    return 0;  // not JSON: not this target's subject
  }
  try {
    auto grammar = std::make_shared<const megaqwen::JsonGrammar>(megaqwen::JsonGrammar::from_schema(schema));
    megaqwen::JsonRecognizer r(grammar);
    // The first allowed byte each time (bounded): no dead end before a whole value.
    megaqwen::fuzz::read_then_walk(r, reply, 256, "", must_parse);
  } catch (const megaqwen::Error&) {
    // Refused with a message: the expected outcome for schemas it cannot honour.
  } catch (const std::exception& e) {
    std::fprintf(stderr, "unexpected exception: %s\n", e.what());
    std::abort();
  }
  return 0;
}
