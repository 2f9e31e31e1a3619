#include "megaqwen/cuda/cuda_engine.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "megaqwen/cuda/cuda_check.h"
#include "megaqwen/cuda/device_cache_copy.h"
#include "megaqwen/cuda/kernels.h"
#include "megaqwen/cuda/megakernel/runner.h"
#include "megaqwen/cuda/prefill_logits.h"
#include "megaqwen/engine/cpu_ops.h"
#include "megaqwen/model/rope.h"
#include "megaqwen/util/error.h"

namespace megaqwen::cuda {

namespace {

// The shapes the kernels are compiled for; checked once at load so a kernel never sees another.
void check_shapes(const ModelConfig& c) {
  if (c.is_hybrid()) fail("the CUDA engine runs Qwen3 dense models only; {} is a hybrid model", c.model_type);
  if (c.head_dim != 64 && c.head_dim != 128)
    fail("the CUDA engine supports head_dim 64 or 128 for Qwen3 models, the model has {}", c.head_dim);
  if (c.num_kv_heads <= 0 || c.num_heads % c.num_kv_heads != 0 ||
      !supported_group(c.head_dim, c.num_heads / c.num_kv_heads))
    fail("the CUDA engine supports 1, 2, 4 or 8 query heads per kv head; the model has {} / {}", c.num_heads,
         c.num_kv_heads);
  for (int n : {c.hidden_size, c.q_dim(), c.intermediate_size})
    if (n % 8 != 0) fail("the CUDA engine needs hidden, q and intermediate sizes that are multiples of 8 (got {})", n);
  if (c.hidden_size > 4096)
    fail("the CUDA engine's RMSNorm supports widths up to 4096 (hidden size {})", c.hidden_size);
}

}  // namespace

CudaMemoryPlan plan_cuda_memory(const Model& model, const CudaEngineOptions& options) {
  const ModelConfig& c = model.config;
  const uint64_t context = uint64_t(resolve_cuda_context(c, options.context));
  const uint64_t T = uint64_t(std::max(1, std::min<int>(options.prefill_chunk, int(context))));
  const uint64_t H = uint64_t(c.hidden_size), Q = uint64_t(c.q_dim()), KV = uint64_t(c.kv_dim()),
                 I = uint64_t(c.intermediate_size), V = uint64_t(c.vocab_size);
  const uint64_t widest = std::max({H, Q, I});
  CudaMemoryPlan p;
  p.weights = weight_device_bytes(model);
  p.kv_cache = 2ull * uint64_t(c.num_layers) * context * KV * 2;
  p.activations = 4 * T * (H + (Q + 2 * KV) + 2 * Q + 2 * I) + 2 * 2 * T * widest + 4 * uint64_t(kLogitRows) * V +
                  4 * 4 * V /* logits, scratch, counts, history */ + 4 * 64 * Q * 2 + 4 * (6 * widest);
  p.reserve = kDeviceReserveBytes;
  return p;
}

CudaEngine::CudaEngine(std::shared_ptr<const Model> model, CudaEngineOptions options)
    : model_(std::move(model)), options_(options) {
  const ModelConfig& c = model_->config;
  check_shapes(c);
  context_ = resolve_cuda_context(c, options_.context);
  chunk_ = std::max(1, std::min(options_.prefill_chunk, context_));

  const cudaDeviceProp prop = open_cuda_device(options_.device, &device_name_);
  check_prefill_attention_fits(prop, c.head_dim, options_.tensor_core_prefill);
  // Fail with the numbers before allocating anything large.
  check_memory_fits(prop, plan_cuda_memory(*model_, options_), context_);

  owned_stream_ = CudaStream::non_blocking();
  stream_ = owned_stream_.get();
  weights_ = upload_weights(*model_);

  const size_t L = size_t(c.num_layers), H = size_t(c.hidden_size), Q = size_t(c.q_dim()), KV = size_t(c.kv_dim()),
               I = size_t(c.intermediate_size), V = size_t(c.vocab_size), D = size_t(c.head_dim),
               T = size_t(chunk_);
  k_cache_.resize(L * size_t(context_) * KV);
  v_cache_.resize(L * size_t(context_) * KV);
  // Zero the cache once so a bug that reads past the filled positions reads zeros, not garbage that
  // happens to work (tests poison it instead).
  CUDA_CHECK(cudaMemset(k_cache_.data(), 0, k_cache_.bytes()));
  CUDA_CHECK(cudaMemset(v_cache_.data(), 0, v_cache_.bytes()));

  const std::vector<float> inv = rope_inverse_frequencies(c);
  inv_freq_.resize(inv.size());
  CUDA_CHECK(cudaMemcpy(inv_freq_.data(), inv.data(), inv_freq_.bytes(), cudaMemcpyHostToDevice));

  const size_t widest = std::max({H, Q, I});
  p_tokens_.resize(T);
  p_x_.resize(T * H);
  p_qkv_.resize(T * (Q + 2 * KV));
  p_q_.resize(T * Q);
  p_attn_.resize(T * Q);
  p_gu_.resize(T * 2 * I);
  p_hi_.resize(T * widest);
  if (options_.split_activations) p_lo_.resize(T * widest);

  // Split the cache of each kv head over about two blocks per SM at long context.
  splits_ = std::clamp((2 * prop.multiProcessorCount + c.num_kv_heads - 1) / c.num_kv_heads, 1, 64);
  d_x_.resize(H);
  d_qkv_.resize(Q + 2 * KV);
  d_q_.resize(Q);
  d_attn_.resize(Q);
  d_act_.resize(I);
  partial_o_.resize(size_t(c.num_heads) * size_t(splits_) * D);
  partial_ml_.resize(size_t(c.num_heads) * size_t(splits_) * 2);
  logits_.resize(V);
  CUDA_CHECK(cudaMemset(logits_.data(), 0, logits_.bytes()));

  sampler_ = DeviceSampler(c.vocab_size, stream_);
  step_ = DecodeStep(V);

  // The decode kernel for whole runs of tokens (generate_on_device), over the same weights and cache.
  decoder_ = MegakernelDecoder(options_.decode_kernel, c, options_.device, stream_, [&] {
    mk::Binding b;
    for (size_t l = 0; l < weights_.layers.size(); ++l) {
      const CudaLayerWeights& w = weights_.layers[l];
      mk::LayerWeights lw{};
      lw.qkv = w.qkv.data();
      lw.o = w.o.data();
      lw.gate_up = w.gate_up.data();
      lw.down = w.down.data();
      lw.input_norm = w.input_norm.data();
      lw.post_norm = w.post_norm.data();
      lw.q_norm = w.q_norm.data();
      lw.k_norm = w.k_norm.data();
      lw.k_cache = k_layer(int(l));
      lw.v_cache = v_layer(int(l));
      b.layers.push_back(lw);
    }
    b.embed = weights_.embed.data();
    b.lm_head = weights_.lm_head;
    b.final_norm = weights_.final_norm.data();
    b.inv_freq = inv_freq_.data();
    b.context = context_;
    return b;
  });
  device_name_ += std::string(", prefill attention: ") + (options_.tensor_core_prefill ? "tc" : "fp32");
  device_name_ += decoder_.device_suffix();
  // The whole device, not just stream_: the cudaMemset / cudaMemcpy calls above went to the legacy
  // default stream, which a cudaStreamNonBlocking stream does not wait for (a pageable cudaMemcpy
  // may return before its DMA lands), so the first prefill could otherwise race the uploads.
  CUDA_CHECK(cudaDeviceSynchronize());
}

// The megakernel, the graph and the cuBLAS handle (bound to the stream) go before owned_stream_:
// members are destroyed in reverse order of declaration.
CudaEngine::~CudaEngine() = default;

std::span<const float> CudaEngine::prefill(std::span<const int32_t> tokens) {
  if (tokens.empty()) fail("prefill needs at least one token");
  forward_prefill(tokens, nullptr);
  return step_.logits_to_host(logits_.data(), stream_);
}

void CudaEngine::prefill_all_logits(std::span<const int32_t> tokens, std::vector<float>& out) {
  if (tokens.empty()) fail("prefill needs at least one token");
  check_new_tokens(tokens);
  out.resize(tokens.size() * size_t(model_->config.vocab_size));
  forward_prefill(tokens, out.data());
}

// One prefill pass per chunk of up to chunk_ tokens, each continuing after the cache so far.
void CudaEngine::forward_prefill(std::span<const int32_t> tokens, float* all_logits) {
  check_new_tokens(tokens);
  if (!gemm_) gemm_ = std::make_unique<CublasGemm>(stream_);
  const ModelConfig& c = model_->config;
  const int H = c.hidden_size, Q = c.q_dim(), KV = c.kv_dim(), I = c.intermediate_size, V = c.vocab_size;
  const float eps = float(c.rms_norm_eps), scale = 1.0f / std::sqrt(float(c.head_dim));
  uint16_t* hi = p_hi_.data();
  uint16_t* lo = options_.split_activations ? p_lo_.data() : nullptr;

  for (size_t begin = 0; begin < tokens.size(); begin += size_t(chunk_)) {
    const int T = int(std::min(size_t(chunk_), tokens.size() - begin));
    const int p0 = position_;
    CUDA_CHECK(cudaMemcpyAsync(p_tokens_.data(), tokens.data() + begin, size_t(T) * sizeof(int32_t),
                               cudaMemcpyHostToDevice, stream_));
    embed_rows(weights_.embed.data(), H, p_tokens_.data(), T, p_x_.data(), stream_);
    for (int l = 0; l < c.num_layers; ++l) {
      const CudaLayerWeights& w = weights_.layers[size_t(l)];
      // Attention block.
      rms_norm_split(p_x_.data(), w.input_norm.data(), T, H, eps, hi, lo, stream_);
      gemm_->gemm_split(hi, lo, w.qkv.data(), p_qkv_.data(), T, Q + 2 * KV, H, 0.0f);
      qk_norm_rope({p_qkv_.data(), T, c.num_heads, c.num_kv_heads, c.head_dim, c.head_dim, false, w.q_norm.data(),
                    w.k_norm.data(), inv_freq_.data(), nullptr, p0, eps, p_q_.data(), k_layer(l), v_layer(l)},
                   stream_);
      const PrefillAttentionArgs attn{p_q_.data(), k_layer(l), v_layer(l), T, p0, c.num_heads, c.num_kv_heads,
                                      c.head_dim, scale, p_attn_.data()};
      options_.tensor_core_prefill ? attention_prefill_tc(attn, stream_) : attention_prefill(attn, stream_);
      split_bf16(p_attn_.data(), size_t(T) * size_t(Q), hi, lo, stream_);
      gemm_->gemm_split(hi, lo, w.o.data(), p_x_.data(), T, H, Q, 1.0f);  // x += attn Wo^T
      // MLP block.
      rms_norm_split(p_x_.data(), w.post_norm.data(), T, H, eps, hi, lo, stream_);
      gemm_->gemm_split(hi, lo, w.gate_up.data(), p_gu_.data(), T, 2 * I, H, 0.0f);
      swiglu_split(p_gu_.data(), T, I, hi, lo, stream_);
      gemm_->gemm_split(hi, lo, w.down.data(), p_x_.data(), T, H, I, 1.0f);  // x += act Wd^T
    }
    const bool last_chunk = begin + size_t(T) == tokens.size();
    prefill_logits(*gemm_,
                   {p_x_.data(), T, H, V, weights_.final_norm.data(), eps, weights_.lm_head, hi, lo,
                    all_logits ? all_logits + begin * size_t(V) : nullptr, last_chunk, logits_.data()},
                   p_logits_, stream_);
    // The host's token buffer and the cache must be consistent before the next chunk's copy.
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    position_ += T;
  }
}

// The decode step as a kernel sequence over fixed buffers: token and position come from step_ on
// the device, so the same sequence (or its captured graph) serves every step.
void CudaEngine::enqueue_decode_step() {
  const ModelConfig& c = model_->config;
  const int H = c.hidden_size, Q = c.q_dim(), KV = c.kv_dim(), I = c.intermediate_size, V = c.vocab_size;
  const float eps = float(c.rms_norm_eps), scale = 1.0f / std::sqrt(float(c.head_dim));
  const int32_t* token = step_.token();
  const int32_t* pos = step_.position();
  embed_rows(weights_.embed.data(), H, token, 1, d_x_.data(), stream_);
  for (int l = 0; l < c.num_layers; ++l) {
    const CudaLayerWeights& w = weights_.layers[size_t(l)];
    gemv_bf16_normed(w.qkv.data(), d_x_.data(), w.input_norm.data(), eps, Q + 2 * KV, H, d_qkv_.data(), GemvOut::Store,
                     stream_);
    qk_norm_rope({d_qkv_.data(), 1, c.num_heads, c.num_kv_heads, c.head_dim, c.head_dim, false, w.q_norm.data(),
                  w.k_norm.data(), inv_freq_.data(), pos, 0, eps, d_q_.data(), k_layer(l), v_layer(l)},
                 stream_);
    attention_decode({d_q_.data(), k_layer(l), v_layer(l), pos, c.num_heads, c.num_kv_heads, c.head_dim, splits_, scale,
                      partial_o_.data(), partial_ml_.data(), d_attn_.data()},
                     stream_);
    gemv_bf16(w.o.data(), d_attn_.data(), H, Q, d_x_.data(), GemvOut::Add, stream_);
    gemv_bf16_normed(w.gate_up.data(), d_x_.data(), w.post_norm.data(), eps, 2 * I, H, d_act_.data(), GemvOut::SwiGLU,
                     stream_);
    gemv_bf16(w.down.data(), d_act_.data(), H, I, d_x_.data(), GemvOut::Add, stream_);
  }
  gemv_bf16_normed(weights_.lm_head, d_x_.data(), weights_.final_norm.data(), eps, V, H, logits_.data(), GemvOut::Store,
                   stream_);
}

void CudaEngine::run_decode_step(int32_t token) {
  check_new_tokens(std::span<const int32_t>(&token, 1));
  step_.run(stream_, token, position_, options_.use_graph, [this] { enqueue_decode_step(); });
  ++position_;
}

std::span<const float> CudaEngine::decode(int32_t token) {
  run_decode_step(token);
  return step_.logits_to_host(logits_.data(), stream_);
}

void CudaEngine::decode_only(int32_t token) { run_decode_step(token); }

void CudaEngine::truncate(int n) {
  if (n < 0 || n > position_) fail("cannot truncate the cache to {} tokens: it holds {}", n, position_);
  position_ = n;  // entries past n are overwritten later
}

void CudaEngine::fill_cache_with_noise(int n) {
  if (n < 0 || n > context_) fail("cannot fill the cache to {} tokens: the context holds {}", n, context_);
  const size_t per_layer = size_t(n) * size_t(model_->config.kv_dim());
  for (int l = 0; l < model_->config.num_layers; ++l) {
    fill_noise_bf16(k_layer(l), per_layer, uint32_t(2 * l + 1), stream_);
    fill_noise_bf16(v_layer(l), per_layer, uint32_t(2 * l + 2), stream_);
  }
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  position_ = n;
}

// A saved sequence stays on the device: the KV rows packed to its length.
struct CudaEngine::SavedState final : EngineState {
  SavedState(const Model* model, int position) : EngineState(model, position) {}
  uint64_t bytes() const override { return k.bytes() + v.bytes(); }
  DeviceBuffer<uint16_t> k, v;  // bf16 [layers, position, kv_dim]
};

std::unique_ptr<EngineState> CudaEngine::save_state() {
  const size_t layers = size_t(model_->config.num_layers), kv = size_t(model_->config.kv_dim());
  const size_t n = size_t(position_);
  auto state = std::make_unique<SavedState>(model_.get(), position_);
  state->k.resize(layers * n * kv);
  state->v.resize(layers * n * kv);
  copy_cache_rows(state->k.data(), n, k_cache_.data(), size_t(context_), layers, kv, n, stream_);
  copy_cache_rows(state->v.data(), n, v_cache_.data(), size_t(context_), layers, kv, n, stream_);
  return state;
}

void CudaEngine::restore_state(const EngineState& saved) {
  const auto& state = restorable_state<SavedState>(saved, model_.get());
  const size_t layers = size_t(model_->config.num_layers), kv = size_t(model_->config.kv_dim());
  const size_t n = size_t(state.position());
  copy_cache_rows(k_cache_.data(), size_t(context_), state.k.data(), n, layers, kv, n, stream_);
  copy_cache_rows(v_cache_.data(), size_t(context_), state.v.data(), n, layers, kv, n, stream_);
  position_ = state.position();
}

std::string CudaEngine::state_format() const { return "cuda-qwen3-bf16"; }

// k and v: [layers, tokens, kv_dim] bf16, as the device cache holds them.
std::vector<StateTensor> CudaEngine::state_tensors(const EngineState& saved) const {
  const auto& state = restorable_state<SavedState>(saved, model_.get());
  const std::vector<int64_t> shape{model_->config.num_layers, state.position(), model_->config.kv_dim()};
  return {make_state_tensor("k", DType::BF16, shape, to_host(state.k)),
          make_state_tensor("v", DType::BF16, shape, to_host(state.v))};
}

std::unique_ptr<EngineState> CudaEngine::state_from_tensors(std::span<const int32_t> tokens,
                                                            const StateTensorSource& source) const {
  const int position = int(tokens.size());
  auto state = std::make_unique<SavedState>(model_.get(), position);
  const std::vector<int64_t> shape{model_->config.num_layers, position, model_->config.kv_dim()};
  state->k = to_device(source.read<uint16_t>("k", DType::BF16, shape));
  state->v = to_device(source.read<uint16_t>("v", DType::BF16, shape));
  return state;
}

std::optional<uint64_t> CudaEngine::state_memory_available() const { return device_memory_free(); }

uint64_t CudaEngine::kv_bytes_per_token() const {
  return uint64_t(model_->config.num_layers) * 2 * uint64_t(model_->config.kv_dim()) * 2;  // bf16
}

std::optional<DeviceDraw> CudaEngine::sample_on_device(const SamplingParams& params, std::span<const int32_t> history,
                                                       int logprobs) {
  KernelProfile::Scope profiled(step_.profile());  // MEGAQWEN_PEROP_PROFILE: the draw's kernels too
  return sampler_.sample(logits_.data(), params, history, logprobs);
}

// Whole runs of decode steps in the megakernel, drawing as sample_on_device would from the same
// logits (MegakernelDecoder; a top-k the kernel's selection cannot hold stays on the per-op path).
std::string CudaEngine::megakernel_unsupported_reason(const SamplingParams& params) const {
  return decoder_.unsupported_reason(params);
}

std::optional<int> CudaEngine::generate_on_device(int32_t token, int max_tokens, std::span<const int32_t> eos_ids,
                                                  const SamplingParams& params, std::span<const int32_t> history,
                                                  int logprobs, const DrawSink& on_draw) {
  if (!decoder_.serves(params, eos_ids, logprobs)) return std::nullopt;
  return megakernel_generate(token, max_tokens, eos_ids, params, history, logprobs, on_draw, nullptr);
}

int CudaEngine::megakernel_generate(int32_t token, int max_tokens, std::span<const int32_t> eos_ids,
                                    const SamplingParams& params, std::span<const int32_t> history,
                                    int logprobs, const DrawSink& on_draw, float* logits_out) {
  check_new_tokens(std::span<const int32_t>(&token, 1));
  max_tokens = std::min(max_tokens, context_ - position_);  // every drawn token but the last is appended
  // Each delivered token stands for one appended token (also when on_token throws): position_ follows.
  return decoder_.generate(position_, token, max_tokens, eos_ids, params, history, logprobs, on_draw, logits_out,
                           [this](int32_t) { ++position_; });
}

}  // namespace megaqwen::cuda
