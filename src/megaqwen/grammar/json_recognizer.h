// JsonRecognizer: which bytes may come next in a reply constrained by a JsonGrammar.
//
// A pushdown recognizer over bytes. Its state is a small set of threads (alternatives of an anyOf,
// enum values sharing a prefix, numbers that may end or go on), each a stack of frames: a value
// expected, an object between its keys, an array between items, a string, a number, a literal. A
// byte moves every thread; threads it does not fit die, and identical ones merge, so the state stays
// small. Counters that only matter up to a bound are kept at that bound, which makes states that
// behave alike compare equal (JsonConstraint caches its token masks by state).
//
// Beyond the grammar, generation needs bounds the JSON syntax lacks: at most kMaxWhitespace
// whitespace bytes in a row between tokens, numbers of at most kMaxNumberBytes (integers: 18, within
// int64; exponents: two digits, within a double), and values nested at most kMaxDepth deep. Enum and
// const values are matched as compact JSON text. Every state a byte leads to can still be completed.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "megaqwen/grammar/json_grammar.h"

namespace megaqwen {

class JsonRecognizer {
 public:
  static constexpr int kMaxDepth = 32;
  static constexpr int kMaxWhitespace = 32;
  static constexpr int kMaxNumberBytes = 32;
  static constexpr size_t kMaxThreads = 512;  // an anyOf of every tool of a request (<= 256) fits

  // Trivial (made with Frame{}), so a Thread copies only the frames in use.
  struct Frame {
    uint64_t bits;    // key: candidate properties; literals: candidate range; object: pending property
    uint32_t node;    // JsonGrammar node
    uint32_t count;   // string: characters; array: items; object: next property
    uint16_t pos;     // literal / key: bytes matched; number: bytes; string: UTF-8 continuation state
    uint8_t type;
    uint8_t phase;
    uint32_t unused;  // string: the escape or character being read; else 0 (frames compare as bytes)
  };
  struct Thread {
    uint16_t depth = 0;
    uint16_t whitespace = 0;  // whitespace bytes in a row
    uint32_t unused = 0;
    Frame frames[kMaxDepth];

    Thread() = default;
    // Copies the frames in use only: threads are copied once per byte tried.
    Thread(const Thread& o);
    Thread& operator=(const Thread& o);
    Frame& top() { return frames[depth - 1]; }
    const Frame& top() const { return frames[depth - 1]; }
    bool operator==(const Thread& o) const;
    bool operator<(const Thread& o) const;
  };
  // Threads, sorted and distinct.
  using State = std::vector<Thread>;

  explicit JsonRecognizer(std::shared_ptr<const JsonGrammar> grammar);
  // A value of `node` rather than of the grammar's root (one parameter of a tool call).
  JsonRecognizer(std::shared_ptr<const JsonGrammar> grammar, int node);

  // Takes the bytes if every one fits (true); otherwise leaves the state as it was (false).
  bool advance(std::string_view bytes);
  // The bytes so far form a whole value.
  bool complete() const { return complete(state_); }
  const State& state() const { return state_; }
  const JsonGrammar& grammar() const { return *grammar_; }

  // The state as bytes, for caching what depends on it alone (JsonConstraint's masks), with the
  // length of a bounded string made the same wherever no piece of up to `max_piece_bytes` bytes can
  // reach a bound: inside a string with a maxLength the masks then repeat as they do without one.
  std::string cache_key(size_t max_piece_bytes) const { return cache_key(state_, max_piece_bytes); }
  std::string cache_key(const State& state, size_t max_piece_bytes) const;

  // One byte from `in` into `out` (cleared first); empty when the byte fits no thread.
  void step(const State& in, uint8_t byte, State& out) const;
  static bool complete(const State& state);

 private:
  void feed(Thread t, uint8_t c, State& out) const;
  void expect_value(Thread& t, uint32_t node, uint8_t c, State& out) const;
  void start_key(Thread t, State& out) const;
  bool push(Thread& t, Frame f) const;

  std::shared_ptr<const JsonGrammar> grammar_;
  State state_;
};

}  // namespace megaqwen
