// Safetensors: the writer and parser round trip, and every malformed header is refused before any
// tensor byte is touched, with a message naming the file and the tensor.
#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "megaqwen/model/safetensors.h"
#include "megaqwen/util/bf16.h"
#include "model/model_test_util.h"

namespace megaqwen {
namespace {

using nlohmann::json;

// A file: 8-byte little-endian length, the header text, then `data_bytes` bytes of data.
std::vector<uint8_t> make_file(const std::string& header, size_t data_bytes = 0, uint64_t declared_len = UINT64_MAX) {
  const uint64_t len = declared_len == UINT64_MAX ? header.size() : declared_len;
  std::vector<uint8_t> f;
  f.reserve(8 + header.size() + data_bytes);
  for (int i = 0; i < 8; ++i) f.push_back(uint8_t(len >> (8 * i)));
  for (char c : header) f.push_back(uint8_t(c));
  for (size_t i = 0; i < data_bytes; ++i) f.push_back(uint8_t(i * 7 + 1));
  return f;
}

SafetensorsHeader parse(const std::vector<uint8_t>& file) { return parse_safetensors_header(file, "w.st"); }
SafetensorsHeader parse_json(const json& header, size_t data_bytes) { return parse(make_file(header.dump(), data_bytes)); }

json entry(const char* dtype, json shape, uint64_t begin, uint64_t end) {
  return {{"dtype", dtype}, {"shape", std::move(shape)}, {"data_offsets", {begin, end}}};
}

TEST(Safetensors, DTypeTable) {
  EXPECT_STREQ(dtype_name(DType::BF16), "BF16");
  EXPECT_STREQ(dtype_name(DType::F8_E5M2), "F8_E5M2");
  EXPECT_EQ(dtype_size(DType::BF16), 2u);
  EXPECT_EQ(dtype_size(DType::F16), 2u);
  EXPECT_EQ(dtype_size(DType::F32), 4u);
  EXPECT_EQ(dtype_size(DType::I64), 8u);
  EXPECT_EQ(dtype_size(DType::BOOL), 1u);
}

TEST(Safetensors, RoundTripAllFloatDTypes) {
  const auto dir = test::scratch_dir();
  std::vector<uint16_t> bf(6), hf(4);
  std::vector<float> f32 = {1.5f, -2.25f, 3e-8f};
  for (size_t i = 0; i < bf.size(); ++i) bf[i] = f32_to_bf16(float(i) - 2.5f);
  for (size_t i = 0; i < hf.size(); ++i) hf[i] = f32_to_f16(float(i) * 0.5f);
  auto bytes = [](const auto& v) {
    return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(v.data()), v.size() * sizeof(v[0]));
  };
  write_safetensors(dir / "m.safetensors",
                    {{TensorSpec{"a.bf16", DType::BF16, {2, 3}}, bytes(bf)},
                     {TensorSpec{"b.f16", DType::F16, {4}}, bytes(hf)},
                     {TensorSpec{"empty", DType::F32, {0, 5}}, {}},
                     {TensorSpec{"c.f32", DType::F32, {3}}, bytes(f32)},
                     {TensorSpec{"scalar", DType::F32, {}}, bytes(std::vector<float>{7.0f})}},
                    {{"format", "pt"}, {"note", "hello \"quoted\""}});
  const auto file = test::read_bytes(dir / "m.safetensors");
  const SafetensorsHeader h = parse_safetensors_header(file, "m");
  EXPECT_EQ(h.data_offset % 8, 0u);  // the writer pads the header
  EXPECT_EQ(h.metadata.at("format"), "pt");
  EXPECT_EQ(h.metadata.at("note"), "hello \"quoted\"");
  ASSERT_EQ(h.tensors.size(), 5u);
  // Tensors come sorted by name; the data is in write order: a.bf16, b.f16, empty, c.f32, scalar.
  std::vector<std::string> names;
  for (const auto& t : h.tensors) names.push_back(t.name);
  EXPECT_EQ(names, (std::vector<std::string>{"a.bf16", "b.f16", "c.f32", "empty", "scalar"}));
  const TensorInfo &a = h.tensors[0], &b = h.tensors[1], &c = h.tensors[2], &empty = h.tensors[3], &s = h.tensors[4];
  EXPECT_EQ(a.dtype, DType::BF16);
  EXPECT_EQ(a.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(a.shape_string(), "[2, 3]");
  EXPECT_EQ(a.element_count(), 6);
  EXPECT_EQ(b.dtype, DType::F16);
  EXPECT_EQ(c.dtype, DType::F32);
  EXPECT_EQ(empty.shape_string(), "[0, 5]");
  EXPECT_EQ(empty.element_count(), 0);
  EXPECT_EQ(s.shape_string(), "[]");
  EXPECT_EQ(s.element_count(), 1);
  EXPECT_EQ(a.begin, 0u);
  EXPECT_EQ(b.begin, a.end);
  EXPECT_EQ(empty.begin, b.end);
  EXPECT_EQ(empty.end, empty.begin);
  EXPECT_EQ(c.begin, empty.end);
  EXPECT_EQ(s.begin, c.end);
  EXPECT_EQ(file.size(), h.data_offset + s.end);
  auto at = [&](const TensorInfo& t) { return file.data() + h.data_offset + t.begin; };
  EXPECT_EQ(std::memcmp(at(a), bf.data(), 12), 0);
  EXPECT_EQ(std::memcmp(at(b), hf.data(), 8), 0);
  EXPECT_EQ(std::memcmp(at(c), f32.data(), 12), 0);
  float scalar;
  std::memcpy(&scalar, at(s), 4);
  EXPECT_EQ(scalar, 7.0f);
}

TEST(Safetensors, StreamingWriterInPieces) {
  const auto dir = test::scratch_dir();
  std::vector<uint8_t> data(40);
  for (size_t i = 0; i < data.size(); ++i) data[i] = uint8_t(i);
  {
    SafetensorsWriter w(dir / "s.safetensors", {{"x", DType::F32, {2, 3}}, {"z", DType::I8, {0}}, {"y", DType::U8, {16}}});
    w.write(std::span(data).subspan(0, 5));
    w.write(std::span(data).subspan(5, 30));
    w.write(std::span(data).subspan(35, 5));
    w.finish();
  }
  const auto file = test::read_bytes(dir / "s.safetensors");
  const auto h = parse_safetensors_header(file, "s");
  ASSERT_EQ(h.tensors.size(), 3u);
  EXPECT_TRUE(h.metadata.empty());
  EXPECT_EQ(std::vector<uint8_t>(file.begin() + long(h.data_offset), file.end()), data);

  SafetensorsWriter short_writer(dir / "t.safetensors", {{"x", DType::F32, {2}}, {"y", DType::F32, {1}}});
  short_writer.write(std::span(data).subspan(0, 8));
  EXPECT_ERROR_HAS(short_writer.finish(), "tensor 'y' was not written in full");
  SafetensorsWriter long_writer(dir / "u.safetensors", {{"x", DType::F32, {1}}});
  EXPECT_ERROR_HAS(long_writer.write(std::span(data).subspan(0, 5)), "more bytes than the declared tensors hold");
  EXPECT_ERROR_HAS(write_safetensors(dir / "v.safetensors", {{TensorSpec{"w", DType::BF16, {3}}, std::span(data).subspan(0, 4)}}),
                   "tensor 'w' has 4 bytes, its shape needs 6");
  EXPECT_ERROR_HAS(write_safetensors(dir / "no" / "such" / "dir.safetensors", {}), "cannot create");
}

TEST(Safetensors, EmptyHeaderObject) {
  const auto h = parse(make_file("{}"));
  EXPECT_EQ(h.data_offset, 10u);
  EXPECT_TRUE(h.tensors.empty());
  // Whitespace padding after the JSON (the writer's alignment) is fine.
  EXPECT_EQ(parse(make_file("{}      ")).data_offset, 16u);
}

TEST(Safetensors, TooShortForALength) {
  EXPECT_ERROR_HAS(parse({}), "w.st: truncated safetensors file (0 bytes, no header length)");
  EXPECT_ERROR_HAS(parse({1, 0, 0, 0, 0, 0, 0}), "truncated safetensors file (7 bytes");
}

TEST(Safetensors, HeaderLengthLies) {
  EXPECT_ERROR_HAS(parse(make_file("{}", 0, uint64_t(1) << 63)),
                   "w.st: safetensors header length 9223372036854775808 is implausibly large");
  EXPECT_ERROR_HAS(parse(make_file("{}", 0, UINT64_MAX - 1)), "implausibly large");
  EXPECT_ERROR_HAS(parse(make_file("{}", 0, 3)), "safetensors header length 3 exceeds the file (10 bytes): truncated file?");
  EXPECT_ERROR_HAS(parse(make_file("", 0, 50)), "header length 50 exceeds the file (8 bytes)");
  // A length shorter than the JSON cuts it.
  EXPECT_ERROR_HAS(parse(make_file("{\"a\": 1}", 0, 4)), "w.st: safetensors header is not valid JSON");
}

TEST(Safetensors, HeaderNotJsonOrNotObject) {
  EXPECT_ERROR_HAS(parse(make_file("")), "safetensors header is not valid JSON");
  EXPECT_ERROR_HAS(parse(make_file("not json")), "safetensors header is not valid JSON");
  EXPECT_ERROR_HAS(parse(make_file(std::string("{\"a\0\": 1}", 9))), "not valid JSON");
  EXPECT_ERROR_HAS(parse(make_file("{\"x\": \"\xff\"}")), "not valid JSON");  // not UTF-8
  EXPECT_ERROR_HAS(parse(make_file("[]")), "w.st: safetensors header must be a JSON object");
  EXPECT_ERROR_HAS(parse(make_file("42")), "safetensors header must be a JSON object");
  EXPECT_ERROR_HAS(parse(make_file("null")), "must be a JSON object");
}

TEST(Safetensors, EntryNotAnObject) {
  EXPECT_ERROR_HAS(parse_json({{"w", 5}}, 0), "w.st: tensor 'w': header entry must be an object");
  EXPECT_ERROR_HAS(parse_json({{"w", json::array({"F32"})}}, 0), "tensor 'w': header entry must be an object");
  EXPECT_ERROR_HAS(parse_json({{"__metadata__", "x"}}, 0), "__metadata__ must be an object of strings");
  EXPECT_ERROR_HAS(parse_json({{"__metadata__", {{"k", 1}}}}, 0), "__metadata__ value for 'k' must be a string");
}

TEST(Safetensors, BadDType) {
  json e = entry("F32", {2}, 0, 8);
  e.erase("dtype");
  EXPECT_ERROR_HAS(parse_json({{"w", e}}, 8), "tensor 'w': missing or non-string 'dtype'");
  e["dtype"] = 4;
  EXPECT_ERROR_HAS(parse_json({{"w", e}}, 8), "tensor 'w': missing or non-string 'dtype'");
  EXPECT_ERROR_HAS(parse_json({{"w", entry("F128", {2}, 0, 8)}}, 8), "tensor 'w': unknown dtype \"F128\"");
  EXPECT_ERROR_HAS(parse_json({{"w", entry("f32", {2}, 0, 8)}}, 8), "unknown dtype \"f32\"");
}

TEST(Safetensors, BadShape) {
  json e = entry("F32", {2}, 0, 8);
  e.erase("shape");
  EXPECT_ERROR_HAS(parse_json({{"w", e}}, 8), "tensor 'w': missing or non-array 'shape'");
  e["shape"] = 2;
  EXPECT_ERROR_HAS(parse_json({{"w", e}}, 8), "missing or non-array 'shape'");
  EXPECT_ERROR_HAS(parse_json({{"w", entry("F32", {-2}, 0, 8)}}, 8),
                   "tensor 'w': shape entries must be non-negative integers, got [-2]");
  EXPECT_ERROR_HAS(parse_json({{"w", entry("F32", {2.0}, 0, 8)}}, 8), "shape entries must be non-negative integers, got [2.0]");
  EXPECT_ERROR_HAS(parse_json({{"w", entry("F32", {"2"}, 0, 8)}}, 8), "non-negative integers, got [\"2\"]");
  EXPECT_ERROR_HAS(parse_json({{"w", entry("F32", json::array({json::array({2})}), 0, 8)}}, 8), "non-negative integers, got [[2]]");
  EXPECT_ERROR_HAS(parse_json({{"w", entry("F32", {1, 1, 1, 1, 1, 1, 1, 1, 1}, 0, 4)}}, 4),
                   "tensor 'w': 9 dimensions is too many");
}

TEST(Safetensors, ShapeProductOverflow) {
  // 2^32 * 2^32 wraps to 0 in 64 bits: the byte count would match an empty range.
  EXPECT_ERROR_HAS(parse_json({{"w", entry("F32", {uint64_t(1) << 32, uint64_t(1) << 32}, 0, 0)}}, 0),
                   "tensor 'w': shape [4294967296, 4294967296] is too large");
  EXPECT_ERROR_HAS(parse_json({{"w", entry("U8", {UINT64_MAX}, 0, 0)}}, 0), "tensor 'w': shape [18446744073709551615] is too large");
  EXPECT_ERROR_HAS(parse_json({{"w", entry("U8", {uint64_t(1) << 48}, 0, 0)}}, 0), "is too large");
  // A zero dimension makes any other dimension harmless.
  EXPECT_EQ(parse_json({{"w", entry("U8", {0, uint64_t(1) << 47}, 0, 0)}}, 0).tensors.at(0).element_count(), 0);
}

TEST(Safetensors, BadOffsets) {
  json e = entry("F32", {2}, 0, 8);
  e.erase("data_offsets");
  EXPECT_ERROR_HAS(parse_json({{"w", e}}, 8), "tensor 'w': 'data_offsets' must be two non-negative integers");
  for (json bad : {json(8), json::array({0}), json::array({0, 8, 16}), json::array({-8, 0}), json::array({0, 8.0}),
                   json::array({"0", "8"})}) {
    e["data_offsets"] = bad;
    EXPECT_ERROR_HAS(parse_json({{"w", e}}, 8), "tensor 'w': 'data_offsets' must be two non-negative integers");
  }
  EXPECT_ERROR_HAS(parse_json({{"w", entry("F32", {2}, 8, 0)}}, 8), "tensor 'w': data_offsets [8, 0] are reversed");
  EXPECT_ERROR_HAS(parse_json({{"w", entry("F32", {2}, 0, 8)}}, 7),
                   "tensor 'w': data_offsets [0, 8] run past the data section (7 bytes): truncated file?");
  EXPECT_ERROR_HAS(parse_json({{"w", entry("F32", {0}, 9, 9)}}, 8), "data_offsets [9, 9] run past the data section");
  EXPECT_ERROR_HAS(parse_json({{"w", entry("U8", {1}, UINT64_MAX - 1, UINT64_MAX)}}, 8), "run past the data section");
}

TEST(Safetensors, ByteSizeMustMatchShape) {
  EXPECT_ERROR_HAS(parse_json({{"w", entry("BF16", {2, 3}, 0, 16)}}, 16),
                   "tensor 'w': 16 bytes stored but shape [2, 3] of BF16 needs 12");
  EXPECT_ERROR_HAS(parse_json({{"w", entry("F32", json::array(), 0, 0)}}, 8), "0 bytes stored but shape [] of F32 needs 4");
  EXPECT_ERROR_HAS(parse_json({{"w", entry("I64", {0}, 0, 8)}}, 8), "8 bytes stored but shape [0] of I64 needs 0");
}

TEST(Safetensors, OverlappingTensors) {
  EXPECT_ERROR_HAS(parse_json({{"a", entry("F32", {2}, 0, 8)}, {"b", entry("F32", {2}, 4, 12)}}, 16),
                   "w.st: tensors 'a' and 'b' overlap in the data section");
  // Same range twice, and one range inside another (the overlap is not with the adjacent one).
  EXPECT_ERROR_HAS(parse_json({{"a", entry("U8", {8}, 0, 8)}, {"b", entry("U8", {8}, 0, 8)}}, 8), "overlap");
  EXPECT_ERROR_HAS(parse_json({{"big", entry("U8", {16}, 0, 16)}, {"in", entry("U8", {4}, 4, 8)},
                               {"z", entry("U8", {4}, 12, 16)}},
                              16),
                   "tensors 'big' and 'in' overlap");
  // Touching ranges and empty tensors anywhere are fine.
  const auto h = parse_json({{"a", entry("U8", {4}, 0, 4)}, {"b", entry("U8", {4}, 4, 8)}, {"e", entry("U8", {0}, 2, 2)}}, 8);
  EXPECT_EQ(h.tensors.size(), 3u);
}

// Regressions for hostile headers: nothing recurses per nesting level or copies huge values into the
// message (both used to happen through json::dump()).
TEST(Safetensors, HostileHeadersGiveShortMessages) {
  const int depth = 1'000'000;
  const std::string nested = std::string(depth, '[') + std::string(depth, ']');
  std::string header = "{\"w\": {\"dtype\": \"F32\", \"shape\": [1, " + nested + "], \"data_offsets\": [0, 4]}}";
  const std::string msg = test::error_of([&] { parse(make_file(header, 4)); });
  EXPECT_NE(msg.find("tensor 'w': shape entries must be non-negative integers, got [1, [[[...]]]]"), std::string::npos)
      << msg.substr(0, 300);
  const std::string huge(5'000'000, 'Q');
  const std::string msg2 = test::error_of([&] { parse_json({{"w", entry(huge.c_str(), {1}, 0, 4)}}, 4); });
  EXPECT_NE(msg2.find("tensor 'w': unknown dtype \"QQQQ"), std::string::npos) << msg2.substr(0, 300);
  EXPECT_LT(msg2.size(), 300u);
}

}  // namespace
}  // namespace megaqwen
