// megaqwen chat: an interactive multi-turn chat in the terminal. Streams the answer, shows thinking
// dimmed, reuses the KV cache of earlier turns, and takes commands (/help lists them: /think,
// /no_think, /reset, /undo, /regen, /system TEXT, /save FILE, /load FILE, /stats, /quit). A saved conversation is OpenAI's request
// shape, {"messages": [...]}, so it can also be sent to `megaqwen serve` or any such server;
// --prompt-cache FILE keeps the KV cache too, so a resumed conversation is not prefilled again. Ctrl-C
// stops the current answer, not the program. A message spans lines when a line ends in a backslash
// or when it is fenced with """ (pasted text, code). With stdin not a terminal it reads messages the
// same way, one per line otherwise, so a scripted session is a test.
#include <editline/readline.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "cli/commands.h"
#include "cli/common_options.h"
#include "megaqwen/engine/chat_session.h"
#include "megaqwen/engine/state_file.h"
#include "megaqwen/engine/stop_tokens.h"
#include "megaqwen/model/model.h"
#include "megaqwen/util/error.h"
#include "megaqwen/util/text_file.h"

namespace megaqwen::cli {

namespace {

std::atomic<bool> g_interrupted{false};
void on_sigint(int) { g_interrupted = true; }

struct ChatArgs {
  ModelArgs model;
  SamplingArgs sampling;
  std::string system, system_file;
  std::string load;
  std::string prompt_cache;  // a state file: read at the start, written at the end
  int max_tokens = 2048;
  bool no_think = false, plain = false, no_trim = false;
};

constexpr const char* kHelp =
    "  /think, /no_think   thinking on or off for the next answers\n"
    "  /reset              start over (the system prompt stays)\n"
    "  /undo               remove the last question and its answer\n"
    "  /regen              answer the last question again (with the next seed)\n"
    "  /system TEXT        set the system prompt (no TEXT: clear it) and start over\n"
    "  /save FILE          save the conversation as OpenAI messages JSON\n"
    "  /load FILE          continue a saved conversation\n"
    "  /stats              tokens in the context, speed of the last answer\n"
    "  /quit               leave (also Ctrl-D)\n"
    "  A message spans lines when a line ends in \\ or when it is fenced with \"\"\".\n";

// Reads one line: libedit with history on a terminal, plain getline otherwise.
bool read_line(bool interactive, const char* prompt, std::string& line) {
  if (interactive) {
    char* input = readline(prompt);
    if (!input) return false;
    line = input;
    std::free(input);
    if (!line.empty()) add_history(line.c_str());
    return true;
  }
  return bool(std::getline(std::cin, line));
}

// Reads one message, which may span lines (a pasted text, code): a line ending in a backslash goes on
// to the next line, and a message opened with """ runs until a line ending in """ (as in ollama).
bool read_message(bool interactive, std::string& message) {
  if (!read_line(interactive, ">>> ", message)) return false;
  constexpr std::string_view fence = "\"\"\"";
  if (message.starts_with(fence)) {
    std::string line = message.substr(fence.size());
    std::vector<std::string> lines;
    while (true) {
      if (line.ends_with(fence)) {
        lines.push_back(line.substr(0, line.size() - fence.size()));
        break;
      }
      lines.push_back(line);
      if (!read_line(interactive, "... ", line)) break;
    }
    // A fence on a line of its own adds no line.
    if (lines.size() > 1 && lines.back().empty()) lines.pop_back();
    if (lines.front().empty()) lines.erase(lines.begin());
    message.clear();
    for (size_t i = 0; i < lines.size(); ++i) message += (i ? "\n" : "") + lines[i];
    return true;
  }
  std::string line;
  while (message.ends_with('\\')) {
    message.back() = '\n';
    if (!read_line(interactive, "... ", line)) break;
    message += line;
  }
  return true;
}

// Prints a streamed reply, dimming the thinking part on a terminal.
class ReplyPrinter {
 public:
  explicit ReplyPrinter(bool color) : color_(color) {}
  void print(std::string_view text) {
    seen_ += text;
    if (color_ && !dim_ && !closed_ && seen_.find("<think>") != std::string::npos) {
      std::fputs("\x1b[2m", stdout);
      dim_ = true;
    }
    if (dim_ && !closed_) {
      if (size_t end = seen_.find("</think>"); end != std::string::npos) {
        // Print up to and including the tag dimmed, the rest plain.
        size_t tag_end = end + 8, chunk_start = seen_.size() - text.size();
        size_t split = tag_end > chunk_start ? tag_end - chunk_start : 0;
        std::fwrite(text.data(), 1, split, stdout);
        std::fputs("\x1b[0m", stdout);
        closed_ = true;
        text = text.substr(split);
      }
    }
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
  }
  void finish() {
    if (dim_ && !closed_) std::fputs("\x1b[0m", stdout);
    std::fputs("\n", stdout);
    std::fflush(stdout);
  }

 private:
  bool color_, dim_ = false, closed_ = false;
  std::string seen_;
};

void print_stats(const ChatSession& s) {
  const ChatTurnStats& t = s.last_turn();
  const int prefilled = t.prompt_tokens - t.reused_tokens;
  std::printf("[stats] context %d / %d tokens | last turn: prompt %d tokens (%d reused from the cache, %d prefilled, "
              "%.1f tok/s) | generated %d tokens (%.2f tok/s) | finish %s\n",
              s.tokens_in_context(), s.context_size(), t.prompt_tokens, t.reused_tokens, prefilled,
              prefilled / std::max(t.prefill_seconds, 1e-9), t.generated_tokens,
              t.generated_tokens > 1 ? (t.generated_tokens - 1) / std::max(t.decode_seconds, 1e-9) : 0.0,
              finish_reason_name(t.finish));
  std::fflush(stdout);
}

// /save FILE: the conversation as {"messages": [...]}.
void save_conversation(const ChatSession& s, const std::string& path) {
  std::ofstream out(path, std::ios::binary);
  if (!out) fail("cannot write {}: {}", path, std::strerror(errno));
  out << nlohmann::ordered_json{{"messages", s.messages()}}.dump(2) << "\n";
  out.close();
  if (!out) fail("cannot write {}: {}", path, std::strerror(errno));
}

// /load FILE and --load: {"messages": [...]} (what /save writes, or an OpenAI request body) or a bare
// array of messages.
void load_conversation(ChatSession& s, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot read {}: {}", path, std::strerror(errno));
  nlohmann::ordered_json j;
  try {
    j = nlohmann::ordered_json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail("{} is not JSON: {}", path, e.what());
  }
  if (j.is_object()) {
    if (!j.contains("messages")) fail("{} has no \"messages\" array", path);
    j = j["messages"];
  }
  try {
    s.load_messages(j);
  } catch (const Error& e) {
    fail("{}: {}", path, e.what());
  }
}

// --prompt-cache FILE at the start: the cache it holds goes back into the session, whose next turn
// reuses the prefix it shares with the conversation (a resumed one, or the same system prompt).
void read_prompt_cache(ChatSession& s, const Model& model, const std::string& path) {
  if (!std::filesystem::exists(path)) return;
  const StateFile file = StateFile::open(path);
  s.generator().restore(file.load(model, s.generator().engine()));
  std::printf("[prompt cache: %zu tokens read from %s]\n", file.tokens().size(), path.c_str());
}

// --prompt-cache FILE at the end: the conversation's cache written there.
void write_prompt_cache(ChatSession& s, const Model& model, const std::string& path) {
  std::optional<SavedSequence> saved = s.generator().save();
  if (!saved) return;  // nothing in the cache
  write_state_file(path, model, s.generator().engine(), *saved);
  std::printf("[prompt cache: %zu tokens saved to %s]\n", saved->tokens.size(), path.c_str());
}

void run_chat(const ChatArgs& a) {
  auto model = a.model.load();
  Tokenizer tokenizer = Tokenizer::load(model->dir);
  ChatTemplate chat_template = ChatTemplate::load(model->dir);
  GenerationDefaults defaults = load_generation_defaults(model->dir);
  std::vector<int32_t> eos = stop_token_ids(model->config, defaults, &tokenizer);

  EngineOptions options = a.model.engine;
  if (options.context == 0) options.context = std::min(model->config.context_limit(), 8192);
  auto engine = create_engine(model, options);
  ChatSession session(*engine, tokenizer, chat_template, eos);
  session.set_thinking(!a.no_think);
  session.set_trim(!a.no_trim);
  if (!a.system.empty() && !a.system_file.empty()) fail("give one of --system TEXT or --system-file FILE");
  if (!a.system_file.empty()) session.set_system_prompt(read_text_file(a.system_file));
  if (!a.system.empty()) session.set_system_prompt(a.system);
  if (!a.load.empty()) load_conversation(session, a.load);
  if (!a.prompt_cache.empty()) read_prompt_cache(session, *model, a.prompt_cache);

  const bool interactive = isatty(STDIN_FILENO) && !a.plain;
  const bool color = isatty(STDOUT_FILENO) && !a.plain;
  if (interactive)
    std::printf("megaqwen chat on %s (%s). /help for commands; \"\"\" or a trailing \\ for several lines; "
                "Ctrl-C stops an answer.\n",
                engine->device_name().c_str(), model->dir.string().c_str());

  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  struct sigaction previous {};

  uint64_t seed_offset = 0;  // added to --seed: one more per /regen
  std::string line;
  while (read_message(interactive, line)) {
    if (line.empty()) continue;
    if (line == "/quit" || line == "/exit") break;
    if (line == "/help" || line == "/?") {
      std::fputs(kHelp, stdout);
      continue;
    }
    if (line == "/undo") {
      const std::optional<std::string> removed = session.undo();
      std::printf(removed ? "[removed the last exchange]\n" : "[nothing to undo]\n");
      continue;
    }
    if (line == "/regen") {
      // The last message again. Draws are keyed by (seed, position), so the same prompt with the same
      // seed would give the same answer: every /regen moves the seed on by one (greedy stays greedy).
      const std::optional<std::string> removed = session.undo();
      if (!removed) {
        std::printf("[nothing to regenerate]\n");
        continue;
      }
      line = *removed;
      ++seed_offset;
    }
    if (line == "/think" || line == "/no_think") {
      session.set_thinking(line == "/think");
      std::printf("[thinking %s]\n", session.thinking() ? "on" : "off");
      continue;
    }
    if (line == "/reset") {
      session.reset();
      std::printf("[conversation reset]\n");
      continue;
    }
    if (line.rfind("/system", 0) == 0 && (line.size() == 7 || line[7] == ' ')) {
      std::string text = line.size() > 8 ? line.substr(8) : "";
      session.set_system_prompt(text.empty() ? std::nullopt : std::optional<std::string>(text));
      std::printf("[system prompt %s; conversation reset]\n", text.empty() ? "cleared" : "set");
      continue;
    }
    if (line.rfind("/save ", 0) == 0 || line.rfind("/load ", 0) == 0) {
      const std::string path = line.substr(6);
      try {
        if (line[1] == 's') {
          save_conversation(session, path);
          std::printf("[saved %zu messages to %s]\n", session.messages().size(), path.c_str());
        } else {
          load_conversation(session, path);
          std::printf("[loaded %zu messages from %s]\n", session.messages().size(), path.c_str());
        }
      } catch (const Error& e) {
        std::printf("[error: %s]\n", e.what());
      }
      continue;
    }
    if (line == "/save" || line == "/load") {
      std::printf("[usage: %s FILE]\n", line.c_str());
      continue;
    }
    if (line == "/stats") {
      print_stats(session);
      continue;
    }
    if (line[0] == '/' && line.find(' ') == std::string::npos) {
      std::printf("[unknown command %s; /help lists them]\n", line.c_str());
      continue;
    }

    SamplingParams defaults_for_mode = session.thinking() ? qwen_thinking_sampling() : qwen_non_thinking_sampling();
    SamplingParams sampling = a.sampling.resolve(defaults_for_mode);
    sampling.seed += seed_offset;
    ReplyPrinter printer(color);
    g_interrupted = false;
    sigaction(SIGINT, &sa, &previous);
    try {
      session.send(line, sampling, a.max_tokens, [&](int32_t, std::string_view text) {
        printer.print(text);
        return !g_interrupted.load();
      });
      printer.finish();
      if (session.last_turn().dropped_messages > 0)
        std::printf("[dropped the %d oldest messages to make room in the context of %d tokens]\n",
                    session.last_turn().dropped_messages, session.context_size());
      if (session.last_turn().finish == FinishReason::Cancelled) std::printf("[stopped]\n");
      if (session.last_turn().finish == FinishReason::ContextFull)
        std::printf("[the context is full (%d tokens); /reset to start over]\n", session.context_size());
    } catch (const Error& e) {
      printer.finish();
      std::printf("[error: %s]\n", e.what());
    }
    sigaction(SIGINT, &previous, nullptr);
    std::fflush(stdout);
  }
  if (!a.prompt_cache.empty()) write_prompt_cache(session, *model, a.prompt_cache);
}

}  // namespace

void add_chat_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("chat", "Chat with a model in the terminal (multi-turn, streaming)");
  auto a = std::make_shared<ChatArgs>();
  a->model.add_to(cmd);
  cmd->add_option("--system", a->system, "System prompt");
  cmd->add_option("--system-file", a->system_file, "System prompt read from this file");
  cmd->add_option("--load", a->load, "Start from a conversation saved with /save (or any {\"messages\": [...]} file)");
  cmd->add_option("--prompt-cache", a->prompt_cache,
                  "Keep the conversation's KV cache in this file: read at the start (a resumed conversation, or "
                  "one with the same system prompt, prefills only what is new), written when the chat ends");
  cmd->add_option("-n,--max-tokens", a->max_tokens, "Most tokens per answer")->capture_default_str()->check(CLI::Range(1, 1 << 30));
  cmd->add_flag("--no-think", a->no_think, "Start with thinking off (same as /no_think)");
  cmd->add_flag("--plain", a->plain, "No line editing or colours, even on a terminal");
  cmd->add_flag("--no-trim", a->no_trim,
                "Keep every message: a conversation that outgrows the context is an error (by default the oldest "
                "exchanges are dropped to make room, the system prompt kept)");
  a->sampling.add_to(cmd);
  cmd->callback([a] { run_chat(*a); });
}

}  // namespace megaqwen::cli
