// megaqwen template --model DIR: renders the chat request read on stdin with the model's chat
// template and prints the exact prompt text, byte for byte (no newline added). Needs only the
// folder's tokenizer_config.json or chat_template.jinja, no weights.
#include <cstdio>
#include <iostream>
#include <iterator>

#include "cli/commands.h"
#include "megaqwen/chat/chat_template.h"
#include "megaqwen/util/error.h"

namespace megaqwen::cli {

void add_template_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "template", "Print the prompt a chat request (JSON on stdin) renders to with the model's chat template");
  auto model = std::make_shared<std::string>();
  cmd->add_option("-m,--model", *model, "Model folder (tokenizer_config.json or chat_template.jinja)")->required();
  cmd->callback([model] {
    const ChatTemplate chat = ChatTemplate::load(*model);
    const std::string input{std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>()};
    nlohmann::ordered_json request;
    try {
      request = nlohmann::ordered_json::parse(input);
    } catch (const nlohmann::json::parse_error& e) {
      fail("the chat request on stdin is not valid JSON: {}", e.what());
    }
    const std::string prompt = chat.render(request);
    std::fwrite(prompt.data(), 1, prompt.size(), stdout);
  });
}

}  // namespace megaqwen::cli
