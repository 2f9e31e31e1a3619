#include "megaqwen/server/openai_protocol.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <random>

#include "megaqwen/server/api_error.h"
#include "megaqwen/util/error.h"

namespace megaqwen::server {

namespace {

constexpr size_t kMaxStopStrings = 16;
constexpr size_t kMaxMessages = 100000;
constexpr size_t kMaxTools = 256;
constexpr size_t kMaxLogitBias = 4096;
constexpr int kMaxTokensLimit = 1 << 30;

// ---- typed field access: null counts as absent; anything else must have the right type and range ----

const ordered_json* field(const ordered_json& object, const char* key) {
  auto it = object.find(key);
  return it == object.end() || it->is_null() ? nullptr : &*it;
}

std::optional<double> number_field(const ordered_json& object, const char* key, double lo, double hi,
                                   const std::string& path) {
  const ordered_json* v = field(object, key);
  if (!v) return std::nullopt;
  if (!v->is_number()) throw invalid_request(fmt::format("'{}' must be a number", path), path);
  const double x = v->get<double>();
  if (!std::isfinite(x) || x < lo || x > hi)
    throw invalid_request(fmt::format("'{}' must be between {} and {}", path, lo, hi), path);
  return x;
}

std::optional<int64_t> integer_field(const ordered_json& object, const char* key, int64_t lo, int64_t hi,
                                     const std::string& path) {
  const ordered_json* v = field(object, key);
  if (!v) return std::nullopt;
  if (!v->is_number_integer()) throw invalid_request(fmt::format("'{}' must be an integer", path), path);
  // Unsigned values above int64's range are out of every range here.
  if (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(INT64_MAX))
    throw invalid_request(fmt::format("'{}' must be between {} and {}", path, lo, hi), path);
  const int64_t x = v->get<int64_t>();
  if (x < lo || x > hi) throw invalid_request(fmt::format("'{}' must be between {} and {}", path, lo, hi), path);
  return x;
}

std::optional<bool> bool_field(const ordered_json& object, const char* key, const std::string& path) {
  const ordered_json* v = field(object, key);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) throw invalid_request(fmt::format("'{}' must be a boolean", path), path);
  return v->get<bool>();
}

std::optional<std::string> string_field(const ordered_json& object, const char* key, const std::string& path) {
  const ordered_json* v = field(object, key);
  if (!v) return std::nullopt;
  if (!v->is_string()) throw invalid_request(fmt::format("'{}' must be a string", path), path);
  return v->get<std::string>();
}

const ordered_json* object_field(const ordered_json& object, const char* key, const std::string& path) {
  const ordered_json* v = field(object, key);
  if (v && !v->is_object()) throw invalid_request(fmt::format("'{}' must be an object", path), path);
  return v;
}

const ordered_json* array_field(const ordered_json& object, const char* key, const std::string& path) {
  const ordered_json* v = field(object, key);
  if (v && !v->is_array()) throw invalid_request(fmt::format("'{}' must be an array", path), path);
  return v;
}

uint64_t fresh_seed() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return rng();
}

// An array of token ids, each valid for the model and its tokenizer.
std::vector<int32_t> token_ids(const ordered_json& array, const ModelLimits& model, const std::string& path) {
  std::vector<int32_t> ids;
  ids.reserve(array.size());
  for (const auto& id : array) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= model.vocab_size ||
        (id.is_number_unsigned() && id.get<uint64_t>() > uint64_t(INT32_MAX)))
      throw invalid_request(fmt::format("'{}' token ids must be integers from 0 to {}", path, model.vocab_size - 1),
                            path);
    ids.push_back(int32_t(id.get<int64_t>()));
  }
  return ids;
}

void check_model(const ordered_json& body, const ModelLimits& model) {
  std::optional<std::string> name = string_field(body, "model", "model");
  if (name && *name != model.id)
    throw invalid_request(fmt::format("unknown model '{}'; this server serves '{}'", *name, model.id), "model",
                          "model_not_found");
}

// response_format: {"type": "text"} (free text), {"type": "json_object"} (any JSON object; with a
// "schema" beside the type, llama.cpp's convention, that schema's JSON), or {"type": "json_schema",
// "json_schema": {"name", "schema", "strict"}}. A schema the grammar cannot honour is a 400 naming
// the keyword.
std::shared_ptr<const JsonGrammar> parse_response_format(const ordered_json& body) {
  const ordered_json* format = object_field(body, "response_format", "response_format");
  if (!format) return nullptr;
  const std::optional<std::string> type = string_field(*format, "type", "response_format.type");
  if (!type) throw invalid_request("'response_format.type' is required", "response_format.type");
  auto compile = [](const ordered_json& schema, const std::string& path) {
    try {
      return std::make_shared<const JsonGrammar>(JsonGrammar::from_schema(schema, path));
    } catch (const Error& e) {
      throw invalid_request(e.what(), path);
    }
  };
  if (*type == "text") return nullptr;
  if (*type == "json_object") {
    if (const ordered_json* schema = field(*format, "schema")) return compile(*schema, "response_format.schema");
    return std::make_shared<const JsonGrammar>(JsonGrammar::object());
  }
  if (*type == "json_schema") {
    const ordered_json* spec = object_field(*format, "json_schema", "response_format.json_schema");
    if (!spec)
      throw invalid_request("'response_format.json_schema' is required with type json_schema",
                            "response_format.json_schema");
    string_field(*spec, "name", "response_format.json_schema.name");
    bool_field(*spec, "strict", "response_format.json_schema.strict");
    const ordered_json* schema = field(*spec, "schema");
    if (!schema)
      throw invalid_request("'response_format.json_schema.schema' is required", "response_format.json_schema.schema");
    return compile(*schema, "response_format.json_schema.schema");
  }
  throw invalid_request("'response_format.type' must be text, json_object or json_schema", "response_format.type");
}

// The options shared by /v1/chat/completions and /v1/completions.
// min_max_tokens: 0 where a request may generate nothing (completions scoring an echoed prompt).
GenerationOptions parse_generation_options(const ordered_json& body, const ModelLimits& model,
                                           const char* max_tokens_key, int min_max_tokens = 1) {
  GenerationOptions o;
  SamplingParams& s = o.sampling;
  s = model.defaults;
  if (auto v = number_field(body, "temperature", 0, 2, "temperature")) s.temperature = float(*v);
  if (auto v = number_field(body, "top_p", 0, 1, "top_p")) {
    if (*v == 0) throw invalid_request("'top_p' must be greater than 0", "top_p");
    s.top_p = float(*v);
  }
  // vLLM's convention: -1 turns top-k off, as 0 does here.
  if (auto v = integer_field(body, "top_k", -1, kMaxTokensLimit, "top_k")) s.top_k = *v < 0 ? 0 : int(*v);
  if (auto v = number_field(body, "min_p", 0, 1, "min_p")) s.min_p = float(*v);
  if (auto v = number_field(body, "presence_penalty", -2, 2, "presence_penalty")) s.presence_penalty = float(*v);
  if (auto v = number_field(body, "frequency_penalty", -2, 2, "frequency_penalty")) s.frequency_penalty = float(*v);
  if (auto v = number_field(body, "repetition_penalty", 0, 10, "repetition_penalty")) {
    if (*v == 0) throw invalid_request("'repetition_penalty' must be greater than 0", "repetition_penalty");
    s.repetition_penalty = float(*v);
  }
  // Any 64-bit integer is a seed; without one each request draws its own.
  if (const ordered_json* seed = field(body, "seed")) {
    if (!seed->is_number_integer()) throw invalid_request("'seed' must be an integer", "seed");
    s.seed = seed->is_number_unsigned() ? seed->get<uint64_t>() : uint64_t(seed->get<int64_t>());
  } else {
    s.seed = fresh_seed();
  }

  // max_completion_tokens is the newer name of max_tokens in the chat API; it wins when both are given.
  std::optional<int64_t> max_tokens = integer_field(body, "max_tokens", min_max_tokens, kMaxTokensLimit, "max_tokens");
  if (max_tokens_key)
    if (auto v = integer_field(body, max_tokens_key, min_max_tokens, kMaxTokensLimit, max_tokens_key)) max_tokens = v;
  if (max_tokens) o.max_tokens = int(*max_tokens);

  if (const ordered_json* stop = field(body, "stop")) {
    if (stop->is_string()) {
      o.stop.push_back(stop->get<std::string>());
    } else if (stop->is_array()) {
      if (stop->size() > kMaxStopStrings)
        throw invalid_request(fmt::format("'stop' takes at most {} strings", kMaxStopStrings), "stop");
      for (const auto& s : *stop) {
        if (!s.is_string()) throw invalid_request("'stop' must be a string or an array of strings", "stop");
        o.stop.push_back(s.get<std::string>());
      }
    } else {
      throw invalid_request("'stop' must be a string or an array of strings", "stop");
    }
    for (const auto& s : o.stop)
      if (s.empty()) throw invalid_request("'stop' strings must not be empty", "stop");
  }

  o.tokens_as_ids = bool_field(body, "return_tokens_as_token_ids", "return_tokens_as_token_ids").value_or(false);
  o.stream = bool_field(body, "stream", "stream").value_or(false);
  if (const ordered_json* so = object_field(body, "stream_options", "stream_options"))
    o.include_usage = bool_field(*so, "include_usage", "stream_options.include_usage").value_or(false);

  if (const ordered_json* bias = object_field(body, "logit_bias", "logit_bias")) {
    if (bias->size() > kMaxLogitBias)
      throw invalid_request(fmt::format("'logit_bias' takes at most {} tokens", kMaxLogitBias), "logit_bias");
    for (const auto& [key, value] : bias->items()) {
      // The keys are token ids written as JSON strings (OpenAI's form): decimal digits only.
      int64_t id = -1;
      if (!key.empty() && key.size() <= 10 && key.find_first_not_of("0123456789") == std::string::npos)
        id = std::stoll(key);
      if (id < 0 || id >= model.vocab_size)
        throw invalid_request(fmt::format("'logit_bias' keys must be token ids from 0 to {}; got '{}'",
                                          model.vocab_size - 1, key),
                              "logit_bias");
      const std::string path = "logit_bias." + key;
      if (!value.is_number()) throw invalid_request(fmt::format("'{}' must be a number", path), path);
      const double b = value.get<double>();
      if (!std::isfinite(b) || b < -100 || b > 100)
        throw invalid_request(fmt::format("'{}' must be between -100 and 100", path), path);
      o.logit_bias.push_back({int32_t(id), float(b)});
    }
  }

  if (auto n = integer_field(body, "n", 1, kMaxChoices, "n")) o.n = int(*n);
  o.json_grammar = parse_response_format(body);
  return o;
}

// OpenAI content: a string, or an array of parts of which only text parts are supported here.
ordered_json normalize_content(const ordered_json& content, const std::string& path) {
  if (content.is_null() || content.is_string()) return content;
  if (!content.is_array()) throw invalid_request(fmt::format("'{}' must be a string or an array of parts", path), path);
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const auto& part = content[i];
    const std::string p = fmt::format("{}[{}]", path, i);
    if (!part.is_object()) throw invalid_request(fmt::format("'{}' must be an object", p), p);
    if (string_field(part, "type", p + ".type").value_or("") != "text")
      throw invalid_request(fmt::format("'{}': only text content parts are supported", p), p + ".type");
    std::optional<std::string> t = string_field(part, "text", p + ".text");
    if (!t) throw invalid_request(fmt::format("'{}.text' is required", p), p + ".text");
    if (!text.empty()) text += '\n';
    text += *t;
  }
  return text;
}

ordered_json normalize_tool_call(const ordered_json& call, const std::string& path, bool arguments_as_objects) {
  if (!call.is_object()) throw invalid_request(fmt::format("'{}' must be an object", path), path);
  const ordered_json* fn = object_field(call, "function", path + ".function");
  if (!fn) throw invalid_request(fmt::format("'{}.function' is required", path), path + ".function");
  std::optional<std::string> name = string_field(*fn, "name", path + ".function.name");
  if (!name || name->empty())
    throw invalid_request(fmt::format("'{}.function.name' must be a non-empty string", path), path + ".function.name");
  ordered_json out = {{"type", "function"}, {"function", {{"name", *name}}}};
  if (auto id = string_field(call, "id", path + ".id")) out["id"] = *id;
  const std::string arg_path = path + ".function.arguments";
  if (const ordered_json* args = field(*fn, "arguments")) {
    ordered_json arguments = *args;
    if (arguments.is_string() && arguments_as_objects) {
      arguments = ordered_json::parse(args->get<std::string>(), nullptr, false);
      if (!arguments.is_object())
        throw invalid_request(fmt::format("'{}' must be a JSON object (as text)", arg_path), arg_path);
    } else if (!arguments.is_string() && !arguments.is_object()) {
      throw invalid_request(fmt::format("'{}' must be a string of JSON or an object", arg_path), arg_path);
    }
    out["function"]["arguments"] = std::move(arguments);
  } else {
    out["function"]["arguments"] = arguments_as_objects ? ordered_json::object() : ordered_json("{}");
  }
  return out;
}

// A message as the chat templates read it (chat_request.h): roles checked, "developer" read as
// "system", content flattened to text, tool-call arguments in the form the template wants.
ordered_json normalize_message(const ordered_json& m, size_t index, bool arguments_as_objects) {
  const std::string path = fmt::format("messages[{}]", index);
  if (!m.is_object()) throw invalid_request(fmt::format("'{}' must be an object", path), path);
  std::optional<std::string> role = string_field(m, "role", path + ".role");
  if (!role) throw invalid_request(fmt::format("'{}.role' is required", path), path + ".role");
  if (*role == "developer") role = "system";
  if (*role != "system" && *role != "user" && *role != "assistant" && *role != "tool")
    throw invalid_request(fmt::format("'{}.role' must be system, developer, user, assistant or tool", path),
                          path + ".role");
  ordered_json out = {{"role", *role}};
  out["content"] = normalize_content(m.contains("content") ? m["content"] : ordered_json(), path + ".content");
  if (*role != "assistant" && out["content"].is_null())
    throw invalid_request(fmt::format("'{}.content' is required", path), path + ".content");
  if (auto r = string_field(m, "reasoning_content", path + ".reasoning_content")) out["reasoning_content"] = *r;
  if (auto id = string_field(m, "tool_call_id", path + ".tool_call_id")) out["tool_call_id"] = *id;
  if (auto name = string_field(m, "name", path + ".name")) out["name"] = *name;
  if (const ordered_json* calls = array_field(m, "tool_calls", path + ".tool_calls")) {
    if (*role != "assistant")
      throw invalid_request(fmt::format("'{}.tool_calls' is only allowed on assistant messages", path),
                            path + ".tool_calls");
    ordered_json list = ordered_json::array();
    for (size_t i = 0; i < calls->size(); ++i)
      list.push_back(normalize_tool_call((*calls)[i], fmt::format("{}.tool_calls[{}]", path, i), arguments_as_objects));
    out["tool_calls"] = std::move(list);
  }
  return out;
}

ordered_json check_tool(const ordered_json& tool, size_t index) {
  const std::string path = fmt::format("tools[{}]", index);
  if (!tool.is_object()) throw invalid_request(fmt::format("'{}' must be an object", path), path);
  if (string_field(tool, "type", path + ".type").value_or("function") != "function")
    throw invalid_request(fmt::format("'{}.type' must be \"function\"", path), path + ".type");
  const ordered_json* fn = object_field(tool, "function", path + ".function");
  if (!fn) throw invalid_request(fmt::format("'{}.function' is required", path), path + ".function");
  std::optional<std::string> name = string_field(*fn, "name", path + ".function.name");
  if (!name || name->empty())
    throw invalid_request(fmt::format("'{}.function.name' must be a non-empty string", path), path + ".function.name");
  string_field(*fn, "description", path + ".function.description");
  object_field(*fn, "parameters", path + ".function.parameters");
  return tool;
}

// Bounds a body's shape before it is parsed: nesting deeper than kMaxDepth would recurse deeply in
// the code that walks it, and ordered_json inserts object keys by linear search, so a huge object
// would cost quadratic time. Scans the raw text once, skipping strings.
constexpr size_t kMaxDepth = 64;
constexpr size_t kMaxObjectMembers = 1024;

void check_json_shape(std::string_view text) {
  struct Level {
    bool object;
    size_t members;
  };
  std::vector<Level> stack;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '"') {
      for (++i; i < text.size() && text[i] != '"'; ++i)
        if (text[i] == '\\') ++i;
    } else if (c == '{' || c == '[') {
      if (stack.size() >= kMaxDepth)
        throw invalid_request(fmt::format("the body nests JSON deeper than {} levels", kMaxDepth));
      stack.push_back({c == '{', 1});
    } else if (c == '}' || c == ']') {
      if (!stack.empty()) stack.pop_back();
    } else if (c == ',' && !stack.empty() && stack.back().object && ++stack.back().members > kMaxObjectMembers) {
      throw invalid_request(fmt::format("the body has a JSON object with more than {} members", kMaxObjectMembers));
    }
  }
}

}  // namespace

std::string json_text(const ordered_json& j) {
  // Generated text may hold invalid UTF-8 (a model can emit any bytes): replace, never throw.
  return j.dump(-1, ' ', false, ordered_json::error_handler_t::replace);
}

ordered_json parse_json_body(std::string_view body) {
  check_json_shape(body);
  ordered_json j;
  try {
    j = ordered_json::parse(body);
  } catch (const ordered_json::exception& e) {
    // nlohmann's message names the byte offset and the problem (also for invalid UTF-8, and for
    // numbers too large for a double, which are out_of_range rather than parse errors).
    throw invalid_request(fmt::format("the body is not valid JSON: {}", e.what()));
  }
  if (!j.is_object()) throw invalid_request("the body must be a JSON object");
  return j;
}

ChatCompletionRequest parse_chat_completion_request(const ordered_json& body, const ModelLimits& model,
                                                    bool tool_arguments_as_objects) {
  check_model(body, model);
  ChatCompletionRequest r;
  r.options = parse_generation_options(body, model, "max_completion_tokens");
  // logprobs: true turns them on; top_logprobs asks for alternatives and needs it (as OpenAI has it).
  const bool logprobs = bool_field(body, "logprobs", "logprobs").value_or(false);
  const std::optional<int64_t> top = integer_field(body, "top_logprobs", 0, kMaxTopLogprobs, "top_logprobs");
  if (top && !logprobs) throw invalid_request("'top_logprobs' needs 'logprobs': true", "top_logprobs");
  if (logprobs) r.options.logprobs = int(top.value_or(0));

  const ordered_json* messages = array_field(body, "messages", "messages");
  if (!messages || messages->empty()) throw invalid_request("'messages' must be a non-empty array", "messages");
  if (messages->size() > kMaxMessages) throw invalid_request("too many messages", "messages");
  for (size_t i = 0; i < messages->size(); ++i)
    r.messages.push_back(normalize_message((*messages)[i], i, tool_arguments_as_objects));

  // The deprecated function-calling fields would otherwise be dropped without a word.
  for (const char* legacy : {"functions", "function_call"})
    if (field(body, legacy))
      throw invalid_request(fmt::format("'{}' is OpenAI's deprecated form of function calling; send 'tools' and "
                                        "'tool_choice' instead",
                                        legacy),
                            legacy);
  if (const ordered_json* tools = array_field(body, "tools", "tools")) {
    if (tools->size() > kMaxTools) throw invalid_request(fmt::format("at most {} tools", kMaxTools), "tools");
    for (size_t i = 0; i < tools->size(); ++i) r.tools.push_back(check_tool((*tools)[i], i));
  }
  r.tool_choice = r.tools.empty() ? ToolChoice::None : ToolChoice::Auto;
  if (const ordered_json* choice = field(body, "tool_choice")) {
    if (choice->is_string()) {
      const std::string c = choice->get<std::string>();
      if (c == "none") r.tool_choice = ToolChoice::None;
      else if (c == "auto") r.tool_choice = r.tools.empty() ? ToolChoice::None : ToolChoice::Auto;
      else if (c == "required") r.tool_choice = ToolChoice::Required;
      else throw invalid_request("'tool_choice' must be none, auto, required or a function", "tool_choice");
    } else if (choice->is_object()) {
      const ordered_json* fn = object_field(*choice, "function", "tool_choice.function");
      std::optional<std::string> name = fn ? string_field(*fn, "name", "tool_choice.function.name") : std::nullopt;
      if (!name) throw invalid_request("'tool_choice.function.name' is required", "tool_choice");
      r.tool_choice = ToolChoice::Function;
      r.forced_function = *name;
    } else {
      throw invalid_request("'tool_choice' must be a string or an object", "tool_choice");
    }
    if ((r.tool_choice == ToolChoice::Required || r.tool_choice == ToolChoice::Function) && r.tools.empty())
      throw invalid_request("'tool_choice' requires 'tools'", "tool_choice");
    if (r.tool_choice == ToolChoice::Function) {
      bool known = false;
      for (const auto& t : r.tools) known = known || t["function"]["name"] == r.forced_function;
      if (!known)
        throw invalid_request(fmt::format("'tool_choice' names '{}', which is not among the tools", r.forced_function),
                              "tool_choice");
    }
  }

  if (r.options.json_grammar && (r.tool_choice == ToolChoice::Required || r.tool_choice == ToolChoice::Function))
    throw invalid_request("a response_format of JSON and a tool_choice that forces a call exclude each other",
                          "response_format");
  r.parallel_tool_calls = bool_field(body, "parallel_tool_calls", "parallel_tool_calls").value_or(true);
  if (const ordered_json* kwargs = object_field(body, "chat_template_kwargs", "chat_template_kwargs"))
    r.enable_thinking = bool_field(*kwargs, "enable_thinking", "chat_template_kwargs.enable_thinking");
  return r;
}

CompletionRequest parse_completion_request(const ordered_json& body, const ModelLimits& model) {
  check_model(body, model);
  CompletionRequest r;
  r.options = parse_generation_options(body, model, nullptr, 0);
  r.echo = bool_field(body, "echo", "echo").value_or(false);
  if (auto lp = integer_field(body, "logprobs", 0, kMaxTopLogprobs, "logprobs")) r.options.logprobs = int(*lp);
  r.options.prompt_logprobs = r.echo && r.options.logprobs;
  // Generating nothing only makes sense when the prompt comes back (scored, with logprobs).
  if (r.options.max_tokens == 0 && !r.echo)
    throw invalid_request("'max_tokens' must be at least 1 (0 only with 'echo': true)", "max_tokens");
  if (auto best_of = integer_field(body, "best_of", 1, kMaxChoices, "best_of")) {
    r.best_of = int(*best_of);
    if (r.best_of < r.options.n)
      throw invalid_request(fmt::format("'best_of' ({}) must be at least 'n' ({})", r.best_of, r.options.n), "best_of");
    if (r.best_of > 1 && r.options.stream)
      throw invalid_request("best_of > 1 cannot be streamed (the best are known only at the end)", "best_of");
  }
  if (auto suffix = string_field(body, "suffix", "suffix"); suffix && !suffix->empty())
    throw invalid_request("suffix is not supported", "suffix");

  const ordered_json* prompt = field(body, "prompt");
  if (!prompt) throw invalid_request("'prompt' is required", "prompt");
  const auto one_prompt = [&](const ordered_json& p, const std::string& path) {
    CompletionPrompt c;
    if (p.is_string()) {
      c.text = p.get<std::string>();
      if (c.text->empty()) throw invalid_request(fmt::format("'{}' must not be empty", path), path);
    } else if (p.is_array() && !p.empty()) {
      c.ids = token_ids(p, model, path);
    } else {
      throw invalid_request(fmt::format("'{}' must be a non-empty string or array of token ids", path), path);
    }
    return c;
  };
  // A string or an array of ids is one prompt; an array of those is a batch.
  const bool batch = prompt->is_array() && !prompt->empty() && ((*prompt)[0].is_string() || (*prompt)[0].is_array());
  if (!batch) {
    r.prompts.push_back(one_prompt(*prompt, "prompt"));
  } else {
    for (size_t i = 0; i < prompt->size(); ++i) {
      const ordered_json& p = (*prompt)[i];
      const std::string path = fmt::format("prompt[{}]", i);
      if (!p.is_string() && !p.is_array())
        throw invalid_request(fmt::format("'{}' must be a string or array of token ids, as the batch's first", path),
                              path);
      r.prompts.push_back(one_prompt(p, path));
    }
  }
  if (r.generations() > kMaxChoices)
    throw invalid_request(fmt::format("{} prompts x {} generations each is more than the {} generations a request "
                                      "may ask for",
                                      r.prompts.size(), std::max(r.best_of, r.options.n), kMaxChoices),
                          r.prompts.size() > 1 ? "prompt" : r.best_of > 1 ? "best_of" : "n");
  return r;
}

TokenizeRequest parse_tokenize_request(const ordered_json& body, const ModelLimits& model,
                                       bool tool_arguments_as_objects) {
  check_model(body, model);
  TokenizeRequest r;
  r.token_strs = bool_field(body, "return_token_strs", "return_token_strs").value_or(false);
  r.add_generation_prompt = bool_field(body, "add_generation_prompt", "add_generation_prompt").value_or(true);
  // Qwen's tokenizers add no BOS or EOS, so add_special_tokens changes nothing; its type is still checked.
  bool_field(body, "add_special_tokens", "add_special_tokens");
  std::optional<std::string> prompt = string_field(body, "prompt", "prompt");
  std::optional<std::string> content = string_field(body, "content", "content");
  const bool chat = field(body, "messages") != nullptr;
  const int given = int(prompt.has_value()) + int(content.has_value()) + int(chat);
  if (given == 0) throw invalid_request("'prompt' (a text) or 'messages' (a chat) is required", "prompt");
  if (given > 1)
    throw invalid_request("give one of 'prompt', 'content' (llama.cpp's name for it) and 'messages'", "prompt");
  if (chat) r.chat = parse_chat_completion_request(body, model, tool_arguments_as_objects);
  else r.text = prompt ? std::move(prompt) : std::move(content);
  return r;
}

std::vector<int32_t> parse_detokenize_request(const ordered_json& body, const ModelLimits& model) {
  check_model(body, model);
  const ordered_json* tokens = array_field(body, "tokens", "tokens");
  if (!tokens) throw invalid_request("'tokens' (an array of token ids) is required", "tokens");
  return token_ids(*tokens, model, "tokens");
}

ordered_json tokenize_json(std::span<const int32_t> tokens, int context_size,
                           const std::vector<std::string>* token_strs) {
  ordered_json j = {{"count", tokens.size()}, {"max_model_len", context_size},
                    {"tokens", std::vector<int32_t>(tokens.begin(), tokens.end())}};
  j["token_strs"] = token_strs ? ordered_json(*token_strs) : ordered_json(nullptr);
  return j;
}

ordered_json detokenize_json(const std::string& text) { return {{"prompt", text}, {"content", text}}; }

ordered_json usage_json(const Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

std::string finish_reason(FinishReason reason, bool has_tool_calls) {
  switch (reason) {
    case FinishReason::Eos:
    case FinishReason::StopString: return has_tool_calls ? "tool_calls" : "stop";
    case FinishReason::Length:
    case FinishReason::ContextFull:
    case FinishReason::Cancelled: return "length";
  }
  return "stop";
}

ordered_json tool_calls_json(const std::vector<ParsedToolCall>& calls, size_t first_index) {
  ordered_json list = ordered_json::array();
  for (size_t i = 0; i < calls.size(); ++i)
    list.push_back({{"index", first_index + i},
                    {"id", make_tool_call_id()},
                    {"type", "function"},
                    {"function", {{"name", calls[i].name}, {"arguments", calls[i].arguments}}}});
  return list;
}

ResponseHeader new_response_header(std::string_view id_prefix, const std::string& model) {
  static constexpr char kHex[] = "0123456789abcdef";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::string id(id_prefix);
  id += '-';
  for (int i = 0; i < 24; ++i) id += kHex[rng() % 16];
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  return {id, std::chrono::duration_cast<std::chrono::seconds>(now).count(), model};
}

namespace {

ordered_json byte_list(std::string_view bytes) {
  ordered_json list = ordered_json::array();
  for (char c : bytes) list.push_back(int(static_cast<unsigned char>(c)));
  return list;
}

// Characters in `bytes`: every byte but UTF-8 continuation bytes (a character split across tokens
// counts once, with its first byte).
size_t character_count(std::string_view bytes) {
  size_t n = 0;
  for (char c : bytes) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

}  // namespace

std::string TokenNames::name(int32_t id) const {
  return as_ids ? fmt::format("token_id:{}", id) : std::string(bytes(id));
}

ordered_json chat_logprobs_json(std::span<const TokenLogprob> entries, const TokenNames& names) {
  ordered_json content = ordered_json::array();
  for (const TokenLogprob& e : entries) {
    ordered_json top = ordered_json::array();
    for (const TopLogprob& t : e.top)
      top.push_back({{"token", names.name(t.token)}, {"logprob", t.logprob}, {"bytes", byte_list(names.bytes(t.token))}});
    content.push_back({{"token", names.name(e.token)},
                       {"logprob", e.logprob},
                       {"bytes", byte_list(names.bytes(e.token))},
                       {"top_logprobs", std::move(top)}});
  }
  return {{"content", std::move(content)}, {"refusal", nullptr}};
}

ordered_json completion_logprobs_json(std::optional<int32_t> unscored, std::span<const TokenLogprob> entries,
                                      const TokenNames& names, size_t& offset) {
  ordered_json tokens = ordered_json::array(), logprobs = ordered_json::array(), tops = ordered_json::array(),
               offsets = ordered_json::array();
  auto place = [&](int32_t token) {
    tokens.push_back(names.name(token));
    offsets.push_back(offset);
    offset += character_count(names.bytes(token));
  };
  if (unscored) {
    place(*unscored);
    logprobs.push_back(nullptr);
    tops.push_back(nullptr);
  }
  for (const TokenLogprob& e : entries) {
    place(e.token);
    logprobs.push_back(e.logprob);
    ordered_json top = ordered_json::object();
    for (const TopLogprob& t : e.top) top[names.name(t.token)] = t.logprob;
    top[names.name(e.token)] = e.logprob;
    tops.push_back(std::move(top));
  }
  return {{"tokens", std::move(tokens)},
          {"token_logprobs", std::move(logprobs)},
          {"top_logprobs", std::move(tops)},
          {"text_offset", std::move(offsets)}};
}

ordered_json chat_choice_json(size_t index, const ReplyDelta& reply, const std::string& finish,
                              ordered_json logprobs) {
  ordered_json message = {{"role", "assistant"}};
  // With tool calls and no text besides, content is null as OpenAI returns it.
  std::string content = reply.content;
  if (!reply.tool_calls.empty()) content.erase(content.find_last_not_of(" \n") + 1);
  message["content"] = content.empty() && !reply.tool_calls.empty() ? ordered_json() : ordered_json(content);
  message["reasoning_content"] = reply.reasoning.empty() ? ordered_json() : ordered_json(reply.reasoning);
  if (!reply.tool_calls.empty()) {
    message["tool_calls"] = tool_calls_json(reply.tool_calls, 0);
    for (auto& call : message["tool_calls"]) call.erase("index");  // "index" belongs to stream deltas only
  }
  return {{"index", index},
          {"message", std::move(message)},
          {"logprobs", std::move(logprobs)},
          {"finish_reason", finish}};
}

ordered_json chat_completion_json(const ResponseHeader& h, ordered_json choices, const Usage& usage) {
  return {{"id", h.id},
          {"object", "chat.completion"},
          {"created", h.created},
          {"model", h.model},
          {"choices", std::move(choices)},
          {"usage", usage_json(usage)}};
}

ordered_json chat_chunk_json(const ResponseHeader& h, size_t index, ordered_json delta,
                             const std::optional<std::string>& finish, bool usage_null, ordered_json logprobs) {
  ordered_json chunk = {{"id", h.id},
                        {"object", "chat.completion.chunk"},
                        {"created", h.created},
                        {"model", h.model},
                        {"choices", ordered_json::array({{{"index", index},
                                                          {"delta", std::move(delta)},
                                                          {"logprobs", std::move(logprobs)},
                                                          {"finish_reason", finish ? ordered_json(*finish) : ordered_json()}}})}};
  if (usage_null) chunk["usage"] = nullptr;
  return chunk;
}

ordered_json usage_chunk_json(const ResponseHeader& h, std::string_view object, const Usage& usage) {
  return {{"id", h.id},           {"object", object},
          {"created", h.created}, {"model", h.model},
          {"choices", ordered_json::array()}, {"usage", usage_json(usage)}};
}

ordered_json completion_choice_json(size_t index, const std::string& text, const std::string& finish,
                                    ordered_json logprobs) {
  return {{"index", index}, {"text", text}, {"logprobs", std::move(logprobs)}, {"finish_reason", finish}};
}

ordered_json completion_json(const ResponseHeader& h, ordered_json choices, const Usage& usage) {
  return {{"id", h.id},
          {"object", "text_completion"},
          {"created", h.created},
          {"model", h.model},
          {"choices", std::move(choices)},
          {"usage", usage_json(usage)}};
}

ordered_json completion_chunk_json(const ResponseHeader& h, size_t index, const std::string& text,
                                   const std::optional<std::string>& finish, bool usage_null, ordered_json logprobs) {
  ordered_json chunk = {{"id", h.id},
                        {"object", "text_completion"},
                        {"created", h.created},
                        {"model", h.model},
                        {"choices", ordered_json::array({{{"index", index},
                                                          {"text", text},
                                                          {"logprobs", std::move(logprobs)},
                                                          {"finish_reason", finish ? ordered_json(*finish) : ordered_json()}}})}};
  if (usage_null) chunk["usage"] = nullptr;
  return chunk;
}

ordered_json models_json(const std::string& model_id, int64_t created, int context_size) {
  return {{"object", "list"},
          {"data", ordered_json::array({{{"id", model_id}, {"object", "model"}, {"created", created},
                                         {"owned_by", "megaqwen"}, {"max_model_len", context_size}}})}};
}

std::string sse_event(const ordered_json& payload) { return "data: " + json_text(payload) + "\n\n"; }

}  // namespace megaqwen::server
