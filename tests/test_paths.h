// Paths every test may need, fixed at configure time.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

namespace megaqwen::test {

inline std::filesystem::path source_dir() { return MEGAQWEN_SOURCE_DIR; }
inline std::filesystem::path shared_dir() { return MEGAQWEN_SHARED_DIR; }
inline std::filesystem::path fixtures_dir() { return source_dir() / "tests" / "fixtures"; }
inline std::filesystem::path qwen3_tokenizer_dir() { return shared_dir() / "models" / "qwen3-0.6b"; }
inline const char* megaqwen_binary() { return MEGAQWEN_BINARY; }

// A scratch folder path private to this test process. ctest runs every test case as its own
// process, several at once, so a fixed name would be shared (and deleted) by concurrent cases.
inline std::filesystem::path process_temp_dir(const std::string& name) {
  return std::filesystem::temp_directory_path() / (name + "-" + std::to_string(::getpid()));
}

}  // namespace megaqwen::test
