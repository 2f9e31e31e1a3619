// ChatSession: a multi-turn conversation on one engine. It keeps the messages, renders them with the
// model's chat template, and runs each turn through a Generator, so the KV cache of earlier turns is
// reused and only the new part of the prompt is prefilled. Used by `megaqwen chat` (and the server).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "megaqwen/chat/chat_template.h"
#include "megaqwen/engine/generator.h"
#include "megaqwen/tokenizer/tokenizer.h"

namespace megaqwen {

// Qwen3's recommended sampling per mode (../shared/docs/qwen-models.md).
SamplingParams qwen_thinking_sampling();     // temperature 0.6, top_p 0.95, top_k 20, min_p 0
SamplingParams qwen_non_thinking_sampling(); // temperature 0.7, top_p 0.8, top_k 20, min_p 0

// An assistant reply split as the template stores it: the text inside <think>...</think> and the rest.
struct AssistantReply {
  std::string reasoning;  // empty when the model did not think
  std::string content;
};
AssistantReply split_reasoning(std::string_view text);

struct ChatTurnStats {
  int prompt_tokens = 0;   // the whole rendered conversation
  int reused_tokens = 0;   // of which already in the KV cache
  int generated_tokens = 0;
  double prefill_seconds = 0, decode_seconds = 0;
  FinishReason finish = FinishReason::Length;
  int dropped_messages = 0;  // oldest messages dropped to make room (set_trim)
};

class ChatSession {
 public:
  ChatSession(Engine& engine, Tokenizer tokenizer, ChatTemplate chat_template, std::vector<int32_t> eos_ids);

  void set_system_prompt(std::optional<std::string> text);  // also starts a new conversation
  void reset();                                             // forget the conversation (keeps the system prompt)
  // Removes the last exchange (the last user message and the replies after it) and returns that
  // message's text, to edit or send again; nullopt when the conversation holds none. The cache is
  // kept: the next turn reuses the prefix the shorter conversation shares with it.
  std::optional<std::string> undo();
  void set_thinking(bool on) { thinking_ = on; }
  bool thinking() const { return thinking_; }
  // With trimming on (the default), a turn whose prompt would leave the reply less than
  // min(max_tokens, context / 4) tokens first drops the oldest exchanges (a user message and the
  // replies after it; never the system prompt or the new message), and last_turn() says how many
  // messages went. Off: such a turn fails, as one that cannot fit even alone always does.
  void set_trim(bool on) { trim_ = on; }

  // Adds the user's message, generates the reply (streamed through on_text), and stores the reply in
  // the history. `sampling` is used as given. Throws Error when the conversation no longer fits the
  // context; the user's message is then dropped again.
  AssistantReply send(const std::string& user_text, const SamplingParams& sampling, int max_tokens,
                      const TokenCallback& on_text);

  const ChatTurnStats& last_turn() const { return last_; }
  int tokens_in_context() const { return int(generator_.cached_tokens().size()); }
  int context_size() const { return generator_.engine().context_size(); }
  // The generator holding the conversation's cache (to save it to a state file, or to put one back:
  // the next turn then reuses whatever prefix it shares with the rendered conversation).
  Generator& generator() { return generator_; }
  // The conversation as OpenAI's "messages": system, user and assistant turns (an assistant turn's
  // thinking in "reasoning_content"), which `megaqwen chat` saves with /save.
  const nlohmann::ordered_json& messages() const { return messages_; }
  // Replaces the conversation with saved messages (as messages() gives them). They are checked (an
  // array of objects with a role of system / user / assistant and text content, the system message
  // first, no other keys, ending after an assistant reply or the system message) and rendered once,
  // so that a list the template refuses (or, with trimming off, the context cannot hold) fails here
  // with Error, leaving the session as it was. The next turn prefills them (what the cache does not
  // already hold), trimming the oldest exchanges first if they do not fit.
  void load_messages(const nlohmann::ordered_json& messages);

 private:
  Generator generator_;
  Tokenizer tokenizer_;
  ChatTemplate template_;
  std::vector<int32_t> eos_ids_;
  std::optional<std::string> system_;
  nlohmann::ordered_json messages_ = nlohmann::ordered_json::array();
  bool thinking_ = true;
  bool trim_ = true;
  ChatTurnStats last_;
};

}  // namespace megaqwen
