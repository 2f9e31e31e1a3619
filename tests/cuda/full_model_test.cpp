// The CUDA engine against CpuEngine at full Qwen3-0.6B size (synthetic weights, real shapes): 28
// layers accumulate the bf16 KV-cache rounding, so the check is top-1 agreement (>= 99% of
// positions) plus the logit metric with the tolerance of cuda_engine_test.cpp (2e-2, same reasons).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "cuda/gpu_test_util.h"
#include "cuda/model_fixture.h"
#include "engine/hf_fixture.h"
#include "megaqwen/cuda/cuda_engine.h"
#include "megaqwen/engine/cpu_engine.h"

namespace megaqwen {
namespace {

TEST(CudaFullModel, Qwen3_06bMatchesCpuEngine) {
  MQ_REQUIRE_GPU_AND_CUBLAS();
  MQ_SKIP_IF_EMULATED("28 layers of Qwen3-0.6B take hours per token");
  auto model = test::full_model();
  const int V = model->config.vocab_size;
  std::mt19937_64 rng(99);
  std::vector<int32_t> ids(160);
  for (auto& id : ids) id = int32_t(rng() % 151000);
  const size_t prompt = 128;

  CpuEngine cpu(model, {.context = 256, .threads = 0});
  std::vector<float> want;
  cpu.prefill_all_logits(std::span(ids).first(prompt), want);
  cuda::CudaEngine gpu(model, {.context = 256});
  std::vector<float> got;
  gpu.prefill_all_logits(std::span(ids).first(prompt), got);

  // A top-1 disagreement is a near-tie when the CPU's logits of the two ids differ by no more than
  // twice the largest |gpu - cpu| logit difference at that position (each of the two logits may be
  // off by that much). Random 0.6B-shape weights give logits of std ~2.5 over 151,936 ids, so the
  // top-2 gap is ~0.5 on average and below 0.01 at ~2% of positions: a bf16-cache error of ~1e-3
  // relative then flips a few of 160 positions without anything being wrong. Those are counted and
  // printed; only disagreements that the measured error cannot explain count against the 99%.
  int agree = 0, near_ties = 0, total = 0;
  double worst = 0;
  auto compare = [&](std::span<const float> g, std::span<const float> c) {
    worst = std::max(worst, test::relative_max_error(g, c));
    const int32_t gi = test::argmax(g), ci = test::argmax(c);
    if (gi == ci) {
      ++agree;
    } else {
      double max_abs = 0;
      for (size_t i = 0; i < c.size(); ++i) max_abs = std::max(max_abs, std::abs(double(g[i]) - double(c[i])));
      const double gap = double(c[size_t(ci)]) - double(c[size_t(gi)]);
      const bool tie = gap <= 2 * max_abs;
      near_ties += tie;
      std::printf("position %d: top-1 differs (cpu %d, gpu %d), cpu gap %.4g, max |gpu - cpu| %.4g: %s\n", total,
                  ci, gi, gap, max_abs, tie ? "near-tie" : "NOT a near-tie");
    }
    ++total;
  };
  for (size_t p = 0; p < prompt; ++p)
    compare(std::span<const float>(got).subspan(p * size_t(V), size_t(V)),
            std::span<const float>(want).subspan(p * size_t(V), size_t(V)));
  for (size_t p = prompt; p < ids.size(); ++p) {
    auto c = cpu.decode(ids[p]);
    std::vector<float> cv(c.begin(), c.end());
    compare(gpu.decode(ids[p]), cv);
  }
  RecordProperty("worst_rel_error", std::to_string(worst));
  RecordProperty("top1_agreement", std::to_string(double(agree) / total));
  std::printf("qwen3-0.6b: worst logit error %.3g, top-1 agreement %d/%d (+%d near-ties)\n", worst, agree, total,
              near_ties);
  EXPECT_GE(double(agree + near_ties) / total, 0.99);
  EXPECT_LE(worst, 2e-2);
}

}  // namespace
}  // namespace megaqwen
