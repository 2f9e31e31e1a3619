// What the CUDA engine says on devices it cannot use, shown on emulated devices configured to be them
// (no device, too little memory or shared memory, an sm_80 part, too few SMs): a clear error naming
// what is missing, or the per-operator path with the reason, and nothing left allocated after a
// constructor that throws. These need a particular device, so they exist only here. Also what only
// the emulator can count: the kernels a profiled per-operator step runs.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>

#include "cuda/model_fixture.h"
#include "megaqwen/cuda/cuda_engine.h"
#include "megaqwen/cuda/cuda_hybrid_engine.h"
#include "megaqwen/engine/create_engine.h"
#include "megaqwen/sampling/sampler.h"
#include "megaqwen/util/error.h"
#include "scoped_env.h"
#include "simt/emulated_runtime.h"

namespace megaqwen {
namespace {

// Configures the emulated device for one test and restores it after.
class EmulatedDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    saved_ = simt_runtime::config();
    model_ = test::tiny_model();
  }
  void TearDown() override { simt_runtime::configure(saved_); }
  void set(void (*change)(simt_runtime::DeviceConfig&)) {
    simt_runtime::DeviceConfig c = saved_;
    change(c);
    simt_runtime::configure(c);
  }
  // The engine's constructor (CudaEngine on the tiny model, or CudaHybridEngine on tiny-hybrid) must
  // throw a message containing every one of `parts`, and free what it allocated on the way.
  void expect_construction_fails(const cuda::CudaEngineOptions& options, std::initializer_list<std::string> parts,
                                 bool hybrid = false) {
    const uint64_t before = simt_runtime::stats().device_bytes;
    try {
      if (hybrid) {
        cuda::CudaHybridEngine engine(test::tiny_hybrid_model("tiny-hybrid"), options);
        ADD_FAILURE() << "the engine was created: " << engine.device_name();
      } else {
        cuda::CudaEngine engine(model_, options);
        ADD_FAILURE() << "the engine was created: " << engine.device_name();
      }
    } catch (const Error& e) {
      for (const std::string& part : parts) EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
    EXPECT_EQ(simt_runtime::stats().device_bytes, before) << "device memory left allocated";
  }
  simt_runtime::DeviceConfig saved_;
  std::shared_ptr<const Model> model_;
};

// MEGAQWEN_PEROP_PROFILE=1: every kernel the per-operator steps run is in the profile, once per
// launch, with no graph launched; the hybrid engine's steps too. Without it the step is one graph.
TEST_F(EmulatedDeviceTest, PerOpProfileTimesEveryKernelTheStepsRun) {
  auto count = [](cuda::CudaEngine& engine, auto&& work) {
    const simt_runtime::Stats before = simt_runtime::stats();
    work(engine);
    const simt_runtime::Stats after = simt_runtime::stats();
    return std::pair(after.kernels - before.kernels, after.graph_launches - before.graph_launches);
  };
  {
    cuda::CudaEngine plain(model_, {.context = 64});
    plain.decode(3);  // captures the graph
    const auto [kernels, graphs] = count(plain, [](cuda::CudaEngine& e) { e.decode(5), e.decode(7); });
    EXPECT_EQ(graphs, 2u);
    EXPECT_GT(kernels, 0u);
  }
  test::ScopedEnv env("MEGAQWEN_PEROP_PROFILE", "1");
  cuda::CudaEngine profiled(model_, {.context = 64});
  profiled.decode(3);
  const uint64_t timed_before = profiled.decode_step_profile()->launches();
  const auto [kernels, graphs] = count(profiled, [](cuda::CudaEngine& e) { e.decode(5), e.decode(7); });
  EXPECT_EQ(graphs, 0u) << "a profiled step runs without its graph";
  EXPECT_EQ(profiled.decode_step_profile()->launches() - timed_before, kernels) << "a kernel the profile missed";
  EXPECT_EQ(profiled.decode_step_profile()->steps(), 3u);

  cuda::CudaHybridEngine hybrid(test::tiny_hybrid_model("tiny-hybrid"), {.context = 64});
  const uint64_t before = simt_runtime::stats().kernels;
  hybrid.decode(3);
  hybrid.decode(4);
  ASSERT_NE(hybrid.decode_step_profile(), nullptr);
  EXPECT_EQ(hybrid.decode_step_profile()->launches(), simt_runtime::stats().kernels - before);
  EXPECT_EQ(hybrid.decode_step_profile()->steps(), 2u);
  EXPECT_NE(hybrid.decode_profile().find("per-op decode kernels"), std::string::npos);
}

TEST_F(EmulatedDeviceTest, NoDeviceFallsBackToTheCpuOrFailsWithTheReason) {
  set([](simt_runtime::DeviceConfig& c) { c.devices = 0; });
  std::string why;
  EXPECT_FALSE(cuda_available(&why));
  EXPECT_NE(why.find("cudaErrorNoDevice"), std::string::npos) << why;
  auto engine = create_engine(model_, {.device = "auto", .context = 64, .threads = 1, .quiet = true});
  EXPECT_EQ(engine->device_name().rfind("cuda", 0), std::string::npos) << engine->device_name();
  try {
    create_engine(model_, {.device = "cuda", .context = 64});
    ADD_FAILURE() << "--device cuda without a device";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--device cuda: cudaGetDeviceCount failed"), std::string::npos) << e.what();
  }
  expect_construction_fails({.context = 64}, {"--device cuda", "cudaErrorNoDevice"});
  expect_construction_fails({.context = 64, .device = 3}, {"--device cuda"});
}

TEST_F(EmulatedDeviceTest, AutoPicksTheEmulatedDevice) {
  auto engine = create_engine(model_, {.device = "auto", .context = 64, .quiet = true});
  EXPECT_EQ(engine->device_name().rfind("cuda:0 (simt emulated sm_90 device, sm_90, 16 SMs", 0), 0u)
      << engine->device_name();
}

TEST_F(EmulatedDeviceTest, TooLittleMemorySaysWhatItNeeds) {
  set([](simt_runtime::DeviceConfig& c) { c.memory = uint64_t(256) << 20; });
  expect_construction_fails({.context = 4096}, {"does not fit", "KV cache", "4096 tokens", "GiB", "--ctx"});
  expect_construction_fails({.context = 4096}, {"does not fit", "recurrent states and snapshots", "--ctx"}, true);
}

TEST_F(EmulatedDeviceTest, TooLittleSharedMemoryForPrefillAttention) {
  set([](simt_runtime::DeviceConfig& c) { c.smem_optin = 48 * 1024; });
  expect_construction_fails({.context = 64}, {"shared memory", "prefill attention for head_dim 128 needs"});
  expect_construction_fails({.context = 64}, {"shared memory", "prefill attention for head_dim 64 needs"}, true);
}

TEST_F(EmulatedDeviceTest, MegakernelNeedsSm90AndSixteenSms) {
  for (auto change : {+[](simt_runtime::DeviceConfig& c) { c.major = 8; },
                      +[](simt_runtime::DeviceConfig& c) { c.sms = 8; }}) {
    set(change);
    const std::string reason = simt_runtime::config().major < 9 ? "needs sm_90" : "at least 16 SMs";
    {
      cuda::CudaEngine engine(model_, {.context = 64});  // auto: the per-operator path, with the reason
      EXPECT_FALSE(engine.uses_megakernel());
      EXPECT_NE(engine.decode_kernel_note().find(reason), std::string::npos) << engine.decode_kernel_note();
    }
    expect_construction_fails({.context = 64, .decode_kernel = cuda::DecodeKernel::Megakernel},
                              {"--decode-kernel megakernel", reason});
  }
}

TEST_F(EmulatedDeviceTest, TheMegakernelRunsWhereItApplies) {
  cuda::CudaEngine engine(model_, {.context = 64, .decode_kernel = cuda::DecodeKernel::Megakernel});
  ASSERT_TRUE(engine.uses_megakernel()) << engine.decode_kernel_note();
  EXPECT_NE(engine.decode_kernel_note().find("16 CTAs x 512 threads"), std::string::npos) << engine.decode_kernel_note();
}

// The H200's grid through the engine: 132 CTAs (CTAs without rows or attention work, the attention
// splits and selection scratch sized for 132), a short greedy run against the per-operator path.
TEST_F(EmulatedDeviceTest, TheMegakernelOnTheH200GridMatchesThePerOperatorPath) {
  set([](simt_runtime::DeviceConfig& c) { c.sms = 132; });
  cuda::CudaEngine mk(model_, {.context = 256, .decode_kernel = cuda::DecodeKernel::Megakernel});
  cuda::CudaEngine perop(model_, {.context = 256, .decode_kernel = cuda::DecodeKernel::PerOp});
  ASSERT_NE(mk.decode_kernel_note().find("132 CTAs"), std::string::npos) << mk.decode_kernel_note();
  const auto prompt = test::random_ids(12, 3);
  mk.prefill(prompt);
  perop.prefill(prompt);
  const int n = 4;
  const size_t V = size_t(model_->config.vocab_size);
  auto logits = test::poisoned_f32(size_t(n) * V);
  SamplingParams greedy;
  greedy.temperature = 0;
  std::vector<int32_t> tokens;
  const int drawn = mk.megakernel_generate(77, n, {}, greedy, {}, kNoLogprobs, [&](const DeviceDraw& d) {
    tokens.push_back(d.token);
    return true;
  }, logits.data());
  ASSERT_EQ(drawn, n);
  const std::vector<float> all = test::download(logits);
  for (int i = 0; i < n; ++i) {
    const auto ref = perop.decode(i == 0 ? 77 : tokens[size_t(i - 1)]);
    const std::vector<float> got(all.begin() + long(size_t(i) * V), all.begin() + long(size_t(i + 1) * V));
    // 5e-3: the GPU tests' bound between two device paths (tests/cuda/megakernel_test.cpp).
    EXPECT_LE(test::rel_error(got, std::vector<float>(ref.begin(), ref.end())), 5e-3) << "step " << i;
    EXPECT_EQ(tokens[size_t(i)], int32_t(std::max_element(got.begin(), got.end()) - got.begin())) << "step " << i;
  }
}

}  // namespace
}  // namespace megaqwen
