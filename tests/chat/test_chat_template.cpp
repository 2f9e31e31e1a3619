// ChatTemplate: finding and recognizing a model folder's template, and the Qwen3 rules the fixtures
// do not spell out (content types it refuses, the generation prompt helper).
#include <gtest/gtest.h>

#include <fstream>

#include "megaqwen/chat/chat_template.h"
#include "megaqwen/chat/qwen35_template.h"
#include "megaqwen/chat/qwen3_template.h"
#include "megaqwen/util/error.h"
#include "test_paths.h"

namespace megaqwen {
namespace {

using nlohmann::ordered_json;
namespace fs = std::filesystem;

// A fresh empty folder under the test's temporary directory.
fs::path temp_model_dir(const std::string& name) {
  const fs::path dir = test::process_temp_dir("megaqwen_chat_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void write_file(const fs::path& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

std::string qwen3_template_text() {
  std::ifstream in(test::qwen3_tokenizer_dir() / "tokenizer_config.json");
  return nlohmann::json::parse(in).at("chat_template").get<std::string>();
}

TEST(ChatTemplate, LoadsQwen3FromTokenizerConfig) {
  const ChatTemplate chat = ChatTemplate::load(test::qwen3_tokenizer_dir());
  EXPECT_EQ(chat.name(), "qwen3");
  EXPECT_EQ(chat_template_fingerprint(qwen3_template_text()), kQwen3TemplateFingerprint);
}

TEST(ChatTemplate, LoadsQwen35FromChatTemplateJinja) {
  const fs::path dir = test::shared_dir() / "models" / "qwen3.5-0.8b";
  const ChatTemplate chat = ChatTemplate::load(dir);
  EXPECT_EQ(chat.name(), "qwen3.5");
  std::ifstream in(dir / "chat_template.jinja", std::ios::binary);
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  EXPECT_EQ(chat_template_fingerprint(text), kQwen35TemplateFingerprint);
}

TEST(ChatTemplate, PrefersChatTemplateJinjaAndIgnoresItsTrailingNewline) {
  const fs::path dir = temp_model_dir("jinja");
  write_file(dir / "tokenizer_config.json", R"({"chat_template": "{{ messages }}"})");
  write_file(dir / "chat_template.jinja", qwen3_template_text() + "\n");
  EXPECT_EQ(ChatTemplate::load(dir).name(), "qwen3");
}

TEST(ChatTemplate, AcceptsTheDefaultOfATemplateList) {
  const fs::path dir = temp_model_dir("list");
  nlohmann::json config;
  config["chat_template"] = {{{"name", "tool_use"}, {"template", "x"}},
                             {{"name", "default"}, {"template", qwen3_template_text()}}};
  write_file(dir / "tokenizer_config.json", config.dump());
  EXPECT_EQ(ChatTemplate::load(dir).name(), "qwen3");
}

TEST(ChatTemplate, RefusesUnknownOrMissingTemplates) {
  const fs::path dir = temp_model_dir("unknown");
  EXPECT_THROW(ChatTemplate::load(dir), Error);  // no files at all
  write_file(dir / "tokenizer_config.json", R"({"model_max_length": 10})");
  EXPECT_THROW(ChatTemplate::load(dir), Error);  // no chat_template key
  // One changed byte is a different template.
  std::string edited = qwen3_template_text();
  edited[edited.find("<|im_start|>system")] = '[';
  write_file(dir / "chat_template.jinja", edited);
  try {
    ChatTemplate::load(dir);
    FAIL() << "an edited template was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unrecognized chat template"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("chat_template.jinja"), std::string::npos) << e.what();
  }
}

TEST(Qwen3Template, GenerationPrompt) {
  const ChatTemplate chat = ChatTemplate::load(test::qwen3_tokenizer_dir());
  EXPECT_EQ(chat.generation_prompt(std::nullopt), "<|im_start|>assistant\n");
  EXPECT_EQ(chat.generation_prompt(true), "<|im_start|>assistant\n");
  EXPECT_EQ(chat.generation_prompt(false), "<|im_start|>assistant\n<think>\n\n</think>\n\n");
  // render ends with exactly this text when asked for the generation prompt.
  const std::string prompt = chat.render(ordered_json::parse(
      R"({"messages": [{"role": "user", "content": "hi"}], "add_generation_prompt": true, "enable_thinking": false})"));
  EXPECT_TRUE(prompt.ends_with(chat.generation_prompt(false))) << prompt;
}

TEST(Qwen35Template, GenerationPromptThinksOnlyWhenAsked) {
  const ChatTemplate chat = ChatTemplate::load(test::shared_dir() / "models" / "qwen3.5-0.8b");
  EXPECT_EQ(chat.generation_prompt(std::nullopt), "<|im_start|>assistant\n<think>\n\n</think>\n\n");
  EXPECT_EQ(chat.generation_prompt(false), "<|im_start|>assistant\n<think>\n\n</think>\n\n");
  EXPECT_EQ(chat.generation_prompt(true), "<|im_start|>assistant\n<think>\n");
}

TEST(Qwen35Template, StringArgumentsNameTheCall) {
  // OpenAI clients send arguments as JSON text; this template only takes objects (the server parses first).
  const ChatTemplate chat = ChatTemplate::load(test::shared_dir() / "models" / "qwen3.5-0.8b");
  try {
    chat.render(ordered_json::parse(R"({"messages": [{"role": "user", "content": "q"}, {"role": "assistant",
        "tool_calls": [{"function": {"name": "get", "arguments": "{}"}}]}]})"));
    FAIL() << "string arguments were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("arguments of tool call \"get\" must be an object"), std::string::npos)
        << e.what();
  }
}

TEST(Qwen3Template, RefusesNonTextContentNamingTheMessage) {
  const ChatTemplate chat = ChatTemplate::load(test::qwen3_tokenizer_dir());
  try {
    chat.render(ordered_json::parse(
        R"({"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": [{"type": "text"}]}]})"));
    FAIL() << "content parts were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("messages[1].content must be a string or null"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace megaqwen
