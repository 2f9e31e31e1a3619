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

TEST_F(ChatSessionTest, UndoRemovesTheLastExchangeAndKeepsTheCache) {
  auto model = load_model(dir_->string());
  CpuEngine engine(model, {.context = 512, .threads = 2});
  ChatSession chat(engine, Tokenizer::load(*dir_), ChatTemplate::load(*dir_), {151645, 151643});
  chat.set_system_prompt("You are terse.");
  EXPECT_EQ(chat.undo(), std::nullopt);  // the system prompt is no exchange
  SamplingParams greedy;
  greedy.temperature = 0;
  chat.send("Hello!", greedy, 6, {});
  chat.send("And again?", greedy, 6, {});
  EXPECT_EQ(chat.undo(), "And again?");
  ASSERT_EQ(chat.messages().size(), 3u);  // system, user, assistant
  EXPECT_EQ(chat.messages()[1]["content"], "Hello!");
  // Sent again, the question finds the first exchange in the cache and gets the same greedy answer.
  const AssistantReply redo = chat.send("And again?", greedy, 6, {});
  EXPECT_GT(chat.last_turn().reused_tokens, 10);
  EXPECT_EQ(chat.undo(), "And again?");
  const AssistantReply again = chat.send("And again?", greedy, 6, {});
  EXPECT_EQ(again.content, redo.content);
  EXPECT_EQ(chat.undo(), "And again?");
  EXPECT_EQ(chat.undo(), "Hello!");
  EXPECT_EQ(chat.messages().size(), 1u);
  EXPECT_EQ(chat.undo(), std::nullopt);
}

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

// messages() saved and load_messages() into a new session on a fresh engine: the next turn renders
// the same prompt and, greedy, gives the same reply as the session that went on.
TEST_F(ChatSessionTest, LoadedConversationsGoOnAsTheOriginal) {
  auto model = load_model(dir_->string());
  SamplingParams greedy;
  greedy.temperature = 0;
  CpuEngine engine(model, {.context = 512, .threads = 2});
  ChatSession chat(engine, Tokenizer::load(*dir_), ChatTemplate::load(*dir_), {151645, 151643});
  chat.set_system_prompt("You are terse.");
  chat.send("Hello!", greedy, 8, {});
  chat.send("And again?", greedy, 8, {});
  const nlohmann::ordered_json saved = chat.messages();
  const AssistantReply expected = chat.send("Once more.", greedy, 8, {});
  const int expected_prompt = chat.last_turn().prompt_tokens;

  CpuEngine fresh_engine(model, {.context = 512, .threads = 2});
  ChatSession loaded(fresh_engine, Tokenizer::load(*dir_), ChatTemplate::load(*dir_), {151645, 151643});
  loaded.load_messages(saved);
  EXPECT_EQ(loaded.messages(), saved);
  const AssistantReply got = loaded.send("Once more.", greedy, 8, {});
  EXPECT_EQ(loaded.last_turn().prompt_tokens, expected_prompt);
  EXPECT_EQ(loaded.last_turn().reused_tokens, 0);
  EXPECT_EQ(got.content, expected.content);
  EXPECT_EQ(got.reasoning, expected.reasoning);
  // The loaded system prompt is the session's now: /reset keeps it.
  loaded.reset();
  EXPECT_EQ(loaded.messages(), nlohmann::ordered_json::parse(R"([{"role": "system", "content": "You are terse."}])"));
}

// A list that is not a conversation megaqwen chat can go on with is refused by name, and the session
// keeps its own.
TEST_F(ChatSessionTest, MalformedSavedConversationsAreRefused) {
  auto model = load_model(dir_->string());
  CpuEngine engine(model, {.context = 64, .threads = 1});
  ChatSession chat(engine, Tokenizer::load(*dir_), ChatTemplate::load(*dir_), {151645});
  chat.set_system_prompt("Be brief.");
  const nlohmann::ordered_json before = chat.messages();
  const std::pair<const char*, const char*> cases[] = {
      {R"({"role": "user"})", "must be a JSON array"},
      {R"([1])", "message 0 is not a JSON object"},
      {R"([{"content": "x"}])", "message 0 has no \"role\" string"},
      {R"([{"role": "tool", "content": "x"}])", "role \"tool\""},
      {R"([{"role": "user", "content": "a"}, {"role": "system", "content": "b"}])", "only the first message"},
      {R"([{"role": "user", "content": ["a"]}])", "has no \"content\" string"},
      {R"([{"role": "user", "content": "a", "name": "x"}, {"role": "assistant", "content": "b"}])", "key \"name\""},
      {R"([{"role": "user", "content": "a", "reasoning_content": "r"}])", "key \"reasoning_content\""},
      {R"([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b", "reasoning_content": 1}])",
       "not a string"},
      {R"([{"role": "user", "content": "a"}])", "ends with a user message"},
  };
  for (const auto& [text, words] : cases) {
    try {
      chat.load_messages(nlohmann::ordered_json::parse(text));
      ADD_FAILURE() << "accepted " << text;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << text << ": " << e.what();
    }
    EXPECT_EQ(chat.messages(), before);
  }
  nlohmann::ordered_json too_long = nlohmann::ordered_json::array();
  std::string words;
  for (int i = 0; i < 100; ++i) words += "word" + std::to_string(i) + " ";
  too_long.push_back({{"role", "user"}, {"content", words}});
  too_long.push_back({{"role", "assistant"}, {"content", "ok"}});
  chat.set_trim(false);
  EXPECT_THROW(chat.load_messages(too_long), Error);
  EXPECT_EQ(chat.messages(), before);
  // With trimming on it loads, and the next turn drops it to make room.
  chat.set_trim(true);
  chat.load_messages(too_long);
  SamplingParams greedy;
  greedy.temperature = 0;
  chat.send("hi", greedy, 4, {});
  EXPECT_EQ(chat.last_turn().dropped_messages, 2);
  EXPECT_EQ(chat.messages().size(), 2u);  // the new message and its reply
  // An empty list is an empty conversation (no system prompt either).
  chat.load_messages(nlohmann::ordered_json::array());
  EXPECT_TRUE(chat.messages().empty());
}

// A conversation outgrowing the context drops its oldest exchanges (the system prompt and the new
// message kept) so the reply keeps min(max_tokens, context / 4) tokens of room; with trimming off it
// is an error and nothing changes.
TEST_F(ChatSessionTest, OldestExchangesAreDroppedToMakeRoom) {
  auto model = load_model(dir_->string());
  CpuEngine engine(model, {.context = 96, .threads = 2});
  ChatSession chat(engine, Tokenizer::load(*dir_), ChatTemplate::load(*dir_), {151645, 151643});
  chat.set_system_prompt("Be brief.");
  chat.set_thinking(false);
  SamplingParams greedy;
  greedy.temperature = 0;
  int dropped_total = 0;
  for (int turn = 0; turn < 8; ++turn) {
    chat.send("Question number " + std::to_string(turn) + " about rivers?", greedy, 6, {});
    const ChatTurnStats& t = chat.last_turn();
    dropped_total += t.dropped_messages;
    EXPECT_LE(t.prompt_tokens + 6, 96) << "turn " << turn;
    EXPECT_EQ(t.dropped_messages % 2, 0);  // whole exchanges
    EXPECT_EQ(chat.messages()[0]["role"], "system");
    EXPECT_EQ(chat.messages()[1]["role"], "user");
    EXPECT_EQ(chat.messages()[chat.messages().size() - 2]["content"],
              "Question number " + std::to_string(turn) + " about rivers?");
  }
  EXPECT_GT(dropped_total, 0);
  EXPECT_EQ(int(chat.messages().size()) + dropped_total, 1 + 2 * 8);

  chat.set_trim(false);
  const nlohmann::ordered_json before = chat.messages();
  int failed_at = -1;
  for (int turn = 0; turn < 8 && failed_at < 0; ++turn) {
    try {
      chat.send("Another question " + std::to_string(turn) + " about lakes and seas?", greedy, 6, {});
      EXPECT_EQ(chat.last_turn().dropped_messages, 0);
    } catch (const Error& e) {
      failed_at = turn;
      EXPECT_NE(std::string(e.what()).find("no longer fits the context"), std::string::npos) << e.what();
    }
  }
  EXPECT_GE(failed_at, 0) << "without trimming the conversation should outgrow 96 tokens";
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
