// The decode megakernel on Qwen3.5 hybrids (the DeltaNet stages A' B' C' and the gated-attention
// variants of A B C), run whole by the simt emulator with every CTA resident, at CTA counts the
// engine tests (16 emulated SMs) do not reach: fewer CTAs than DeltaNet items and attention items (a
// CTA runs several, in turn), CTAs without rows of a matrix, and Qwen3.5-0.8B's real widths (head_dim
// 256 with 64 rotary dims, 16 DeltaNet heads of 128 x 128 in 128 items) on its first four layers
// ([DeltaNet x 3, attention]). The CPU-only counterpart of tests/cuda/hybrid_megakernel_test.cpp; the
// file is built again into test_simt_races, where every access is judged against the PTX orderings.
//
// Checked per run: every step's raw logits against CpuHybridEngine with a bf16 KV cache fed the same
// tokens (kSameCacheTolerance 1e-2, tests/cuda/cuda_hybrid_engine_test.cpp explains the reference),
// greedy tokens the argmax of the kernel's own logits, the DeltaNet stages' counters, and the
// recurrent and conv states the kernel leaves against the CPU engine's after the same tokens.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "megaqwen/cuda/megakernel/megakernel.cuh"  // through shim/: the emulator
#include "megaqwen/engine/cpu_gated_delta_net.h"
#include "megaqwen/engine/cpu_ops.h"
#include "megaqwen/engine/cpu_qwen35_engine.h"
#include "megaqwen/model/gpu_layout.h"
#include "megaqwen/model/model.h"
#include "megaqwen/model/synth.h"
#include "test_paths.h"

namespace megaqwen {
namespace {

namespace mk = cuda::mk;
using simt::CopyTiming;
using simt::Order;
using TinyHybrid = mk::ConfigTinyHybrid;
using TinyHybridGqa = mk::ConfigTinyHybridGqa;
using Wide08 = mk::HybridConfig<1024, 4, 8, 2, 256, 3584, 64, 16, 16, 128, 128, 4>;  // Qwen3.5-0.8B's first 4 layers

constexpr int kVocab = 4099;
constexpr int kContext = 64;
constexpr double kSameCacheTolerance = 1e-2;

template <class C>
const char* preset_of() {
  return std::is_same_v<C, TinyHybrid> ? "tiny-hybrid" : std::is_same_v<C, TinyHybridGqa> ? "tiny-hybrid-gqa" : "qwen3.5-0.8b";
}

template <class C>
std::shared_ptr<const Model> model_for() {
  static std::shared_ptr<const Model> model = [] {
    const auto dir = test::process_temp_dir(std::string("megaqwen-test-simt-hybrid-mk-") + preset_of<C>());
    SynthOptions o;
    o.preset = preset_of<C>();
    o.vocab_size = kVocab;
    o.num_layers = C::L;
    o.out_dir = dir;
    write_synthetic_model(o);
    std::shared_ptr<const Model> m = load_model(dir.string());
    std::filesystem::remove_all(dir);  // the weights stay mapped
    return m;
  }();
  return model;
}

// The model in the GPU layout (model/gpu_layout.h, as upload_hybrid_weights), with zeroed caches and
// states, in host memory the emulated kernel reads and writes.
template <class C>
struct HostHybrid {
  std::vector<std::vector<uint16_t>> mats;
  std::vector<std::vector<float>> vecs;
  std::vector<std::vector<uint16_t>> k_cache, v_cache;
  std::vector<std::vector<float>> state, conv_state;
  std::vector<mk::LayerWeights> layers;
  std::vector<uint16_t> embed;
  std::vector<float> final_norm, inv_freq;
  uint64_t delta_layers = 0;

  explicit HostHybrid(const Model& m) {
    const ModelConfig& c = m.config;
    const Qwen35Weights& w = *m.qwen35;
    auto mat = [&](std::vector<uint16_t> v) { return mats.emplace_back(std::move(v)).data(); };
    auto vec = [&](std::vector<float> v) { return vecs.emplace_back(std::move(v)).data(); };
    mats.reserve(9 * w.layers.size());
    vecs.reserve(8 * w.layers.size());
    k_cache.reserve(w.layers.size()), v_cache.reserve(w.layers.size());
    state.reserve(w.layers.size()), conv_state.reserve(w.layers.size());
    for (size_t l = 0; l < w.layers.size(); ++l) {
      const Qwen35LayerWeights& L = w.layers[l];
      mk::LayerWeights lw{};
      lw.input_norm = vec(zero_centered_norm_f32(L.input_norm));
      lw.post_norm = vec(zero_centered_norm_f32(L.post_norm));
      lw.gate_up = mat(interleaved_rows_bf16(L.gate, L.up));
      lw.down = mat(matrix_bf16(L.down));
      lw.down_t = mat(transposed_bf16(matrix_bf16(L.down), size_t(L.down.rows), size_t(L.down.cols)));
      if (L.type == LayerType::FullAttention) {
        lw.qkv = mat(gated_attention_qgkv_bf16(L.attention, c.num_heads, c.head_dim));
        lw.o = mat(matrix_bf16(L.attention.o));
        lw.q_norm = vec(zero_centered_norm_f32(L.attention.q_norm));
        lw.k_norm = vec(zero_centered_norm_f32(L.attention.k_norm));
        lw.k_cache = k_cache.emplace_back(size_t(kContext) * C::KV, uint16_t(0xffff)).data();  // bf16 NaN: unwritten
        lw.v_cache = v_cache.emplace_back(size_t(kContext) * C::KV, uint16_t(0xffff)).data();
      } else {
        lw.in_proj = mat(delta_net_in_proj_bf16(L.linear));
        lw.conv = mat(matrix_bf16(L.linear.conv));
        lw.A_log = vec(vector_f32(L.linear.A_log));
        lw.dt_bias = vec(vector_f32(L.linear.dt_bias));
        lw.gated_norm = vec(vector_f32(L.linear.norm));
        lw.out = mat(matrix_bf16(L.linear.out));
        lw.state = state.emplace_back(size_t(C::NV) * C::DK * C::DV, 0.0f).data();
        lw.conv_state = conv_state.emplace_back(size_t(C::CONV_K - 1) * C::CD, 0.0f).data();
        delta_layers |= uint64_t(1) << l;
      }
      layers.push_back(lw);
    }
    embed = matrix_bf16(w.embed);
    final_norm = zero_centered_norm_f32(w.final_norm);
    inv_freq = cpu::rope_inv_freq(c.rotary_dim, c.rope_theta);
  }
};

struct HybridRun {
  std::vector<int32_t> tokens;
  std::vector<float> logits;  // [tokens, V]
  int finished = 0;
};

// A greedy launch of `max_tokens` from position 0 on `ctas` CTAs; `host` keeps the states it leaves.
// flagged: x, xmid and act as flagged words (Params::x_words), stale (epoch 0, NaN) at the start.
// probe: Params::probe (timing probes; the counters are signalled as usual). one_stage: the
// one-stage MLP (Params::x_fixed, poisoned at the start).
template <class C>
HybridRun run_hybrid(HostHybrid<C>& host, int ctas, int first, int max_tokens, simt::Options emu, bool flagged,
                     uint32_t probe = 0, bool one_stage = false) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const size_t L = C::L, H = C::H;
  std::vector<float> x((L + 1) * H, nan), xmid(L * H, nan), qkv(L * C::kQkvRowFloats, nan),
      attn(L * C::kAttnRowFloats, nan), act(L * C::I, nan), partial_o(L * C::HEADS * mk::kMaxSplits * C::D, nan),
      partial_ml(L * C::HEADS * mk::kMaxSplits * 2, nan), best_v(size_t(ctas), nan),
      logits(size_t(max_tokens) * kVocab, nan);
  std::vector<int32_t> best_i(size_t(ctas), -7), tokens(size_t(max_tokens), -7);
  const uint64_t stale = mk::flagged_word(nan, 0);
  std::vector<uint64_t> x_words(flagged ? (L + 1) * H : 0, stale), xmid_words(flagged ? L * H : 0, stale),
      act_words(flagged ? L * C::I : 0, stale);
  // The one-stage MLP's sums as the runner leaves them: token 0's half zeroed, the other poisoned.
  std::vector<unsigned long long> x_fixed(one_stage ? 2 * (L + 1) * H : 0, 0x7ff00000deadbeefull);
  std::fill(x_fixed.begin(), x_fixed.begin() + std::ptrdiff_t(x_fixed.size() / 2), 0ull);
  const mk::CounterLayout lay{C::L, C::GROUPS};
  std::vector<uint32_t> counters(size_t(lay.words()), 0);
  auto mailbox = std::make_unique<mk::Mailbox>();
  mailbox->stop = 0;
  mailbox->finished = 0;
  for (int i = 0; i < mk::kLaunchTokenCap; ++i) mailbox->tokens[i] = -1;

  const Model& model = *model_for<C>();
  mk::Params p{};
  std::vector<mk::LayerWeights> layers = host.layers;  // down_t only for the one-stage MLP, as the runner
  for (mk::LayerWeights& lw : layers)
    if (!one_stage) lw.down_t = nullptr;
  p.layers = layers.data();
  p.embed = host.embed.data();
  p.lm_head = host.embed.data();  // tied, as the presets
  p.final_norm = host.final_norm.data();
  p.inv_freq = host.inv_freq.data();
  p.delta_layers = host.delta_layers;
  p.context = kContext;
  p.x = x.data();
  p.xmid = xmid.data();
  p.qkv = qkv.data();
  p.attn = attn.data();
  p.act = act.data();
  p.x_fixed = one_stage ? x_fixed.data() : nullptr;
  p.x_words = flagged ? x_words.data() : nullptr;
  p.xmid_words = flagged ? xmid_words.data() : nullptr;
  p.act_words = flagged ? act_words.data() : nullptr;
  p.qkv_words = nullptr;  // the runner's choice for the hybrids (their DeltaNet layers keep QkvReady)
  p.partial_o = partial_o.data();
  p.partial_ml = partial_ml.data();
  p.best_v = best_v.data();
  p.best_i = best_i.data();
  p.counters = counters.data();
  p.tokens = tokens.data();
  p.mailbox = mailbox.get();
  p.logits_out = logits.data();
  p.first_token = first;
  p.pos0 = 0;
  p.max_tokens = max_tokens;
  p.splits = mk::attention_splits(ctas, C::KV_HEADS);
  p.merge_splits = mk::kMergeInOProjMaxSplits;  // as the runner; the hybrids merge by the last split anyway
  p.vocab = kVocab;
  p.eps = float(model.config.rms_norm_eps);
  p.l2_eps = float(cpu::kDeltaNetL2NormEps);
  p.attn_scale_log2 = float(1.4426950408889634 / std::sqrt(double(C::D)));
  p.temperature = 1.0f;
  p.probe = probe;

  emu.coresident = true;
  emu.dynamic_shared_bytes = C::kSmemBytes;
  emu.stack_bytes = 64 * 1024;
  simt::launch(dim3(unsigned(ctas)), dim3(mk::kThreads), [&] { mk::megakernel_body<C>(p, simt::dynamic_shared<uint8_t>()); },
               emu);
  HybridRun r;
  int n = 0;
  while (n < max_tokens && mailbox->tokens[n] >= 0) r.tokens.push_back(int32_t(mailbox->tokens[n++]));
  r.logits.assign(logits.begin(), logits.begin() + std::ptrdiff_t(size_t(n) * kVocab));
  r.finished = mailbox->finished;
  // Every counter of a DeltaNet layer's stages at its per-token increment times the tokens run.
  for (int l = 0; l < C::L; ++l) {
    if (!((host.delta_layers >> l) & 1u)) continue;
    for (int g = 0; g < C::NK; ++g)
      EXPECT_EQ(counters[size_t(lay.word(mk::Counter::QkvReady, l, g))], uint32_t(n * mk::delta_group_count<C>()))
          << "layer " << l << " group " << g;
    EXPECT_EQ(counters[size_t(lay.word(mk::Counter::AttnReady, l))], uint32_t(n * C::DELTA_ITEMS)) << "layer " << l;
    EXPECT_EQ(counters[size_t(lay.word(mk::Counter::ODone, l))], flagged ? 0u : uint32_t(n * ctas)) << "layer " << l;
  }
  for (int l = 0; l < C::L; ++l) {
    EXPECT_EQ(counters[size_t(lay.word(mk::Counter::MlpDone, l))], flagged || one_stage ? 0u : uint32_t(n * ctas))
        << "layer " << l;
    EXPECT_EQ(counters[size_t(lay.word(mk::Counter::DownDone, l))], flagged && !one_stage ? 0u : uint32_t(n * ctas))
        << "layer " << l;
  }
  return r;
}

int32_t argmax_of(const float* l) {
  int32_t best = 0;
  for (int i = 1; i < kVocab; ++i)
    if (l[i] > l[best]) best = i;
  return best;
}

double rel_error(const float* a, std::span<const float> b) {
  double diff = 0, ref = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    diff = std::max(diff, std::isfinite(a[i]) ? std::abs(double(a[i]) - double(b[i])) : INFINITY);
    ref = std::max(ref, std::abs(double(b[i])));
  }
  return ref > 0 ? diff / ref : diff;
}

template <class C>
void run_and_check(int ctas, int max_tokens, simt::Options emu, bool flagged = false, uint32_t probe = 0,
                   bool one_stage = false) {
  SCOPED_TRACE(std::string(preset_of<C>()) + ", " + std::to_string(ctas) + " CTAs" + (flagged ? ", flagged vectors" : "") +
               (probe ? ", probe " + std::to_string(probe) : "") + (one_stage ? ", one-stage MLP" : ""));
  const auto model = model_for<C>();
  HostHybrid<C> host(*model);
  const int first = 17;
  const HybridRun r = run_hybrid(host, ctas, first, max_tokens, emu, flagged, probe, one_stage);
  ASSERT_EQ(r.tokens.size(), size_t(max_tokens));
  EXPECT_EQ(r.finished, 1);
  CpuHybridEngine cpu(model, {.context = kContext, .threads = 1, .bf16_kv_cache = true});
  int32_t token = first;
  for (size_t t = 0; t < r.tokens.size(); ++t) {
    EXPECT_EQ(r.tokens[t], argmax_of(r.logits.data() + t * kVocab)) << "step " << t;
    EXPECT_LE(rel_error(r.logits.data() + t * kVocab, cpu.decode(token)), kSameCacheTolerance) << "step " << t;
    token = r.tokens[t];
  }
  // The states the kernel leaves (it fed `first` and every drawn token but the last) against the CPU
  // engine's after the same tokens: the loop above fed it one more, the last drawn token; so compare
  // with a fresh engine fed exactly the kernel's.
  CpuHybridEngine same(model, {.context = kContext, .threads = 1, .bf16_kv_cache = true});
  same.decode(first);
  for (size_t t = 0; t + 1 < r.tokens.size(); ++t) same.decode(r.tokens[t]);
  const size_t S = size_t(C::NV) * C::DK * C::DV, K = size_t(C::CONV_K - 1) * C::CD;
  ASSERT_EQ(same.recurrent_states().size(), host.state.size() * S);
  for (size_t i = 0; i < host.state.size(); ++i) {
    EXPECT_LE(rel_error(host.state[i].data(), same.recurrent_states().subspan(i * S, S)), 1e-3)
        << "DeltaNet layer " << i << ": recurrent state";
    EXPECT_LE(rel_error(host.conv_state[i].data(), same.conv_states().subspan(i * K, K)), 1e-3)
        << "DeltaNet layer " << i << ": conv state";
  }
}

simt::Options emulation(Order threads, Order blocks, CopyTiming copies, uint64_t seed) {
  simt::Options o;
  o.skew = 0.9;
  o.threads = threads;
  o.blocks = blocks;
  o.copies = copies;
  o.seed = seed;
  return o;
}

// 3 CTAs: every CTA runs several DeltaNet items and attention splits in turn; 5 and 16: ragged row
// slices, CTAs without items. The last two runs with flagged vectors (stage C' writes xmid's words).
TEST(SimtHybridMegakernel, TinyHybridsMatchTheCpuEngine) {
  run_and_check<TinyHybrid>(3, 6, emulation(Order::Random, Order::Random, CopyTiming::AtWait, 1));
  run_and_check<TinyHybrid>(16, 4, emulation(Order::Forward, Order::Reverse, CopyTiming::AtIssue, 2));
  run_and_check<TinyHybridGqa>(5, 6, emulation(Order::Random, Order::Random, CopyTiming::AtWait, 3));
  run_and_check<TinyHybrid>(3, 6, emulation(Order::Random, Order::Random, CopyTiming::AtWait, 5), true);
  run_and_check<TinyHybridGqa>(5, 4, emulation(Order::Random, Order::Random, CopyTiming::AtIssue, 6), true);
}

// The timing probes on the hybrid stages (MEGAQWEN_MK_PROBE). On one CTA every input wait is met
// before it is reached, so without the waits the run is still the CPU engine's, states included;
// on several the probes still draw every token (skipping the waits there races by design: not in the
// race build).
TEST(SimtHybridMegakernel, TimingProbesRunEveryToken) {
  run_and_check<TinyHybrid>(1, 4, emulation(Order::Random, Order::Random, CopyTiming::AtWait, 7), false, mk::kProbeNoWaits);
  const auto model = model_for<TinyHybrid>();
#if defined(SIMT_RACE_CHECK)
  const std::vector<uint32_t> probes = {mk::kProbeNoWeights};
#else
  const std::vector<uint32_t> probes = {mk::kProbeNoWeights, mk::kProbeNoWaits, mk::kProbeAll};
#endif
  for (uint32_t probe : probes) {
    SCOPED_TRACE("probe " + std::to_string(probe));
    HostHybrid<TinyHybrid> host(*model);
    const HybridRun r =
        run_hybrid(host, 4, 17, 4, emulation(Order::Random, Order::Random, CopyTiming::AtWait, 8 + probe), false, probe);
    ASSERT_EQ(r.tokens.size(), 4u);
    for (int32_t id : r.tokens) EXPECT_TRUE(id >= 0 && id < kVocab) << id;
    EXPECT_EQ(r.finished, 1);
  }
}

// The one-stage MLP (MEGAQWEN_MK_MLP=one-stage) after both mixers: tokens, logits and the states
// against the CPU engine, on ragged unit slices (3 and 5 CTAs) and with CTAs that own no units
// (tiny-hybrid-gqa's 96 units on 64 CTAs: 2 each for the first 48, none for the other 16), and with
// flagged vectors.
TEST(SimtHybridMegakernel, OneStageMlpMatchesTheCpuEngine) {
  run_and_check<TinyHybrid>(3, 6, emulation(Order::Random, Order::Random, CopyTiming::AtWait, 11), false, 0, true);
  run_and_check<TinyHybridGqa>(5, 5, emulation(Order::Forward, Order::Reverse, CopyTiming::AtIssue, 12), false, 0, true);
  run_and_check<TinyHybridGqa>(64, 3, emulation(Order::Random, Order::Random, CopyTiming::AtWait, 13), false, 0, true);
  // With flagged vectors: xmid polled, the sums behind DownDone.
  run_and_check<TinyHybrid>(4, 5, emulation(Order::Random, Order::Random, CopyTiming::AtIssue, 14), true, 0, true);
  run_and_check<TinyHybridGqa>(6, 4, emulation(Order::Random, Order::Random, CopyTiming::AtWait, 15), true, 0, true);
}

// Qwen3.5-0.8B's widths, first four layers: 128 DeltaNet items on 20 CTAs (6 or 7 each), head_dim 256.
TEST(SimtHybridMegakernel, TheQwen35Widths) {
  run_and_check<Wide08>(20, 2, emulation(Order::Random, Order::Random, CopyTiming::AtWait, 4));
}

}  // namespace
}  // namespace megaqwen
