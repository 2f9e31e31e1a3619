#include "megaqwen/engine/cpu_qwen35_engine.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "megaqwen/engine/cpu_ops.h"
#include "megaqwen/util/error.h"

namespace megaqwen {

namespace {
// Prompts are processed in chunks so activation buffers stay small for long prompts.
constexpr int kPrefillChunk = 128;
constexpr int kDefaultContext = 4096;
// transformers' l2norm inside the gated delta rule (torch_recurrent_gated_delta_rule) uses this eps.
constexpr double kL2NormEps = 1e-6;

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
      pool_(options.threads) {
  const ModelConfig& c = model_->config;
  context_ = options.context > 0 ? options.context : std::min(c.max_position_embeddings, kDefaultContext);
  if (context_ > c.max_position_embeddings)
    fail("context {} exceeds the model's max_position_embeddings {}", context_, c.max_position_embeddings);

  int full = 0, linear = 0;
  for (LayerType t : c.layer_types) slot_.push_back(t == LayerType::FullAttention ? full++ : linear++);

  const size_t cache_floats = size_t(full) * size_t(context_) * size_t(c.kv_dim());
  constexpr size_t kMaxCacheBytes = size_t(64) << 30;
  if (2 * cache_floats * sizeof(float) > kMaxCacheBytes)
    fail("a KV cache of {} tokens needs {:.1f} GiB on the CPU; ask for a smaller --ctx", context_,
         2.0 * double(cache_floats) * sizeof(float) / double(1ull << 30));
  k_cache_.assign(cache_floats, 0.0f);
  v_cache_.assign(cache_floats, 0.0f);
  state_floats_ = size_t(c.linear_num_value_heads) * size_t(c.linear_key_head_dim) * size_t(c.linear_value_head_dim);
  conv_floats_ = size_t(c.linear_conv_kernel - 1) * size_t(c.linear_conv_dim());
  recurrent_.assign(size_t(linear) * state_floats_, 0.0f);
  conv_state_.assign(size_t(linear) * conv_floats_, 0.0f);
  tokens_.assign(size_t(context_), -1);
  inv_freq_ = cpu::rope_inv_freq(c.rotary_dim, c.rope_theta);
  logits_.resize(size_t(c.vocab_size));
}

std::string CpuHybridEngine::device_name() const { return "cpu (" + std::to_string(pool_.size()) + " threads)"; }

std::span<const float> CpuHybridEngine::prefill(std::span<const int32_t> tokens) {
  if (tokens.empty()) fail("prefill needs at least one token");
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

// --- Rolling back: snapshots of the DeltaNet states and replay ---------------------------------------

std::vector<int> CpuHybridEngine::snapshot_positions() const {
  std::vector<int> out;
  for (const Snapshot& s : snapshots_) out.push_back(s.position);
  return out;
}

void CpuHybridEngine::remember_states() {
  if (recurrent_.empty()) return;  // no DeltaNet layer: nothing to roll back
  auto at = std::lower_bound(snapshots_.begin(), snapshots_.end(), position_,
                             [](const Snapshot& s, int p) { return s.position < p; });
  if (at != snapshots_.end() && at->position == position_) return;
  snapshots_.insert(at, Snapshot{position_, recurrent_, conv_state_});
  if (snapshots_.size() > kMaxSnapshots) snapshots_.erase(snapshots_.begin());
}

void CpuHybridEngine::truncate(int n) {
  if (n < 0 || n > position_) fail("cannot truncate the cache to {} tokens: it holds {}", n, position_);
  if (n == position_) return;
  if (recurrent_.empty()) {  // no DeltaNet layer: only the KV cache, which needs nothing
    position_ = n;
    return;
  }
  // The KV cache needs nothing (entries past n are overwritten later); the DeltaNet states are rebuilt
  // from the latest snapshot at or before n by replaying the tokens in between.
  const Snapshot* from = nullptr;
  for (const Snapshot& s : snapshots_)
    if (s.position <= n) from = &s;
  const int start = from ? from->position : 0;
  for (int p = start; p < n; ++p)
    if (tokens_[size_t(p)] < 0)
      fail("cannot roll the cache back to {} tokens: position {} holds benchmark noise, not a token", n, p);

  if (from) {
    recurrent_ = from->recurrent;
    conv_state_ = from->conv;
  } else {
    std::fill(recurrent_.begin(), recurrent_.end(), 0.0f);
    std::fill(conv_state_.begin(), conv_state_.end(), 0.0f);
  }
  position_ = start;
  // Snapshots past n describe tokens that are gone.
  std::erase_if(snapshots_, [n](const Snapshot& s) { return s.position > n; });
  if (n > start) {
    const std::vector<int32_t> replay(tokens_.begin() + start, tokens_.begin() + n);
    forward(replay, nullptr);
    replayed_tokens_ += n - start;
    remember_states();
  }
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
  std::fill(tokens_.begin(), tokens_.end(), -1);
  snapshots_.clear();
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
    tokens_[size_t(position_ + t)] = tokens[size_t(t)];
  }

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
    cpu::matmul(w.lm_head, h.data(), T, all_logits, pool_);
    std::copy_n(all_logits + (T - 1) * c.vocab_size, c.vocab_size, logits_.data());
  } else {
    cpu::matmul(w.lm_head, &h[size_t((T - 1) * H)], 1, logits_.data(), pool_);
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
  cpu::matmul(w.q, h, T, qg.data(), pool_);
  cpu::matmul(w.k, h, T, k.data(), pool_);
  cpu::matmul(w.v, h, T, v.data(), pool_);

  for (int64_t t = 0; t < T; ++t) {
    for (int64_t hd = 0; hd < heads; ++hd) {
      const float* src = &qg[size_t((t * heads + hd) * 2 * D)];
      float* qh = &q[size_t((t * heads + hd) * D)];
      std::copy_n(src, D, qh);
      std::copy_n(src + D, D, &gate[size_t((t * heads + hd) * D)]);
      cpu::rms_norm_zero_centered(qh, w.q_norm, eps, D, qh);
      cpu::rope(qh, c.rotary_dim, p0 + t, inv_freq_.data());  // dims rotary_dim..D pass through
    }
    for (int64_t g = 0; g < kv_heads; ++g) {
      float* kh = &k[size_t((t * kv_heads + g) * D)];
      cpu::rms_norm_zero_centered(kh, w.k_norm, eps, D, kh);
      cpu::rope(kh, c.rotary_dim, p0 + t, inv_freq_.data());
    }
    std::memcpy(k_cache + (p0 + t) * KV, &k[size_t(t * KV)], size_t(KV) * sizeof(float));
    std::memcpy(v_cache + (p0 + t) * KV, &v[size_t(t * KV)], size_t(KV) * sizeof(float));
  }

  // Causal attention: token t sees cache positions 0..p0+t; query head h reads kv head h/group.
  cpu::causal_attention(q.data(), T, heads, kv_heads, D, p0, k_cache, v_cache, scale, attn.data(), pool_);

  // The output gate, then o_proj.
  for (size_t i = 0; i < attn.size(); ++i) attn[i] *= cpu::sigmoid(gate[i]);
  cpu::matmul(w.o, attn.data(), T, out, pool_);
}

// Gated DeltaNet (transformers' Qwen3_5GatedDeltaNet), token by token over the recurrence:
//   qkv = conv(x W_qkv) -> silu; q, k l2-normalized per head, q scaled by 1/sqrt(key dim);
//   beta = sigmoid(x W_b); g = -exp(A_log) * softplus(x W_a + dt_bias);
//   S = exp(g) S; S += k (beta (v - S^T k))^T; o = S^T q; out = (w * rmsnorm(o) * silu(x W_z)) W_out.
void CpuHybridEngine::gated_delta_net(const Qwen35LinearAttentionWeights& w, int slot, const float* h, int64_t T,
                                      float* out) {
  const ModelConfig& c = model_->config;
  const int64_t C = c.linear_conv_dim(), Kd = c.linear_key_dim(), Vd = c.linear_value_dim();
  const int64_t nk = c.linear_num_key_heads, nv = c.linear_num_value_heads;
  const int64_t dk = c.linear_key_head_dim, dv = c.linear_value_head_dim;

  std::vector<float> qkv(size_t(T * C));  // [T, C]: q [nk, dk] | k [nk, dk] | v [nv, dv] per token
  std::vector<float> z(size_t(T * Vd));   // [T, nv, dv]: the output gate
  std::vector<float> b(size_t(T * nv)), a(size_t(T * nv));  // [T, nv]
  std::vector<float> o(size_t(T * Vd));   // [T, nv, dv]
  cpu::matmul(w.in_qkv, h, T, qkv.data(), pool_);
  cpu::matmul(w.in_z, h, T, z.data(), pool_);
  cpu::matmul(w.in_b, h, T, b.data(), pool_);
  cpu::matmul(w.in_a, h, T, a.data(), pool_);

  // 1. Short causal conv over time per channel, then SiLU.
  causal_conv(w.conv, slot, qkv.data(), T);

  // 2. Per token and head: l2-normalize q and k, scale q; the write strength beta and the log decay g.
  const float q_scale = 1.0f / std::sqrt(float(dk));
  std::vector<float> beta(size_t(T * nv)), g(size_t(T * nv));  // [T, nv]
  for (int64_t t = 0; t < T; ++t) {
    float* row = &qkv[size_t(t * C)];
    for (int64_t hk = 0; hk < nk; ++hk) {
      float* qh = row + hk * dk;
      float* kh = row + Kd + hk * dk;
      cpu::l2_normalize(qh, dk, kL2NormEps);
      cpu::l2_normalize(kh, dk, kL2NormEps);
      for (int64_t i = 0; i < dk; ++i) qh[i] *= q_scale;
    }
    for (int64_t hv = 0; hv < nv; ++hv) {
      const size_t at = size_t(t * nv + hv);
      beta[at] = cpu::sigmoid(b[at]);
      g[at] = -std::exp(cpu::weight_at(w.A_log, hv)) * cpu::softplus(a[at] + cpu::weight_at(w.dt_bias, hv));
    }
  }

  // 3. The gated delta rule over the recurrent state, token by token.
  delta_rule(slot, qkv.data(), qkv.data() + Kd, qkv.data() + 2 * Kd, beta.data(), g.data(), T, o.data());

  // 4. Gated RMSNorm per head (plain weight shared by heads), then out_proj.
  for (int64_t t = 0; t < T; ++t)
    for (int64_t hv = 0; hv < nv; ++hv) {
      float* oh = &o[size_t((t * nv + hv) * dv)];
      cpu::gated_rms_norm(oh, &z[size_t((t * nv + hv) * dv)], w.norm, c.rms_norm_eps, dv, oh);
    }
  cpu::matmul(w.out, o.data(), T, out, pool_);
}

// Depthwise causal conv: out[t][ch] = sum_j w[ch][j] * in[t - (K-1) + j][ch], the inputs before this
// chunk coming from the conv state; then SiLU. In place on qkv [T, C]; the state keeps the last K-1 inputs.
void CpuHybridEngine::causal_conv(const WeightMatrix& conv, int slot, float* qkv, int64_t T) {
  const int64_t C = conv.rows, K = conv.cols;
  float* state = conv_state(slot);  // [K-1, C]
  // The inputs in time order: K-1 remembered rows, then this chunk's T rows.
  std::vector<float> in(size_t((K - 1 + T) * C));
  std::copy_n(state, (K - 1) * C, in.data());
  std::copy_n(qkv, T * C, in.data() + (K - 1) * C);
  pool_.parallel_for(size_t(C), [&](size_t c0, size_t c1) {
    std::vector<float> taps(static_cast<size_t>(K));
    for (size_t ch = c0; ch < c1; ++ch) {
      cpu::matrix_row(conv, int64_t(ch), taps.data());
      for (int64_t t = 0; t < T; ++t) {
        float acc = 0;
        for (int64_t j = 0; j < K; ++j) acc += taps[size_t(j)] * in[size_t((t + j) * C) + ch];
        qkv[size_t(t * C) + ch] = cpu::silu(acc);
      }
    }
  }, 64);
  std::copy_n(in.data() + T * C, (K - 1) * C, state);
}

// The gated delta rule for each value head (one thread per head, so the result does not depend on the
// thread count). Value head hv reads key head hv / (nv / nk). Per token, in this order:
//   S = alpha S                    (alpha = exp(g): the decay comes first)
//   m_j = sum_i S[i][j] k_i        (what the decayed state recalls for k)
//   S[i][j] += k_i beta (v_j - m_j)
//   o_j = sum_i S[i][j] q_i
void CpuHybridEngine::delta_rule(int slot, const float* q, const float* k, const float* v, const float* beta,
                                 const float* g, int64_t T, float* o) {
  const ModelConfig& c = model_->config;
  const int64_t C = c.linear_conv_dim();
  const int64_t nv = c.linear_num_value_heads, per_key = nv / c.linear_num_key_heads;
  const int64_t dk = c.linear_key_head_dim, dv = c.linear_value_head_dim;
  float* states = recurrent_state(slot);  // [nv, dk, dv]
  pool_.parallel_for(size_t(nv), [&](size_t h0, size_t h1) {
    std::vector<float> m(static_cast<size_t>(dv)), d(static_cast<size_t>(dv));
    for (size_t hv = h0; hv < h1; ++hv) {
      float* S = states + hv * size_t(dk * dv);
      const int64_t hk = int64_t(hv) / per_key;
      for (int64_t t = 0; t < T; ++t) {
        const float* qt = q + t * C + hk * dk;
        const float* kt = k + t * C + hk * dk;
        const float* vt = v + t * C + int64_t(hv) * dv;
        const float alpha = std::exp(g[t * nv + int64_t(hv)]), b = beta[t * nv + int64_t(hv)];
        for (int64_t i = 0; i < dk * dv; ++i) S[i] *= alpha;
        std::fill(m.begin(), m.end(), 0.0f);
        for (int64_t i = 0; i < dk; ++i) cpu::axpy(kt[i], S + i * dv, m.data(), dv);
        for (int64_t j = 0; j < dv; ++j) d[size_t(j)] = b * (vt[j] - m[size_t(j)]);
        for (int64_t i = 0; i < dk; ++i) cpu::axpy(kt[i], d.data(), S + i * dv, dv);
        float* ot = o + (t * nv + int64_t(hv)) * dv;
        std::fill(ot, ot + dv, 0.0f);
        for (int64_t i = 0; i < dk; ++i) cpu::axpy(qt[i], S + i * dv, ot, dv);
      }
    }
  });
}

// x W_down^T of silu(x W_gate^T) * (x W_up^T), as in Qwen3.
void CpuHybridEngine::swiglu_mlp(const Qwen35LayerWeights& w, const float* h, int64_t T, float* out) {
  const int64_t I = model_->config.intermediate_size;
  std::vector<float> gate(size_t(T * I)), up(size_t(T * I));  // [T, I]
  cpu::matmul(w.gate, h, T, gate.data(), pool_);
  cpu::matmul(w.up, h, T, up.data(), pool_);
  for (size_t i = 0; i < gate.size(); ++i) gate[i] = cpu::silu(gate[i]) * up[i];
  cpu::matmul(w.down, gate.data(), T, out, pool_);
}

}  // namespace megaqwen
