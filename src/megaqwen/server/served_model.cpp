#include "megaqwen/server/served_model.h"

#include <fmt/format.h>

#include <algorithm>

#include "megaqwen/engine/stop_tokens.h"
#include "megaqwen/grammar/json_constraint.h"
#include "megaqwen/grammar/xml_tool_call_constraint.h"
#include "megaqwen/sampling/sampler.h"
#include "megaqwen/server/api_error.h"
#include "megaqwen/util/error.h"

namespace megaqwen::server {

namespace {

bool is_qwen35(const ServedModel& served) {
  return served.chat_template && served.chat_template->name() == "qwen3.5";
}

// The start of a tool call the reply must continue (tool_choice required or a named function), in
// the format the template taught the model.
std::string forced_tool_call_prefix(const ServedModel& served, const ChatCompletionRequest& r) {
  if (r.tool_choice != ToolChoice::Required && r.tool_choice != ToolChoice::Function) return "";
  const bool named = r.tool_choice == ToolChoice::Function;
  if (is_qwen35(served)) return named ? "<tool_call>\n<function=" + r.forced_function + ">\n" : "<tool_call>\n<function=";
  return "<tool_call>\n";  // the JSON of the call is constrained (tool_call_grammar)
}

// Points a $ref of a schema moved to `base` (a JSON pointer) at the same place as before.
void rebase_refs(nlohmann::ordered_json& schema, const std::string& base) {
  if (schema.is_object()) {
    for (auto& [key, value] : schema.items()) {
      if (key == "$ref" && value.is_string() && value.get<std::string>().rfind("#", 0) == 0)
        value = "#" + base + value.get<std::string>().substr(1);
      else
        rebase_refs(value, base);
    }
  } else if (schema.is_array()) {
    for (auto& value : schema) rebase_refs(value, base);
  }
}

// The JSON of a forced Qwen3 tool call: {"name": <one of the tools>, "arguments": <that tool's
// parameters>}. A tool whose parameters use keywords the grammar cannot honour gets any object as
// its arguments (the call stays well-formed; its arguments are the model's).
std::shared_ptr<const JsonGrammar> tool_call_grammar(const ChatCompletionRequest& r) {
  using nlohmann::ordered_json;
  ordered_json alternatives = ordered_json::array();
  for (const ordered_json& tool : r.tools) {
    const ordered_json& fn = tool.at("function");
    const std::string name = fn.at("name").get<std::string>();
    if (r.tool_choice == ToolChoice::Function && name != r.forced_function) continue;
    const size_t index = alternatives.size();
    ordered_json arguments = fn.contains("parameters") && !fn.at("parameters").is_null() ? fn.at("parameters")
                                                                                         : ordered_json::object();
    try {
      JsonGrammar::from_schema(arguments);
    } catch (const Error&) {
      arguments = {{"type", "object"}};
    }
    rebase_refs(arguments, "/anyOf/" + std::to_string(index) + "/properties/arguments");
    alternatives.push_back({{"type", "object"},
                            {"properties", {{"name", {{"const", name}}}, {"arguments", arguments}}},
                            {"required", {"name", "arguments"}},
                            {"additionalProperties", false}});
  }
  return std::make_shared<const JsonGrammar>(JsonGrammar::from_schema({{"anyOf", alternatives}}, "tool call"));
}

void check_fits(const ServedModel& served, size_t prompt_tokens) {
  // At least one token of room to generate.
  if (prompt_tokens >= size_t(served.limits.context_size))
    throw invalid_request(fmt::format("the prompt has {} tokens, but this server's context holds {} (prompt and "
                                      "reply together)",
                                      prompt_tokens, served.limits.context_size),
                          "messages", "context_length_exceeded");
}

}  // namespace

ServedModel ServedModel::load(std::shared_ptr<const Model> model, int context_size, std::string model_id) {
  ServedModel s{model, Tokenizer::load(model->dir), std::nullopt, {}, {}, nullptr};
  try {
    s.chat_template = ChatTemplate::load(model->dir);
  } catch (const Error&) {
    s.chat_template.reset();  // completions still work
  }
  GenerationDefaults defaults = load_generation_defaults(model->dir);
  if (model_id.empty()) model_id = std::filesystem::path(model->dir).filename().string();
  // Token ids must be valid for both the model's embedding and the tokenizer.
  s.limits = {model_id, context_size, std::min<int32_t>(s.tokenizer.vocab_size(), model->config.vocab_size),
              defaults.sampling};
  s.eos_ids = stop_token_ids(model->config, defaults, &s.tokenizer);
  s.token_trie = TokenTrie::of(s.tokenizer);
  return s;
}

bool ServedModel::wants_argument_objects() const { return is_qwen35(*this); }

namespace {

std::string render_chat(const ServedModel& served, const ChatCompletionRequest& r, bool add_generation_prompt) {
  if (!served.chat_template)
    throw invalid_request("this model folder has no chat template; use /v1/completions", "messages");
  nlohmann::ordered_json request = {{"messages", r.messages}, {"add_generation_prompt", add_generation_prompt}};
  // tool_choice "none" hides the tools, so the model has nothing to call.
  if (r.tool_choice != ToolChoice::None) request["tools"] = r.tools;
  if (r.enable_thinking) request["enable_thinking"] = *r.enable_thinking;
  try {
    return served.chat_template->render(request);
  } catch (const Error& e) {
    throw invalid_request(e.what(), "messages");
  }
}

// The chat prompt without the context check (/tokenize counts prompts of any length).
ChatPrompt render_chat_prompt(const ServedModel& served, const ChatCompletionRequest& r) {
  std::string text = render_chat(served, r, true);
  ChatPrompt prompt;
  const std::string opening = served.chat_template->generation_prompt(r.enable_thinking);
  const size_t open = opening.rfind("<think>");
  prompt.starts_in_thinking = open != std::string::npos && opening.find("</think>", open) == std::string::npos;
  prompt.may_think = opening.find("</think>") == std::string::npos;
  prompt.forced_prefix = forced_tool_call_prefix(served, r);
  prompt.single_tool_call = !r.parallel_tool_calls && r.tool_choice != ToolChoice::None;
  if (!prompt.forced_prefix.empty()) {
    // Where the tools' schemas cannot be written in the call's form, the call is left to the model.
    try {
      if (is_qwen35(served)) {
        const std::string name = r.tool_choice == ToolChoice::Function ? r.forced_function : "";
        prompt.xml_call_grammar =
            std::make_shared<const XmlToolCallGrammar>(XmlToolCallGrammar::from_tools(r.tools, name));
      } else {
        prompt.call_grammar = tool_call_grammar(r);
        prompt.call_suffix = "\n</tool_call>";
      }
    } catch (const Error&) {
      prompt.call_grammar.reset();
      prompt.xml_call_grammar.reset();
    }
  }
  if (!prompt.forced_prefix.empty()) {
    if (prompt.starts_in_thinking) text += "\n</think>\n\n";  // a forced call skips the thinking
    prompt.starts_in_thinking = prompt.may_think = false;
    text += prompt.forced_prefix;
  }
  prompt.tokens = served.tokenizer.encode(text);
  return prompt;
}

}  // namespace

ChatPrompt build_chat_prompt(const ServedModel& served, const ChatCompletionRequest& r) {
  ChatPrompt prompt = render_chat_prompt(served, r);
  check_fits(served, prompt.tokens.size());
  return prompt;
}

std::vector<int32_t> chat_prompt_tokens(const ServedModel& served, const ChatCompletionRequest& r,
                                        bool add_generation_prompt) {
  if (add_generation_prompt) return render_chat_prompt(served, r).tokens;
  return served.tokenizer.encode(render_chat(served, r, false));
}

std::vector<int32_t> build_completion_prompt(const ServedModel& served, const CompletionPrompt& p) {
  std::vector<int32_t> tokens = p.text ? served.tokenizer.encode(*p.text) : p.ids;
  if (tokens.empty()) throw invalid_request("the prompt is empty after tokenization", "prompt");
  check_fits(served, tokens.size());
  return tokens;
}

GenerationRequest make_generation_request(const ServedModel& served, std::vector<int32_t> prompt,
                                          const GenerationOptions& options, const ChatPrompt* chat) {
  GenerationRequest g;
  const int room = served.limits.context_size - int(prompt.size());
  g.max_tokens = std::min(options.max_tokens.value_or(room), room);
  g.prompt = std::move(prompt);
  g.sampling = options.sampling;
  g.eos_ids = served.eos_ids;
  g.stop_strings = options.stop;
  g.logprobs = options.logprobs;
  g.prompt_logprobs = options.prompt_logprobs;
  g.logit_bias = options.logit_bias;
  if (chat && chat->single_tool_call)
    if (const auto close = served.tokenizer.token_id("</tool_call>")) g.end_ids.push_back(*close);
  // Tokenizer copies share one immutable implementation: cheap, and safe on the worker thread.
  g.token_bytes = [tokenizer = served.tokenizer](int32_t id) { return tokenizer.sampled_bytes(id); };
  if (chat && chat->xml_call_grammar) {
    std::vector<XmlToolCallConstraint::AddedToken> added;  // Qwen's "</tool_call>" is a token of its own
    if (const auto close = served.tokenizer.token_id("</tool_call>")) added.push_back({*close, "</tool_call>"});
    g.constraint = std::make_shared<XmlToolCallConstraint>(chat->xml_call_grammar, served.token_trie, served.eos_ids,
                                                           std::move(added));
  } else if (chat && chat->call_grammar) {
    auto constraint = std::make_shared<JsonConstraint>(chat->call_grammar, served.token_trie, served.eos_ids);
    constraint->set_suffix(served.tokenizer.encode(chat->call_suffix));
    g.constraint = std::move(constraint);
  } else if (options.json_grammar) {
    std::optional<JsonConstraint::ThinkTokens> think;
    const auto open = served.tokenizer.token_id("<think>"), close = served.tokenizer.token_id("</think>");
    if (chat && (chat->starts_in_thinking || chat->may_think) && open && close) think = {*open, *close};
    g.constraint = std::make_shared<JsonConstraint>(options.json_grammar, served.token_trie, served.eos_ids, think,
                                                    chat && chat->starts_in_thinking);
  }
  return g;
}

}  // namespace megaqwen::server
