#include "cli/common_options.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "megaqwen/util/error.h"

namespace megaqwen::cli {

void ModelArgs::add_to(CLI::App* cmd, bool with_engine) {
  cmd->add_option("-m,--model", model, "Model folder or Hugging Face id in the local cache")->required();
  cmd->add_option("--rope-scaling", rope_scaling,
                  "RoPE scaling as JSON, replacing config.json's, e.g. "
                  "'{\"rope_type\": \"yarn\", \"factor\": 4, \"original_max_position_embeddings\": 32768}' "
                  "to run Qwen3 past 32k positions");
  if (!with_engine) return;
  cmd->add_option("-d,--device", engine.device, "auto, cpu or cuda")->capture_default_str();
  // CLI::Range over int, not CLI::NonNegativeNumber: that one's error message prints DBL_MAX in full.
  const CLI::Range non_negative(0, std::numeric_limits<int>::max());
  cmd->add_option("-c,--ctx", engine.context, "Context size in tokens (0: engine default)")->check(non_negative);
  cmd->add_option("-t,--threads", engine.threads, "CPU threads (0: all)")->check(non_negative);
  cmd->add_flag("--amx-prefill", engine.amx_prefill,
                "CPU: prefill's matrix products on the AMX tile units of Xeons since Sapphire Rapids (the input "
                "split into two bf16 parts, as the CUDA prefill does): faster prefill, results within ~1e-5 of "
                "the fp32 reference");
  cmd->add_flag("--no-huge-pages{false}", engine.huge_pages,
                "CPU: leave the weights in the file's map as the kernel maps it and the KV cache in plain memory; "
                "by default both are put in transparent huge pages (for the weights the page cache's own, or a "
                "copy where it has none): decode ~25% faster");
  cmd->add_option("--decode-kernel", engine.decode_kernel,
                  "CUDA decode: auto (the megakernel where a compiled Qwen3 shape and an sm_90 GPU allow it), "
                  "megakernel or per-op")
      ->check(CLI::IsMember({"auto", "megakernel", "per-op"}))
      ->envname("MEGAQWEN_DECODE")
      ->capture_default_str();
}

void SamplingArgs::add_to(CLI::App* cmd) {
  cmd->add_option("--temp", temperature, "Temperature (0: greedy); default from generation_config.json");
  cmd->add_option("--top-k", top_k, "Keep the k most likely tokens (0: off)");
  cmd->add_option("--top-p", top_p, "Nucleus sampling mass (1: off)");
  cmd->add_option("--min-p", min_p, "Drop tokens below min_p x the top probability (0: off)");
  cmd->add_option("--repeat-penalty", repetition_penalty, "Repetition penalty (1: off)");
  cmd->add_option("--presence-penalty", presence_penalty, "Presence penalty (0: off)");
  cmd->add_option("--frequency-penalty", frequency_penalty, "Frequency penalty (0: off)");
  cmd->add_option("-s,--seed", seed, "Random seed")->capture_default_str();
  cmd->add_flag("--greedy", greedy, "Greedy decoding (same as --temp 0)");
}

SamplingParams SamplingArgs::resolve(const SamplingParams& defaults) const {
  SamplingParams p = defaults;
  if (temperature) p.temperature = *temperature;
  if (top_k) p.top_k = *top_k;
  if (top_p) p.top_p = *top_p;
  if (min_p) p.min_p = *min_p;
  if (repetition_penalty) p.repetition_penalty = *repetition_penalty;
  if (presence_penalty) p.presence_penalty = *presence_penalty;
  if (frequency_penalty) p.frequency_penalty = *frequency_penalty;
  if (greedy) p.temperature = 0;
  p.seed = seed;
  p.validate();
  return p;
}

std::optional<Tokenizer> load_model_tokenizer(const std::filesystem::path& dir, bool required) {
  namespace fs = std::filesystem;
  const bool present = fs::exists(dir / "tokenizer.json") || fs::exists(dir / "vocab.json");
  if (!present) {
    if (required) fail("{} has no tokenizer (tokenizer.json, or vocab.json + merges.txt); give --ids instead", dir.string());
    return std::nullopt;
  }
  try {
    return Tokenizer::load(dir);
  } catch (const Error&) {
    if (required) throw;
    return std::nullopt;
  }
}

std::vector<int32_t> parse_token_ids(const std::string& text) {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i < text.size()) {
    if (text[i] == ' ' || text[i] == ',' || text[i] == '\t' || text[i] == '\n' || text[i] == '\r') {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < text.size() && !(text[j] == ' ' || text[j] == ',' || text[j] == '\t' || text[j] == '\n' || text[j] == '\r')) ++j;
    std::string word = text.substr(i, j - i);
    char* end = nullptr;
    errno = 0;
    long long v = std::strtoll(word.c_str(), &end, 10);
    if (end == word.c_str() || *end != '\0' || errno == ERANGE || v < INT32_MIN || v > INT32_MAX)
      fail("'{}' is not a token id", word);
    ids.push_back(int32_t(v));
    i = j;
  }
  return ids;
}

LogitBias parse_logit_bias(const std::string& spec, int32_t vocab_size) {
  const size_t sign = spec.find_first_of("+-");
  const auto malformed = [&] {
    fail("--logit-bias '{}' is not TOKEN_ID+BIAS or TOKEN_ID-BIAS (e.g. 15043+1, 15043-inf)", spec);
  };
  if (sign == 0 || sign == std::string::npos || sign + 1 == spec.size()) malformed();
  const std::string id_text = spec.substr(0, sign), bias_text = spec.substr(sign + 1);
  if (id_text.find_first_not_of("0123456789") != std::string::npos || id_text.size() > 10) malformed();
  const long long id = std::stoll(id_text);
  if (id >= vocab_size) fail("--logit-bias '{}': token id {} is out of range (vocabulary size {})", spec, id, vocab_size);
  float bias = 0;
  if (bias_text == "inf") {
    if (spec[sign] == '+') fail("--logit-bias '{}': only -inf (a ban) is infinite; give a finite bias to favour a token", spec);
    bias = std::numeric_limits<float>::infinity();
  } else {
    char* end = nullptr;
    errno = 0;
    bias = std::strtof(bias_text.c_str(), &end);
    // Digits and a point only: strtof would also take "nan", "inf" spelled otherwise, hex and exponents.
    if (end != bias_text.c_str() + bias_text.size() || errno == ERANGE || !std::isfinite(bias) ||
        bias_text.find_first_not_of("0123456789.") != std::string::npos)
      malformed();
  }
  return {int32_t(id), spec[sign] == '-' ? -bias : bias};
}

}  // namespace megaqwen::cli
