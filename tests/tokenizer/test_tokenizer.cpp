#include "megaqwen/tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <thread>

#include "megaqwen/util/error.h"
#include "tokenizer_fixture.h"

namespace megaqwen {
namespace {

using Ids = std::vector<std::int32_t>;

TEST(Tokenizer, SpecialTokenIds) {
  const Tokenizer& tok = test::qwen3_tokenizer();
  EXPECT_EQ(tok.token_id("<|endoftext|>"), 151643);
  EXPECT_EQ(tok.token_id("<|im_start|>"), 151644);
  EXPECT_EQ(tok.token_id("<|im_end|>"), 151645);
  EXPECT_EQ(tok.token_id("<think>"), 151667);
  EXPECT_EQ(tok.token_id("</think>"), 151668);
  EXPECT_EQ(tok.token_id("<tool_call>"), 151657);
  EXPECT_EQ(tok.token_id("\xC4\xA0the"), 279);  // vocabulary spelling "Ġthe"
  EXPECT_EQ(tok.token_id(" the"), std::nullopt);
  EXPECT_EQ(tok.token_id("no-such-token-anywhere"), std::nullopt);
  EXPECT_EQ(tok.vocab_size(), 151669);
  EXPECT_TRUE(tok.is_special(151645));
  EXPECT_FALSE(tok.is_special(151667));  // <think> is an added token but not special
  EXPECT_FALSE(tok.is_special(279));
  EXPECT_FALSE(tok.is_special(-1));
  EXPECT_FALSE(tok.is_special(1 << 30));
}

TEST(Tokenizer, AddedTokensAreCutFromRawText) {
  const Tokenizer& tok = test::qwen3_tokenizer();
  EXPECT_EQ(tok.encode("<|im_start|>user\nHi<|im_end|>"), (Ids{151644, 872, 198, 13048, 151645}));
  EXPECT_EQ(tok.encode("<think></think>"), (Ids{151667, 151668}));
  // Before NFC: ">" + U+0338 would compose to "≯", but the token is cut out first.
  EXPECT_EQ(tok.encode("<think>\xCC\xB8").front(), 151667);
}

TEST(Tokenizer, TokenBytesUndoTheByteMap) {
  const Tokenizer& tok = test::qwen3_tokenizer();
  EXPECT_EQ(tok.token_bytes(279), " the");
  EXPECT_EQ(tok.token_bytes(151645), "<|im_end|>");
  EXPECT_EQ(tok.token_bytes(198), "\n");
}

TEST(Tokenizer, SpellingsAreTheVocabularys) {
  const Tokenizer& tok = test::qwen3_tokenizer();
  EXPECT_EQ(tok.token_spelling(279), "\xC4\xA0the");  // "Ġthe", as convert_ids_to_tokens gives it
  EXPECT_EQ(tok.token_spelling(198), "\xC4\x8A");     // "Ċ"
  EXPECT_EQ(tok.token_spelling(151645), "<|im_end|>");
  EXPECT_EQ(tok.token_spelling(151667), "<think>");
  // Every id spells a token that looks up to the same id: the spellings are vocab.json's keys and
  // the added tokens' contents.
  for (std::int32_t id = 0; id < tok.vocab_size(); ++id) ASSERT_EQ(tok.token_id(tok.token_spelling(id)), id) << id;
  EXPECT_THROW(tok.token_spelling(151669), Error);
  EXPECT_THROW(tok.token_spelling(-1), Error);
}

TEST(Tokenizer, SampledIdsPastTheVocabularyHaveNoText) {
  // The embedding has 151936 rows for 151669 tokens: a model can sample an id with no token.
  const Tokenizer& tok = test::qwen3_tokenizer();
  EXPECT_EQ(tok.sampled_bytes(279), " the");
  EXPECT_EQ(tok.sampled_bytes(151669), "");
  EXPECT_EQ(tok.sampled_bytes(151935), "");
  EXPECT_EQ(tok.sampled_bytes(-5), "");
}

TEST(Tokenizer, BadIdsThrow) {
  const Tokenizer& tok = test::qwen3_tokenizer();
  EXPECT_THROW(tok.decode(Ids{9707, -1}), Error);
  EXPECT_THROW(tok.decode(Ids{151669}), Error);
  EXPECT_THROW(tok.token_bytes(151936), Error);
  try {
    tok.decode(Ids{200000});
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("200000"), std::string::npos) << e.what();
  }
}

TEST(Tokenizer, DecodeRepairsCutCharacters) {
  const Tokenizer& tok = test::qwen3_tokenizer();
  const auto ids = tok.encode("🫠");
  ASSERT_GE(ids.size(), 2u);
  EXPECT_EQ(tok.decode(Ids{ids[0]}), "\xEF\xBF\xBD");
  EXPECT_EQ(tok.decode(ids), "🫠");
}

// Invalid UTF-8 is repaired like Rust's from_utf8_lossy before encoding, so it encodes as the
// repaired text would (HF cannot be given invalid text at all).
TEST(Tokenizer, InvalidUtf8EncodesAsItsLossyRepair) {
  const Tokenizer& tok = test::qwen3_tokenizer();
  EXPECT_EQ(tok.encode("a\xFF" "b"), tok.encode("a\xEF\xBF\xBD" "b"));
  EXPECT_EQ(tok.encode("\xF0\x9F\x98"), tok.encode("\xEF\xBF\xBD"));
  EXPECT_EQ(tok.encode("<|im_end|>\xC3"), (Ids{151645, tok.encode("\xEF\xBF\xBD")[0]}));
}

TEST(Tokenizer, RandomBytesNeverCrashAndDecodeToValidUtf8) {
  const Tokenizer& tok = test::qwen3_tokenizer();
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 3000; ++trial) {
    std::string bytes(rng() % 64, '\0');
    for (char& c : bytes) c = static_cast<char>(rng() % 7 == 0 ? 0x80 | (rng() % 64) : rng() % 256);
    const Ids ids = tok.encode(bytes);
    const std::string text = tok.decode(ids);
    // Every input, valid or not: the ids are those of the repaired text, which decodes back exactly.
    EXPECT_EQ(tok.encode(text), ids) << "re-encoding the repaired text gives the same ids";
  }
}

TEST(Tokenizer, CopiesShareOneImplementationAndWorkAcrossThreads) {
  const Tokenizer copy = test::qwen3_tokenizer();
  const Ids expected = copy.encode("Hello, world! 你好");
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int k = 0; k < 200; ++k) {
        if (copy.encode("Hello, world! 你好") != expected) ++bad;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
}

TEST(Tokenizer, LoadErrorsNameTheFile) {
  const auto dir = test::process_temp_dir("megaqwen_bad_tokenizer");
  std::filesystem::create_directories(dir);
  {
    std::ofstream(dir / "tokenizer.json") << "{ not json";
  }
  try {
    Tokenizer::load(dir);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.json"), std::string::npos) << e.what();
  }
  std::filesystem::remove(dir / "tokenizer.json");
  {
    std::ofstream(dir / "vocab.json") << R"({"a": 0, "b": 1})";
    std::ofstream(dir / "merges.txt") << "a c\n";
  }
  try {
    Tokenizer::load(dir);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("vocab.json"), std::string::npos) << e.what();
  }
  EXPECT_THROW(Tokenizer::load(dir / "missing"), Error);
}

}  // namespace
}  // namespace megaqwen
