// Helpers shared by the tests of src/megaqwen/model: scratch folders and whole-file I/O.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace megaqwen::test {

// A fresh, empty folder under the test temp dir, named after the running test.
inline std::filesystem::path scratch_dir(const std::string& suffix = "") {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  // The pid keeps parallel ctest processes (one per test case) out of each other's folders.
  std::string name = "megaqwen_model_" + std::to_string(::getpid()) + "_";
  if (info) name += std::string(info->test_suite_name()) + "_" + info->name();
  name += suffix;
  for (char& c : name)
    if (c == '/') c = '_';
  std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// Removes this process's scratch folders when the test program ends.
class ScratchCleanup : public ::testing::Environment {
 public:
  void TearDown() override {
    const std::string prefix = "megaqwen_model_" + std::to_string(::getpid()) + "_";
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(::testing::TempDir(), ec))
      if (e.path().filename().string().rfind(prefix, 0) == 0) std::filesystem::remove_all(e.path(), ec);
  }
};
inline ::testing::Environment* const kScratchCleanup = ::testing::AddGlobalTestEnvironment(new ScratchCleanup);

inline std::vector<uint8_t> read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline void write_bytes(const std::filesystem::path& path, const void* data, size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(static_cast<const char*>(data), std::streamsize(size));
}
inline void write_bytes(const std::filesystem::path& path, const std::vector<uint8_t>& bytes) {
  write_bytes(path, bytes.data(), bytes.size());
}
inline void write_text(const std::filesystem::path& path, const std::string& text) {
  write_bytes(path, text.data(), text.size());
}

}  // namespace megaqwen::test

#include "megaqwen/util/error.h"

namespace megaqwen::test {

// Runs `f`, which must throw megaqwen::Error; returns its message ("" and a test failure otherwise).
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw a non-megaqwen exception: " << e.what();
    return "";
  }
  ADD_FAILURE() << "did not throw";
  return "";
}

}  // namespace megaqwen::test

// The message of the megaqwen::Error `statement` throws contains every one of the given substrings.
#define EXPECT_ERROR_HAS(statement, ...)                                                          \
  do {                                                                                            \
    const std::vector<std::string> megaqwen_parts_{__VA_ARGS__};                                  \
    const std::string megaqwen_msg_ = ::megaqwen::test::error_of([&] { (void)(statement); });     \
    for (const std::string& megaqwen_part_ : megaqwen_parts_)                                     \
      EXPECT_NE(megaqwen_msg_.find(megaqwen_part_), std::string::npos)                            \
          << "message: " << megaqwen_msg_ << "\nmissing: " << megaqwen_part_;                     \
  } while (0)
