#include "megaqwen/grammar/xml_tool_call_grammar.h"

#include <algorithm>

#include "megaqwen/util/error.h"

namespace megaqwen {

namespace {

using ojson = nlohmann::ordered_json;
using Outcome = XmlToolCallGrammar::Outcome;
using Value = XmlToolCallGrammar::Value;

// What the parser reads as a name or a key: the text up to '>', trimmed; so no '>', '<' or
// newline inside, and nothing trimming would change.
bool fits_in_tag(const std::string& s) {
  if (s.empty() || s.size() > JsonGrammar::kMaxLiteralBytes || s.find_first_of("<>\n") != std::string::npos)
    return false;
  const std::string_view space = " \t\r";
  return space.find(s.front()) == std::string_view::npos && space.find(s.back()) == std::string_view::npos;
}

bool spells_close_tag(const std::string& s) { return s.find("</parameter>") != std::string::npos; }

// A JSON value may not hold "</parameter>" either (the parser ends the value there), and the model
// can always write a string's '/' as "\/", except where the schema fixes the bytes: an enum or
// const string, a property name, a pattern that spells the tag. Those could leave the value no way
// on, so they are refused wherever they are in the parameters' schema. (As for text values, a pattern
// reaching the tag only through escapes or classes is not caught.)
void refuse_fixed_close_tag(const ojson& s, const std::string& path) {
  if (s.is_string()) return;
  if (s.is_object()) {
    for (const auto& [key, sub] : s.items()) {
      const std::string at = path + "." + key;
      if (key == "pattern" && sub.is_string()) {
        const std::string p = sub.get<std::string>();
        if (p.find("parameter>") != std::string::npos || p.find("</param") != std::string::npos)
          fail("{}: the pattern spells \"</parameter>\", which no parameter value may hold", at);
      } else if ((key == "enum" || key == "const") && spells_close_tag(sub.dump())) {
        fail("{}: a value holds \"</parameter>\", which no parameter value may hold", at);
      } else if (key == "properties" && sub.is_object()) {
        for (const auto& [name, schema] : sub.items()) {
          if (spells_close_tag(name)) fail("{}: the property name \"{}\" holds \"</parameter>\"", at, name);
          refuse_fixed_close_tag(schema, at + "." + name);
        }
      } else if (key != "description" && key != "title" && key != "default" && key != "examples") {
        refuse_fixed_close_tag(sub, at);
      }
    }
  } else if (s.is_array()) {
    for (size_t i = 0; i < s.size(); ++i) refuse_fixed_close_tag(s[i], path + "[" + std::to_string(i) + "]");
  }
}

class Compiler {
 public:
  explicit Compiler(XmlToolCallGrammar& g) : g_(g) {}

  int choice(std::vector<std::pair<std::string, Outcome>> options, const std::string& what) {
    std::sort(options.begin(), options.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    XmlToolCallGrammar::Choice c;
    for (auto& [text, outcome] : options) {
      if (!c.texts.empty() && c.texts.back() == text) fail("{}: \"{}\" is given twice", what, text);
      c.texts.push_back(std::move(text));
      c.outcomes.push_back(outcome);
    }
    g_.choices.push_back(std::move(c));
    return int(g_.choices.size()) - 1;
  }

  // A parameter's value, followed by `next` once its closing tag is written.
  Value value(const ojson& schema, int node, const JsonGrammar& json, Outcome next, const std::string& path) {
    Value v;
    const bool text = schema.is_object() && schema.contains("type") && schema.at("type") == "string";
    if (!text) {
      v.kind = Value::Kind::Json;
      v.node = node;
      v.close_choice = choice({{"\n</parameter>\n", next}}, path);
      return v;
    }
    const JsonGrammar::Node& n = json.nodes[size_t(node)];
    if (n.kind == JsonGrammar::Kind::String) {
      v.kind = Value::Kind::Text;
      v.min = n.min;
      v.max = n.max;
      v.pattern = n.pattern;
      v.close_choice = choice({{"</parameter>\n", next}}, path);
      return v;
    }
    if (n.kind != JsonGrammar::Kind::Literals) fail("{}: a string parameter of this form cannot be written as text", path);
    std::vector<std::pair<std::string, Outcome>> options;
    for (const std::string& literal : n.literals) {
      const ojson decoded = ojson::parse(literal);
      if (!decoded.is_string()) fail("{}: the enum of a string parameter holds {}", path, literal);
      const std::string s = decoded.get<std::string>();  // refuse_fixed_close_tag: no "</parameter>"
      options.push_back({s + "\n</parameter>\n", next});
    }
    v.kind = Value::Kind::TextEnum;
    v.value_choice = choice(std::move(options), path);
    return v;
  }

  void tool(const ojson& fn, uint32_t index) {
    XmlToolCallGrammar::Tool t;
    t.name = fn.at("name").get<std::string>();
    const std::string path = "tool " + t.name;
    if (!fits_in_tag(t.name)) fail("{}: the name cannot be written in <function=...>", path);
    const ojson params = fn.contains("parameters") && fn.at("parameters").is_object() ? fn.at("parameters")
                                                                                      : ojson::object();
    std::shared_ptr<const JsonGrammar> json;
    try {
      json = std::make_shared<const JsonGrammar>(JsonGrammar::from_schema(params, path + ".parameters"));
      if (json->nodes[size_t(json->root)].kind != JsonGrammar::Kind::Object) json.reset();
    } catch (const Error&) {
      json.reset();  // the arguments are the model's: any keys with any text
    }
    if (!json) {
      json = std::make_shared<const JsonGrammar>(JsonGrammar::object());
      t.extra = Value{};
      t.extra->close_choice = choice({{"</parameter>\n", {Outcome::Kind::Parameters, index, 0}}}, path);
    } else {
      refuse_fixed_close_tag(params, path + ".parameters");
      const JsonGrammar::Node& root = json->nodes[size_t(json->root)];
      const ojson props = params.value("properties", ojson::object());
      size_t i = 0;
      for (const auto& [key, schema] : props.items()) {
        if (!fits_in_tag(key)) fail("{}: the parameter \"{}\" cannot be written in <parameter=...>", path, key);
        const JsonGrammar::Property& p = root.properties.at(i);
        const Outcome next{Outcome::Kind::Parameters, index, uint32_t(i + 1)};
        t.params.push_back({key, p.required, value(schema, p.node, *json, next, path + ".parameters." + key)});
        ++i;
      }
      // Free keys come after the declared parameters, and more may follow each.
      const Outcome next{Outcome::Kind::Parameters, index, uint32_t(t.params.size())};
      if (root.additional == json->any) {
        t.extra = Value{};
        t.extra->close_choice = choice({{"</parameter>\n", next}}, path);
      } else if (root.additional >= 0) {
        t.extra = value(ojson::object(), root.additional, *json, next, path + ".additionalProperties");
      }
    }
    for (size_t p = 0; p <= t.params.size(); ++p) {
      std::vector<std::pair<std::string, Outcome>> options;
      bool required_left = false;
      for (size_t j = p; j < t.params.size(); ++j) {
        options.push_back({"<parameter=" + t.params[j].key + ">\n", {Outcome::Kind::Value, index, uint32_t(j)}});
        if (t.params[j].required) {
          required_left = true;
          break;
        }
      }
      if (!required_left) options.push_back({"</function>\n</tool_call>", {Outcome::Kind::Done, index, 0}});
      t.params_choice.push_back(choice(std::move(options), path));
    }
    for (const auto& p : t.params) t.declared_keys.push_back(p.key);
    std::sort(t.declared_keys.begin(), t.declared_keys.end());
    t.json = std::move(json);
    g_.tools.push_back(std::move(t));
  }

 private:
  XmlToolCallGrammar& g_;
};

}  // namespace

XmlToolCallGrammar XmlToolCallGrammar::from_tools(const std::vector<ojson>& tools, const std::string& forced) {
  XmlToolCallGrammar g;
  Compiler compiler(g);
  for (const ojson& tool : tools) {
    const ojson& fn = tool.at("function");
    const std::string name = fn.at("name").get<std::string>();
    if (!forced.empty() && name != forced) continue;
    compiler.tool(fn, uint32_t(g.tools.size()));
  }
  if (g.tools.empty()) fail("tool call: no tool named \"{}\"", forced);
  if (!forced.empty()) {
    g.forced_tool = 0;
  } else {
    std::vector<std::pair<std::string, Outcome>> names;
    for (size_t i = 0; i < g.tools.size(); ++i)
      names.push_back({g.tools[i].name + ">\n", {Outcome::Kind::Parameters, uint32_t(i), 0}});
    g.name_choice = compiler.choice(std::move(names), "tool names");
  }
  return g;
}

}  // namespace megaqwen
