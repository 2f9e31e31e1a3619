// megaqwen tokenize --model DIR: text on stdin -> token ids on one line (space separated).
// megaqwen tokenize --model DIR --decode: whitespace-separated ids on stdin -> text.
// --jsonl: many at once, one per line: a JSON string -> a JSON array of its ids (or, with --decode,
// an array of ids -> the JSON string of its text), for scripts that compare tokenizers in bulk.
// Needs only the tokenizer files of the folder (tokenizer.json, or vocab.json + merges.txt).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "megaqwen/tokenizer/tokenizer.h"
#include "megaqwen/util/error.h"

namespace megaqwen::cli {
namespace {

std::string read_stdin() {
  std::ios::sync_with_stdio(false);
  return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
}

// Whitespace-separated decimal ids; names the offending word on error.
std::vector<std::int32_t> parse_ids(const std::string& text) {
  std::vector<std::int32_t> ids;
  std::size_t i = 0;
  while (true) {
    i = text.find_first_not_of(" \t\r\n", i);
    if (i == std::string::npos) break;
    const std::size_t end = std::min(text.find_first_of(" \t\r\n", i), text.size());
    const std::string word = text.substr(i, end - i);
    std::size_t used = 0;
    long long value = 0;
    try {
      value = std::stoll(word, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != word.size() || value < INT32_MIN || value > INT32_MAX) {
      fail("tokenize --decode: \"{}\" is not a token id", word);
    }
    ids.push_back(static_cast<std::int32_t>(value));
    i = end;
  }
  return ids;
}

// One JSON value per line in, one per line out; a bad line is an error naming its number.
void convert_lines(const Tokenizer& tokenizer, bool decode) {
  std::ios::sync_with_stdio(false);
  std::string line, out;
  for (long number = 1; std::getline(std::cin, line); ++number) {
    nlohmann::json value;
    try {
      value = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      fail("tokenize --jsonl: line {} is not JSON: {}", number, e.what());
    }
    if (decode) {
      std::vector<std::int32_t> ids;
      if (!value.is_array()) fail("tokenize --jsonl --decode: line {} is not an array of token ids", number);
      for (const auto& id : value) {
        if (!id.is_number_integer() || id.get<int64_t>() < INT32_MIN || id.get<int64_t>() > INT32_MAX)
          fail("tokenize --jsonl --decode: line {} holds {}, which is not a token id", number, id.dump());
        ids.push_back(static_cast<std::int32_t>(id.get<int64_t>()));
      }
      out = nlohmann::json(tokenizer.decode(ids)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    } else {
      if (!value.is_string()) fail("tokenize --jsonl: line {} is not a JSON string", number);
      out = nlohmann::json(tokenizer.encode(value.get<std::string>())).dump();
    }
    out += '\n';
    std::fwrite(out.data(), 1, out.size(), stdout);
  }
}

}  // namespace

void add_tokenize_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("tokenize", "Encode stdin to token ids, or decode ids with --decode");
  auto model = std::make_shared<std::string>();
  auto decode = std::make_shared<bool>(false);
  cmd->add_option("-m,--model", *model, "Model folder holding tokenizer.json (or vocab.json + merges.txt)")
      ->required();
  auto jsonl = std::make_shared<bool>(false);
  cmd->add_flag("-d,--decode", *decode, "Read whitespace-separated ids and print their text");
  cmd->add_flag("--jsonl", *jsonl,
                "One JSON string per line -> one JSON array of ids per line (with --decode: arrays -> strings)");
  cmd->callback([model, decode, jsonl] {
    const Tokenizer tokenizer = Tokenizer::load(*model);
    if (*jsonl) return convert_lines(tokenizer, *decode);
    const std::string input = read_stdin();
    if (*decode) {
      const std::string text = tokenizer.decode(parse_ids(input));
      std::fwrite(text.data(), 1, text.size(), stdout);
      return;
    }
    std::string line;
    for (std::int32_t id : tokenizer.encode(input)) {
      if (!line.empty()) line += ' ';
      line += std::to_string(id);
    }
    line += '\n';
    std::fwrite(line.data(), 1, line.size(), stdout);
  });
}

}  // namespace megaqwen::cli
