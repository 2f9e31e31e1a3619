// What one of the megakernel's all-CTA dependency edges costs on this GPU, without any weights
// (Google Benchmark over mk::launch_edge_probe, edge_probe.cuh): one CTA per SM runs 2,000 rounds of
// "read the previous round's vector through L2, write this CTA's slice, signal the counter, wait for
// every CTA's signal"; CUDA events time the launch, and ns_per_edge is that time over the rounds. The
// vector sizes are a stage's input: none (the edge alone), 1,024 floats (Qwen3-0.6B's residual) and
// 3,072 (its MLP activation). form: 0 signals a counter and polls it with ld.acquire (the kernel's
// default), 1 polls it relaxed and fences once (MEGAQWEN_MK_ABLATE bit 4), 2 has no counter: the
// vector travels as flagged words that the readers poll themselves (sync.cuh; "floats 0" there is one
// word per CTA, the least that can carry the edge). Prediction (docs/MEGAKERNEL.md): form 2 takes
// about one L2 round trip per edge where the counter forms take three. Without a usable GPU every
// case reports an error.
//
//   build/bench/engine/bench_mk_edges
#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>

#include <string>

#include "megaqwen/cuda/cuda_check.h"
#include "megaqwen/cuda/device_buffer.h"
#include "megaqwen/cuda/megakernel/megakernel.h"

namespace {

using namespace megaqwen;

constexpr int kEdges = 2000;

void BM_MegakernelEdge(benchmark::State& state) {
  std::string why;
  if (!cuda::device_usable(&why)) {
    state.SkipWithError(("no usable GPU: " + why).c_str());
    return;
  }
  const int form = int(state.range(1));
  const uint32_t ablate = form == 1 ? cuda::mk::kAblateRelaxedSpin : 0u;
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  const int ctas = prop.multiProcessorCount;
  const int n = form == 2 && state.range(0) == 0 ? ctas : int(state.range(0));
  cuda::DeviceBuffer<uint32_t> counter(1);
  cuda::DeviceBuffer<float> vec(size_t(2 * (n > 0 ? n : 1)));
  cuda::DeviceBuffer<uint64_t> words(form == 2 ? size_t(2 * n) : 1);
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  double ns_sum = 0;
  for (auto _ : state) {
    CUDA_CHECK(cudaMemset(counter.data(), 0, sizeof(uint32_t)));
    CUDA_CHECK(cudaMemset(vec.data(), 0, vec.bytes()));
    CUDA_CHECK(cudaMemset(words.data(), 0, words.bytes()));
    CUDA_CHECK(cudaEventRecord(start, nullptr));
    cuda::mk::launch_edge_probe({counter.data(), vec.data(), n, kEdges, ablate, form == 2 ? words.data() : nullptr}, ctas,
                                nullptr);
    CUDA_CHECK(cudaEventRecord(stop, nullptr));
    CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    state.SetIterationTime(double(ms) / 1e3);
    ns_sum += double(ms) * 1e6 / kEdges;
  }
  CUDA_CHECK(cudaEventDestroy(start));
  CUDA_CHECK(cudaEventDestroy(stop));
  state.counters["ns_per_edge"] = ns_sum / double(state.iterations());
  state.counters["ctas"] = ctas;
  state.SetLabel(prop.name);
}
BENCHMARK(BM_MegakernelEdge)
    ->ArgNames({"floats", "form"})
    ->ArgsProduct({{0, 1024, 3072}, {0, 1, 2}})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
