#include "megaqwen/chat/chat_template.h"

#include <array>

#include "megaqwen/chat/qwen35_template.h"
#include "megaqwen/chat/qwen3_template.h"
#include "megaqwen/util/error.h"
#include "megaqwen/util/text_file.h"

namespace megaqwen {
namespace {

struct KnownTemplate {
  std::uint64_t fingerprint;
  std::shared_ptr<const ChatTemplate::Renderer> renderer;
};

// Every template translated so far, by the fingerprint of the exact text it translates.
const std::array<KnownTemplate, 2>& known_templates() {
  static const std::array<KnownTemplate, 2> known = {{
      {kQwen3TemplateFingerprint, std::make_shared<Qwen3Template>()},
      {kQwen35TemplateFingerprint, std::make_shared<Qwen35Template>()},
  }};
  return known;
}

// tokenizer_config.json's "chat_template": a string, or a list of {"name", "template"} of which the
// one named "default" is what apply_chat_template uses.
std::string template_from_tokenizer_config(const std::filesystem::path& path) {
  nlohmann::json config;
  try {
    config = nlohmann::json::parse(read_text_file(path));
  } catch (const nlohmann::json::exception& e) {
    fail("{}: invalid JSON: {}", path.string(), e.what());
  }
  const auto it = config.find("chat_template");
  if (it == config.end() || it->is_null()) fail("{} has no chat_template", path.string());
  if (it->is_string()) return it->get<std::string>();
  if (it->is_array()) {
    for (const auto& entry : *it) {
      if (entry.is_object() && entry.value("name", "") == "default" && entry.contains("template") &&
          entry["template"].is_string()) {
        return entry["template"].get<std::string>();
      }
    }
    fail("{}: chat_template is a list without a \"default\" entry", path.string());
  }
  fail("{}: chat_template must be a string, not {}", path.string(), it->type_name());
}

}  // namespace

std::uint64_t chat_template_fingerprint(std::string_view template_text) {
  while (template_text.ends_with('\n')) template_text.remove_suffix(1);
  std::uint64_t hash = 0xcbf29ce484222325ULL;
  for (const char c : template_text) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

ChatTemplate ChatTemplate::from_text(std::string_view template_text) {
  const std::uint64_t fingerprint = chat_template_fingerprint(template_text);
  std::string names;
  for (const KnownTemplate& known : known_templates()) {
    if (known.fingerprint == fingerprint) return ChatTemplate(known.renderer);
    names += (names.empty() ? "" : ", ") + std::string(known.renderer->name());
  }
  fail("unrecognized chat template (fingerprint {:016x}); the translated ones are {}", fingerprint, names);
}

ChatTemplate ChatTemplate::load(const std::filesystem::path& model_dir) {
  const auto jinja = model_dir / "chat_template.jinja";
  const auto config = model_dir / "tokenizer_config.json";
  std::filesystem::path source;
  std::string text;
  if (std::filesystem::exists(jinja)) {
    source = jinja;
    text = read_text_file(jinja);
  } else if (std::filesystem::exists(config)) {
    source = config;
    text = template_from_tokenizer_config(config);
  } else {
    fail("{}: no chat template (neither chat_template.jinja nor tokenizer_config.json)", model_dir.string());
  }
  try {
    return from_text(text);
  } catch (const Error& e) {
    fail("{}: {}", source.string(), e.what());
  }
}

std::string ChatTemplate::render(const nlohmann::ordered_json& request) const {
  return renderer_->render(parse_chat_request(request));
}

}  // namespace megaqwen
