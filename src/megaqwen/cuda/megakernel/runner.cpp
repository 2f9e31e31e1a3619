#include "megaqwen/cuda/megakernel/runner.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "megaqwen/cuda/cuda_check.h"
#include "megaqwen/cuda/kernels.h"
#include "megaqwen/engine/cpu_gated_delta_net.h"
#include "megaqwen/util/error.h"

namespace megaqwen::cuda::mk {

namespace {

Shape shape_of(const ModelConfig& c) {
  Shape s{c.hidden_size, c.num_layers, c.num_heads, c.num_kv_heads, c.head_dim, c.intermediate_size};
  if (c.is_hybrid()) {
    s.hybrid = true;
    s.rotary_dim = c.rotary_dim;
    s.key_heads = c.linear_num_key_heads;
    s.value_heads = c.linear_num_value_heads;
    s.key_dim = c.linear_key_head_dim;
    s.value_dim = c.linear_value_head_dim;
    s.conv_kernel = c.linear_conv_kernel;
  }
  return s;
}

std::string shape_description(const Shape& s) {
  std::string t = "hidden " + std::to_string(s.hidden) + ", layers " + std::to_string(s.layers) + ", heads " +
                  std::to_string(s.heads) + "/" + std::to_string(s.kv_heads) + ", head_dim " +
                  std::to_string(s.head_dim) + ", intermediate " + std::to_string(s.intermediate);
  if (s.hybrid)
    t += ", rotary " + std::to_string(s.rotary_dim) + ", DeltaNet " + std::to_string(s.key_heads) + "/" +
         std::to_string(s.value_heads) + " heads of " + std::to_string(s.key_dim) + "/" + std::to_string(s.value_dim) +
         ", conv " + std::to_string(s.conv_kernel);
  return t;
}

}  // namespace

uint32_t parse_probe(const std::string& value, bool flagged_vectors) {
  uint32_t probe = 0;
  size_t at = 0;
  for (;;) {
    const size_t comma = value.find(',', at);
    const std::string part = value.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    if (part == "no-waits") probe |= kProbeNoWaits;
    else if (part == "no-weights") probe |= kProbeNoWeights;
    else
      fail("MEGAQWEN_MK_PROBE must be 'no-waits', 'no-weights' or both joined by a comma (timing probes whose "
           "tokens are meaningless); got '{}'", value);
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  if ((probe & kProbeNoWaits) && flagged_vectors)
    fail("MEGAQWEN_MK_PROBE=no-waits skips the counter waits and cannot be combined with MEGAQWEN_MK_VECTORS=flagged "
         "(its readers poll the data itself)");
  return probe;
}

bool parse_mlp_form(const std::string& value) {
  if (value != "two-stage" && value != "one-stage")
    fail("MEGAQWEN_MK_MLP must be 'two-stage' (stage D gate/up, stage E down, an edge between them) or "
         "'one-stage' (each CTA's units through gate/up and down^T, summed with fixed-point atomics); got '{}'",
         value);
  return value == "one-stage";
}

std::string probe_name(uint32_t probe) {
  std::string s;
  if (probe & kProbeNoWaits) s += "no-waits";
  if (probe & kProbeNoWeights) s += s.empty() ? "no-weights" : ",no-weights";
  return s;
}

std::string Megakernel::unsupported_reason(const ModelConfig& c, int device) {
  const Shape shape = shape_of(c);
  if (c.num_layers > kMaxLayers) return "the megakernel runs at most " + std::to_string(kMaxLayers) + " layers";
  if (!find_config(shape))
    return "no megakernel is compiled for this shape (" + shape_description(shape) +
           "); compiled: " + compiled_configs();
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) return "cudaGetDeviceProperties failed";
  if (prop.major < 9) return std::string(prop.name) + " is sm_" + std::to_string(prop.major * 10 + prop.minor) +
                             "; the megakernel needs sm_90 (cp.async.bulk, mbarrier transaction counts)";
  if (prop.multiProcessorCount < 16) return "the megakernel wants at least 16 SMs";
  const int per_sm = max_ctas_per_sm(shape);
  if (per_sm < 1)
    return "one CTA of " + std::to_string(kThreads) + " threads with " + std::to_string(find_config(shape)->smem_bytes) +
           " bytes of shared memory does not fit on an SM of " + prop.name + " (" +
           std::to_string(prop.sharedMemPerBlockOptin) + " bytes allowed per block)";
  return {};
}

Megakernel::Megakernel(const ModelConfig& c, Binding binding, int device, cudaStream_t stream)
    : shape_(shape_of(c)), context_(binding.context), vocab_(c.vocab_size), stream_(stream),
      binding_(std::move(binding)) {
  const std::string why = unsupported_reason(c, device);
  if (!why.empty()) fail("megakernel: {}", why);
  if (binding_.layers.size() != size_t(c.num_layers))
    fail("megakernel: {} layers bound for a {}-layer model", binding_.layers.size(), c.num_layers);
  info_ = *find_config(shape_);
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  // Persistent CTAs that spin on each other's counters must all be resident at once: one per SM, and
  // never more than the occupancy calculator allows.
  const int per_sm = max_ctas_per_sm(shape_);
  ctas_ = prop.multiProcessorCount;
  if (ctas_ > per_sm * prop.multiProcessorCount)
    fail("megakernel: {} CTAs cannot be co-resident ({} per SM x {} SMs)", ctas_, per_sm, prop.multiProcessorCount);
  splits_ = attention_splits(ctas_, c.num_kv_heads);
  eps_ = float(c.rms_norm_eps);
  if (const char* env = std::getenv("MEGAQWEN_MK_ABLATE"); env && *env) {
    char* end = nullptr;
    const unsigned long v = std::strtoul(env, &end, 0);
    if (*end != '\0' || v > kAblateAll)
      fail("MEGAQWEN_MK_ABLATE must be a sum of {} (deferred refill), {} (fences), {} (relaxed polls + fence), {} "
           "(the last attention split merges); got '{}'",
           kAblateDeferredRefill, kAblateFences, kAblateRelaxedSpin, kAblateSplitMerge, env);
    ablate_ = uint32_t(v);
  }
  if (const char* env = std::getenv("MEGAQWEN_MK_MERGE_SPLITS"); env && *env) {
    char* end = nullptr;
    const long v = std::strtol(env, &end, 10);
    if (*end != '\0' || v < 0 || v > kMaxSplits)
      fail("MEGAQWEN_MK_MERGE_SPLITS must be 0..{} (stage C merges the attention splits when at most this many "
           "hold positions); got '{}'", kMaxSplits, env);
    merge_splits_ = int(v);
  }
  if (const char* env = std::getenv("MEGAQWEN_MK_VECTORS"); env && *env) {
    const std::string v = env;
    if (v != "counters" && v != "flagged")
      fail("MEGAQWEN_MK_VECTORS must be 'counters' (x, xmid and act waited for on all-CTA counters) or "
           "'flagged' (the words carry their token's epoch and the readers poll them); got '{}'", env);
    flagged_ = v == "flagged";
  }
  if (const char* env = std::getenv("MEGAQWEN_MK_WATCHDOG_S"); env && *env) {
    char* end = nullptr;
    const double v = std::strtod(env, &end);
    if (*end != '\0' || !(v >= 0.0) || v > 1e6)
      fail("MEGAQWEN_MK_WATCHDOG_S must be seconds without a new token before the counters are dumped, 0..1e6 "
           "(0: off); got '{}'", env);
    watchdog_s_ = v;
  }
  if (const char* env = std::getenv("MEGAQWEN_MK_MLP"); env && *env) one_stage_mlp_ = parse_mlp_form(env);
  if (one_stage_mlp_ && one_stage_units_per_cta(c.intermediate_size, ctas_) > info_.one_stage_units)
    fail("megakernel: MEGAQWEN_MK_MLP=one-stage keeps each CTA's intermediate units in shared memory, at most {}; "
         "{} CTAs leave {} units per CTA of {}",
         info_.one_stage_units, ctas_, one_stage_units_per_cta(c.intermediate_size, ctas_), c.intermediate_size);
  if (const char* env = std::getenv("MEGAQWEN_MK_PROBE"); env && *env) {
    probe_ = parse_probe(env, flagged_);
    std::fprintf(stderr, "megakernel: timing probe %s: the drawn tokens are meaningless, only the time counts\n",
                 probe_name(probe_).c_str());
  }
  scale_log2_ = float(1.4426950408889634 / std::sqrt(double(c.head_dim)));

  const bool hybrid = c.is_hybrid();
  const size_t L = size_t(c.num_layers), H = size_t(c.hidden_size), Q = size_t(c.q_dim()), KV = size_t(c.kv_dim()),
               I = size_t(c.intermediate_size), D = size_t(c.head_dim), heads = size_t(c.num_heads);
  // Per layer in qkv / attn: the attention projection rows (hybrid: q | gate | k | v) or the DeltaNet's
  // in_proj rows, and the attention output or the DeltaNet's o (configs.cuh: kQkvRowFloats, kAttnRowFloats).
  const size_t qkv_rows = hybrid ? std::max(2 * Q + 2 * KV, size_t(c.linear_conv_dim() + c.linear_value_dim() +
                                                                   2 * c.linear_num_value_heads))
                                 : Q + 2 * KV;
  const size_t attn_rows = hybrid ? std::max(Q, size_t(c.linear_value_dim())) : Q;
  groups_ = hybrid ? std::max(c.num_kv_heads, c.linear_num_key_heads) : c.num_kv_heads;
  if (one_stage_mlp_) {
    // down^T of every layer, made here on the device from the engine's down (L x I x H bf16 more:
    // 176 MB for the 0.6B, 1.8 GB for the 4B).
    down_t_.resize(L * I * H);
    for (size_t l = 0; l < L; ++l) {
      uint16_t* dst = down_t_.data() + l * I * H;
      transpose_bf16(binding_.layers[l].down, int(H), int(I), dst, stream_);
      binding_.layers[l].down_t = dst;
    }
    x_fixed_.resize(2 * (L + 1) * H);  // two halves by token parity (layout.h, Params::x_fixed)
  }
  layers_.resize(binding_.layers.size());
  // On stream_ and waited for: a pageable cudaMemcpy (legacy stream) may return before its DMA lands,
  // and stream_ (non-blocking) would not wait for it before the first launch reads the table.
  CUDA_CHECK(cudaMemcpyAsync(layers_.data(), binding_.layers.data(), layers_.bytes(), cudaMemcpyHostToDevice, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  x_.resize((L + 1) * H);
  xmid_.resize(L * H);
  qkv_.resize(L * qkv_rows);
  attn_.resize(L * attn_rows);
  act_.resize(L * I);
  if (flagged_) {
    x_words_.resize((L + 1) * H);
    xmid_words_.resize(L * H);
    act_words_.resize(L * I);
    if (!hybrid) {  // the hybrids' DeltaNet layers keep QkvReady and AttnReady
      qkv_words_.resize(L * qkv_rows);
      partial_o_words_.resize(L * heads * size_t(kMaxSplits) * D);
      partial_ml_words_.resize(L * heads * size_t(kMaxSplits) * 2);
      attn_words_.resize(L * attn_rows);
    }
  }
  partial_o_.resize(L * heads * size_t(kMaxSplits) * D);
  partial_ml_.resize(L * heads * size_t(kMaxSplits) * 2);
  best_v_.resize(size_t(ctas_));
  best_i_.resize(size_t(ctas_));
  tokens_.resize(size_t(kLaunchTokenCap));
  counters_.resize(size_t(CounterLayout{c.num_layers, groups_}.words()));
  if (timing_compiled()) {
    timing_.resize(size_t(ctas_) * kStageCount * kTimingSlots);
    timing_sum_.assign(timing_.size(), 0);
  }
  void* mb = nullptr;
  CUDA_CHECK(cudaHostAlloc(&mb, sizeof(Mailbox), cudaHostAllocMapped));
  mailbox_host_.reset(static_cast<Mailbox*>(mb));
  CUDA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&mailbox_dev_), mb, 0));
  counters_host_ = PinnedBuffer<uint32_t>(counters_.size());
  watch_stream_ = CudaStream::non_blocking();
}

Megakernel::~Megakernel() {
  if (mailbox_host_) cudaStreamSynchronize(stream_);  // a kernel may still write the mailbox
}

int Megakernel::dump_counters(int t, std::vector<uint32_t>* previous) {
  const CounterLayout lay{shape_.layers, groups_};
  bool read = cudaMemcpyAsync(counters_host_.data(), counters_.data(), counters_.bytes(), cudaMemcpyDeviceToHost,
                              watch_stream_.get()) == cudaSuccess;
  for (int i = 0; read && i < 500 && cudaStreamQuery(watch_stream_.get()) == cudaErrorNotReady; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  read = read && cudaStreamQuery(watch_stream_.get()) == cudaSuccess;
  if (!read) {
    std::fprintf(stderr, "megakernel watchdog: the counters could not be read while the kernel runs\n");
    if (previous->empty()) {
      previous->assign(1, ~0u);  // the next look decides
      return 2;
    }
    return 0;
  }
  std::vector<uint32_t> now(size_t(lay.count()));
  for (int i = 0; i < lay.count(); ++i) now[size_t(i)] = counters_host_.data()[size_t(i) * kCounterStride];
  const bool first = previous->size() != now.size();  // nothing (or nothing readable) seen before
  const bool moved = !first && now != *previous;
  *previous = now;
  if (!first) return moved ? 1 : 0;
  const uint32_t T = uint32_t(t + 1), G = uint32_t(shape_.heads / shape_.kv_heads), D = uint32_t(shape_.head_dim);
  auto get = [&](Counter c, int l = 0, int g = 0) { return now[size_t(lay.slot(c, l, g))]; };
  std::fprintf(stderr,
               "megakernel watchdog: no token for a while at token %d (t = %d of this launch); counters vs the "
               "targets of token t:\n  Step %u (>= %u once t is drawn), LmTicket %u / %u, Done %u, StopSeen %u\n",
               t, t, get(Counter::Step), T, get(Counter::LmTicket), T * uint32_t(ctas_), get(Counter::Done),
               get(Counter::StopSeen));
  for (int l = 0; l < shape_.layers; ++l) {
    const bool delta = (binding_.delta_layers >> l) & 1u;
    // Per-token targets (layout.h): the mixer's group rows and the count stage C waits for.
    const uint32_t vpk = delta ? uint32_t(shape_.value_heads / shape_.key_heads) : 0;
    const uint32_t group_rows = delta ? 2 * uint32_t(shape_.key_dim) + 2 * vpk * uint32_t(shape_.value_dim) + 2 * vpk
                                      : (shape_.hybrid ? 2 * G + 2 : G + 2) * D;
    const int groups = delta ? shape_.key_heads : shape_.kv_heads;
    const uint32_t ready = delta ? uint32_t(shape_.value_heads * (shape_.value_dim / delta_columns(shape_.value_dim)))
                                 : uint32_t(shape_.kv_heads * splits_);
    std::string line;
    auto add = [&line](const char* fmt, unsigned v) {
      char buf[48];
      std::snprintf(buf, sizeof buf, fmt, v);
      line.append(buf);
    };
    add(delta ? "  layer %u (DeltaNet): QkvReady" : "  layer %u: QkvReady", unsigned(l));
    for (int g = 0; g < groups; ++g) add(" %u", get(Counter::QkvReady, l, g));
    add(" /%u", T * group_rows);
    if (!delta) {
      line += ", AttnTicket";
      for (int g = 0; g < groups; ++g) add(" %u", get(Counter::AttnTicket, l, g));
      add(" /%u", T * uint32_t(splits_));
    }
    add(", AttnReady %u", get(Counter::AttnReady, l));
    add("/%u", T * ready);
    add(", ODone %u", get(Counter::ODone, l));
    add(", MlpDone %u", get(Counter::MlpDone, l));
    add(", DownDone %u", get(Counter::DownDone, l));
    add(" /%u", T * uint32_t(ctas_));
    if (one_stage_mlp_) line += " (one-stage MLP: MlpDone is not used)";
    if (flagged_) {
      // With the one-stage MLP, DownDone still counts: its sums carry no epoch.
      const std::string done = one_stage_mlp_ ? "ODone and MlpDone" : "ODone, MlpDone and DownDone";
      line += shape_.hybrid ? " (flagged vectors: " + done + " are not used)"
                            : " (flagged vectors: QkvReady, AttnReady, " + done + " are not used)";
    }
    std::fprintf(stderr, "%s\n", line.c_str());
  }
  return 2;
}

// Whether the block-wide top-k primitives (topk.cuh) hold k of each CTA's vocabulary slice and the
// ctas x k candidates merged after (`what` names k in the message).
std::string Megakernel::top_k_capacity_reason(int k, const std::string& what) const {
  const int cap = kThreads * kSelPerThread;
  if ((vocab_ + ctas_ - 1) / ctas_ > cap)
    return "a CTA's vocabulary slice (" + std::to_string((vocab_ + ctas_ - 1) / ctas_) + " ids) exceeds the selection's " +
           std::to_string(cap);
  if (ctas_ * k > cap)
    return std::to_string(ctas_) + " CTAs x " + what + " " + std::to_string(k) + " candidates exceed the selection's " +
           std::to_string(cap);
  return {};
}

std::string Megakernel::filter_unsupported_reason(int top_k) const {
  if (top_k < 1 || top_k > kMaxTopK)
    return "top_k " + std::to_string(top_k) + " is outside the kernel's 1.." + std::to_string(kMaxTopK);
  return top_k_capacity_reason(top_k, "top_k");
}

std::string Megakernel::logprob_unsupported_reason(int top) const {
  static_assert(kMaxLogprobTop == kMaxTopLogprobs, "a logprob record holds every alternative a request may ask for");
  if (top < 0 || top > kMaxLogprobTop)
    return "top logprobs " + std::to_string(top) + " is outside the kernel's 0.." + std::to_string(kMaxLogprobTop);
  return top > 0 ? top_k_capacity_reason(top, "top logprobs") : std::string();
}

// The per-operator device sampler's rules (kernels/sampling.cuh, nucleus.cuh), mapped onto the
// kernel's selection: greedy; Gumbel-max for plain sampling; the filtered draw for a top-k (with any
// top-p / min-p); the nucleus draw for top-p / min-p without a top-k. Only a top-k the kernel's
// selection cannot hold is refused.
std::string Megakernel::sampling_unsupported_reason(const SamplingParams& params) const {
  params.validate();
  if (params.greedy()) return {};
  const bool top_k_on = params.top_k > 0 && params.top_k < vocab_;
  if (top_k_on) return filter_unsupported_reason(params.top_k);
  if ((params.top_p < 1.0f || params.min_p > 0.0f) && vocab_ >= kNucleusMaxVocab)
    return "a vocabulary of " + std::to_string(vocab_) + " ids is beyond the nucleus sampler's " +
           std::to_string(kNucleusMaxVocab);
  return {};
}

RunRequest Megakernel::request_for(const SamplingParams& params, int vocab, int32_t token, int max_tokens,
                                   std::span<const int32_t> eos_ids, std::span<const int32_t> history) {
  RunRequest req;
  req.token = token;
  req.max_tokens = max_tokens;
  req.eos_ids = eos_ids;
  const bool top_k_on = !params.greedy() && params.top_k > 0 && params.top_k < vocab;
  const bool cuts = params.top_p < 1.0f || params.min_p > 0.0f;
  req.gumbel = !params.greedy() && !top_k_on && !cuts;
  req.nucleus = !params.greedy() && !top_k_on && cuts;
  req.top_k = top_k_on ? params.top_k : 0;
  req.top_p = params.top_p;
  req.min_p = params.min_p;
  req.temperature = params.greedy() ? 1.0f : params.temperature;
  req.seed = params.seed;
  req.step = uint64_t(history.size());
  req.repetition_penalty = params.repetition_penalty;
  req.presence_penalty = params.presence_penalty;
  req.frequency_penalty = params.frequency_penalty;
  req.history = history;
  return req;
}

std::string Megakernel::describe() const {
  return "megakernel " + std::string(info_.name) + ", " + std::to_string(ctas_) + " CTAs x " + std::to_string(kThreads) +
         " threads, " + std::to_string(info_.smem_bytes / 1024) + " KB shared memory (" + std::to_string(info_.stages) +
         " x " + std::to_string(info_.buf_bytes / 1024) + " KB weight buffers), " + std::to_string(splits_) +
         " attention splits per kv head" +
         (shape_.hybrid ? std::string() : " (stage C merges up to " + std::to_string(merge_splits_) + ")") +
         (flagged_ ? ", flagged vectors" : "") + (one_stage_mlp_ ? ", one-stage MLP" : "") +
         (ablate_ ? ", MEGAQWEN_MK_ABLATE=" + std::to_string(ablate_) : std::string()) +
         (probe_ ? ", timing probe " + probe_name(probe_) + " (meaningless tokens)" : std::string());
}

int Megakernel::run(int pos, const RunRequest& req, const TokenSink& on_token) {
  if (req.max_tokens < 1) return 0;
  if (req.eos_ids.size() > size_t(kMaxEos)) fail("megakernel: at most {} eos ids", kMaxEos);
  if (pos < 0 || int64_t(pos) + req.max_tokens > context_)
    fail("megakernel: {} tokens from position {} do not fit the context ({})", req.max_tokens, pos, context_);
  if (int(req.gumbel) + int(req.top_k > 0) + int(req.nucleus) > 1)
    fail("megakernel: Gumbel-max, top-k and nucleus selection are exclusive");
  const bool sampled = req.gumbel || req.top_k > 0 || req.nucleus;
  if (sampled && !(req.temperature > 0.0f)) fail("megakernel: sampling needs a temperature > 0");
  if (req.top_k > 0) {
    const std::string why = filter_unsupported_reason(req.top_k);
    if (!why.empty()) fail("megakernel: {}", why);
    if (req.top_k > vocab_) fail("megakernel: top_k {} exceeds the vocabulary ({})", req.top_k, vocab_);
    if (cand_v_.size() == 0) {
      cand_v_.resize(size_t(ctas_) * kMaxTopK);
      cand_i_.resize(size_t(ctas_) * kMaxTopK);
      cand_n_.resize(size_t(ctas_));
    }
  }
  if (req.nucleus && vocab_ >= kNucleusMaxVocab)
    fail("megakernel: a vocabulary of {} ids is beyond the nucleus sampler's {}", vocab_, kNucleusMaxVocab);
  if ((req.top_k > 0 || req.nucleus) && sel_vals_.size() == 0) sel_vals_.resize(size_t(vocab_));
  if (req.logprobs >= 0) {
    const std::string why = logprob_unsupported_reason(req.logprobs);
    if (!why.empty()) fail("megakernel: {}", why);
    if (!records_host_) {
      lp_raw_.resize(size_t(vocab_));
      lp_lse_.resize(2 * size_t(ctas_));
      lp_cand_v_.resize(size_t(ctas_) * kMaxLogprobTop);
      lp_cand_i_.resize(size_t(ctas_) * kMaxLogprobTop);
      lp_cand_n_.resize(size_t(ctas_));
      void* r = nullptr;
      CUDA_CHECK(cudaHostAlloc(&r, sizeof(LogprobRecord) * kLaunchTokenCap, cudaHostAllocMapped));
      records_host_.reset(static_cast<LogprobRecord*>(r));
      CUDA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&records_dev_), r, 0));
    }
  }
  const bool penalties = req.repetition_penalty != 1.0f || req.presence_penalty != 0.0f || req.frequency_penalty != 0.0f;
  if (penalties) {
    // The counts start from the history (once per run: a relaunch continues with the kernel's own
    // increments, which cover every drawn token).
    if (counts_.size() == 0) counts_.resize(size_t(vocab_));
    CUDA_CHECK(cudaMemsetAsync(counts_.data(), 0, counts_.bytes(), stream_));
    std::vector<int32_t> ids;
    ids.reserve(req.history.size());
    for (int32_t id : req.history)
      if (id >= 0 && id < vocab_) ids.push_back(id);  // as the CPU Sampler: ids outside the vocabulary are skipped
    if (!ids.empty()) {
      if (history_.size() < ids.size()) history_.resize(std::max(ids.size(), size_t(4096)));
      CUDA_CHECK(cudaMemcpyAsync(history_.data(), ids.data(), ids.size() * sizeof(int32_t), cudaMemcpyHostToDevice, stream_));
      count_tokens(history_.data(), int(ids.size()), counts_.data(), stream_);
    }
    CUDA_CHECK(cudaStreamSynchronize(stream_));  // `ids` is pageable and goes away
  }
  int delivered = 0;
  int32_t token = req.token;
  while (delivered < req.max_tokens) {
    const int n = std::min(kLaunchTokenCap, req.max_tokens - delivered);
    bool host_stopped = false, finished = false;
    int32_t last = token;
    const int got = launch_once(pos + delivered, req, token, n, req.step + uint64_t(delivered),
                                req.logits_out ? req.logits_out + size_t(delivered) * size_t(vocab_) : nullptr,
                                [&](int32_t id, const TokenLogprob* lp) {
                                  last = id;
                                  return on_token(id, lp);
                                },
                                &host_stopped, &finished);
    delivered += got;
    token = last;
    // The kernel stops on its own at an eos id or its budget n; a relaunch continues only after a full
    // budget with neither (the mailbox cap split a longer run).
    if (host_stopped || got < n) break;
    if (std::find(req.eos_ids.begin(), req.eos_ids.end(), last) != req.eos_ids.end()) break;
  }
  return delivered;
}

int Megakernel::launch_once(int pos, const RunRequest& req, int32_t token, int max_tokens, uint64_t step,
                            float* logits_out, const TokenSink& on_token, bool* host_stopped,
                            bool* kernel_finished) {
  mailbox_host_->stop = 0;
  mailbox_host_->finished = 0;
  for (int i = 0; i < max_tokens; ++i) mailbox_host_->tokens[i] = -1;  // not drawn (layout.h, Mailbox)
  std::atomic_thread_fence(std::memory_order_seq_cst);
  // The only per-launch preparation: zero the counters (they then count up across all its tokens).
  CUDA_CHECK(cudaMemsetAsync(counters_.data(), 0, counters_.bytes(), stream_));
  if (timing_.size()) CUDA_CHECK(cudaMemsetAsync(timing_.data(), 0, timing_.bytes(), stream_));
  // Flagged vectors: epoch 0 everywhere, so no word of an earlier launch passes for this one's.
  for (DeviceBuffer<uint64_t>* words :
       {&x_words_, &xmid_words_, &act_words_, &qkv_words_, &partial_o_words_, &partial_ml_words_, &attn_words_})
    if (words->size()) CUDA_CHECK(cudaMemsetAsync(words->data(), 0, words->bytes(), stream_));
  // The one-stage MLP's sums for token 0 (parity 0) start at zero; the kernel zeroes each next half.
  if (x_fixed_.size()) CUDA_CHECK(cudaMemsetAsync(x_fixed_.data(), 0, x_fixed_.bytes() / 2, stream_));

  Params p{};
  p.layers = layers_.data();
  p.embed = binding_.embed;
  p.lm_head = binding_.lm_head;
  p.final_norm = binding_.final_norm;
  p.inv_freq = binding_.inv_freq;
  p.delta_layers = binding_.delta_layers;
  p.context = context_;
  p.x = x_.data();
  p.xmid = xmid_.data();
  p.qkv = qkv_.data();
  p.attn = attn_.data();
  p.act = act_.data();
  p.x_fixed = one_stage_mlp_ ? x_fixed_.data() : nullptr;
  p.x_words = flagged_ ? x_words_.data() : nullptr;
  p.xmid_words = flagged_ ? xmid_words_.data() : nullptr;
  p.act_words = flagged_ ? act_words_.data() : nullptr;
  p.qkv_words = qkv_words_.size() ? qkv_words_.data() : nullptr;
  p.partial_o_words = partial_o_words_.size() ? partial_o_words_.data() : nullptr;
  p.partial_ml_words = partial_ml_words_.size() ? partial_ml_words_.data() : nullptr;
  p.attn_words = attn_words_.size() ? attn_words_.data() : nullptr;
  p.partial_o = partial_o_.data();
  p.partial_ml = partial_ml_.data();
  p.best_v = best_v_.data();
  p.best_i = best_i_.data();
  p.counters = counters_.data();
  p.tokens = tokens_.data();
  p.mailbox = mailbox_dev_;
  p.logits_out = logits_out;
  p.timing = timing_.size() ? timing_.data() : nullptr;
  p.first_token = token;
  p.pos0 = pos;
  p.max_tokens = max_tokens;
  p.splits = splits_;
  p.merge_splits = merge_splits_;
  p.vocab = vocab_;
  p.n_eos = int(req.eos_ids.size());
  for (size_t i = 0; i < req.eos_ids.size(); ++i) p.eos[i] = req.eos_ids[i];
  p.eps = eps_;
  p.l2_eps = float(cpu::kDeltaNetL2NormEps);
  p.attn_scale_log2 = scale_log2_;
  p.ablate = ablate_;
  p.probe = probe_;
  p.temperature = req.gumbel || req.top_k > 0 || req.nucleus ? req.temperature : 1.0f;  // greedy: penalties only
  p.gumbel = req.gumbel ? 1 : 0;
  p.seed = req.seed;
  p.step0 = step;
  const bool penalties = req.repetition_penalty != 1.0f || req.presence_penalty != 0.0f || req.frequency_penalty != 0.0f;
  p.counts = penalties ? counts_.data() : nullptr;
  p.repetition_penalty = req.repetition_penalty;
  p.presence_penalty = req.presence_penalty;
  p.frequency_penalty = req.frequency_penalty;
  p.top_k = req.top_k;
  p.nucleus = req.nucleus ? 1 : 0;
  p.top_p = req.top_p;
  p.min_p = req.min_p;
  p.sel_vals = sel_vals_.data();
  p.cand_v = cand_v_.data();
  p.cand_i = cand_i_.data();
  p.cand_n = cand_n_.data();
  p.lp_records = req.logprobs >= 0 ? records_dev_ : nullptr;
  p.logprob_top = std::max(req.logprobs, 0);
  p.lp_raw = lp_raw_.data();
  p.lp_parts = {lp_lse_.data(), lp_cand_v_.data(), lp_cand_i_.data(), lp_cand_n_.data()};
  launch(shape_, p, ctas_, stream_);
  ++launches_;

  // Poll the mailbox while the kernel runs; hand tokens over in order.
  int seen = 0;
  bool stopped = false;
  // Watchdog: a persistent kernel that deadlocks never returns; after watchdog_s without a new token
  // the counters are printed, and once they stop moving the process aborts (a test run then ends with
  // the diagnosis instead of hanging until its timeout). 0 disables it.
  const double watchdog_s = watchdog_s_;
  auto last_progress = std::chrono::steady_clock::now();
  std::vector<uint32_t> watched;
  bool slow_noted = false;
  bool kernel_done = false;  // the stream completed: every slot the kernel wrote is visible
  for (;;) {
    int fresh = 0;
    while (seen < max_tokens && !stopped) {
      const int32_t id = mailbox_host_->tokens[seen];
      if (id < 0) break;
      std::atomic_thread_fence(std::memory_order_acquire);
      TokenLogprob scored;
      if (req.logprobs >= 0) {
        // Written before the slot (a system fence between): visible now.
        const LogprobRecord& r = records_host_[size_t(seen)];
        scored.token = id;
        scored.logprob = r.logprob;
        const int n = std::clamp(r.n, 0, kMaxLogprobTop);
        for (int i = 0; i < n; ++i) scored.top.push_back({r.ids[i], r.logprobs[i]});
      }
      ++seen;
      ++fresh;
      bool go = false;
      try {
        go = on_token(id, req.logprobs >= 0 ? &scored : nullptr);
      } catch (...) {
        // The kernel must not keep running (and writing the cache) behind the caller's back.
        mailbox_host_->stop = 1;
        cudaStreamSynchronize(stream_);
        throw;
      }
      if (!go) {
        stopped = true;
        mailbox_host_->stop = 1;
      }
    }
    if (fresh > 0) {
      last_progress = std::chrono::steady_clock::now();
      watched.clear();
    }
    if (stopped || seen >= max_tokens || kernel_done) break;
    if (watchdog_s > 0 &&
        std::chrono::duration<double>(std::chrono::steady_clock::now() - last_progress).count() > watchdog_s) {
      const int look = dump_counters(seen, &watched);  // prints the table the first time
      const bool moved = look == 1;
      if (look == 0) {
        std::fprintf(stderr, "megakernel watchdog: the counters did not move for 2 s: deadlock; aborting\n");
        std::fflush(stderr);
        std::abort();
      }
      if (moved && !slow_noted) {
        std::fprintf(stderr, "megakernel watchdog: the counters still move (slow, not stuck); waiting on\n");
        slow_noted = true;
      }
      // Look again in 2 s.
      last_progress = std::chrono::steady_clock::now() -
                      std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                          std::chrono::duration<double>(std::max(0.0, watchdog_s - 2.0)));
    }
    // The end: once `finished` is set (or the kernel returned), wait for the kernel; then every slot it
    // wrote is visible (slots may land out of order), and the next round delivers the rest.
    const cudaError_t q = mailbox_host_->finished ? cudaStreamSynchronize(stream_) : cudaStreamQuery(stream_);
    if (q == cudaSuccess) {
      std::atomic_thread_fence(std::memory_order_acquire);
      kernel_done = true;
      continue;
    }
    if (q != cudaErrorNotReady) CUDA_CHECK(q);
    std::this_thread::yield();
  }
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  *host_stopped = stopped;
  *kernel_finished = mailbox_host_->finished != 0;
  if (timing_.size()) {
    std::vector<unsigned long long> t(timing_.size());
    CUDA_CHECK(cudaMemcpy(t.data(), timing_.data(), timing_.bytes(), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < t.size(); ++i) timing_sum_[i] += t[i];
    int drawn = 0;
    while (drawn < max_tokens && mailbox_host_->tokens[drawn] >= 0) ++drawn;
    timed_tokens_ += uint64_t(drawn);
  }
  return seen;
}

std::string Megakernel::timing_report() const {
  if (!timing_compiled() || timed_tokens_ == 0) return {};
  std::string out =
      "megakernel stage timing (ns per token summed over layers, mean over CTAs; input wait / work / weight wait; "
      "max over CTAs of wait + work + weights):\n";
  double total[kTimingSlots] = {};
  for (int s = 0; s < kStageCount; ++s) {
    double sum[kTimingSlots] = {}, worst = 0;
    for (int b = 0; b < ctas_; ++b) {
      double cta_total = 0;
      for (int k = 0; k < kTimingSlots; ++k) {
        const double v = double(timing_sum_[(size_t(b) * kStageCount + s) * kTimingSlots + k]);
        sum[k] += v;
        cta_total += v;
      }
      worst = std::max(worst, cta_total);
    }
    const double per = double(ctas_) * double(timed_tokens_);
    for (int k = 0; k < kTimingSlots; ++k) total[k] += sum[k] / per;
    char line[200];
    std::snprintf(line, sizeof line, "  %-12s %10.0f / %10.0f / %10.0f   max %10.0f\n", stage_name(Stage(s)),
                  sum[0] / per, sum[1] / per, sum[2] / per, worst / double(timed_tokens_));
    out += line;
  }
  char line[200];
  std::snprintf(line, sizeof line, "  %-12s %10.0f / %10.0f / %10.0f   (%llu tokens timed)\n", "all", total[0], total[1],
                total[2], static_cast<unsigned long long>(timed_tokens_));
  return out + line;
}

}  // namespace megaqwen::cuda::mk
