// MappedFile and huge_pages: the map starts on a 2 MiB boundary; use_huge_pages() keeps the address
// and every byte, whether it takes the page cache's own huge pages or copies (a tail that is not a
// whole page, more than one piece); the copy reads the file it mapped even after another took its
// name; a file that shrank and a file under one huge page are refused with the mapping left as it
// was; backed_bytes() reads smaps.
#include "megaqwen/util/mapped_file.h"

#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "megaqwen/util/huge_pages.h"
#include "model/model_test_util.h"

namespace megaqwen {
namespace {

namespace fs = std::filesystem;

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = uint8_t(rng());
  return v;
}

void write_file(const fs::path& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

bool same_bytes(const MappedFile& file, const std::vector<uint8_t>& expected) {
  const auto b = file.bytes();
  return b.size() == expected.size() && std::memcmp(b.data(), expected.data(), b.size()) == 0;
}

uintptr_t address_of(const MappedFile& file) { return reinterpret_cast<uintptr_t>(file.bytes().data()); }

TEST(MappedFile, StartsOnAHugePageBoundary) {
  const fs::path path = test::scratch_dir() / "small.bin";
  const auto bytes = random_bytes(10'000, 1);
  write_file(path, bytes);
  MappedFile file(path.string());
  EXPECT_EQ(address_of(file) % huge_pages::kHugePage, 0u);
  EXPECT_TRUE(same_bytes(file, bytes));
}

TEST(MappedFile, CopyToHugePagesKeepsTheAddressAndEveryByte) {
  std::string why;
  if (!huge_pages::available(&why)) GTEST_SKIP() << why;
  // Three 32 MiB pieces, the last one short and ending inside a page.
  const fs::path path = test::scratch_dir() / "weights.bin";
  const auto bytes = random_bytes((size_t(70) << 20) + 123, 2);
  write_file(path, bytes);
  MappedFile file(path.string());
  const uintptr_t before = address_of(file);
  EXPECT_EQ(file.huge_pages(), MappedFile::HugePages::kNo);
  ASSERT_EQ(file.use_huge_pages(MappedFile::Copy::kAlways, &why), MappedFile::HugePages::kCopied) << why;
  EXPECT_EQ(file.huge_pages(), MappedFile::HugePages::kCopied);
  EXPECT_EQ(address_of(file), before);
  EXPECT_TRUE(same_bytes(file, bytes));
  // A second call: already there, whatever it asks.
  EXPECT_EQ(file.use_huge_pages(MappedFile::Copy::kNever), MappedFile::HugePages::kCopied);
  EXPECT_TRUE(same_bytes(file, bytes));
  // No longer the file's pages: changing the file does not show through.
  write_file(path, random_bytes(bytes.size(), 3));
  EXPECT_TRUE(same_bytes(file, bytes));
  const auto backed = file.huge_page_bytes();
  ASSERT_TRUE(backed.has_value());
  EXPECT_LE(*backed, bytes.size() + huge_pages::kHugePage);
}

// The default: the page cache's own huge pages where this kernel and file system give them (then at
// least 90% of the map is in them), a copy otherwise; never a copy under kNever.
TEST(MappedFile, UseHugePagesTakesThePageCachesOwnOrCopies) {
  std::string why;
  if (!huge_pages::available(&why)) GTEST_SKIP() << why;
  const fs::path path = test::scratch_dir() / "weights.bin";
  const auto bytes = random_bytes(size_t(40) << 20, 8);
  write_file(path, bytes);
  {
    MappedFile file(path.string());
    const MappedFile::HugePages got = file.use_huge_pages(MappedFile::Copy::kIfNeeded, &why);
    ASSERT_NE(got, MappedFile::HugePages::kNo) << why;
    EXPECT_TRUE(same_bytes(file, bytes));
    if (got == MappedFile::HugePages::kFilePages) {
      const auto backed = file.huge_page_bytes();
      ASSERT_TRUE(backed.has_value());
      EXPECT_GE(*backed, bytes.size() / 10 * 9);
    }
  }
  MappedFile file(path.string());
  const MappedFile::HugePages got = file.use_huge_pages(MappedFile::Copy::kNever, &why);
  EXPECT_NE(got, MappedFile::HugePages::kCopied);
  if (got == MappedFile::HugePages::kNo) {
    EXPECT_EQ(why, "the page cache maps it in 4 KiB pages, and no copy was allowed");
  }
  EXPECT_TRUE(same_bytes(file, bytes));
}

TEST(MappedFile, CopyReadsTheFileItMappedNotTheOneNowAtItsPath) {
  std::string why;
  if (!huge_pages::available(&why)) GTEST_SKIP() << why;
  const fs::path dir = test::scratch_dir();
  const auto original = random_bytes(size_t(5) << 20, 4);
  write_file(dir / "model.bin", original);
  MappedFile file((dir / "model.bin").string());
  write_file(dir / "replacement.bin", random_bytes(original.size(), 5));
  fs::rename(dir / "replacement.bin", dir / "model.bin");
  ASSERT_EQ(file.use_huge_pages(MappedFile::Copy::kAlways, &why), MappedFile::HugePages::kCopied) << why;
  EXPECT_TRUE(same_bytes(file, original));
}

TEST(MappedFile, RefusesAFileThatShrankAndLeavesTheMap) {
  std::string why;
  if (!huge_pages::available(&why)) GTEST_SKIP() << why;
  const fs::path path = test::scratch_dir() / "shrinks.bin";
  write_file(path, random_bytes(size_t(8) << 20, 6));
  MappedFile file(path.string());
  fs::resize_file(path, size_t(1) << 20);
  // The populate faults on the missing pages, so the copy finds the file short.
  EXPECT_EQ(file.use_huge_pages(MappedFile::Copy::kIfNeeded, &why), MappedFile::HugePages::kNo);
  EXPECT_EQ(why, "the file is shorter than when it was mapped");
  EXPECT_EQ(file.huge_pages(), MappedFile::HugePages::kNo);
}

TEST(MappedFile, RefusesAFileUnderOneHugePage) {
  const fs::path path = test::scratch_dir() / "tiny.bin";
  const auto bytes = random_bytes(huge_pages::kHugePage - 1, 7);
  write_file(path, bytes);
  MappedFile file(path.string());
  std::string why;
  EXPECT_EQ(file.use_huge_pages(MappedFile::Copy::kAlways, &why), MappedFile::HugePages::kNo);
  EXPECT_EQ(why, "the file is smaller than one huge page");
  EXPECT_TRUE(same_bytes(file, bytes));
}

TEST(HugePages, BackedBytesReadsSmaps) {
  // A region the kernel may not back with huge pages: smaps says 0 for it, and for an address no
  // mapping holds.
  const size_t bytes = size_t(4) << 20;
  void* p = huge_pages::map_aligned(bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % huge_pages::kHugePage, 0u);
  ASSERT_EQ(::madvise(p, bytes, MADV_NOHUGEPAGE), 0);
  std::memset(p, 1, bytes);
  EXPECT_EQ(huge_pages::backed_bytes(p, bytes), std::optional<uint64_t>(0));
  ::munmap(p, bytes);
  EXPECT_EQ(huge_pages::backed_bytes(p, bytes), std::optional<uint64_t>(0));
  // Where the kernel does give huge pages to an advised region it touched, smaps counts them.
  std::string why;
  if (!huge_pages::available(&why)) GTEST_SKIP() << why;
  p = huge_pages::map_aligned(bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1);
  ASSERT_NE(p, nullptr);
  ::madvise(p, bytes, MADV_HUGEPAGE);
  std::memset(p, 1, bytes);
  const auto backed = huge_pages::backed_bytes(p, bytes);
  ASSERT_TRUE(backed.has_value());
  EXPECT_EQ(*backed % huge_pages::kHugePage, 0u);
  EXPECT_LE(*backed, bytes);
  ::munmap(p, bytes);
}

}  // namespace
}  // namespace megaqwen
