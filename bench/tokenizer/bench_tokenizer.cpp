// Encode throughput of megaqwen::Tokenizer on one corpus file, single thread.
//
//   bench_tokenizer --model DIR --corpus FILE [--repeat N]
//
// Reports, like tools/bench_tokenizers.py for HF tokenizers and tiktoken: the corpus encoded as one
// string (cold: the first pass fills the BPE cache; warm: best of the next N passes), and encoded
// line by line (the shape of chat traffic: many short calls).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "megaqwen/tokenizer/tokenizer.h"
#include "megaqwen/util/error.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

int run(int argc, char** argv) {
  std::string model, corpus_file;
  int repeat = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--model")) model = argv[i + 1];
    else if (!std::strcmp(argv[i], "--corpus")) corpus_file = argv[i + 1];
    else if (!std::strcmp(argv[i], "--repeat")) repeat = std::max(1, std::atoi(argv[i + 1]));
  }
  if (model.empty() || corpus_file.empty()) {
    std::fprintf(stderr, "usage: bench_tokenizer --model DIR --corpus FILE [--repeat N]\n");
    return 2;
  }
  std::ifstream in(corpus_file, std::ios::binary);
  if (!in) megaqwen::fail("{}: cannot open", corpus_file);
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string corpus = buffer.str();
  const double mb = static_cast<double>(corpus.size()) / 1e6;

  auto start = Clock::now();
  const megaqwen::Tokenizer tokenizer = megaqwen::Tokenizer::load(model);
  std::printf("load            %.3f s\n", seconds_since(start));

  start = Clock::now();
  const std::size_t tokens = tokenizer.encode(corpus).size();
  const double cold = seconds_since(start);
  double warm = 1e30;
  for (int r = 0; r < repeat; ++r) {
    start = Clock::now();
    if (tokenizer.encode(corpus).size() != tokens) megaqwen::fail("encode is not deterministic");
    warm = std::min(warm, seconds_since(start));
  }
  std::printf("corpus          %.2f MB, %zu tokens (%.2f bytes/token)\n", mb, tokens,
              static_cast<double>(corpus.size()) / static_cast<double>(tokens));
  std::printf("one string      cold %.1f MB/s   warm %.1f MB/s (%.2f M tokens/s)\n", mb / cold, mb / warm,
              static_cast<double>(tokens) / warm / 1e6);

  std::vector<std::string> lines;
  std::istringstream stream(corpus);
  for (std::string line; std::getline(stream, line);) lines.push_back(line + "\n");
  double per_line = 1e30;
  for (int r = 0; r < repeat; ++r) {
    start = Clock::now();
    std::size_t n = 0;
    for (const std::string& line : lines) n += tokenizer.encode(line).size();
    per_line = std::min(per_line, seconds_since(start));
    if (n == 0) megaqwen::fail("no tokens");
  }
  std::printf("line by line    %.1f MB/s (%zu calls)\n", mb / per_line, lines.size());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const megaqwen::Error& e) {
    std::fprintf(stderr, "bench_tokenizer: error: %s\n", e.what());
    return 1;
  }
}
