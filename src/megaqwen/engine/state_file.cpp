#include "megaqwen/engine/state_file.h"

#include <unistd.h>

#include <algorithm>
#include <set>
#include <system_error>

#include "megaqwen/model/model.h"
#include "megaqwen/model/model_fingerprint.h"
#include "megaqwen/model/safetensors.h"
#include "megaqwen/util/error.h"
#include "megaqwen/util/mapped_file.h"

namespace megaqwen {

namespace {

constexpr const char* kFormat = "megaqwen-state";
constexpr const char* kVersion = "1";
constexpr const char* kTokens = "tokens";

// The tensors of an opened file, each checked against what the engine asks for; remembers which were
// asked for, so tensors no engine reads (a file of another layout) are refused too.
class FileTensors final : public StateTensorSource {
 public:
  FileTensors(const SafetensorsHeader& header, std::span<const uint8_t> file, const std::string& path)
      : header_(header), file_(file), path_(path) {}

  std::span<const uint8_t> get(std::string_view name, DType dtype, std::span<const int64_t> shape) const override {
    const TensorInfo* t = find(name);
    if (!t) fail("{}: the tensor {} is missing", path_, name);
    const std::vector<int64_t> want(shape.begin(), shape.end());
    if (t->dtype != dtype || t->shape != want)
      fail("{}: the tensor {} is {} {}, this engine expects {} {}", path_, name, dtype_name(t->dtype),
           t->shape_string(), dtype_name(dtype), TensorInfo{std::string(name), dtype, want, 0, 0}.shape_string());
    used_.insert(std::string(name));
    return file_.subspan(size_t(header_.data_offset + t->begin), size_t(t->end - t->begin));
  }
  bool has(std::string_view name) const override { return find(name) != nullptr; }

  void check_all_used() const {
    for (const TensorInfo& t : header_.tensors)
      if (!used_.contains(t.name)) fail("{}: the tensor {} is not part of this engine's state", path_, t.name);
  }

 private:
  const TensorInfo* find(std::string_view name) const {
    auto it = std::lower_bound(header_.tensors.begin(), header_.tensors.end(), name,
                               [](const TensorInfo& t, std::string_view n) { return t.name < n; });
    return it != header_.tensors.end() && it->name == name ? &*it : nullptr;
  }

  const SafetensorsHeader& header_;
  std::span<const uint8_t> file_;
  const std::string& path_;
  mutable std::set<std::string> used_;
};

const std::string& metadata(const SafetensorsHeader& header, const std::string& key, const std::string& path) {
  auto it = header.metadata.find(key);
  if (it == header.metadata.end()) fail("{}: not a megaqwen state file (no \"{}\" in its metadata)", path, key);
  return it->second;
}

}  // namespace

void write_state_file(const std::filesystem::path& path, const Model& model, const Engine& engine,
                      const SavedSequence& sequence) {
  if (!sequence.state || sequence.state->position() != int(sequence.tokens.size()))
    fail("a saved sequence of {} tokens has no matching cache copy", sequence.tokens.size());
  if (&engine.config() != &model.config) fail("write_state_file: the engine does not run this model");
  const std::string format = engine.state_format();
  if (format.empty()) fail("this engine ({}) cannot write a saved sequence to a file", engine.device_name());

  std::vector<StateTensor> tensors = engine.state_tensors(*sequence.state);
  tensors.insert(tensors.begin(), make_state_tensor(kTokens, DType::I32, {int64_t(sequence.tokens.size())},
                                                    sequence.tokens));
  std::vector<TensorSpec> specs;
  for (const StateTensor& t : tensors) specs.push_back(t.spec);
  const std::map<std::string, std::string> meta{{"format", kFormat},
                                                {"version", kVersion},
                                                {"state_format", format},
                                                {"model_fingerprint", model_fingerprint(model)},
                                                {"model", model.dir.filename().string()}};

  // Beside the target (same file system, so the rename is atomic), unique to this process.
  std::filesystem::path temporary = path;
  temporary += ".tmp" + std::to_string(::getpid());
  try {
    SafetensorsWriter writer(temporary, specs, meta);
    for (const StateTensor& t : tensors) writer.write(t.bytes);
    writer.finish();
    std::filesystem::rename(temporary, path);
  } catch (const std::exception& e) {
    std::error_code ignored;
    std::filesystem::remove(temporary, ignored);
    fail("cannot write the state file {}: {}", path.string(), e.what());
  }
}

StateFile StateFile::open(const std::filesystem::path& path) {
  StateFile f;
  f.path_ = path.string();
  f.file_ = std::make_unique<MappedFile>(f.path_);
  f.header_ = std::make_unique<SafetensorsHeader>(parse_safetensors_header(f.file_->bytes(), f.path_));
  if (metadata(*f.header_, "format", f.path_) != kFormat)
    fail("{}: not a megaqwen state file (format \"{}\")", f.path_, metadata(*f.header_, "format", f.path_));
  if (const std::string& version = metadata(*f.header_, "version", f.path_); version != kVersion)
    fail("{}: state file version {} (this megaqwen reads version {})", f.path_, version, kVersion);
  f.state_format_ = metadata(*f.header_, "state_format", f.path_);
  f.model_fingerprint_ = metadata(*f.header_, "model_fingerprint", f.path_);
  auto name = f.header_->metadata.find("model");
  f.model_name_ = name != f.header_->metadata.end() ? name->second : "";

  const FileTensors tensors(*f.header_, f.file_->bytes(), f.path_);
  const TensorInfo* t = nullptr;
  for (const TensorInfo& info : f.header_->tensors)
    if (info.name == kTokens) t = &info;
  if (!t) fail("{}: the tensor {} is missing", f.path_, kTokens);
  if (t->shape.size() != 1)
    fail("{}: the tensor {} has shape {}, expected one dimension", f.path_, kTokens, t->shape_string());
  f.tokens_ = tensors.read<int32_t>(kTokens, DType::I32, t->shape);
  return f;
}

StateFile::StateFile(StateFile&&) noexcept = default;
StateFile& StateFile::operator=(StateFile&&) noexcept = default;
StateFile::~StateFile() = default;

uint64_t StateFile::bytes() const { return file_->bytes().size(); }

SavedSequence StateFile::load(const Model& model, const Engine& engine) const {
  if (&engine.config() != &model.config) fail("StateFile::load: the engine does not run this model");
  const std::string format = engine.state_format();
  if (format.empty()) fail("this engine ({}) cannot read a saved sequence from a file", engine.device_name());
  if (state_format_ != format)
    fail("{} was written by another kind of engine (state format {}; this one, {}, reads {})", path_, state_format_,
         engine.device_name(), format);
  const std::string fingerprint = megaqwen::model_fingerprint(model);
  if (model_fingerprint_ != fingerprint)
    fail("{} was made with another model ({}, fingerprint {}; this one is {}, fingerprint {})", path_,
         model_name_.empty() ? "unnamed" : model_name_, model_fingerprint_, model.dir.filename().string(),
         fingerprint);
  if (int64_t(tokens_.size()) > engine.context_size())
    fail("{} holds {} tokens but the context holds {}", path_, tokens_.size(), engine.context_size());
  const int vocab = model.config.vocab_size;
  for (size_t i = 0; i < tokens_.size(); ++i)
    if (tokens_[i] < 0 || tokens_[i] >= vocab)
      fail("{}: token {} is id {}, outside the vocabulary of {}", path_, i, tokens_[i], vocab);

  const FileTensors tensors(*header_, file_->bytes(), path_);
  tensors.get(kTokens, DType::I32, std::vector<int64_t>{int64_t(tokens_.size())});
  std::shared_ptr<const EngineState> state;
  try {
    state = engine.state_from_tensors(tokens_, tensors);
  } catch (const Error& e) {
    const std::string what = e.what();
    if (what.starts_with(path_)) throw;
    fail("{}: {}", path_, what);
  }
  tensors.check_all_used();
  return SavedSequence{tokens_, std::move(state)};
}

}  // namespace megaqwen
