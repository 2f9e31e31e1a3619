#include "megaqwen/tokenizer/stream_decoder.h"

#include <gtest/gtest.h>

#include "megaqwen/util/error.h"
#include "tokenizer_fixture.h"

namespace megaqwen {
namespace {

TEST(StreamDecoder, HoldsBackACharacterSplitAcrossTokens) {
  const Tokenizer& tok = test::qwen3_tokenizer();
  const std::string text = "ok 🫠!";  // U+1FAE0: four bytes, not one token
  const auto ids = tok.encode(text);
  StreamDecoder stream(tok);
  std::string printed;
  bool held_back = false;
  for (std::int32_t id : ids) {
    const std::string piece = stream.push(id);
    if (piece.empty()) held_back = true;
    // Nothing printed may contain a replacement character or half a character.
    EXPECT_EQ(piece.find("\xEF\xBF\xBD"), std::string::npos);
    printed += piece;
    EXPECT_EQ(text.compare(0, printed.size(), printed), 0) << "printed so far: " << printed;
  }
  EXPECT_TRUE(held_back) << "the emoji should span several tokens";
  printed += stream.flush();
  EXPECT_EQ(printed, text);
}

TEST(StreamDecoder, ConcatenationEqualsDecodeOnFixtures) {
  const Tokenizer& tok = test::qwen3_tokenizer();
  for (const auto& row : test::read_jsonl(test::tokenizer_fixture("qwen3_decode.jsonl"))) {
    const auto ids = row["ids"].get<std::vector<std::int32_t>>();
    StreamDecoder stream(tok);
    std::string out;
    for (std::int32_t id : ids) out += stream.push(id);
    out += stream.flush();
    EXPECT_EQ(out, tok.decode(ids)) << row.dump();
  }
}

TEST(StreamDecoder, UnfinishedCharacterAtTheEndBecomesReplacement) {
  const Tokenizer& tok = test::qwen3_tokenizer();
  const auto ids = tok.encode("🫠");
  ASSERT_GE(ids.size(), 2u);
  StreamDecoder stream(tok);
  EXPECT_EQ(stream.push(ids[0]), "");
  EXPECT_EQ(stream.flush(), "\xEF\xBF\xBD");
  EXPECT_EQ(stream.flush(), "");
  EXPECT_THROW(stream.push(-1), Error);
}

}  // namespace
}  // namespace megaqwen
