// The OpenAI API as megaqwen speaks it: request bodies checked field by field into plain structs, and
// the JSON of responses and stream chunks built from plain values. Pure functions, no HTTP and no
// engine, so every rule here is unit-tested directly (tests/server/openai_protocol_test.cpp).
//
// Every field the server reads is checked for type and range; a violation is an ApiError 400 naming
// the field. Fields it does not know are ignored, as OpenAI-compatible servers commonly do; fields it
// knows but cannot honour (suffix, image parts) are refused rather than silently dropped.
#pragma once

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "megaqwen/engine/generator.h"
#include "megaqwen/grammar/json_grammar.h"
#include "megaqwen/sampling/sampler.h"
#include "megaqwen/server/reply_parser.h"

namespace megaqwen::server {

using nlohmann::ordered_json;

// What request checking needs to know about the served model.
struct ModelLimits {
  std::string id;            // the name clients pass as "model"
  int context_size = 0;      // tokens
  int32_t vocab_size = 0;    // token ids must be below this
  SamplingParams defaults;   // generation_config.json: what a request does not set
};

// Options both endpoints share.
struct GenerationOptions {
  SamplingParams sampling;                 // defaults overridden by the request; a fresh seed if none given
  std::optional<int> max_tokens;           // nullopt: up to the end of the context
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;              // stream_options.include_usage
  // Log-probabilities of the generated tokens with this many alternatives (chat: logprobs +
  // top_logprobs; completions: logprobs); nullopt: none.
  std::optional<int> logprobs;
  bool prompt_logprobs = false;            // completions with echo and logprobs: score the prompt too
  bool tokens_as_ids = false;              // return_tokens_as_token_ids (vLLM): see TokenNames
  std::vector<LogitBias> logit_bias;       // OpenAI's logit_bias: token id -> bias in [-100, 100]
  // response_format json_object / json_schema: the JSON the reply must be; null: free text.
  std::shared_ptr<const JsonGrammar> json_grammar;
  // Choices to generate (OpenAI's n), one after another; choice i samples with seed + i, so a seeded
  // request gives the same n choices every time and they differ from one another.
  int n = 1;
};

// The most generations one request may ask for: choices (n), best_of candidates, times the prompts
// of a completions batch (the server also needs room for them all in its queue).
inline constexpr int kMaxChoices = 64;

enum class ToolChoice { None, Auto, Required, Function };

struct ChatCompletionRequest {
  GenerationOptions options;
  ordered_json messages = ordered_json::array();  // normalized for the chat template (see .cpp)
  std::vector<ordered_json> tools;
  ToolChoice tool_choice = ToolChoice::Auto;
  std::string forced_function;             // ToolChoice::Function: its name
  std::optional<bool> enable_thinking;     // chat_template_kwargs.enable_thinking
  bool parallel_tool_calls = true;         // false: the reply holds at most one call (generation ends after it)
};

// One prompt of a completions request: text, or token ids.
struct CompletionPrompt {
  std::optional<std::string> text;  // one of these two
  std::vector<int32_t> ids;
};

struct CompletionRequest {
  GenerationOptions options;
  bool echo = false;                       // the reply's text starts with the prompt
  std::vector<CompletionPrompt> prompts;   // one, or a batch: choice j of prompt p has index p * n + j
  // Candidates generated per prompt (best_of, at least n; not streamed): the n with the highest mean
  // token logprob are returned, best first.
  int best_of = 1;
  int generations() const { return int(prompts.size()) * std::max(best_of, options.n); }
};

// The body as a JSON object; 400 on bad JSON (which includes invalid UTF-8) or a non-object.
ordered_json parse_json_body(std::string_view body);

// tool_arguments_as_objects: the chat template wants tool-call arguments as objects (Qwen3.5), so
// the JSON strings OpenAI clients send are parsed (400 when they are not a JSON object).
ChatCompletionRequest parse_chat_completion_request(const ordered_json& body, const ModelLimits& model,
                                                    bool tool_arguments_as_objects);
CompletionRequest parse_completion_request(const ordered_json& body, const ModelLimits& model);

// POST /tokenize, in vLLM's shape: a text ("prompt", or llama.cpp's "content") or a chat ("messages"
// and the rest of a chat completion request: tools, tool_choice, chat_template_kwargs). A chat counts
// the tokens /v1/chat/completions would feed the model; add_generation_prompt false stops after the
// last message.
struct TokenizeRequest {
  std::optional<std::string> text;
  std::optional<ChatCompletionRequest> chat;
  bool add_generation_prompt = true;
  bool token_strs = false;  // return_token_strs: each token as the vocabulary spells it
};
TokenizeRequest parse_tokenize_request(const ordered_json& body, const ModelLimits& model,
                                       bool tool_arguments_as_objects);
// POST /detokenize: {"tokens": [ids]}.
std::vector<int32_t> parse_detokenize_request(const ordered_json& body, const ModelLimits& model);

// ---- responses ----

struct Usage {
  int prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
};
ordered_json usage_json(const Usage& usage);

// "stop", "length" or "tool_calls". A cancelled generation (the request timed out) ends as "length".
std::string finish_reason(FinishReason reason, bool has_tool_calls);

// [{"index", "id", "type": "function", "function": {"name", "arguments"}}, ...], numbered from first_index.
ordered_json tool_calls_json(const std::vector<ParsedToolCall>& calls, size_t first_index);

// Identity shared by a response and all its chunks.
struct ResponseHeader {
  std::string id;       // "chatcmpl-..." / "cmpl-..."
  int64_t created = 0;  // unix seconds
  std::string model;
};
ResponseHeader new_response_header(std::string_view id_prefix, const std::string& model);

// A token's raw bytes (Tokenizer::sampled_bytes). In JSON strings a piece of a UTF-8 character reads
// as U+FFFD; chat entries also carry the exact bytes.
using TokenBytes = std::function<std::string_view(int32_t)>;

// How logprob entries name tokens: by their text, or (vLLM's return_tokens_as_token_ids, for clients
// that work in ids) as "token_id:<id>". Text offsets count the text either way.
struct TokenNames {
  TokenBytes bytes;
  bool as_ids = false;
  std::string name(int32_t id) const;
};

// Chat's logprobs object: {"content": [{"token", "logprob", "bytes", "top_logprobs": [{"token",
// "logprob", "bytes"}, ...]}, ...], "refusal": null}.
ordered_json chat_logprobs_json(std::span<const TokenLogprob> entries, const TokenNames& names);

// The completions API's logprobs object: parallel lists "tokens", "token_logprobs", "top_logprobs"
// (token text -> logprob: the requested alternatives plus the chosen token, so up to top + 1 keys, as
// OpenAI returns them) and "text_offset" (where each token's text starts in the choice's text, in
// characters). `unscored`: a leading token without context (an echoed prompt's first), whose
// logprob and alternatives are null. `offset` is where the first token starts; it is advanced past
// every token, so a stream's chunks continue each other's offsets.
ordered_json completion_logprobs_json(std::optional<int32_t> unscored, std::span<const TokenLogprob> entries,
                                      const TokenNames& names, size_t& offset);

// One choice of a non-streamed chat completion; `logprobs` null or chat_logprobs_json.
ordered_json chat_choice_json(size_t index, const ReplyDelta& reply, const std::string& finish,
                              ordered_json logprobs = nullptr);
// The whole reply of a non-streamed chat completion: its choices (chat_choice_json, by index) and usage.
ordered_json chat_completion_json(const ResponseHeader& h, ordered_json choices, const Usage& usage);
// One streamed chunk of choice `index`; `delta` as OpenAI's delta object. usage_null adds "usage":
// null (include_usage).
ordered_json chat_chunk_json(const ResponseHeader& h, size_t index, ordered_json delta,
                             const std::optional<std::string>& finish, bool usage_null,
                             ordered_json logprobs = nullptr);
// The final usage-only chunk of a stream with include_usage (choices empty).
ordered_json usage_chunk_json(const ResponseHeader& h, std::string_view object, const Usage& usage);

ordered_json completion_choice_json(size_t index, const std::string& text, const std::string& finish,
                                    ordered_json logprobs = nullptr);
ordered_json completion_json(const ResponseHeader& h, ordered_json choices, const Usage& usage);
ordered_json completion_chunk_json(const ResponseHeader& h, size_t index, const std::string& text,
                                   const std::optional<std::string>& finish, bool usage_null,
                                   ordered_json logprobs = nullptr);

// GET /v1/models: the served model, with vLLM's max_model_len (the server's context: prompt and
// reply together), which clients such as Open WebUI read.
ordered_json models_json(const std::string& model_id, int64_t created, int context_size);

// /tokenize's answer: {"count", "max_model_len", "tokens", "token_strs"} (null unless asked for);
// llama.cpp's clients read "tokens" from it too.
ordered_json tokenize_json(std::span<const int32_t> tokens, int context_size,
                           const std::vector<std::string>* token_strs);
// /detokenize's answer: the text as vLLM ("prompt") and llama.cpp ("content") name it.
ordered_json detokenize_json(const std::string& text);

// Compact JSON text; invalid UTF-8 in strings (a model can emit any bytes) becomes U+FFFD.
std::string json_text(const ordered_json& j);

// Server-sent events: "data: <json>\n\n", and the stream's end marker.
std::string sse_event(const ordered_json& payload);
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

}  // namespace megaqwen::server
