#include "megaqwen/model/safetensors.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "megaqwen/util/error.h"
#include "megaqwen/util/json_excerpt.h"

namespace megaqwen {

namespace {

struct DTypeEntry {
  DType dtype;
  const char* name;
  size_t size;
};
constexpr DTypeEntry kDTypes[] = {
    {DType::BF16, "BF16", 2},   {DType::F16, "F16", 2},         {DType::F32, "F32", 4},
    {DType::F64, "F64", 8},     {DType::I8, "I8", 1},           {DType::U8, "U8", 1},
    {DType::I16, "I16", 2},     {DType::I32, "I32", 4},         {DType::I64, "I64", 8},
    {DType::BOOL, "BOOL", 1},   {DType::F8_E4M3, "F8_E4M3", 1}, {DType::F8_E5M2, "F8_E5M2", 1},
};

// A sanity bound on the header: real ones are tens of KB to a few MB.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

}  // namespace

const char* dtype_name(DType dtype) {
  for (const auto& e : kDTypes)
    if (e.dtype == dtype) return e.name;
  return "?";
}

size_t dtype_size(DType dtype) {
  for (const auto& e : kDTypes)
    if (e.dtype == dtype) return e.size;
  return 0;
}

int64_t TensorInfo::element_count() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string TensorInfo::shape_string() const {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

SafetensorsHeader parse_safetensors_header(std::span<const uint8_t> file, const std::string& source) {
  using nlohmann::json;
  if (file.size() < 8) fail("{}: truncated safetensors file ({} bytes, no header length)", source, file.size());
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | file[size_t(i)];
  if (header_len > kMaxHeaderBytes)
    fail("{}: safetensors header length {} is implausibly large (limit {})", source, header_len, kMaxHeaderBytes);
  if (header_len > file.size() - 8)
    fail("{}: safetensors header length {} exceeds the file ({} bytes): truncated file?", source, header_len,
         file.size());

  SafetensorsHeader header;
  header.data_offset = 8 + header_len;
  const uint64_t data_size = file.size() - header.data_offset;
  auto text = std::string_view(reinterpret_cast<const char*>(file.data() + 8), header_len);
  json root = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) fail("{}: safetensors header is not valid JSON", source);
  if (!root.is_object()) fail("{}: safetensors header must be a JSON object", source);

  for (auto& [name, entry] : root.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) fail("{}: __metadata__ must be an object of strings", source);
      for (auto& [k, v] : entry.items()) {
        if (!v.is_string()) fail("{}: __metadata__ value for '{}' must be a string", source, k);
        header.metadata[k] = v.get<std::string>();
      }
      continue;
    }
    if (!entry.is_object()) fail("{}: tensor '{}': header entry must be an object", source, name);
    TensorInfo t;
    t.name = name;

    auto dt = entry.find("dtype");
    if (dt == entry.end() || !dt->is_string()) fail("{}: tensor '{}': missing or non-string 'dtype'", source, name);
    const std::string dtype = dt->get<std::string>();
    auto known = std::find_if(std::begin(kDTypes), std::end(kDTypes), [&](const DTypeEntry& e) { return dtype == e.name; });
    if (known == std::end(kDTypes)) fail("{}: tensor '{}': unknown dtype {}", source, name, json_excerpt(*dt));
    t.dtype = known->dtype;

    auto sh = entry.find("shape");
    if (sh == entry.end() || !sh->is_array()) fail("{}: tensor '{}': missing or non-array 'shape'", source, name);
    if (sh->size() > 8) fail("{}: tensor '{}': {} dimensions is too many", source, name, sh->size());
    // Each dimension and the running product stay below 2^48 so nothing overflows.
    constexpr uint64_t kLimit = 1ull << 48;
    uint64_t elements = 1;
    for (const json& d : *sh) {
      if (!d.is_number_unsigned() && !(d.is_number_integer() && d.get<int64_t>() >= 0))
        fail("{}: tensor '{}': shape entries must be non-negative integers, got {}", source, name, json_excerpt(*sh));
      uint64_t v = d.get<uint64_t>();
      if (v >= kLimit || (v && elements > kLimit / v)) fail("{}: tensor '{}': shape {} is too large", source, name, json_excerpt(*sh));
      elements *= v;
      t.shape.push_back(int64_t(v));
    }

    auto off = entry.find("data_offsets");
    if (off == entry.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
        !(*off)[1].is_number_unsigned())
      fail("{}: tensor '{}': 'data_offsets' must be two non-negative integers", source, name);
    t.begin = (*off)[0].get<uint64_t>();
    t.end = (*off)[1].get<uint64_t>();
    if (t.begin > t.end) fail("{}: tensor '{}': data_offsets [{}, {}] are reversed", source, name, t.begin, t.end);
    if (t.end > data_size)
      fail("{}: tensor '{}': data_offsets [{}, {}] run past the data section ({} bytes): truncated file?", source,
           name, t.begin, t.end, data_size);
    uint64_t expected = elements * known->size;
    if (t.end - t.begin != expected)
      fail("{}: tensor '{}': {} bytes stored but shape {} of {} needs {}", source, name, t.end - t.begin,
           t.shape_string(), dtype, expected);
    header.tensors.push_back(std::move(t));
  }

  // No two tensors may share bytes.
  std::vector<const TensorInfo*> by_offset;
  for (const auto& t : header.tensors)
    if (t.end > t.begin) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(), [](auto* a, auto* b) { return a->begin < b->begin; });
  for (size_t i = 1; i < by_offset.size(); ++i)
    if (by_offset[i]->begin < by_offset[i - 1]->end)
      fail("{}: tensors '{}' and '{}' overlap in the data section", source, by_offset[i - 1]->name,
           by_offset[i]->name);
  return header;
}

uint64_t TensorSpec::byte_size() const {
  uint64_t n = dtype_size(dtype);
  for (int64_t d : shape) n *= uint64_t(d);
  return n;
}

struct SafetensorsWriter::Impl {
  std::filesystem::path path;
  std::ofstream out;
  std::vector<TensorSpec> specs;
  size_t current = 0;         // index of the tensor being written
  uint64_t written = 0;       // bytes of it so far
};

SafetensorsWriter::SafetensorsWriter(const std::filesystem::path& path, std::vector<TensorSpec> specs,
                                     const std::map<std::string, std::string>& metadata)
    : impl_(std::make_unique<Impl>()) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& t : specs) {
    header[t.name] = {{"dtype", dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.byte_size()}}};
    offset += t.byte_size();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // keep the data section 8-byte aligned
  impl_->path = path;
  impl_->specs = std::move(specs);
  impl_->out.open(path, std::ios::binary | std::ios::trunc);
  if (!impl_->out) fail("cannot create {}", path.string());
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = uint8_t(uint64_t(text.size()) >> (8 * i));
  impl_->out.write(reinterpret_cast<const char*>(len), 8);
  impl_->out.write(text.data(), std::streamsize(text.size()));
}

SafetensorsWriter::~SafetensorsWriter() = default;

void SafetensorsWriter::write(std::span<const uint8_t> bytes) {
  Impl& w = *impl_;
  while (!bytes.empty()) {
    if (w.current >= w.specs.size()) fail("SafetensorsWriter: more bytes than the declared tensors hold");
    uint64_t room = w.specs[w.current].byte_size() - w.written;
    size_t n = size_t(std::min<uint64_t>(room, bytes.size()));
    w.out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(n));
    bytes = bytes.subspan(n);
    w.written += n;
    if (w.written == w.specs[w.current].byte_size()) ++w.current, w.written = 0;
  }
  // Zero-sized tensors are complete as soon as they are reached.
  while (w.current < w.specs.size() && w.specs[w.current].byte_size() == 0) ++w.current;
}

void SafetensorsWriter::finish() {
  Impl& w = *impl_;
  while (w.current < w.specs.size() && w.specs[w.current].byte_size() == 0) ++w.current;
  if (w.current != w.specs.size())
    fail("SafetensorsWriter: tensor '{}' was not written in full", w.specs[w.current].name);
  if (!w.out.flush()) fail("error writing {}", w.path.string());
  w.out.close();
}

void write_safetensors(const std::filesystem::path& path,
                       const std::vector<std::pair<TensorSpec, std::span<const uint8_t>>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<TensorSpec> specs;
  for (const auto& [spec, bytes] : tensors) {
    if (spec.byte_size() != bytes.size())
      fail("write_safetensors: tensor '{}' has {} bytes, its shape needs {}", spec.name, bytes.size(), spec.byte_size());
    specs.push_back(spec);
  }
  SafetensorsWriter writer(path, specs, metadata);
  for (const auto& [spec, bytes] : tensors) writer.write(bytes);
  writer.finish();
}

}  // namespace megaqwen
