// Paths every test may need, fixed at configure time.
#pragma once

#include <filesystem>

namespace megaqwen::test {

inline std::filesystem::path source_dir() { return MEGAQWEN_SOURCE_DIR; }
inline std::filesystem::path shared_dir() { return MEGAQWEN_SHARED_DIR; }
inline std::filesystem::path fixtures_dir() { return source_dir() / "tests" / "fixtures"; }
inline std::filesystem::path qwen3_tokenizer_dir() { return shared_dir() / "models" / "qwen3-0.6b"; }
inline const char* megaqwen_binary() { return MEGAQWEN_BINARY; }

}  // namespace megaqwen::test
