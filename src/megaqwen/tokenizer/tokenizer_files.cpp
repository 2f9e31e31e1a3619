#include "megaqwen/tokenizer/tokenizer_files.h"

#include <nlohmann/json.hpp>
#include <sstream>

#include "megaqwen/util/error.h"
#include "megaqwen/util/text_file.h"

namespace megaqwen {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

json parse_json(const fs::path& file) {
  try {
    return json::parse(read_text_file(file));
  } catch (const json::exception& e) {
    fail("{}: not valid JSON: {}", file.string(), e.what());
  }
}

// A field that must hold `expected`; names the file and field when it does not.
template <typename T>
T get(const json& object, const char* key, const fs::path& file, const char* where) {
  const auto it = object.find(key);
  if (it == object.end()) fail("{}: {} has no field \"{}\"", file.string(), where, key);
  try {
    return it->get<T>();
  } catch (const json::exception&) {
    fail("{}: {}.{} has the wrong type ({})", file.string(), where, key, it->type_name());
  }
}

bool flag(const json& object, const char* key, bool fallback) {
  const auto it = object.find(key);
  return it == object.end() || it->is_null() ? fallback : it->get<bool>();
}

bool empty_or_null(const json& object, const char* key) {
  const auto it = object.find(key);
  return it == object.end() || it->is_null() || (it->is_string() && it->get<std::string>().empty());
}

AddedToken parse_added_token(const json& entry, std::int32_t id, const fs::path& file) {
  AddedToken token;
  token.id = id;
  token.content = get<std::string>(entry, "content", file, "an added token");
  token.special = flag(entry, "special", false);
  token.normalized = flag(entry, "normalized", !token.special);  // HF's default
  token.lstrip = flag(entry, "lstrip", false);
  token.rstrip = flag(entry, "rstrip", false);
  token.single_word = flag(entry, "single_word", false);
  return token;
}

void read_normalizer(const json& root, TokenizerSpec& spec, const fs::path& file) {
  const auto it = root.find("normalizer");
  if (it == root.end() || it->is_null()) {
    spec.nfc = false;
    return;
  }
  const std::string type = get<std::string>(*it, "type", file, "normalizer");
  if (type != "NFC") fail("{}: normalizer \"{}\" is not supported (only NFC)", file.string(), type);
  spec.nfc = true;
}

// Accepts the Qwen shape: Sequence[Split(pattern, Isolated, invert=false), ByteLevel(use_regex=false)].
void read_pre_tokenizer(const json& root, TokenizerSpec& spec, const fs::path& file) {
  const json& pre = root.at("pre_tokenizer");
  const auto unsupported = [&](const std::string& why) {
    fail("{}: pre_tokenizer not supported: {} (expected Sequence of Split \"Isolated\" and ByteLevel "
         "with use_regex false)", file.string(), why);
  };
  if (pre.is_null() || pre.value("type", "") != "Sequence") unsupported("not a Sequence");
  const json& steps = get<json>(pre, "pretokenizers", file, "pre_tokenizer");
  if (!steps.is_array() || steps.size() != 2) unsupported("not two steps");
  const json& split = steps[0];
  const json& byte_level = steps[1];
  if (split.value("type", "") != "Split") unsupported("first step is not Split");
  if (split.value("behavior", "") != "Isolated") unsupported("Split behavior is not Isolated");
  if (flag(split, "invert", false)) unsupported("Split has invert true");
  const json& pattern = get<json>(split, "pattern", file, "pre_tokenizer Split");
  if (pattern.contains("Regex")) {
    spec.pattern = pattern["Regex"].get<std::string>();
  } else if (pattern.contains("String")) {
    spec.pattern = pattern["String"].get<std::string>();
    spec.pattern_is_literal = true;
  } else {
    unsupported("Split pattern is neither Regex nor String");
  }
  if (byte_level.value("type", "") != "ByteLevel") unsupported("second step is not ByteLevel");
  if (flag(byte_level, "use_regex", true)) unsupported("ByteLevel has use_regex true");
  if (flag(byte_level, "add_prefix_space", false)) unsupported("ByteLevel has add_prefix_space true");
}

void read_model(const json& root, TokenizerSpec& spec, const fs::path& file) {
  const json& model = root.at("model");
  if (model.value("type", "") != "BPE") fail("{}: model.type is not BPE", file.string());
  if (!empty_or_null(model, "dropout")) fail("{}: BPE dropout is not supported", file.string());
  if (flag(model, "byte_fallback", false)) fail("{}: BPE byte_fallback is not supported", file.string());
  if (flag(model, "ignore_merges", false)) fail("{}: BPE ignore_merges is not supported", file.string());
  if (!empty_or_null(model, "continuing_subword_prefix") || !empty_or_null(model, "end_of_word_suffix")) {
    fail("{}: BPE subword prefixes/suffixes are not supported", file.string());
  }
  const json& vocab = get<json>(model, "vocab", file, "model");
  spec.vocab.reserve(vocab.size());
  for (const auto& [spelling, id] : vocab.items()) spec.vocab.emplace_back(spelling, id.get<std::int32_t>());
  const json& merges = get<json>(model, "merges", file, "model");
  spec.merges.reserve(merges.size());
  for (std::size_t k = 0; k < merges.size(); ++k) {
    const json& m = merges[k];
    // Newer files store a pair ["a", "b"]; older ones the string "a b".
    if (m.is_array() && m.size() == 2) {
      spec.merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const auto space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
        fail("{}: model.merges[{}] is not two tokens: \"{}\"", file.string(), k, s);
      }
      spec.merges.emplace_back(s.substr(0, space), s.substr(space + 1));
    } else {
      fail("{}: model.merges[{}] is neither a pair nor a string", file.string(), k);
    }
  }
}

}  // namespace

TokenizerSpec read_tokenizer_json(const fs::path& file) {
  const json root = parse_json(file);
  TokenizerSpec spec;
  spec.source = file;
  try {
    read_normalizer(root, spec, file);
    read_pre_tokenizer(root, spec, file);
    read_model(root, spec, file);
    if (const auto it = root.find("decoder"); it != root.end() && !it->is_null() &&
                                             it->value("type", "") != "ByteLevel") {
      fail("{}: decoder \"{}\" is not supported (only ByteLevel)", file.string(), it->value("type", ""));
    }
    for (const json& entry : get<json>(root, "added_tokens", file, "the root")) {
      spec.added_tokens.push_back(
          parse_added_token(entry, get<std::int32_t>(entry, "id", file, "an added token"), file));
    }
  } catch (const json::exception& e) {
    fail("{}: unexpected structure: {}", file.string(), e.what());
  }
  return spec;
}

TokenizerSpec read_vocab_and_merges(const fs::path& model_dir) {
  TokenizerSpec spec;
  const fs::path vocab_file = model_dir / "vocab.json";
  const fs::path merges_file = model_dir / "merges.txt";
  const fs::path config_file = model_dir / "tokenizer_config.json";
  spec.source = vocab_file;
  const json vocab = parse_json(vocab_file);
  if (!vocab.is_object()) fail("{}: not an object of token -> id", vocab_file.string());
  spec.vocab.reserve(vocab.size());
  for (const auto& [spelling, id] : vocab.items()) {
    if (!id.is_number_integer()) fail("{}: the id of \"{}\" is not an integer", vocab_file.string(), spelling);
    spec.vocab.emplace_back(spelling, id.get<std::int32_t>());
  }

  std::istringstream merges(read_text_file(merges_file));
  std::string line;
  for (std::size_t line_number = 1; std::getline(merges, line); ++line_number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    // Qwen3's file opens with "#version: 0.2"; Qwen3.5's has no such line.
    if (line.empty() || (line_number == 1 && line.starts_with("#version"))) continue;
    const auto space = line.find(' ');
    if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos) {
      fail("{}:{}: expected two tokens separated by one space", merges_file.string(), line_number);
    }
    spec.merges.emplace_back(line.substr(0, space), line.substr(space + 1));
  }

  spec.pattern = kQwen2Pattern;
  spec.nfc = true;  // Qwen2Tokenizer always applies NFC
  if (fs::exists(config_file)) {
    const json config = parse_json(config_file);
    if (const auto it = config.find("pretokenize_regex"); it != config.end() && it->is_string()) {
      spec.pattern = it->get<std::string>();
    }
    if (const auto it = config.find("added_tokens_decoder"); it != config.end()) {
      for (const auto& [id_text, entry] : it->items()) {
        std::int32_t id = 0;
        try {
          id = static_cast<std::int32_t>(std::stol(id_text));
        } catch (const std::exception&) {
          fail("{}: added_tokens_decoder key \"{}\" is not an id", config_file.string(), id_text);
        }
        spec.added_tokens.push_back(parse_added_token(entry, id, config_file));
      }
    }
  }
  return spec;
}

}  // namespace megaqwen
