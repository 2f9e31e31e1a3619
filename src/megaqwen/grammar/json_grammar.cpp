#include "megaqwen/grammar/json_grammar.h"

#include <algorithm>
#include <map>
#include <set>

#include "megaqwen/util/error.h"

namespace megaqwen {

namespace {

using ojson = nlohmann::ordered_json;
using Kind = JsonGrammar::Kind;
using Node = JsonGrammar::Node;

// Keywords that constrain values in ways this grammar does not enforce: refused, not ignored.
const std::set<std::string> kUnsupported = {
    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
    "patternProperties", "propertyNames", "minProperties", "maxProperties", "dependentRequired",
    "dependentSchemas", "dependencies", "prefixItems", "additionalItems", "contains", "minContains",
    "maxContains", "uniqueItems", "unevaluatedItems", "unevaluatedProperties", "not", "if", "then", "else",
    "$dynamicRef", "$recursiveRef", "contentSchema"};
const char* kSupportedList =
    "type, properties, required, additionalProperties, items, minItems, maxItems, minLength, maxLength, pattern, "
    "format, enum, const, anyOf, oneOf, allOf (of one schema), $ref";

const std::set<std::string> kObjectWords = {"properties", "required", "additionalProperties"};
const std::set<std::string> kArrayWords = {"items", "minItems", "maxItems"};
const std::set<std::string> kStringWords = {"minLength", "maxLength", "pattern", "format"};

Node node_of(Kind kind) {
  Node n;
  n.kind = kind;
  return n;
}

bool has_any(const ojson& s, const std::set<std::string>& words) {
  return std::any_of(words.begin(), words.end(), [&](const std::string& w) { return s.contains(w); });
}

// Whether a literal JSON value is of a JSON Schema type.
bool is_of_type(const ojson& v, const std::string& type) {
  if (type == "object") return v.is_object();
  if (type == "array") return v.is_array();
  if (type == "string") return v.is_string();
  if (type == "boolean") return v.is_boolean();
  if (type == "null") return v.is_null();
  if (type == "integer") return v.is_number_integer() || (v.is_number_float() && v.get<double>() == double(int64_t(v.get<double>())));
  return v.is_number();  // "number"
}

class SchemaCompiler {
 public:
  SchemaCompiler(const ojson& root, std::string name) : root_(root), name_(std::move(name)) {}

  JsonGrammar run() {
    g_.any = make_any();
    g_.key_string = add(node_of(Kind::String));
    g_.root = compile(root_, name_, 0);
    check_no_empty_cycles();
    flatten_alternatives();
    return std::move(g_);
  }

  // The grammar of any JSON object.
  JsonGrammar object() {
    g_.any = make_any();
    g_.key_string = add(node_of(Kind::String));
    Node n = node_of(Kind::Object);
    n.additional = g_.any;
    g_.root = add(std::move(n));
    return std::move(g_);
  }

 private:
  int add(Node n) {
    g_.nodes.push_back(std::move(n));
    return int(g_.nodes.size()) - 1;
  }

  int literals(std::vector<std::string> texts) {
    std::sort(texts.begin(), texts.end());
    texts.erase(std::unique(texts.begin(), texts.end()), texts.end());
    Node n = node_of(Kind::Literals);
    n.literals = std::move(texts);
    return add(std::move(n));
  }

  int make_any() {
    const int any = add(node_of(Kind::AnyOf));
    Node obj = node_of(Kind::Object);
    obj.additional = any;
    Node arr = node_of(Kind::Array);
    arr.items = any;
    const int o = add(std::move(obj)), a = add(std::move(arr));
    const int s = add(node_of(Kind::String)), n = add(node_of(Kind::Number));
    const int l = literals({"false", "null", "true"});
    g_.nodes[size_t(any)].alternatives = {o, a, s, n, l};
    return any;
  }

  static uint32_t count_field(const ojson& s, const char* key, const std::string& path) {
    const ojson& v = s.at(key);
    if (!v.is_number_integer() || v.get<int64_t>() < 0)
      fail("{}.{}: must be a non-negative integer, got {}", path, key, v.dump());
    return uint32_t(std::min<int64_t>(v.get<int64_t>(), int64_t(JsonGrammar::kUnbounded) - 1));
  }

  // [min, max] from two optional count keywords.
  static void bounds(const ojson& s, const char* min_key, const char* max_key, const std::string& path, Node& n) {
    if (s.contains(min_key)) n.min = count_field(s, min_key, path);
    if (s.contains(max_key)) n.max = count_field(s, max_key, path);
    if (n.min > n.max) fail("{}: {} {} exceeds {} {}: no value fits", path, min_key, n.min, max_key, n.max);
  }

  int compile(const ojson& s, const std::string& path, int depth) {
    if (depth > 64) fail("{}: the schema nests deeper than 64 levels", path);
    if (s.is_boolean()) {
      if (s.get<bool>()) return g_.any;
      fail("{}: the schema false admits no value", path);
    }
    if (!s.is_object()) fail("{}: a schema must be an object or a boolean, got {}", path, s.type_name());
    for (const auto& [key, value] : s.items())
      if (kUnsupported.count(key))
        fail("{}: the keyword \"{}\" is not supported for constrained output (supported: {})", path, key,
             kSupportedList);

    if (s.contains("$ref")) return reference(s, path, depth);
    for (const char* combinator : {"anyOf", "oneOf"})
      if (s.contains(combinator)) return any_of(s, combinator, path, depth);
    if (s.contains("allOf")) {
      const ojson& all = s.at("allOf");
      if (!all.is_array() || all.size() != 1 || s.contains("type") || s.contains("enum") || s.contains("const"))
        fail("{}.allOf: only an allOf of one schema, alone, is supported", path);
      return compile(all[0], path + ".allOf[0]", depth + 1);
    }

    std::vector<std::string> types;
    if (s.contains("type")) {
      const ojson& t = s.at("type");
      if (t.is_string()) {
        types.push_back(t.get<std::string>());
      } else if (t.is_array() && !t.empty()) {
        for (const ojson& e : t) {
          if (!e.is_string()) fail("{}.type: the list must hold type names, got {}", path, e.dump());
          types.push_back(e.get<std::string>());
        }
      } else {
        fail("{}.type: must be a type name or a non-empty list of them, got {}", path, t.dump());
      }
      for (const std::string& t2 : types)
        if (t2 != "object" && t2 != "array" && t2 != "string" && t2 != "number" && t2 != "integer" &&
            t2 != "boolean" && t2 != "null")
          fail("{}.type: unknown type \"{}\"", path, t2);
    }

    if (s.contains("enum") || s.contains("const")) return enumeration(s, types, path);

    if (types.empty()) {
      if (has_any(s, kObjectWords)) types.push_back("object");
      if (has_any(s, kArrayWords)) types.push_back("array");
      if (has_any(s, kStringWords)) types.push_back("string");
      if (types.size() > 1) fail("{}: keywords of several types without a \"type\"", path);
      if (types.empty()) return g_.any;  // only annotations: any value
    }
    std::vector<int> nodes;
    for (const std::string& t : types) nodes.push_back(typed(s, t, path, depth));
    if (nodes.size() == 1) return nodes[0];
    Node n = node_of(Kind::AnyOf);
    n.alternatives = std::move(nodes);
    return add(std::move(n));
  }

  int typed(const ojson& s, const std::string& type, const std::string& path, int depth) {
    if (type == "object") return object_node(s, path, depth);
    if (type == "array") {
      Node n = node_of(Kind::Array);
      bounds(s, "minItems", "maxItems", path, n);
      n.items = g_.any;
      if (s.contains("items")) {
        const ojson& items = s.at("items");
        if (items.is_array()) fail("{}.items: a list of schemas (tuple form) is not supported", path);
        if (items.is_boolean() && !items.get<bool>()) {
          if (n.min > 0) fail("{}: items false with minItems {}: no value fits", path, n.min);
          n.max = 0;
        } else {
          n.items = compile(items, path + ".items", depth + 1);
        }
      }
      return add(std::move(n));
    }
    if (type == "string") {
      Node n = node_of(Kind::String);
      bounds(s, "minLength", "maxLength", path, n);
      if (s.contains("pattern") || s.contains("format")) n.pattern = string_pattern(s, path);
      return add(std::move(n));
    }
    if (type == "number") return add(node_of(Kind::Number));
    if (type == "integer") return add(node_of(Kind::Integer));
    if (type == "boolean") return literals({"false", "true"});
    return literals({"null"});
  }

  // A string's pattern or format as an index into g_.patterns.
  int string_pattern(const ojson& s, const std::string& path) {
    if (s.contains("pattern") && s.contains("format")) fail("{}: pattern and format together are not supported", path);
    if (s.contains("minLength") || s.contains("maxLength"))
      fail("{}: minLength or maxLength beside a pattern or format is not supported", path);
    std::string regex, where;
    if (s.contains("format")) {
      where = path + ".format";
      if (!s.at("format").is_string()) fail("{}: must be a string", where);
      const std::string format = s.at("format").get<std::string>();
      const std::optional<std::string> r = StringPattern::format_regex(format);
      if (!r)
        fail("{}: the format \"{}\" is not supported for constrained output (supported: date, time, date-time, "
             "uuid, email, ipv4)",
             where, format);
      regex = *r;
    } else {
      where = path + ".pattern";
      if (!s.at("pattern").is_string()) fail("{}: must be a string", where);
      regex = s.at("pattern").get<std::string>();
    }
    g_.patterns.push_back(StringPattern::compile(regex, where));
    return int(g_.patterns.size()) - 1;
  }

  int object_node(const ojson& s, const std::string& path, int depth) {
    Node n = node_of(Kind::Object);
    std::vector<std::string> names;
    if (s.contains("properties")) {
      const ojson& props = s.at("properties");
      if (!props.is_object()) fail("{}.properties: must be an object, got {}", path, props.type_name());
      if (props.size() > JsonGrammar::kMaxProperties)
        fail("{}.properties: {} properties; at most {} per object are supported", path, props.size(),
             JsonGrammar::kMaxProperties);
      for (const auto& [name, sub] : props.items()) {
        names.push_back(name);
        const std::string text = ojson(name).dump();
        if (text.size() > JsonGrammar::kMaxLiteralBytes)
          fail("{}.properties: a property name of {} bytes; at most {} are supported", path, text.size(),
               JsonGrammar::kMaxLiteralBytes);
        n.properties.push_back({text.substr(1), -1, false});
      }
      size_t i = 0;
      for (const auto& [name, sub] : props.items())
        n.properties[i++].node = compile(sub, path + ".properties." + name, depth + 1);
    }
    if (s.contains("required")) {
      const ojson& req = s.at("required");
      if (!req.is_array()) fail("{}.required: must be a list of property names", path);
      for (const ojson& r : req) {
        if (!r.is_string()) fail("{}.required: must be a list of property names, got {}", path, r.dump());
        auto it = std::find(names.begin(), names.end(), r.get<std::string>());
        if (it == names.end())
          fail("{}.required: \"{}\" is not among the properties (its value would have no schema)", path,
               r.get<std::string>());
        n.properties[size_t(it - names.begin())].required = true;
      }
    }
    // Without properties any keys are fine; with them, extra keys only where the schema says so.
    n.additional = names.empty() ? g_.any : -1;
    if (s.contains("additionalProperties")) {
      const ojson& extra = s.at("additionalProperties");
      if (extra.is_boolean())
        n.additional = extra.get<bool>() ? g_.any : -1;
      else
        n.additional = compile(extra, path + ".additionalProperties", depth + 1);
    }
    return add(std::move(n));
  }

  int enumeration(const ojson& s, const std::vector<std::string>& types, const std::string& path) {
    std::vector<ojson> values;
    if (s.contains("const")) values.push_back(s.at("const"));
    if (s.contains("enum")) {
      const ojson& e = s.at("enum");
      if (!e.is_array() || e.empty()) fail("{}.enum: must be a non-empty list", path);
      if (s.contains("const")) fail("{}: enum and const together are not supported", path);
      values.assign(e.begin(), e.end());
    }
    std::vector<std::string> texts;
    for (const ojson& v : values)
      if (types.empty() || std::any_of(types.begin(), types.end(), [&](const std::string& t) { return is_of_type(v, t); }))
        texts.push_back(v.dump());
    if (texts.empty()) fail("{}: no enum value is of the schema's type", path);
    for (const std::string& t : texts)
      if (t.size() > JsonGrammar::kMaxLiteralBytes)
        fail("{}: an enum or const value of {} bytes (as JSON); at most {} are supported", path, t.size(),
             JsonGrammar::kMaxLiteralBytes);
    return literals(std::move(texts));
  }

  int any_of(const ojson& s, const char* key, const std::string& path, int depth) {
    const ojson& alts = s.at(key);
    const std::string here = path + "." + key;
    if (!alts.is_array() || alts.empty()) fail("{}: must be a non-empty list of schemas", here);
    for (const char* other : {"type", "enum", "const", "properties", "items", "allOf", "anyOf", "oneOf"})
      if (other != std::string(key) && s.contains(other))
        fail("{}: {} beside \"{}\" is not supported (move it into each alternative)", path, key, other);
    Node n = node_of(Kind::AnyOf);
    for (size_t i = 0; i < alts.size(); ++i)
      n.alternatives.push_back(compile(alts[i], here + "[" + std::to_string(i) + "]", depth + 1));
    return add(std::move(n));
  }

  int reference(const ojson& s, const std::string& path, int depth) {
    const ojson& ref = s.at("$ref");
    if (!ref.is_string()) fail("{}.$ref: must be a string", path);
    const std::string r = ref.get<std::string>();
    for (const auto& [key, value] : s.items())
      if (key != "$ref" && (kObjectWords.count(key) || kArrayWords.count(key) || kStringWords.count(key) ||
                            key == "type" || key == "enum" || key == "const" || key == "anyOf" || key == "oneOf" ||
                            key == "allOf"))
        fail("{}: \"{}\" beside $ref is not supported", path, key);
    if (auto it = refs_.find(r); it != refs_.end()) return it->second;
    if (r.rfind("#", 0) != 0) fail("{}.$ref: only references inside the schema (#/...) are supported, got \"{}\"", path, r);
    const ojson* target = nullptr;
    try {
      target = &root_.at(ojson::json_pointer(r.substr(1)));
    } catch (const std::exception&) {
      fail("{}.$ref: \"{}\" points at nothing in the schema", path, r);
    }
    // A placeholder first, so a recursive definition refers to itself.
    const int node = add(node_of(Kind::AnyOf));
    refs_[r] = node;
    const int resolved = compile(*target, r, depth + 1);
    g_.nodes[size_t(node)].alternatives = {resolved};
    return node;
  }

  // An AnyOf that reaches itself through alternatives alone would recurse forever without reading a
  // byte ({"$ref": "#"}).
  void check_no_empty_cycles() const {
    std::vector<int> state(g_.nodes.size(), 0);  // 0 new, 1 on the path, 2 done
    auto visit = [&](auto&& self, int i) -> void {
      if (state[size_t(i)] == 2) return;
      if (state[size_t(i)] == 1) fail("{}: a $ref cycle that never reads a value", name_);
      state[size_t(i)] = 1;
      const Node& n = g_.nodes[size_t(i)];
      if (n.kind == Kind::AnyOf)
        for (int a : n.alternatives) self(self, a);
      state[size_t(i)] = 2;
    };
    for (size_t i = 0; i < g_.nodes.size(); ++i) visit(visit, int(i));
  }

  // Every anyOf lists the distinct non-anyOf nodes it reaches, so reading a value expands each
  // alternative once: nested anyOfs over shared $refs would otherwise expand exponentially often.
  void flatten_alternatives() {
    std::vector<std::vector<int>> leaves(g_.nodes.size());
    std::vector<bool> done(g_.nodes.size(), false);
    auto collect = [&](auto&& self, int i) -> const std::vector<int>& {
      if (done[size_t(i)]) return leaves[size_t(i)];
      std::vector<int> out;
      for (int a : g_.nodes[size_t(i)].alternatives) {
        if (g_.nodes[size_t(a)].kind == Kind::AnyOf) {
          const std::vector<int>& sub = self(self, a);
          out.insert(out.end(), sub.begin(), sub.end());
        } else {
          out.push_back(a);
        }
      }
      std::sort(out.begin(), out.end());
      out.erase(std::unique(out.begin(), out.end()), out.end());
      leaves[size_t(i)] = std::move(out);
      done[size_t(i)] = true;
      return leaves[size_t(i)];
    };
    for (size_t i = 0; i < g_.nodes.size(); ++i)
      if (g_.nodes[i].kind == Kind::AnyOf) g_.nodes[i].alternatives = collect(collect, int(i));
  }

  const ojson& root_;
  std::string name_;
  JsonGrammar g_;
  std::map<std::string, int> refs_;
};

}  // namespace

JsonGrammar JsonGrammar::object() {
  static const ojson unused;
  return SchemaCompiler(unused, "object").object();
}

JsonGrammar JsonGrammar::from_schema(const nlohmann::ordered_json& schema, const std::string& name) {
  return SchemaCompiler(schema, name).run();
}

}  // namespace megaqwen
