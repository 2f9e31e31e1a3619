// megaqwen serve: the OpenAI-compatible HTTP server and chat page (src/megaqwen/server). Prints one
// "listening on http://HOST:PORT" line once it accepts connections (tests read the port from it, with
// --port 0), and shuts down cleanly on SIGINT or SIGTERM.
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <thread>

#include "cli/commands.h"
#include "cli/common_options.h"
#include "megaqwen/engine/state_file_store.h"
#include "megaqwen/model/model.h"
#include "megaqwen/server/http_server.h"
#include "megaqwen/util/error.h"

namespace megaqwen::cli {

namespace {

struct ServeArgs {
  ModelArgs model;
  server::ServerOptions server;
  std::string model_name;
  double max_body_mib = 8;
  double cache_ram_mib = 4096;
  double cache_vram_mib = 4096;
  std::string cache_dir;
  double cache_disk_mib = 16384;
};

void run_serve(ServeArgs a) {
  // Block the stop signals before any thread starts (the engine's pool included), so every thread
  // inherits the mask and only the watcher below receives them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a vanished client is a failed write, not the end of the server

  auto model = a.model.load();
  EngineOptions options = a.model.engine;
  if (options.context == 0) options.context = std::min(model->config.context_limit(), 8192);
  auto engine = create_engine(model, options);
  server::ServedModel served = server::ServedModel::load(model, engine->context_size(), a.model_name);
  const std::string model_id = served.limits.id;
  a.server.max_body_bytes = size_t(a.max_body_mib * 1024 * 1024);
  a.server.prompt_cache.host_budget_bytes = uint64_t(a.cache_ram_mib * 1024 * 1024);
  a.server.prompt_cache.device_budget_bytes = uint64_t(a.cache_vram_mib * 1024 * 1024);

  std::shared_ptr<StateFileStore> store;
  if (!a.cache_dir.empty()) {
    store = std::make_shared<StateFileStore>(a.cache_dir, uint64_t(a.cache_disk_mib * 1024 * 1024), model,
                                             engine->state_format());
    a.server.prompt_cache.disk = store;
    std::printf("megaqwen serve: prompt cache folder %s: %zu conversations (%.1f MB) from earlier runs",
                a.cache_dir.c_str(), store->entries(), double(store->bytes()) / 1e6);
    if (store->skipped_files() > 0)
      std::printf("; %zu files of other models or engines left alone", store->skipped_files());
    std::printf("\n");
  }

  server::HttpServer http(std::move(served), *engine, a.server);
  const int port = http.bind();
  std::atomic<bool> finished{false};
  std::thread watcher([&] {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    if (!finished) std::fprintf(stderr, "megaqwen serve: signal %d, shutting down\n", sig);
    http.stop();
  });
  std::printf("megaqwen serve: listening on http://%s:%d (model %s, %s, context %d tokens)\n",
              a.server.host.c_str(), port, model_id.c_str(), engine->device_name().c_str(), engine->context_size());
  std::fflush(stdout);
  http.run();
  finished = true;
  kill(getpid(), SIGTERM);  // wake the watcher if the server stopped for another reason
  watcher.join();
  if (store)
    std::printf("megaqwen serve: prompt cache folder %s holds %zu conversations (%.1f MB)\n", a.cache_dir.c_str(),
                store->entries(), double(store->bytes()) / 1e6);
}

}  // namespace

void add_serve_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server with a chat page");
  auto a = std::make_shared<ServeArgs>();
  a->model.add_to(cmd);
  cmd->add_option("--host", a->server.host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", a->server.port, "Port (0: any free port)")->capture_default_str()->check(CLI::Range(0, 65535));
  cmd->add_option("--api-key", a->server.api_key, "Require 'Authorization: Bearer KEY' on /v1/*")
      ->envname("MEGAQWEN_API_KEY");
  cmd->add_option("--model-name", a->model_name, "Model id clients use (default: the folder's name)");
  cmd->add_option("--queue", a->server.max_queued, "Most requests waiting for the engine; more get 503")
      ->capture_default_str()->check(CLI::Range(1, 4096));
  cmd->add_option("--timeout", a->server.timeout_seconds, "Seconds a request may take, queueing included")
      ->capture_default_str()->check(CLI::Range(1, 86400));
  cmd->add_option("--max-body-mib", a->max_body_mib, "Largest request body in MiB; larger get 413")
      ->capture_default_str()->check(CLI::Range(0.001, 1024.0));
  cmd->add_option("--cache-ram", a->cache_ram_mib,
                  "MiB of host memory for conversations set aside between requests, so clients taking turns "
                  "do not prefill their whole history again (CPU engines; 0: off)")
      ->capture_default_str()->check(CLI::Range(0.0, 1048576.0));
  cmd->add_option("--cache-vram", a->cache_vram_mib,
                  "The same on the GPU: MiB of device memory for conversations set aside (CUDA engines; 0: off)")
      ->capture_default_str()->check(CLI::Range(0.0, 1048576.0));
  cmd->add_option("--cache-dir", a->cache_dir,
                  "Folder behind the prompt cache: conversations evicted from memory are written there and read "
                  "back when they come again, and all of them when the server stops, so they outlive a restart");
  cmd->add_option("--cache-disk", a->cache_disk_mib, "MiB the --cache-dir folder may hold (least recently used go)")
      ->capture_default_str()->check(CLI::Range(1.0, 1.0e9));
  cmd->callback([a] { run_serve(*a); });
}

}  // namespace megaqwen::cli
