// ChatSession: reasoning split as the Qwen3 template stores it, and multi-turn chat on a synthetic
// model with the real tokenizer and template, checking that later turns reuse the cached prefix.
#include "megaqwen/engine/chat_session.h"

#include <gtest/gtest.h>

#include "megaqwen/engine/cpu_engine.h"
#include "megaqwen/model/model.h"
#include "megaqwen/model/synth.h"
#include "megaqwen/util/error.h"
#include "test_paths.h"

namespace megaqwen {
namespace {

TEST(SplitReasoning, ThinkBlockThenAnswer) {
  auto r = split_reasoning("<think>\nLet me add.\n</think>\n\nIt is 4.");
  EXPECT_EQ(r.reasoning, "Let me add.");
  EXPECT_EQ(r.content, "It is 4.");
}

TEST(SplitReasoning, NoThinking) {
  auto r = split_reasoning("Just an answer.\n");
  EXPECT_EQ(r.reasoning, "");
  EXPECT_EQ(r.content, "Just an answer.\n");
}

TEST(SplitReasoning, UnfinishedThinkingStaysReasoning) {
  auto r = split_reasoning("<think>\nstill going");
  EXPECT_EQ(r.reasoning, "still going");
  EXPECT_EQ(r.content, "");
}

TEST(SplitReasoning, CloseTagWithoutOpenTag) {
  // With thinking on, the prompt may already hold "<think>\n"; the reply then starts inside it.
  auto r = split_reasoning("pondering\n</think>\n\nAnswer");
  EXPECT_EQ(r.reasoning, "pondering");
  EXPECT_EQ(r.content, "Answer");
}

class ChatSessionTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::filesystem::path(test::process_temp_dir("megaqwen_chat_session_test"));
    SynthOptions o;
    o.preset = "tiny";
    o.seed = 7;
    o.out_dir = *dir_;
    o.tokenizer_dir = test::qwen3_tokenizer_dir();
    write_synthetic_model(o);
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*dir_);
    delete dir_;
  }
  static std::filesystem::path* dir_;
};
std::filesystem::path* ChatSessionTest::dir_ = nullptr;

TEST_F(ChatSessionTest, LaterTurnsOnlyPrefillTheNewPart) {
  auto model = load_model(dir_->string());
  CpuEngine engine(model, {.context = 512, .threads = 2});
  ChatSession chat(engine, Tokenizer::load(*dir_), ChatTemplate::load(*dir_), {151645, 151643});
  chat.set_system_prompt("You are terse.");
  SamplingParams greedy;
  greedy.temperature = 0;

  std::string streamed;
  auto first = chat.send("Hello!", greedy, 8, [&](int32_t, std::string_view t) {
    streamed += t;
    return true;
  });
  EXPECT_EQ(chat.last_turn().reused_tokens, 0);
  EXPECT_GT(chat.last_turn().prompt_tokens, 10);
  EXPECT_EQ(chat.messages().size(), 3u);  // system, user, assistant
  EXPECT_EQ(chat.messages()[2]["role"], "assistant");

  chat.send("And again?", greedy, 8, {});
  const ChatTurnStats second = chat.last_turn();
  // Everything up to the first reply is reused (the template re-renders that reply, so the cache
  // can diverge only from there on).
  EXPECT_GT(second.reused_tokens, 10);
  EXPECT_LT(second.reused_tokens, second.prompt_tokens);
  EXPECT_EQ(chat.tokens_in_context(), engine.position());

  // Thinking off renders an empty think block; the reply is still stored.
  chat.set_thinking(false);
  chat.send("Third.", greedy, 4, {});
  EXPECT_EQ(chat.messages().size(), 7u);
  EXPECT_GT(chat.last_turn().reused_tokens, second.reused_tokens);

  // Reset keeps the system prompt, and the cached system-prompt prefix is reused.
  chat.reset();
  EXPECT_EQ(chat.messages().size(), 1u);
  chat.send("Hello!", greedy, 8, {});
  EXPECT_GT(chat.last_turn().reused_tokens, 5);
}

TEST_F(ChatSessionTest, ConversationLongerThanTheContextIsAClearError) {
  auto model = load_model(dir_->string());
  CpuEngine engine(model, {.context = 32, .threads = 1});
  ChatSession chat(engine, Tokenizer::load(*dir_), ChatTemplate::load(*dir_), {151645});
  SamplingParams greedy;
  greedy.temperature = 0;
  try {
    chat.send(std::string(400, 'a'), greedy, 4, {});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no longer fits the context"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(chat.messages().empty());  // the refused message is not kept
  chat.send("hi", greedy, 2, {});        // and the session still works
  EXPECT_EQ(chat.messages().size(), 2u);
}

}  // namespace
}  // namespace megaqwen
