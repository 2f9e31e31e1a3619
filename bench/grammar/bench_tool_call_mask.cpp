// What a forced Qwen3.5 tool call costs per token (Google Benchmark): XmlToolCallConstraint's token
// mask over the Qwen3.5 vocabulary (248,044 ordinary tokens) in the states a call passes through,
// computed afresh (a state seen for the first time), and the name among N tools.
//
//   MEGAQWEN_TOKENIZER_DIR=../shared/models/qwen3.5-0.8b build/bench/grammar/bench_tool_call_mask
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "megaqwen/grammar/xml_tool_call_constraint.h"
#include "megaqwen/tokenizer/tokenizer.h"

namespace {

using namespace megaqwen;
using ojson = nlohmann::ordered_json;

const Tokenizer& tokenizer() {
  static const Tokenizer t = [] {
    const char* dir = std::getenv("MEGAQWEN_TOKENIZER_DIR");
    return Tokenizer::load(dir ? dir : "../shared/models/qwen3.5-0.8b");
  }();
  return t;
}

std::shared_ptr<const TokenTrie> trie() {
  static const std::shared_ptr<const TokenTrie> t = TokenTrie::of(tokenizer());
  return t;
}

ojson weather_tool(const std::string& name) {
  return ojson::parse(R"({"type": "function", "function": {"name": ")" + name + R"(", "parameters": {
    "type": "object", "required": ["city"],
    "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                   "days": {"type": "integer"}}}}})");
}

// The call up to a point (after the server's "<tool_call>\n<function=").
const char* kPrefixes[] = {"", "get_weather>\n", "get_weather>\n<parameter=city>\nSan Fr",
                           "get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n1",
                           "get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n"};
const char* kNames[] = {"name", "first key", "in a text value", "in a JSON number", "closing"};

void BM_ToolCallMaskFresh(benchmark::State& state) {
  const int i = int(state.range(0));
  state.SetLabel(kNames[i]);
  auto grammar = std::make_shared<const XmlToolCallGrammar>(XmlToolCallGrammar::from_tools({weather_tool("get_weather")}, ""));
  const std::vector<int32_t> prefix = tokenizer().encode(kPrefixes[i]);
  for (auto _ : state) {
    state.PauseTiming();
    XmlToolCallConstraint c(grammar, trie(), {248046});  // a new constraint: an empty cache
    for (int32_t id : prefix) c.accept(id);
    state.ResumeTiming();
    benchmark::DoNotOptimize(c.allowed().data());
  }
}
BENCHMARK(BM_ToolCallMaskFresh)->DenseRange(0, 4)->Unit(benchmark::kMillisecond);

// The name among N tools: the first mask of every forced call without a named function.
void BM_ToolCallMaskName(benchmark::State& state) {
  std::vector<ojson> tools;
  for (int i = 0; i < state.range(0); ++i) tools.push_back(weather_tool("tool_" + std::to_string(i)));
  auto grammar = std::make_shared<const XmlToolCallGrammar>(XmlToolCallGrammar::from_tools(tools, ""));
  for (auto _ : state) {
    XmlToolCallConstraint c(grammar, trie(), {248046});
    benchmark::DoNotOptimize(c.allowed().data());
  }
}
BENCHMARK(BM_ToolCallMaskName)->Arg(1)->Arg(16)->Arg(256)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
