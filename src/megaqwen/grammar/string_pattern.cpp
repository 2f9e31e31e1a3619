#include "megaqwen/grammar/string_pattern.h"

#include <algorithm>
#include <memory>

#include "megaqwen/util/error.h"

namespace megaqwen {

namespace {

using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;
constexpr uint32_t kMaxCodePoint = 0x10FFFF;

// Sorted, merged, and without surrogates (a JSON string the recognizer allows carries none).
Ranges normalize(Ranges r) {
  std::sort(r.begin(), r.end());
  Ranges merged;
  for (auto [lo, hi] : r) {
    if (!merged.empty() && lo <= merged.back().second + 1) merged.back().second = std::max(merged.back().second, hi);
    else merged.emplace_back(lo, hi);
  }
  Ranges out;
  for (auto [lo, hi] : merged) {
    if (hi < 0xD800 || lo > 0xDFFF) {
      out.emplace_back(lo, hi);
      continue;
    }
    if (lo < 0xD800) out.emplace_back(lo, 0xD7FF);
    if (hi > 0xDFFF) out.emplace_back(0xE000, hi);
  }
  return out;
}

Ranges complement(const Ranges& r) {
  Ranges out;
  uint32_t next = 0;
  for (auto [lo, hi] : normalize(r)) {
    if (lo > next) out.emplace_back(next, lo - 1);
    next = hi + 1;
  }
  if (next <= kMaxCodePoint) out.emplace_back(next, kMaxCodePoint);
  return normalize(out);
}

const Ranges kDigit = {{'0', '9'}};
const Ranges kWord = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
// ECMA-262's \s: WhiteSpace and LineTerminator.
const Ranges kSpace = {{9, 13}, {32, 32}, {0xA0, 0xA0}, {0x1680, 0x1680}, {0x2000, 0x200A}, {0x2028, 0x2029},
                       {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
const Ranges kLineTerminators = {{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}};

// The regular expression as a tree; quantifiers share their operand (the positions are made per
// occurrence when the automaton is built).
struct Re {
  enum Kind { Leaf, Empty, Cat, Alt, Star } kind;
  Ranges chars;
  std::shared_ptr<const Re> a, b;
};
using P = std::shared_ptr<const Re>;

P leaf(Ranges r) { return std::make_shared<const Re>(Re{Re::Leaf, normalize(std::move(r)), nullptr, nullptr}); }
P empty() { return std::make_shared<const Re>(Re{Re::Empty, {}, nullptr, nullptr}); }
P cat(P a, P b) { return std::make_shared<const Re>(Re{Re::Cat, {}, std::move(a), std::move(b)}); }
P alt(P a, P b) { return std::make_shared<const Re>(Re{Re::Alt, {}, std::move(a), std::move(b)}); }
P star(P a) { return std::make_shared<const Re>(Re{Re::Star, {}, std::move(a), nullptr}); }

}  // namespace

class PatternParser {
 public:
  PatternParser(std::string_view regex, std::string path) : path_(std::move(path)) {
    for (size_t i = 0; i < regex.size();) {  // UTF-8 -> code points
      const unsigned char c = regex[i];
      const int n = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 0;
      if (n == 0 || i + size_t(n) > regex.size()) fail("{}: the pattern is not valid UTF-8", path_);
      uint32_t cp = n == 1 ? c : c & (0xFF >> (n + 1));
      for (int k = 1; k < n; ++k) cp = cp << 6 | (uint8_t(regex[i + size_t(k)]) & 0x3F);
      s_.push_back(cp);
      i += size_t(n);
    }
  }

  StringPattern run() {
    const bool start_anchor = !s_.empty() && s_.front() == '^';
    if (start_anchor) ++i_;
    P root = parse_alt();
    bool end_anchor = false;
    if (i_ < s_.size() && s_[i_] == '$' && i_ + 1 == s_.size()) {
      end_anchor = true;
      ++i_;
    }
    if (i_ < s_.size()) error(s_[i_] == '$' ? "'$' is only supported at the end" : "unbalanced ')'");
    if ((start_anchor || end_anchor) && top_alternation_)
      error("an anchor beside a top-level '|' is not supported (write ^(a|b)$)");
    const P anything = star(leaf({{0, kMaxCodePoint}}));
    if (!start_anchor) root = cat(anything, root);
    if (!end_anchor) root = cat(root, anything);
    StringPattern p;
    const Sets sets = build(*root, p);
    p.first_ = sets.first;
    p.last_ = sets.last;
    p.nullable_ = sets.nullable;
    return p;
  }

 private:
  struct Sets {
    bool nullable;
    uint64_t first, last;
  };

  // `what` names the construct: "<what> is not supported" or a syntax problem.
  [[noreturn]] void error(std::string_view what) const { fail("{}: in the pattern: {}", path_, what); }

  bool at(uint32_t c) const { return i_ < s_.size() && s_[i_] == c; }

  P parse_alt() {
    const size_t depth_at_entry = depth_;
    P left = parse_cat();
    while (at('|')) {
      if (depth_at_entry == 0) top_alternation_ = true;
      ++i_;
      left = alt(left, parse_cat());
    }
    return left;
  }

  P parse_cat() {
    P left = empty();
    bool any = false;
    while (i_ < s_.size() && !at('|') && !at(')') && !(at('$') && i_ + 1 == s_.size())) {
      P next = parse_repeat();
      left = any ? cat(left, next) : next;
      any = true;
    }
    return left;
  }

  // {n}, {n,}, {n,m} at i_ (after the atom); false (i_ unchanged) when it is a literal '{'.
  bool parse_braces(int& lo, int& hi) {
    size_t j = i_ + 1;
    auto number = [&](int& out) {
      const size_t start = j;
      out = 0;
      while (j < s_.size() && s_[j] >= '0' && s_[j] <= '9' && out <= 100000) out = out * 10 + int(s_[j++] - '0');
      return j > start;
    };
    if (!number(lo)) return false;
    hi = lo;
    if (j < s_.size() && s_[j] == ',') {
      ++j;
      if (!number(hi)) hi = -1;
    }
    if (j >= s_.size() || s_[j] != '}') return false;
    i_ = j + 1;
    return true;
  }

  P parse_repeat() {
    P atom = parse_atom();
    while (i_ < s_.size()) {
      int lo = 0, hi = 0;
      if (at('*')) lo = 0, hi = -1, ++i_;
      else if (at('+')) lo = 1, hi = -1, ++i_;
      else if (at('?')) lo = 0, hi = 1, ++i_;
      else if (!(at('{') && parse_braces(lo, hi))) break;
      if (hi >= 0 && hi < lo) error("a quantifier {n,m} with m < n");
      if (lo > 1000 || hi > 1000) error("a repeat count above 1000 is not supported");
      if (at('?')) ++i_;  // lazy: the same language
      P out = empty();
      for (int k = 0; k < lo; ++k) out = k == 0 ? atom : cat(out, atom);
      if (hi < 0) {
        out = lo == 0 ? star(atom) : cat(out, star(atom));
      } else {
        for (int k = lo; k < hi; ++k) out = k == 0 ? alt(atom, empty()) : cat(out, alt(atom, empty()));
      }
      atom = out;
    }
    return atom;
  }

  P parse_atom() {
    const uint32_t c = s_[i_++];
    switch (c) {
      case '(': {
        if (at('?')) {
          if (i_ + 1 < s_.size() && s_[i_ + 1] == ':') i_ += 2;
          else error("lookaround and named groups are not supported");
        }
        ++depth_;
        P inner = parse_alt();
        --depth_;
        if (!at(')')) error("an unclosed '('");
        ++i_;
        return inner;
      }
      case '[': return leaf(parse_class());
      case '.': return leaf(complement(kLineTerminators));
      case '\\': {
        Ranges r;
        escape(r, false);
        return leaf(std::move(r));
      }
      case '*':
      case '+':
      case '?': error("a quantifier with nothing to repeat");
      case '^': error("'^' is only supported at the start");
      case '$': error("'$' is only supported at the end");
      case ')': error("unbalanced ')'");
      default: return leaf({{c, c}});
    }
  }

  // After a backslash: the class it stands for, into r.
  void escape(Ranges& r, bool in_class) {
    if (i_ >= s_.size()) error("a trailing backslash");
    const uint32_t c = s_[i_++];
    auto single = [&](uint32_t cp) { r.emplace_back(cp, cp); };
    auto hex = [&](int digits) {
      uint32_t v = 0;
      for (int k = 0; k < digits; ++k) {
        if (i_ >= s_.size()) error("a short hex escape");
        const uint32_t h = s_[i_++];
        const int d = h >= '0' && h <= '9' ? int(h - '0') : h >= 'a' && h <= 'f' ? int(h - 'a' + 10)
                    : h >= 'A' && h <= 'F' ? int(h - 'A' + 10) : -1;
        if (d < 0) error("a bad hex escape");
        v = v * 16 + uint32_t(d);
      }
      return v;
    };
    switch (c) {
      case 'd': r.insert(r.end(), kDigit.begin(), kDigit.end()); return;
      case 'D': { Ranges x = complement(kDigit); r.insert(r.end(), x.begin(), x.end()); return; }
      case 'w': r.insert(r.end(), kWord.begin(), kWord.end()); return;
      case 'W': { Ranges x = complement(kWord); r.insert(r.end(), x.begin(), x.end()); return; }
      case 's': r.insert(r.end(), kSpace.begin(), kSpace.end()); return;
      case 'S': { Ranges x = complement(kSpace); r.insert(r.end(), x.begin(), x.end()); return; }
      case 't': return single('\t');
      case 'n': return single('\n');
      case 'r': return single('\r');
      case 'f': return single('\f');
      case 'v': return single('\v');
      case '0': return single(0);
      case 'x': return single(hex(2));
      case 'u': return single(hex(4));
      case 'b':
        if (in_class) return single('\b');
        error("word boundaries are not supported");
      case 'B': error("word boundaries are not supported");
      case 'p':
      case 'P': error("unicode property classes are not supported");
      case 'k': error("backreferences are not supported");
      default:
        if (c >= '1' && c <= '9') error("backreferences are not supported");
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) error("an unknown escape");
        return single(c);  // escaped punctuation: itself
    }
  }

  Ranges parse_class() {
    bool negate = false;
    if (at('^')) negate = true, ++i_;
    Ranges r;
    bool first = true;
    while (true) {
      if (i_ >= s_.size()) error("an unclosed '['");
      if (at(']') && !first) break;
      if (at(']')) break;  // "[]": empty, refused below
      first = false;
      // One item: a character, an escape, or a range of two characters.
      Ranges item;
      uint32_t lo = s_[i_];
      bool is_char = true;
      if (at('\\')) {
        ++i_;
        escape(item, true);
        is_char = item.size() == 1 && item[0].first == item[0].second;
        lo = is_char ? item[0].first : 0;
      } else {
        ++i_;
        item.emplace_back(lo, lo);
      }
      if (is_char && at('-') && i_ + 1 < s_.size() && s_[i_ + 1] != ']') {
        ++i_;
        Ranges end;
        if (at('\\')) {
          ++i_;
          escape(end, true);
          if (end.size() != 1 || end[0].first != end[0].second) error("a range ending in a class escape");
        } else {
          end.emplace_back(s_[i_], s_[i_]);
          ++i_;
        }
        if (end[0].first < lo) error("a range out of order");
        item = {{lo, end[0].first}};
      }
      r.insert(r.end(), item.begin(), item.end());
    }
    ++i_;  // ']'
    r = negate ? complement(r) : normalize(r);
    if (r.empty()) error("an empty character class (it matches nothing)");
    return r;
  }

  Sets build(const Re& r, StringPattern& p) {
    switch (r.kind) {
      case Re::Leaf: {
        if (int(p.classes_.size()) >= StringPattern::kMaxPositions)
          fail("{}: the pattern is too long to generate ({} character positions at most, counting repeats)", path_,
               StringPattern::kMaxPositions);
        const uint64_t bit = uint64_t(1) << p.classes_.size();
        p.classes_.push_back(r.chars);
        p.follow_.push_back(0);
        return {false, bit, bit};
      }
      case Re::Empty: return {true, 0, 0};
      case Re::Cat: {
        const Sets a = build(*r.a, p), b = build(*r.b, p);
        for (size_t q = 0; q < p.follow_.size(); ++q)
          if (a.last >> q & 1) p.follow_[q] |= b.first;
        return {a.nullable && b.nullable, a.first | (a.nullable ? b.first : 0), b.last | (b.nullable ? a.last : 0)};
      }
      case Re::Alt: {
        const Sets a = build(*r.a, p), b = build(*r.b, p);
        return {a.nullable || b.nullable, a.first | b.first, a.last | b.last};
      }
      case Re::Star: {
        const Sets a = build(*r.a, p);
        for (size_t q = 0; q < p.follow_.size(); ++q)
          if (a.last >> q & 1) p.follow_[q] |= a.first;
        return {true, a.first, a.last};
      }
    }
    return {true, 0, 0};
  }

  std::vector<uint32_t> s_;
  size_t i_ = 0, depth_ = 0;
  bool top_alternation_ = false;
  std::string path_;
};

StringPattern StringPattern::compile(std::string_view regex, const std::string& path) {
  return PatternParser(regex, path).run();
}

std::optional<std::string> StringPattern::format_regex(std::string_view format) {
  // Days that exist in every year (no February 29th), so any generated date parses.
  const std::string date =
      R"(\d{4}-((0[13578]|1[02])-(0[1-9]|[12]\d|3[01])|(0[469]|11)-(0[1-9]|[12]\d|30)|02-(0[1-9]|1\d|2[0-8])))";
  const std::string time = R"(([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d{1,3})?(Z|[+-]([01]\d|2[0-3]):[0-5]\d))";
  if (format == "date") return "^" + date + "$";
  if (format == "time") return "^" + time + "$";
  if (format == "date-time") return "^" + date + "T" + time + "$";
  if (format == "uuid") return "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$";
  if (format == "email")
    return R"(^[A-Za-z0-9]+([._+-][A-Za-z0-9]+)*@[A-Za-z0-9]+(-[A-Za-z0-9]+)*(\.[A-Za-z0-9]+(-[A-Za-z0-9]+)*)*\.[A-Za-z]{2,}$)";
  if (format == "ipv4") return R"(^((25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)$)";
  return std::nullopt;
}

bool StringPattern::contains(const Ranges& r, uint32_t cp) {
  auto it = std::upper_bound(r.begin(), r.end(), std::make_pair(cp, kMaxCodePoint + 1));
  return it != r.begin() && std::prev(it)->second >= cp;
}

bool StringPattern::intersects(const Ranges& r, uint32_t lo, uint32_t hi) {
  for (auto [a, b] : r)
    if (a <= hi && b >= lo) return true;
  return false;
}

uint64_t StringPattern::next_positions(uint64_t state) const {
  uint64_t next = state & kStart ? first_ : 0;
  for (uint64_t s = state & ~kStart; s; s &= s - 1) next |= follow_[size_t(__builtin_ctzll(s))];
  return next;
}

uint64_t StringPattern::step(uint64_t state, uint32_t cp) const {
  uint64_t out = 0;
  for (uint64_t n = next_positions(state); n; n &= n - 1) {
    const int q = __builtin_ctzll(n);
    if (contains(classes_[size_t(q)], cp)) out |= uint64_t(1) << q;
  }
  return out;
}

uint64_t StringPattern::step_partial(uint64_t state, uint32_t prefix, int more) const {
  if (more == 0) return step(state, prefix);
  const uint32_t shift = 6 * uint32_t(more);
  return allows_any(state, prefix << shift, ((prefix + 1) << shift) - 1) ? state : 0;
}

bool StringPattern::allows_any(uint64_t state, uint32_t lo, uint32_t hi) const {
  for (uint64_t n = next_positions(state); n; n &= n - 1)
    if (intersects(classes_[size_t(__builtin_ctzll(n))], lo, hi)) return true;
  return false;
}

bool StringPattern::accepts(uint64_t state) const { return (state & kStart && nullable_) || (state & last_) != 0; }

}  // namespace megaqwen
