// `megaqwen chat` driven as a script (stdin not a terminal: one user message per line), on a tiny
// synthetic model with the real Qwen3 tokenizer: replies stream, commands work, and /stats shows
// that the second turn reused the KV cache of the first.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <string>

#include "test_paths.h"

namespace megaqwen {
namespace {

namespace fs = std::filesystem;

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

class ChatCli : public ::testing::Test {
 protected:
  static fs::path dir() { return test::process_temp_dir("megaqwen_chat_cli"); }
  static int sh(const std::string& command) {
    int raw = std::system(command.c_str());
    return WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  }
  static void SetUpTestSuite() {
    fs::remove_all(dir());
    fs::create_directories(dir());
    ASSERT_EQ(sh(std::string(test::megaqwen_binary()) + " synth --preset tiny --seed 3 --out " + (dir() / "model").string() +
                 " --tokenizer " + test::qwen3_tokenizer_dir().string() + " 2>/dev/null"),
              0);
  }
  static void TearDownTestSuite() { fs::remove_all(dir()); }

  // Feeds `script` to the chat and returns stdout; stderr must hold only the CPU fallback notice.
  std::string chat(const std::string& script, const std::string& flags) {
    std::ofstream(dir() / "in.txt") << script;
    const std::string cmd = "timeout -s KILL 120 " + std::string(test::megaqwen_binary()) + " chat --model " +
                            (dir() / "model").string() + " " + flags + " < " + (dir() / "in.txt").string() + " > " +
                            (dir() / "out.txt").string() + " 2> " + (dir() / "err.txt").string();
    EXPECT_EQ(sh(cmd), 0) << slurp(dir() / "err.txt");
    const std::string err = slurp(dir() / "err.txt");
    EXPECT_EQ(err.find("error"), std::string::npos) << err;
    return slurp(dir() / "out.txt");
  }
};

TEST_F(ChatCli, ScriptedSessionReusesThePrefixOfEarlierTurns) {
  const std::string out = chat("Hello there\n/stats\nTell me more\n/stats\n/no_think\nThanks\n/stats\n/quit\nnever read\n",
                               "-n 6 --greedy --device cpu --threads 2");
  std::regex stats(R"(\[stats\] context (\d+) / \d+ tokens \| last turn: prompt (\d+) tokens \((\d+) reused)");
  std::vector<std::smatch> found;
  for (auto it = std::sregex_iterator(out.begin(), out.end(), stats); it != std::sregex_iterator(); ++it) found.push_back(*it);
  ASSERT_EQ(found.size(), 3u) << out;
  EXPECT_EQ(std::stoi(found[0][3]), 0);                        // first turn: nothing cached
  EXPECT_GT(std::stoi(found[1][3]), 8);                        // second: the first turn's prompt is reused
  EXPECT_LT(std::stoi(found[1][3]), std::stoi(found[1][2]));   // ...and only the new part prefilled
  EXPECT_GT(std::stoi(found[2][3]), std::stoi(found[1][3]));   // the conversation keeps growing in the cache
  EXPECT_NE(out.find("[thinking off]"), std::string::npos);
  EXPECT_EQ(out.find("never read"), std::string::npos);
}

TEST_F(ChatCli, GreedyChatIsReproducibleAndResetStartsOver) {
  const std::string script = "Hi\n/reset\nHi\n";  // no /stats: its timings differ per run
  const std::string a = chat(script, "-n 5 --greedy --device cpu");
  const std::string b = chat(script, "-n 5 --greedy --device cpu");
  EXPECT_EQ(a, b);
  // After /reset the same message gives the same reply as the first time.
  const size_t reset = a.find("[conversation reset]\n");
  ASSERT_NE(reset, std::string::npos) << a;
  const std::string first = a.substr(0, reset);
  EXPECT_EQ(a.substr(reset + 21, first.size()), first);
}

// /undo drops the last exchange (the saved conversation shows it); /regen asks the last question again
// with the next seed: a sampled answer changes, a greedy one does not.
TEST_F(ChatCli, UndoAndRegenerate) {
  const std::string saved = (dir() / "undo.json").string();
  const std::string out = chat("/undo\n/regen\nFirst\nSecond\n/undo\n/save " + saved + "\n/help\n",
                               "-n 4 --greedy --device cpu");
  EXPECT_NE(out.find("[nothing to undo]"), std::string::npos) << out;
  EXPECT_NE(out.find("[nothing to regenerate]"), std::string::npos) << out;
  EXPECT_NE(out.find("[removed the last exchange]"), std::string::npos) << out;
  EXPECT_NE(out.find("/regen"), std::string::npos) << out;  // the help text
  const auto messages = nlohmann::json::parse(slurp(saved))["messages"];
  ASSERT_EQ(messages.size(), 2u) << messages.dump();
  EXPECT_EQ(messages[0]["content"], "First");
  EXPECT_EQ(messages[1]["role"], "assistant");

  // The answer before and after /regen, read from /save (a reply may itself hold newlines).
  const auto answers = [&](const std::string& flags) {
    const std::string a = (dir() / "a.json").string(), b = (dir() / "b.json").string();
    chat("Tell me a story\n/save " + a + "\n/regen\n/save " + b + "\n", flags);
    const auto before = nlohmann::json::parse(slurp(a))["messages"], after = nlohmann::json::parse(slurp(b))["messages"];
    EXPECT_EQ(before.size(), 2u);
    EXPECT_EQ(after.size(), 2u);  // replaced, not added
    EXPECT_EQ(after[0]["content"], "Tell me a story");
    return std::pair(before[1]["content"].get<std::string>(), after[1]["content"].get<std::string>());
  };
  const auto [sampled_before, sampled_after] = answers("-n 8 --temp 1.5 --no-think --device cpu");
  EXPECT_NE(sampled_before, sampled_after);  // 8 tokens drawn at temperature 1.5 from a 151k vocabulary
  const auto [greedy_before, greedy_after] = answers("-n 8 --greedy --no-think --device cpu");
  EXPECT_EQ(greedy_before, greedy_after);
}

TEST_F(ChatCli, OverlongMessageIsReportedAndTheSessionGoesOn) {
  std::string longline(3000, 'x');
  const std::string out = chat(longline + "\nhi\n/stats\n", "-n 3 --greedy --ctx 64 --device cpu");
  EXPECT_NE(out.find("no longer fits the context"), std::string::npos) << out;
  EXPECT_NE(out.find("[stats]"), std::string::npos);
}

// A conversation outgrowing the context drops its oldest exchange and says so; --no-trim makes it an
// error instead.
TEST_F(ChatCli, OutgrowingTheContextDropsTheOldestExchange) {
  std::string script;
  for (const char* n : {"one", "two", "three", "four", "five"}) script += std::string("Question ") + n + " about rivers?\n";
  const std::string trimmed = chat(script, "-n 4 --greedy --ctx 80 --no-think --device cpu");
  EXPECT_NE(trimmed.find("[dropped the 2 oldest messages to make room in the context of 80 tokens]"), std::string::npos)
      << trimmed;
  EXPECT_EQ(trimmed.find("no longer fits"), std::string::npos) << trimmed;
  const std::string strict = chat(script, "-n 4 --greedy --ctx 80 --no-think --no-trim --device cpu");
  EXPECT_NE(strict.find("no longer fits the context of 80 tokens"), std::string::npos) << strict;
  EXPECT_EQ(strict.find("[dropped"), std::string::npos) << strict;
}

// /save writes the conversation as {"messages": [...]}; /load (and --load at start) continues it,
// with the same next reply as the session that never stopped (greedy).
TEST_F(ChatCli, SavedConversationsLoadAndContinue) {
  const std::string saved = (dir() / "conversation.json").string();
  const std::string out = chat("Hello there\nTell me more\n/save " + saved + "\nAnd then?\n", "-n 5 --greedy --device cpu");
  const std::string saved_line = "[saved 4 messages to " + saved + "]\n";
  const size_t at = out.find(saved_line);
  ASSERT_NE(at, std::string::npos) << out;
  const std::string file = slurp(saved);
  EXPECT_EQ(file.find("{\n  \"messages\": [\n    {\n      \"role\": \"user\",\n      \"content\": \"Hello there\""), 0u) << file;
  // The reply to "And then?" in the uninterrupted session: all its output after the save.
  const std::string last = out.substr(at + saved_line.size());

  const std::string resumed = chat("And then?\n", "-n 5 --greedy --device cpu --load " + saved);
  EXPECT_EQ(resumed, last);
  const std::string reloaded = chat("/reset\n/load " + saved + "\nAnd then?\n", "-n 5 --greedy --device cpu");
  EXPECT_NE(reloaded.find("[loaded 4 messages from " + saved + "]\n" + last), std::string::npos) << reloaded;

  // Refusals name the file and the problem; in the session they are reported and it goes on.
  std::ofstream(dir() / "bad.json") << R"({"messages": [{"role": "user", "content": "hi"}, {"role": "tool", "content": "x"}]})";
  const std::string bad = chat("/load " + (dir() / "bad.json").string() + "\nHi\n", "-n 2 --greedy --device cpu");
  EXPECT_NE(bad.find("message 1 has role \"tool\""), std::string::npos) << bad;
  const std::string cmd = std::string(test::megaqwen_binary()) + " chat --device cpu --model " +
                          (dir() / "model").string() + " --load " + (dir() / "missing.json").string() +
                          " < /dev/null > /dev/null 2> " + (dir() / "err.txt").string();
  EXPECT_EQ(sh(cmd), 1);
  EXPECT_NE(slurp(dir() / "err.txt").find("cannot read"), std::string::npos) << slurp(dir() / "err.txt");
}

// A message spans lines when fenced with """ or continued with a trailing backslash: each arrives
// as one user message with its newlines (what /save shows).
TEST_F(ChatCli, MultiLineMessagesArriveWhole) {
  const std::string saved = (dir() / "multi-line.json").string();
  chat("\"\"\"\nfirst line\n\n  indented line\n\"\"\"\ncontinued \\\nhere\n\"\"\"one line\"\"\"\n/save " + saved + "\n",
       "-n 2 --greedy --device cpu");
  const nlohmann::ordered_json messages = nlohmann::ordered_json::parse(slurp(saved))["messages"];
  ASSERT_EQ(messages.size(), 6u) << messages.dump();
  EXPECT_EQ(messages[0]["content"], "first line\n\n  indented line");
  EXPECT_EQ(messages[2]["content"], "continued \nhere");
  EXPECT_EQ(messages[4]["content"], "one line");
}

// --prompt-cache FILE: written when the chat ends; a later chat reads it and its first turn reuses
// the whole conversation held there (resumed with --load) with the same greedy reply as the session
// that never stopped. A file from another model is refused by name.
TEST_F(ChatCli, PromptCacheKeepsTheCacheBetweenSessions) {
  const std::string cache = (dir() / "chat.state").string();
  const std::string saved = (dir() / "cached-conversation.json").string();
  const std::string flags = "-n 5 --greedy --device cpu --threads 2 --prompt-cache " + cache;
  const std::string out = chat("Hello there\n/save " + saved + "\nAnd then?\n/stats\n", flags);
  EXPECT_NE(out.find(" tokens saved to " + cache + "]"), std::string::npos) << out;
  const std::string saved_line = "[saved 2 messages to " + saved + "]\n";
  const size_t at = out.find(saved_line);
  ASSERT_NE(at, std::string::npos) << out;
  const std::string reply = out.substr(at + saved_line.size(), out.find("[stats]") - at - saved_line.size());

  // Resumed: the first turn's prompt (the two saved messages and the new one) is the prompt of the
  // first session's second turn, all of it in the cache the file holds (but the last token, which the
  // generator always prefills anew for its logits).
  const std::string resumed = chat("And then?\n/stats\n", flags + " --load " + saved);
  EXPECT_NE(resumed.find("tokens read from " + cache + "]\n" + reply), std::string::npos) << resumed << "\n--\n" << reply;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(resumed, m, std::regex(R"(prompt (\d+) tokens \((\d+) reused)"))) << resumed;
  EXPECT_GT(std::stoi(m[2]), 10);
  EXPECT_EQ(std::stoi(m[2]), std::stoi(m[1]) - 1);

  // Another model: refused at the start, naming the file.
  ASSERT_EQ(sh(std::string(test::megaqwen_binary()) + " synth --preset tiny --seed 4 --out " + (dir() / "other").string() +
               " --tokenizer " + test::qwen3_tokenizer_dir().string() + " 2>/dev/null"),
            0);
  const std::string cmd = std::string(test::megaqwen_binary()) + " chat --device cpu --model " +
                          (dir() / "other").string() + " --prompt-cache " + cache + " < /dev/null > /dev/null 2> " +
                          (dir() / "err.txt").string();
  EXPECT_EQ(sh(cmd), 1);
  EXPECT_NE(slurp(dir() / "err.txt").find(cache + " was made with another model"), std::string::npos)
      << slurp(dir() / "err.txt");
}

}  // namespace
}  // namespace megaqwen
