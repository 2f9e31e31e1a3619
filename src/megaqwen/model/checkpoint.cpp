#include "megaqwen/model/checkpoint.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "megaqwen/util/error.h"
#include "megaqwen/util/text_file.h"

namespace megaqwen {

namespace fs = std::filesystem;

namespace {

// The shard file names listed by an index, in first-seen order, with the tensors each must hold.
std::vector<std::pair<std::string, std::set<std::string>>> read_index(const fs::path& index_path) {
  auto root = nlohmann::json::parse(read_text_file(index_path), nullptr, false);
  if (root.is_discarded()) fail("{}: not valid JSON", index_path.string());
  if (!root.is_object() || !root.contains("weight_map") || !root["weight_map"].is_object())
    fail("{}: missing 'weight_map' object", index_path.string());
  std::vector<std::pair<std::string, std::set<std::string>>> shards;
  std::map<std::string, size_t> shard_index;
  for (auto& [tensor, file] : root["weight_map"].items()) {
    if (!file.is_string()) fail("{}: weight_map entry for '{}' is not a file name", index_path.string(), tensor);
    std::string name = file.get<std::string>();
    if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..")
      fail("{}: weight_map names '{}', which is not a file in the model folder", index_path.string(), name);
    auto [it, added] = shard_index.try_emplace(name, shards.size());
    if (added) shards.push_back({name, {}});
    shards[it->second].second.insert(tensor);
  }
  if (shards.empty()) fail("{}: weight_map is empty", index_path.string());
  return shards;
}

}  // namespace

std::unique_ptr<Checkpoint> Checkpoint::open(const fs::path& model_dir) {
  auto ckpt = std::unique_ptr<Checkpoint>(new Checkpoint());
  std::vector<std::pair<std::string, std::set<std::string>>> shards;
  fs::path index = model_dir / "model.safetensors.index.json";
  if (fs::exists(index)) {
    shards = read_index(index);
  } else if (fs::exists(model_dir / "model.safetensors")) {
    shards.push_back({"model.safetensors", {}});
  } else {
    fail("{}: no model.safetensors or model.safetensors.index.json", model_dir.string());
  }

  ckpt->file_names_.reserve(shards.size());  // views point at these strings: no reallocation
  for (auto& [file_name, expected] : shards) {
    std::string path = (model_dir / file_name).string();
    auto map = std::make_unique<MappedFile>(path);
    auto header = std::make_unique<SafetensorsHeader>(parse_safetensors_header(map->bytes(), path));
    ckpt->file_names_.push_back(path);
    const std::string* file_ref = &ckpt->file_names_.back();
    for (const TensorInfo& t : header->tensors) {
      TensorView view{&t, map->bytes().data() + header->data_offset + t.begin, file_ref};
      if (!ckpt->tensors_.emplace(t.name, view).second)
        fail("{}: tensor '{}' is stored in more than one shard", path, t.name);
      expected.erase(t.name);
    }
    if (!expected.empty())
      fail("{}: the index lists tensor '{}' in this file, but it is not there", path, *expected.begin());
    ckpt->maps_.push_back(std::move(map));
    ckpt->headers_.push_back(std::move(header));
  }
  return ckpt;
}

const TensorView* Checkpoint::find(std::string_view name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

const TensorView& Checkpoint::get(std::string_view name) const {
  const TensorView* t = find(name);
  if (!t) fail("missing tensor '{}' in the checkpoint", name);
  return *t;
}

uint64_t Checkpoint::total_bytes() const {
  uint64_t n = 0;
  for (const auto& [name, t] : tensors_) n += t.byte_size();
  return n;
}

bool Checkpoint::use_huge_pages(MappedFile::Copy copy, std::string* why) const {
  for (const auto& map : maps_) {
    std::string reason;
    if (map->use_huge_pages(copy, &reason) == MappedFile::HugePages::kNo) {
      if (why) *why = map->path() + ": " + reason;
      return false;
    }
  }
  return true;
}

bool Checkpoint::in_huge_pages() const {
  return std::all_of(maps_.begin(), maps_.end(), [](const auto& map) { return map->huge_pages() != MappedFile::HugePages::kNo; });
}

std::optional<uint64_t> Checkpoint::huge_page_bytes() const {
  uint64_t total = 0;
  for (const auto& map : maps_) {
    const std::optional<uint64_t> bytes = map->huge_page_bytes();
    if (!bytes) return std::nullopt;
    total += *bytes;
  }
  return total;
}

fs::path resolve_model_dir(const std::string& model) {
  if (model.empty()) fail("no model given");
  fs::path as_path(model);
  if (fs::is_directory(as_path)) return as_path;
  if (fs::exists(as_path)) fail("{} is not a folder", model);

  // A hub id has exactly one '/' and no path-like parts.
  auto slash = model.find('/');
  bool looks_like_id = slash != std::string::npos && slash > 0 && model.find('/', slash + 1) == std::string::npos &&
                       model[0] != '.' && slash + 1 < model.size();
  if (!looks_like_id) fail("model folder '{}' does not exist", model);

  std::vector<fs::path> caches;
  if (const char* c = std::getenv("HF_HUB_CACHE")) caches.emplace_back(c);
  if (const char* c = std::getenv("HUGGINGFACE_HUB_CACHE")) caches.emplace_back(c);
  if (const char* h = std::getenv("HF_HOME")) caches.push_back(fs::path(h) / "hub");
  if (const char* x = std::getenv("XDG_CACHE_HOME")) caches.push_back(fs::path(x) / "huggingface" / "hub");
  if (const char* home = std::getenv("HOME")) caches.push_back(fs::path(home) / ".cache" / "huggingface" / "hub");

  std::string repo = "models--" + model.substr(0, slash) + "--" + model.substr(slash + 1);
  std::string looked;
  for (const fs::path& cache : caches) {
    fs::path root = cache / repo;
    looked += (looked.empty() ? "" : ", ") + root.string();
    if (!fs::is_directory(root / "snapshots")) continue;
    // Prefer the revision refs/main points at; otherwise the most recently written snapshot.
    std::ifstream ref(root / "refs" / "main");
    std::string revision;
    if (ref >> revision && fs::is_directory(root / "snapshots" / revision)) return root / "snapshots" / revision;
    fs::path newest;
    fs::file_time_type newest_time{};
    for (const auto& entry : fs::directory_iterator(root / "snapshots")) {
      if (!entry.is_directory()) continue;
      auto t = entry.last_write_time();
      if (newest.empty() || t > newest_time) newest = entry.path(), newest_time = t;
    }
    if (!newest.empty()) return newest;
  }
  fail("model '{}' is not a folder and was not found in the Hugging Face cache (looked in {})", model, looked);
}

}  // namespace megaqwen
