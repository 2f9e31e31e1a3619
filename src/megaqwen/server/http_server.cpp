#include "megaqwen/server/http_server.h"

#include <dirent.h>
#include <fmt/format.h>
#include <httplib.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "megaqwen/server/api_error.h"
#include "megaqwen/server/chat_page.h"
#include "megaqwen/server/generation_job.h"
#include "megaqwen/server/metrics.h"
#include "megaqwen/server/scheduler.h"
#include "megaqwen/util/error.h"

namespace megaqwen::server {

namespace {

using Clock = std::chrono::steady_clock;
// How often a waiting HTTP thread looks at its job (deadline, new text).
constexpr auto kPollInterval = std::chrono::milliseconds(100);
// A stream with nothing to say writes an SSE comment this often, so a vanished client shows as a
// failed write (and the generation is cancelled) even while the request waits in the queue.
constexpr auto kKeepAliveInterval = std::chrono::seconds(1);

void send_json(httplib::Response& res, int status, const ordered_json& body) {
  res.status = status;
  res.set_content(json_text(body), "application/json");
}

void send_error(httplib::Response& res, const ApiError& e) { send_json(res, e.status(), error_json(e)); }

ApiError queue_timeout() {
  return ApiError(503, "the request timed out waiting in the queue", "server_error", "", "queue_timeout");
}

// A non-streamed request whose client hung up: nobody reads this answer, but the status shows in
// the request metrics (nginx's "client closed request").
ApiError client_closed() { return ApiError(499, "the client closed the connection", "invalid_request_error"); }

// "host port" of one end of a socket as httplib writes Request::remote_addr/remote_port.
std::string endpoint_of(int fd, bool peer) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  const int rc = peer ? ::getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len)
                      : ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  if (rc != 0 || (addr.ss_family != AF_INET && addr.ss_family != AF_INET6)) return "";
  char host[NI_MAXHOST], port[NI_MAXSERV];
  if (::getnameinfo(reinterpret_cast<sockaddr*>(&addr), len, host, sizeof(host), port, sizeof(port),
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return "";
  return fmt::format("{} {}", host, port);
}

// Watches the connection of a request whose handler blocks while its job runs. httplib 0.11 gives
// such a handler no sign of the client leaving (only a streamed response sees a failed write), nor
// its socket; but the request names both ends of its TCP connection, and exactly one open descriptor
// has that pair, open until the handler returns. Polling it for a hang-up (POLLRDHUP: the client
// closed or shut down its side) changes nothing on the wire, unlike writing whitespace as a probe.
// Linux only (/proc/self/fd); elsewhere, or when the socket is not found, nothing is watched.
class ClientWatch {
 public:
  explicit ClientWatch(const httplib::Request& req) {
    const std::string local = fmt::format("{} {}", req.local_addr, req.local_port);
    const std::string remote = fmt::format("{} {}", req.remote_addr, req.remote_port);
    DIR* dir = ::opendir("/proc/self/fd");
    if (!dir) return;
    while (const dirent* entry = ::readdir(dir)) {
      char* end = nullptr;
      const long fd = std::strtol(entry->d_name, &end, 10);
      if (end == entry->d_name || *end != '\0' || fd == ::dirfd(dir)) continue;
      if (endpoint_of(int(fd), false) == local && endpoint_of(int(fd), true) == remote) {
        fd_ = int(fd);
        break;
      }
    }
    ::closedir(dir);
  }

  // True once the client closed its end (or the connection failed).
  bool gone() const {
    if (fd_ < 0) return false;
#ifdef POLLRDHUP
    pollfd p{fd_, POLLRDHUP, 0};
    return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
#else
    return false;
#endif
  }

 private:
  int fd_ = -1;
};

// Metrics label of a path: the known routes, and "other" so unknown paths cannot grow the label set.
std::string endpoint_label(const std::string& path) {
  for (const char* known : {"/", "/health", "/metrics", "/v1/models", "/v1/chat/completions", "/v1/completions",
                            "/tokenize", "/detokenize"})
    if (path == known) return path;
  return "other";
}

// Compares in a time that does not depend on where the strings differ (the length is no secret).
bool same_secret(std::string_view given, std::string_view key) {
  if (given.size() != key.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < key.size(); ++i) diff |= static_cast<unsigned char>(given[i] ^ key[i]);
  return diff == 0;
}

// Debian's cpp-httplib 0.11 listens with a compiled-in backlog of 5: a burst of clients connecting
// at once overflows it and the kernel falls back to SYN cookies and resets. listen() again on the
// bound socket raises the backlog (Linux allows it on a listening socket).
class Listener : public httplib::Server {
 public:
  static constexpr int kBacklog = 1024;
  bool widen_backlog() { return ::listen(svr_sock_, kBacklog) == 0; }
};

// parallel_tool_calls false: a reply holds one call at most. Generation ends with the first call's
// closing token, so more calls only come where the model spelled that tag in pieces.
void keep_first_calls(std::vector<ParsedToolCall>& calls, size_t room) {
  if (calls.size() > room) calls.resize(room);
}

// The generations of a request come in groups of `per_prompt` sharing a prompt (a chat's n choices;
// a completions batch's prompts, each with its choices or best_of candidates). A prompt counts once,
// with what its first generation found in the cache (the later ones find it there too); generated
// tokens add up, best_of candidates not returned included.
Usage usage_of(std::span<const GenerationResult* const> results, size_t per_prompt) {
  Usage u;
  for (size_t i = 0; i < results.size(); ++i) {
    if (i % per_prompt == 0) {
      u.prompt_tokens += results[i]->prompt_tokens;
      u.cached_tokens += results[i]->reused_tokens;
    }
    u.completion_tokens += int(results[i]->tokens.size());
  }
  return u;
}

// best_of's ranking: the mean logprob of the generated tokens (0 when none).
double mean_logprob(const GenerationResult& r) {
  if (r.logprobs.empty()) return 0;
  double sum = 0;
  for (const TokenLogprob& t : r.logprobs) sum += t.logprob;
  return sum / double(r.logprobs.size());
}

using Jobs = std::vector<std::shared_ptr<GenerationJob>>;
void cancel_all(const Jobs& jobs) {
  for (const auto& job : jobs) job->cancel();
}

// How a stream turns what one choice's job produces into server-sent events; one per endpoint and
// choice. The usage chunk and [DONE] follow the last choice.
class StreamFormat {
 public:
  virtual ~StreamFormat() = default;
  virtual std::string begin() = 0;
  // New text and logprobs; what cannot be placed yet (logprobs of text still held back) is kept.
  virtual std::string update(GenerationJob::Update& u) = 0;
  virtual std::string end(const GenerationResult& result) = 0;  // the choice's last chunks
};

class ChatStreamFormat : public StreamFormat {
 public:
  ChatStreamFormat(ResponseHeader header, size_t index, ReplyParser parser, std::string forced_prefix,
                   bool include_usage, bool logprobs, TokenNames names, size_t max_tool_calls)
      : header_(std::move(header)), index_(index), parser_(std::move(parser)), forced_prefix_(std::move(forced_prefix)),
        include_usage_(include_usage), logprobs_(logprobs), names_(std::move(names)),
        max_tool_calls_(max_tool_calls) {}

  std::string begin() override {
    std::string out = chunk({{"role", "assistant"}, {"content", ""}});
    return out + deltas(parser_.feed(forced_prefix_));  // the forced start of a tool call is part of the reply
  }
  std::string update(GenerationJob::Update& u) override {
    pending_.insert(pending_.end(), u.logprobs.begin(), u.logprobs.end());
    return deltas(parser_.feed(u.text));
  }
  std::string end(const GenerationResult& r) override {
    std::string out = deltas(parser_.finish());
    out += sse_event(chat_chunk_json(header_, index_, ordered_json::object(),
                                     finish_reason(r.finish, tool_calls_sent_ > 0), include_usage_, take_logprobs()));
    return out;
  }

 private:
  // The logprobs of the tokens generated so far and not yet sent ride on the next chunk.
  ordered_json take_logprobs() {
    if (!logprobs_ || pending_.empty()) return nullptr;
    ordered_json j = chat_logprobs_json(pending_, names_);
    pending_.clear();
    return j;
  }
  std::string chunk(ordered_json delta) {
    return sse_event(chat_chunk_json(header_, index_, std::move(delta), std::nullopt, include_usage_, take_logprobs()));
  }
  std::string deltas(ReplyDelta d) {
    std::string out;
    keep_first_calls(d.tool_calls, max_tool_calls_ - std::min(max_tool_calls_, tool_calls_sent_));
    if (!d.reasoning.empty()) out += chunk({{"reasoning_content", d.reasoning}});
    if (!d.content.empty()) out += chunk({{"content", d.content}});
    if (!d.tool_calls.empty()) {
      out += chunk({{"tool_calls", tool_calls_json(d.tool_calls, tool_calls_sent_)}});
      tool_calls_sent_ += d.tool_calls.size();
    }
    return out;
  }

  ResponseHeader header_;
  size_t index_;
  ReplyParser parser_;
  std::string forced_prefix_;
  bool include_usage_, logprobs_;
  TokenNames names_;
  size_t max_tool_calls_;
  size_t tool_calls_sent_ = 0;
  std::vector<TokenLogprob> pending_;
};

// With echo, the prompt's text (and its logprobs, when asked for) is the stream's first chunk.
class CompletionStreamFormat : public StreamFormat {
 public:
  CompletionStreamFormat(ResponseHeader header, size_t index, bool include_usage, const CompletionRequest& r,
                         std::vector<int32_t> prompt, std::string echo_text, TokenNames names)
      : header_(std::move(header)),
        index_(index),
        include_usage_(include_usage),
        logprobs_(r.options.logprobs.has_value()),
        prompt_(std::move(prompt)), echo_(r.echo), echo_text_(std::move(echo_text)), names_(std::move(names)) {}
  std::string begin() override {
    // Without prompt logprobs the echo needs nothing from the job.
    return echo_ && !logprobs_ ? send_echo() : "";
  }
  std::string update(GenerationJob::Update& u) override {
    prompt_scored_.insert(prompt_scored_.end(), u.prompt_logprobs.begin(), u.prompt_logprobs.end());
    pending_.insert(pending_.end(), u.logprobs.begin(), u.logprobs.end());
    // The prompt is scored before the first token is generated: anything generated means it is all here.
    std::string out = echo_ && (!u.text.empty() || !pending_.empty()) ? send_echo() : "";
    if (!u.text.empty()) out += chunk(u.text);
    return out;
  }
  std::string end(const GenerationResult& r) override {
    std::string out = echo_ ? send_echo() : "";
    if (logprobs_ && !pending_.empty()) out += chunk("");
    out += sse_event(completion_chunk_json(header_, index_, "", finish_reason(r.finish, false), include_usage_));
    return out;
  }

 private:
  std::string send_echo() {
    if (!echo_) return "";
    echo_ = false;
    ordered_json lp = logprobs_ ? completion_logprobs_json(prompt_.front(), prompt_scored_, names_, offset_) : nullptr;
    return sse_event(completion_chunk_json(header_, index_, echo_text_, std::nullopt, include_usage_, std::move(lp)));
  }
  std::string chunk(std::string_view text) {
    ordered_json lp = nullptr;
    if (logprobs_) {
      lp = completion_logprobs_json(std::nullopt, pending_, names_, offset_);
      pending_.clear();
    }
    return sse_event(
        completion_chunk_json(header_, index_, std::string(text), std::nullopt, include_usage_, std::move(lp)));
  }

  ResponseHeader header_;
  size_t index_;
  bool include_usage_, logprobs_;
  std::vector<int32_t> prompt_;
  bool echo_;  // the echo is still to be sent
  std::string echo_text_;
  TokenNames names_;
  std::vector<TokenLogprob> prompt_scored_, pending_;
  size_t offset_ = 0;  // text_offset of the next token
};

}  // namespace

struct HttpServer::Impl {
  ServedModel served;
  ServerOptions options;
  Metrics metrics;
  Scheduler scheduler;
  Listener http;
  const int64_t created = new_response_header("", "").created;

  Impl(ServedModel s, Engine& engine, ServerOptions o)
      : served(std::move(s)), options(std::move(o)),
        scheduler(engine, options.max_queued, [this](const GenerationJob& job) { record(job); },
                  options.prompt_cache) {
    configure();
  }

  void record(const GenerationJob& job) {
    const GenerationResult& r = job.result();
    metrics.record_generation({r.prompt_tokens, r.reused_tokens, int(r.tokens.size()), job.first_token_seconds(),
                               r.decode_seconds, r.finish == FinishReason::Cancelled});
  }

  void configure() {
    // One HTTP thread per connection: enough for every queued request plus scrapes and page loads.
    const size_t threads = options.max_queued + 16;
    http.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
    http.set_payload_max_length(options.max_body_bytes);
    http.set_read_timeout(30);
    http.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
      metrics.record_request(endpoint_label(req.path), res.status);
    });
    // httplib's own refusals (unknown route, oversized body, malformed request) in OpenAI's shape;
    // responses that already have a body are ours and stay as they are.
    http.set_error_handler(httplib::Server::HandlerWithResponse([this](const httplib::Request& req,
                                                                       httplib::Response& res) {
      if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
      const int status = res.status;
      if (status == 404) send_error(res, not_found(fmt::format("no route for {} {}", req.method, req.path)));
      else if (status == 413) send_error(res, payload_too_large(options.max_body_bytes));
      else send_error(res, ApiError(status, fmt::format("HTTP error {}", status),
                                    status < 500 ? "invalid_request_error" : "server_error"));
      return httplib::Server::HandlerResponse::Handled;
    }));
    http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
      std::string what = "unknown error";
      try {
        std::rethrow_exception(ep);
      } catch (const std::exception& e) {
        what = e.what();
      } catch (...) {
      }
      send_error(res, ApiError(500, "internal error: " + what, "server_error"));
    });

    http.Get("/", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(std::string(chat_page_html()), "text/html; charset=utf-8");
    });
    http.Get("/health", [](const httplib::Request&, httplib::Response& res) {
      send_json(res, 200, {{"status", "ok"}});
    });
    http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(metrics.render(scheduler.queued(), scheduler.running(), scheduler.prompt_cache_stats()),
                      "text/plain; version=0.0.4");
    });
    http.Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
      guarded(req, res, [&] { send_json(res, 200, models_json(served.limits.id, created, served.limits.context_size)); });
    });
    post("/v1/chat/completions", [this](const httplib::Request& req, const std::string& body,
                                        httplib::Response& res) { chat(req, body, res); });
    post("/v1/completions", [this](const httplib::Request& req, const std::string& body,
                                   httplib::Response& res) { complete(req, body, res); });
    // vLLM's tokenizer endpoints (llama.cpp's have the same paths): run on the HTTP thread, not queued.
    post("/tokenize", [this](const httplib::Request&, const std::string& body, httplib::Response& res) {
      tokenize(body, res);
    });
    post("/detokenize", [this](const httplib::Request&, const std::string& body, httplib::Response& res) {
      const std::vector<int32_t> ids =
          parse_detokenize_request(parse_json_body(body), served.limits);
      send_json(res, 200, detokenize_json(served.tokenizer.decode(ids)));
    });
  }

  void tokenize(const std::string& body, httplib::Response& res) {
    const TokenizeRequest r = parse_tokenize_request(parse_json_body(body), served.limits,
                                                     served.wants_argument_objects());
    const std::vector<int32_t> tokens = r.chat ? chat_prompt_tokens(served, *r.chat, r.add_generation_prompt)
                                               : served.tokenizer.encode(*r.text);
    std::vector<std::string> spellings;
    if (r.token_strs)
      for (int32_t id : tokens) spellings.push_back(served.tokenizer.token_spelling(id));
    send_json(res, 200, tokenize_json(tokens, served.limits.context_size, r.token_strs ? &spellings : nullptr));
  }

  // Runs a handler with the API key checked and every failure turned into an error response.
  template <typename F>
  void guarded(const httplib::Request& req, httplib::Response& res, F&& handler) {
    try {
      if (!options.api_key.empty()) {
        const std::string auth = req.get_header_value("Authorization");
        constexpr std::string_view bearer = "Bearer ";
        if (!auth.starts_with(bearer) || !same_secret(std::string_view(auth).substr(bearer.size()), options.api_key))
          throw unauthorized();
      }
      handler();
    } catch (const ApiError& e) {
      send_error(res, e);
    } catch (const Error& e) {
      send_error(res, invalid_request(e.what()));  // a library check the protocol layer did not anticipate
    }
  }

  // A POST route whose body is read here, under the size limit (httplib's own limit covers bodies with
  // a Content-Length; chunked bodies are counted as they arrive).
  using PostHandler = std::function<void(const httplib::Request&, const std::string&, httplib::Response&)>;
  void post(const std::string& path, PostHandler handler) {
    http.Post(path, httplib::Server::HandlerWithContentReader(
                        [this, handler](const httplib::Request& req, httplib::Response& res,
                                        const httplib::ContentReader& reader) {
                          std::string body;
                          bool too_big = false;
                          const bool ok = reader([&](const char* data, size_t n) {
                            if (body.size() + n > options.max_body_bytes) {
                              too_big = true;
                              return false;
                            }
                            body.append(data, n);
                            return true;
                          });
                          if (too_big || res.status == 413) {
                            res.set_header("Connection", "close");  // the rest of the body is never read
                            send_error(res, payload_too_large(options.max_body_bytes));
                            return;
                          }
                          if (!ok) {
                            res.set_header("Connection", "close");
                            send_error(res, invalid_request("could not read the request body"));
                            return;
                          }
                          guarded(req, res, [&] { handler(req, body, res); });
                        }));
    // A POST without a body never reaches a content-reader route.
    http.Post(path, httplib::Server::Handler([this, handler](const httplib::Request& req, httplib::Response& res) {
                guarded(req, res, [&] { handler(req, req.body, res); });
              }));
  }

  // Queues a request's choices together, choice i's generation made by make(i); 503 when the queue
  // cannot take them all.
  Jobs submit(int n, const std::function<GenerationRequest(int)>& make) {
    if (size_t(n) > options.max_queued)
      throw invalid_request(fmt::format("the request asks for {} generations (n, best_of, prompts), more than the {} "
                                        "this server queues (--queue)",
                                        n, options.max_queued),
                            "n");
    const auto deadline = Clock::now() + std::chrono::seconds(options.timeout_seconds);
    Jobs jobs;
    for (int i = 0; i < n; ++i) jobs.push_back(std::make_shared<GenerationJob>(make(i), deadline));
    if (!scheduler.submit(jobs))
      throw overloaded(fmt::format("the server is busy ({} requests waiting); retry later", options.max_queued));
    return jobs;
  }

  // Blocks until every job is done; 503 when one is still queued at its deadline. A client that hangs
  // up meanwhile cancels the jobs (the running one stops at its next token, the others never start).
  static std::vector<const GenerationResult*> wait_for(const Jobs& jobs, const httplib::Request& req) {
    const ClientWatch client(req);
    std::vector<const GenerationResult*> results;
    for (const auto& job : jobs) {
      for (;;) {
        GenerationJob::Update ignored;  // the result has it all
        if (job->wait(kPollInterval, ignored) == GenerationJob::State::Done) break;
        if (Clock::now() >= job->deadline() && job->withdraw()) {
          cancel_all(jobs);
          throw queue_timeout();
        }
        if (client.gone()) {
          cancel_all(jobs);
          throw client_closed();
        }
      }
      if (job->error()) {
        cancel_all(jobs);
        throw *job->error();
      }
      results.push_back(&job->result());
    }
    return results;
  }

  void chat(const httplib::Request& req, const std::string& body, httplib::Response& res) {
    ChatCompletionRequest r =
        parse_chat_completion_request(parse_json_body(body), served.limits, served.wants_argument_objects());
    ChatPrompt prompt = build_chat_prompt(served, r);
    const ReplyParser parser(prompt.starts_in_thinking, r.tools, r.tool_choice != ToolChoice::None);
    ResponseHeader header = new_response_header("chatcmpl", served.limits.id);
    const Jobs jobs = submit(r.options.n, [&](int choice) {
      return make_generation_request(served, prompt.tokens, choice_options(r.options, choice), &prompt);
    });
    const size_t max_tool_calls = r.parallel_tool_calls ? SIZE_MAX : 1;
    if (r.options.stream) {
      std::vector<std::shared_ptr<StreamFormat>> formats;
      for (size_t i = 0; i < jobs.size(); ++i)
        formats.push_back(std::make_shared<ChatStreamFormat>(header, i, parser, prompt.forced_prefix,
                                                             r.options.include_usage, r.options.logprobs.has_value(),
                                                             token_names(r.options), max_tool_calls));
      stream(res, jobs, std::move(formats),
             r.options.include_usage ? std::optional(usage_chunk_json(header, "chat.completion.chunk", {}))
                                     : std::nullopt,
             jobs.size());
      return;
    }
    const std::vector<const GenerationResult*> results = wait_for(jobs, req);
    ordered_json choices = ordered_json::array();
    for (size_t i = 0; i < results.size(); ++i) {
      const GenerationResult& result = *results[i];
      ReplyParser choice_parser = parser;
      ReplyDelta reply = choice_parser.feed(prompt.forced_prefix + result.text);
      ReplyDelta rest = choice_parser.finish();
      reply.reasoning += rest.reasoning;
      reply.content += rest.content;
      reply.tool_calls.insert(reply.tool_calls.end(), rest.tool_calls.begin(), rest.tool_calls.end());
      keep_first_calls(reply.tool_calls, max_tool_calls);
      choices.push_back(chat_choice_json(
          i, reply, finish_reason(result.finish, !reply.tool_calls.empty()),
          r.options.logprobs ? chat_logprobs_json(result.logprobs, token_names(r.options)) : nullptr));
    }
    send_json(res, 200, chat_completion_json(header, std::move(choices), usage_of(results, results.size())));
  }

  // Choice i's options: the request's, sampling with seed + i.
  static GenerationOptions choice_options(const GenerationOptions& o, int choice) {
    GenerationOptions c = o;
    c.sampling.seed += uint64_t(choice);
    return c;
  }

  TokenNames token_names(const GenerationOptions& o) const {
    return {[tokenizer = served.tokenizer](int32_t id) { return tokenizer.sampled_bytes(id); }, o.tokens_as_ids};
  }

  void complete(const httplib::Request& req, const std::string& body, httplib::Response& res) {
    CompletionRequest r = parse_completion_request(parse_json_body(body), served.limits);
    ResponseHeader header = new_response_header("cmpl", served.limits.id);
    std::vector<std::vector<int32_t>> prompts;
    std::vector<std::string> echoes;  // a prompt as the model saw it: its tokens' bytes (so text offsets line up)
    for (const CompletionPrompt& p : r.prompts) {
      prompts.push_back(build_completion_prompt(served, p));
      echoes.emplace_back();
      if (r.echo)
        for (int32_t id : prompts.back()) echoes.back() += served.tokenizer.sampled_bytes(id);
    }
    // Generation k is candidate k % per_prompt of prompt k / per_prompt; best_of ranks by logprobs.
    const int per_prompt = std::max(r.best_of, r.options.n);
    const Jobs jobs = submit(r.generations(), [&](int k) {
      GenerationOptions o = choice_options(r.options, k % per_prompt);
      if (r.best_of > 1 && !o.logprobs) o.logprobs = 0;
      return make_generation_request(served, prompts[size_t(k / per_prompt)], o);
    });
    if (r.options.stream) {  // never with best_of > 1: index k is choice k % n of prompt k / n
      std::vector<std::shared_ptr<StreamFormat>> formats;
      for (size_t k = 0; k < jobs.size(); ++k)
        formats.push_back(std::make_shared<CompletionStreamFormat>(header, k, r.options.include_usage, r,
                                                                   prompts[k / per_prompt], echoes[k / per_prompt],
                                                                   token_names(r.options)));
      stream(res, jobs, std::move(formats),
             r.options.include_usage ? std::optional(usage_chunk_json(header, "text_completion", {})) : std::nullopt,
             size_t(per_prompt));
      return;
    }
    const std::vector<const GenerationResult*> results = wait_for(jobs, req);
    ordered_json choices = ordered_json::array();
    for (size_t p = 0; p < prompts.size(); ++p) {
      std::vector<const GenerationResult*> candidates(results.begin() + p * per_prompt,
                                                      results.begin() + (p + 1) * per_prompt);
      if (r.best_of > 1)
        std::stable_sort(candidates.begin(), candidates.end(), [](const auto* a, const auto* b) {
          return mean_logprob(*a) > mean_logprob(*b);
        });
      for (int j = 0; j < r.options.n; ++j) {
        const GenerationResult& result = *candidates[j];
        ordered_json logprobs = nullptr;
        if (r.options.logprobs) {
          std::vector<TokenLogprob> entries = result.prompt_logprobs;  // empty without echo
          entries.insert(entries.end(), result.logprobs.begin(), result.logprobs.end());
          size_t offset = 0;
          logprobs = completion_logprobs_json(r.echo ? std::optional(prompts[p].front()) : std::nullopt, entries,
                                              token_names(r.options), offset);
        }
        choices.push_back(completion_choice_json(p * r.options.n + j, echoes[p] + result.text,
                                                 finish_reason(result.finish, false), std::move(logprobs)));
      }
    }
    send_json(res, 200, completion_json(header, std::move(choices), usage_of(results, per_prompt)));
  }

  // A stream's place: the choice being sent (choices go one after another, as their jobs run).
  struct StreamState {
    Jobs jobs;
    std::vector<std::shared_ptr<StreamFormat>> formats;
    std::optional<ordered_json> usage_chunk;  // include_usage: the last chunk, its usage filled in at the end
    size_t per_prompt = 1;                    // usage_of's grouping
    std::vector<const GenerationResult*> results;
    size_t current = 0;
    bool begun = false;  // the current choice's first chunks are out
    Clock::time_point last_write = Clock::now();
  };

  // Streams the jobs as server-sent events. The provider runs on this request's HTTP thread after the
  // handler returns; a failed write means the client left, which cancels the generation.
  static void stream(httplib::Response& res, Jobs jobs, std::vector<std::shared_ptr<StreamFormat>> formats,
                     std::optional<ordered_json> usage_chunk, size_t per_prompt) {
    auto state = std::make_shared<StreamState>();
    state->per_prompt = per_prompt;
    state->jobs = std::move(jobs);
    state->formats = std::move(formats);
    state->usage_chunk = std::move(usage_chunk);
    res.status = 200;
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [state](size_t, httplib::DataSink& sink) {
          // httplib does not catch here: an exception would end the process, so it ends the stream.
          try {
            return write_events(*state, sink);
          } catch (const std::exception&) {
            cancel_all(state->jobs);
            return false;
          }
        },
        [state](bool success) {
          if (!success) cancel_all(state->jobs);
        });
  }

  // One step of a stream: waits briefly for the current job, writes what it has; false when the client left.
  static bool write_events(StreamState& s, httplib::DataSink& sink) {
    GenerationJob& job = *s.jobs[s.current];
    StreamFormat& format = *s.formats[s.current];
    std::string out;
    if (!s.begun) {
      out += format.begin();
      s.begun = true;
    }
    GenerationJob::Update update;
    const bool done = job.wait(kPollInterval, update) == GenerationJob::State::Done;
    const bool expired = !done && Clock::now() >= job.deadline() && job.withdraw();
    out += format.update(update);
    bool finished = false;  // the stream is over
    if (expired || (done && job.error())) {
      out += sse_event(error_json(expired ? queue_timeout() : *job.error()));
      cancel_all(s.jobs);
      finished = true;
    } else if (done) {
      out += format.end(job.result());
      s.results.push_back(&job.result());
      s.begun = false;
      finished = ++s.current == s.jobs.size();
      if (finished && s.usage_chunk) {
        (*s.usage_chunk)["usage"] = usage_json(usage_of(s.results, s.per_prompt));
        out += sse_event(*s.usage_chunk);
      }
    }
    if (finished) out += kSseDone;
    if (out.empty() && Clock::now() - s.last_write >= kKeepAliveInterval) out = ": keep-alive\n\n";
    if (!out.empty()) {
      if (!sink.write(out.data(), out.size())) {
        cancel_all(s.jobs);
        return false;
      }
      s.last_write = Clock::now();
    }
    if (finished) sink.done();
    return true;
  }
};

HttpServer::HttpServer(ServedModel served, Engine& engine, ServerOptions options)
    : impl_(std::make_unique<Impl>(std::move(served), engine, std::move(options))) {}

HttpServer::~HttpServer() { stop(); }

int HttpServer::bind() {
  const ServerOptions& o = impl_->options;
  const int port = o.port == 0 ? impl_->http.bind_to_any_port(o.host) : (impl_->http.bind_to_port(o.host, o.port) ? o.port : -1);
  if (port < 0) fail("cannot listen on {}:{} (address in use or not local?)", o.host, o.port);
  if (!impl_->http.widen_backlog()) fail("cannot set the listen backlog on {}:{}", o.host, port);
  return port;
}

void HttpServer::run() { impl_->http.listen_after_bind(); }

void HttpServer::stop() {
  // Cancel generations first, so the streams they feed end and httplib's threads can be joined.
  impl_->scheduler.stop();
  impl_->http.stop();
}

}  // namespace megaqwen::server
