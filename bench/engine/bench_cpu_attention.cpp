// The CPU engine's attention at Qwen3-0.6B's shapes (16 query heads, 8 kv heads of 128).
// BM_DecodeAttention: one new token (cpu::causal_attention's split path) over all 28 layers' caches in
// turn, so the cache comes from DRAM as in a real decode step, at several depths. Counter: cache bytes
// read per second (K and V, each row once).
// BM_PrefillAttention: one prefill chunk of the CPU engine (512 new tokens, the blocked path) after a
// cache of earlier positions, one layer. Counter: attention flops per second (q K^T and P V over the
// positions each query sees, 4 * D flops per query head and position).
//
//   build/bench/engine/bench_cpu_attention --benchmark_min_time=1
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "megaqwen/engine/cpu_ops.h"
#include "megaqwen/util/thread_pool.h"

namespace {

using namespace megaqwen;

constexpr int64_t kLayers = 28, kHeads = 16, kKvHeads = 8, kHeadDim = 128;

// Args: positions in the cache (the new token's included).
void BM_DecodeAttention(benchmark::State& state) {
  static ThreadPool pool(0);
  const int64_t positions = state.range(0);
  std::vector<float> k_cache, v_cache;
  const size_t layer = size_t(positions * kKvHeads * kHeadDim);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  k_cache.resize(layer * kLayers);
  v_cache.resize(layer * kLayers);
  for (size_t i = 0; i < k_cache.size(); ++i) k_cache[i] = dist(rng), v_cache[i] = dist(rng);
  std::vector<float> q(size_t(kHeads * kHeadDim)), out(q.size());
  for (float& x : q) x = dist(rng) * 4.0f;
  const float scale = 1.0f / std::sqrt(float(kHeadDim));
  for (auto _ : state) {
    for (int64_t l = 0; l < kLayers; ++l)
      cpu::causal_attention(q.data(), 1, kHeads, kKvHeads, kHeadDim, positions - 1, k_cache.data() + size_t(l) * layer,
                            v_cache.data() + size_t(l) * layer, scale, out.data(), pool);
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["cache_B/s"] = benchmark::Counter(double(state.iterations()) * 2.0 * double(k_cache.size()) * 4.0,
                                                   benchmark::Counter::kIsRate);
  state.SetLabel(std::to_string(pool.size()) + " threads");
}

BENCHMARK(BM_DecodeAttention)
    ->ArgName("positions")
    ->Arg(1)
    ->Arg(256)
    ->Arg(1024)
    ->Arg(4096)
    ->Arg(16384)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// Args: positions already cached before the chunk.
void BM_PrefillAttention(benchmark::State& state) {
  static ThreadPool pool(0);
  constexpr int64_t kChunk = 512;
  const int64_t first_position = state.range(0), positions = first_position + kChunk;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> k_cache(size_t(positions * kKvHeads * kHeadDim)), v_cache(k_cache.size());
  for (size_t i = 0; i < k_cache.size(); ++i) k_cache[i] = dist(rng), v_cache[i] = dist(rng);
  std::vector<float> q(size_t(kChunk * kHeads * kHeadDim)), out(q.size());
  for (float& x : q) x = dist(rng) * 4.0f;
  const float scale = 1.0f / std::sqrt(float(kHeadDim));
  for (auto _ : state) {
    cpu::causal_attention(q.data(), kChunk, kHeads, kKvHeads, kHeadDim, first_position, k_cache.data(),
                          v_cache.data(), scale, out.data(), pool);
    benchmark::DoNotOptimize(out.data());
  }
  const double seen = double(kChunk) * double(first_position) + double(kChunk) * double(kChunk + 1) / 2.0;
  state.counters["flop/s"] = benchmark::Counter(double(state.iterations()) * 4.0 * double(kHeads * kHeadDim) * seen,
                                                benchmark::Counter::kIsRate);
  state.SetLabel(std::to_string(pool.size()) + " threads");
}

BENCHMARK(BM_PrefillAttention)
    ->ArgName("cached")
    ->Arg(0)
    ->Arg(1536)
    ->Arg(7680)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
