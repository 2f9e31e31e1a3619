#include "megaqwen/engine/cpu_engine.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "megaqwen/engine/cpu_amx_matmul.h"
#include "megaqwen/engine/cpu_ops.h"
#include "megaqwen/model/rope.h"
#include "megaqwen/util/error.h"
#include "megaqwen/util/host_memory.h"
#include "megaqwen/util/huge_pages.h"

namespace megaqwen {

namespace {
// Prompts are processed in chunks so activation buffers stay small for long prompts (512 tokens:
// ~30 MB of them for Qwen3-0.6B); each chunk converts the weights to fp32 panels once, so a longer
// one spreads that cost over more tokens.
constexpr int kPrefillChunk = 512;
constexpr int kDefaultContext = 4096;
}  // namespace

CpuEngine::CpuEngine(std::shared_ptr<const Model> model, CpuEngineOptions options)
    : model_(std::move(model)),
      pool_(options.threads),
      bf16_kv_cache_(options.bf16_kv_cache),
      products_(CpuProducts::from(options)),
      weights_in_huge_pages_(place_weights_in_huge_pages(*model_, options)) {
  const ModelConfig& c = model_->config;
  context_ = options.context > 0 ? options.context : std::min(c.context_limit(), kDefaultContext);
  c.check_context(context_);
  const size_t cache_floats = size_t(c.num_layers) * size_t(context_) * size_t(c.kv_dim());
  check_host_allocation(2 * cache_floats * sizeof(float), fmt::format("a KV cache of {} tokens", context_),
                        "ask for a smaller --ctx");
  for (std::vector<float>* cache : {&k_cache_, &v_cache_}) {  // huge pages, as the weights: ~10% at 4k-16k cached
    cache->reserve(cache_floats);
    if (options.huge_pages) huge_pages::advise(cache->data(), cache_floats * sizeof(float));
    cache->assign(cache_floats, 0.0f);
  }
  inv_freq_ = rope_inverse_frequencies(c);
  logits_.resize(size_t(c.vocab_size));
}

CpuProducts CpuProducts::from(const CpuEngineOptions& options) {
  return {.bf16_inputs = options.bf16_matmul_inputs, .amx_prefill = options.amx_prefill && cpu::amx_available()};
}

void CpuProducts::run(const WeightMatrix& w, const float* in, int64_t tokens, float* out, ThreadPool& pool) const {
  if (amx_prefill && tokens > 1 && w.dtype == DType::BF16)
    cpu::matmul_amx_bf16(w, in, tokens, out, pool);
  else if (bf16_inputs)
    cpu::matmul_bf16_input(w, in, tokens, out, pool);
  else
    cpu::matmul(w, in, tokens, out, pool);
}

bool place_weights_in_huge_pages(const Model& model, const CpuEngineOptions& options) {
  if (!options.huge_pages || !model.checkpoint) return false;
  // A copy becomes anonymous memory the kernel cannot drop and read again as it can the file's
  // pages; with too little memory to spare, only the page cache's own huge pages are taken.
  const std::optional<uint64_t> available = available_host_memory();
  const bool spare = !available || *available >= model.checkpoint->total_bytes() + (uint64_t(1) << 30);
  return model.checkpoint->use_huge_pages(spare ? MappedFile::Copy::kIfNeeded : MappedFile::Copy::kNever);
}

std::string cpu_device_name(size_t threads, bool bf16_kv_cache, const CpuProducts& products, bool huge_pages) {
  return "cpu (" + std::to_string(threads) + " threads" + (bf16_kv_cache ? ", KV cache rounded to bf16" : "") +
         (products.amx_prefill ? ", prefill on AMX" : "") + (huge_pages ? ", weights in huge pages" : "") + ")";
}

std::string CpuEngine::device_name() const { return cpu_device_name(pool_.size(), bf16_kv_cache_, products_, weights_in_huge_pages_); }

std::span<const float> CpuEngine::prefill(std::span<const int32_t> tokens) {
  if (tokens.empty()) fail("prefill needs at least one token");
  forward(tokens, nullptr);
  return logits_;
}

void CpuEngine::prefill_all_logits(std::span<const int32_t> tokens, std::vector<float>& out) {
  if (tokens.empty()) fail("prefill needs at least one token");
  out.resize(tokens.size() * size_t(model_->config.vocab_size));
  forward(tokens, out.data());
}

std::span<const float> CpuEngine::decode(int32_t token) {
  forward(std::span<const int32_t>(&token, 1), nullptr);
  return logits_;
}

void CpuEngine::truncate(int n) {
  if (n < 0 || n > position_) fail("cannot truncate the cache to {} tokens: it holds {}", n, position_);
  position_ = n;  // entries past n are simply overwritten later
}

void CpuEngine::fill_cache_with_noise(int n) {
  if (n < 0 || n > context_) fail("cannot fill the cache to {} tokens: the context holds {}", n, context_);
  const size_t kv = size_t(model_->config.kv_dim());
  uint32_t state = 0x12345678u;
  for (int l = 0; l < model_->config.num_layers; ++l) {
    for (size_t i = 0; i < size_t(n) * kv; ++i) {
      const size_t at = size_t(l) * size_t(context_) * kv + i;
      state = state * 1664525u + 1013904223u;  // values in [-1, 1): a realistic scale after QK-norm
      k_cache_[at] = float(int32_t(state)) * 0x1.0p-31f;
      v_cache_[at] = float(int32_t(state * 747796405u)) * 0x1.0p-31f;
    }
  }
  position_ = n;
}

namespace {

struct CpuKvState final : EngineState {
  CpuKvState(const Model* model, int position) : EngineState(model, position) {}
  uint64_t bytes() const override { return (k.size() + v.size()) * sizeof(float); }
  std::vector<float> k, v;  // [layers, position, kv_dim]
};

}  // namespace

std::unique_ptr<EngineState> CpuEngine::save_state() {
  const size_t layers = size_t(model_->config.num_layers), kv = size_t(model_->config.kv_dim());
  auto state = std::make_unique<CpuKvState>(model_.get(), position_);
  state->k = pack_cache_rows(k_cache_, layers, size_t(context_), kv, size_t(position_));
  state->v = pack_cache_rows(v_cache_, layers, size_t(context_), kv, size_t(position_));
  return state;
}

void CpuEngine::restore_state(const EngineState& saved) {
  const auto& state = restorable_state<CpuKvState>(saved, model_.get());
  const size_t layers = size_t(model_->config.num_layers), kv = size_t(model_->config.kv_dim());
  unpack_cache_rows(state.k, layers, size_t(context_), kv, size_t(state.position()), k_cache_);
  unpack_cache_rows(state.v, layers, size_t(context_), kv, size_t(state.position()), v_cache_);
  position_ = state.position();
}

std::string CpuEngine::state_format() const {
  return bf16_kv_cache_ ? "cpu-qwen3-f32-kv-bf16-rounded" : "cpu-qwen3-f32";
}

// k and v: [layers, tokens, kv_dim] fp32.
std::vector<StateTensor> CpuEngine::state_tensors(const EngineState& saved) const {
  const auto& state = restorable_state<CpuKvState>(saved, model_.get());
  const std::vector<int64_t> shape{model_->config.num_layers, state.position(), model_->config.kv_dim()};
  return {make_state_tensor("k", DType::F32, shape, state.k), make_state_tensor("v", DType::F32, shape, state.v)};
}

std::unique_ptr<EngineState> CpuEngine::state_from_tensors(std::span<const int32_t> tokens,
                                                           const StateTensorSource& source) const {
  const int position = int(tokens.size());
  auto state = std::make_unique<CpuKvState>(model_.get(), position);
  const std::vector<int64_t> shape{model_->config.num_layers, position, model_->config.kv_dim()};
  state->k = source.read<float>("k", DType::F32, shape);
  state->v = source.read<float>("v", DType::F32, shape);
  return state;
}

uint64_t CpuEngine::kv_bytes_per_token() const {
  return uint64_t(model_->config.num_layers) * 2 * uint64_t(model_->config.kv_dim()) * sizeof(float);
}

void CpuEngine::forward(std::span<const int32_t> tokens, float* all_logits) {
  check_new_tokens(tokens);
  const size_t V = size_t(model_->config.vocab_size);
  for (size_t begin = 0; begin < tokens.size(); begin += kPrefillChunk) {
    auto chunk = tokens.subspan(begin, std::min<size_t>(kPrefillChunk, tokens.size() - begin));
    forward_chunk(chunk, all_logits ? all_logits + begin * V : nullptr);
  }
}

void CpuEngine::forward_chunk(std::span<const int32_t> tokens, float* all_logits) {
  const ModelConfig& c = model_->config;
  const Qwen3Weights& w = model_->weights;
  const int64_t T = int64_t(tokens.size()), H = c.hidden_size, D = c.head_dim, I = c.intermediate_size;
  const int64_t heads = c.num_heads, kv_heads = c.num_kv_heads;
  const int64_t Q = c.q_dim(), KV = c.kv_dim(), p0 = position_;
  const double eps = c.rms_norm_eps;
  const float scale = 1.0f / std::sqrt(float(D));

  std::vector<float> x(size_t(T * H));        // residual stream [T, H]
  std::vector<float> h(size_t(T * H));        // normed input of a block [T, H]
  std::vector<float> q(size_t(T * Q));        // [T, heads, D]
  std::vector<float> k(size_t(T * KV)), v(size_t(T * KV));  // [T, kv_heads, D]
  std::vector<float> attn(size_t(T * Q));     // attention output [T, heads, D]
  std::vector<float> delta(size_t(T * H));    // block output added to x [T, H]
  std::vector<float> gate(size_t(T * I)), up(size_t(T * I));  // [T, I]

  // 1. Embedding lookup (no scaling).
  for (int64_t t = 0; t < T; ++t) cpu::matrix_row(w.embed, tokens[size_t(t)], &x[size_t(t * H)]);

  for (int64_t l = 0; l < c.num_layers; ++l) {
    const Qwen3LayerWeights& L = w.layers[size_t(l)];
    float* k_cache = &k_cache_[size_t(l) * size_t(context_) * size_t(KV)];
    float* v_cache = &v_cache_[size_t(l) * size_t(context_) * size_t(KV)];

    // 2a. Attention block: h = RMSNorm(x); q, k, v projections.
    for (int64_t t = 0; t < T; ++t) cpu::rms_norm(&x[size_t(t * H)], L.input_norm, eps, H, &h[size_t(t * H)]);
    project(L.q, h.data(), T, q.data());
    project(L.k, h.data(), T, k.data());
    project(L.v, h.data(), T, v.data());

    // QK-norm per head, then RoPE at the token's absolute position; append k, v to the cache.
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t hd = 0; hd < heads; ++hd) {
        float* qh = &q[size_t((t * heads + hd) * D)];
        cpu::rms_norm(qh, L.q_norm, eps, D, qh);
        cpu::rope(qh, D, p0 + t, inv_freq_.data(), c.rope_scaling.amplitude());
      }
      for (int64_t g = 0; g < kv_heads; ++g) {
        float* kh = &k[size_t((t * kv_heads + g) * D)];
        cpu::rms_norm(kh, L.k_norm, eps, D, kh);
        cpu::rope(kh, D, p0 + t, inv_freq_.data(), c.rope_scaling.amplitude());
      }
      std::memcpy(k_cache + (p0 + t) * KV, &k[size_t(t * KV)], size_t(KV) * sizeof(float));
      std::memcpy(v_cache + (p0 + t) * KV, &v[size_t(t * KV)], size_t(KV) * sizeof(float));
      if (bf16_kv_cache_) {
        cpu::round_to_bf16(k_cache + (p0 + t) * KV, KV);
        cpu::round_to_bf16(v_cache + (p0 + t) * KV, KV);
      }
    }

    // Causal attention: token t sees cache positions 0..p0+t; query head h reads kv head h/group.
    cpu::causal_attention(q.data(), T, heads, kv_heads, D, p0, k_cache, v_cache, scale, attn.data(), pool_);

    // x = x + attn Wo^T
    project(L.o, attn.data(), T, delta.data());
    for (size_t i = 0; i < x.size(); ++i) x[i] += delta[i];

    // 2b. MLP block: x = x + (silu(h Wg^T) * (h Wu^T)) Wd^T with h = RMSNorm(x).
    for (int64_t t = 0; t < T; ++t) cpu::rms_norm(&x[size_t(t * H)], L.post_norm, eps, H, &h[size_t(t * H)]);
    project(L.gate, h.data(), T, gate.data());
    project(L.up, h.data(), T, up.data());
    for (size_t i = 0; i < gate.size(); ++i) gate[i] = cpu::silu(gate[i]) * up[i];
    project(L.down, gate.data(), T, delta.data());
    for (size_t i = 0; i < x.size(); ++i) x[i] += delta[i];
  }

  // 3. logits = RMSNorm(x) E^T, for every token or only the last.
  const int64_t first = all_logits ? 0 : T - 1;
  for (int64_t t = first; t < T; ++t) cpu::rms_norm(&x[size_t(t * H)], w.final_norm, eps, H, &h[size_t(t * H)]);
  if (all_logits) {
    project(w.lm_head, h.data(), T, all_logits);
    std::copy_n(all_logits + (T - 1) * c.vocab_size, c.vocab_size, logits_.data());
  } else {
    project(w.lm_head, &h[size_t((T - 1) * H)], 1, logits_.data());
  }
  position_ += int(T);
}

}  // namespace megaqwen
