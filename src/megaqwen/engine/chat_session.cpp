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

std::optional<std::string> ChatSession::undo() {
  for (size_t i = messages_.size(); i-- > 0;) {
    if (messages_[i]["role"] != "user") continue;
    std::string text = messages_[i]["content"].get<std::string>();
    messages_.erase(messages_.begin() + ptrdiff_t(i), messages_.end());
    return text;
  }
  return std::nullopt;
}

void ChatSession::load_messages(const nlohmann::ordered_json& messages) {
  if (!messages.is_array()) fail("the saved conversation must be a JSON array of messages, got {}", messages.type_name());
  nlohmann::ordered_json loaded = nlohmann::ordered_json::array();
  std::optional<std::string> system;
  for (size_t i = 0; i < messages.size(); ++i) {
    const nlohmann::ordered_json& m = messages[i];
    if (!m.is_object()) fail("message {} is not a JSON object", i);
    const auto role = m.find("role");
    if (role == m.end() || !role->is_string()) fail("message {} has no \"role\" string", i);
    const std::string r = role->get<std::string>();
    if (r != "system" && r != "user" && r != "assistant")
      fail("message {} has role \"{}\"; megaqwen chat holds system, user and assistant messages", i, r);
    if (r == "system" && i != 0) fail("message {} is a system message; only the first message may be one", i);
    const auto content = m.find("content");
    if (content == m.end() || !content->is_string()) fail("message {} ({}) has no \"content\" string", i, r);
    nlohmann::ordered_json kept = {{"role", r}, {"content", *content}};
    for (const auto& [key, value] : m.items()) {
      if (key == "role" || key == "content") continue;
      if (key != "reasoning_content" || r != "assistant")
        fail("message {} ({}) has the key \"{}\", which megaqwen chat does not keep", i, r, key);
      if (!value.is_string()) fail("message {}'s \"reasoning_content\" is not a string", i);
      kept["reasoning_content"] = value;
    }
    if (r == "system") system = content->get<std::string>();
    loaded.push_back(std::move(kept));
  }
  if (!loaded.empty() && loaded.back()["role"] == "user")
    fail("the saved conversation ends with a user message; it must end after an assistant reply");
  // Rendered as the next turn would render it, so a conversation that cannot go on fails now (an
  // empty one is a new conversation; with trimming on, one too long for the context is trimmed by
  // the next turn).
  if (!loaded.empty()) {
    const nlohmann::ordered_json request = {{"messages", loaded}, {"add_generation_prompt", true},
                                            {"enable_thinking", thinking_}};
    const size_t tokens = tokenizer_.encode(template_.render(request)).size();
    if (!trim_ && int64_t(tokens) >= context_size())
      fail("the saved conversation ({} tokens) does not fit the context of {} tokens; ask for a larger --ctx",
           tokens, context_size());
  }
  system_ = std::move(system);
  messages_ = std::move(loaded);
}

AssistantReply ChatSession::send(const std::string& user_text, const SamplingParams& sampling, int max_tokens,
                                 const TokenCallback& on_text) {
  const nlohmann::ordered_json before = messages_;
  messages_.push_back({{"role", "user"}, {"content", user_text}});
  auto render = [&] {
    const nlohmann::ordered_json request = {{"messages", messages_}, {"add_generation_prompt", true},
                                            {"enable_thinking", thinking_}};
    return tokenizer_.encode(template_.render(request));
  };
  GenerationRequest req;
  int dropped = 0;
  try {
    req.prompt = render();
    // Room for the reply: drop the oldest exchange until there is (the system prompt and the new
    // message stay). The cache then only keeps the system prompt's prefix: the rest is prefilled again.
    const int64_t reserve = std::min<int64_t>(max_tokens, context_size() / 4);
    const size_t first = !messages_.empty() && messages_[0]["role"] == "system" ? 1 : 0;
    while (trim_ && int64_t(req.prompt.size()) + reserve > context_size() && first + 1 < messages_.size()) {
      size_t end = first + 1;  // one exchange: the oldest message and the replies up to the next user message
      while (end + 1 < messages_.size() && messages_[end]["role"] != "user") ++end;
      dropped += int(end - first);
      messages_.erase(messages_.begin() + ptrdiff_t(first), messages_.begin() + ptrdiff_t(end));
      req.prompt = render();
    }
    if (int64_t(req.prompt.size()) >= context_size())
      fail("the conversation ({} tokens) no longer fits the context of {} tokens; /reset to start over",
           req.prompt.size(), context_size());
  } catch (...) {
    messages_ = before;
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

  last_ = {int(req.prompt.size()), r.reused_tokens, int(r.tokens.size()), r.prefill_seconds, r.decode_seconds, r.finish,
           dropped};
  return reply;
}

}  // namespace megaqwen
