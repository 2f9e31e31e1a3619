// libFuzzer target: arbitrary bytes as the body of a /v1/chat/completions, /v1/completions,
// /tokenize and /detokenize request. Parsing must either return a request within the documented
// ranges or throw ApiError (a 4xx the client sees); any other exception, crash, sanitizer report,
// leak or hang is a finding.
// The accepted requests' JSON replies are built too (invalid UTF-8 in echoed strings included).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string_view>

#include "megaqwen/server/api_error.h"
#include "megaqwen/server/openai_protocol.h"

namespace {

using namespace megaqwen::server;

const ModelLimits& limits() {
  static const ModelLimits l = [] {
    ModelLimits m;
    m.id = "fuzz";
    m.context_size = 4096;
    m.vocab_size = 1000;
    return m;
  }();
  return l;
}

void check_options(const GenerationOptions& o) {
  o.sampling.validate();  // what the engine would refuse must already have been a 400
  if (o.max_tokens && *o.max_tokens < 0) std::abort();
  if (o.n < 1 || o.n > megaqwen::server::kMaxChoices) std::abort();
  if (o.logprobs && (*o.logprobs < 0 || *o.logprobs > megaqwen::kMaxTopLogprobs)) std::abort();
  for (const auto& s : o.stop)
    if (s.empty()) std::abort();
  for (const auto& b : o.logit_bias)
    if (b.token < 0 || b.token >= limits().vocab_size || !(b.bias >= -100 && b.bias <= 100)) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  ordered_json body;
  try {
    body = parse_json_body(text);
  } catch (const ApiError& e) {
    if (e.status() != 400) std::abort();
    return 0;
  }
  for (bool objects : {false, true}) {
    try {
      const ChatCompletionRequest r = parse_chat_completion_request(body, limits(), objects);
      check_options(r.options);
      if (r.messages.empty()) std::abort();
      (void)json_text(r.messages);
    } catch (const ApiError& e) {
      if (e.status() != 400) std::abort();
    }
  }
  try {
    const CompletionRequest r = parse_completion_request(body, limits());
    check_options(r.options);
    if (r.prompts.empty() || r.generations() > kMaxChoices || (r.best_of > 1 && r.best_of < r.options.n))
      std::abort();
    if (r.best_of > 1 && r.options.stream) std::abort();
    for (const CompletionPrompt& p : r.prompts) {
      if (p.text.has_value() == !p.ids.empty() || (p.text && p.text->empty())) std::abort();
      for (int32_t id : p.ids)
        if (id < 0 || id >= limits().vocab_size) std::abort();
    }
    if (r.options.max_tokens == 0 && !r.echo) std::abort();
    if (r.options.prompt_logprobs && !(r.echo && r.options.logprobs)) std::abort();
    ResponseHeader h{"cmpl-fuzz", 0, "fuzz"};
    ordered_json choices = ordered_json::array();
    for (size_t i = 0; i < r.prompts.size(); ++i)
      choices.push_back(completion_choice_json(i, r.prompts[i].text.value_or(""), "stop"));
    (void)json_text(completion_json(h, std::move(choices), {1, 1, 0}));
  } catch (const ApiError& e) {
    if (e.status() != 400) std::abort();
  }
  try {
    const TokenizeRequest r = parse_tokenize_request(body, limits(), true);
    if (r.text.has_value() == r.chat.has_value()) std::abort();
    if (r.chat && r.chat->messages.empty()) std::abort();
    (void)json_text(tokenize_json({}, limits().context_size, nullptr));
  } catch (const ApiError& e) {
    if (e.status() != 400) std::abort();
  }
  try {
    for (int32_t id : parse_detokenize_request(body, limits()))
      if (id < 0 || id >= limits().vocab_size) std::abort();
  } catch (const ApiError& e) {
    if (e.status() != 400) std::abort();
  }
  return 0;
}
