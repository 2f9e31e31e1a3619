// Exactness against HF tokenizers: every fixture case must give the same ids, not just most.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "megaqwen/tokenizer/tokenizer.h"
#include "megaqwen/tokenizer/utf8.h"
#include "tokenizer_fixture.h"

namespace megaqwen {
namespace {

// Compares every row's ids; reports the first few mismatches in full.
void expect_all_equal(const Tokenizer& tok, const std::vector<nlohmann::json>& rows, std::size_t min_rows,
                      SpecialTokens special = SpecialTokens::kParse) {
  ASSERT_GE(rows.size(), min_rows) << "fixture missing or truncated";
  int mismatches = 0;
  for (const auto& row : rows) {
    const auto text = row["text"].get<std::string>();
    const auto expected = row["ids"].get<std::vector<std::int32_t>>();
    const auto actual = tok.encode(text, special);
    if (actual != expected && ++mismatches <= 5) {
      ADD_FAILURE() << "text: " << nlohmann::json(text).dump() << "\n expected: " << fmt::format("{}", fmt::join(expected, " "))
                    << "\n   actual: " << fmt::format("{}", fmt::join(actual, " "));
    }
  }
  EXPECT_EQ(mismatches, 0) << "of " << rows.size() << " cases";
}

TEST(TokenizerFixtures, Qwen3EncodeMatchesHf) {
  expect_all_equal(test::qwen3_tokenizer(), test::read_jsonl(test::tokenizer_fixture("qwen3_encode.jsonl")), 2000);
}

TEST(TokenizerFixtures, Qwen3DecodeMatchesHf) {
  const Tokenizer& tok = test::qwen3_tokenizer();
  const auto rows = test::read_jsonl(test::tokenizer_fixture("qwen3_decode.jsonl"));
  ASSERT_GE(rows.size(), 100u);
  for (const auto& row : rows) {
    EXPECT_EQ(tok.decode(row["ids"].get<std::vector<std::int32_t>>()), row["text"].get<std::string>()) << row.dump();
  }
}

TEST(TokenizerFixtures, TransformersIntegrationCases) {
  const auto file = test::shared_dir() / "testdata" / "tokenizer" / "hf_transformers_qwen2_integration.json";
  std::ifstream in(file);
  ASSERT_TRUE(in) << file;
  const auto cases = nlohmann::json::parse(in)["cases"];
  ASSERT_EQ(cases.size(), 3u);
  for (const auto& c : cases) {
    const auto ids = c["ids"].get<std::vector<std::int32_t>>();
    EXPECT_EQ(test::qwen3_tokenizer().encode(c["text"].get<std::string>()), ids);
    EXPECT_EQ(test::qwen3_tokenizer().decode(ids), c["text"].get<std::string>());
  }
}

// vocab.json + merges.txt (+ tokenizer_config.json) of the same folder must tokenize identically.
TEST(TokenizerFixtures, TwoFileFormMatchesTokenizerJson) {
  const auto dir = test::process_temp_dir("megaqwen_qwen3_two_file");
  std::filesystem::create_directories(dir);
  for (const char* name : {"vocab.json", "merges.txt", "tokenizer_config.json"}) {
    std::filesystem::copy_file(test::qwen3_tokenizer_dir() / name, dir / name,
                               std::filesystem::copy_options::overwrite_existing);
  }
  const Tokenizer two_file = Tokenizer::load(dir);
  EXPECT_EQ(two_file.vocab_size(), test::qwen3_tokenizer().vocab_size());
  EXPECT_EQ(two_file.pretokenizer_pattern(), test::qwen3_tokenizer().pretokenizer_pattern());
  expect_all_equal(two_file, test::read_jsonl(test::tokenizer_fixture("qwen3_encode.jsonl")), 2000);
}

// Qwen3.5 ships only the two-file form, without a #version line and with its own regex.
TEST(TokenizerFixtures, Qwen35TwoFileFormMatchesHf) {
  const Tokenizer tok = Tokenizer::load(test::shared_dir() / "models" / "qwen3.5-0.8b");
  EXPECT_NE(tok.pretokenizer_pattern().find("\\p{M}"), std::string::npos);
  EXPECT_EQ(tok.token_id("<|im_end|>"), 248046);
  EXPECT_EQ(tok.vocab_size(), 248077);
  expect_all_equal(tok, test::read_jsonl(test::tokenizer_fixture("qwen35_encode.jsonl")), 400);
}

// Special tokens' spellings kept as text (HF's split_special_tokens; megaqwen perplexity, as
// llama-perplexity): texts holding added tokens, about half of which then tokenize differently.
TEST(TokenizerFixtures, SpecialTokensAsTextMatchesHf) {
  const auto rows = test::read_jsonl(test::tokenizer_fixture("qwen3_encode_special_as_text.jsonl"));
  expect_all_equal(test::qwen3_tokenizer(), rows, 250, SpecialTokens::kAsText);
  int differ = 0;
  for (const auto& row : rows) {
    const auto text = row["text"].get<std::string>();
    differ += test::qwen3_tokenizer().encode(text) != row["ids"].get<std::vector<std::int32_t>>();
  }
  EXPECT_GE(differ, 100) << "the fixture should exercise special tokens";
  const Tokenizer q35 = Tokenizer::load(test::shared_dir() / "models" / "qwen3.5-0.8b");
  expect_all_equal(q35, test::read_jsonl(test::tokenizer_fixture("qwen35_encode_special_as_text.jsonl")), 250,
                   SpecialTokens::kAsText);
}

TEST(TokenizerFixtures, SpecialTokensAsTextKeepsNonSpecialAddedTokens) {
  const Tokenizer& tok = test::qwen3_tokenizer();
  const std::string text = "a <|im_start|>user\n<think>x</think><|endoftext|>";
  EXPECT_EQ(tok.encode(text), (std::vector<std::int32_t>{64, 220, 151644, 872, 198, 151667, 87, 151668, 151643}));
  // HF tokenizers 0.23.3 with encode_special_tokens = True:
  EXPECT_EQ(tok.encode(text, SpecialTokens::kAsText),
            (std::vector<std::int32_t>{64, 82639, 318, 4906, 91, 29, 872, 198, 151667, 87, 151668, 27, 91, 8691, 723,
                                       427, 91, 29}));
}

// decode(encode(x)) == x for every valid NFC fixture text.
TEST(TokenizerFixtures, RoundTripOfNfcText) {
  const Tokenizer& tok = test::qwen3_tokenizer();
  int checked = 0;
  for (const auto& row : test::read_jsonl(test::tokenizer_fixture("qwen3_encode.jsonl"))) {
    const auto text = row["text"].get<std::string>();
    const auto ids = row["ids"].get<std::vector<std::int32_t>>();
    // The fixture's ids decode to NFC(text); only texts already in NFC round-trip exactly.
    if (tok.decode(ids) != text) continue;
    EXPECT_EQ(tok.decode(tok.encode(text)), text);
    ++checked;
  }
  EXPECT_GT(checked, 2000);
}

}  // namespace
}  // namespace megaqwen
