// megaqwen verify: checks the engine --device picks against the CPU reference engine on the same model
// (prefill logits, decode logits, greedy tokens; src/megaqwen/engine/verify.h), prints a table and a
// verdict, and exits 1 when the candidate fails. On a machine without a GPU the candidate is the CPU
// engine itself: then it checks the token-by-token decode path against the batched prefill.
// --bf16-kv-cache (with --device cpu) gives the CPU candidate the GPU's bf16 cache: the distance that
// rounding alone puts between an engine and the fp32 reference on this model, the yardstick for a
// GPU's report on the same model.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "cli/commands.h"
#include "cli/common_options.h"
#include "megaqwen/engine/verify.h"
#include "megaqwen/model/model.h"
#include "megaqwen/util/error.h"

#include "build_info.h"  // MEGAQWEN_GIT_COMMIT, generated at build time

namespace megaqwen::cli {

namespace {

struct VerifyArgs {
  ModelArgs model;
  std::string prompt, ids, json;
  int positions = 160, decode = 32, generate = 64;
  uint64_t seed = 0;
  int shown_mismatches = 5;
  bool bf16_kv_cache = false;
};

// Seeded ids spread over the whole vocabulary, as the GPU tests use: every embedding row and LM-head
// row is as likely to matter, and no tokenizer is needed.
std::vector<int32_t> random_tokens(int n, int vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (auto& id : ids) id = int32_t(rng() % uint64_t(vocab));
  return ids;
}

nlohmann::ordered_json phase_json(const PhaseResult& p) {
  nlohmann::ordered_json j = {{"phase", p.name},           {"positions", p.positions},
                              {"top1_agree", p.agree},     {"near_ties", p.near_ties},
                              {"top1_rate", p.top1_rate()}, {"non_finite", p.non_finite},
                              {"tie_tolerance", p.tie_tolerance}};
  if (p.name != "generation") {
    j["worst_rel_error"] = p.worst_rel_error;
    j["worst_position"] = p.worst_position;
    j["worst_abs_error"] = p.worst_abs;
    j["mean_kl"] = p.mean_kl;
    j["max_kl"] = p.max_kl;
  }
  j["mismatches"] = p.mismatches;
  return j;
}

void run_verify(const VerifyArgs& a) {
  if (!a.prompt.empty() && !a.ids.empty()) fail("give at most one of --prompt TEXT or --ids \"1 2 3\"");
  auto model = a.model.load();
  const int vocab = model->config.vocab_size;

  std::vector<int32_t> tokens;
  if (!a.ids.empty()) {
    tokens = parse_token_ids(a.ids);
  } else if (!a.prompt.empty()) {
    tokens = load_model_tokenizer(model->dir, true)->encode(a.prompt);
  } else {
    tokens = random_tokens(a.positions, vocab, a.seed);
  }
  if (tokens.empty()) fail("the prompt is empty");
  for (int32_t id : tokens)
    if (id < 0 || id >= vocab) fail("token id {} is outside the vocabulary [0, {})", id, vocab);

  VerifyOptions options;
  options.tokens = tokens;
  const int n = int(tokens.size());
  options.prefill_tokens = n - std::min(a.decode, n - 1);  // at least one token is prefilled
  options.generate_tokens = a.generate;
  const int need = n + a.generate;
  if (need > model->config.context_limit())
    fail("{} tokens + {} generated exceed the model's {} positions", n, a.generate, model->config.context_limit());

  EngineOptions candidate_options = a.model.engine;
  if (candidate_options.context == 0) candidate_options.context = need;
  if (a.bf16_kv_cache) {
    if (candidate_options.device != "cpu") fail("--bf16-kv-cache is for --device cpu (the CUDA engines' cache is bf16)");
    candidate_options.bf16_kv_cache = true;
  }
  auto candidate = create_engine(model, candidate_options);
  EngineOptions reference_options{.device = "cpu", .context = need, .threads = a.model.engine.threads, .quiet = true};
  auto reference = create_engine(model, reference_options);

  std::printf("reference: %s, one batched prefill per sequence\n", reference->device_name().c_str());
  std::printf("candidate: %s\n", candidate->device_name().c_str());
  std::printf("tokens:    %d (%d prefilled, %d decoded one by one), then %d greedy tokens generated\n\n", n,
              options.prefill_tokens, n - options.prefill_tokens, a.generate);
  std::fflush(stdout);

  const VerifyReport report = verify_engine(*reference, *candidate, options);

  std::printf("| phase | positions | top-1 agree | near-ties | tie tolerance | worst rel err | mean KL | max KL |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const PhaseResult& p : report.phases) {
    std::printf("| %s | %d | %d | %d | %.3g |", p.name.c_str(), p.positions, p.agree, p.near_ties, p.tie_tolerance);
    if (p.name == "generation") {
      std::printf(" - | - | - |\n");
    } else {
      std::printf(" %.3g | %.3g | %.3g |\n", p.worst_rel_error, p.mean_kl, p.max_kl);
    }
  }
  const VerifyThresholds& t = options.thresholds;
  std::printf("\nnear-tie: a top-1 flip where the reference's logits of the two ids differ by at most the tie "
              "tolerance (twice the phase's median max|cand - ref|, at most twice the accepted error: rel err bound x "
              "median max|ref|; generation: the decode phase's)\n");
  std::printf("bounds: worst rel err <= %.3g, mean KL <= %.3g, max KL <= %.3g nats, top-1 + near-ties >= %.0f%% "
              "per phase\n", t.rel_error_max, t.kl_mean_max, t.kl_max_max, 100 * t.top1_min);
  for (const PhaseResult& p : report.phases) {
    const size_t shown = std::min(p.mismatches.size(), size_t(std::max(a.shown_mismatches, 0)));
    for (size_t i = 0; i < shown; ++i) std::printf("  %s: %s\n", p.name.c_str(), p.mismatches[i].c_str());
    if (p.mismatches.size() > shown)
      std::printf("  %s: ... and %zu more\n", p.name.c_str(), p.mismatches.size() - shown);
  }
  std::printf("%s\n", report.passed() ? "PASS" : "FAIL");
  std::fflush(stdout);

  if (!a.json.empty()) {
    nlohmann::ordered_json j = {{"model", model->dir.string()},
                                {"commit", MEGAQWEN_GIT_COMMIT},
                                {"reference", report.reference_device},
                                {"candidate", report.candidate_device},
                                {"tokens", n},
                                {"prefill_tokens", options.prefill_tokens},
                                {"generate_tokens", a.generate},
                                {"thresholds",
                                 {{"rel_error_max", t.rel_error_max},
                                  {"kl_mean_max", t.kl_mean_max},
                                  {"kl_max_max", t.kl_max_max},
                                  {"top1_min", t.top1_min}}},
                                {"generated", report.generated},
                                {"passed", report.passed()},
                                {"failures", report.failures}};
    nlohmann::ordered_json phases = nlohmann::ordered_json::array();
    for (const PhaseResult& p : report.phases) phases.push_back(phase_json(p));
    j["phases"] = phases;
    std::ofstream out(a.json);
    if (!out || !(out << j.dump(2) << "\n")) fail("cannot write {}", a.json);
  }
  if (!report.passed()) {
    std::string why;
    for (const std::string& f : report.failures) why += (why.empty() ? "" : "; ") + f;
    fail("verify failed: {}", why);
  }
}

}  // namespace

void add_verify_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "verify", "Check an engine (--device) against the CPU reference: prefill and decode logits, greedy tokens");
  auto a = std::make_shared<VerifyArgs>();
  a->model.add_to(cmd);
  cmd->add_option("-p,--prompt", a->prompt, "Prompt text to verify on (default: --positions seeded random ids)");
  cmd->add_option("--ids", a->ids, "Token ids to verify on, e.g. \"151644 872 198\"");
  cmd->add_option("--positions", a->positions, "How many random ids when no prompt is given")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--decode", a->decode, "How many of the last tokens the candidate decodes one by one")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("-n,--generate", a->generate, "Greedy tokens the candidate generates after the sequence")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("-s,--seed", a->seed, "Seed of the random ids")->capture_default_str();
  cmd->add_option("--show", a->shown_mismatches, "Mismatching positions to list per phase")->capture_default_str();
  cmd->add_option("--json", a->json, "Write the report as JSON to this file");
  cmd->add_flag("--bf16-kv-cache", a->bf16_kv_cache,
                "With --device cpu: the candidate rounds its KV cache to bf16 as the CUDA engines store theirs, "
                "so the report shows what that rounding alone moves on this model");
  cmd->callback([a] { run_verify(*a); });
}

}  // namespace megaqwen::cli
