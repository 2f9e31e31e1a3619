#include "megaqwen/engine/state_file_store.h"

#include <fmt/format.h>

#include <algorithm>
#include <system_error>

#include "megaqwen/engine/state_file.h"
#include "megaqwen/model/model.h"
#include "megaqwen/model/model_fingerprint.h"
#include "megaqwen/util/error.h"

namespace megaqwen {

namespace fs = std::filesystem;

namespace {

constexpr const char* kExtension = ".state";

bool starts_with(std::span<const int32_t> whole, std::span<const int32_t> prefix) {
  return prefix.size() <= whole.size() && std::equal(prefix.begin(), prefix.end(), whole.begin());
}

// A file name from the token ids (FNV-1a over their bytes) and their count.
std::string file_name(std::span<const int32_t> tokens) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (int32_t t : tokens)
    for (int i = 0; i < 4; ++i) {
      h ^= uint8_t(uint32_t(t) >> (8 * i));
      h *= 0x100000001b3ULL;
    }
  return fmt::format("{:016x}-{}{}", h, tokens.size(), kExtension);
}

}  // namespace

StateFileStore::StateFileStore(fs::path dir, uint64_t budget_bytes, std::shared_ptr<const Model> model,
                               std::string state_format)
    : dir_(std::move(dir)), budget_(budget_bytes), model_(std::move(model)), state_format_(std::move(state_format)) {
  if (state_format_.empty()) fail("the prompt cache folder needs an engine that writes its state to files");
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec || !fs::is_directory(dir_)) fail("cannot make the prompt cache folder {}: {}", dir_.string(), ec.message());
  fingerprint_ = model_fingerprint(*model_);

  std::vector<std::pair<fs::file_time_type, Entry>> found;
  for (const fs::directory_entry& f : fs::directory_iterator(dir_, ec)) {
    if (!f.is_regular_file() || f.path().extension() != kExtension) continue;
    try {
      const StateFile file = StateFile::open(f.path());
      if (file.state_format() != state_format_ || file.model_fingerprint() != fingerprint_) {
        ++skipped_;
        continue;
      }
      found.emplace_back(f.last_write_time(), Entry{f.path(), file.tokens(), file.bytes()});
    } catch (const std::exception&) {
      ++skipped_;  // damaged, or not a state file: not ours to touch
    }
  }
  if (ec) fail("cannot read the prompt cache folder {}: {}", dir_.string(), ec.message());
  std::stable_sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  for (auto& [time, entry] : found) {
    bytes_ += entry.bytes;
    entries_.push_back(std::move(entry));
  }
  while (bytes_ > budget_ && !entries_.empty()) erase(entries_.size() - 1);  // the budget may have shrunk
}

std::optional<StateFileStore::Match> StateFileStore::best(std::span<const int32_t> prompt, size_t limit) const {
  std::optional<Match> out;
  for (size_t i = 0; i < entries_.size(); ++i) {
    const std::vector<int32_t>& t = entries_[i].tokens;
    const auto shared = std::mismatch(t.begin(), t.end(), prompt.begin(), prompt.end()).first - t.begin();
    const size_t n = std::min(limit, size_t(shared));
    if (n > 0 && (!out || n > out->shared)) out = Match{i, n};
  }
  return out;
}

bool StateFileStore::holds(std::span<const int32_t> tokens) const {
  return std::any_of(entries_.begin(), entries_.end(), [&](const Entry& e) { return starts_with(e.tokens, tokens); });
}

SavedSequence StateFileStore::load(size_t index, const Engine& engine) {
  if (index >= entries_.size()) fail("no stored sequence {}", index);
  SavedSequence saved;
  try {
    saved = StateFile::open(entries_[index].path).load(*model_, engine);
  } catch (const Error&) {
    // Out of the index, but the file stays: the failure may be this moment's (memory); the next
    // start indexes it again if it still opens.
    bytes_ -= entries_[index].bytes;
    entries_.erase(entries_.begin() + ptrdiff_t(index));
    throw;
  }
  std::rotate(entries_.begin(), entries_.begin() + ptrdiff_t(index), entries_.begin() + ptrdiff_t(index) + 1);
  std::error_code ignored;  // the time orders the files at the next start; a failure only loses that
  fs::last_write_time(entries_.front().path, fs::file_time_type::clock::now(), ignored);
  return saved;
}

void StateFileStore::store(const SavedSequence& sequence, const Engine& engine) {
  for (size_t i = 0; i < entries_.size(); ++i)
    if (starts_with(entries_[i].tokens, sequence.tokens)) {  // already held, whole
      std::rotate(entries_.begin(), entries_.begin() + ptrdiff_t(i), entries_.begin() + ptrdiff_t(i) + 1);
      return;
    }
  const fs::path path = dir_ / file_name(sequence.tokens);
  write_state_file(path, *model_, engine, sequence);
  const uint64_t size = fs::file_size(path);
  if (size > budget_) {
    std::error_code ignored;
    fs::remove(path, ignored);
    return;
  }
  for (size_t i = entries_.size(); i-- > 0;) {
    if (entries_[i].path == path) {  // the same name for other tokens (a hash collision): just overwritten
      bytes_ -= entries_[i].bytes;
      entries_.erase(entries_.begin() + ptrdiff_t(i));
    } else if (starts_with(sequence.tokens, entries_[i].tokens)) {
      erase(i);  // superseded
    }
  }
  entries_.insert(entries_.begin(), Entry{path, sequence.tokens, size});
  bytes_ += size;
  while (bytes_ > budget_ && entries_.size() > 1) erase(entries_.size() - 1);
}

void StateFileStore::erase(size_t index) {
  std::error_code ignored;
  fs::remove(entries_[index].path, ignored);
  bytes_ -= entries_[index].bytes;
  entries_.erase(entries_.begin() + ptrdiff_t(index));
}

}  // namespace megaqwen
