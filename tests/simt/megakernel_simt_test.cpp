// The whole decode megakernel (src/megaqwen/cuda/megakernel, built with MEGAQWEN_SIMT) executed on the
// host by the simt emulator with every CTA resident at once (simt::Options::coresident): the real
// stages, counters, weight ring (mbarriers and bulk copies, emulated with Hopper's rules checked) and
// token selection, on synthetic models with a 4,099-token vocabulary: the ConfigTinyTest shape (2
// layers, hidden 64, 4 / 2 heads of 128, intermediate 128), and the Qwen3-0.6B and 4B widths with one
// layer, so CPU-only CI runs what would otherwise wait for a GPU. The CPU-only counterpart of tests/cuda/megakernel_test.cpp.
//
// Checked, per run: every step's raw logits (Params::logits_out) against the CPU engine fed the same
// tokens (max |a - b| / max |b| <= 2e-2: the kernel's KV cache is bf16, the CPU engine's fp32; the
// GPU tests use the same bound); greedy tokens equal the argmax of the kernel's own logits (lowest id
// on ties); the mailbox holds exactly the drawn tokens (-1 after them) and `finished`; every counter
// ends at exactly its per-token increment times the tokens run (a double or missing signal shows);
// nothing written outside the cache rows of the run's positions.
// Runs cover 3, 4, 5 and 8 CTAs (1, 2 and 4 attention splits, CTAs without attention work or rows),
// positions 0 and deep ones on a noise-filled cache (several splits merged), thread and block orders
// forward / random, bulk copies landing at issue or only at the first wait, the MEGAQWEN_MK_ABLATE
// variants (bit-identical results), eos, the budget, the host's stop request, and the sampling
// modes: Gumbel-max and the filtered draw (top-k / top-p / min-p) with penalties, each token compared
// with the exact host draw from the kernel's own logits (simt/host_draw.h).
// What the emulator alone cannot show: memory-ordering bugs (its threads interleave only at
// synchronization points, so every access is sequentially consistent); this file is built a second
// time into test_simt_races, where the race checker (simt/race_check.h) judges every access of every
// run against the PTX orderings. Timing needs the GPU tests.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "megaqwen/cuda/megakernel/megakernel.cuh"  // through shim/: the emulator
#include "megaqwen/engine/cpu_engine.h"
#include "megaqwen/engine/cpu_ops.h"
#include "megaqwen/model/gpu_layout.h"
#include "megaqwen/model/model.h"
#include "megaqwen/model/synth.h"
#include "megaqwen/sampling/sampler.h"
#include "megaqwen/util/bf16.h"
#include "simt/host_draw.h"
#include "test_paths.h"
#if defined(SIMT_RACE_CHECK)
#include "simt/race_check.h"
#endif

namespace megaqwen {
namespace {

namespace mk = cuda::mk;
using Tiny = mk::ConfigTinyTest;
// The real models' widths with one layer (the kernel's code is the same for any layer count): 0.6B
// (G = 2, multi-chunk q|k|v and gate/up slices) and 4B (G = 4, 32 query heads, the widest rows).
using Wide06 = mk::Config<1024, 1, 16, 8, 128, 3072>;
using Wide4B = mk::Config<2560, 1, 32, 8, 128, 9728>;
using simt::CopyTiming;
using simt::Order;

constexpr int kVocab = 4099;  // odd: ragged CTA slices; > 512 rows per CTA: multi-chunk LM-head slices
constexpr int kContext = 512;
constexpr double kLogitTolerance = 2e-2;

// Synthetic models of the configs' shapes with a small vocabulary (the LM head dominates the
// emulator's time otherwise): the tiny preset, or a real preset cut to C::L layers.
template <class C>
std::shared_ptr<const Model> model_for() {
  static std::shared_ptr<const Model> model = [] {
    const char* preset = std::is_same_v<C, Tiny> ? "tiny" : std::is_same_v<C, Wide06> ? "qwen3-0.6b" : "qwen3-4b";
    const auto dir = test::process_temp_dir(std::string("megaqwen-test-simt-mk-") + preset);
    SynthOptions o;
    o.preset = preset;
    o.vocab_size = kVocab;
    o.num_layers = C::L;
    o.out_dir = dir;
    write_synthetic_model(o);
    std::shared_ptr<const Model> m = load_model(dir.string());
    std::filesystem::remove_all(dir);  // the weights stay mapped
    const ModelConfig& c = m->config;
    EXPECT_TRUE(c.hidden_size == C::H && c.num_layers == C::L && c.num_heads == C::HEADS && c.num_kv_heads == C::KV_HEADS &&
                c.head_dim == C::D && c.intermediate_size == C::I)
        << preset << " does not have the config's shape";
    return m;
  }();
  return model;
}

// The model's weights in the GPU layout (model/gpu_layout.h), in host memory the kernel reads.
struct HostWeights {
  std::vector<std::vector<uint16_t>> qkv, o, gate_up, down, down_t;
  std::vector<std::vector<float>> input_norm, post_norm, q_norm, k_norm;
  std::vector<mk::LayerWeights> layers;
  std::vector<uint16_t> embed;
  std::vector<float> final_norm, inv_freq;

  explicit HostWeights(const Model& m) {
    const Qwen3Weights& w = m.weights;
    for (const Qwen3LayerWeights& l : w.layers) {
      qkv.push_back(stacked_qkv_bf16(l));
      o.push_back(matrix_bf16(l.o));
      gate_up.push_back(interleaved_gate_up_bf16(l));
      down.push_back(matrix_bf16(l.down));
      down_t.push_back(transposed_bf16(down.back(), size_t(l.down.rows), size_t(l.down.cols)));
      input_norm.push_back(vector_f32(l.input_norm));
      post_norm.push_back(vector_f32(l.post_norm));
      q_norm.push_back(vector_f32(l.q_norm));
      k_norm.push_back(vector_f32(l.k_norm));
    }
    for (size_t i = 0; i < w.layers.size(); ++i)
      layers.push_back({qkv[i].data(), o[i].data(), gate_up[i].data(), down[i].data(), input_norm[i].data(),
                        post_norm[i].data(), q_norm[i].data(), k_norm[i].data()});
    embed = matrix_bf16(w.embed);
    final_norm = vector_f32(w.final_norm);
    inv_freq = cpu::rope_inv_freq(m.config.head_dim, m.config.rope_theta);
  }
};

// The KV cache values CpuEngine::fill_cache_with_noise writes (fp32), here rounded to bf16.
template <class C>
void fill_noise_like_cpu(std::vector<uint16_t>& k, std::vector<uint16_t>& v, int n) {
  uint32_t state = 0x12345678u;
  for (int l = 0; l < C::L; ++l)
    for (size_t i = 0; i < size_t(n) * C::KV; ++i) {
      const size_t at = size_t(l) * kContext * C::KV + i;
      state = state * 1664525u + 1013904223u;
      k[at] = f32_to_bf16(float(int32_t(state)) * 0x1.0p-31f);
      v[at] = f32_to_bf16(float(int32_t(state * 747796405u)) * 0x1.0p-31f);
    }
}

SamplingParams greedy() {
  SamplingParams p;
  p.temperature = 0;
  return p;
}

struct RunSpec {
  int ctas = 4;
  int pos0 = 0;         // > 0: the cache holds noise for positions [0, pos0)
  int first = 17;       // token fed at pos0
  int max_tokens = 6;
  std::vector<int32_t> eos;
  bool stop_requested = false;  // the host's stop flag is set before the launch
  SamplingParams sampling = greedy();
  std::vector<int32_t> history; // penalties count these
  uint32_t ablate = 0;
  int merge_splits = mk::kMergeInOProjMaxSplits;  // Params::merge_splits, as the runner's default
  bool flagged = false;  // x, xmid and act as flagged words (Params::x_words; MEGAQWEN_MK_VECTORS=flagged)
  bool one_stage = false;  // the one-stage MLP (Params::x_fixed, down_t; MEGAQWEN_MK_MLP=one-stage)
  uint32_t probe = 0;    // Params::probe (MEGAQWEN_MK_PROBE): timing probes, meaningless tokens
  simt::Options emu;
};

struct RunResult {
  std::vector<int32_t> tokens;  // the mailbox's drawn tokens, in order
  std::vector<float> logits;    // [tokens, V]
  std::vector<uint32_t> counters;
  std::vector<int32_t> mailbox_tail;  // mailbox slots after the drawn tokens
  int finished = 0;
  bool cache_outside_untouched = true;
};

// The raw logits of draw t.
std::vector<float> step_logits(const RunResult& r, size_t t) {
  return std::vector<float>(r.logits.begin() + std::ptrdiff_t(t * kVocab), r.logits.begin() + std::ptrdiff_t((t + 1) * kVocab));
}

simt::Options emulation(Order threads, Order blocks, CopyTiming copies, uint64_t seed = 1, double skew = 0.9) {
  simt::Options o;
  o.skew = skew;
  o.threads = threads;
  o.blocks = blocks;
  o.copies = copies;
  o.seed = seed;
  return o;
}

// Builds the workspace (NaN-poisoned, as the GPU tests' buffers), launches the kernel on the
// emulator and collects what the host would see.
template <class C = Tiny>
RunResult run_megakernel(const RunSpec& s) {
  const std::shared_ptr<const Model> model = model_for<C>();
  static const HostWeights w(*model);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const size_t L = C::L, H = C::H, Q = C::Q, KV = C::KV, I = C::I, V = kVocab;
  std::vector<float> x((L + 1) * H, nan), xmid(L * H, nan), qkv(L * C::kQkvRowFloats, nan), attn(L * Q, nan), act(L * I, nan),
      partial_o(L * C::HEADS * mk::kMaxSplits * C::D, nan), partial_ml(L * C::HEADS * mk::kMaxSplits * 2, nan),
      best_v(size_t(s.ctas), nan), logits(size_t(s.max_tokens) * V, nan), sel_vals(V, nan),
      cand_v(size_t(s.ctas) * mk::kMaxTopK, nan);
  std::vector<int32_t> best_i(size_t(s.ctas), -7), tokens(size_t(s.max_tokens), -7), cand_i(cand_v.size(), -7),
      cand_n(size_t(s.ctas), -7), counts(V, 0);
  const mk::CounterLayout lay{C::L, C::KV_HEADS};
  std::vector<uint32_t> counters(size_t(lay.words()), 0);
  // Flagged words as the runner leaves them before a launch (epoch 0), with NaN values: a word taken
  // before its token's store shows in the logits. The float vectors stay NaN: never read then.
  const uint64_t stale = mk::flagged_word(nan, 0);
  std::vector<uint64_t> x_words(s.flagged ? (L + 1) * H : 0, stale), xmid_words(s.flagged ? L * H : 0, stale),
      act_words(s.flagged ? L * I : 0, stale), qkv_words(s.flagged ? L * C::kQkvRowFloats : 0, stale),
      partial_o_words(s.flagged ? partial_o.size() : 0, stale), partial_ml_words(s.flagged ? partial_ml.size() : 0, stale),
      attn_words(s.flagged ? L * Q : 0, stale);
  // The cache: noise below pos0, bf16 NaN (0xffff) elsewhere, so a read of an unwritten row shows.
  std::vector<uint16_t> k_cache(L * kContext * KV, 0xffff), v_cache(L * kContext * KV, 0xffff);
  if (s.pos0 > 0) fill_noise_like_cpu<C>(k_cache, v_cache, s.pos0);
  auto mailbox = std::make_unique<mk::Mailbox>();
  mailbox->stop = s.stop_requested ? 1 : 0;
  mailbox->finished = 0;
  for (int i = 0; i < mk::kLaunchTokenCap; ++i) mailbox->tokens[i] = -1;

  // The one-stage MLP's fixed-point sums as the runner leaves them: the half for token 0 zeroed, the
  // other poisoned, so a token that used it without the kernel's own zeroing shows in the logits.
  std::vector<unsigned long long> x_fixed(s.one_stage ? 2 * (L + 1) * H : 0, 0x7ff00000deadbeefull);
  std::fill(x_fixed.begin(), x_fixed.begin() + std::ptrdiff_t(x_fixed.size() / 2), 0ull);
  if (s.one_stage) {
    EXPECT_LE(mk::one_stage_units_per_cta(C::I, s.ctas), mk::OneStageMlp<C>::kMaxUnits) << "the runner refuses this grid";
  }
  std::vector<mk::LayerWeights> layers = w.layers;
  for (size_t l = 0; l < L; ++l) {
    layers[l].k_cache = k_cache.data() + l * kContext * KV;
    layers[l].v_cache = v_cache.data() + l * kContext * KV;
    layers[l].down_t = s.one_stage ? w.down_t[l].data() : nullptr;
  }
  mk::Params p{};
  p.layers = layers.data();
  p.embed = w.embed.data();
  p.lm_head = w.embed.data();  // tied, as the tiny preset
  p.final_norm = w.final_norm.data();
  p.inv_freq = w.inv_freq.data();
  p.context = kContext;
  p.x = x.data();
  p.xmid = xmid.data();
  p.qkv = qkv.data();
  p.attn = attn.data();
  p.act = act.data();
  p.x_fixed = s.one_stage ? x_fixed.data() : nullptr;
  p.x_words = s.flagged ? x_words.data() : nullptr;
  p.xmid_words = s.flagged ? xmid_words.data() : nullptr;
  p.act_words = s.flagged ? act_words.data() : nullptr;
  p.qkv_words = s.flagged ? qkv_words.data() : nullptr;
  p.partial_o_words = s.flagged ? partial_o_words.data() : nullptr;
  p.partial_ml_words = s.flagged ? partial_ml_words.data() : nullptr;
  p.attn_words = s.flagged ? attn_words.data() : nullptr;
  p.partial_o = partial_o.data();
  p.partial_ml = partial_ml.data();
  p.best_v = best_v.data();
  p.best_i = best_i.data();
  p.counters = counters.data();
  p.tokens = tokens.data();
  p.mailbox = mailbox.get();
  p.logits_out = logits.data();
  p.first_token = s.first;
  p.pos0 = s.pos0;
  p.max_tokens = s.max_tokens;
  p.splits = mk::attention_splits(s.ctas, C::KV_HEADS);
  p.merge_splits = s.merge_splits;
  p.vocab = kVocab;
  p.n_eos = int(s.eos.size());
  for (size_t i = 0; i < s.eos.size(); ++i) p.eos[i] = s.eos[i];
  p.eps = float(model->config.rms_norm_eps);
  p.attn_scale_log2 = float(1.4426950408889634 / std::sqrt(double(C::D)));
  p.ablate = s.ablate;
  p.probe = s.probe;
  // As the runner maps SamplingParams (runner.cpp, launch_once; CudaEngine::megakernel_generate).
  const SamplingParams& sp = s.sampling;
  const bool filtered = !sp.greedy() && sp.top_k > 0;
  const bool cuts = sp.top_p < 1.0f || sp.min_p > 0.0f;
  p.temperature = sp.greedy() ? 1.0f : sp.temperature;
  p.gumbel = !sp.greedy() && !filtered && !cuts;
  p.nucleus = !sp.greedy() && !filtered && cuts;
  p.seed = sp.seed;
  p.step0 = s.history.size();
  const bool penalties = sp.repetition_penalty != 1.0f || sp.presence_penalty != 0.0f || sp.frequency_penalty != 0.0f;
  for (int32_t id : s.history) ++counts[size_t(id)];
  p.counts = penalties ? counts.data() : nullptr;
  p.repetition_penalty = sp.repetition_penalty;
  p.presence_penalty = sp.presence_penalty;
  p.frequency_penalty = sp.frequency_penalty;
  p.top_k = filtered ? sp.top_k : 0;
  p.top_p = sp.top_p;
  p.min_p = sp.min_p;
  p.sel_vals = sel_vals.data();
  p.cand_v = cand_v.data();
  p.cand_i = cand_i.data();
  p.cand_n = cand_n.data();

  simt::Options o = s.emu;
  o.coresident = true;
  o.dynamic_shared_bytes = C::kSmemBytes;
  o.stack_bytes = 64 * 1024;
  simt::launch(dim3(unsigned(s.ctas)), dim3(mk::kThreads),
               [&] { mk::megakernel_body<C>(p, simt::dynamic_shared<uint8_t>()); }, o);

  RunResult r;
  int n = 0;
  while (n < s.max_tokens && mailbox->tokens[n] >= 0) r.tokens.push_back(int32_t(mailbox->tokens[n++]));
  for (int i = n; i < s.max_tokens; ++i) r.mailbox_tail.push_back(int32_t(mailbox->tokens[i]));
  for (int i = 0; i < n; ++i) EXPECT_EQ(tokens[size_t(i)], r.tokens[size_t(i)]) << "device copy of token " << i;
  r.logits.assign(logits.begin(), logits.begin() + std::ptrdiff_t(size_t(n) * V));
  r.finished = mailbox->finished;
  for (int i = 0; i < lay.count(); ++i) r.counters.push_back(counters[size_t(i) * mk::kCounterStride]);
  // Cache rows outside [pos0, pos0 + n) keep their noise / NaN.
  std::vector<uint16_t> k_ref(L * kContext * KV, 0xffff), v_ref(L * kContext * KV, 0xffff);
  if (s.pos0 > 0) fill_noise_like_cpu<C>(k_ref, v_ref, s.pos0);
  for (size_t l = 0; l < L; ++l)
    for (int pos = 0; pos < kContext; ++pos) {
      if (pos >= s.pos0 && pos < s.pos0 + n) continue;
      const size_t at = (l * kContext + size_t(pos)) * KV;
      if (std::memcmp(&k_cache[at], &k_ref[at], KV * 2) != 0 || std::memcmp(&v_cache[at], &v_ref[at], KV * 2) != 0)
        r.cache_outside_untouched = false;
    }
  return r;
}

// Every counter equals its per-token increment times the tokens run (layout.h's table); with flagged
// vectors QkvReady, AttnReady and the all-CTA counters after C, D and E stay at 0 (with the one-stage
// MLP but DownDone); with the one-stage MLP, MlpDone.
template <class C = Tiny>
void expect_counters(const RunResult& r, int ctas, int tokens_run, bool done, bool flagged = false,
                     bool one_stage = false) {
  const mk::CounterLayout lay{C::L, C::KV_HEADS};
  const uint32_t T = uint32_t(tokens_run), splits = uint32_t(mk::attention_splits(ctas, C::KV_HEADS));
  auto get = [&](mk::Counter c, int l = 0, int g = 0) { return r.counters[size_t(lay.slot(c, l, g))]; };
  for (int l = 0; l < C::L; ++l) {
    for (int g = 0; g < C::KV_HEADS; ++g) {
      EXPECT_EQ(get(mk::Counter::QkvReady, l, g), flagged ? 0u : T * uint32_t((C::G + 2) * C::D))
          << "layer " << l << " group " << g;
      EXPECT_EQ(get(mk::Counter::AttnTicket, l, g), T * splits) << "layer " << l << " group " << g;
    }
    EXPECT_EQ(get(mk::Counter::AttnReady, l), flagged ? 0u : T * uint32_t(C::KV_HEADS) * splits) << "layer " << l;
    const uint32_t all = flagged ? 0u : T * uint32_t(ctas);
    EXPECT_EQ(get(mk::Counter::ODone, l), all) << "layer " << l;
    EXPECT_EQ(get(mk::Counter::MlpDone, l), one_stage ? 0u : all) << "layer " << l;
    // The one-stage MLP's sums carry no epoch: DownDone counts with flagged vectors too.
    EXPECT_EQ(get(mk::Counter::DownDone, l), one_stage ? T * uint32_t(ctas) : all) << "layer " << l;
  }
  EXPECT_EQ(get(mk::Counter::LmTicket), T * uint32_t(ctas));
  EXPECT_EQ(get(mk::Counter::Step), T);
  EXPECT_EQ(get(mk::Counter::Done), done ? 1u : 0u);
}

double rel_error(const float* a, const std::vector<float>& b) {
  double diff = 0, ref = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    diff = std::max(diff, std::isfinite(a[i]) ? std::abs(double(a[i]) - double(b[i])) : INFINITY);
    ref = std::max(ref, std::abs(double(b[i])));
  }
  return ref > 0 ? diff / ref : diff;
}

// The kernel's logits of every step against the CPU engine fed the same tokens (first, then the
// kernel's draws), from the same (noise) cache.
template <class C = Tiny>
void expect_logits_match_cpu(const RunSpec& s, const RunResult& r) {
  CpuEngine cpu(model_for<C>(), {.context = kContext, .threads = 1});
  if (s.pos0 > 0) cpu.fill_cache_with_noise(s.pos0);
  int32_t token = s.first;
  for (size_t t = 0; t < r.tokens.size(); ++t) {
    const std::span<const float> ref = cpu.decode(token);
    const std::vector<float> expect(ref.begin(), ref.end());
    EXPECT_LE(rel_error(r.logits.data() + t * kVocab, expect), kLogitTolerance) << "step " << t;
    token = r.tokens[t];
  }
}

int32_t argmax_of(const float* l) {
  int32_t best = 0;
  for (int i = 1; i < kVocab; ++i)
    if (l[i] > l[best]) best = i;
  return best;
}

std::string describe(const RunSpec& s) {
  return std::to_string(s.ctas) + " CTAs, pos0 " + std::to_string(s.pos0) + ", ablate " + std::to_string(s.ablate) +
         ", merge_splits " + std::to_string(s.merge_splits) + (s.flagged ? ", flagged vectors" : "") +
         (s.one_stage ? ", one-stage MLP" : "") +
         (s.probe ? ", probe " + std::to_string(s.probe) : "");
}

// A greedy run of config C, checked whole: it drew every token, each the argmax of the kernel's own
// logits (lowest id on ties); `finished` set; no cache row outside the run written; every counter at
// its per-token increment times the tokens run; logits against the CPU engine.
template <class C = Tiny>
void run_and_check_greedy(const RunSpec& s) {
  SCOPED_TRACE(describe(s));
  const RunResult r = run_megakernel<C>(s);
  ASSERT_EQ(r.tokens.size(), size_t(s.max_tokens));
  for (size_t t = 0; t < r.tokens.size(); ++t)
    EXPECT_EQ(r.tokens[t], argmax_of(r.logits.data() + t * kVocab)) << "step " << t;
  EXPECT_EQ(r.finished, 1);
  EXPECT_TRUE(r.cache_outside_untouched);
  expect_counters<C>(r, s.ctas, s.max_tokens, true, s.flagged, s.one_stage);
  expect_logits_match_cpu<C>(s, r);
}

// Shallow and deep positions over 3 to 8 CTAs, in random orders.
TEST(SimtMegakernel, GreedyRunsMatchTheCpuEngine) {
  const RunSpec specs[] = {
      {.ctas = 4, .pos0 = 0, .max_tokens = 8, .emu = emulation(Order::Random, Order::Random, CopyTiming::AtWait, 1)},
      {.ctas = 3, .pos0 = 70, .max_tokens = 4, .emu = emulation(Order::Forward, Order::Reverse, CopyTiming::AtIssue)},
      {.ctas = 5, .pos0 = 200, .max_tokens = 4, .emu = emulation(Order::Random, Order::Random, CopyTiming::AtWait, 2)},
      {.ctas = 8, .pos0 = 300, .max_tokens = 3, .emu = emulation(Order::Reverse, Order::Random, CopyTiming::AtWait, 3)},
  };
  for (const RunSpec& s : specs) run_and_check_greedy(s);
}

// One launch whose attention splits fill up as it goes: 8 CTAs (4 splits per kv head, 64 positions
// each) from position 110 to 133, so a third split becomes non-empty mid-launch, 24 tokens in a row.
// With merge_splits 2 the merge moves there from stage C to the last split (the empty splits still
// signal and take their tickets); with the default (4) stage C merges throughout.
TEST(SimtMegakernel, LongRunAcrossAnAttentionSplitBoundary) {
  run_and_check_greedy({.ctas = 8, .pos0 = 110, .max_tokens = 24, .merge_splits = 2,
                        .emu = emulation(Order::Random, Order::Random, CopyTiming::AtWait, 7)});
  run_and_check_greedy({.ctas = 8, .pos0 = 120, .max_tokens = 12,
                        .emu = emulation(Order::Forward, Order::Random, CopyTiming::AtIssue, 8)});
}

// The H200's grid: one CTA per SM, 132 of them, on the tiny shape: CTAs 64.. own no o_proj / down
// rows and 128.. no gate/up pairs, 32 attention splits per kv head leave CTAs 64.. without attention
// work, and each LM-head slice is 32 rows. Every one of them still signals and takes its tickets.
TEST(SimtMegakernel, TheH200GridOf132Ctas) {
  run_and_check_greedy({.ctas = 132, .pos0 = 400, .max_tokens = 2,
                        .emu = emulation(Order::Random, Order::Random, CopyTiming::AtWait, 6)});
}

// The 0.6B and 4B widths (one layer each): q|k|v, gate/up and LM-head slices of several chunks,
// 8 kv heads, GQA groups of 2 and of 4 (the 4B's q registers and prologue warps).
TEST(SimtMegakernel, TheRealModelWidths) {
  run_and_check_greedy<Wide06>({.ctas = 16, .pos0 = 130, .max_tokens = 2,
                                .emu = emulation(Order::Random, Order::Random, CopyTiming::AtWait, 9)});
  run_and_check_greedy<Wide4B>({.ctas = 20, .pos0 = 70, .max_tokens = 2,
                                .emu = emulation(Order::Random, Order::Random, CopyTiming::AtIssue, 10)});
}

// Scheduling, copy timing and the ablation switches change timing only: the same bits.
TEST(SimtMegakernel, OrdersCopyTimingAndAblationsChangeNothing) {
  RunSpec base{.ctas = 4, .pos0 = 90, .max_tokens = 3, .emu = emulation(Order::Forward, Order::Forward, CopyTiming::AtIssue)};
  const RunResult ref = run_megakernel(base);
  ASSERT_EQ(ref.tokens.size(), 3u);
  for (uint32_t ablate : {1u, 2u, 4u, 7u, 8u, 15u}) {
    RunSpec s = base;
    s.ablate = ablate;
    s.emu = emulation(Order::Random, Order::Random, CopyTiming::AtWait, 10 + ablate);
    SCOPED_TRACE(describe(s));
    const RunResult r = run_megakernel(s);
    EXPECT_EQ(r.tokens, ref.tokens);
    EXPECT_EQ(std::memcmp(r.logits.data(), ref.logits.data(), ref.logits.size() * 4), 0) << "logits differ";
  }
}

// Flagged vectors (MEGAQWEN_MK_VECTORS=flagged): x, xmid and act carry their token's epoch and the
// readers poll the words instead of the all-CTA counters. Only the synchronization changes, so the
// bits are those of the counter runs (with every ablation too).
TEST(SimtMegakernel, FlaggedVectorsChangeNothingButTiming) {
  RunSpec base{.ctas = 4, .pos0 = 90, .max_tokens = 3, .emu = emulation(Order::Forward, Order::Forward, CopyTiming::AtIssue)};
  const RunResult ref = run_megakernel(base);
  ASSERT_EQ(ref.tokens.size(), 3u);
  for (uint32_t ablate : {0u, 15u}) {
    RunSpec s = base;
    s.flagged = true;
    s.ablate = ablate;
    s.emu = emulation(Order::Random, Order::Random, CopyTiming::AtWait, 40 + ablate);
    SCOPED_TRACE(describe(s));
    const RunResult r = run_megakernel(s);
    EXPECT_EQ(r.tokens, ref.tokens);
    EXPECT_EQ(std::memcmp(r.logits.data(), ref.logits.data(), ref.logits.size() * 4), 0) << "logits differ";
    expect_counters(r, s.ctas, 3, true, true);
  }
  // Stage C merging 6 polled splits (MEGAQWEN_MK_MERGE_SPLITS=32 at a depth the default leaves to the
  // last split): the flagged merge's path for more than 4 splits.
  RunSpec wide{.ctas = 12, .pos0 = 330, .max_tokens = 2, .merge_splits = 32,
               .emu = emulation(Order::Forward, Order::Forward, CopyTiming::AtIssue)};
  const RunResult wide_ref = run_megakernel(wide);
  ASSERT_EQ(wide_ref.tokens.size(), 2u);
  wide.flagged = true;
  wide.emu = emulation(Order::Random, Order::Random, CopyTiming::AtWait, 48);
  SCOPED_TRACE(describe(wide));
  const RunResult r = run_megakernel(wide);
  EXPECT_EQ(r.tokens, wide_ref.tokens);
  EXPECT_EQ(std::memcmp(r.logits.data(), wide_ref.logits.data(), wide_ref.logits.size() * 4), 0) << "logits differ";
}

// Whole greedy runs with flagged vectors. The 4B width polls act (9,728 floats: 19 words per thread)
// in batches of 8. Every thread of a waiting CTA polls, so the emulator spends its time switching
// between pollers (~20 s here, ~150 s under the race checker); the race build runs the tiny shape
// instead, whose synchronization is the same.
TEST(SimtMegakernel, FlaggedVectorsGreedyRuns) {
  // A launch that switches mid-run from stage C merging the polled partials to the last split merging
  // them into attn's words (merge_splits 2: the third split fills at position 128).
  run_and_check_greedy({.ctas = 8, .pos0 = 124, .max_tokens = 8, .merge_splits = 2, .flagged = true,
                        .emu = emulation(Order::Random, Order::Random, CopyTiming::AtWait, 47)});
#if defined(SIMT_RACE_CHECK)
  run_and_check_greedy({.ctas = 5, .pos0 = 60, .max_tokens = 6, .flagged = true,
                        .emu = emulation(Order::Random, Order::Random, CopyTiming::AtWait, 44)});
#else
  run_and_check_greedy<Wide4B>({.ctas = 6, .pos0 = 70, .max_tokens = 2, .flagged = true,
                                .emu = emulation(Order::Random, Order::Random, CopyTiming::AtIssue, 45)});
#endif
}

// With the epoch check taken out (fault injection) a reader takes the launch's stale words (NaN) and
// the run shows it: the check is what the protocol rests on, and these tests would see it missing.
TEST(SimtMegakernel, FlaggedVectorsNeedTheirEpochCheck) {
  RunSpec base{.ctas = 4, .pos0 = 90, .max_tokens = 3, .emu = emulation(Order::Forward, Order::Forward, CopyTiming::AtIssue)};
  const RunResult ref = run_megakernel(base);
  RunSpec broken = base;
  broken.flagged = true;
  broken.emu = emulation(Order::Random, Order::Random, CopyTiming::AtWait, 46);
  mk::g_sync_faults = mk::kFaultIgnoreEpoch;
  const RunResult r = run_megakernel(broken);
  mk::g_sync_faults = 0;
  bool same = r.tokens == ref.tokens && r.logits.size() == ref.logits.size() &&
              std::memcmp(r.logits.data(), ref.logits.data(), ref.logits.size() * 4) == 0;
  EXPECT_FALSE(same) << "a run that ignores the epochs computed the right logits: the test would not see a broken poll";
}

// The one-stage MLP (MEGAQWEN_MK_MLP=one-stage): each CTA's units through gate/up and down^T, summed
// into the residual stream with fixed-point atomics. Whole greedy runs against the CPU engine: one
// CTA (every unit in one partial), 3 to 8 (ragged unit slices), 132 on the tiny shape (CTAs 128.. own
// no units but still signal), a long run across a split boundary, and the 0.6B and 4B widths (24 and
// 487 units per CTA: several down^T chunks, one and four row sets).
TEST(SimtMegakernel, OneStageMlpGreedyRunsMatchTheCpuEngine) {
  const RunSpec specs[] = {
      {.ctas = 1, .pos0 = 0, .max_tokens = 4, .one_stage = true,
       .emu = emulation(Order::Random, Order::Random, CopyTiming::AtWait, 70)},
      {.ctas = 3, .pos0 = 70, .max_tokens = 4, .one_stage = true,
       .emu = emulation(Order::Forward, Order::Reverse, CopyTiming::AtIssue)},
      {.ctas = 5, .pos0 = 200, .max_tokens = 4, .one_stage = true,
       .emu = emulation(Order::Random, Order::Random, CopyTiming::AtWait, 71)},
      {.ctas = 8, .pos0 = 110, .max_tokens = 24, .merge_splits = 2, .one_stage = true,
       .emu = emulation(Order::Random, Order::Random, CopyTiming::AtWait, 72)},
  };
  for (const RunSpec& s : specs) run_and_check_greedy(s);
  run_and_check_greedy({.ctas = 132, .pos0 = 400, .max_tokens = 2, .one_stage = true,
                        .emu = emulation(Order::Random, Order::Random, CopyTiming::AtWait, 73)});
  run_and_check_greedy<Wide06>({.ctas = 16, .pos0 = 130, .max_tokens = 2, .one_stage = true,
                                .emu = emulation(Order::Random, Order::Random, CopyTiming::AtWait, 74)});
  run_and_check_greedy<Wide4B>({.ctas = 20, .pos0 = 70, .max_tokens = 2, .one_stage = true,
                                .emu = emulation(Order::Random, Order::Random, CopyTiming::AtIssue, 75)});
}

// The one-stage MLP with flagged vectors: xmid, qkv and the attention's words polled, the sums behind
// DownDone (stage C acquires it itself: its residual reads layer l - 1's sum). The same bits as the
// one-stage MLP on counters, in every order, one CTA to the 0.6B width, across a split boundary.
TEST(SimtMegakernel, OneStageMlpWithFlaggedVectorsChangesNothingButTiming) {
  const RunSpec specs[] = {
      {.ctas = 1, .pos0 = 0, .max_tokens = 4, .one_stage = true,
       .emu = emulation(Order::Random, Order::Random, CopyTiming::AtWait, 90)},
      {.ctas = 5, .pos0 = 200, .max_tokens = 4, .one_stage = true,
       .emu = emulation(Order::Random, Order::Random, CopyTiming::AtIssue, 91)},
      {.ctas = 8, .pos0 = 110, .max_tokens = 24, .merge_splits = 2, .one_stage = true,
       .emu = emulation(Order::Random, Order::Random, CopyTiming::AtWait, 92)},
  };
  for (RunSpec s : specs) {
    const RunResult counters = run_megakernel(s);
    s.flagged = true;
    SCOPED_TRACE(describe(s));
    const RunResult flagged = run_megakernel(s);
    ASSERT_EQ(flagged.tokens.size(), size_t(s.max_tokens));
    EXPECT_EQ(flagged.tokens, counters.tokens);
    EXPECT_EQ(std::memcmp(flagged.logits.data(), counters.logits.data(), counters.logits.size() * 4), 0) << "logits differ";
    EXPECT_EQ(flagged.finished, 1);
    EXPECT_TRUE(flagged.cache_outside_untouched);
    expect_counters(flagged, s.ctas, s.max_tokens, true, true, true);
  }
  run_and_check_greedy<Wide06>({.ctas = 16, .pos0 = 130, .max_tokens = 2, .flagged = true, .one_stage = true,
                                .emu = emulation(Order::Random, Order::Random, CopyTiming::AtWait, 93)});
}

// The sums are integers, so the order in which the CTAs' adds reach them does not matter: every
// thread and block order, copy timing and ablation gives the same bits. Against the two-stage MLP
// only the roundings of the down projection's sums differ: the same tokens, logits within 1e-5.
TEST(SimtMegakernel, OneStageMlpIsBitIdenticalInAnyOrder) {
  RunSpec base{.ctas = 6, .pos0 = 90, .max_tokens = 4, .one_stage = true,
               .emu = emulation(Order::Forward, Order::Forward, CopyTiming::AtIssue)};
  const RunResult ref = run_megakernel(base);
  ASSERT_EQ(ref.tokens.size(), 4u);
  const uint32_t ablations[] = {0, 0, 1, 7, 15};
  for (size_t i = 0; i < std::size(ablations); ++i) {
    RunSpec s = base;
    s.ablate = ablations[i];
    s.emu = emulation(Order::Random, Order::Random, i % 2 ? CopyTiming::AtIssue : CopyTiming::AtWait, 80 + i);
    SCOPED_TRACE(describe(s));
    const RunResult r = run_megakernel(s);
    EXPECT_EQ(r.tokens, ref.tokens);
    EXPECT_EQ(std::memcmp(r.logits.data(), ref.logits.data(), ref.logits.size() * 4), 0) << "logits differ";
  }
  RunSpec two = base;
  two.one_stage = false;
  const RunResult two_stage = run_megakernel(two);
  EXPECT_EQ(two_stage.tokens, ref.tokens);
  for (size_t t = 0; t < ref.tokens.size(); ++t)
    EXPECT_LE(rel_error(ref.logits.data() + t * kVocab, step_logits(two_stage, t)), 1e-5) << "step " << t;
}

// The timing probes (MEGAQWEN_MK_PROBE) break the results on purpose but never the run: every token
// is drawn and in range, `finished` is set, no cache row outside the run is written, and every counter
// is signalled as usual. On one CTA each input wait is met before it is reached (the CTA signalled it
// itself), so there skipping the waits changes no bit: the probe removes the waits and nothing else.
// The no-weights probe multiplies whatever the ring's buffers hold, so its logits are not the real ones.
// Skipping the waits on several CTAs races by design: the race build runs only the race-free forms.
TEST(SimtMegakernel, TimingProbesRunEveryTokenAndRemoveOnlyWhatTheyName) {
  auto check_run = [](const RunSpec& s, const RunResult& r) {
    ASSERT_EQ(r.tokens.size(), size_t(s.max_tokens));
    for (int32_t id : r.tokens) EXPECT_TRUE(id >= 0 && id < kVocab) << id;
    EXPECT_EQ(r.finished, 1);
    EXPECT_TRUE(r.cache_outside_untouched);
    expect_counters(r, s.ctas, s.max_tokens, true);
  };
  RunSpec one{.ctas = 1, .pos0 = 90, .max_tokens = 3, .emu = emulation(Order::Forward, Order::Forward, CopyTiming::AtIssue)};
  const RunResult one_ref = run_megakernel(one);
  {
    RunSpec s = one;
    s.probe = mk::kProbeNoWaits;
    s.emu = emulation(Order::Random, Order::Random, CopyTiming::AtWait, 60);
    SCOPED_TRACE(describe(s));
    const RunResult r = run_megakernel(s);
    check_run(s, r);
    EXPECT_EQ(r.tokens, one_ref.tokens);
    EXPECT_EQ(std::memcmp(r.logits.data(), one_ref.logits.data(), one_ref.logits.size() * 4), 0) << "logits differ";
  }
  RunSpec four{.ctas = 4, .pos0 = 90, .max_tokens = 3, .emu = emulation(Order::Forward, Order::Forward, CopyTiming::AtIssue)};
  const RunResult four_ref = run_megakernel(four);
#if defined(SIMT_RACE_CHECK)
  const std::vector<uint32_t> probes = {mk::kProbeNoWeights};
#else
  const std::vector<uint32_t> probes = {mk::kProbeNoWeights, mk::kProbeNoWaits, mk::kProbeAll};
#endif
  for (uint32_t probe : probes) {
    RunSpec s = four;
    s.probe = probe;
    s.emu = emulation(Order::Random, Order::Random, CopyTiming::AtWait, 60 + probe);
    SCOPED_TRACE(describe(s));
    const RunResult r = run_megakernel(s);
    check_run(s, r);
    // Without weights the products are not the real ones; without waits the CTAs read rows that
    // others have not written yet (NaN-poisoned), so neither probe can compute the real logits.
    EXPECT_NE(std::memcmp(r.logits.data(), four_ref.logits.data(), four_ref.logits.size() * 4), 0)
        << "the probe computed the real logits: it did not take away what it names";
  }
}

// The Gumbel-max draw select_value makes (temperature, then Gumbel(seed, step, id) noise), computed on
// the host from the kernel's raw logits; the lowest id wins ties.
int32_t host_gumbel_draw(const float* logits, float temperature, uint64_t seed, uint64_t step) {
  int32_t best = -1;
  float best_v = -INFINITY;
  for (int i = 0; i < kVocab; ++i) {
    const float v = test::gumbel_value(logits[i] / temperature, seed, step, i);
    if (best < 0 || v > best_v) best = i, best_v = v;
  }
  return best;
}

// Plain sampling (Gumbel-max): every token is the exact host draw. An eos id then ends the run
// right after it is drawn; the host's stop request after the first token.
TEST(SimtMegakernel, SampledRunsStopAtEosAndOnRequest) {
  SamplingParams sp;
  sp.temperature = 1.5f;
  sp.top_k = 0;
  sp.top_p = 1.0f;
  sp.seed = 99;
  RunSpec s{.ctas = 4, .max_tokens = 8, .sampling = sp, .emu = emulation(Order::Random, Order::Random, CopyTiming::AtWait, 4)};
  const RunResult all = run_megakernel(s);
  ASSERT_EQ(all.tokens.size(), 8u);
  for (size_t t = 0; t < all.tokens.size(); ++t)
    EXPECT_EQ(all.tokens[t], host_gumbel_draw(all.logits.data() + t * kVocab, sp.temperature, sp.seed, t)) << "step " << t;
  expect_logits_match_cpu(s, all);
  // The first step from 2 on whose token was not drawn before: the run must end right there.
  size_t stop_at = 2;
  while (stop_at < all.tokens.size() &&
         std::find(all.tokens.begin(), all.tokens.begin() + std::ptrdiff_t(stop_at), all.tokens[stop_at]) !=
             all.tokens.begin() + std::ptrdiff_t(stop_at))
    ++stop_at;
  ASSERT_LT(stop_at, all.tokens.size()) << "no fresh token to use as eos";
  s.eos = {kVocab - 1 == all.tokens[stop_at] ? kVocab - 2 : kVocab - 1, all.tokens[stop_at]};
  const RunResult eos = run_megakernel(s);
  ASSERT_EQ(eos.tokens.size(), stop_at + 1);
  EXPECT_TRUE(std::equal(eos.tokens.begin(), eos.tokens.end(), all.tokens.begin()));
  EXPECT_EQ(eos.finished, 1);
  for (int32_t slot : eos.mailbox_tail) EXPECT_EQ(slot, -1);
  EXPECT_TRUE(eos.cache_outside_untouched);
  expect_counters(eos, s.ctas, int(stop_at) + 1, true);

  s.eos.clear();
  s.stop_requested = true;
  const RunResult stopped = run_megakernel(s);
  ASSERT_EQ(stopped.tokens.size(), 1u);
  EXPECT_EQ(stopped.tokens[0], all.tokens[0]);
  EXPECT_EQ(stopped.finished, 1);
  EXPECT_TRUE(stopped.cache_outside_untouched);
  expect_counters(stopped, s.ctas, 1, true);
}

// Penalties and the filtered draw: each token is the exact host draw from the kernel's own logits of
// that step (simt/host_draw.h: the Sampler's candidates and merge_and_draw's arithmetic), with the
// counts growing by each drawn token; the logits still match the CPU engine.
TEST(SimtMegakernel, FilteredSamplingWithPenaltiesIsTheExactHostDraw) {
  const SamplingParams sp = test::sampling_params(0.9f, 20, 0.9f, 0.02f, 1.3f, 0.4f, 0.2f, 1234);
  const RunSpec s{.ctas = 5, .pos0 = 0, .first = 3, .max_tokens = 8, .sampling = sp, .history = {3, 5, 5, 900},
                  .emu = emulation(Order::Random, Order::Random, CopyTiming::AtWait, 5)};
  const RunResult r = run_megakernel(s);
  ASSERT_EQ(r.tokens.size(), size_t(s.max_tokens));
  std::vector<int32_t> history = s.history;
  for (size_t t = 0; t < r.tokens.size(); ++t) {
    const std::vector<float> logits = step_logits(r, t);
    const test::HostDraw h = test::host_filtered_draw(logits, sp, history, s.history.size() + t);
    EXPECT_EQ(r.tokens[t], h.id) << "step " << t;
    history.push_back(r.tokens[t]);
  }
  expect_logits_match_cpu(s, r);
  expect_counters(r, s.ctas, s.max_tokens, true);

  // The widest list the kernel selects (kMaxTopK), with min-p only, on 3 CTAs.
  const SamplingParams wide = test::sampling_params(2.0f, mk::kMaxTopK, 1.0f, 0.05f, 1.0f, 0.0f, 0.0f, 77);
  const RunSpec w{.ctas = 3, .pos0 = 10, .first = 4000, .max_tokens = 6, .sampling = wide,
                  .emu = emulation(Order::Reverse, Order::Random, CopyTiming::AtIssue, 8)};
  const RunResult rw = run_megakernel(w);
  ASSERT_EQ(rw.tokens.size(), size_t(w.max_tokens));
  for (size_t t = 0; t < rw.tokens.size(); ++t) {
    const std::vector<float> logits = step_logits(rw, t);
    EXPECT_EQ(rw.tokens[t], test::host_filtered_draw(logits, wide, {}, t).id) << "step " << t;
  }
}

// Nucleus sampling (top-p and min-p, no top-k) with penalties: each token is host_nucleus_draw's
// from the kernel's own logits of that step, transformed as the Sampler does with the history so far
// (the kernel's counts grow by each drawn token); then a flat distribution (temperature 3, top-p
// 0.98: thousands of the 4,099 ids kept) on the 132-CTA grid of the H200.
TEST(SimtMegakernel, NucleusSamplingWithPenaltiesIsTheExactHostDraw) {
  const SamplingParams sp = test::sampling_params(0.9f, 0, 0.9f, 0.02f, 1.3f, 0.4f, 0.2f, 4321);
  const RunSpec s{.ctas = 5, .pos0 = 0, .first = 3, .max_tokens = 8, .sampling = sp, .history = {3, 5, 5, 900},
                  .emu = emulation(Order::Random, Order::Random, CopyTiming::AtWait, 6)};
  const RunResult r = run_megakernel(s);
  ASSERT_EQ(r.tokens.size(), size_t(s.max_tokens));
  std::vector<int32_t> history = s.history;
  for (size_t t = 0; t < r.tokens.size(); ++t) {
    const std::vector<float> logits = step_logits(r, t);
    const auto v = test::sampler_transformed(logits, sp, history);
    EXPECT_EQ(r.tokens[t], test::host_nucleus_draw(v, sp.top_p, sp.min_p, sp.seed, s.history.size() + t).id)
        << "step " << t;
    history.push_back(r.tokens[t]);
  }
  expect_logits_match_cpu(s, r);
  expect_counters(r, s.ctas, s.max_tokens, true);

  const SamplingParams flat = test::sampling_params(3.0f, 0, 0.98f, 0.0f, 1.0f, 0.0f, 0.0f, 5);
  const RunSpec w{.ctas = 132, .pos0 = 4, .first = 17, .max_tokens = 3, .sampling = flat,
                  .emu = emulation(Order::Forward, Order::Random, CopyTiming::AtIssue, 9)};
  const RunResult rw = run_megakernel(w);
  ASSERT_EQ(rw.tokens.size(), size_t(w.max_tokens));
  for (size_t t = 0; t < rw.tokens.size(); ++t) {
    const std::vector<float> logits = step_logits(rw, t);
    const auto v = test::sampler_transformed(logits, flat, {});
    const test::NucleusDraw h = test::host_nucleus_draw(v, flat.top_p, flat.min_p, flat.seed, t);
    if (t == 0) {
      EXPECT_GT(h.kept.size(), size_t(1024)) << "a flat distribution: the kept set is wide";
    }
    EXPECT_EQ(rw.tokens[t], h.id) << "step " << t;
  }
}

#if defined(SIMT_RACE_CHECK)
// Built into test_simt_races, where every launch above also ran under the race checker
// (simt/race_check.h) and found nothing. Here the checker is shown to see this kernel: each ordering
// the protocol relies on, taken out (sync.cuh's fault injection), is reported, although the
// emulator's sequentially consistent memory still computes the right tokens without it.
TEST(SimtMegakernelRaces, EachOrderingTheProtocolReliesOnIsChecked) {
  struct Case {
    uint32_t fault;
    const char* what;
  };
  const size_t accesses_before = simt::race::totals().checked_accesses;
  const RunSpec clean{.ctas = 4, .pos0 = 40, .max_tokens = 2,
                      .emu = emulation(Order::Random, Order::Random, CopyTiming::AtWait, 3)};
  const RunResult ref = run_megakernel(clean);
  ASSERT_EQ(ref.tokens.size(), 2u);
  EXPECT_GT(simt::race::totals().checked_accesses - accesses_before, size_t(10000))
      << "the kernel's global-memory accesses reach the checker";
  for (const Case& c : {Case{mk::kFaultRelaxedRelease, "relaxed adds, tickets and Step store"},
                        Case{mk::kFaultNoAcquireFence, "relaxed polls without their acquire fence"},
                        Case{mk::kFaultNoBarrierBeforeSignal, "signals before the CTA's writes are done"}}) {
    SCOPED_TRACE(c.what);
    simt::race::set_throw_on_race(false);
    mk::g_sync_faults = c.fault;
    const RunResult r = run_megakernel(clean);
    mk::g_sync_faults = 0;
    simt::race::set_throw_on_race(true);
    const std::string& report = simt::race::last_report();
    EXPECT_NE(report.find("simt race check"), std::string::npos) << "not reported";
    if (c.fault != mk::kFaultNoBarrierBeforeSignal) {
      // Only the orderings are gone, so the emulator's values are the same.
      EXPECT_EQ(r.tokens, ref.tokens);
    }
    std::printf("%s:\n%s\n", c.what, report.substr(0, 1200).c_str());
  }
}
#endif

}  // namespace
}  // namespace megaqwen
