// What a conversation switch costs the server's prompt cache (Google Benchmark): Engine::save_state
// (the cache rows to fresh host memory) and restore_state (back into the engine's cache) for a
// sequence of 256 .. 4096 tokens, on synthetic Qwen3-0.6B (written to a temporary folder unless
// MEGAQWEN_BENCH_MODEL names one) and the device MEGAQWEN_BENCH_DEVICE picks (cpu by default; cuda
// for the GPU engine). Bytes per second count the state's bytes (bytes()).
//
//   build/bench/engine/bench_engine_state --benchmark_min_time=1
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "megaqwen/engine/create_engine.h"
#include "megaqwen/model/model.h"
#include "megaqwen/model/synth.h"

namespace {

using namespace megaqwen;

constexpr int kContext = 4096;

Engine& engine() {
  static const std::unique_ptr<Engine> e = [] {
    std::string dir;
    if (const char* given = std::getenv("MEGAQWEN_BENCH_MODEL")) {
      dir = given;
    } else {
      dir = (std::filesystem::temp_directory_path() / "megaqwen_bench_engine_state_q06").string();
      if (!std::filesystem::exists(std::filesystem::path(dir) / "config.json"))
        write_synthetic_model({.preset = "qwen3-0.6b", .seed = 0, .dtype = DType::BF16, .out_dir = dir,
                               .tokenizer_dir = {}, .vocab_size = 0, .num_layers = 0, .threads = 0});
    }
    const char* device = std::getenv("MEGAQWEN_BENCH_DEVICE");
    return create_engine(load_model(dir), {.device = device ? device : "cpu", .context = kContext, .quiet = true});
  }();
  return *e;
}

void BM_SaveState(benchmark::State& state) {
  Engine& e = engine();
  e.fill_cache_with_noise(int(state.range(0)));
  uint64_t bytes = 0;
  for (auto _ : state) {
    std::unique_ptr<EngineState> saved = e.save_state();
    bytes = saved->bytes();
    benchmark::DoNotOptimize(saved.get());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(bytes));
  state.SetLabel(e.device_name());
}
BENCHMARK(BM_SaveState)->Arg(256)->Arg(1024)->Arg(4096)->Unit(benchmark::kMillisecond);

void BM_RestoreState(benchmark::State& state) {
  Engine& e = engine();
  e.fill_cache_with_noise(int(state.range(0)));
  const std::unique_ptr<EngineState> saved = e.save_state();
  for (auto _ : state) {
    e.truncate(0);
    e.restore_state(*saved);
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(saved->bytes()));
  state.SetLabel(e.device_name());
}
BENCHMARK(BM_RestoreState)->Arg(256)->Arg(1024)->Arg(4096)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
