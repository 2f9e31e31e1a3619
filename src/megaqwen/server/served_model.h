// ServedModel: what the server knows about the model it serves, loaded once at start: tokenizer,
// chat template, sampling defaults and stop ids from the model folder. It turns checked requests
// into prompt tokens (rendering the chat template), enforcing the context limit.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "megaqwen/chat/chat_template.h"
#include "megaqwen/grammar/json_grammar.h"
#include "megaqwen/grammar/token_trie.h"
#include "megaqwen/grammar/xml_tool_call_grammar.h"
#include "megaqwen/model/model.h"
#include "megaqwen/server/openai_protocol.h"
#include "megaqwen/tokenizer/tokenizer.h"

namespace megaqwen::server {

struct ServedModel {
  std::shared_ptr<const Model> model;
  Tokenizer tokenizer;
  std::optional<ChatTemplate> chat_template;  // nullopt: the folder has none; chat requests are refused
  ModelLimits limits;
  std::vector<int32_t> eos_ids;
  std::shared_ptr<const TokenTrie> token_trie;  // the vocabulary for response_format's token masks

  // model_id: the name clients use; "" takes the folder's name.
  static ServedModel load(std::shared_ptr<const Model> model, int context_size, std::string model_id);

  // Whether the template wants tool-call arguments as JSON objects rather than JSON text.
  bool wants_argument_objects() const;
};

// A chat request ready for the engine.
struct ChatPrompt {
  std::vector<int32_t> tokens;
  bool starts_in_thinking = false;  // the prompt ends inside an open <think> block
  bool may_think = false;           // the reply may open a <think> block itself (thinking not turned off)
  std::string forced_prefix;        // text the prompt already put at the start of the reply (tool_choice)
  // A forced call in Qwen3's JSON format: the call's JSON is constrained, then call_suffix closes it.
  std::shared_ptr<const JsonGrammar> call_grammar;
  std::string call_suffix;
  // A forced call in Qwen3.5's XML format: the rest of the call after forced_prefix is constrained.
  std::shared_ptr<const XmlToolCallGrammar> xml_call_grammar;
  // parallel_tool_calls false with tools offered: generation ends with the first call's closing tag.
  bool single_tool_call = false;
};
// 400 when the template refuses the messages or the prompt leaves no room to generate.
ChatPrompt build_chat_prompt(const ServedModel& served, const ChatCompletionRequest& request);
// What /tokenize counts for a chat: build_chat_prompt's tokens (add_generation_prompt), or the
// conversation alone; no context check.
std::vector<int32_t> chat_prompt_tokens(const ServedModel& served, const ChatCompletionRequest& request,
                                        bool add_generation_prompt);
std::vector<int32_t> build_completion_prompt(const ServedModel& served, const CompletionPrompt& prompt);

// The GenerationRequest both endpoints hand to the scheduler. `chat`: the chat prompt's thinking,
// which a response_format's constraint leaves free.
GenerationRequest make_generation_request(const ServedModel& served, std::vector<int32_t> prompt,
                                          const GenerationOptions& options, const ChatPrompt* chat = nullptr);

}  // namespace megaqwen::server
