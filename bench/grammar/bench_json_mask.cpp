// What structured output costs per token (Google Benchmark): JsonConstraint's token mask over the
// Qwen3 vocabulary (151,643 ordinary tokens) in the states a reply passes through, computed afresh
// (a state seen for the first time) and from the cache; and building the vocabulary's trie.
//
//   MEGAQWEN_TOKENIZER_DIR=../shared/models/qwen3-0.6b build/bench/grammar/bench_json_mask
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "megaqwen/grammar/json_constraint.h"
#include "megaqwen/tokenizer/tokenizer.h"

namespace {

using namespace megaqwen;

const Tokenizer& tokenizer() {
  static const Tokenizer t = [] {
    const char* dir = std::getenv("MEGAQWEN_TOKENIZER_DIR");
    return Tokenizer::load(dir ? dir : "../shared/models/qwen3-0.6b");
  }();
  return t;
}

std::shared_ptr<const TokenTrie> trie() {
  static const std::shared_ptr<const TokenTrie> t = TokenTrie::of(tokenizer());
  return t;
}

const char* kSchema = R"({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
  "tags": {"type": "array", "items": {"type": "string"}}}, "required": ["name", "age", "tags"]})";

// The reply up to a point: {"name": "Ann Lee", "age": 41, "tags": ["x"]}
const char* kPrefixes[] = {"", "{", "{\"name\": \"Ann", "{\"name\": \"Ann Lee\", \"age\": 4",
                           "{\"name\": \"Ann Lee\", \"age\": 41, \"tags\": [", "{\"name\": \"Ann Lee\", \"age\": 41, \"tags\": [\"x\"]}"};
const char* kNames[] = {"start", "after {", "in a string", "in a number", "array open", "whole"};

std::unique_ptr<JsonConstraint> constraint_at(int i) {
  auto grammar = std::make_shared<const JsonGrammar>(JsonGrammar::from_schema(nlohmann::ordered_json::parse(kSchema)));
  auto c = std::make_unique<JsonConstraint>(grammar, trie(), std::vector<int32_t>{151645, 151643});
  for (int32_t id : tokenizer().encode(kPrefixes[i])) c->accept(id);
  return c;
}

void BM_MaskFresh(benchmark::State& state) {
  const int i = int(state.range(0));
  state.SetLabel(kNames[i]);
  for (auto _ : state) {
    state.PauseTiming();
    auto c = constraint_at(i);  // a new constraint: an empty cache
    state.ResumeTiming();
    benchmark::DoNotOptimize(c->allowed().data());
  }
}
BENCHMARK(BM_MaskFresh)->DenseRange(0, 5)->Unit(benchmark::kMillisecond);

void BM_MaskCachedApplied(benchmark::State& state) {
  auto c = constraint_at(2);
  std::vector<float> logits(151936, 0.0f);
  c->allowed();
  for (auto _ : state) {
    c->mask(logits);
    benchmark::DoNotOptimize(logits.data());
  }
}
BENCHMARK(BM_MaskCachedApplied)->Unit(benchmark::kMicrosecond);

// A forced tool call among N tools (an anyOf of N objects), masked where the name's string opens:
// N threads alive at once.
void BM_MaskToolName(benchmark::State& state) {
  nlohmann::ordered_json alternatives = nlohmann::ordered_json::array();
  for (int i = 0; i < state.range(0); ++i)
    alternatives.push_back({{"type", "object"},
                            {"properties", {{"name", {{"const", "tool_" + std::to_string(i)}}}, {"arguments", {{"type", "object"}}}}},
                            {"required", {"name", "arguments"}},
                            {"additionalProperties", false}});
  auto grammar = std::make_shared<const JsonGrammar>(JsonGrammar::from_schema({{"anyOf", alternatives}}));
  for (auto _ : state) {
    state.PauseTiming();
    JsonConstraint c(grammar, trie(), {151645});
    for (int32_t id : tokenizer().encode("{\"name\": ")) c.accept(id);
    state.ResumeTiming();
    benchmark::DoNotOptimize(c.allowed().data());
  }
}
BENCHMARK(BM_MaskToolName)->Arg(1)->Arg(16)->Arg(256)->Unit(benchmark::kMillisecond);

void BM_TrieBuild(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(TokenTrie::of(tokenizer()));
}
BENCHMARK(BM_TrieBuild)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
