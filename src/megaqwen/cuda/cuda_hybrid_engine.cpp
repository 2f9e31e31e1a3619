#include "megaqwen/cuda/cuda_hybrid_engine.h"

#include <algorithm>
#include <cmath>

#include "megaqwen/cuda/cuda_check.h"
#include "megaqwen/cuda/device_cache_copy.h"
#include "megaqwen/cuda/kernels.h"
#include "megaqwen/cuda/megakernel/runner.h"
#include "megaqwen/cuda/prefill_logits.h"
#include "megaqwen/engine/cpu_gated_delta_net.h"
#include "megaqwen/engine/cpu_ops.h"
#include "megaqwen/engine/recurrent_state_tensors.h"
#include "megaqwen/model/rope.h"
#include "megaqwen/util/error.h"

namespace megaqwen::cuda {

namespace {

// The shapes the kernels are compiled for; checked once at load so a kernel never sees another.
void check_hybrid_shapes(const ModelConfig& c) {
  if (!c.is_hybrid()) fail("the hybrid CUDA engine runs Qwen3.5 models; {} is not one", c.model_type);
  if (!supported_head_dim(c.head_dim))
    fail("the CUDA engine supports head_dim 64, 128 or 256, the model has {}", c.head_dim);
  if (c.num_kv_heads <= 0 || c.num_heads % c.num_kv_heads != 0 ||
      !supported_group(c.head_dim, c.num_heads / c.num_kv_heads))
    fail(
        "the CUDA engine supports 1, 2, 4 (and at head_dim <= 128, 8) query heads per kv head; the model has {} / {} "
        "at head_dim {}",
        c.num_heads, c.num_kv_heads, c.head_dim);
  if (c.rotary_dim < 2 || c.rotary_dim > c.head_dim || c.rotary_dim % 2 != 0)
    fail("the CUDA engine needs an even rotary_dim within head_dim {}, the model has {}", c.head_dim, c.rotary_dim);
  for (int n : {c.hidden_size, c.q_dim(), c.intermediate_size, c.linear_value_dim()})
    if (n % 8 != 0)
      fail("the CUDA engine needs hidden, q, intermediate and DeltaNet value sizes that are multiples of 8 (got {})",
           n);
  if (c.hidden_size > 4096)
    fail("the CUDA engine's RMSNorm supports widths up to 4096 (hidden size {})", c.hidden_size);
  if (c.linear_num_key_heads <= 0 || c.linear_num_value_heads % c.linear_num_key_heads != 0)
    fail("the DeltaNet kernels need value heads ({}) a multiple of key heads ({})", c.linear_num_value_heads,
         c.linear_num_key_heads);
  if (c.linear_key_head_dim < 1 || c.linear_key_head_dim > 128)
    fail("the DeltaNet kernels support key head sizes up to 128, the model has {}", c.linear_key_head_dim);
  if (c.linear_conv_kernel < 2 || c.linear_conv_kernel > kConvMaxTaps)
    fail("the DeltaNet conv kernel supports 2 to {} taps, the model has {}", kConvMaxTaps, c.linear_conv_kernel);
}

// Widths of the prefill buffers.
struct HybridWidths {
  size_t H, Q, KV, I, V, D, C, Vd, nv, mix, gemm_in, proj;
  explicit HybridWidths(const ModelConfig& c)
      : H(size_t(c.hidden_size)),
        Q(size_t(c.q_dim())),
        KV(size_t(c.kv_dim())),
        I(size_t(c.intermediate_size)),
        V(size_t(c.vocab_size)),
        D(size_t(c.head_dim)),
        C(size_t(c.linear_conv_dim())),
        Vd(size_t(c.linear_value_dim())),
        nv(size_t(c.linear_num_value_heads)),
        mix(std::max(2 * Q + 2 * KV, C)),
        gemm_in(std::max({H, Q, Vd, I})),
        proj(std::max(2 * Q + 2 * KV, C + Vd + 2 * nv)) {}
};

// Prompts shorter than this run the delta rule token by token: below half a chunk the chunked form's
// three launches and padded chunk cost about what the per-token steps do (an estimate; the bench's
// MEGAQWEN_DELTANET_PREFILL=sequential runs measure it).
constexpr int kChunkedDeltaRuleMinTokens = 16;

size_t delta_workspace_floats(const ModelConfig& c, int T) {
  return cuda::delta_rule_chunked_workspace_floats(T, c.linear_num_key_heads, c.linear_num_value_heads,
                                                   c.linear_key_head_dim, c.linear_value_head_dim);
}

}  // namespace

CudaMemoryPlan plan_hybrid_memory(const Model& model, const CudaEngineOptions& options) {
  const ModelConfig& c = model.config;
  const HybridWidths w(c);
  const uint64_t context = uint64_t(resolve_cuda_context(c, options.context));
  const uint64_t T = uint64_t(std::max(1, std::min<int>(options.prefill_chunk, int(context))));
  const uint64_t full = uint64_t(c.count_layers(LayerType::FullAttention));
  const uint64_t linear = uint64_t(c.count_layers(LayerType::LinearAttention));
  const uint64_t states = linear * 4 *
                          (uint64_t(c.linear_num_value_heads) * c.linear_key_head_dim * c.linear_value_head_dim +
                           uint64_t(c.linear_conv_kernel - 1) * w.C);
  CudaMemoryPlan p;
  p.weights = hybrid_weight_device_bytes(c);
  p.kv_cache = 2ull * full * context * w.KV * 2;
  p.states = states * (1 + kMaxStateSnapshots);
  p.activations = 4 * T * (w.H + w.mix + 2 * w.Q + 2 * w.Vd + 2 * w.nv + 2 * w.I) + 2 * 2 * T * w.gemm_in +
                  4 * uint64_t(kLogitRows) * w.V + 4 * 4 * w.V /* logits, scratch, counts, history */ +
                  4 * 64 * w.Q * 2 + 4 * (w.H + w.proj + w.Q + std::max(w.Q, w.Vd) + w.I);
  if (options.chunked_delta_rule && linear > 0) p.activations += 4 * delta_workspace_floats(c, int(T));
  p.reserve = kDeviceReserveBytes;
  return p;
}

CudaHybridEngine::CudaHybridEngine(std::shared_ptr<const Model> model, CudaEngineOptions options)
    : model_(std::move(model)), options_(options) {
  const ModelConfig& c = model_->config;
  check_hybrid_shapes(c);
  context_ = resolve_cuda_context(c, options_.context);
  chunk_ = std::max(1, std::min(options_.prefill_chunk, context_));

  const cudaDeviceProp prop = open_cuda_device(options_.device, &device_name_);
  check_prefill_attention_fits(prop, c.head_dim, options_.tensor_core_prefill);
  check_memory_fits(prop, plan_hybrid_memory(*model_, options_), context_);

  owned_stream_ = CudaStream::non_blocking();
  stream_ = owned_stream_.get();
  weights_ = upload_hybrid_weights(*model_);

  int full = 0, linear = 0;
  for (LayerType t : c.layer_types) slot_.push_back(t == LayerType::FullAttention ? full++ : linear++);
  const HybridWidths w(c);
  const size_t T = size_t(chunk_);
  k_cache_.resize(size_t(full) * size_t(context_) * w.KV);
  v_cache_.resize(size_t(full) * size_t(context_) * w.KV);
  if (k_cache_.size()) {  // zeros, so a read past the filled positions reads zeros (tests poison it)
    CUDA_CHECK(cudaMemset(k_cache_.data(), 0, k_cache_.bytes()));
    CUDA_CHECK(cudaMemset(v_cache_.data(), 0, v_cache_.bytes()));
  }
  state_floats_ = size_t(c.linear_num_value_heads) * size_t(c.linear_key_head_dim) * size_t(c.linear_value_head_dim);
  conv_floats_ = size_t(c.linear_conv_kernel - 1) * w.C;
  recurrent_.resize(size_t(linear) * state_floats_);
  conv_state_.resize(size_t(linear) * conv_floats_);
  if (recurrent_.size()) {
    CUDA_CHECK(cudaMemset(recurrent_.data(), 0, recurrent_.bytes()));
    CUDA_CHECK(cudaMemset(conv_state_.data(), 0, conv_state_.bytes()));
  }
  rollback_ = RecurrentRollback<DeviceStates>(context_);

  const std::vector<float> inv = rope_inverse_frequencies(c);
  inv_freq_ = upload_f32(inv);

  p_tokens_.resize(T);
  p_x_.resize(T * w.H);
  p_mix_.resize(T * w.mix);
  p_q_.resize(T * w.Q);
  p_attn_.resize(T * w.Q);
  p_z_.resize(T * w.Vd);
  p_o_.resize(T * w.Vd);
  p_b_.resize(T * w.nv);
  p_a_.resize(T * w.nv);
  p_gu_.resize(T * 2 * w.I);
  p_hi_.resize(T * w.gemm_in);
  if (options_.split_activations) p_lo_.resize(T * w.gemm_in);
  if (options_.chunked_delta_rule && linear > 0) p_delta_work_.resize(delta_workspace_floats(c, chunk_));

  splits_ = full ? std::clamp((2 * prop.multiProcessorCount + c.num_kv_heads - 1) / c.num_kv_heads, 1, 64) : 1;
  d_x_.resize(w.H);
  d_proj_.resize(w.proj);
  d_q_.resize(w.Q);
  d_mix_out_.resize(std::max(w.Q, w.Vd));
  d_act_.resize(w.I);
  partial_o_.resize(size_t(c.num_heads) * size_t(splits_) * w.D);
  partial_ml_.resize(size_t(c.num_heads) * size_t(splits_) * 2);
  logits_.resize(w.V);
  CUDA_CHECK(cudaMemset(logits_.data(), 0, logits_.bytes()));
  sampler_ = DeviceSampler(c.vocab_size, stream_);
  step_ = DecodeStep(w.V);

  device_name_ += std::string(", prefill attention: ") + (options_.tensor_core_prefill ? "tc" : "fp32");
  device_name_ += std::string(", DeltaNet prefill: ") + (options_.chunked_delta_rule ? "chunked" : "sequential");
  // Whole runs of decode steps (generate_on_device) in the megakernel, over the same weights and states.
  decoder_ = MegakernelDecoder(options_.decode_kernel, c, options_.device, stream_, [&] {
    mk::Binding b;
    for (size_t l = 0; l < weights_.layers.size(); ++l) {
      const CudaHybridLayerWeights& w = weights_.layers[l];
      const int slot = slot_[l];
      mk::LayerWeights lw{};
      lw.gate_up = w.gate_up.data();
      lw.down = w.down.data();
      lw.input_norm = w.input_norm.data();
      lw.post_norm = w.post_norm.data();
      if (w.type == LayerType::FullAttention) {
        lw.qkv = w.qgkv.data();
        lw.o = w.o.data();
        lw.q_norm = w.q_norm.data();
        lw.k_norm = w.k_norm.data();
        lw.k_cache = k_layer(slot);
        lw.v_cache = v_layer(slot);
      } else {
        lw.in_proj = w.in_proj.data();
        lw.conv = w.conv.data();
        lw.A_log = w.A_log.data();
        lw.dt_bias = w.dt_bias.data();
        lw.gated_norm = w.gated_norm.data();
        lw.out = w.out.data();
        lw.state = recurrent_state(slot);
        lw.conv_state = conv_state(slot);
        b.delta_layers |= uint64_t(1) << l;
      }
      b.layers.push_back(lw);
    }
    b.embed = weights_.embed.data();
    b.lm_head = weights_.lm_head;
    b.final_norm = weights_.final_norm.data();
    b.inv_freq = inv_freq_.data();
    b.context = context_;
    return b;
  });
  device_name_ += decoder_.device_suffix() + " (Qwen3.5 hybrid)";
  // The uploads went to the legacy default stream, which stream_ (non-blocking) does not wait for.
  CUDA_CHECK(cudaDeviceSynchronize());
}

CudaHybridEngine::~CudaHybridEngine() = default;

uint16_t* CudaHybridEngine::k_layer(int slot) {
  return k_cache_.data() + size_t(slot) * size_t(context_) * size_t(model_->config.kv_dim());
}
uint16_t* CudaHybridEngine::v_layer(int slot) {
  return v_cache_.data() + size_t(slot) * size_t(context_) * size_t(model_->config.kv_dim());
}

std::span<const float> CudaHybridEngine::prefill(std::span<const int32_t> tokens) {
  if (tokens.empty()) fail("prefill needs at least one token");
  check_new_tokens(tokens);  // the whole call, before any part of it runs
  if (tokens.size() > kSnapshotBeforeLastAbove && recurrent_.size() > 0) {
    forward_prefill(tokens.first(tokens.size() - 1), nullptr);
    remember_states();  // the same prompt again truncates to here (recurrent_rollback.h)
    tokens = tokens.last(1);
  }
  forward_prefill(tokens, nullptr);
  remember_states();
  return step_.logits_to_host(logits_.data(), stream_);
}

void CudaHybridEngine::prefill_all_logits(std::span<const int32_t> tokens, std::vector<float>& out) {
  if (tokens.empty()) fail("prefill needs at least one token");
  check_new_tokens(tokens);
  out.resize(tokens.size() * size_t(model_->config.vocab_size));
  forward_prefill(tokens, out.data());
  remember_states();
}

// One pass per chunk of up to chunk_ tokens, each continuing after the cache and states so far.
void CudaHybridEngine::forward_prefill(std::span<const int32_t> tokens, float* all_logits) {
  check_new_tokens(tokens);
  if (!gemm_) gemm_ = std::make_unique<CublasGemm>(stream_);
  const ModelConfig& c = model_->config;
  const int H = c.hidden_size, I = c.intermediate_size, V = c.vocab_size;
  const float eps = float(c.rms_norm_eps);
  uint16_t* hi = p_hi_.data();
  uint16_t* lo = options_.split_activations ? p_lo_.data() : nullptr;

  for (size_t begin = 0; begin < tokens.size(); begin += size_t(chunk_)) {
    const int T = int(std::min(size_t(chunk_), tokens.size() - begin));
    const int p0 = position_;
    const auto chunk = tokens.subspan(begin, size_t(T));
    rollback_.record(p0, chunk);
    CUDA_CHECK(
        cudaMemcpyAsync(p_tokens_.data(), chunk.data(), size_t(T) * sizeof(int32_t), cudaMemcpyHostToDevice, stream_));
    embed_rows(weights_.embed.data(), H, p_tokens_.data(), T, p_x_.data(), stream_);
    for (size_t l = 0; l < weights_.layers.size(); ++l) {
      const CudaHybridLayerWeights& w = weights_.layers[l];
      // Token mixer: x += mixer(RMSNorm(x)).
      rms_norm_split(p_x_.data(), w.input_norm.data(), T, H, eps, hi, lo, stream_);
      if (w.type == LayerType::FullAttention) {
        prefill_attention(w, slot_[l], T, p0, hi, lo);
      } else {
        prefill_delta_net(w, slot_[l], T, hi, lo);
      }
      // MLP: x += SwiGLU(RMSNorm(x)).
      rms_norm_split(p_x_.data(), w.post_norm.data(), T, H, eps, hi, lo, stream_);
      gemm_->gemm_split(hi, lo, w.gate_up.data(), p_gu_.data(), T, 2 * I, H, 0.0f);
      swiglu_split(p_gu_.data(), T, I, hi, lo, stream_);
      gemm_->gemm_split(hi, lo, w.down.data(), p_x_.data(), T, H, I, 1.0f);
    }
    const bool last_chunk = begin + size_t(T) == tokens.size();
    prefill_logits(*gemm_,
                   {p_x_.data(), T, H, V, weights_.final_norm.data(), eps, weights_.lm_head, hi, lo,
                    all_logits ? all_logits + begin * size_t(V) : nullptr, last_chunk, logits_.data()},
                   p_logits_, stream_);
    // The host's token buffer, the cache and the states must be consistent before the next chunk.
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    position_ += T;
  }
}

// Gated attention over a chunk (hi/lo hold RMSNorm(x)): q | gate | k | v in one GEMM, QK-norm + partial
// RoPE + append, causal attention, the sigmoid gate read in place from the projection, then x += o W_o^T.
void CudaHybridEngine::prefill_attention(const CudaHybridLayerWeights& w, int slot, int T, int p0, uint16_t* hi,
                                         uint16_t* lo) {
  const ModelConfig& c = model_->config;
  const int H = c.hidden_size, Q = c.q_dim(), KV = c.kv_dim(), row = 2 * Q + 2 * KV;
  gemm_->gemm_split(hi, lo, w.qgkv.data(), p_mix_.data(), T, row, H, 0.0f);
  qk_norm_rope(
      {p_mix_.data(), T, c.num_heads, c.num_kv_heads, c.head_dim, c.rotary_dim, true, w.q_norm.data(), w.k_norm.data(),
       inv_freq_.data(), nullptr, p0, float(c.rms_norm_eps), p_q_.data(), k_layer(slot), v_layer(slot)},
      stream_);
  const PrefillAttentionArgs attn{p_q_.data(), k_layer(slot), v_layer(slot), T, p0, c.num_heads, c.num_kv_heads,
                                  c.head_dim, 1.0f / std::sqrt(float(c.head_dim)), p_attn_.data()};
  options_.tensor_core_prefill ? attention_prefill_tc(attn, stream_) : attention_prefill(attn, stream_);
  sigmoid_gate(p_attn_.data(), p_mix_.data() + Q, T, Q, row, stream_);
  split_bf16(p_attn_.data(), size_t(T) * size_t(Q), hi, lo, stream_);
  gemm_->gemm_split(hi, lo, w.o.data(), p_x_.data(), T, H, Q, 1.0f);
}

// Gated DeltaNet over a chunk (hi/lo hold RMSNorm(x)): the four projections as row ranges of the
// stacked in_proj, conv + SiLU, the delta rule through the chunk, the gated norm, then x += o W_out^T.
void CudaHybridEngine::prefill_delta_net(const CudaHybridLayerWeights& w, int slot, int T, uint16_t* hi, uint16_t* lo) {
  const ModelConfig& c = model_->config;
  const int H = c.hidden_size, C = c.linear_conv_dim(), Vd = c.linear_value_dim(), nv = c.linear_num_value_heads;
  const uint16_t* in = w.in_proj.data();
  gemm_->gemm_split(hi, lo, in, p_mix_.data(), T, C, H, 0.0f);
  gemm_->gemm_split(hi, lo, in + size_t(C) * size_t(H), p_z_.data(), T, Vd, H, 0.0f);
  gemm_->gemm_split(hi, lo, in + size_t(C + Vd) * size_t(H), p_b_.data(), T, nv, H, 0.0f);
  gemm_->gemm_split(hi, lo, in + size_t(C + Vd + nv) * size_t(H), p_a_.data(), T, nv, H, 0.0f);
  causal_conv(p_mix_.data(), w.conv.data(), conv_state(slot), T, C, c.linear_conv_kernel, stream_);
  const DeltaRuleArgs rule{p_mix_.data(), p_b_.data(), p_a_.data(), w.A_log.data(), w.dt_bias.data(),
                           recurrent_state(slot), p_o_.data(), T, c.linear_num_key_heads, nv, c.linear_key_head_dim,
                           c.linear_value_head_dim, float(cpu::kDeltaNetL2NormEps)};
  if (options_.chunked_delta_rule && T >= kChunkedDeltaRuleMinTokens)
    delta_rule_chunked(rule, p_delta_work_.data(), stream_);
  else
    delta_rule(rule, stream_);
  gated_rms_norm(p_o_.data(), p_z_.data(), w.gated_norm.data(), T * nv, c.linear_value_head_dim, float(c.rms_norm_eps),
                 p_o_.data(), stream_);
  split_bf16(p_o_.data(), size_t(T) * size_t(Vd), hi, lo, stream_);
  gemm_->gemm_split(hi, lo, w.out.data(), p_x_.data(), T, H, Vd, 1.0f);
}

// The decode step over fixed buffers (token and position from step_), so its graph serves every step.
// d_proj_ holds one token's projection: q | gate | k | v, or the DeltaNet's qkv | z | b | a.
void CudaHybridEngine::enqueue_decode_step() {
  const ModelConfig& c = model_->config;
  const int H = c.hidden_size, Q = c.q_dim(), KV = c.kv_dim(), I = c.intermediate_size, V = c.vocab_size;
  const int C = c.linear_conv_dim(), Vd = c.linear_value_dim(), nv = c.linear_num_value_heads;
  const float eps = float(c.rms_norm_eps);
  const int32_t* token = step_.token();
  const int32_t* pos = step_.position();
  float* proj = d_proj_.data();
  float* mixed = d_mix_out_.data();
  embed_rows(weights_.embed.data(), H, token, 1, d_x_.data(), stream_);
  for (size_t l = 0; l < weights_.layers.size(); ++l) {
    const CudaHybridLayerWeights& w = weights_.layers[l];
    const int slot = slot_[l];
    if (w.type == LayerType::FullAttention) {
      gemv_bf16_normed(w.qgkv.data(), d_x_.data(), w.input_norm.data(), eps, 2 * Q + 2 * KV, H, proj, GemvOut::Store,
                       stream_);
      qk_norm_rope({proj, 1, c.num_heads, c.num_kv_heads, c.head_dim, c.rotary_dim, true, w.q_norm.data(),
                    w.k_norm.data(), inv_freq_.data(), pos, 0, eps, d_q_.data(), k_layer(slot), v_layer(slot)},
                   stream_);
      attention_decode({d_q_.data(), k_layer(slot), v_layer(slot), pos, c.num_heads, c.num_kv_heads, c.head_dim,
                        splits_, 1.0f / std::sqrt(float(c.head_dim)), partial_o_.data(), partial_ml_.data(), mixed},
                       stream_);
      sigmoid_gate(mixed, proj + Q, 1, Q, 0, stream_);
      gemv_bf16(w.o.data(), mixed, H, Q, d_x_.data(), GemvOut::Add, stream_);
    } else {
      gemv_bf16_normed(w.in_proj.data(), d_x_.data(), w.input_norm.data(), eps, C + Vd + 2 * nv, H, proj,
                       GemvOut::Store, stream_);
      causal_conv(proj, w.conv.data(), conv_state(slot), 1, C, c.linear_conv_kernel, stream_);
      delta_rule(
          {proj, proj + C + Vd, proj + C + Vd + nv, w.A_log.data(), w.dt_bias.data(), recurrent_state(slot), mixed, 1,
           c.linear_num_key_heads, nv, c.linear_key_head_dim, c.linear_value_head_dim, float(cpu::kDeltaNetL2NormEps)},
          stream_);
      gated_rms_norm(mixed, proj + C, w.gated_norm.data(), nv, c.linear_value_head_dim, eps, mixed, stream_);
      gemv_bf16(w.out.data(), mixed, H, Vd, d_x_.data(), GemvOut::Add, stream_);
    }
    gemv_bf16_normed(w.gate_up.data(), d_x_.data(), w.post_norm.data(), eps, 2 * I, H, d_act_.data(), GemvOut::SwiGLU,
                     stream_);
    gemv_bf16(w.down.data(), d_act_.data(), H, I, d_x_.data(), GemvOut::Add, stream_);
  }
  gemv_bf16_normed(weights_.lm_head, d_x_.data(), weights_.final_norm.data(), eps, V, H, logits_.data(),
                   GemvOut::Store, stream_);
}

void CudaHybridEngine::run_decode_step(int32_t token) {
  check_new_tokens(std::span<const int32_t>(&token, 1));
  rollback_.record(position_, std::span<const int32_t>(&token, 1));
  step_.run(stream_, token, position_, options_.use_graph, [this] { enqueue_decode_step(); });
  ++position_;
}

std::span<const float> CudaHybridEngine::decode(int32_t token) {
  run_decode_step(token);
  return step_.logits_to_host(logits_.data(), stream_);
}

void CudaHybridEngine::decode_only(int32_t token) { run_decode_step(token); }

std::string CudaHybridEngine::megakernel_unsupported_reason(const SamplingParams& params) const {
  return decoder_.unsupported_reason(params);
}

std::optional<int> CudaHybridEngine::generate_on_device(int32_t token, int max_tokens, std::span<const int32_t> eos_ids,
                                                        const SamplingParams& params, std::span<const int32_t> history,
                                                        int logprobs, const DrawSink& on_draw) {
  if (!decoder_.serves(params, eos_ids, logprobs)) return std::nullopt;
  return megakernel_generate(token, max_tokens, eos_ids, params, history, logprobs, on_draw, nullptr);
}

int CudaHybridEngine::megakernel_generate(int32_t token, int max_tokens, std::span<const int32_t> eos_ids,
                                          const SamplingParams& params, std::span<const int32_t> history,
                                          int logprobs, const DrawSink& on_draw, float* logits_out) {
  check_new_tokens(std::span<const int32_t>(&token, 1));
  max_tokens = std::min(max_tokens, context_ - position_);  // every drawn token but the last is appended
  // Each appended token is recorded, as run_decode_step does, so truncate() can replay it.
  return decoder_.generate(position_, token, max_tokens, eos_ids, params, history, logprobs, on_draw, logits_out,
                           [this](int32_t fed) {
                             rollback_.record(position_, std::span<const int32_t>(&fed, 1));
                             ++position_;
                           });
}

std::optional<DeviceDraw> CudaHybridEngine::sample_on_device(const SamplingParams& params, std::span<const int32_t> history,
                                                             int logprobs) {
  KernelProfile::Scope profiled(step_.profile());  // MEGAQWEN_PEROP_PROFILE: the draw's kernels too
  return sampler_.sample(logits_.data(), params, history, logprobs);
}

// --- Rolling back: device snapshots of the DeltaNet states and replay (recurrent_rollback.h) ---------

CudaHybridEngine::DeviceStates CudaHybridEngine::copy_states() const {
  DeviceStates s{DeviceBuffer<float>(recurrent_.size()), DeviceBuffer<float>(conv_state_.size())};
  CUDA_CHECK(
      cudaMemcpyAsync(s.recurrent.data(), recurrent_.data(), recurrent_.bytes(), cudaMemcpyDeviceToDevice, stream_));
  CUDA_CHECK(
      cudaMemcpyAsync(s.conv.data(), conv_state_.data(), conv_state_.bytes(), cudaMemcpyDeviceToDevice, stream_));
  return s;
}

void CudaHybridEngine::remember_states() {
  if (recurrent_.size() == 0) return;  // no DeltaNet layer: nothing to roll back
  rollback_.remember(position_, [this] { return copy_states(); });
}

void CudaHybridEngine::truncate(int n) {
  if (n < 0 || n > position_) fail("cannot truncate the cache to {} tokens: it holds {}", n, position_);
  if (n == position_) return;
  if (recurrent_.size() == 0) {
    position_ = n;
    return;
  }
  rollback_.roll_back(
      n,
      [this](const DeviceStates* from) {
        if (from) {
          CUDA_CHECK(cudaMemcpyAsync(recurrent_.data(), from->recurrent.data(), recurrent_.bytes(),
                                     cudaMemcpyDeviceToDevice, stream_));
          CUDA_CHECK(cudaMemcpyAsync(conv_state_.data(), from->conv.data(), conv_state_.bytes(),
                                     cudaMemcpyDeviceToDevice, stream_));
        } else {
          CUDA_CHECK(cudaMemsetAsync(recurrent_.data(), 0, recurrent_.bytes(), stream_));
          CUDA_CHECK(cudaMemsetAsync(conv_state_.data(), 0, conv_state_.bytes(), stream_));
        }
      },
      [this](int start, std::span<const int32_t> ids) {
        position_ = start;
        if (ids.empty()) return;
        forward_prefill(ids, nullptr);
        remember_states();
      });
}

// --- Saving and restoring a sequence (engine_state.h): copies that stay on the device -------------

struct CudaHybridEngine::SavedState final : EngineState {
  SavedState(const Model* model, int position) : EngineState(model, position) {}
  uint64_t bytes() const override {
    auto size = [](const DeviceStates& s) { return s.recurrent.bytes() + s.conv.bytes(); };
    uint64_t n = k.bytes() + v.bytes() + size(now);
    for (const auto& [position, s] : rollback.snapshots) n += size(s);
    return n + rollback.tokens.size() * sizeof(int32_t);
  }
  DeviceBuffer<uint16_t> k, v;  // bf16 [full layers, position, kv_dim]
  DeviceStates now;             // the DeltaNet states at position()
  SavedRollback<DeviceStates> rollback;
};

CudaHybridEngine::DeviceStates CudaHybridEngine::clone_states(const DeviceStates& from) const {
  return DeviceStates{clone(from.recurrent, stream_), clone(from.conv, stream_)};
}

std::unique_ptr<EngineState> CudaHybridEngine::save_state() {
  const size_t layers = size_t(model_->config.count_layers(LayerType::FullAttention));
  const size_t kv = size_t(model_->config.kv_dim()), n = size_t(position_);
  auto state = std::make_unique<SavedState>(model_.get(), position_);
  state->k.resize(layers * n * kv);
  state->v.resize(layers * n * kv);
  copy_cache_rows(state->k.data(), n, k_cache_.data(), size_t(context_), layers, kv, n, stream_);
  copy_cache_rows(state->v.data(), n, v_cache_.data(), size_t(context_), layers, kv, n, stream_);
  state->now = DeviceStates{clone(recurrent_, stream_), clone(conv_state_, stream_)};
  state->rollback =
      rollback_.save(position_, [this](const DeviceStates& s) { return clone_states(s); });
  return state;
}

void CudaHybridEngine::restore_state(const EngineState& saved) {
  const auto& state = restorable_state<SavedState>(saved, model_.get());
  const size_t layers = size_t(model_->config.count_layers(LayerType::FullAttention));
  const size_t kv = size_t(model_->config.kv_dim()), n = size_t(state.position());
  // The snapshots first: the only step that allocates, so a failure leaves the engine as it was.
  SavedRollback<DeviceStates> snapshots;
  snapshots.tokens = state.rollback.tokens;
  for (const auto& [position, s] : state.rollback.snapshots)
    snapshots.snapshots.emplace_back(position, clone_states(s));
  copy_cache_rows(k_cache_.data(), size_t(context_), state.k.data(), n, layers, kv, n, stream_);
  copy_cache_rows(v_cache_.data(), size_t(context_), state.v.data(), n, layers, kv, n, stream_);
  copy_into(recurrent_, state.now.recurrent, stream_);
  copy_into(conv_state_, state.now.conv, stream_);
  rollback_.load(std::move(snapshots));
  position_ = state.position();
}

std::string CudaHybridEngine::state_format() const { return "cuda-qwen3.5-bf16"; }

// k and v of the full-attention layers: [full layers, tokens, kv_dim] bf16, as the device cache holds
// them; then the DeltaNet states and snapshots (recurrent_state_tensors.h), fp32 as on the device.
std::vector<StateTensor> CudaHybridEngine::state_tensors(const EngineState& saved) const {
  const auto& state = restorable_state<SavedState>(saved, model_.get());
  const ModelConfig& c = model_->config;
  const std::vector<int64_t> shape{c.count_layers(LayerType::FullAttention), state.position(), c.kv_dim()};
  std::vector<StateTensor> out{make_state_tensor("k", DType::BF16, shape, to_host(state.k)),
                               make_state_tensor("v", DType::BF16, shape, to_host(state.v))};
  auto host = [](const DeviceStates& s) { return HostRecurrentStates{to_host(s.recurrent), to_host(s.conv)}; };
  RecurrentStateTensors states{host(state.now), {}};
  for (const auto& [position, s] : state.rollback.snapshots) states.snapshots.emplace_back(position, host(s));
  add_recurrent_state_tensors(out, c, states);
  return out;
}

std::unique_ptr<EngineState> CudaHybridEngine::state_from_tensors(std::span<const int32_t> tokens,
                                                                  const StateTensorSource& source) const {
  const ModelConfig& c = model_->config;
  const int position = int(tokens.size());
  auto state = std::make_unique<SavedState>(model_.get(), position);
  const std::vector<int64_t> shape{c.count_layers(LayerType::FullAttention), position, c.kv_dim()};
  state->k = to_device(source.read<uint16_t>("k", DType::BF16, shape));
  state->v = to_device(source.read<uint16_t>("v", DType::BF16, shape));
  RecurrentStateTensors states = read_recurrent_state_tensors(source, c, position);
  auto device = [](const HostRecurrentStates& s) { return DeviceStates{to_device(s.recurrent), to_device(s.conv)}; };
  state->now = device(states.now);
  state->rollback.tokens.assign(tokens.begin(), tokens.end());
  for (const auto& [p, s] : states.snapshots) state->rollback.snapshots.emplace_back(p, device(s));
  return state;
}

std::optional<uint64_t> CudaHybridEngine::state_memory_available() const { return device_memory_free(); }

void CudaHybridEngine::fill_cache_with_noise(int n) {
  if (n < 0 || n > context_) fail("cannot fill the cache to {} tokens: the context holds {}", n, context_);
  const ModelConfig& c = model_->config;
  const size_t per_layer = size_t(n) * size_t(c.kv_dim());
  for (int slot = 0; slot < c.count_layers(LayerType::FullAttention); ++slot) {
    fill_noise_bf16(k_layer(slot), per_layer, uint32_t(2 * slot + 1), stream_);
    fill_noise_bf16(v_layer(slot), per_layer, uint32_t(2 * slot + 2), stream_);
  }
  // The DeltaNet states as after n tokens: zeros at n = 0, else bounded noise (the decay keeps S
  // bounded), as CpuHybridEngine fills them.
  if (recurrent_.size()) {
    if (n == 0) {
      CUDA_CHECK(cudaMemsetAsync(recurrent_.data(), 0, recurrent_.bytes(), stream_));
      CUDA_CHECK(cudaMemsetAsync(conv_state_.data(), 0, conv_state_.bytes(), stream_));
    } else {
      fill_noise_f32(recurrent_.data(), recurrent_.size(), 0.1f, 0x5eed, stream_);
      fill_noise_f32(conv_state_.data(), conv_state_.size(), 1.0f, 0x5eee, stream_);
    }
  }
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  rollback_.forget_all();
  position_ = n;
  if (n > 0) remember_states();  // rolling back to n restores this noise; before n there is nothing
}

uint64_t CudaHybridEngine::kv_bytes_per_token() const {
  return uint64_t(model_->config.count_layers(LayerType::FullAttention)) * 2 * uint64_t(model_->config.kv_dim()) *
         2;  // bf16
}

}  // namespace megaqwen::cuda
