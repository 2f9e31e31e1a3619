// Forced Qwen3.5 tool calls (XmlToolCallGrammar, XmlToolCallRecognizer, XmlToolCallConstraint):
// calls the Qwen3.5 chat template writes are accepted and read back by the server's parser as the
// arguments they came from; what the parser would misread or the schema forbids is refused; random
// byte walks never dead-end and always parse into arguments that validate; token masks equal trying
// every token (toy and real Qwen3.5 vocabularies); generations from random logits finish as calls.
#include <gtest/gtest.h>

#include <random>

#include "grammar/noise_engine.h"
#include "grammar/random_walk.h"
#include "grammar/schema_validator.h"
#include "megaqwen/chat/chat_template.h"
#include "megaqwen/engine/generator.h"
#include "megaqwen/grammar/xml_tool_call_constraint.h"
#include "megaqwen/server/tool_call_parser.h"
#include "megaqwen/tokenizer/tokenizer.h"
#include "megaqwen/util/error.h"
#include "test_paths.h"

namespace megaqwen {
namespace {

using test::ojson;
using State = XmlToolCallRecognizer::State;

const std::vector<ojson> kTools = {
    ojson::parse(R"({"type": "function", "function": {"name": "get_weather", "parameters": {
      "type": "object", "required": ["city"],
      "properties": {"city": {"type": "string", "minLength": 1},
                     "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                     "days": {"type": "integer"}}}}})"),
    ojson::parse(R"({"type": "function", "function": {"name": "set_alarm", "parameters": {
      "type": "object", "required": ["hour"], "additionalProperties": false,
      "properties": {"hour": {"type": "integer"}, "label": {"type": "string", "maxLength": 5},
                     "tags": {"type": "array", "items": {"type": "string", "maxLength": 4}, "maxItems": 3},
                     "loud": {"type": "boolean"}}}}})"),
    ojson::parse(R"({"type": "function", "function": {"name": "run_code", "parameters": {
      "type": "object", "required": ["code"], "properties": {"code": {"type": "string"}}}}})"),
    ojson::parse(R"({"type": "function", "function": {"name": "anything"}})"),
    ojson::parse(R"({"type": "function", "function": {"name": "book", "parameters": {
      "type": "object", "required": ["day", "ref"],
      "properties": {"day": {"type": "string", "format": "date"},
                     "ref": {"type": "string", "pattern": "^[a-z]{2}[0-9]+$"}},
      "additionalProperties": {"type": "integer"}}}})"),
};

std::shared_ptr<const XmlToolCallGrammar> grammar_of(const std::string& forced = "") {
  return std::make_shared<const XmlToolCallGrammar>(XmlToolCallGrammar::from_tools(kTools, forced));
}

const ojson& parameters_of(const std::string& name) {
  static const ojson kAnyObject = {{"type", "object"}};
  for (const ojson& t : kTools)
    if (t["function"]["name"] == name) return t["function"].contains("parameters") ? t["function"]["parameters"] : kAnyObject;
  throw std::runtime_error("no tool " + name);
}

bool accepts(const std::shared_ptr<const XmlToolCallGrammar>& g, const std::string& text, bool whole = true) {
  XmlToolCallRecognizer r(g);
  return r.advance(text) && (!whole || r.complete());
}

// The call after "<tool_call>\n<function=" (what the server's forced prefix leaves to the model).
std::string rendered_call(const ChatTemplate& chat, const std::string& name, const ojson& arguments) {
  const ojson request = {{"messages",
                          {{{"role", "user"}, {"content", "q"}},
                           {{"role", "assistant"},
                            {"content", ""},
                            {"tool_calls", {{{"type", "function"}, {"function", {{"name", name}, {"arguments", arguments}}}}}}}}},
                         {"tools", kTools}};
  const std::string text = chat.render(request);
  const std::string open = "<tool_call>\n<function=", close = "</tool_call>";
  const size_t begin = text.rfind(open), end = text.rfind(close);
  if (begin == std::string::npos || end == std::string::npos) throw std::runtime_error("no call in: " + text);
  return text.substr(begin + open.size(), end + close.size() - begin - open.size());
}

// The arguments the server's parser reads from a call after "<function=".
std::optional<server::ParsedToolCall> parse(const std::string& call) {
  const std::string body = "<function=" + call.substr(0, call.size() - std::string("</tool_call>").size());
  return server::parse_tool_call(body, kTools);
}

TEST(XmlToolCall, AcceptsTheCallsTheTemplateWritesAndTheParserReadsThemBack) {
  const ChatTemplate chat = ChatTemplate::load(test::shared_dir() / "models" / "qwen3.5-0.8b");
  const std::vector<std::pair<std::string, ojson>> calls = {
      {"get_weather", {{"city", "Paris"}, {"unit", "celsius"}, {"days", 3}}},
      {"get_weather", {{"city", "New\nYork </param"}}},
      {"get_weather", {{"city", "Zoë"}, {"days", -12}}},
      {"set_alarm", {{"hour", 7}, {"label", "wake"}, {"tags", {"a", "bc"}}}},
      {"run_code", {{"code", "<div>\n  <p>x < 3 && y > 2</p>\n</div>\n"}}},
      {"run_code", {{"code", ""}}},
      {"anything", ojson::object()},
      {"anything", {{"x", 1}, {"y-z", "hello world"}}},
      {"book", {{"day", "2024-03-15"}, {"ref", "ab12"}, {"seats", 2}}},
  };
  const auto any = grammar_of();
  for (const auto& [name, args] : calls) {
    const std::string call = rendered_call(chat, name, args);
    EXPECT_TRUE(accepts(any, call)) << call;
    // Named: the server's prefix holds the name and its ">\n".
    EXPECT_TRUE(accepts(grammar_of(name), call.substr(name.size() + 2))) << call;
    const auto parsed = parse(call);
    ASSERT_TRUE(parsed) << call;
    EXPECT_EQ(parsed->name, name);
    EXPECT_EQ(ojson::parse(parsed->arguments), args) << call;
  }
}

TEST(XmlToolCall, RefusesWhatTheSchemaForbidsOrTheParserWouldMisread) {
  const auto g = grammar_of();
  const std::string end = "</function>\n</tool_call>";
  auto param = [](const std::string& key, const std::string& value) {
    return "<parameter=" + key + ">\n" + value + "\n</parameter>\n";
  };
  const std::string city = param("city", "Paris");
  EXPECT_TRUE(accepts(g, "get_weather>\n" + city + end));
  const std::vector<std::string> refused = {
      "get_wether>\n" + city + end,                                          // no such tool
      "get_weather>\n" + end,                                                // a required parameter left out
      "get_weather>\n" + param("unit", "celsius") + city + end,              // out of the schema's order
      "get_weather>\n" + city + city + end,                                  // twice
      "get_weather>\n" + city + param("unit", "kelvin") + end,               // not in the enum
      "get_weather>\n" + city + param("days", "three") + end,                // not an integer
      "get_weather>\n" + city + param("days", "1.5") + end,                  // not an integer
      "get_weather>\n" + city + param("color", "red") + end,                 // undeclared
      "get_weather>\n" + param("city", "") + end,                            // minLength 1
      "get_weather>\n<parameter=city>\nParis</parameter>\n" + end,           // the newline before the tag
      "get_weather>\n<parameter=city>\nA</parameter>B\n</parameter>\n" + end,  // the parser would stop early
      "get_weather>\n" + city + "</function>\n</tool_call>x",                // nothing after the call
      "set_alarm>\n" + param("hour", "7") + param("label", "toolong") + end,  // maxLength 5
      "set_alarm>\n" + param("hour", "7") + param("loud", "True") + end,     // Python's str(), not JSON
      "set_alarm>\n" + param("hour", "7") + param("tags", "[\"a\",\"b\",\"c\",\"d\"]") + end,  // maxItems 3
      "set_alarm>\n" + param("hour", "7") + param("x", "1") + end,           // additionalProperties false
      "anything>\n" + param("a b", "1") + end,                               // a key the tag cannot hold
      "book>\n" + param("day", "2023-02-29") + param("ref", "ab1") + end,    // no such date
      "book>\n" + param("day", "2024-03-15") + param("ref", "a1") + end,     // pattern
      "book>\n" + param("day", "2024-03-15") + param("ref", "ab1") + param("n", "x") + end,  // extra: integers
      "book>\n" + param("day", "2024-03-15") + param("ref", "ab1") + param("day", "4") + end,  // a declared key again
      "run_code>\n" + param("code", std::string("a\x01") + "b") + end,         // control bytes
      "run_code>\n" + param("code", "\xC3\x28") + end,                         // invalid UTF-8
  };
  for (const std::string& text : refused) EXPECT_FALSE(accepts(g, text)) << text;
  // Whole calls only: a prefix is not complete, and nothing but the call's own text follows.
  EXPECT_FALSE(accepts(g, "get_weather>\n" + city));
  EXPECT_TRUE(accepts(g, "get_weather>\n" + city, /*whole=*/false));
  EXPECT_TRUE(accepts(g, "set_alarm>\n" + param("hour", "7") + param("loud", "true") + end));
  // Found by fuzz_tool_call: a JSON string holding the closing tag (the parser would stop there); JSON
  // can write its '/' escaped, and the parser reads that back.
  const std::vector<ojson> notes = {ojson::parse(R"({"type": "function", "function": {"name": "notes", "parameters":
      {"type": "object", "properties": {"lines": {"type": "array", "items": {"type": "string"}}}}}})")};
  const auto g_notes = std::make_shared<const XmlToolCallGrammar>(XmlToolCallGrammar::from_tools(notes, ""));
  EXPECT_FALSE(accepts(g_notes, "notes>\n" + param("lines", "[\"</parameter>a\", \"b\"]") + end));
  EXPECT_TRUE(accepts(g_notes, "notes>\n" + param("lines", "[\"</parameter\", \"<p>\"]") + end));
  const std::string escaped = "notes>\n" + param("lines", "[\"<\\/parameter>a\"]") + end;
  EXPECT_TRUE(accepts(g_notes, escaped));
  const std::string body = "<function=" + escaped.substr(0, escaped.size() - std::string("</tool_call>").size());
  const auto parsed = server::parse_tool_call(body, notes);
  ASSERT_TRUE(parsed) << escaped;
  EXPECT_EQ(ojson::parse(parsed->arguments).at("lines"), ojson({"</parameter>a"}));
  EXPECT_TRUE(accepts(g, "book>\n" + param("day", "2024-03-15") + param("ref", "ab1") + param("n", "4") + end));
  EXPECT_TRUE(accepts(g, "book>\n" + param("day", "2024-03-15") + param("ref", "ab1") + param("da", "4") +
                             param("days", "5") + param("d", "6") + end));
  // A pattern that asks for a control character gets it (text values otherwise refuse them).
  const std::vector<ojson> control = {ojson::parse(R"({"type": "function", "function": {"name": "f", "parameters":
      {"type": "object", "required": ["a"], "properties": {"a": {"type": "string", "pattern": "^x\\u0001+$"}}}}})")};
  const auto g_control = std::make_shared<const XmlToolCallGrammar>(XmlToolCallGrammar::from_tools(control, ""));
  EXPECT_TRUE(accepts(g_control, "f>\n" + param("a", "x\x01\x01") + end));
  EXPECT_FALSE(accepts(g_control, "f>\n" + param("a", "x\x02") + end));
  // A named tool: only its parameters.
  EXPECT_TRUE(accepts(grammar_of("run_code"), param("code", "x") + end));
  EXPECT_FALSE(accepts(grammar_of("run_code"), city + end));
}

TEST(XmlToolCall, RefusesToolsTheFormCannotCarry) {
  auto tool = [](const std::string& name, const ojson& parameters) {
    return ojson{{"type", "function"}, {"function", {{"name", name}, {"parameters", parameters}}}};
  };
  const ojson bad_key = {{"type", "object"}, {"properties", {{"a>b", {{"type", "integer"}}}}}};
  EXPECT_THROW(XmlToolCallGrammar::from_tools({tool("f", bad_key)}, ""), Error);
  EXPECT_THROW(XmlToolCallGrammar::from_tools({tool("f g\n", ojson::object())}, ""), Error);
  const ojson bad_enum = {{"type", "object"},
                          {"properties", {{"a", {{"type", "string"}, {"enum", {"x</parameter>y"}}}}}}};
  EXPECT_THROW(XmlToolCallGrammar::from_tools({tool("f", bad_enum)}, ""), Error);
  // Found by fuzz_tool_call: a pattern forcing the closing tag left the value with no byte allowed.
  for (const char* spelled : {"^</parameter>]+$", "^a<\\/parameter>$"}) {
    const ojson bad_pattern = {{"type", "object"},
                               {"properties", {{"day", {{"type", "string"}, {"pattern", spelled}}}}}};
    EXPECT_THROW(XmlToolCallGrammar::from_tools({tool("f", bad_pattern)}, ""), Error) << spelled;
  }
  // Nor where a JSON value's bytes are fixed: enum, const, property names, patterns (found by fuzz_tool_call:
  // an untyped value with a pattern spelling the tag).
  const std::vector<ojson> fixed = {
      {{"pattern", "^a{</parameter>2}0$"}},
      {{"type", "array"}, {"items", {{"type", "string"}, {"pattern", "^</parameter>$"}}}},
      {{"type", "array"}, {"items", {{"enum", {"</parameter>"}}}}},
      {{"anyOf", {{{"type", "integer"}}, {{"const", "x</parameter>"}}}}},
      {{"type", "object"}, {"properties", {{"</parameter>", {{"type", "integer"}}}}}, {"required", {"</parameter>"}}},
  };
  for (const ojson& value : fixed) {
    const ojson parameters = {{"type", "object"}, {"properties", {{"v", value}}}};
    EXPECT_THROW(XmlToolCallGrammar::from_tools({tool("f", parameters)}, ""), Error) << value.dump();
  }
  EXPECT_THROW(XmlToolCallGrammar::from_tools({tool("f", ojson::object()), tool("f", ojson::object())}, ""), Error);
  EXPECT_THROW(XmlToolCallGrammar::from_tools({tool("f", ojson::object())}, "g"), Error);
  // Parameters JsonGrammar refuses: the call is still well-formed, with any keys.
  const ojson refused = {{"type", "object"}, {"properties", {{"n", {{"type", "integer"}, {"minimum", 3}}}}}};
  const auto g = std::make_shared<const XmlToolCallGrammar>(XmlToolCallGrammar::from_tools({tool("f", refused)}, ""));
  EXPECT_TRUE(accepts(g, "f>\n<parameter=n>\n1\n</parameter>\n</function>\n</tool_call>"));
}

// A free key equal to a declared one would overwrite it when parsed: refused, also at the longest
// length a free key may have (where no longer key could take its place).
TEST(XmlToolCall, FreeKeysAreNeverADeclaredKey) {
  const std::string long_key(XmlToolCallGrammar::kMaxFreeKeyBytes, 'a');
  const ojson tool = {{"type", "function"},
                      {"function", {{"name", "f"}, {"parameters", {{"type", "object"},
                                                                     {"properties", {{long_key, {{"type", "integer"}}}}},
                                                                     {"additionalProperties", true}}}}}};
  const auto g = std::make_shared<const XmlToolCallGrammar>(XmlToolCallGrammar::from_tools({tool}, ""));
  const std::string end = "</function>\n</tool_call>";
  EXPECT_TRUE(accepts(g, "f>\n<parameter=" + long_key + ">\n1\n</parameter>\n" + end));
  EXPECT_FALSE(accepts(g, "f>\n<parameter=" + long_key + ">\n1\n</parameter>\n<parameter=" + long_key, false));
  EXPECT_TRUE(accepts(g, "f>\n<parameter=" + long_key.substr(1) + "b>\nx\n</parameter>\n" + end));
  EXPECT_TRUE(accepts(g, "f>\n<parameter=" + long_key.substr(1) + ">\nx\n</parameter>\n" + end));
}

// A random byte walk (random_walk.h) to a whole call; past `soft_limit` bytes it prefers the bytes
// that go furthest into a fixed text (the closing tags, the next key), finishing one once begun, or
// that close a JSON value.
std::string random_walk(const std::shared_ptr<const XmlToolCallGrammar>& g, std::mt19937_64& rng, size_t soft_limit) {
  using Config = XmlToolCallRecognizer::Config;
  struct Policy {
    const XmlToolCallRecognizer& r;
    bool stop(const State&, const std::string&, std::mt19937_64&) const { return true; }  // nothing may follow
    bool must_close(const State& state) const {
      return std::any_of(state.begin(), state.end(), [](const Config& c) { return c.stage == Config::Choice && c.pos > 0; });
    }
    int closer(const State& state, const std::vector<uint8_t>& fits, std::mt19937_64& rng) const {
      std::vector<uint8_t> closing;
      int furthest = 0;
      State next;
      for (uint8_t b : fits) {
        r.step(state, b, next);
        int progress = 0;
        for (const Config& c : next) {
          if (c.stage == Config::Done) progress = 1 << 20;
          if (c.stage == Config::Choice) progress = std::max(progress, c.pos + 1);
        }
        if (progress > furthest) closing.clear(), furthest = progress;
        if (progress > 0 && progress == furthest) closing.push_back(b);
      }
      return closing.empty() ? test::json_closer(fits) : closing[rng() % closing.size()];
    }
  };
  const XmlToolCallRecognizer r(g);
  return test::random_byte_walk(r, rng, soft_limit, Policy{r});
}

TEST(XmlToolCall, RandomWalksNeverDeadEndAndParseIntoValidArguments) {
  std::mt19937_64 rng(20261122);
  std::vector<std::string> forced = {""};
  for (const ojson& t : kTools) forced.push_back(t["function"]["name"]);
  for (const std::string& name : forced) {
    const auto g = grammar_of(name);
    for (int i = 0; i < 40; ++i) {
      std::string call = random_walk(g, rng, 30 + 10 * size_t(i % 6));
      if (!name.empty()) call = name + ">\n" + call;
      const auto parsed = parse(call);
      ASSERT_TRUE(parsed) << call;
      if (!name.empty()) {
        EXPECT_EQ(parsed->name, name);
      }
      const ojson args = ojson::parse(parsed->arguments);
      const ojson& schema = parameters_of(parsed->name);
      EXPECT_TRUE(test::validates(args, schema, schema)) << schema.dump() << "\n  " << call << "\n  " << args.dump();
    }
  }
}

// A toy vocabulary: every byte, and pieces that cross the call's structure.
std::vector<std::string> toy_vocab() {
  std::vector<std::string> v;
  for (int b = 0; b < 256; ++b) v.push_back(std::string(1, char(b)));
  for (const char* piece : {"<parameter=", "</parameter>", "</parameter>\n", "\n</parameter>\n", "\n</", "</",
                            "city", ">\n", "</function>", "\n</tool_call>", "</tool_call>", "Paris", "get_weather",
                            "get", "_weather>\n", "unit", "celsius", "celsius\n", "12", "7\n", "[\"", "\"]", "\n\n",
                            "<div>", "set_alarm>\n", "hour", "label", "\u00e9t\u00e9", "\xE2\x82", "\xAC"})
    v.push_back(piece);
  v.push_back("");
  return v;
}

constexpr int32_t kToyEnd = 9999;

std::vector<int32_t> allowed_ids(XmlToolCallConstraint& c, int32_t vocab) {
  std::vector<int32_t> ids;
  for (int32_t id = 0; id < vocab; ++id)
    if (token_bit(c.allowed(), id)) ids.push_back(id);
  return ids;
}

std::vector<int32_t> brute_force(const XmlToolCallRecognizer& r, const TokenTrie& trie, std::vector<int32_t> ends,
                                 const std::vector<XmlToolCallConstraint::AddedToken>& added = {}) {
  std::vector<int32_t> ids;
  for (int32_t id = 0; id < trie.vocab_size(); ++id) {
    std::string_view bytes = trie.bytes(id);
    for (const auto& t : added)
      if (t.id == id) bytes = t.text;
    if (bytes.empty()) continue;
    XmlToolCallRecognizer copy = r;
    if (copy.advance(bytes)) ids.push_back(id);
  }
  if (r.complete()) ids.insert(ids.end(), ends.begin(), ends.end());
  std::sort(ids.begin(), ids.end());
  return ids;
}

// Longest pieces first: a plausible tokenization of `text` in the toy vocabulary.
std::vector<int32_t> toy_tokens(const TokenTrie& trie, const std::string& text) {
  std::vector<int32_t> ids;
  for (size_t at = 0; at < text.size();) {
    int32_t best = -1;
    for (int32_t id = 0; id < trie.vocab_size(); ++id) {
      const std::string_view b = trie.bytes(id);
      if (!b.empty() && text.compare(at, b.size(), b) == 0 && (best < 0 || b.size() > trie.bytes(best).size())) best = id;
    }
    ids.push_back(best);
    at += trie.bytes(best).size();
  }
  return ids;
}

TEST(XmlToolCallConstraint, MaskEqualsTryingEveryTokenOnAToyVocabulary) {
  const auto trie = std::make_shared<const TokenTrie>(toy_vocab());
  const std::string call =
      "get_weather>\n<parameter=city>\nParis été\n</parameter>\n<parameter=unit>\ncelsius\n</parameter>\n"
      "<parameter=days>\n12\n</parameter>\n</function>\n</tool_call>";
  XmlToolCallConstraint c(grammar_of(), trie, {kToyEnd});
  const std::vector<int32_t> tokens = toy_tokens(*trie, call);
  for (size_t i = 0; i <= tokens.size(); ++i) {
    EXPECT_EQ(allowed_ids(c, kToyEnd + 1), brute_force(c.recognizer(), *trie, {kToyEnd})) << "before token " << i;
    if (i == tokens.size()) break;
    ASSERT_TRUE(token_bit(c.allowed(), tokens[i])) << i;
    c.accept(tokens[i]);
  }
  EXPECT_TRUE(c.recognizer().complete());
  EXPECT_THROW(c.accept(toy_tokens(*trie, "x")[0]), Error);
}

TEST(XmlToolCallConstraint, EndsOnlyWhenTheCallIsWhole) {
  const auto trie = std::make_shared<const TokenTrie>(toy_vocab());
  XmlToolCallConstraint c(grammar_of("run_code"), trie, {kToyEnd});
  std::vector<float> logits(kToyEnd + 1, 0.0f);
  c.mask(logits);
  EXPECT_EQ(logits[kToyEnd], -INFINITY);
  EXPECT_THROW(c.accept(kToyEnd), Error);
  for (int32_t t : toy_tokens(*trie, "<parameter=code>\nx\n</parameter>\n</function>\n</tool_call>")) c.accept(t);
  std::fill(logits.begin(), logits.end(), 0.0f);
  c.mask(logits);
  for (int32_t id = 0; id < kToyEnd; ++id) ASSERT_EQ(logits[size_t(id)], -INFINITY) << id;
  EXPECT_EQ(logits[kToyEnd], 0.0f);
  c.accept(kToyEnd);
}

TEST(XmlToolCallConstraint, MaskEqualsTryingEveryTokenOfTheQwen35Vocabulary) {
  const Tokenizer tok = Tokenizer::load(test::shared_dir() / "models/qwen3.5-0.8b");
  const auto trie = TokenTrie::of(tok);
  const int32_t im_end = *tok.token_id("<|im_end|>");
  // "</tool_call>" is an added token: the trie leaves it out, the constraint tries its text.
  const std::vector<XmlToolCallConstraint::AddedToken> added = {{*tok.token_id("</tool_call>"), "</tool_call>"}};
  ASSERT_TRUE(trie->bytes(added[0].id).empty());
  const std::string call =
      "set_alarm>\n<parameter=hour>\n7\n</parameter>\n<parameter=label>\nwaké\n</parameter>\n"
      "<parameter=tags>\n[\"a\", \"bc\"]\n</parameter>\n</function>\n</tool_call>";
  const std::vector<int32_t> tokens = tok.encode(call);
  ASSERT_EQ(tokens[tokens.size() - 1], added[0].id);
  XmlToolCallConstraint c(grammar_of(), trie, {im_end}, added);
  for (size_t i = 0; i <= tokens.size(); ++i) {
    if (i % 3 == 0 || i + 1 >= tokens.size()) {  // the brute force takes ~0.2 s a state
      EXPECT_EQ(allowed_ids(c, tok.vocab_size()), brute_force(c.recognizer(), *trie, {im_end}, added))
          << "before token " << i;
    }
    if (i == tokens.size()) break;
    ASSERT_TRUE(token_bit(c.allowed(), tokens[i])) << "token " << i << " of the call: " << trie->bytes(tokens[i]);
    c.accept(tokens[i]);
  }
  EXPECT_TRUE(token_bit(c.allowed(), im_end));
}

TEST(XmlToolCallConstraint, GenerationsOfRandomLogitsParseIntoValidCalls) {
  const auto trie = std::make_shared<const TokenTrie>(toy_vocab());
  test::NoiseEngine engine(kToyEnd + 1);
  Generator gen(engine);
  int whole = 0;
  for (const std::string name : {"", "set_alarm", "get_weather"}) {
    for (uint64_t seed = 0; seed < 20; ++seed) {
      const GenerationResult r = gen.run(test::noise_request(trie, kToyEnd, seed, [&](std::vector<int32_t> ends) {
        return std::make_shared<XmlToolCallConstraint>(grammar_of(name), trie, std::move(ends));
      }));
      if (r.finish == FinishReason::Length) continue;  // noise may ramble inside a text value: cut, not wrong
      ASSERT_EQ(r.finish, FinishReason::Eos);
      ++whole;
      const auto parsed = parse(name.empty() ? r.text : name + ">\n" + r.text);
      ASSERT_TRUE(parsed) << r.text;
      const ojson& schema = parameters_of(parsed->name);
      EXPECT_TRUE(test::validates(ojson::parse(parsed->arguments), schema, schema)) << r.text;
    }
  }
  EXPECT_GE(whole, 10) << "some random generations should finish";
}

}  // namespace
}  // namespace megaqwen
