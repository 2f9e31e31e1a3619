// The subcommands of the `megaqwen` executable. Each lives in its own cmd_*.cpp and
// registers itself on the CLI11 app; the work itself is done by the library.
#pragma once

#include <CLI/CLI.hpp>

namespace megaqwen::cli {

void add_info_command(CLI::App& app);
void add_synth_command(CLI::App& app);
void add_generate_command(CLI::App& app);
void add_logits_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_chat_command(CLI::App& app);
void add_template_command(CLI::App& app);
void add_tokenize_command(CLI::App& app);
void add_serve_command(CLI::App& app);
void add_verify_command(CLI::App& app);
void add_perplexity_command(CLI::App& app);

}  // namespace megaqwen::cli
