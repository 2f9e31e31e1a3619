// `megaqwen template --model DIR` end to end: stdin JSON in, the exact prompt out, one error line and a
// non-zero status for what it refuses.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "test_paths.h"

namespace megaqwen {
namespace {

namespace fs = std::filesystem;

struct RunResult {
  int status = -1;
  std::string out;
  std::string err;
};

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Runs the megaqwen binary's template command with `input` on stdin.
RunResult run_template(const fs::path& model_dir, const std::string& input) {
  const fs::path dir = test::process_temp_dir("megaqwen_template_command");
  fs::create_directories(dir);
  std::ofstream(dir / "in.json", std::ios::binary) << input;
  const std::string command = fmt::format("'{}' template --model '{}' < '{}' > '{}' 2> '{}'", test::megaqwen_binary(),
                                          model_dir.string(), (dir / "in.json").string(),
                                          (dir / "out.txt").string(), (dir / "err.txt").string());
  const int raw = std::system(command.c_str());
  return {WIFEXITED(raw) ? WEXITSTATUS(raw) : -1, read_file(dir / "out.txt"), read_file(dir / "err.txt")};
}

TEST(TemplateCommand, PrintsTheExactPrompt) {
  int checked = 0;
  for (const char* file : {"qwen3_cases.json", "qwen3_5_cases.json"}) {
    std::ifstream in(test::fixtures_dir() / "chat" / file);
    const auto fixture = nlohmann::ordered_json::parse(in);
    const fs::path model_dir = test::shared_dir() / "models" / fixture.at("model").get<std::string>();
    for (const auto& c : fixture.at("cases")) {
      if (c.at("name") != "tool_results_grouped" && c.at("name") != "unicode") continue;
      const RunResult result = run_template(model_dir, c.at("request").dump());
      EXPECT_EQ(result.status, 0) << result.err;
      EXPECT_EQ(result.out, c.at("expected").get<std::string>()) << file << " " << c.at("name");  // no newline added
      ++checked;
    }
  }
  EXPECT_EQ(checked, 4);
}

TEST(TemplateCommand, RefusalsAreOneErrorLine) {
  for (const char* input : {"{\"messages\": [", R"({"messages": "hi"})", R"({"messages": [{"role": "system"}]})"}) {
    const RunResult result = run_template(test::qwen3_tokenizer_dir(), input);
    EXPECT_NE(result.status, 0) << input;
    EXPECT_TRUE(result.out.empty()) << input;
    EXPECT_TRUE(result.err.starts_with("megaqwen: error: ")) << result.err;
    EXPECT_EQ(std::count(result.err.begin(), result.err.end(), '\n'), 1) << result.err;
  }
}

TEST(TemplateCommand, FolderWithoutTemplateIsAnError) {
  const fs::path empty = test::process_temp_dir("megaqwen_no_template");
  fs::create_directories(empty);
  const RunResult result = run_template(empty, R"({"messages": [{"role": "user", "content": "x"}]})");
  EXPECT_NE(result.status, 0);
  EXPECT_NE(result.err.find("no chat template"), std::string::npos) << result.err;
}

}  // namespace
}  // namespace megaqwen
