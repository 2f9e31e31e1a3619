#include "megaqwen/engine/verify.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "megaqwen/engine/generator.h"
#include "megaqwen/sampling/sampler.h"
#include "megaqwen/util/error.h"

namespace megaqwen {

namespace {

// log-sum-exp in double: logits of ~1e2 and vocabularies of ~1e5 lose nothing.
double log_sum_exp(std::span<const float> v, double max_value) {
  double sum = 0;
  for (float x : v) sum += std::exp(double(x) - max_value);
  return max_value + std::log(sum);
}

// The median of field(c) over the positions with finite logits (0 when there are none).
double median_of(std::span<const LogitComparison> compared, double LogitComparison::*field) {
  std::vector<double> values;
  for (const LogitComparison& c : compared)
    if (c.finite) values.push_back(c.*field);
  if (values.empty()) return 0;
  const auto middle = values.begin() + std::ptrdiff_t(values.size() / 2);
  std::nth_element(values.begin(), middle, values.end());
  return *middle;
}

// Twice the typical error, capped at twice the largest error the bounds accept: a broken engine's
// large errors must not turn every flip into a "near-tie".
double tie_tolerance_of(std::span<const LogitComparison> compared, const VerifyThresholds& t) {
  return 2 * std::min(median_of(compared, &LogitComparison::max_abs),
                      t.rel_error_max * median_of(compared, &LogitComparison::ref_scale));
}

void add_position(PhaseResult& phase, int position, const LogitComparison& c) {
  ++phase.positions;
  if (!c.finite) {
    ++phase.non_finite;
    phase.mismatches.push_back(fmt::format("position {}: the candidate's logits are not all finite", position));
    return;
  }
  if (c.rel_error > phase.worst_rel_error || phase.worst_position < 0) {
    phase.worst_rel_error = c.rel_error;
    phase.worst_position = position;
  }
  phase.worst_abs = std::max(phase.worst_abs, c.max_abs);
  phase.mean_kl += c.kl;  // a sum until finish_phase
  phase.max_kl = std::max(phase.max_kl, c.kl);
  if (c.ref_top1 == c.cand_top1) {
    ++phase.agree;
  } else if (c.ref_gap <= phase.tie_tolerance) {
    ++phase.near_ties;
  } else {
    phase.mismatches.push_back(fmt::format("position {}: reference top-1 {}, candidate {}, reference gap {:.4g}, "
                                           "max |cand - ref| there {:.4g}",
                                           position, c.ref_top1, c.cand_top1, c.ref_gap, c.max_abs));
  }
}

void finish_phase(PhaseResult& phase) {
  const int judged = phase.positions - phase.non_finite;
  if (judged > 0) phase.mean_kl /= judged;
}

std::span<const float> row(const std::vector<float>& all, size_t position, size_t vocab) {
  return std::span<const float>(all).subspan(position * vocab, vocab);
}

}  // namespace

LogitComparison compare_logits(std::span<const float> reference, std::span<const float> candidate) {
  if (reference.empty() || reference.size() != candidate.size())
    fail("compare_logits: {} reference and {} candidate logits", reference.size(), candidate.size());
  LogitComparison c;
  for (float x : candidate) c.finite = c.finite && std::isfinite(x);
  c.ref_top1 = argmax(reference);
  c.cand_top1 = argmax(candidate);
  if (!c.finite) return c;
  for (size_t i = 0; i < reference.size(); ++i) {
    c.max_abs = std::max(c.max_abs, std::abs(double(candidate[i]) - double(reference[i])));
    c.ref_scale = std::max(c.ref_scale, std::abs(double(reference[i])));
  }
  c.rel_error = c.ref_scale > 0 ? c.max_abs / c.ref_scale : c.max_abs;
  // KL(p || q) = sum p (log p - log q), with log p = r - lse(r), log q = s - lse(s).
  const double lse_r = log_sum_exp(reference, reference[size_t(c.ref_top1)]);
  const double lse_q = log_sum_exp(candidate, candidate[size_t(c.cand_top1)]);
  double kl = 0;
  for (size_t i = 0; i < reference.size(); ++i) {
    const double log_p = double(reference[i]) - lse_r;
    const double log_q = double(candidate[i]) - lse_q;
    kl += std::exp(log_p) * (log_p - log_q);
  }
  c.kl = std::max(kl, 0.0);  // rounding can leave -1e-17 for identical inputs
  c.ref_gap = double(reference[size_t(c.ref_top1)]) - double(reference[size_t(c.cand_top1)]);
  return c;
}

PhaseResult judge_phase(std::string name, std::span<const LogitComparison> compared, int first_position,
                        const VerifyThresholds& thresholds) {
  PhaseResult phase;
  phase.name = std::move(name);
  phase.tie_tolerance = tie_tolerance_of(compared, thresholds);
  for (size_t i = 0; i < compared.size(); ++i) add_position(phase, first_position + int(i), compared[i]);
  finish_phase(phase);
  return phase;
}

VerifyReport verify_engine(Engine& reference, Engine& candidate, const VerifyOptions& o) {
  const int n = int(o.tokens.size());
  if (n < 1) fail("verify needs at least one token");
  if (o.prefill_tokens < 1 || o.prefill_tokens > n)
    fail("verify: prefill_tokens must be in [1, {}], got {}", n, o.prefill_tokens);
  if (o.generate_tokens < 0) fail("verify: generate_tokens must be >= 0, got {}", o.generate_tokens);
  if (reference.config().vocab_size != candidate.config().vocab_size)
    fail("verify: the engines' vocabularies differ ({} and {})", reference.config().vocab_size,
         candidate.config().vocab_size);
  const int need = n + o.generate_tokens;
  for (const Engine* e : {&reference, &candidate})
    if (e->context_size() < need)
      fail("verify needs a context of {} tokens ({} + {} generated); {} holds {}", need, n, o.generate_tokens,
           e->device_name(), e->context_size());
  const size_t V = size_t(reference.config().vocab_size);

  VerifyReport report;
  report.reference_device = reference.device_name();
  report.candidate_device = candidate.device_name();
  const std::span<const int32_t> tokens(o.tokens);

  std::vector<float> want;
  reference.truncate(0);
  reference.prefill_all_logits(tokens, want);

  // Prefill: one batch over the first prefill_tokens; decode: the rest one token at a time. Each
  // phase is judged after it ran: its tie tolerance comes from the errors of all its positions.
  candidate.truncate(0);
  std::vector<LogitComparison> compared;
  {
    std::vector<float> got;
    candidate.prefill_all_logits(tokens.first(size_t(o.prefill_tokens)), got);
    for (int p = 0; p < o.prefill_tokens; ++p)
      compared.push_back(compare_logits(row(want, size_t(p), V), row(got, size_t(p), V)));
  }
  for (int p = o.prefill_tokens; p < n; ++p)
    compared.push_back(compare_logits(row(want, size_t(p), V), candidate.decode(o.tokens[size_t(p)])));

  const std::span<const LogitComparison> all(compared);
  report.phases.push_back(judge_phase("prefill", all.first(size_t(o.prefill_tokens)), 0, o.thresholds));
  if (o.prefill_tokens < n)
    report.phases.push_back(judge_phase("decode", all.subspan(size_t(o.prefill_tokens)), o.prefill_tokens, o.thresholds));

  // Generation: the candidate's greedy tokens, each judged on the reference's logits of the same
  // sequence (the first after the whole input, the others after the candidate's own tokens).
  if (o.generate_tokens > 0) {
    Generator generator(candidate);
    GenerationRequest request;
    request.prompt = o.tokens;
    request.max_tokens = o.generate_tokens;
    request.sampling.temperature = 0;  // greedy; no eos: the whole budget is drawn
    report.generated = generator.run(request).tokens;
    PhaseResult generation;
    generation.name = "generation";
    generation.tie_tolerance = report.phases.back().tie_tolerance;  // the decode path's, as it generates
    std::vector<float> scored(row(want, size_t(n - 1), V).begin(), row(want, size_t(n - 1), V).end());
    if (report.generated.size() > 1) {
      std::vector<float> more;
      reference.prefill_all_logits(std::span(report.generated).first(report.generated.size() - 1), more);
      scored.insert(scored.end(), more.begin(), more.end());
    }
    for (size_t i = 0; i < report.generated.size(); ++i) {
      const std::span<const float> r = row(scored, i, V);
      const int32_t chosen = report.generated[i], best = argmax(r);
      ++generation.positions;
      const double gap = double(r[size_t(best)]) - double(r[size_t(chosen)]);
      if (chosen == best) {
        ++generation.agree;
      } else if (gap <= generation.tie_tolerance) {
        ++generation.near_ties;
      } else {
        generation.mismatches.push_back(fmt::format("position {}: reference top-1 {}, candidate chose {}, reference gap {:.4g}",
                                                    n + int(i), best, chosen, gap));
      }
    }
    if (int(report.generated.size()) != o.generate_tokens)
      report.failures.push_back(fmt::format("generation: the candidate drew {} tokens, {} were asked for",
                                            report.generated.size(), o.generate_tokens));
    report.phases.push_back(generation);
  }

  // The verdict.
  const VerifyThresholds& t = o.thresholds;
  double kl_sum = 0, kl_max = 0, worst = 0;
  int judged = 0;
  for (const PhaseResult& ph : report.phases) {
    if (ph.non_finite > 0)
      report.failures.push_back(fmt::format("{}: {} positions with non-finite logits", ph.name, ph.non_finite));
    if (ph.top1_rate() < t.top1_min)
      report.failures.push_back(fmt::format("{}: top-1 agreement {}/{} (+{} near-ties) is below {:.0f}%", ph.name,
                                            ph.agree, ph.positions, ph.near_ties, 100 * t.top1_min));
    if (ph.name == "generation") continue;
    const int m = ph.positions - ph.non_finite;
    kl_sum += ph.mean_kl * m;
    judged += m;
    kl_max = std::max(kl_max, ph.max_kl);
    worst = std::max(worst, ph.worst_rel_error);
  }
  if (worst > t.rel_error_max)
    report.failures.push_back(fmt::format("worst relative logit error {:.3g} is above {:.3g}", worst, t.rel_error_max));
  if (judged > 0 && kl_sum / judged > t.kl_mean_max)
    report.failures.push_back(fmt::format("mean KL {:.3g} nats is above {:.3g}", kl_sum / judged, t.kl_mean_max));
  if (kl_max > t.kl_max_max)
    report.failures.push_back(fmt::format("max KL {:.3g} nats is above {:.3g}", kl_max, t.kl_max_max));
  return report;
}

}  // namespace megaqwen
