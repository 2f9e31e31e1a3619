// megaqwen: the command-line front end. Subcommands are thin: parse flags, call the library,
// print. Any megaqwen::Error becomes one line on stderr and exit status 1.
#include <cstdio>
#include <exception>

#include "cli/commands.h"
#include "megaqwen/util/error.h"

int main(int argc, char** argv) {
  CLI::App app{"megaqwen: fast, exact inference for Qwen models", "megaqwen"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "megaqwen 0.1.0");
  megaqwen::cli::add_info_command(app);
  megaqwen::cli::add_synth_command(app);
  megaqwen::cli::add_generate_command(app);
  megaqwen::cli::add_logits_command(app);
  megaqwen::cli::add_bench_command(app);
  megaqwen::cli::add_template_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const megaqwen::Error& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "megaqwen: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "megaqwen: internal error: %s\n", e.what());
    return 2;
  }
  return 0;
}
