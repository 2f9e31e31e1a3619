// megaqwen perplexity: how well a model predicts a text, measured as llama.cpp's llama-perplexity
// does (windows of --window tokens from an empty cache, each scoring its second half), so the
// number compares with theirs and between megaqwen's engines. The text is scored as text: a
// special token's spelling in it (<|im_end|>, <|endoftext|>) stays characters, as llama-perplexity
// tokenizes (parse_special=false), so a document about chat templates is not cut into control tokens.
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/common_options.h"
#include "megaqwen/engine/scoring.h"
#include "megaqwen/model/model.h"
#include "megaqwen/util/error.h"
#include "megaqwen/util/text_file.h"

namespace megaqwen::cli {

namespace {

struct PerplexityArgs {
  ModelArgs model;
  std::string file, text, json;
  int window = 512, windows = 0;
};

void run_perplexity(const PerplexityArgs& a) {
  if (a.file.empty() == a.text.empty()) fail("give exactly one of --file PATH or --text TEXT");
  const std::string text = a.file.empty() ? a.text : read_text_file(a.file);
  auto model = a.model.load();
  const Tokenizer tokenizer = *load_model_tokenizer(model->dir, true);
  const std::vector<int32_t> tokens = tokenizer.encode(text, SpecialTokens::kAsText);

  EngineOptions options = a.model.engine;
  if (options.context == 0) options.context = a.window;
  auto engine = create_engine(model, options);
  const PerplexityOptions po{.window = a.window, .max_windows = a.windows};
  const int windows = perplexity_windows(*engine, tokens.size(), po);
  std::fprintf(stderr, "megaqwen: %s | %zu tokens, %d windows of %d (the second half of each scored)\n",
               engine->device_name().c_str(), tokens.size(), windows, a.window);
  const PerplexityReport r = perplexity(*engine, tokens, po,
                                        [&](int k, const PerplexityReport& so_far) {
                                          std::printf("[%d/%d] %.4f\n", k + 1, windows, so_far.perplexity);
                                          std::fflush(stdout);
                                        });
  std::printf("PPL = %.4f +/- %.4f over %lld tokens (%d windows of %d), %.1f tok/s\n", r.perplexity,
              r.perplexity_stderr, static_cast<long long>(r.scored_tokens), r.windows, r.window,
              double(r.windows) * r.window / std::max(r.seconds, 1e-9));
  if (!a.json.empty()) {
    nlohmann::ordered_json per_window = nlohmann::ordered_json::array();
    for (const PerplexityWindow& w : r.per_window)
      per_window.push_back({{"nll_sum", w.nll_sum}, {"scored", w.scored}, {"seconds", w.seconds}});
    nlohmann::ordered_json j = {{"model", model->dir.string()},
                                {"device", engine->device_name()},
                                {"text_tokens", tokens.size()},
                                {"window", r.window},
                                {"windows", r.windows},
                                {"scored_tokens", r.scored_tokens},
                                {"mean_nll", r.mean_nll},
                                {"nll_stderr", r.nll_stderr},
                                {"perplexity", r.perplexity},
                                {"perplexity_stderr", r.perplexity_stderr},
                                {"seconds", r.seconds},
                                {"per_window", per_window}};
    std::ofstream out(a.json);
    if (!out || !(out << j.dump(2) << "\n")) fail("cannot write {}", a.json);
  }
}

}  // namespace

void add_perplexity_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("perplexity", "Measure the perplexity of a model on a text (llama-perplexity's method)");
  auto a = std::make_shared<PerplexityArgs>();
  a->model.add_to(cmd);
  cmd->add_option("-f,--file", a->file, "Text file to score");
  cmd->add_option("--text", a->text, "Text to score");
  cmd->add_option("-w,--window", a->window, "Tokens per window; each scores its second half")
      ->capture_default_str()
      ->check(CLI::Range(4, 1 << 20));
  cmd->add_option("--windows", a->windows, "Score at most this many windows (0: all)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--json", a->json, "Write the report as JSON to this file");
  cmd->callback([a] { run_perplexity(*a); });
}

}  // namespace megaqwen::cli
