// libFuzzer target: arbitrary bytes as the body of a chat request, taken the whole way the server
// takes it to prompt tokens (parse_chat_completion_request, build_chat_prompt: the chat template,
// a forced tool call's grammar, the tokenizer), with the real Qwen3 and Qwen3.5 tokenizers and
// templates. Parsing and rendering must either give a prompt or throw ApiError 400; and a prompt
// must hold what every chat prompt holds whatever the messages say:
//   - its text (the tokens decoded) is valid UTF-8, starts with "<|im_start|>" and ends with the
//     reply's opening: the template's generation prompt, or a forced call's start after it;
//   - the conversation alone (/tokenize's add_generation_prompt false) is a prefix of its tokens.
// The folders come from $MEGAQWEN_SHARED_DIR (models/qwen3-0.6b, models/qwen3.5-0.8b), else
// /work/shared.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "megaqwen/server/api_error.h"
#include "megaqwen/server/openai_protocol.h"
#include "megaqwen/server/served_model.h"
#include "megaqwen/tokenizer/utf8.h"

namespace {

using namespace megaqwen;
using namespace megaqwen::server;

// A ServedModel without weights: building prompts needs the folder's tokenizer and template only.
ServedModel served(const char* folder) {
  const char* shared = std::getenv("MEGAQWEN_SHARED_DIR");
  const std::string dir = std::string(shared != nullptr ? shared : "/work/shared") + "/models/" + folder;
  ServedModel s{nullptr, Tokenizer::load(dir), ChatTemplate::load(dir), {}, {}, nullptr};
  s.limits.id = "fuzz";
  s.limits.context_size = 4096;
  s.limits.vocab_size = s.tokenizer.vocab_size();
  return s;
}

const ServedModel& qwen3() {
  static const ServedModel s = served("qwen3-0.6b");
  return s;
}

const ServedModel& qwen35() {
  static const ServedModel s = served("qwen3.5-0.8b");
  return s;
}

void check_prompt(const ServedModel& model, const ChatCompletionRequest& r) {
  ChatPrompt prompt;
  try {
    prompt = build_chat_prompt(model, r);
  } catch (const ApiError& e) {
    if (e.status() != 400) std::abort();
    return;
  }
  if (prompt.tokens.empty() || int(prompt.tokens.size()) >= model.limits.context_size) std::abort();
  const std::string text = model.tokenizer.decode(prompt.tokens);
  // Qwen3.5's template opens a leading tool message with its <tool_response> alone (no
  // "<|im_start|>user", as Jinja renders it: loop.previtem is undefined there).
  const bool leading_tool = r.messages.front().value("role", "") == "tool";
  if (!utf8::is_valid(text) ||
      !(text.starts_with("<|im_start|>") || (leading_tool && text.starts_with("\n<tool_response>"))))
    std::abort();
  if (prompt.forced_prefix.empty()) {
    if (!text.ends_with(model.chat_template->generation_prompt(r.enable_thinking))) std::abort();
    if (prompt.call_grammar || prompt.xml_call_grammar) std::abort();
  } else if (!text.ends_with(prompt.forced_prefix) || prompt.starts_in_thinking) {
    std::abort();
  }
  // The same messages rendered without the reply's opening: what /tokenize counts with
  // add_generation_prompt false. Rendering succeeded once, so it must again.
  const std::vector<int32_t> bare = chat_prompt_tokens(model, r, false);
  if (bare.size() >= prompt.tokens.size() || !std::equal(bare.begin(), bare.end(), prompt.tokens.begin()))
    std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  ordered_json body;
  try {
    body = parse_json_body(std::string_view(reinterpret_cast<const char*>(data), size));
  } catch (const ApiError& e) {
    if (e.status() != 400) std::abort();
    return 0;
  }
  for (const ServedModel* model : {&qwen3(), &qwen35()}) {
    ChatCompletionRequest r;
    try {
      r = parse_chat_completion_request(body, model->limits, model->wants_argument_objects());
    } catch (const ApiError& e) {
      if (e.status() != 400) std::abort();
      continue;
    }
    check_prompt(*model, r);
  }
  return 0;
}
