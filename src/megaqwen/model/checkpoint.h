// Checkpoint: the weights of a model folder, memory-mapped in place. One model.safetensors, or the
// shards named by model.safetensors.index.json. Tensors are looked up by their Hugging Face name.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "megaqwen/model/safetensors.h"
#include "megaqwen/util/mapped_file.h"

namespace megaqwen {

// A tensor inside a mapped file: its header entry and a pointer to its bytes.
struct TensorView {
  const TensorInfo* info = nullptr;
  const uint8_t* data = nullptr;
  const std::string* file = nullptr;  // the shard it lives in, for messages

  const std::string& name() const { return info->name; }
  DType dtype() const { return info->dtype; }
  const std::vector<int64_t>& shape() const { return info->shape; }
  uint64_t byte_size() const { return info->end - info->begin; }
};

class Checkpoint {
 public:
  static std::unique_ptr<Checkpoint> open(const std::filesystem::path& model_dir);

  const TensorView* find(std::string_view name) const;  // nullptr when absent
  const TensorView& get(std::string_view name) const;   // Error naming the tensor when absent
  const std::map<std::string, TensorView, std::less<>>& tensors() const { return tensors_; }
  const std::vector<std::string>& files() const { return file_names_; }
  uint64_t total_bytes() const;  // bytes of tensor data over all files

  // Every file's bytes in transparent huge pages, at the same addresses (MappedFile::use_huge_pages:
  // the page cache's own, or a copy): the tensors read the same values, faster when streamed. What
  // the CPU engines do at construction; the GPU engines upload from the map and leave it be. False,
  // with the reason, where any file stays (partly) in 4 KiB pages.
  bool use_huge_pages(MappedFile::Copy copy = MappedFile::Copy::kIfNeeded, std::string* why = nullptr) const;
  bool in_huge_pages() const;  // every file
  // Bytes of the files the kernel backs with huge pages now (nullopt: unknown).
  std::optional<uint64_t> huge_page_bytes() const;

 private:
  std::vector<std::unique_ptr<MappedFile>> maps_;
  std::vector<std::unique_ptr<SafetensorsHeader>> headers_;
  std::vector<std::string> file_names_;
  std::map<std::string, TensorView, std::less<>> tensors_;
};

// Turns what the user typed into a model folder: an existing directory, or a Hugging Face model id
// ("Qwen/Qwen3-0.6B") found in the local hub cache ($HF_HUB_CACHE, $HF_HOME/hub or
// ~/.cache/huggingface/hub, layout models--Qwen--Qwen3-0.6B/snapshots/<revision>/).
std::filesystem::path resolve_model_dir(const std::string& model);

}  // namespace megaqwen
