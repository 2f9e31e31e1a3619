// The CUDA engine against CpuEngine at full Qwen3-0.6B size (synthetic weights, real shapes), through
// verify_engine (src/megaqwen/engine/verify.h, what `megaqwen verify` runs): 128 positions of batched
// prefill, 32 decode steps, then 64 greedy tokens drawn by Generator, once with the per-operator
// decode and the fp32 prefill attention, once with the megakernel (where this GPU runs it) and the
// tensor-core prefill attention. 28 layers accumulate the bf16 KV-cache
// rounding, so the checks are verify's: top-1 agreement >= 99% per phase, near-ties (a flip where the
// CPU's gap is within twice the phase's median error) forgiven; worst relative logit error <= 2e-2
// (kGpuLogitTolerance of cuda_engine_test.cpp, same reasons); mean KL <= 1e-3, max KL <= 2e-2 nats.
#include <gtest/gtest.h>

#include <cstdio>
#include <random>
#include <vector>

#include "cuda/gpu_test_util.h"
#include "cuda/model_fixture.h"
#include "megaqwen/cuda/cuda_engine.h"
#include "megaqwen/engine/cpu_engine.h"
#include "megaqwen/engine/verify.h"

namespace megaqwen {
namespace {

TEST(CudaFullModel, Qwen3_06bMatchesCpuEngine) {
  MQ_REQUIRE_GPU_AND_CUBLAS();
  MQ_SKIP_IF_EMULATED("28 layers of Qwen3-0.6B take hours per token");
  auto model = test::full_model();
  std::mt19937_64 rng(99);
  VerifyOptions options;
  options.tokens.resize(160);
  for (auto& id : options.tokens) id = int32_t(rng() % 151000);
  options.prefill_tokens = 128;
  options.generate_tokens = 64;

  CpuEngine cpu(model, {.context = 256, .threads = 0});
  for (cuda::DecodeKernel kernel : {cuda::DecodeKernel::PerOp, cuda::DecodeKernel::Auto}) {
    // Both prefill attention kernels, one with each decode kernel: fp32 with the per-op decode, the
    // default tensor-core one with Auto (the megakernel where it runs).
    const bool tc = kernel == cuda::DecodeKernel::Auto;
    cuda::CudaEngine gpu(model, {.context = 256, .tensor_core_prefill = tc, .decode_kernel = kernel});
    std::printf("prefill attention: %s\n", tc ? "tensor cores" : "fp32");
    const VerifyReport r = verify_engine(cpu, gpu, options);
    std::printf("%s\n", r.candidate_device.c_str());
    for (const PhaseResult& p : r.phases) {
      std::printf("  %-10s top-1 %d/%d (+%d near-ties, tolerance %.3g), worst rel error %.3g, KL mean %.3g max %.3g\n",
                  p.name.c_str(), p.agree, p.positions, p.near_ties, p.tie_tolerance, p.worst_rel_error, p.mean_kl,
                  p.max_kl);
      for (const std::string& m : p.mismatches) std::printf("    %s\n", m.c_str());
      RecordProperty(p.name + "_top1_" + (kernel == cuda::DecodeKernel::PerOp ? "per_op" : "auto"),
                     std::to_string(p.top1_rate()));
    }
    EXPECT_TRUE(r.passed()) << r.candidate_device << ": " << ::testing::PrintToString(r.failures);
  }
}

}  // namespace
}  // namespace megaqwen
