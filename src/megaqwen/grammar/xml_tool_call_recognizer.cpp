#include "megaqwen/grammar/xml_tool_call_recognizer.h"

#include <algorithm>
#include <tuple>

#include "megaqwen/grammar/token_mask.h"
#include "megaqwen/grammar/utf8_lead.h"
#include "megaqwen/util/error.h"

namespace megaqwen {

namespace {

using Config = XmlToolCallRecognizer::Config;
using Outcome = XmlToolCallGrammar::Outcome;
using Value = XmlToolCallGrammar::Value;

constexpr std::string_view kParameterOpen = "<parameter=";
constexpr std::string_view kParameterClose = "</parameter>";
constexpr uint16_t kFreeKeyClosed = 0xFFFF;  // FreeKey.pos after its '>': the newline comes next

bool free_key_byte(uint8_t c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
         c == '-';
}

// The parser ends a value at the first "</parameter>", so no value may hold one: `pos` counts the
// bytes of it that the value's text ends with; false for the byte that would complete it. (A JSON
// value can write its '/' as "\/" instead; a text value ends at a newline first.)
bool follow_close_tag(uint16_t& pos, uint8_t byte) {
  if (byte == uint8_t(kParameterClose[pos])) return ++pos < kParameterClose.size();
  pos = byte == '<' ? 1 : 0;
  return true;
}

// Text values are text: tabs and line breaks, no other control bytes.
bool text_byte(uint8_t c) { return c >= 0x20 || c == '\n' || c == '\t' || c == '\r'; }

// A count that only matters up to `min` (no upper bound) stays there, so alike states compare equal.
uint32_t bump(uint32_t count, const Value& v) {
  ++count;
  return v.max == JsonGrammar::kUnbounded ? std::min(count, v.min) : count;
}

auto fields(const Config& c) {
  return std::tie(c.stage, c.utf8_more, c.pos, c.tool, c.param, c.choice, c.lo, c.hi, c.count, c.utf8, c.pattern,
                  c.json);
}

template <class T>
void append(std::string& key, const T& v) {
  key.append(reinterpret_cast<const char*>(&v), sizeof v);
}

}  // namespace

bool XmlToolCallRecognizer::Config::operator==(const Config& o) const { return fields(*this) == fields(o); }
bool XmlToolCallRecognizer::Config::operator<(const Config& o) const { return fields(*this) < fields(o); }

XmlToolCallRecognizer::XmlToolCallRecognizer(std::shared_ptr<const XmlToolCallGrammar> grammar)
    : grammar_(std::move(grammar)) {
  for (const auto& tool : grammar_->tools) json_.emplace_back(tool.json);
  if (grammar_->forced_tool >= 0) {
    enter({Outcome::Kind::Parameters, uint32_t(grammar_->forced_tool), 0}, state_);
  } else {
    Config c;
    c.stage = Config::Choice;
    c.choice = uint32_t(grammar_->name_choice);
    c.hi = uint32_t(grammar_->choices[c.choice].texts.size());
    state_.push_back(c);
  }
  std::sort(state_.begin(), state_.end());
}

bool XmlToolCallRecognizer::advance(std::string_view bytes) { return advance_bytes(*this, state_, bytes); }

bool XmlToolCallRecognizer::complete(const State& state) {
  return std::any_of(state.begin(), state.end(), [](const Config& c) { return c.stage == Config::Done; });
}

std::string XmlToolCallRecognizer::cache_key(size_t max_piece_bytes) const {
  std::string key;
  for (const Config& config : state_) {
    uint32_t count = config.count;
    if (config.stage == Config::Text) {
      // A piece of k bytes adds at most k characters: from any count in [min, max - max_piece_bytes]
      // every piece fits or not alike.
      const Value& v = value_of(config);
      if (v.max != JsonGrammar::kUnbounded && count >= v.min && v.max - count >= max_piece_bytes) count = v.min;
    }
    append(key, config.stage);
    append(key, config.utf8_more);
    append(key, config.pos);
    for (uint32_t x : {config.tool, config.param, config.choice, config.lo, config.hi, count, config.utf8}) append(key, x);
    append(key, config.pattern);
    if (config.stage == Config::Json) {
      const std::string json = json_[config.tool].cache_key(config.json, max_piece_bytes);
      append(key, json.size());
      key += json;
    }
  }
  return key;
}

const Value& XmlToolCallRecognizer::value_of(const Config& c) const {
  const auto& tool = grammar_->tools[c.tool];
  return c.param < tool.params.size() ? tool.params[c.param].value : *tool.extra;
}

void XmlToolCallRecognizer::enter(const Outcome& outcome, State& out) const {
  const auto& tool = grammar_->tools[outcome.tool];
  Config c;
  c.tool = outcome.tool;
  switch (outcome.kind) {
    case Outcome::Kind::Parameters: {
      c.stage = Config::Choice;
      c.choice = uint32_t(tool.params_choice[outcome.param]);
      c.hi = uint32_t(grammar_->choices[c.choice].texts.size());
      out.push_back(c);
      const bool required_left = std::any_of(tool.params.begin() + outcome.param, tool.params.end(),
                                             [](const auto& p) { return p.required; });
      if (tool.extra && !required_left) {
        Config key;
        key.stage = Config::FreeKey;
        key.tool = outcome.tool;
        key.hi = uint32_t(tool.declared_keys.size());
        out.push_back(key);
      }
      return;
    }
    case Outcome::Kind::Value:
      enter_value(outcome.tool, outcome.param, tool.params[outcome.param].value, out);
      return;
    case Outcome::Kind::Done:
      c.stage = Config::Done;
      out.push_back(c);
      return;
  }
}

void XmlToolCallRecognizer::enter_value(uint32_t tool, uint32_t param, const Value& v, State& out) const {
  Config c;
  c.tool = tool;
  c.param = param;
  switch (v.kind) {
    case Value::Kind::Text:
      c.stage = Config::Text;
      if (v.pattern >= 0) c.pattern = StringPattern::kStart;
      break;
    case Value::Kind::TextEnum:
      c.stage = Config::Choice;
      c.choice = uint32_t(v.value_choice);
      c.hi = uint32_t(grammar_->choices[c.choice].texts.size());
      break;
    case Value::Kind::Json:
      c.stage = Config::Json;
      c.json = JsonRecognizer(grammar_->tools[tool].json, v.node).state();
      break;
  }
  out.push_back(std::move(c));
}

void XmlToolCallRecognizer::step(const State& in, uint8_t byte, State& out) const {
  out.clear();
  for (const Config& c : in) feed(c, byte, out);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  if (out.size() > kMaxConfigs)
    fail("the tool call's grammar is too ambiguous: more than {} readings of the reply at once", kMaxConfigs);
}

void XmlToolCallRecognizer::feed(const Config& c, uint8_t byte, State& out) const {
  switch (c.stage) {
    case Config::Choice: {
      // The candidates share their first `pos` bytes and are sorted: those with `byte` next are a
      // range (a text of exactly `pos` bytes has been taken already and left the range).
      const auto& choice = grammar_->choices[c.choice];
      const auto& texts = choice.texts;
      const auto at = [&](uint32_t k) { return uint8_t(texts[k][c.pos]); };
      uint32_t lo = c.lo;
      const uint32_t hi = c.hi;
      if (hi - lo > 8) {  // a name among many tools
        lo = uint32_t(std::partition_point(texts.begin() + lo, texts.begin() + hi,
                                           [&](const std::string& t) { return uint8_t(t[c.pos]) < byte; }) -
                      texts.begin());
      } else {
        while (lo < hi && at(lo) < byte) ++lo;
      }
      uint32_t end = lo;
      while (end < hi && at(end) == byte) ++end;
      if (lo == end) return;
      Config next = c;
      next.pos = uint16_t(c.pos + 1);
      next.lo = lo;
      next.hi = end;
      if (texts[lo].size() == next.pos) {
        enter(choice.outcomes[lo], out);
        ++next.lo;
      }
      if (next.lo < next.hi) out.push_back(std::move(next));
      return;
    }
    case Config::FreeKey: {
      // "<parameter=", the key, '>' and a newline. [lo, hi) are the declared keys the key so far
      // begins, so a key equal to one of them is refused at its '>' (or at its last byte, when no
      // longer key could follow).
      const auto& tool = grammar_->tools[c.tool];
      const auto& keys = tool.declared_keys;
      const size_t len = c.pos - kParameterOpen.size();  // key bytes so far
      auto equals_declared = [&](uint32_t lo, uint32_t hi, size_t n) { return lo < hi && keys[lo].size() == n; };
      Config next = c;
      if (c.pos < kParameterOpen.size()) {
        if (byte != uint8_t(kParameterOpen[c.pos])) return;
        ++next.pos;
      } else if (c.pos == kFreeKeyClosed) {
        if (byte == '\n') enter_value(c.tool, uint32_t(tool.params.size()), *tool.extra, out);
        return;
      } else if (byte == '>' && len > 0) {
        if (equals_declared(c.lo, c.hi, len)) return;
        next.pos = kFreeKeyClosed;
      } else if (free_key_byte(byte) && len < XmlToolCallGrammar::kMaxFreeKeyBytes) {
        ++next.pos;
        while (next.lo < next.hi && (keys[next.lo].size() <= len || uint8_t(keys[next.lo][len]) < byte)) ++next.lo;
        uint32_t end = next.lo;
        while (end < next.hi && keys[end].size() > len && uint8_t(keys[end][len]) == byte) ++end;
        next.hi = end;
        if (len + 1 == XmlToolCallGrammar::kMaxFreeKeyBytes && equals_declared(next.lo, next.hi, len + 1)) return;
      } else {
        return;
      }
      out.push_back(std::move(next));
      return;
    }
    case Config::Text:
      feed_text(c, byte, out);
      return;
    case Config::Json: {
      if (byte == '\n' && JsonRecognizer::complete(c.json)) {  // the newline before "</parameter>"
        Config close;
        close.stage = Config::Choice;
        close.tool = c.tool;
        close.choice = uint32_t(value_of(c).close_choice);
        close.pos = 1;
        close.hi = 1;
        out.push_back(close);
      }
      Config next = c;
      if (!follow_close_tag(next.pos, byte)) return;
      json_[c.tool].step(c.json, byte, next.json);
      if (!next.json.empty()) out.push_back(std::move(next));
      return;
    }
    case Config::Done:
      return;
  }
}

// A text value: its characters (the pattern stepped by each whole code point, a multi-byte one begun
// only when some code point it can become is allowed), or the newline that ends it.
void XmlToolCallRecognizer::feed_text(Config c, uint8_t byte, State& out) const {
  const Value& v = value_of(c);
  const StringPattern* pattern =
      v.pattern >= 0 ? &grammar_->tools[c.tool].json->patterns[size_t(v.pattern)] : nullptr;
  if (c.utf8_more > 0) {
    const auto [lo, hi] = utf8_continuation_range(c.utf8 & 7);
    if (byte < lo || byte > hi) return;
    --c.utf8_more;
    const uint32_t code_point = (c.utf8 >> 3) << 6 | (byte & 0x3F);
    if (pattern && !(c.pattern = pattern->step_partial(c.pattern, code_point, c.utf8_more))) return;
    c.utf8 = c.utf8_more > 0 && pattern ? code_point << 3 : 0;
    c.pos = 0;
    out.push_back(std::move(c));
    return;
  }
  if (byte == '\n' && c.count >= v.min && (!pattern || pattern->accepts(c.pattern))) {
    Config close;  // the value ends: this newline is the one before "</parameter>"
    close.stage = Config::Choice;
    close.tool = c.tool;
    close.choice = uint32_t(v.close_choice);
    close.hi = 1;
    out.push_back(close);
  }
  // A pattern decides for itself (it may ask for a control character, which has no other way in).
  if ((!pattern && !text_byte(byte)) || c.count >= v.max) return;
  if (!follow_close_tag(c.pos, byte)) return;
  if (byte >= 0x80) {
    const Utf8Lead lead = utf8_lead(byte);
    if (!lead.more || (pattern && !pattern->allows_any(c.pattern, lead.lo, lead.hi))) return;
    c.utf8_more = uint8_t(lead.more);
    c.utf8 = (pattern ? lead.payload << 3 : 0) | lead.range;
  } else if (pattern) {
    c.pattern = pattern->step(c.pattern, byte);
    if (!c.pattern) return;
  }
  c.count = bump(c.count, v);
  out.push_back(std::move(c));
}

}  // namespace megaqwen
