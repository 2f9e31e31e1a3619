#include "megaqwen/tokenizer/tokenizer.h"

#include <algorithm>
#include <unordered_map>

#include "megaqwen/tokenizer/added_tokens.h"
#include "megaqwen/tokenizer/bpe.h"
#include "megaqwen/tokenizer/byte_level.h"
#include "megaqwen/tokenizer/normalizer.h"
#include "megaqwen/tokenizer/pretokenizer.h"
#include "megaqwen/tokenizer/tokenizer_files.h"
#include "megaqwen/tokenizer/utf8.h"
#include "megaqwen/util/error.h"

namespace megaqwen {
namespace {

struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using SpellingMap = std::unordered_map<std::string, std::int32_t, StringHash, std::equal_to<>>;

enum class Kind : std::uint8_t { kNone, kVocab, kAdded, kSpecial };

}  // namespace

struct Tokenizer::Impl {
  SpellingMap ids;                      // vocab spellings and added-token contents
  std::string all_bytes;                // token bytes, back to back
  std::vector<std::uint32_t> offsets;   // token id's bytes: all_bytes[offsets[id], offsets[id+1])
  std::vector<Kind> kinds;
  std::unique_ptr<BpeModel> bpe;
  std::unique_ptr<RegexSplitter> splitter;
  AddedTokenMatcher raw_added;          // matched in the raw text
  AddedTokenMatcher normalized_added;   // matched in each NFC segment
  bool nfc = true;

  explicit Impl(TokenizerSpec spec);
  void encode_segment(std::string_view segment, std::vector<std::int32_t>& out,
                      std::vector<std::string_view>& pieces) const;
  void check_id(std::int32_t id) const;
};

Tokenizer::Impl::Impl(TokenizerSpec spec) : nfc(spec.nfc) {
  const std::string source = spec.source.string();
  std::int32_t max_id = -1;
  for (const auto& [spelling, id] : spec.vocab) {
    if (id < 0) fail("{}: token \"{}\" has negative id {}", source, spelling, id);
    max_id = std::max(max_id, id);
  }
  for (const AddedToken& t : spec.added_tokens) {
    if (t.id < 0) fail("{}: added token \"{}\" has negative id {}", source, t.content, t.id);
    max_id = std::max(max_id, t.id);
  }

  // Token bytes by id: vocab first, then added tokens (which replace a vocab entry of the same id).
  std::vector<std::string> bytes(static_cast<std::size_t>(max_id) + 1);
  kinds.assign(bytes.size(), Kind::kNone);
  ids.reserve(spec.vocab.size() + spec.added_tokens.size());
  for (auto& [spelling, id] : spec.vocab) {
    bytes[id] = byte_level::unspell(spelling);
    kinds[id] = Kind::kVocab;
    ids.emplace(std::move(spelling), id);
  }

  std::array<std::int32_t, 256> byte_ids;
  for (int b = 0; b < 256; ++b) {
    std::string spelling;
    utf8::append_codepoint(spelling, byte_level::char_of_byte(static_cast<unsigned char>(b)));
    const auto it = ids.find(spelling);
    byte_ids[b] = it == ids.end() ? -1 : it->second;
  }
  std::vector<MergeRule> rules;
  rules.reserve(spec.merges.size());
  for (std::size_t rank = 0; rank < spec.merges.size(); ++rank) {
    const auto& [left, right] = spec.merges[rank];
    const auto l = ids.find(left), r = ids.find(right), m = ids.find(left + right);
    if (l == ids.end() || r == ids.end() || m == ids.end()) {
      fail("{}: merge {} (\"{} {}\") uses a token missing from the vocabulary", source, rank, left, right);
    }
    rules.push_back(MergeRule{l->second, r->second, m->second});
  }
  bpe = std::make_unique<BpeModel>(byte_ids, rules);
  splitter = std::make_unique<RegexSplitter>(spec.pattern, spec.pattern_is_literal);

  std::vector<AddedToken> raw, normalized;
  std::vector<std::string> raw_patterns, normalized_patterns;
  for (AddedToken& t : spec.added_tokens) {
    bytes[t.id] = byte_level::unspell(t.content);
    kinds[t.id] = t.special ? Kind::kSpecial : Kind::kAdded;
    ids[t.content] = t.id;
    if (t.normalized && nfc) {
      std::string pattern;
      append_nfc(t.content, pattern);
      normalized_patterns.push_back(std::move(pattern));
      normalized.push_back(std::move(t));
    } else {
      raw_patterns.push_back(t.content);
      raw.push_back(std::move(t));
    }
  }
  raw_added = AddedTokenMatcher(std::move(raw), std::move(raw_patterns));
  normalized_added = AddedTokenMatcher(std::move(normalized), std::move(normalized_patterns));

  offsets.reserve(bytes.size() + 1);
  for (const std::string& b : bytes) {
    offsets.push_back(static_cast<std::uint32_t>(all_bytes.size()));
    all_bytes += b;
  }
  offsets.push_back(static_cast<std::uint32_t>(all_bytes.size()));
}

void Tokenizer::Impl::encode_segment(std::string_view segment, std::vector<std::int32_t>& out,
                                     std::vector<std::string_view>& pieces) const {
  pieces.clear();
  splitter->split(segment, pieces);
  for (std::string_view piece : pieces) bpe->encode(piece, out);
}

void Tokenizer::Impl::check_id(std::int32_t id) const {
  if (id < 0 || static_cast<std::size_t>(id) >= kinds.size()) {
    fail("token id {} is out of range (vocabulary size {})", id, kinds.size());
  }
  if (kinds[id] == Kind::kNone) fail("token id {} has no token in the vocabulary", id);
}

Tokenizer Tokenizer::load(const std::filesystem::path& model_dir) {
  if (!std::filesystem::is_directory(model_dir)) fail("{}: not a model folder", model_dir.string());
  const auto json_file = model_dir / "tokenizer.json";
  TokenizerSpec spec = std::filesystem::exists(json_file) ? read_tokenizer_json(json_file)
                                                          : read_vocab_and_merges(model_dir);
  return Tokenizer(std::make_shared<const Impl>(std::move(spec)));
}

std::vector<std::int32_t> Tokenizer::encode(std::string_view input, SpecialTokens special) const {
  const bool special_as_text = special == SpecialTokens::kAsText;
  const Impl& impl = *impl_;
  std::string repaired;
  if (!utf8::is_valid(input)) {
    utf8::append_lossy(repaired, input);
    input = repaired;
  }
  std::vector<std::int32_t> out;
  out.reserve(input.size() / 3 + 4);
  std::vector<Segment> segments, sub_segments;
  std::vector<std::string_view> pieces;
  std::string normalized;
  impl.raw_added.split(input, segments, special_as_text);
  for (const Segment& segment : segments) {
    if (segment.id >= 0) {
      out.push_back(segment.id);
      continue;
    }
    std::string_view text = segment.text;
    if (impl.nfc && !is_trivially_nfc(text)) {
      normalized.clear();
      append_nfc(text, normalized);
      text = normalized;
    }
    if (impl.normalized_added.empty()) {
      impl.encode_segment(text, out, pieces);
      continue;
    }
    sub_segments.clear();
    impl.normalized_added.split(text, sub_segments, special_as_text);
    for (const Segment& sub : sub_segments) {
      if (sub.id >= 0) {
        out.push_back(sub.id);
      } else {
        impl.encode_segment(sub.text, out, pieces);
      }
    }
  }
  return out;
}

std::string Tokenizer::decode(std::span<const std::int32_t> ids) const {
  std::string bytes;
  for (std::int32_t id : ids) bytes += token_bytes(id);
  if (utf8::is_valid(bytes)) return bytes;
  std::string text;
  utf8::append_lossy(text, bytes);
  return text;
}

std::string_view Tokenizer::token_bytes(std::int32_t id) const {
  impl_->check_id(id);
  const auto begin = impl_->offsets[id], end = impl_->offsets[id + 1];
  return std::string_view(impl_->all_bytes).substr(begin, end - begin);
}

std::string_view Tokenizer::sampled_bytes(std::int32_t id) const noexcept {
  try {
    return token_bytes(id);
  } catch (const Error&) {
    return {};
  }
}

std::string Tokenizer::token_spelling(std::int32_t id) const {
  const std::string_view bytes = token_bytes(id);
  return is_added(id) ? std::string(bytes) : byte_level::spell(bytes);
}

std::optional<std::int32_t> Tokenizer::token_id(std::string_view token) const {
  const auto it = impl_->ids.find(token);
  if (it == impl_->ids.end()) return std::nullopt;
  return it->second;
}

std::int32_t Tokenizer::vocab_size() const { return static_cast<std::int32_t>(impl_->kinds.size()); }

bool Tokenizer::is_special(std::int32_t id) const {
  return id >= 0 && static_cast<std::size_t>(id) < impl_->kinds.size() && impl_->kinds[id] == Kind::kSpecial;
}

bool Tokenizer::is_added(std::int32_t id) const {
  return id >= 0 && static_cast<std::size_t>(id) < impl_->kinds.size() &&
         (impl_->kinds[id] == Kind::kSpecial || impl_->kinds[id] == Kind::kAdded);
}

const std::string& Tokenizer::pretokenizer_pattern() const { return impl_->splitter->pattern(); }

}  // namespace megaqwen
