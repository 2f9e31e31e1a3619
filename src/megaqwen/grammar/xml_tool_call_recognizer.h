// XmlToolCallRecognizer: which bytes may come next in a forced Qwen3.5 tool call
// (XmlToolCallGrammar), for XmlToolCallConstraint's token masks.
//
// Its state is a small set of configurations, each one reading of the bytes so far: inside a choice
// of fixed texts (the name, the next key or the closing tags: a range of the choice's sorted texts
// and the bytes matched), a free key, a text value, or a JSON value (a JsonRecognizer state for the
// parameter's schema). Several readings live at once where the bytes do not yet tell them apart: a
// newline in a text value may be its own or the one before "</parameter>", a whole JSON number may
// go on or end. A byte moves every configuration; those it does not fit die, equal ones merge.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "megaqwen/grammar/json_recognizer.h"
#include "megaqwen/grammar/xml_tool_call_grammar.h"

namespace megaqwen {

class XmlToolCallRecognizer {
 public:
  struct Config {
    enum Stage : uint8_t { Choice, FreeKey, Text, Json, Done } stage = Done;
    uint8_t utf8_more = 0;  // Text: continuation bytes still to come
    uint16_t pos = 0;       // Choice, FreeKey: bytes matched; Text, Json: bytes of "</parameter>" ending the value
    uint32_t tool = 0;
    uint32_t param = 0;     // Text, Json: the parameter (params.size(): a free key's value); FreeKey: position
    uint32_t choice = 0, lo = 0, hi = 0;  // Choice: the candidate texts [lo, hi); FreeKey: the declared
                                          // keys the key so far is a prefix of
    uint32_t count = 0;     // Text: code points (kept at min when unbounded)
    uint32_t utf8 = 0;      // Text: code point so far << 3 | the next continuation byte's range code
    uint64_t pattern = 0;   // Text: the pattern's state
    JsonRecognizer::State json;

    bool operator==(const Config& o) const;
    bool operator<(const Config& o) const;
  };
  using State = std::vector<Config>;
  static constexpr size_t kMaxConfigs = 512;

  explicit XmlToolCallRecognizer(std::shared_ptr<const XmlToolCallGrammar> grammar);

  // Takes the bytes if every one fits (true); otherwise leaves the state as it was (false).
  bool advance(std::string_view bytes);
  // The call is whole: only an end token may follow.
  bool complete() const { return complete(state_); }
  static bool complete(const State& state);
  const State& state() const { return state_; }
  // The state as bytes, for caching token masks (text lengths no piece of up to `max_piece_bytes`
  // bytes can tell apart made equal).
  std::string cache_key(size_t max_piece_bytes) const;

  // One byte from `in` into `out` (cleared first); empty when the byte fits no configuration.
  void step(const State& in, uint8_t byte, State& out) const;

 private:
  void enter(const XmlToolCallGrammar::Outcome& outcome, State& out) const;
  void enter_value(uint32_t tool, uint32_t param, const XmlToolCallGrammar::Value& v, State& out) const;
  void feed(const Config& c, uint8_t byte, State& out) const;
  void feed_text(Config c, uint8_t byte, State& out) const;
  const XmlToolCallGrammar::Value& value_of(const Config& c) const;

  std::shared_ptr<const XmlToolCallGrammar> grammar_;
  std::vector<JsonRecognizer> json_;  // per tool, for its JSON values
  State state_;
};

}  // namespace megaqwen
