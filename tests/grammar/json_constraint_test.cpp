// JsonConstraint: its token masks equal trying every token's bytes on the recognizer (on a toy
// vocabulary and on the real Qwen3 one), the end tokens only once the value is whole, added tokens
// never; start_after; and whole generations (random logits, sampled) that parse and validate.
#include "megaqwen/grammar/json_constraint.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <random>

#include "grammar/noise_engine.h"
#include "grammar/schema_validator.h"
#include "megaqwen/engine/generator.h"
#include "megaqwen/tokenizer/tokenizer.h"
#include "megaqwen/util/error.h"
#include "test_paths.h"

namespace megaqwen {
namespace {

using test::ojson;

const ojson kPerson = ojson::parse(R"({
  "type": "object",
  "properties": {
    "name": {"type": "string", "minLength": 1, "maxLength": 12},
    "age": {"type": "integer"},
    "tags": {"type": "array", "items": {"enum": ["red", "green", "blue"]}, "maxItems": 3},
    "ok": {"type": "boolean"}
  },
  "required": ["name", "age"],
  "additionalProperties": false
})");

std::shared_ptr<const JsonGrammar> grammar_of(const ojson& schema) {
  return std::make_shared<const JsonGrammar>(JsonGrammar::from_schema(schema));
}

// A toy vocabulary: every single byte, and multi-byte pieces that cross JSON's structure.
std::vector<std::string> toy_vocab() {
  std::vector<std::string> v;
  for (int b = 0; b < 256; ++b) v.push_back(std::string(1, char(b)));
  for (const char* piece : {"{\"", "\":", "\",", "\"}", "name", "\"name\"", "age", "\":\"", "tags", "red", "\"red\"",
                            "green", "blue", "\", \"", "true", "false", "null", "12", "123", "}\n", "],", "[\"", "\"]",
                            " \"", ", ", "ok", "\u00e9t\u00e9", "\xE2\x82", "\xAC", "\\n", "\\u00", "  ", "\n  "})
    v.push_back(piece);
  v.push_back("");  // a hole: no token with this id
  return v;
}

constexpr int32_t kToyEnd = 9999;

// What allowed() must equal: each token's bytes tried on a copy of the recognizer.
std::vector<int32_t> brute_force(const JsonRecognizer& r, const TokenTrie& trie, const std::vector<int32_t>& ends) {
  std::vector<int32_t> ids;
  for (int32_t id = 0; id < trie.vocab_size(); ++id) {
    const std::string_view bytes = trie.bytes(id);
    if (bytes.empty()) continue;
    JsonRecognizer copy = r;
    if (copy.advance(bytes)) ids.push_back(id);
  }
  if (r.complete()) ids.insert(ids.end(), ends.begin(), ends.end());
  std::sort(ids.begin(), ids.end());
  return ids;
}

std::vector<int32_t> allowed_ids(JsonConstraint& c, int32_t limit) {
  std::vector<int32_t> ids;
  for (int32_t id = 0; id < limit; ++id)
    if (JsonConstraint::allows(c.allowed(), id)) ids.push_back(id);
  return ids;
}

TEST(JsonConstraint, MaskEqualsTryingEveryTokenOnAToyVocabulary) {
  const auto trie = std::make_shared<const TokenTrie>(toy_vocab());
  const ojson patterned = ojson::parse(R"({"type": "object", "required": ["d", "c"], "properties": {
    "d": {"type": "string", "format": "date"}, "c": {"type": "string", "pattern": "^(red|gr[eé]+n)\\d?$"}}})");
  std::mt19937_64 rng(11);
  for (int run = 0; run < 20; ++run) {
    const auto g = grammar_of(run % 2 ? patterned : kPerson);
    JsonConstraint c(g, trie, {kToyEnd});
    for (int step = 0; step < 200; ++step) {
      const std::vector<int32_t> expect = brute_force(c.recognizer(), *trie, {kToyEnd});
      ASSERT_EQ(allowed_ids(c, kToyEnd + 1), expect) << "after " << step << " tokens";
      ASSERT_FALSE(expect.empty()) << "dead end";
      const int32_t pick = expect[rng() % expect.size()];
      if (pick == kToyEnd) break;
      c.accept(pick);
    }
  }
}

TEST(JsonConstraint, MaskSetsEveryOtherLogitToMinusInfinity) {
  const auto trie = std::make_shared<const TokenTrie>(toy_vocab());
  JsonConstraint c(grammar_of(kPerson), trie, {kToyEnd});
  std::vector<float> logits(size_t(kToyEnd) + 1, 0.5f);
  c.mask(logits);
  for (int32_t id = 0; id <= kToyEnd; ++id) {
    const bool ok = id == '{' || id == ' ' || id == '\n' || id == '\t' || id == '\r' || trie->bytes(id) == "{\"" ||
                    trie->bytes(id) == "  " || trie->bytes(id) == "\n  ";
    EXPECT_EQ(logits[size_t(id)], ok ? 0.5f : -INFINITY) << id;
  }
  // Only tokens already at -infinity allowed: an error, not a draw from nothing.
  std::vector<float> none(size_t(kToyEnd) + 1, 0.0f);
  none[size_t('{')] = -INFINITY;
  for (int32_t id = 0; id <= kToyEnd; ++id)
    if (id != '{') none[size_t(id)] = -INFINITY;
  EXPECT_THROW(c.mask(none), Error);
  EXPECT_THROW(c.accept('x'), Error) << "a token the mask did not allow";
}

TEST(JsonConstraint, LeavesTheThinkingFree) {
  const auto trie = std::make_shared<const TokenTrie>(toy_vocab());
  const JsonConstraint::ThinkTokens think{9000, 9001};
  std::vector<float> logits(size_t(kToyEnd) + 1, 1.0f);
  auto free = [&] { return std::all_of(logits.begin(), logits.end(), [](float x) { return x == 1.0f; }); };
  // The prompt opened the thinking: free until </think>, then JSON.
  JsonConstraint in(grammar_of(kPerson), trie, {kToyEnd}, think, true);
  in.mask(logits);
  EXPECT_TRUE(free());
  in.accept('x');
  in.accept(think.open);
  EXPECT_TRUE(in.thinking());
  in.accept(think.close);
  EXPECT_FALSE(in.thinking());
  in.mask(logits);
  EXPECT_EQ(logits[size_t('x')], -INFINITY);
  EXPECT_EQ(logits[size_t('{')], 1.0f);
  EXPECT_EQ(logits[size_t(think.open)], -INFINITY) << "one thinking block";
  // The reply may open one itself: <think> or the JSON's first token.
  std::fill(logits.begin(), logits.end(), 1.0f);
  JsonConstraint may(grammar_of(kPerson), trie, {kToyEnd}, think, false);
  may.mask(logits);
  EXPECT_EQ(logits[size_t(think.open)], 1.0f);
  EXPECT_EQ(logits[size_t('{')], 1.0f);
  EXPECT_EQ(logits[size_t('x')], -INFINITY);
  may.accept(think.open);
  std::fill(logits.begin(), logits.end(), 1.0f);
  may.mask(logits);
  EXPECT_TRUE(free());
  // ... or start the JSON at once, after which <think> is just another refused token.
  JsonConstraint direct(grammar_of(kPerson), trie, {kToyEnd}, think, false);
  direct.accept('{');
  std::fill(logits.begin(), logits.end(), 1.0f);
  direct.mask(logits);
  EXPECT_EQ(logits[size_t(think.open)], -INFINITY);
  EXPECT_EQ(logits[size_t('"')], 1.0f);
}

TEST(JsonConstraint, ASuffixFollowsTheWholeValueBeforeTheEnd) {
  const auto trie = std::make_shared<const TokenTrie>(toy_vocab());
  JsonConstraint c(grammar_of(ojson::parse(R"({"type": "object", "properties": {"a": {"type": "boolean"}},
                                                "required": ["a"]})")),
                   trie, {kToyEnd});
  c.set_suffix({9100, 9101});
  std::vector<float> logits(size_t(kToyEnd) + 1, 1.0f);
  auto allowed = [&] {
    std::fill(logits.begin(), logits.end(), 1.0f);
    c.mask(logits);
    std::vector<int32_t> ids;
    for (int32_t i = 0; i <= kToyEnd; ++i)
      if (logits[size_t(i)] == 1.0f) ids.push_back(i);
    return ids;
  };
  for (char b : std::string("{\"a\":true"))
    c.accept(b);
  const std::vector<int32_t> open = allowed();
  EXPECT_TRUE(std::find(open.begin(), open.end(), '}') != open.end());
  EXPECT_TRUE(std::find(open.begin(), open.end(), 9100) == open.end()) << "not before the value is whole";
  c.accept('}');
  EXPECT_EQ(allowed(), (std::vector<int32_t>{9100})) << "the suffix, not the end";
  EXPECT_THROW(c.accept(kToyEnd), Error);
  c.accept(9100);
  EXPECT_EQ(allowed(), (std::vector<int32_t>{9101}));
  c.accept(9101);
  EXPECT_EQ(allowed(), (std::vector<int32_t>{kToyEnd}));
}

class Qwen3Vocabulary : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tokenizer_ = new Tokenizer(Tokenizer::load(test::shared_dir() / "models/qwen3-0.6b"));
    trie_ = new std::shared_ptr<const TokenTrie>(TokenTrie::of(*tokenizer_));
  }
  static void TearDownTestSuite() {
    delete trie_;
    delete tokenizer_;
  }
  static Tokenizer* tokenizer_;
  static std::shared_ptr<const TokenTrie>* trie_;
};
Tokenizer* Qwen3Vocabulary::tokenizer_ = nullptr;
std::shared_ptr<const TokenTrie>* Qwen3Vocabulary::trie_ = nullptr;

TEST_F(Qwen3Vocabulary, MaskEqualsTryingEveryToken) {
  const Tokenizer& tok = *tokenizer_;
  const int32_t im_end = *tok.token_id("<|im_end|>"), endoftext = *tok.token_id("<|endoftext|>");
  // The reply, tokenized as the model might write it; the mask is checked before each token.
  const std::string reply = "{\"name\": \"Zoë \\\"Z\\\"\", \"age\": 41, \"tags\": [\"red\",\"blue\"], \"ok\": true}";
  const std::vector<int32_t> tokens = tok.encode(reply);
  JsonConstraint c(grammar_of(kPerson), *trie_, {im_end, endoftext});
  for (size_t i = 0; i <= tokens.size(); ++i) {
    const auto start = std::chrono::steady_clock::now();
    const std::vector<int32_t> got = allowed_ids(c, tok.vocab_size());
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (i % 4 == 0) {  // the brute force takes ~0.1 s a state
      EXPECT_EQ(got, brute_force(c.recognizer(), **trie_, {endoftext, im_end})) << "before token " << i;
    }
    for (int32_t id : got) ASSERT_FALSE(tok.is_added(id) && id != im_end && id != endoftext) << id;
    const bool has_end = JsonConstraint::allows(c.allowed(), im_end);
    EXPECT_EQ(has_end, i == tokens.size()) << "end tokens only once the value is whole";
    if (i < tokens.size()) {
      EXPECT_TRUE(JsonConstraint::allows(c.allowed(), tokens[i])) << "token " << i << " of the reply";
      c.accept(tokens[i]);
    }
    RecordProperty("mask_ms_" + std::to_string(i), std::to_string(ms));
  }
}

TEST(JsonConstraint, GenerationsOfRandomLogitsParseAndValidate) {
  const auto trie = std::make_shared<const TokenTrie>(toy_vocab());
  const std::vector<ojson> schemas = {kPerson, ojson::parse(R"({"type": "object"})"),
                                      ojson::parse(R"({"type": "array", "items": {"type": "number"}, "maxItems": 4})")};
  test::NoiseEngine engine(kToyEnd + 1);
  Generator gen(engine);
  int whole = 0;
  for (const ojson& schema : schemas) {
    for (uint64_t seed = 0; seed < 20; ++seed) {
      const GenerationResult r = gen.run(test::noise_request(trie, kToyEnd, seed, [&](std::vector<int32_t> ends) {
        return std::make_shared<JsonConstraint>(grammar_of(schema), trie, std::move(ends));
      }));
      if (r.finish == FinishReason::Length) continue;  // noise may ramble: cut, not wrong
      ASSERT_EQ(r.finish, FinishReason::Eos);
      ++whole;
      ojson v;
      ASSERT_NO_THROW(v = ojson::parse(r.text)) << r.text;
      EXPECT_TRUE(test::validates(v, schema, schema)) << schema.dump() << "\n  " << r.text;
    }
  }
  EXPECT_GE(whole, 20) << "most random generations should finish";
}

}  // namespace
}  // namespace megaqwen
