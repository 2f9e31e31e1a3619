#include "megaqwen/engine/chat_session.h"

#include "megaqwen/util/error.h"

namespace megaqwen {

SamplingParams qwen_thinking_sampling() {
  SamplingParams p;
  p.temperature = 0.6f;
  p.top_p = 0.95f;
  p.top_k = 20;
  p.min_p = 0.0f;
  return p;
}

SamplingParams qwen_non_thinking_sampling() {
  SamplingParams p;
  p.temperature = 0.7f;
  p.top_p = 0.8f;
  p.top_k = 20;
  p.min_p = 0.0f;
  return p;
}

AssistantReply split_reasoning(std::string_view text) {
  constexpr std::string_view open = "<think>", close = "</think>";
  AssistantReply reply;
  const size_t end = text.find(close);
  if (end == std::string_view::npos) {
    // Unfinished thinking (budget ran out inside it) stays reasoning; plain text is content.
    size_t start = text.find_first_not_of(" \n");
    if (start != std::string_view::npos && text.substr(start, open.size()) == open)
      reply.reasoning = std::string(text.substr(start + open.size()));
    else
      reply.content = std::string(text);
  } else {
    std::string_view before = text.substr(0, end);
    if (size_t o = before.find(open); o != std::string_view::npos) before = before.substr(o + open.size());
    reply.reasoning = std::string(before);
    reply.content = std::string(text.substr(end + close.size()));
  }
  // The template strips these newlines itself; keep the stored form tidy.
  auto trim_newlines = [](std::string& s) {
    size_t b = s.find_first_not_of('\n'), e = s.find_last_not_of('\n');
    s = b == std::string::npos ? "" : s.substr(b, e - b + 1);
  };
  trim_newlines(reply.reasoning);
  size_t b = reply.content.find_first_not_of('\n');
  reply.content = b == std::string::npos ? "" : reply.content.substr(b);
  return reply;
}

ChatSession::ChatSession(Engine& engine, Tokenizer tokenizer, ChatTemplate chat_template,
                         std::vector<int32_t> eos_ids)
    : generator_(engine),
      tokenizer_(std::move(tokenizer)),
      template_(std::move(chat_template)),
      eos_ids_(std::move(eos_ids)) {}

void ChatSession::set_system_prompt(std::optional<std::string> text) {
  system_ = std::move(text);
  reset();
}

void ChatSession::reset() {
  messages_ = nlohmann::ordered_json::array();
  if (system_) messages_.push_back({{"role", "system"}, {"content", *system_}});
  // The cache is kept: the next prompt shares its system-prompt prefix, which the generator reuses.
}

AssistantReply ChatSession::send(const std::string& user_text, const SamplingParams& sampling, int max_tokens,
                                 const TokenCallback& on_text) {
  messages_.push_back({{"role", "user"}, {"content", user_text}});
  nlohmann::ordered_json request = {{"messages", messages_}, {"add_generation_prompt", true},
                                    {"enable_thinking", thinking_}};
  GenerationRequest req;
  try {
    req.prompt = tokenizer_.encode(template_.render(request));
    if (int64_t(req.prompt.size()) >= context_size())
      fail("the conversation ({} tokens) no longer fits the context of {} tokens; /reset to start over",
           req.prompt.size(), context_size());
  } catch (...) {
    messages_.erase(messages_.size() - 1);
    throw;
  }
  req.max_tokens = max_tokens;
  req.sampling = sampling;
  req.eos_ids = eos_ids_;
  req.token_bytes = [this](int32_t id) { return tokenizer_.sampled_bytes(id); };

  GenerationResult r = generator_.run(req, on_text);
  // With thinking off the template already closed an empty <think> block in the prompt.
  AssistantReply reply = split_reasoning(r.text);
  nlohmann::ordered_json message = {{"role", "assistant"}, {"content", reply.content}};
  if (!reply.reasoning.empty()) message["reasoning_content"] = reply.reasoning;
  messages_.push_back(std::move(message));

  last_ = {int(req.prompt.size()), r.reused_tokens, int(r.tokens.size()), r.prefill_seconds, r.decode_seconds, r.finish};
  return reply;
}

}  // namespace megaqwen
