// megaqwen generate: one prompt in, tokens streamed out as they come.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/common_options.h"
#include "megaqwen/engine/generator.h"
#include "megaqwen/engine/state_file.h"
#include "megaqwen/engine/stop_tokens.h"
#include "megaqwen/grammar/json_constraint.h"
#include "megaqwen/model/model.h"
#include "megaqwen/tokenizer/tokenizer.h"
#include "megaqwen/util/error.h"
#include "megaqwen/util/text_file.h"

namespace megaqwen::cli {

namespace {

struct GenerateArgs {
  ModelArgs model;
  SamplingArgs sampling;
  std::string prompt, prompt_file, ids;
  int max_tokens = 128;
  std::vector<std::string> stops;
  std::vector<std::string> logit_biases;  // llama.cpp's TOKEN_ID+BIAS / TOKEN_ID-BIAS
  bool print_ids = false, ignore_eos = false;
  std::optional<int> logprobs;
  std::string json_schema;  // JSON text, or @FILE
  bool json_object = false;
  std::string prompt_cache;  // a state file: read before the prompt, written after the run
  bool prompt_cache_ro = false;
};

// --prompt-cache FILE, before the run: the saved sequence in FILE goes back into the engine when it
// shares a prefix with the prompt (the generator then prefills only the rest). A missing file is
// fine (the first run makes it); a file for another model or engine is an error naming it.
void load_prompt_cache(const std::string& path, const Model& model, Generator& generator,
                       std::span<const int32_t> prompt) {
  if (!std::filesystem::exists(path)) return;
  const auto start = std::chrono::steady_clock::now();
  const StateFile file = StateFile::open(path);
  size_t shared = 0;
  while (shared < file.tokens().size() && shared < prompt.size() && file.tokens()[shared] == prompt[shared]) ++shared;
  if (shared == 0) {
    std::fprintf(stderr, "megaqwen: prompt cache %s shares no tokens with this prompt: not used\n", path.c_str());
    return;
  }
  generator.restore(file.load(model, generator.engine()));
  std::fprintf(stderr, "megaqwen: prompt cache %s: %zu of its %zu tokens match the prompt (read in %.2f s)\n",
               path.c_str(), shared, file.tokens().size(),
               std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

// --prompt-cache FILE, after the run: the sequence in the cache (prompt and reply) written to FILE.
void save_prompt_cache(const std::string& path, const Model& model, Generator& generator) {
  const auto start = std::chrono::steady_clock::now();
  std::optional<SavedSequence> saved = generator.save();
  if (!saved) fail("--prompt-cache: this engine ({}) cannot save its cache", generator.engine().device_name());
  write_state_file(path, model, generator.engine(), *saved);
  std::fprintf(stderr, "megaqwen: saved %zu tokens to the prompt cache %s (%.1f MB, %.2f s)\n", saved->tokens.size(),
               path.c_str(), double(std::filesystem::file_size(path)) / 1e6,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

// --json-schema's grammar: the schema given as JSON text, or read from the file after an @.
std::shared_ptr<const JsonGrammar> schema_grammar(const std::string& arg) {
  const std::string text = !arg.empty() && arg[0] == '@' ? read_text_file(arg.substr(1)) : arg;
  nlohmann::ordered_json schema;
  try {
    schema = nlohmann::ordered_json::parse(text);
  } catch (const std::exception& e) {
    fail("--json-schema: not JSON: {}", e.what());
  }
  return std::make_shared<const JsonGrammar>(JsonGrammar::from_schema(schema, "--json-schema"));
}

// A token for the logprob table: its text as a JSON string (control bytes and partial UTF-8
// escaped), or its id without a tokenizer.
std::string token_label(const std::optional<Tokenizer>& tokenizer, int32_t id) {
  if (!tokenizer) return std::to_string(id);
  return nlohmann::json(std::string(tokenizer->sampled_bytes(id))).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// One line per generated token, on stderr after the text: its log-probability and the most likely
// alternatives of its position.
void print_logprobs(const GenerationResult& r, const std::optional<Tokenizer>& tokenizer) {
  std::fprintf(stderr, "logprobs (natural log) of each generated token, then its position's most likely tokens:\n");
  for (size_t i = 0; i < r.logprobs.size(); ++i) {
    const TokenLogprob& lp = r.logprobs[i];
    char own[32];
    std::snprintf(own, sizeof own, "%.4f", double(lp.logprob));
    std::string line = "  " + std::to_string(i) + "\t" + own + "\t" + token_label(tokenizer, lp.token);
    for (size_t k = 0; k < lp.top.size(); ++k) {
      char value[32];
      std::snprintf(value, sizeof value, " %.4f", double(lp.top[k].logprob));
      line += (k == 0 ? "\t| " : ", ") + token_label(tokenizer, lp.top[k].token) + value;
    }
    std::fprintf(stderr, "%s\n", line.c_str());
  }
}

void run_generate(const GenerateArgs& a) {
  if (int(!a.prompt.empty()) + int(!a.ids.empty()) + int(!a.prompt_file.empty()) != 1)
    fail("give exactly one of --prompt TEXT, --file FILE or --ids \"1 2 3\" (an empty --prompt is none)");
  const std::string prompt = a.prompt_file.empty() ? a.prompt : read_text_file(a.prompt_file);
  auto model = a.model.load();
  // Text needs the tokenizer; ids work without one (then ids are printed).
  std::optional<Tokenizer> tokenizer = load_model_tokenizer(model->dir, !prompt.empty() || !a.stops.empty());

  GenerationRequest req;
  req.prompt = prompt.empty() ? parse_token_ids(a.ids) : tokenizer->encode(prompt);
  if (req.prompt.empty()) fail("the prompt is empty");
  GenerationDefaults defaults = load_generation_defaults(model->dir);
  req.sampling = a.sampling.resolve(defaults.sampling);
  req.max_tokens = a.max_tokens;
  req.stop_strings = a.stops;
  for (const std::string& spec : a.logit_biases) req.logit_bias.push_back(parse_logit_bias(spec, model->config.vocab_size));
  req.logprobs = a.logprobs;
  if (!a.ignore_eos) req.eos_ids = stop_token_ids(model->config, defaults, tokenizer ? &*tokenizer : nullptr);
  if (!a.json_schema.empty() || a.json_object) {
    if (a.ignore_eos) fail("--json-schema and --json end with the value: --ignore-eos does not go with them");
    if (!tokenizer) tokenizer = load_model_tokenizer(model->dir, true);
    auto grammar = a.json_object ? std::make_shared<const JsonGrammar>(JsonGrammar::object()) : schema_grammar(a.json_schema);
    req.constraint = std::make_shared<JsonConstraint>(std::move(grammar), TokenTrie::of(*tokenizer), req.eos_ids);
  }
  const bool text_out = tokenizer && !a.print_ids;
  if (tokenizer) req.token_bytes = [&](int32_t id) { return tokenizer->sampled_bytes(id); };

  auto engine = create_engine(model, a.model.engine);
  Generator generator(*engine);
  if (!a.prompt_cache.empty()) load_prompt_cache(a.prompt_cache, *model, generator, req.prompt);
  GenerationResult r = generator.run(req, [&](int32_t token, std::string_view text) {
    if (text_out) {
      std::fwrite(text.data(), 1, text.size(), stdout);
    } else if (token >= 0) {
      std::printf("%d ", token);
    }
    std::fflush(stdout);
    return true;
  });
  std::printf("\n");
  std::fflush(stdout);  // the text before the summary on stderr
  const int n = int(r.tokens.size());
  const int prefilled = r.prompt_tokens - r.reused_tokens;
  const std::string reused = r.reused_tokens > 0 ? fmt::format(" ({} from the cache)", r.reused_tokens) : "";
  std::fprintf(stderr,
               "megaqwen: %s | prompt %d tokens%s, %.1f tok/s prefill | generated %d tokens, %.2f tok/s | "
               "finish: %s\n",
               engine->device_name().c_str(), r.prompt_tokens, reused.c_str(),
               prefilled / std::max(r.prefill_seconds, 1e-9), n, n > 1 ? (n - 1) / std::max(r.decode_seconds, 1e-9) : 0.0,
               finish_reason_name(r.finish));
  if (a.logprobs) print_logprobs(r, tokenizer);
  if (!a.prompt_cache.empty() && !a.prompt_cache_ro) save_prompt_cache(a.prompt_cache, *model, generator);
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("generate", "Generate a continuation of a prompt, streaming tokens");
  auto a = std::make_shared<GenerateArgs>();
  a->model.add_to(cmd);
  cmd->add_option("-p,--prompt", a->prompt, "Prompt text (raw, no chat template)");
  cmd->add_option("-f,--file", a->prompt_file, "Prompt text read from this file");
  cmd->add_option("--ids", a->ids, "Prompt as token ids, e.g. \"151644 872 198\"");
  cmd->add_option("-n,--max-tokens", a->max_tokens, "Most tokens to generate")->capture_default_str()->check(CLI::Range(0, 1 << 30));
  cmd->add_option("--stop", a->stops, "Stop when the output contains this text (repeatable)");
  cmd->add_option("--logit-bias", a->logit_biases,
                  "Add to a token's logit before every draw: TOKEN_ID+BIAS or TOKEN_ID-BIAS, e.g. 15043+1, "
                  "15043-inf to ban it (repeatable)");
  cmd->add_flag("--print-ids", a->print_ids, "Print token ids instead of text");
  cmd->add_flag("--ignore-eos", a->ignore_eos, "Do not stop at end-of-sequence tokens");
  cmd->add_option("--logprobs", a->logprobs,
                  "After the text, print each generated token's log-probability and its position's N most likely "
                  "tokens (0-20) on stderr")
      ->check(CLI::Range(0, kMaxTopLogprobs));
  auto* schema = cmd->add_option("--json-schema", a->json_schema,
                                 "Constrain the output to JSON valid under this JSON Schema (text, or @FILE)");
  cmd->add_flag("--json", a->json_object, "Constrain the output to a JSON object")->excludes(schema);
  auto* cache = cmd->add_option("--prompt-cache", a->prompt_cache,
                                 "Keep the KV cache in this file: a later run whose prompt starts the same way "
                                 "prefills only the rest (written after the run; made on the first)");
  cmd->add_flag("--prompt-cache-ro", a->prompt_cache_ro, "Read --prompt-cache but do not update it")->needs(cache);
  a->sampling.add_to(cmd);
  cmd->callback([a] { run_generate(*a); });
}

}  // namespace megaqwen::cli
