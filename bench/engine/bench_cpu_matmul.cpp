// The CPU engine's matmul (cpu::matmul) at Qwen3-0.6B's shapes (Google Benchmark): one token (the
// decode GEMV, bound by reading the bf16 weights) and 128 / 512 tokens (prefill chunks, bound by the FMAs),
// on one thread and on all; and the prefill shapes on the AMX tile units (--amx-prefill's split
// input, and the input rounded to bf16).
// Counters: FLOP/s (2 x rows x cols x tokens) and the weight bytes read per second. The weights lie
// in transparent huge pages, as the CPU engines keep them (huge_pages 1), or in 4 KiB pages (0: the
// LM head's GEMV from DRAM both ways).
//
//   build/bench/engine/bench_cpu_matmul --benchmark_min_time=1
#include <benchmark/benchmark.h>

#include <sys/mman.h>

#include <cstdint>
#include <memory>
#include <new>
#include <random>
#include <string>
#include <vector>

#include "megaqwen/engine/cpu_amx_matmul.h"
#include "megaqwen/engine/cpu_ops.h"
#include "megaqwen/util/bf16.h"
#include "megaqwen/util/huge_pages.h"
#include "megaqwen/util/thread_pool.h"

namespace {

using namespace megaqwen;

ThreadPool& pool(int threads) {
  static ThreadPool one(1), all(0);
  return threads == 1 ? one : all;
}

struct Unmap {
  size_t bytes;
  void operator()(void* p) const { ::munmap(p, bytes); }
};

struct Problem {
  std::unique_ptr<void, Unmap> region{nullptr, Unmap{0}};
  std::vector<float> in, out;
  std::string name;
  WeightMatrix w;
};

Problem make_problem(int64_t rows, int64_t cols, int64_t tokens, bool huge) {
  Problem p;
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  const size_t bytes = size_t(rows * cols) * sizeof(uint16_t);
  void* region = huge_pages::map_aligned(bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1);
  if (!region) throw std::bad_alloc();
  p.region = std::unique_ptr<void, Unmap>(region, Unmap{bytes});
  ::madvise(region, bytes, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
  auto* const weights = static_cast<uint16_t*>(region);
  for (size_t i = 0; i < size_t(rows * cols); ++i) weights[i] = f32_to_bf16(normal(rng));
  p.in.resize(size_t(tokens * cols));
  for (auto& x : p.in) x = normal(rng) * 50.0f;
  p.out.resize(size_t(tokens * rows));
  p.name.assign(1, 'w');  // (assigning "w" trips a false -Wrestrict in GCC 12)
  p.w = {.data = static_cast<const uint8_t*>(region), .dtype = DType::BF16, .rows = rows,
         .cols = cols, .name = &p.name};
  return p;
}

using MatmulFn = void (*)(const WeightMatrix&, const float*, int64_t, float*, ThreadPool&);

template <cpu::AmxInput kInput>
void amx(const WeightMatrix& w, const float* in, int64_t tokens, float* out, ThreadPool& pool) {
  cpu::matmul_amx_bf16(w, in, tokens, out, pool, kInput);
}

// Args: rows, cols, tokens, threads (1, or 0 for one per hardware thread), huge_pages (1 or 0).
template <MatmulFn kMatmul, bool kNeedsAmx = false>
void BM_Matmul(benchmark::State& state) {
  if (kNeedsAmx && !cpu::amx_available()) {
    state.SkipWithError("no AMX here");
    return;
  }
  const int64_t rows = state.range(0), cols = state.range(1), tokens = state.range(2);
  ThreadPool& threads = pool(int(state.range(3)));
  Problem p = make_problem(rows, cols, tokens, state.range(4) != 0);
  for (auto _ : state) {
    kMatmul(p.w, p.in.data(), tokens, p.out.data(), threads);
    benchmark::DoNotOptimize(p.out.data());
  }
  const double iterations = double(state.iterations());
  state.counters["FLOP/s"] = benchmark::Counter(iterations * 2.0 * double(rows * cols * tokens),
                                                benchmark::Counter::kIsRate);
  state.counters["weight_B/s"] = benchmark::Counter(iterations * double(p.w.byte_size()),
                                                    benchmark::Counter::kIsRate);
  state.SetLabel(std::to_string(threads.size()) + " threads" + (state.range(4) ? "" : ", 4 KiB pages"));
}
// q_proj 2048x1024, gate/up 3072x1024, down 1024x3072; tokens 1 (decode), 128 and 512 (prefill chunks).
BENCHMARK(BM_Matmul<cpu::matmul>)
    ->Name("BM_Matmul")
    ->ArgNames({"rows", "cols", "tokens", "threads", "huge_pages"})
    ->ArgsProduct({{2048}, {1024}, {1}, {1, 0}, {1}})
    ->ArgsProduct({{151936}, {1024}, {1}, {1, 0}, {1, 0}})
    ->ArgsProduct({{3072}, {1024}, {1, 128, 512}, {1, 0}, {1}})
    ->ArgsProduct({{1024}, {3072}, {1, 128, 512}, {1, 0}, {1}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// The AMX tile units (skipped where there are none): --amx-prefill's split input (two tile products
// per step), and the input rounded to bf16 (one).
BENCHMARK(BM_Matmul<amx<cpu::AmxInput::kSplit>, true>)
    ->Name("BM_MatmulAmxSplit")
    ->ArgNames({"rows", "cols", "tokens", "threads", "huge_pages"})
    ->ArgsProduct({{3072}, {1024}, {128, 512}, {1, 0}, {1}})
    ->ArgsProduct({{1024}, {3072}, {128, 512}, {1, 0}, {1}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_Matmul<amx<cpu::AmxInput::kRounded>, true>)
    ->Name("BM_MatmulAmxRounded")
    ->ArgNames({"rows", "cols", "tokens", "threads", "huge_pages"})
    ->ArgsProduct({{3072}, {1024}, {128, 512}, {1, 0}, {1}})
    ->ArgsProduct({{1024}, {3072}, {128, 512}, {1, 0}, {1}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
