#include "megaqwen/engine/cpu_qwen35_engine.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "megaqwen/engine/cpu_gated_delta_net.h"
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

// Deterministic values in [-scale, scale) for the benchmark's noise-filled cache.
struct Noise {
  uint32_t state = 0x12345678u;
  float next(float scale) {
    state = state * 1664525u + 1013904223u;
    return float(int32_t(state)) * 0x1.0p-31f * scale;
  }
};
}  // namespace

CpuHybridEngine::CpuHybridEngine(std::shared_ptr<const Model> model, CpuEngineOptions options)
    : model_(std::move(model)),
      weights_([this]() -> const Qwen35Weights& {
        if (!model_->qwen35) fail("the hybrid CPU engine needs a Qwen3.5 model, not {}", model_->config.model_type);
        return *model_->qwen35;
      }()),
      pool_(options.threads),
      bf16_kv_cache_(options.bf16_kv_cache),
      products_(CpuProducts::from(options)),
      weights_in_huge_pages_(place_weights_in_huge_pages(*model_, options)) {
  const ModelConfig& c = model_->config;
  context_ = options.context > 0 ? options.context : std::min(c.context_limit(), kDefaultContext);
  c.check_context(context_);

  int full = 0, linear = 0;
  for (LayerType t : c.layer_types) slot_.push_back(t == LayerType::FullAttention ? full++ : linear++);

  const size_t cache_floats = size_t(full) * size_t(context_) * size_t(c.kv_dim());
  check_host_allocation(2 * cache_floats * sizeof(float), fmt::format("a KV cache of {} tokens", context_),
                        "ask for a smaller --ctx");
  for (std::vector<float>* cache : {&k_cache_, &v_cache_}) {  // huge pages, as the weights: ~10% at 4k-16k cached
    cache->reserve(cache_floats);
    if (options.huge_pages) huge_pages::advise(cache->data(), cache_floats * sizeof(float));
    cache->assign(cache_floats, 0.0f);
  }
  state_floats_ = size_t(c.linear_num_value_heads) * size_t(c.linear_key_head_dim) * size_t(c.linear_value_head_dim);
  conv_floats_ = size_t(c.linear_conv_kernel - 1) * size_t(c.linear_conv_dim());
  recurrent_.assign(size_t(linear) * state_floats_, 0.0f);
  conv_state_.assign(size_t(linear) * conv_floats_, 0.0f);
  rollback_ = RecurrentRollback<States>(context_);
  inv_freq_ = rope_inverse_frequencies(c);
  logits_.resize(size_t(c.vocab_size));
}

std::string CpuHybridEngine::device_name() const {
  return cpu_device_name(pool_.size(), bf16_kv_cache_, products_, weights_in_huge_pages_);
}

std::span<const float> CpuHybridEngine::prefill(std::span<const int32_t> tokens) {
  if (tokens.empty()) fail("prefill needs at least one token");
  check_new_tokens(tokens);  // the whole call, before any part of it runs
  if (tokens.size() > kSnapshotBeforeLastAbove && !recurrent_.empty()) {
    forward(tokens.first(tokens.size() - 1), nullptr);
    remember_states();  // the same prompt again truncates to here (recurrent_rollback.h)
    tokens = tokens.last(1);
  }
  forward(tokens, nullptr);
  remember_states();
  return logits_;
}

void CpuHybridEngine::prefill_all_logits(std::span<const int32_t> tokens, std::vector<float>& out) {
  if (tokens.empty()) fail("prefill needs at least one token");
  check_new_tokens(tokens);  // before resizing `out`
  out.resize(tokens.size() * size_t(model_->config.vocab_size));
  forward(tokens, out.data());
  remember_states();
}

std::span<const float> CpuHybridEngine::decode(int32_t token) {
  forward(std::span<const int32_t>(&token, 1), nullptr);
  return logits_;
}

// --- Rolling back: snapshots of the DeltaNet states and replay (recurrent_rollback.h) ----------------

void CpuHybridEngine::remember_states() {
  if (recurrent_.empty()) return;  // no DeltaNet layer: nothing to roll back
  rollback_.remember(position_, [this] { return States{recurrent_, conv_state_}; });
}

void CpuHybridEngine::truncate(int n) {
  if (n < 0 || n > position_) fail("cannot truncate the cache to {} tokens: it holds {}", n, position_);
  if (n == position_) return;
  if (recurrent_.empty()) {  // no DeltaNet layer: only the KV cache, which needs nothing
    position_ = n;
    return;
  }
  // The KV cache needs nothing (entries past n are overwritten later); the DeltaNet states are rebuilt.
  rollback_.roll_back(
      n,
      [this](const States* from) {
        if (from) {
          recurrent_ = from->recurrent;
          conv_state_ = from->conv;
        } else {
          std::fill(recurrent_.begin(), recurrent_.end(), 0.0f);
          std::fill(conv_state_.begin(), conv_state_.end(), 0.0f);
        }
      },
      [this](int start, std::span<const int32_t> ids) {
        position_ = start;
        if (ids.empty()) return;
        forward(ids, nullptr);
        remember_states();
      });
}

// --- Saving and restoring a sequence (engine_state.h) -----------------------------------------------

namespace {

struct CpuHybridState final : EngineState {
  using States = CpuHybridEngine::States;
  CpuHybridState(const Model* model, int position) : EngineState(model, position) {}
  uint64_t bytes() const override {
    auto floats = [](const States& s) { return s.recurrent.size() + s.conv.size(); };
    uint64_t n = k.size() + v.size() + floats(now);
    for (const auto& [position, s] : rollback.snapshots) n += floats(s);
    return n * sizeof(float) + rollback.tokens.size() * sizeof(int32_t);
  }
  std::vector<float> k, v;  // [full layers, position, kv_dim]
  States now;               // the DeltaNet states at position()
  SavedRollback<States> rollback;
};

}  // namespace

std::unique_ptr<EngineState> CpuHybridEngine::save_state() {
  const size_t layers = size_t(model_->config.count_layers(LayerType::FullAttention));
  const size_t kv = size_t(model_->config.kv_dim());
  auto state = std::make_unique<CpuHybridState>(model_.get(), position_);
  state->k = pack_cache_rows(k_cache_, layers, size_t(context_), kv, size_t(position_));
  state->v = pack_cache_rows(v_cache_, layers, size_t(context_), kv, size_t(position_));
  state->now = States{recurrent_, conv_state_};
  state->rollback = rollback_.save(position_, [](const States& s) { return s; });
  return state;
}

void CpuHybridEngine::restore_state(const EngineState& saved) {
  const auto& state = restorable_state<CpuHybridState>(saved, model_.get());
  const size_t layers = size_t(model_->config.count_layers(LayerType::FullAttention));
  const size_t kv = size_t(model_->config.kv_dim());
  unpack_cache_rows(state.k, layers, size_t(context_), kv, size_t(state.position()), k_cache_);
  unpack_cache_rows(state.v, layers, size_t(context_), kv, size_t(state.position()), v_cache_);
  recurrent_ = state.now.recurrent;
  conv_state_ = state.now.conv;
  rollback_.load(state.rollback);
  position_ = state.position();
}

std::string CpuHybridEngine::state_format() const {
  return bf16_kv_cache_ ? "cpu-qwen3.5-f32-kv-bf16-rounded" : "cpu-qwen3.5-f32";
}

// k and v of the full-attention layers: [full layers, tokens, kv_dim] fp32; then the DeltaNet
// states and snapshots (recurrent_state_tensors.h). The rollback's token ids are the sequence's own.
std::vector<StateTensor> CpuHybridEngine::state_tensors(const EngineState& saved) const {
  const auto& state = restorable_state<CpuHybridState>(saved, model_.get());
  const ModelConfig& c = model_->config;
  const std::vector<int64_t> shape{c.count_layers(LayerType::FullAttention), state.position(), c.kv_dim()};
  std::vector<StateTensor> out{make_state_tensor("k", DType::F32, shape, state.k),
                               make_state_tensor("v", DType::F32, shape, state.v)};
  add_recurrent_state_tensors(out, c, RecurrentStateTensors{state.now, state.rollback.snapshots});
  return out;
}

std::unique_ptr<EngineState> CpuHybridEngine::state_from_tensors(std::span<const int32_t> tokens,
                                                                 const StateTensorSource& source) const {
  const ModelConfig& c = model_->config;
  const int position = int(tokens.size());
  auto state = std::make_unique<CpuHybridState>(model_.get(), position);
  const std::vector<int64_t> shape{c.count_layers(LayerType::FullAttention), position, c.kv_dim()};
  state->k = source.read<float>("k", DType::F32, shape);
  state->v = source.read<float>("v", DType::F32, shape);
  RecurrentStateTensors states = read_recurrent_state_tensors(source, c, position);
  state->now = std::move(states.now);
  state->rollback =
      SavedRollback<States>{std::vector<int32_t>(tokens.begin(), tokens.end()), std::move(states.snapshots)};
  return state;
}

void CpuHybridEngine::fill_cache_with_noise(int n) {
  if (n < 0 || n > context_) fail("cannot fill the cache to {} tokens: the context holds {}", n, context_);
  const size_t kv = size_t(model_->config.kv_dim());
  Noise noise;
  for (size_t layer = 0; layer * size_t(context_) * kv < k_cache_.size(); ++layer)
    for (size_t i = 0; i < size_t(n) * kv; ++i) {
      const size_t at = layer * size_t(context_) * kv + i;
      k_cache_[at] = noise.next(1.0f);  // a realistic scale after QK-norm
      v_cache_[at] = noise.next(1.0f);
    }
  // The DeltaNet states as after n tokens: bounded values (the decay keeps S bounded).
  for (float& s : recurrent_) s = n > 0 ? noise.next(0.1f) : 0.0f;
  for (float& s : conv_state_) s = n > 0 ? noise.next(1.0f) : 0.0f;
  rollback_.forget_all();
  position_ = n;
  if (n > 0) remember_states();  // rolling back to n restores this noise; before n there is nothing
}

uint64_t CpuHybridEngine::kv_bytes_per_token() const {
  return uint64_t(model_->config.count_layers(LayerType::FullAttention)) * 2 * uint64_t(model_->config.kv_dim()) *
         sizeof(float);
}

// --- The forward pass --------------------------------------------------------------------------------

void CpuHybridEngine::forward(std::span<const int32_t> tokens, float* all_logits) {
  check_new_tokens(tokens);
  const size_t V = size_t(model_->config.vocab_size);
  for (size_t begin = 0; begin < tokens.size(); begin += kPrefillChunk) {
    auto chunk = tokens.subspan(begin, std::min<size_t>(kPrefillChunk, tokens.size() - begin));
    forward_chunk(chunk, all_logits ? all_logits + begin * V : nullptr);
  }
}

void CpuHybridEngine::forward_chunk(std::span<const int32_t> tokens, float* all_logits) {
  const ModelConfig& c = model_->config;
  const Qwen35Weights& w = weights_;
  const int64_t T = int64_t(tokens.size()), H = c.hidden_size;
  const double eps = c.rms_norm_eps;

  std::vector<float> x(size_t(T * H));      // residual stream [T, H]
  std::vector<float> h(size_t(T * H));      // normed input of a block [T, H]
  std::vector<float> delta(size_t(T * H));  // block output added to x [T, H]

  // 1. Embedding lookup (no scaling); remember the ids for a later replay.
  for (int64_t t = 0; t < T; ++t) {
    cpu::matrix_row(w.embed, tokens[size_t(t)], &x[size_t(t * H)]);
  }
  rollback_.record(position_, tokens);

  for (size_t l = 0; l < w.layers.size(); ++l) {
    const Qwen35LayerWeights& L = w.layers[l];
    // 2a. Token mixer: x = x + mixer(RMSNorm(x)), the norm's scale 1 + w.
    for (int64_t t = 0; t < T; ++t)
      cpu::rms_norm_zero_centered(&x[size_t(t * H)], L.input_norm, eps, H, &h[size_t(t * H)]);
    if (L.type == LayerType::FullAttention) {
      gated_attention(L.attention, slot_[l], h.data(), T, delta.data());
    } else {
      gated_delta_net(L.linear, slot_[l], h.data(), T, delta.data());
    }
    for (size_t i = 0; i < x.size(); ++i) x[i] += delta[i];

    // 2b. MLP: x = x + SwiGLU(RMSNorm(x)).
    for (int64_t t = 0; t < T; ++t)
      cpu::rms_norm_zero_centered(&x[size_t(t * H)], L.post_norm, eps, H, &h[size_t(t * H)]);
    swiglu_mlp(L, h.data(), T, delta.data());
    for (size_t i = 0; i < x.size(); ++i) x[i] += delta[i];
  }

  // 3. logits = RMSNorm(x) E^T (scale 1 + w), for every token or only the last.
  const int64_t first = all_logits ? 0 : T - 1;
  for (int64_t t = first; t < T; ++t)
    cpu::rms_norm_zero_centered(&x[size_t(t * H)], w.final_norm, eps, H, &h[size_t(t * H)]);
  if (all_logits) {
    project(w.lm_head, h.data(), T, all_logits);
    std::copy_n(all_logits + (T - 1) * c.vocab_size, c.vocab_size, logits_.data());
  } else {
    project(w.lm_head, &h[size_t((T - 1) * H)], 1, logits_.data());
  }
  position_ += int(T);
}

// Gated full attention (transformers' Qwen3_5Attention): q_proj yields per head a query and a gate;
// QK-norm (1 + w), RoPE on the first rotary_dim dims only, causal GQA attention over the cache, then
// o = attn * sigmoid(gate) before o_proj.
void CpuHybridEngine::gated_attention(const Qwen35FullAttentionWeights& w, int slot, const float* h, int64_t T,
                                      float* out) {
  const ModelConfig& c = model_->config;
  const int64_t D = c.head_dim, heads = c.num_heads, kv_heads = c.num_kv_heads;
  const int64_t Q = c.q_dim(), KV = c.kv_dim(), p0 = position_;
  const double eps = c.rms_norm_eps;
  const float scale = 1.0f / std::sqrt(float(D));
  float* k_cache = &k_cache_[size_t(slot) * size_t(context_) * size_t(KV)];
  float* v_cache = &v_cache_[size_t(slot) * size_t(context_) * size_t(KV)];

  std::vector<float> qg(size_t(T * 2 * Q));  // [T, heads, 2D]: query D | gate D, per head
  std::vector<float> q(size_t(T * Q)), gate(size_t(T * Q));  // [T, heads, D]
  std::vector<float> k(size_t(T * KV)), v(size_t(T * KV));   // [T, kv_heads, D]
  std::vector<float> attn(size_t(T * Q));                    // [T, heads, D]
  project(w.q, h, T, qg.data());
  project(w.k, h, T, k.data());
  project(w.v, h, T, v.data());

  for (int64_t t = 0; t < T; ++t) {
    for (int64_t hd = 0; hd < heads; ++hd) {
      const float* src = &qg[size_t((t * heads + hd) * 2 * D)];
      float* qh = &q[size_t((t * heads + hd) * D)];
      std::copy_n(src, D, qh);
      std::copy_n(src + D, D, &gate[size_t((t * heads + hd) * D)]);
      cpu::rms_norm_zero_centered(qh, w.q_norm, eps, D, qh);
      cpu::rope(qh, c.rotary_dim, p0 + t, inv_freq_.data(), c.rope_scaling.amplitude());  // dims rotary_dim..D pass through
    }
    for (int64_t g = 0; g < kv_heads; ++g) {
      float* kh = &k[size_t((t * kv_heads + g) * D)];
      cpu::rms_norm_zero_centered(kh, w.k_norm, eps, D, kh);
      cpu::rope(kh, c.rotary_dim, p0 + t, inv_freq_.data(), c.rope_scaling.amplitude());
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

  // The output gate, then o_proj.
  for (size_t i = 0; i < attn.size(); ++i) attn[i] *= cpu::sigmoid(gate[i]);
  project(w.o, attn.data(), T, out);
}

// Gated DeltaNet (transformers' Qwen3_5GatedDeltaNet), token by token over the recurrence:
//   qkv = conv(x W_qkv) -> silu; q, k l2-normalized per head, q scaled by 1/sqrt(key dim);
//   beta = sigmoid(x W_b); g = -exp(A_log) * softplus(x W_a + dt_bias);
//   S = exp(g) S; S += k (beta (v - S^T k))^T; o = S^T q; out = (w * rmsnorm(o) * silu(x W_z)) W_out.
void CpuHybridEngine::gated_delta_net(const Qwen35LinearAttentionWeights& w, int slot, const float* h, int64_t T,
                                      float* out) {
  const ModelConfig& c = model_->config;
  const int64_t C = c.linear_conv_dim(), Vd = c.linear_value_dim();
  const int64_t nk = c.linear_num_key_heads, nv = c.linear_num_value_heads;
  const int64_t dk = c.linear_key_head_dim, dv = c.linear_value_head_dim;

  std::vector<float> qkv(size_t(T * C));  // [T, C]: q [nk, dk] | k [nk, dk] | v [nv, dv] per token
  std::vector<float> z(size_t(T * Vd));   // [T, nv, dv]: the output gate
  std::vector<float> b(size_t(T * nv)), a(size_t(T * nv));  // [T, nv]
  std::vector<float> o(size_t(T * Vd));   // [T, nv, dv]
  project(w.in_qkv, h, T, qkv.data());
  project(w.in_z, h, T, z.data());
  project(w.in_b, h, T, b.data());
  project(w.in_a, h, T, a.data());

  // 1. Short causal conv over time per channel, then SiLU; 2. q, k normalized, beta and g; 3. the
  // gated delta rule over the recurrent state, token by token (cpu_gated_delta_net.h).
  const cpu::DeltaNetShape shape{nk, nv, dk, dv};
  cpu::causal_conv(w.conv, conv_state(slot), qkv.data(), T, pool_);
  std::vector<float> beta(size_t(T * nv)), g(size_t(T * nv));  // [T, nv]
  cpu::delta_net_gates(shape, w.A_log, w.dt_bias, qkv.data(), b.data(), a.data(), T, beta.data(), g.data());
  cpu::delta_rule(shape, recurrent_state(slot), qkv.data(), beta.data(), g.data(), T, o.data(), pool_);

  // 4. Gated RMSNorm per head (plain weight shared by heads), then out_proj.
  for (int64_t t = 0; t < T; ++t)
    for (int64_t hv = 0; hv < nv; ++hv) {
      float* oh = &o[size_t((t * nv + hv) * dv)];
      cpu::gated_rms_norm(oh, &z[size_t((t * nv + hv) * dv)], w.norm, c.rms_norm_eps, dv, oh);
    }
  project(w.out, o.data(), T, out);
}

// x W_down^T of silu(x W_gate^T) * (x W_up^T), as in Qwen3.
void CpuHybridEngine::swiglu_mlp(const Qwen35LayerWeights& w, const float* h, int64_t T, float* out) {
  const int64_t I = model_->config.intermediate_size;
  std::vector<float> gate(size_t(T * I)), up(size_t(T * I));  // [T, I]
  project(w.gate, h, T, gate.data());
  project(w.up, h, T, up.data());
  for (size_t i = 0; i < gate.size(); ++i) gate[i] = cpu::silu(gate[i]) * up[i];
  project(w.down, gate.data(), T, out);
}

}  // namespace megaqwen
