// HttpServer: the OpenAI-compatible HTTP front of one engine (cpp-httplib underneath).
//
//   GET  /                      the chat page (chat_page.h)
//   GET  /health                {"status": "ok"}
//   GET  /metrics               Prometheus text (metrics.h)
//   GET  /v1/models             the one served model
//   POST /v1/chat/completions   chat, streamed as server-sent events when "stream": true
//   POST /v1/completions        raw text or token-id prompts
//
// Requests are checked on the HTTP threads (openai_protocol.h, served_model.h) and then queued to the
// engine's single worker (scheduler.h). A streamed request whose client goes away is cancelled at its
// next token; every request is bounded by a deadline and every body by a size limit.
#pragma once

#include <memory>
#include <string>

#include "megaqwen/engine/engine.h"
#include "megaqwen/engine/prompt_cache.h"
#include "megaqwen/server/served_model.h"

namespace megaqwen::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                      // 0: any free port (bind() says which)
  std::string api_key;                  // "": no authentication
  size_t max_queued = 64;               // waiting requests beyond this get 503
  int timeout_seconds = 600;            // a request's whole life, queueing included
  size_t max_body_bytes = 8u << 20;     // larger bodies get 413
  PromptCacheOptions prompt_cache;      // conversations set aside between requests (--cache-ram)
};

class HttpServer {
 public:
  HttpServer(ServedModel served, Engine& engine, ServerOptions options);
  ~HttpServer();

  int bind();   // binds the socket and returns the port; Error when the address is unusable
  void run();   // serves until stop()
  void stop();  // from any thread: stops listening, cancels queued and running generations

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace megaqwen::server
