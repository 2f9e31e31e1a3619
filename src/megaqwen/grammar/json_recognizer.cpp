#include "megaqwen/grammar/json_recognizer.h"

#include <algorithm>
#include <cstddef>
#include <cstring>

#include "megaqwen/grammar/token_mask.h"
#include "megaqwen/grammar/utf8_lead.h"
#include "megaqwen/util/error.h"

namespace megaqwen {

namespace {

using Kind = JsonGrammar::Kind;
using Frame = JsonRecognizer::Frame;
using Thread = JsonRecognizer::Thread;
using State = JsonRecognizer::State;

enum Type : uint8_t { kValue = 1, kObject, kKey, kArray, kString, kNumber, kLiterals };

// Object phases: after '{', after ',', after a key (':' next), after a value (',' or '}' next).
enum : uint8_t { kObjOpen, kObjKeyNext, kObjAfterKey, kObjAfterValue };
constexpr uint64_t kAdditionalKey = ~uint64_t(0);  // object.bits while a free key is read
// Array phases: after '[', after an item.
enum : uint8_t { kArrOpen, kArrAfterItem };
// String phases; kStrHex counts its remaining digits in pos and their value in unused; kStrUtf8 its
// remaining continuation bytes in pos and, in unused, the code point so far (pattern strings only)
// << 3 | the range code of the next byte. A pattern string's automaton state is in bits.
enum : uint8_t { kStrNormal, kStrEscape, kStrHex, kStrUtf8 };
// Number phases (RFC 8259's grammar): after '-', after a leading 0, in the integer digits, after '.',
// in the fraction, after 'e', after the exponent's sign, in the exponent.
// The exponent has at most two digits (kNumExp1, kNumExp2): 1e308 and beyond overflow a double,
// and parsers refuse or turn them into infinity.
enum : uint8_t { kNumSign, kNumZero, kNumInt, kNumDot, kNumFrac, kNumE, kNumExpSign, kNumExp1, kNumExp2, kNumNone };
// Integers stay within int64 (18 bytes, the sign included).
constexpr uint16_t kMaxIntegerBytes = 18;

bool is_ws(uint8_t c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }
bool is_digit(uint8_t c) { return c >= '0' && c <= '9'; }

bool number_accepts(uint8_t phase) {
  return phase == kNumZero || phase == kNumInt || phase == kNumFrac || phase == kNumExp1 || phase == kNumExp2;
}

uint8_t number_next(uint8_t phase, uint8_t c, bool integer) {
  const bool digit = is_digit(c), e = c == 'e' || c == 'E';
  switch (phase) {
    case kNumSign: return c == '0' ? kNumZero : digit ? kNumInt : kNumNone;
    case kNumZero: return integer ? kNumNone : c == '.' ? kNumDot : e ? kNumE : kNumNone;
    case kNumInt: return digit ? kNumInt : integer ? kNumNone : c == '.' ? kNumDot : e ? kNumE : kNumNone;
    case kNumDot: return digit ? kNumFrac : kNumNone;
    case kNumFrac: return digit ? kNumFrac : e ? kNumE : kNumNone;
    case kNumE: return c == '+' || c == '-' ? kNumExpSign : digit ? kNumExp1 : kNumNone;
    case kNumExpSign: return digit ? kNumExp1 : kNumNone;
    case kNumExp1: return digit ? kNumExp2 : kNumNone;
  }
  return kNumNone;
}

// A counter that only matters up to `min` (no upper bound) stays there, so equal behaviour means
// equal state.
uint32_t bump(uint32_t count, const JsonGrammar::Node& n) {
  ++count;
  return n.max == JsonGrammar::kUnbounded ? std::min(count, n.min) : count;
}

bool required_from(const JsonGrammar::Node& n, uint32_t from) {
  for (size_t i = from; i < n.properties.size(); ++i)
    if (n.properties[i].required) return true;
  return false;
}

// Declared properties that may come next: from `from` up to the first required one.
uint64_t key_candidates(const JsonGrammar::Node& n, uint32_t from) {
  uint64_t mask = 0;
  for (size_t i = from; i < n.properties.size(); ++i) {
    mask |= uint64_t(1) << i;
    if (n.properties[i].required) break;
  }
  return mask;
}

bool extra_key_allowed(const JsonGrammar::Node& n, uint32_t from) {
  return n.additional >= 0 && !required_from(n, from);
}

size_t used_bytes(const Thread& t) { return size_t(t.depth) * sizeof(Frame); }

int hex_value(uint8_t c) {
  return is_digit(c) ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

// The character a simple escape (\" \\ \/ \b \f \n \r \t) stands for, or -1.
int simple_escape(uint8_t c) {
  switch (c) {
    case '"': return '"';
    case '\\': return '\\';
    case '/': return '/';
    case 'b': return '\b';
    case 'f': return '\f';
    case 'n': return '\n';
    case 'r': return '\r';
    case 't': return '\t';
  }
  return -1;
}

// Whether some code point in [lo, hi] that a \u escape can stand for (no surrogates, see kStrHex)
// is allowed.
bool hex_escape_allowed(const StringPattern& p, uint64_t state, uint32_t lo, uint32_t hi) {
  return (lo < 0xD800 && p.allows_any(state, lo, std::min<uint32_t>(hi, 0xD7FF))) ||
         (hi > 0xDFFF && p.allows_any(state, std::max<uint32_t>(lo, 0xE000), hi));
}

// A control character can only be written escaped, so \u is one of the ways on.
bool any_escape_allowed(const StringPattern& p, uint64_t state) {
  for (uint8_t c : {'"', '\\', '/', 'b', 'f', 'n', 'r', 't'})
    if (p.step(state, uint32_t(simple_escape(c)))) return true;
  return hex_escape_allowed(p, state, 0, 0xFFFF);
}

}  // namespace

JsonRecognizer::Thread::Thread(const Thread& o) : depth(o.depth), whitespace(o.whitespace) {
  std::memcpy(frames, o.frames, used_bytes(o));
}

JsonRecognizer::Thread& JsonRecognizer::Thread::operator=(const Thread& o) {
  depth = o.depth;
  whitespace = o.whitespace;
  std::memmove(frames, o.frames, used_bytes(o));
  return *this;
}

bool JsonRecognizer::Thread::operator==(const Thread& o) const {
  return depth == o.depth && whitespace == o.whitespace && std::memcmp(frames, o.frames, used_bytes(*this)) == 0;
}

bool JsonRecognizer::Thread::operator<(const Thread& o) const {
  if (depth != o.depth) return depth < o.depth;
  if (whitespace != o.whitespace) return whitespace < o.whitespace;
  return std::memcmp(frames, o.frames, used_bytes(*this)) < 0;
}

JsonRecognizer::JsonRecognizer(std::shared_ptr<const JsonGrammar> grammar)
    : JsonRecognizer(grammar, grammar->root) {}

JsonRecognizer::JsonRecognizer(std::shared_ptr<const JsonGrammar> grammar, int node) : grammar_(std::move(grammar)) {
  if (node < 0 || size_t(node) >= grammar_->nodes.size()) fail("JsonRecognizer: node {} is not in the grammar", node);
  Thread t;
  t.depth = 1;
  t.frames[0] = Frame{};
  t.frames[0].node = uint32_t(node);
  t.frames[0].type = kValue;
  state_.push_back(t);
}

bool JsonRecognizer::advance(std::string_view bytes) { return advance_bytes(*this, state_, bytes); }

bool JsonRecognizer::complete(const State& state) {
  for (const Thread& t : state)
    if (t.depth == 0 || (t.depth == 1 && t.frames[0].type == kNumber && number_accepts(t.frames[0].phase)))
      return true;
  return false;
}

std::string JsonRecognizer::cache_key(const State& state, size_t max_piece_bytes) const {
  std::string key;
  for (Thread t : state) {
    for (int d = 0; d < t.depth; ++d) {
      Frame& f = t.frames[d];
      if (f.type != kString) continue;
      const JsonGrammar::Node& n = grammar_->nodes[f.node];
      // A piece of k bytes adds at most k characters: from any count in [min, max - max_piece_bytes]
      // every piece fits or not alike, and min stands for them all.
      if (n.max != JsonGrammar::kUnbounded && f.count >= n.min && n.max - f.count >= max_piece_bytes) f.count = n.min;
    }
    key.append(reinterpret_cast<const char*>(&t), offsetof(Thread, frames) + used_bytes(t));
  }
  return key;
}

void JsonRecognizer::step(const State& in, uint8_t byte, State& out) const {
  out.clear();
  for (const Thread& t : in) feed(t, byte, out);
  if (!is_ws(byte))
    for (Thread& t : out) t.whitespace = 0;
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  if (out.size() > kMaxThreads)
    fail("the response schema is too ambiguous: more than {} readings of the reply at once", kMaxThreads);
}

bool JsonRecognizer::push(Thread& t, Frame f) const {
  if (t.depth >= kMaxDepth) return false;
  t.frames[t.depth++] = f;
  return true;
}

// Replaces the top frame (a value expected of `node`) by what byte c starts.
void JsonRecognizer::expect_value(Thread& t, uint32_t node, uint8_t c, State& out) const {
  const JsonGrammar::Node& n = grammar_->nodes[node];
  Frame f{};
  f.node = node;
  switch (n.kind) {
    case Kind::AnyOf:
      for (int alt : n.alternatives) {
        Thread u = t;
        u.top().node = uint32_t(alt);
        expect_value(u, uint32_t(alt), c, out);
      }
      return;
    case Kind::Object:
      if (c != '{') return;
      f.type = kObject;
      f.phase = kObjOpen;
      break;
    case Kind::Array:
      if (c != '[') return;
      f.type = kArray;
      f.phase = kArrOpen;
      break;
    case Kind::String:
      if (c != '"') return;
      f.type = kString;
      f.phase = kStrNormal;
      if (n.pattern >= 0) f.bits = StringPattern::kStart;
      break;
    case Kind::Number:
    case Kind::Integer:
      f.type = kNumber;
      f.pos = 1;
      f.phase = c == '-' ? kNumSign : c == '0' ? kNumZero : is_digit(c) ? kNumInt : kNumNone;
      if (f.phase == kNumNone) return;
      break;
    case Kind::Literals:
      f.type = kLiterals;
      f.bits = uint64_t(n.literals.size()) << 32;  // the range [0, size)
      t.top() = f;
      feed(t, c, out);
      return;
  }
  t.top() = f;
  out.push_back(t);
}

// After an object's '"': a declared property's key, or a free key where the schema allows one.
void JsonRecognizer::start_key(Thread t, State& out) const {
  Frame& obj = t.top();
  const JsonGrammar::Node& n = grammar_->nodes[obj.node];
  const uint64_t mask = key_candidates(n, obj.count);
  const bool extra = extra_key_allowed(n, obj.count);
  obj.phase = kObjAfterKey;
  if (mask) {
    Thread u = t;
    Frame key{};
    key.bits = mask;
    key.node = obj.node;
    key.type = kKey;
    if (push(u, key)) out.push_back(u);
  }
  if (extra) {
    t.top().bits = kAdditionalKey;
    Frame key{};
    key.node = uint32_t(grammar_->key_string);
    key.type = kString;
    key.phase = kStrNormal;
    // Every declared name, to refuse a free key equal to one (its value would escape that
    // property's schema): bits holds those the key still follows, count the bytes it has matched.
    const size_t declared = n.properties.size();
    key.bits = declared == 64 ? ~uint64_t(0) : (uint64_t(1) << declared) - 1;
    if (push(t, key)) out.push_back(t);
  }
}

// Byte c into thread t; the threads it leads to go to `out`.
void JsonRecognizer::feed(Thread t, uint8_t c, State& out) const {
  if (t.depth == 0) return;  // a whole value: nothing more
  Frame& f = t.top();
  const JsonGrammar::Node& n = grammar_->nodes[f.node];
  auto whitespace = [&] {
    if (t.whitespace < kMaxWhitespace) {
      ++t.whitespace;
      out.push_back(t);
    }
  };
  auto pop = [&] {
    --t.depth;
    out.push_back(t);
  };
  switch (f.type) {
    case kValue:
      if (is_ws(c)) return whitespace();
      return expect_value(t, f.node, c, out);

    case kObject:
      switch (f.phase) {
        case kObjOpen:
        case kObjKeyNext:
          if (is_ws(c)) return whitespace();
          if (c == '"') return start_key(t, out);
          if (c == '}' && f.phase == kObjOpen && !required_from(n, f.count)) return pop();
          return;
        case kObjAfterKey: {
          if (is_ws(c)) return whitespace();
          if (c != ':') return;
          const bool extra = f.bits == kAdditionalKey;
          const int value = extra ? n.additional : n.properties[f.bits].node;
          f.count = extra ? uint32_t(n.properties.size()) : uint32_t(f.bits + 1);
          f.phase = kObjAfterValue;
          Frame v{};
          v.node = uint32_t(value);
          v.type = kValue;
          if (push(t, v)) out.push_back(t);
          return;
        }
        case kObjAfterValue:
          if (is_ws(c)) return whitespace();
          if (c == ',' && (key_candidates(n, f.count) || extra_key_allowed(n, f.count))) {
            f.phase = kObjKeyNext;
            out.push_back(t);
          } else if (c == '}' && !required_from(n, f.count)) {
            pop();
          }
          return;
      }
      return;

    case kKey: {
      const JsonGrammar::Node& obj = grammar_->nodes[f.node];
      uint64_t kept = 0;
      int completed = -1;
      for (uint64_t bits = f.bits; bits; bits &= bits - 1) {
        const int p = __builtin_ctzll(bits);
        const std::string& text = obj.properties[size_t(p)].key_text;
        if (text.size() > f.pos && uint8_t(text[f.pos]) == c) {
          kept |= uint64_t(1) << p;
          if (text.size() == size_t(f.pos) + 1) completed = p;
        }
      }
      if (!kept) return;
      if (completed >= 0) {  // JSON strings are prefix-free: the completed key is the only one left
        --t.depth;
        t.top().bits = uint64_t(completed);
        out.push_back(t);
        return;
      }
      f.bits = kept;
      ++f.pos;
      out.push_back(t);
      return;
    }

    case kArray:
      if (is_ws(c)) return whitespace();
      if (f.phase == kArrOpen) {
        if (c == ']') {
          if (n.min == 0) pop();
          return;
        }
        if (n.max == 0) return;
        f.count = bump(0, n);
        f.phase = kArrAfterItem;
        Frame v{};
        v.node = uint32_t(n.items);
        v.type = kValue;
        if (push(t, v)) feed(t, c, out);
        return;
      }
      if (c == ',' && f.count < n.max) {
        f.count = bump(f.count, n);
        Frame v{};
        v.node = uint32_t(n.items);
        v.type = kValue;
        if (push(t, v)) out.push_back(t);
      } else if (c == ']' && f.count >= n.min) {
        pop();
      }
      return;

    case kString: {
      // With a pattern, bits holds its automaton's state: every character (decoded from an escape or
      // from UTF-8) steps it, and a multi-byte character or an escape starts only when some
      // character it could become is allowed.
      const StringPattern* pattern = n.pattern >= 0 ? &grammar_->patterns[size_t(n.pattern)] : nullptr;
      // A free object key (start_key): bits are the declared properties whose key text (the name as
      // JSON writes it, closing quote included) its bytes still follow, count how many it matched.
      // Its escapes are the ones JSON writes (no \u, no \/), so equal names are equal bytes.
      const bool free_key = f.node == uint32_t(grammar_->key_string);
      auto follow_declared = [&](uint8_t byte) {
        if (!f.bits) return;
        const auto& props = grammar_->nodes[t.frames[t.depth - 2].node].properties;
        uint64_t kept = 0;
        for (uint64_t b = f.bits; b; b &= b - 1) {
          const int p = __builtin_ctzll(b);
          const std::string& text = props[size_t(p)].key_text;
          if (text.size() > f.count && uint8_t(text[f.count]) == byte) kept |= uint64_t(1) << p;
        }
        f.bits = kept;
        f.count = kept ? f.count + 1 : 0;
      };
      switch (f.phase) {
        case kStrNormal:
          if (c == '"') {
            if (free_key && f.bits) {
              const auto& props = grammar_->nodes[t.frames[t.depth - 2].node].properties;
              for (uint64_t b = f.bits; b; b &= b - 1)
                if (props[size_t(__builtin_ctzll(b))].key_text.size() == size_t(f.count) + 1) return;  // a declared name
            }
            if (f.count >= n.min && (!pattern || pattern->accepts(f.bits))) pop();
            return;
          }
          if (c < 0x20 || f.count >= n.max) return;
          if (c == '\\') {
            if (pattern && !any_escape_allowed(*pattern, f.bits)) return;
            f.phase = kStrEscape;
          } else if (c >= 0x80) {
            const Utf8Lead lead = utf8_lead(c);
            if (!lead.more || (pattern && !pattern->allows_any(f.bits, lead.lo, lead.hi))) return;
            f.phase = kStrUtf8;
            f.pos = lead.more;
            // The code point so far (only a pattern needs it) and the first continuation's range.
            f.unused = (pattern ? lead.payload << 3 : 0) | lead.range;
          } else if (pattern) {
            f.bits = pattern->step(f.bits, c);
            if (!f.bits) return;
          }
          if (free_key)
            follow_declared(c);
          else
            f.count = bump(f.count, n);
          out.push_back(t);
          return;
        case kStrEscape: {
          if (free_key) {
            if (c == 'u' || c == '/') return;
            follow_declared(c);
          }
          if (c == 'u') {
            if (pattern && !hex_escape_allowed(*pattern, f.bits, 0, 0xFFFF)) return;
            f.phase = kStrHex;
            f.pos = 4;
            f.unused = 0;
            out.push_back(t);
            return;
          }
          const int decoded = simple_escape(c);
          if (decoded < 0) return;
          if (pattern) {
            f.bits = pattern->step(f.bits, uint32_t(decoded));
            if (!f.bits) return;
          }
          f.phase = kStrNormal;
          out.push_back(t);
          return;
        }
        case kStrHex: {
          // No surrogate escapes (\uD800 .. \uDFFF): a lone one is invalid, and a pair would be
          // counted as two characters. The model writes such characters as UTF-8.
          const int digit = hex_value(c);
          if (digit < 0) return;
          if (f.pos == 3 && f.unused == 0xD && digit >= 8) return;
          f.unused = f.unused * 16 + uint32_t(digit);
          --f.pos;
          if (pattern) {  // each digit narrows the code point to a range some character of must be allowed
            const uint32_t lo = f.unused << (4 * f.pos), hi = lo + (1u << (4 * f.pos)) - 1;
            if (!hex_escape_allowed(*pattern, f.bits, lo, hi)) return;
            if (f.pos == 0) f.bits = pattern->step(f.bits, f.unused);
          }
          if (f.pos == 0) {
            f.phase = kStrNormal;
            f.unused = 0;
          }
          out.push_back(t);
          return;
        }
        case kStrUtf8: {
          const auto [lo, hi] = utf8_continuation_range(f.unused & 7);
          if (c < lo || c > hi) return;
          --f.pos;
          const uint32_t code_point = (f.unused >> 3) << 6 | (c & 0x3F);
          if (pattern && !(f.bits = pattern->step_partial(f.bits, code_point, f.pos))) return;
          if (free_key) follow_declared(c);
          f.unused = f.pos == 0 ? 0 : pattern ? code_point << 3 : 0;
          if (f.pos == 0) f.phase = kStrNormal;
          out.push_back(t);
          return;
        }
      }
      return;
    }

    case kNumber: {
      const bool integer = n.kind == Kind::Integer;
      const uint16_t limit = integer ? kMaxIntegerBytes : uint16_t(kMaxNumberBytes);
      const uint8_t next = number_next(f.phase, c, integer);
      // Room for the byte, and for one more when the number could not end after it.
      if (next != kNumNone && f.pos < limit && (number_accepts(next) || f.pos + 1 < limit)) {
        f.phase = next;
        ++f.pos;
        out.push_back(t);
      } else if (number_accepts(f.phase)) {
        --t.depth;  // the number ended before c: c belongs to what follows
        feed(t, c, out);
      }
      return;
    }

    case kLiterals: {
      // Candidates [lo, hi) share their first pos bytes; those that go on with c are contiguous.
      uint32_t lo = uint32_t(f.bits), hi = uint32_t(f.bits >> 32);
      const auto& lits = n.literals;
      while (lo < hi && !(lits[lo].size() > f.pos && uint8_t(lits[lo][f.pos]) == c)) ++lo;
      uint32_t end = lo;
      while (end < hi && lits[end].size() > f.pos && uint8_t(lits[end][f.pos]) == c) ++end;
      if (lo == end) return;
      ++f.pos;
      if (lits[lo].size() == f.pos) {  // sorted: a finished candidate comes first
        if (end - lo > 1) {             // longer ones go on ("1" and "12")
          Thread u = t;
          u.top().bits = uint64_t(lo + 1) | uint64_t(end) << 32;
          out.push_back(u);
        }
        return pop();
      }
      f.bits = uint64_t(lo) | uint64_t(end) << 32;
      out.push_back(t);
      return;
    }
  }
}

}  // namespace megaqwen
