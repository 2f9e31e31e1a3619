// Shared helpers of the tokenizer tests: the real Qwen3 tokenizer (loaded once per process) and the
// JSON-lines fixtures written by tools/make_tokenizer_fixtures.py.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "megaqwen/tokenizer/tokenizer.h"
#include "test_paths.h"

namespace megaqwen::test {

inline const Tokenizer& qwen3_tokenizer() {
  static const Tokenizer tokenizer = Tokenizer::load(qwen3_tokenizer_dir());
  return tokenizer;
}

inline std::vector<nlohmann::json> read_jsonl(const std::filesystem::path& file) {
  std::ifstream in(file);
  std::vector<nlohmann::json> rows;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) rows.push_back(nlohmann::json::parse(line));
  }
  return rows;
}

inline std::filesystem::path tokenizer_fixture(const char* name) {
  return fixtures_dir() / "tokenizer" / name;
}

}  // namespace megaqwen::test
