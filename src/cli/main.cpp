// megaqwen: the command-line front end. Subcommands are thin: parse flags, call the library,
// print. Any megaqwen::Error (and any bad flag) becomes one line on stderr and exit status 1.
#include <cstdio>
#include <exception>
#include <filesystem>
#include <string>

#include "cli/commands.h"
#include "megaqwen/util/error.h"

namespace {

// Messages quote untrusted text (tensor names, JSON values, paths): escape control characters so
// the error stays one line, and cap its length.
std::string one_line(const std::string& message) {
  constexpr size_t kMaxChars = 4000;
  std::string out;
  for (unsigned char ch : message) {
    if (out.size() >= kMaxChars) {
      out += "...";
      break;
    }
    if (ch == '\n') out += "\\n";
    else if (ch == '\r') out += "\\r";
    else if (ch == '\t') out += "\\t";
    else if (ch < 0x20 || ch == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", ch);
      out += buf;
    } else {
      out += char(ch);
    }
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

int report(const char* kind, const std::string& message, int status) {
  std::fflush(stdout);
  std::fprintf(stderr, "megaqwen: %s: %s\n", kind, one_line(message).c_str());
  return status;
}

}  // namespace

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
  megaqwen::cli::add_tokenize_command(app);
  megaqwen::cli::add_chat_command(app);
  megaqwen::cli::add_serve_command(app);
  megaqwen::cli::add_verify_command(app);
  megaqwen::cli::add_perplexity_command(app);
  try {
    // CLI11 would only say "A subcommand is required" for a mistyped one: name it.
    if (argc > 1 && argv[1][0] != '-' &&
        app.get_subcommands([&](const CLI::App* c) { return c->check_name(argv[1]); }).empty()) {
      std::string names;
      for (const CLI::App* c : app.get_subcommands([](const CLI::App*) { return true; }))
        names += (names.empty() ? "" : ", ") + c->get_name();
      return report("error", std::string("unknown command '") + argv[1] + "'; commands: " + names, 1);
    }
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version arrive as "errors" with a success code; real ones get one line too.
    if (e.get_exit_code() == int(CLI::ExitCodes::Success)) return app.exit(e);
    return report("error", std::string(e.what()) + " (run with --help for usage)", 1);
  } catch (const megaqwen::Error& e) {
    return report("error", e.what(), 1);
  } catch (const std::filesystem::filesystem_error& e) {
    // A path the user gave that the OS refuses (too long, no permission): not a bug of ours.
    return report("error", e.what(), 1);
  } catch (const std::exception& e) {
    return report("internal error", e.what(), 2);
  }
  return 0;
}
