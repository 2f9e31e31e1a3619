#include "megaqwen/sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>

#include "megaqwen/util/error.h"

namespace megaqwen {

void SamplingParams::validate() const {
  if (!(temperature >= 0.0f) || !std::isfinite(temperature)) fail("temperature must be >= 0, got {}", temperature);
  if (top_k < 0) fail("top_k must be >= 0, got {}", top_k);
  if (!(top_p > 0.0f && top_p <= 1.0f)) fail("top_p must be in (0, 1], got {}", top_p);
  if (!(min_p >= 0.0f && min_p <= 1.0f)) fail("min_p must be in [0, 1], got {}", min_p);
  if (!(repetition_penalty > 0.0f) || !std::isfinite(repetition_penalty))
    fail("repetition_penalty must be > 0, got {}", repetition_penalty);
  if (!std::isfinite(presence_penalty) || std::fabs(presence_penalty) > 2.0f)
    fail("presence_penalty must be in [-2, 2], got {}", presence_penalty);
  if (!std::isfinite(frequency_penalty) || std::fabs(frequency_penalty) > 2.0f)
    fail("frequency_penalty must be in [-2, 2], got {}", frequency_penalty);
}

GenerationDefaults load_generation_defaults(const std::filesystem::path& model_dir) {
  GenerationDefaults d;
  std::filesystem::path path = model_dir / "generation_config.json";
  std::ifstream in(path, std::ios::binary);
  if (!in) return d;
  std::stringstream text;
  text << in.rdbuf();
  auto j = nlohmann::json::parse(text.str(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) fail("{}: not a valid JSON object", path.string());
  auto number = [&](const char* key, auto& field) {
    if (!j.contains(key) || j[key].is_null()) return;
    if (!j[key].is_number()) fail("{}: '{}' must be a number", path.string(), key);
    field = j[key].get<std::remove_reference_t<decltype(field)>>();
  };
  number("temperature", d.sampling.temperature);
  number("top_k", d.sampling.top_k);
  number("top_p", d.sampling.top_p);
  number("min_p", d.sampling.min_p);
  number("repetition_penalty", d.sampling.repetition_penalty);
  if (j.contains("do_sample") && j["do_sample"].is_boolean() && !j["do_sample"].get<bool>()) d.sampling.temperature = 0;
  if (j.contains("eos_token_id")) {
    const auto& e = j["eos_token_id"];
    auto add = [&](const nlohmann::json& v) {
      if (!v.is_number_integer()) fail("{}: eos_token_id entries must be integers", path.string());
      d.eos_token_ids.push_back(v.get<int32_t>());
    };
    if (e.is_array()) {
      for (const auto& v : e) add(v);
    } else if (!e.is_null()) {
      add(e);
    }
  }
  d.sampling.validate();
  return d;
}

int32_t argmax(std::span<const float> values) {
  int32_t best = 0;
  for (size_t i = 1; i < values.size(); ++i)
    if (values[i] > values[size_t(best)]) best = int32_t(i);
  return best;
}

Sampler::Sampler(const SamplingParams& params) : params_(params) {
  params_.validate();
  // xoshiro256** seeded through splitmix64: fast, and the same stream on every platform.
  uint64_t s = params.seed;
  for (auto& word : state_) {
    s += 0x9e3779b97f4a7c15ull;
    uint64_t z = s;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    word = z ^ (z >> 31);
  }
}

double Sampler::next_uniform() {
  auto rotl = [](uint64_t x, int k) { return (x << k) | (x >> (64 - k)); };
  const uint64_t result = rotl(state_[1] * 5, 7) * 9;
  const uint64_t t = state_[1] << 17;
  state_[2] ^= state_[0];
  state_[3] ^= state_[1];
  state_[1] ^= state_[2];
  state_[0] ^= state_[3];
  state_[2] ^= t;
  state_[3] = rotl(state_[3], 45);
  return double(result >> 11) * 0x1.0p-53;
}

size_t Sampler::filter(std::span<float> logits, std::span<const int32_t> history) {
  const size_t V = logits.size();
  const SamplingParams& p = params_;

  // Penalties look at each distinct seen token; frequency needs the count.
  if (p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) {
    counts_.assign(V, 0);
    for (int32_t id : history)
      if (id >= 0 && size_t(id) < V) ++counts_[size_t(id)];
    for (size_t id = 0; id < V; ++id) {
      if (counts_[id] == 0) continue;
      float& l = logits[id];
      if (p.repetition_penalty != 1.0f) l = l > 0 ? l / p.repetition_penalty : l * p.repetition_penalty;
      l -= p.presence_penalty + p.frequency_penalty * float(counts_[id]);
    }
  }
  if (p.greedy()) return 0;

  for (float& l : logits) l /= p.temperature;

  // Candidates sorted by logit (descending, lowest id first on ties); top-k cuts the list.
  order_.resize(V);
  std::iota(order_.begin(), order_.end(), 0);
  auto by_logit = [&](int32_t a, int32_t b) {
    return logits[size_t(a)] > logits[size_t(b)] || (logits[size_t(a)] == logits[size_t(b)] && a < b);
  };
  size_t keep = V;
  if (p.top_k > 0 && size_t(p.top_k) < V) {
    keep = size_t(p.top_k);
    std::partial_sort(order_.begin(), order_.begin() + std::ptrdiff_t(keep), order_.end(), by_logit);
  } else {
    std::sort(order_.begin(), order_.end(), by_logit);
  }

  // Softmax over the kept candidates (fp64 for the sums).
  const float top = logits[size_t(order_[0])];
  probs_.resize(keep);
  double total = 0;
  for (size_t i = 0; i < keep; ++i) total += (probs_[i] = std::exp(double(logits[size_t(order_[i])] - top)));
  for (double& q : probs_) q /= total;

  // top-p: the smallest prefix whose mass reaches top_p (always at least one token).
  if (p.top_p < 1.0f) {
    double mass = 0;
    size_t n = 0;
    while (n < keep) {
      mass += probs_[n++];
      if (mass >= double(p.top_p)) break;
    }
    keep = n;
  }
  // min-p: drop tokens below min_p times the top probability.
  if (p.min_p > 0.0f) {
    const double floor = double(p.min_p) * probs_[0];
    size_t n = 1;
    while (n < keep && probs_[n] >= floor) ++n;
    keep = n;
  }
  return keep;
}

int32_t Sampler::sample(std::span<float> logits, std::span<const int32_t> history) {
  const size_t keep = filter(logits, history);
  if (keep == 0) return argmax(logits);
  double mass = 0;
  for (size_t i = 0; i < keep; ++i) mass += probs_[i];
  double r = next_uniform() * mass;
  for (size_t i = 0; i < keep; ++i) {
    r -= probs_[i];
    if (r < 0) return order_[i];
  }
  return order_[keep - 1];
}

std::vector<Sampler::Candidate> Sampler::distribution(std::span<float> logits, std::span<const int32_t> history) {
  const size_t keep = filter(logits, history);
  if (keep == 0) return {{argmax(logits), 1.0}};
  double mass = 0;
  for (size_t i = 0; i < keep; ++i) mass += probs_[i];
  std::vector<Candidate> out(keep);
  for (size_t i = 0; i < keep; ++i) out[i] = {order_[i], probs_[i] / mass};
  return out;
}

}  // namespace megaqwen
