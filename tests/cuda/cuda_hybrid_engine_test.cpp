// The Qwen3.5 hybrid CUDA engine against CpuHybridEngine (the fp32 oracle, itself held to transformers
// by tests/engine/qwen35_parity_test.cpp) on the two tiny hybrid presets and, on a real GPU, at
// Qwen3.5-0.8B's full shapes; and its own consistency: chunked prefill across the conv window, graph
// replay = direct launches, truncate onto a snapshot (bit-exact) and between snapshots (replay),
// errors that leave the engine usable, device sampling.
//
// Two references. The plain CPU engine keeps its KV cache in fp32; the GPU's is bf16, whose rounding
// (2^-9 relative per element) moves these random models' logits by 1e-3 .. 9e-2 relative depending on
// the model: tiny-hybrid-gqa, attention first with four query heads on one kv head, amplifies it most
// (measured 0.06 in prefill, 0.05 in decode). So the engine's arithmetic is held, tightly, to a CPU
// engine that rounds its cache to bf16 the same way (bf16_kv_cache): what remains is the bf16 split
// of GEMM inputs, summation order, and the rare element whose two fp32 values straddle a bf16
// rounding boundary; measured 1e-4 typical, 4.5e-3 worst (tiny-hybrid-gqa), bound
// kSameCacheTolerance = 1e-2 (a wrong gate, RoPE range or head mapping moves logits by 1e-1 or more).
// Those comparisons run the fp32 prefill attention (exact_options): the tensor-core kernel's bf16
// rounding of q and of the softmax weights (~3e-3 on an attention output, kernels_test.cpp) is one
// more rounding the gqa preset amplifies (measured 0.085 in prefill); the default engine, tensor
// cores included, is held to the fp32 reference on tiny-hybrid and at full size. End to end
// against the fp32 reference, with verify_engine's bounds (what `megaqwen verify` runs: relative error <= 2e-2, top-1
// >= 99% per phase with near-ties judged against the phase's median error, KL mean <= 1e-3 and max <= 2e-2 nats):
// tiny-hybrid here, and Qwen3.5-0.8B's full shapes on a real GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "cuda/gpu_test_util.h"
#include "cuda/model_fixture.h"
#include "engine/hf_fixture.h"
#include "model/model_test_util.h"
#include "megaqwen/cuda/cuda_hybrid_engine.h"
#include "megaqwen/engine/cpu_qwen35_engine.h"
#include "megaqwen/engine/create_engine.h"
#include "megaqwen/engine/generator.h"
#include "megaqwen/engine/state_file.h"
#include "megaqwen/engine/verify.h"
#include "megaqwen/util/error.h"

namespace megaqwen {
namespace {

using test::relative_max_error;

constexpr double kGpuLogitTolerance = 2e-2;   // against the fp32-cache reference (verify's bound)
constexpr double kSameCacheTolerance = 1e-2;  // against the bf16-cache reference
// Prefill with bf16-only GEMM inputs (split_activations off), against a CPU engine that rounds the same
// inputs (bf16_matmul_inputs). What remains is the inputs whose two fp32 values (GPU and CPU summation
// orders) straddle a bf16 rounding boundary: each such flip is a 2^-8 step on one element, and these
// random models amplify it (tiny-hybrid-gqa most). Measured on the emulated device, whose GEMM sums
// like the CPU: ~1e-7 on tiny-hybrid, 0.065 on tiny-hybrid-gqa (0.039 and 0.096 against the fp32-input
// reference); on the H200 the fp32-input reference had given 0.035 and 0.28. So the bound is loose and
// the top-1 check, judged as `megaqwen verify` judges it, carries this mode: a bug of its own (a stale
// or unwritten bf16 input) moves logits by O(1) and flips most top-1s.
constexpr double kBf16InputsTolerance = 0.3;

std::vector<int32_t> ids_below(int vocab, size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> ids(n);
  for (auto& id : ids) id = int32_t(rng() % uint64_t(vocab - 1));
  return ids;
}

// The engine with the fp32 prefill attention, for the comparisons with the bf16-cache reference.
cuda::CudaEngineOptions exact_options(int context) {
  cuda::CudaEngineOptions o;
  o.context = context;
  o.tensor_core_prefill = false;
  return o;
}

std::span<const float> row(const std::vector<float>& all, size_t pos, int V) {
  return std::span<const float>(all).subspan(pos * size_t(V), size_t(V));
}

void print_report(const VerifyReport& r) {
  std::printf("%s\n", r.candidate_device.c_str());
  for (const PhaseResult& p : r.phases) {
    std::printf("  %-10s top-1 %d/%d (+%d near-ties), worst rel error %.3g, KL mean %.3g max %.3g\n", p.name.c_str(),
                p.agree, p.positions, p.near_ties, p.worst_rel_error, p.mean_kl, p.max_kl);
    for (const std::string& m : p.mismatches) std::printf("    %s\n", m.c_str());
  }
}

class CudaHybridEngineTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    MQ_REQUIRE_GPU_AND_CUBLAS();
    model_ = test::tiny_hybrid_model(GetParam());
  }
  int V() const { return model_->config.vocab_size; }
  std::shared_ptr<const Model> model_;
};

// Every prefill position against the bf16-cache CPU engine, in chunks of 16 (the conv window and the
// DeltaNet states carried across chunk boundaries), with and without the bf16 split of the GEMM inputs;
// without it, against a CPU engine that rounds its matrix products' inputs to bf16 as well.
TEST_P(CudaHybridEngineTest, ChunkedPrefillLogitsMatchCpu) {
  const auto ids = ids_below(V(), 70, 1);
  for (bool split : {true, false}) {
    CpuHybridEngine cpu(model_, {.context = 256, .threads = 0, .bf16_kv_cache = true, .bf16_matmul_inputs = !split});
    std::vector<float> want;
    cpu.prefill_all_logits(ids, want);
    cuda::CudaEngineOptions o = exact_options(256);
    o.prefill_chunk = 16;
    o.split_activations = split;
    cuda::CudaHybridEngine gpu(model_, o);
    std::vector<float> got;
    gpu.prefill_all_logits(ids, got);
    double worst = 0;
    for (size_t p = 0; p < ids.size(); ++p)
      worst = std::max(worst, relative_max_error(row(got, p, V()), row(want, p, V())));
    EXPECT_LE(worst, split ? kSameCacheTolerance : kBf16InputsTolerance) << "split " << split;
    const PhaseResult judged = test::judge_rows("prefill", got, want, size_t(V()));
    EXPECT_LE(judged.mismatches.size(), 2u) << "split " << split << test::joined(judged.mismatches);
    RecordProperty(std::string(GetParam()) + (split ? "_worst_rel_error_split" : "_worst_rel_error_bf16"),
                   std::to_string(worst));
    EXPECT_EQ(gpu.position(), int(ids.size()));
  }
}

// YaRN RoPE scaling on the gated attention layers (factor 4 over an original context of 64): prefill
// past the original context and decode after it, against the bf16-cache CPU engine.
TEST_P(CudaHybridEngineTest, YarnRopeScalingMatchesCpu) {
  const auto model = test::yarn_variant(test::synth_model_dir(GetParam(), test::kEmulatedDevice ? test::kEmulatedTinyVocab : 0));
  ASSERT_EQ(model->config.rope_scaling.type, RopeScaling::Type::Yarn);
  const auto ids = ids_below(V(), 106, 31);
  const auto prompt = std::span(ids).first(100);
  CpuHybridEngine cpu(model, {.context = 128, .threads = 0, .bf16_kv_cache = true});
  std::vector<float> want;
  cpu.prefill_all_logits(prompt, want);
  cuda::CudaHybridEngine gpu(model, exact_options(128));
  std::vector<float> got;
  gpu.prefill_all_logits(prompt, got);
  double worst = 0;
  for (size_t p = 0; p < prompt.size(); ++p) worst = std::max(worst, relative_max_error(row(got, p, V()), row(want, p, V())));
  for (size_t i = prompt.size(); i < ids.size(); ++i) {
    const auto ref = cpu.decode(ids[i]);
    const std::vector<float> want_row(ref.begin(), ref.end());
    worst = std::max(worst, relative_max_error(gpu.decode(ids[i]), want_row));
  }
  EXPECT_LE(worst, kSameCacheTolerance);
  RecordProperty(std::string(GetParam()) + "_yarn_worst_rel_error", std::to_string(worst));
}

// One prefill pass of 100 tokens (three full chunks of the chunked delta rule and a partial one),
// then decode: the chunked DeltaNet prefill (the default) and the token-by-token one both against the
// bf16-cache CPU engine, and against each other. They differ only in the delta rule's summation order
// (~1e-6 relative, gated_delta_net_test.cpp), which reaches the logits through the bf16 KV cache
// rounding of the attention layers after it: measured 6e-5 .. 2.9e-3 against the CPU (as the
// sequential form), 4.5e-5 .. 8.9e-5 between the two; bound 1e-3 between them.
TEST_P(CudaHybridEngineTest, ChunkedDeltaRuleMatchesSequentialAndCpu) {
  const auto ids = ids_below(V(), 108, 8);
  const auto prompt = std::span(ids).first(100);
  CpuHybridEngine cpu(model_, {.context = 128, .threads = 0, .bf16_kv_cache = true});
  std::vector<float> want;
  cpu.prefill_all_logits(prompt, want);
  std::vector<std::vector<float>> want_decode;
  for (size_t i = 100; i < ids.size(); ++i) {
    const auto l = cpu.decode(ids[i]);
    want_decode.emplace_back(l.begin(), l.end());
  }
  std::vector<float> all[2];
  for (bool chunked : {true, false}) {
    cuda::CudaEngineOptions o = exact_options(128);
    o.chunked_delta_rule = chunked;
    cuda::CudaHybridEngine gpu(model_, o);
    EXPECT_NE(gpu.device_name().find(chunked ? "DeltaNet prefill: chunked" : "DeltaNet prefill: sequential"),
              std::string::npos)
        << gpu.device_name();
    gpu.prefill_all_logits(prompt, all[chunked]);
    double worst = 0;
    for (size_t p = 0; p < prompt.size(); ++p)
      worst = std::max(worst, relative_max_error(row(all[chunked], p, V()), row(want, p, V())));
    for (size_t i = 100; i < ids.size(); ++i)
      worst = std::max(worst, relative_max_error(gpu.decode(ids[i]), want_decode[i - 100]));
    EXPECT_LE(worst, kSameCacheTolerance) << "chunked " << chunked;
  }
  double between = 0;
  for (size_t p = 0; p < prompt.size(); ++p)
    between = std::max(between, relative_max_error(row(all[1], p, V()), row(all[0], p, V())));
  EXPECT_LE(between, 1e-3);
  RecordProperty(std::string(GetParam()) + "_chunked_vs_sequential", std::to_string(between));
}

// verify_engine's three phases (40 prefilled positions, 24 decode steps, 48 greedy tokens) against
// the bf16-cache reference with kSameCacheTolerance as the error bound, and on tiny-hybrid against
// the fp32 reference with verify's own bounds (see the top for why not tiny-hybrid-gqa).
TEST_P(CudaHybridEngineTest, VerifyPassesAgainstCpu) {
  for (bool bf16_cache : {true, false}) {
    if (!bf16_cache && std::string(GetParam()) == "tiny-hybrid-gqa") continue;
    CpuHybridEngine cpu(model_, {.context = 160, .threads = 0, .bf16_kv_cache = bf16_cache});
    cuda::CudaEngineOptions o;  // against the fp32 reference: the default engine
    o.context = 160;
    cuda::CudaHybridEngine gpu(model_, bf16_cache ? exact_options(160) : o);
    VerifyOptions options;
    options.tokens = ids_below(V(), 64, 2);
    options.prefill_tokens = 40;
    options.generate_tokens = 48;
    if (bf16_cache) options.thresholds.rel_error_max = kSameCacheTolerance;
    const VerifyReport r = verify_engine(cpu, gpu, options);
    print_report(r);
    EXPECT_TRUE(r.passed()) << "bf16 cache " << bf16_cache << ": " << ::testing::PrintToString(r.failures);
    ASSERT_EQ(r.phases.size(), 3u);
    EXPECT_EQ(r.phases[1].positions, 24);
    EXPECT_EQ(r.generated.size(), 48u);
  }
}

// The captured graph replays exactly the launches it captured.
TEST_P(CudaHybridEngineTest, GraphReplayEqualsDirectLaunches) {
  const auto ids = ids_below(V(), 30, 3);
  cuda::CudaHybridEngine graph(model_, {.context = 64, .use_graph = true});
  cuda::CudaHybridEngine direct(model_, {.context = 64, .use_graph = false});
  graph.prefill(std::span(ids).first(20));
  direct.prefill(std::span(ids).first(20));
  for (size_t i = 20; i < ids.size(); ++i) {
    const auto a = graph.decode(ids[i]);
    const std::vector<float> first(a.begin(), a.end());
    const auto b = direct.decode(ids[i]);
    ASSERT_TRUE(std::equal(first.begin(), first.end(), b.begin())) << "step " << i;
  }
}

// Rolling back onto the snapshot a prefill left is exact and replays nothing; rolling back between
// snapshots replays from the one before; benchmark noise cannot be rolled back into.
TEST_P(CudaHybridEngineTest, TruncateRestoresSnapshotsAndReplays) {
  const auto ids = ids_below(V(), 40, 4);
  cuda::CudaHybridEngine gpu(model_, exact_options(128));
  gpu.prefill(std::span(ids).first(24));
  const auto at24 = gpu.decode(ids[24]);
  const std::vector<float> first(at24.begin(), at24.end());
  for (size_t i = 25; i < 32; ++i) gpu.decode(ids[i]);
  EXPECT_EQ(gpu.snapshot_positions(), std::vector<int>({23, 24}));  // a long call: before its last token too
  gpu.truncate(24);
  EXPECT_EQ(gpu.replayed_tokens(), 0);
  const auto again = gpu.decode(ids[24]);
  EXPECT_TRUE(std::equal(first.begin(), first.end(), again.begin())) << "a rollback onto a snapshot is not exact";

  // Back to 10: no snapshot at or before it, so 10 tokens replay from zeros; then 11..17 decode like
  // the CPU engine's prefill of the same tokens.
  gpu.truncate(10);
  EXPECT_EQ(gpu.replayed_tokens(), 10);
  EXPECT_EQ(gpu.snapshot_positions(), std::vector<int>({10}));
  CpuHybridEngine cpu(model_, {.context = 128, .threads = 0, .bf16_kv_cache = true});
  std::vector<float> want;
  cpu.prefill_all_logits(std::span(ids).first(18), want);
  for (size_t i = 10; i < 18; ++i) {
    const auto got = gpu.decode(ids[i]);
    EXPECT_LE(relative_max_error(got, row(want, i, V())), kSameCacheTolerance) << "position " << i;
  }

  gpu.fill_cache_with_noise(50);
  for (float v : gpu.decode(7)) ASSERT_TRUE(std::isfinite(v));
  EXPECT_ERROR_HAS(gpu.truncate(49), "benchmark noise");
  EXPECT_EQ(gpu.position(), 51);
  gpu.truncate(50);  // onto the noise's own snapshot: fine
  EXPECT_EQ(gpu.position(), 50);
}

// save_state() copies the bf16 KV rows, the DeltaNet states and the rollback snapshots to the host;
// restore_state() puts them back: decoding goes on bit-for-bit, and a rollback within the restored
// sequence still lands on its snapshot (nothing replayed).
TEST_P(CudaHybridEngineTest, SavedSequenceRestoresBitForBitWithItsSnapshots) {
  const auto ids = ids_below(V(), 40, 8);
  cuda::CudaHybridEngine gpu(model_, exact_options(128));
  gpu.prefill(std::span(ids).first(16));
  gpu.prefill(std::span(ids).subspan(16, 8));
  for (size_t i = 24; i < 28; ++i) gpu.decode(ids[i]);
  const std::unique_ptr<EngineState> saved = gpu.save_state();
  ASSERT_NE(saved, nullptr);
  EXPECT_EQ(saved->position(), 28);
  std::vector<std::vector<float>> first;
  for (size_t i = 28; i < 36; ++i) {
    auto l = gpu.decode(ids[i]);
    first.emplace_back(l.begin(), l.end());
  }
  gpu.truncate(0);
  gpu.prefill(ids_below(V(), 30, 9));
  gpu.restore_state(*saved);
  EXPECT_EQ(gpu.position(), 28);
  EXPECT_EQ(gpu.snapshot_positions(), std::vector<int>({16, 24}));
  for (size_t i = 28; i < 36; ++i) {
    auto l = gpu.decode(ids[i]);
    ASSERT_EQ(std::vector<float>(l.begin(), l.end()), first[i - 28]) << "position " << i;
  }
  // Back to the end of the second prefill: its snapshot came back with the state.
  const int64_t replayed = gpu.replayed_tokens();
  gpu.restore_state(*saved);
  gpu.truncate(24);
  EXPECT_EQ(gpu.replayed_tokens(), replayed);
  CpuHybridEngine cpu(model_, {.context = 128, .threads = 0, .bf16_kv_cache = true});
  std::vector<float> want;
  cpu.prefill_all_logits(std::span(ids).first(30), want);
  for (size_t i = 24; i < 30; ++i)
    EXPECT_LE(relative_max_error(gpu.decode(ids[i]), row(want, i, V())), kSameCacheTolerance) << "position " << i;
}

// Through a state file (device -> host -> file -> host -> another engine's device): decoding goes on
// bit-for-bit, and the snapshots came along (a rollback onto one replays nothing).
TEST_P(CudaHybridEngineTest, StateFileRoundTripsBitForBitWithItsSnapshots) {
  const auto ids = ids_below(V(), 40, 18);
  cuda::CudaHybridEngine gpu(model_, exact_options(128));
  gpu.prefill(std::span(ids).first(16));
  gpu.prefill(std::span(ids).subspan(16, 8));
  for (size_t i = 24; i < 28; ++i) gpu.decode(ids[i]);
  const auto path = test::scratch_dir() / "seq.state";
  write_state_file(path, *model_, gpu, SavedSequence{std::vector<int32_t>(ids.begin(), ids.begin() + 28), gpu.save_state()});
  std::vector<std::vector<float>> first;
  for (size_t i = 28; i < 36; ++i) {
    auto l = gpu.decode(ids[i]);
    first.emplace_back(l.begin(), l.end());
  }
  const StateFile file = StateFile::open(path);
  EXPECT_EQ(file.state_format(), "cuda-qwen3.5-bf16");
  cuda::CudaHybridEngine fresh(model_, exact_options(64));
  fresh.restore_state(*file.load(*model_, fresh).state);
  EXPECT_EQ(fresh.snapshot_positions(), std::vector<int>({16, 24}));
  for (size_t i = 28; i < 36; ++i) {
    auto l = fresh.decode(ids[i]);
    ASSERT_EQ(std::vector<float>(l.begin(), l.end()), first[i - 28]) << "position " << i;
  }
  fresh.truncate(24);
  EXPECT_EQ(fresh.replayed_tokens(), 0);
  CpuHybridEngine cpu(model_, {.context = 128, .threads = 0, .bf16_kv_cache = true});
  EXPECT_ERROR_HAS(file.load(*model_, cpu), "another kind of engine");
}

// A bad id or a context overflow fails naming the problem and leaves the engine where it was.
TEST_P(CudaHybridEngineTest, BadInputLeavesTheEngineUsable) {
  const auto ids = ids_below(V(), 12, 5);
  cuda::CudaHybridEngine gpu(model_, exact_options(16));
  gpu.prefill(std::span(ids).first(8));
  EXPECT_ERROR_HAS(gpu.decode(V()), "out of range");
  EXPECT_ERROR_HAS(gpu.prefill(std::vector<int32_t>(9, 1)), "context");
  EXPECT_EQ(gpu.position(), 8);
  CpuHybridEngine cpu(model_, {.context = 16, .threads = 0, .bf16_kv_cache = true});
  std::vector<float> want;
  cpu.prefill_all_logits(std::span(ids).first(9), want);
  EXPECT_LE(relative_max_error(gpu.decode(ids[8]), row(want, 8, V())), kSameCacheTolerance);
}

// Greedy device sampling is the argmax of the logits the engine hands back; sampled draws stay in
// the vocabulary and repeat for the same seed and history.
TEST_P(CudaHybridEngineTest, SamplesOnTheDevice) {
  const auto ids = ids_below(V(), 20, 6);
  cuda::CudaHybridEngine gpu(model_, {.context = 64});
  const auto logits = gpu.prefill(ids);
  const std::vector<float> host(logits.begin(), logits.end());
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  ASSERT_TRUE(greedy.greedy());
  EXPECT_EQ(test::device_token(gpu, greedy, ids), test::argmax(host));
  SamplingParams sampled;
  sampled.temperature = 0.8f;
  sampled.top_k = 40;
  sampled.top_p = 0.9f;
  sampled.seed = 11;
  const auto a = test::device_token(gpu, sampled, ids), b = test::device_token(gpu, sampled, ids);
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a, b);
  EXPECT_TRUE(*a >= 0 && *a < V());
}

// Generator's prefix reuse (chat turns, server requests) on the device: a second prompt cut inside the
// first reply rolls the DeltaNet states back by replay, then generates what a fresh engine does with
// the whole prompt; device sampling, seeded, as well. (The reused KV entries came from decode GEMVs,
// the fresh ones from prefill GEMMs on the bf16 split: ~1e-5 relative apart, far below these random
// models' top-1 gaps.)
TEST_P(CudaHybridEngineTest, GeneratorPrefixReuseMatchesFreshEngine) {
  const auto ids = ids_below(V(), 48, 8);
  for (bool greedy : {true, false}) {
    GenerationRequest first;
    first.prompt.assign(ids.begin(), ids.begin() + 12);
    first.max_tokens = 10;
    first.sampling.temperature = greedy ? 0.0f : 0.9f;
    first.sampling.top_k = greedy ? 0 : 50;
    first.sampling.seed = 21;
    cuda::CudaHybridEngine gpu(model_, {.context = 96});
    Generator gen(gpu);
    const GenerationResult r1 = gen.run(first);
    ASSERT_EQ(r1.tokens.size(), 10u);

    GenerationRequest second = first;
    second.prompt.insert(second.prompt.end(), r1.tokens.begin(), r1.tokens.begin() + 4);  // cut into the reply
    second.prompt.insert(second.prompt.end(), ids.begin() + 40, ids.begin() + 46);
    const GenerationResult r2 = gen.run(second);
    EXPECT_EQ(r2.reused_tokens, 16) << "greedy " << greedy;
    EXPECT_GT(gpu.replayed_tokens(), 0) << "the cut inside the reply needs a replay";

    cuda::CudaHybridEngine fresh_engine(model_, {.context = 96});
    Generator fresh(fresh_engine);
    const GenerationResult want = fresh.run(second);
    EXPECT_EQ(want.reused_tokens, 0);
    EXPECT_EQ(r2.tokens, want.tokens) << "greedy " << greedy;
  }
}

INSTANTIATE_TEST_SUITE_P(Presets, CudaHybridEngineTest, ::testing::Values("tiny-hybrid", "tiny-hybrid-gqa"),
                         [](const auto& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

// --device cuda picks this engine for a hybrid model; a decode kernel it does not know is refused by name.
TEST(CudaHybridEngine, CreateEngineChoosesIt) {
  MQ_REQUIRE_GPU_AND_CUBLAS();
  auto model = test::tiny_hybrid_model("tiny-hybrid");
  auto engine = create_engine(model, {.device = "cuda", .context = 32, .threads = 1, .quiet = true});
  EXPECT_NE(dynamic_cast<cuda::CudaHybridEngine*>(engine.get()), nullptr) << engine->device_name();
  EXPECT_NE(engine->device_name().find("Qwen3.5 hybrid"), std::string::npos) << engine->device_name();
  // The benchmark's byte count: the same KV and state traffic per step as the CPU engine's, in bf16 / fp32.
  CpuHybridEngine cpu(model, {.context = 32, .threads = 1});
  EXPECT_EQ(engine->state_bytes_per_step(), cpu.state_bytes_per_step());
  EXPECT_EQ(2 * engine->kv_bytes_per_token(), cpu.kv_bytes_per_token());
  // The megakernel where it applies (hybrid_megakernel_test.cpp), else the reason in the note.
  cuda::CudaHybridEngine per_op(model, {.context = 32, .decode_kernel = cuda::DecodeKernel::PerOp});
  EXPECT_EQ(per_op.decode_kernel_note(), "per-op (requested)");
  EXPECT_NE(per_op.device_name().find("decode: per-op"), std::string::npos) << per_op.device_name();
}

// Qwen3.5-0.8B's shapes (24 layers: 18 DeltaNet with 16 heads of 128 x 128, 6 gated attention with
// head_dim 256, GQA 4, rotary 64): verify_engine's three phases against the CPU engine.
TEST(CudaHybridFullModel, Qwen35_08bMatchesCpuEngine) {
  MQ_REQUIRE_GPU_AND_CUBLAS();
  MQ_SKIP_IF_EMULATED("24 layers of Qwen3.5-0.8B take hours per token");
  auto model = test::qwen35_full_model();
  CpuHybridEngine cpu(model, {.context = 256, .threads = 0});
  cuda::CudaHybridEngine gpu(model, {.context = 256});
  VerifyOptions options;
  options.tokens = ids_below(model->config.vocab_size, 160, 7);
  options.prefill_tokens = 128;
  options.generate_tokens = 64;
  const VerifyReport r = verify_engine(cpu, gpu, options);
  print_report(r);
  EXPECT_TRUE(r.passed()) << ::testing::PrintToString(r.failures);
}

}  // namespace
}  // namespace megaqwen
