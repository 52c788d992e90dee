#include "backends/openapi_schema.h"

#include <cstdint>
#include <regex>
#include <set>

namespace cohort::backends {

using Json = nlohmann::json;

namespace {

// Deeper than any manifest: a document nested further is refused, not followed.
constexpr int kMaxDepth = 128;

std::string typeOf(const Json& v) {
  switch (v.type()) {
    case Json::value_t::object:
      return "an object";
    case Json::value_t::array:
      return "a list";
    case Json::value_t::string:
      return "a string";
    case Json::value_t::boolean:
      return "a boolean";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
      return "an integer";
    case Json::value_t::number_float:
      return "a number";
    default:
      return "null";
  }
}

bool hasType(const Json& v, const std::string& type) {
  if (type == "object") return v.is_object();
  if (type == "array") return v.is_array();
  if (type == "string") return v.is_string();
  if (type == "boolean") return v.is_boolean();
  if (type == "integer") return v.is_number_integer();
  if (type == "number") return v.is_number();
  return true;  // no type (or one this checker does not know): anything
}

std::string child(const std::string& path, const std::string& key) {
  return path.empty() ? key : path + "." + key;
}

std::string element(const std::string& path, size_t i) {
  return path + "[" + std::to_string(i) + "]";
}

size_t codePoints(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

class Checker {
 public:
  std::vector<SchemaViolation> violations;

  void check(const Json& v, const Json& schema, const std::string& path, int depth) {
    if (depth > kMaxDepth) {
      add(path, "nested deeper than " + std::to_string(kMaxDepth) + " levels");
      return;
    }
    if (!schema.is_object()) return;
    if (v.is_null()) {
      if (!schema.value("nullable", false)) add(path, "must not be null");
      return;
    }
    if (schema.value("x-kubernetes-int-or-string", false)) {
      if (!v.is_number_integer() && !v.is_string()) {
        add(path, "expected an integer or a string, got " + typeOf(v));
        return;
      }
    } else if (schema.contains("type") && schema["type"].is_string()) {
      const std::string type = schema["type"];
      if (!hasType(v, type)) {
        add(path, "expected " +
                      std::string(type == "array"     ? "a list"
                                  : type == "object"  ? "an object"
                                  : type == "integer" ? "an integer"
                                                      : "a " + type) +
                      ", got " + typeOf(v));
        return;
      }
    }
    checkEnum(v, schema, path);
    if (v.is_string()) checkString(v.get_ref<const std::string&>(), schema, path);
    if (v.is_number()) checkNumber(v, schema, path);
    if (v.is_array()) checkArray(v, schema, path, depth);
    if (v.is_object()) checkObject(v, schema, path, depth);
    if (schema.contains("anyOf") && schema["anyOf"].is_array() &&
        !schema.value("x-kubernetes-int-or-string", false)) {
      bool any = false;
      for (const Json& branch : schema["anyOf"]) {
        Checker inner;
        inner.check(v, branch, path, depth + 1);
        any = any || inner.violations.empty();
      }
      if (!any) add(path, "matches none of the schema's anyOf choices");
    }
  }

  void add(const std::string& path, const std::string& message) {
    violations.push_back({path, message});
  }

 private:
  void checkEnum(const Json& v, const Json& schema, const std::string& path) {
    if (!schema.contains("enum") || !schema["enum"].is_array()) return;
    for (const Json& allowed : schema["enum"]) {
      if (allowed == v) return;
    }
    std::string choices;
    for (const Json& allowed : schema["enum"]) {
      choices += (choices.empty() ? "" : ", ") + allowed.dump();
    }
    add(path, "unsupported value " + v.dump() + " (one of " + choices + ")");
  }

  void checkString(const std::string& s, const Json& schema, const std::string& path) {
    const size_t length = codePoints(s);
    if (schema.contains("maxLength") && length > schema["maxLength"].get<uint64_t>()) {
      add(path, "longer than " + schema["maxLength"].dump() + " characters");
    }
    if (schema.contains("minLength") && length < schema["minLength"].get<uint64_t>()) {
      add(path, "shorter than " + schema["minLength"].dump() + " characters");
    }
    if (schema.contains("pattern") && schema["pattern"].is_string()) {
      const std::string pattern = schema["pattern"];
      try {
        if (!std::regex_search(s, std::regex(pattern, std::regex::ECMAScript))) {
          add(path, "'" + s + "' does not match " + pattern);
        }
      } catch (const std::regex_error&) {
        add(path, "the schema's pattern " + pattern + " cannot be checked here");
      }
    }
  }

  void checkNumber(const Json& v, const Json& schema, const std::string& path) {
    const double x = v.get<double>();
    if (schema.contains("minimum") && x < schema["minimum"].get<double>()) {
      add(path, "must be at least " + schema["minimum"].dump() + ", got " + v.dump());
    }
    if (schema.contains("maximum") && x > schema["maximum"].get<double>()) {
      add(path, "must be at most " + schema["maximum"].dump() + ", got " + v.dump());
    }
    const std::string format = schema.value("format", "");
    if (format == "int32" && v.is_number_integer() &&
        (v.is_number_unsigned() ? v.get<uint64_t>() > INT32_MAX
                                : (v.get<int64_t>() < INT32_MIN || v.get<int64_t>() > INT32_MAX))) {
      add(path, v.dump() + " does not fit in a 32-bit integer");
    }
    if (format == "int64" && v.is_number_unsigned() && v.get<uint64_t>() > INT64_MAX) {
      add(path, v.dump() + " does not fit in a 64-bit integer");
    }
  }

  void checkArray(const Json& v, const Json& schema, const std::string& path, int depth) {
    if (schema.contains("minItems") && v.size() < schema["minItems"].get<uint64_t>()) {
      add(path, "needs at least " + schema["minItems"].dump() + " items");
    }
    if (schema.contains("maxItems") && v.size() > schema["maxItems"].get<uint64_t>()) {
      add(path, "has more than " + schema["maxItems"].dump() + " items");
    }
    const std::string list_type = schema.value("x-kubernetes-list-type", "");
    std::set<std::string> seen;
    for (size_t i = 0; i < v.size(); ++i) {
      if (schema.contains("items")) check(v[i], schema["items"], element(path, i), depth + 1);
      std::string identity;
      if (list_type == "set") {
        identity = v[i].dump();
      } else if (list_type == "map" && v[i].is_object() &&
                 schema.contains("x-kubernetes-list-map-keys")) {
        for (const Json& key : schema["x-kubernetes-list-map-keys"]) {
          identity += (key.is_string() && v[i].contains(key.get<std::string>())
                           ? v[i][key.get<std::string>()].dump()
                           : "-") +
                      ",";
        }
      }
      if (!identity.empty() && !seen.insert(identity).second) {
        add(element(path, i), "duplicate entry in a list of unique entries");
      }
    }
  }

  void checkObject(const Json& v, const Json& schema, const std::string& path, int depth) {
    if (schema.contains("required") && schema["required"].is_array()) {
      for (const Json& name : schema["required"]) {
        if (name.is_string() && !v.contains(name.get<std::string>())) {
          add(child(path, name), "required field missing");
        }
      }
    }
    const bool preserve = schema.value("x-kubernetes-preserve-unknown-fields", false);
    const Json* properties = schema.contains("properties") ? &schema["properties"] : nullptr;
    const Json* additional =
        schema.contains("additionalProperties") ? &schema["additionalProperties"] : nullptr;
    for (const auto& [key, value] : v.items()) {
      const std::string at = child(path, key);
      if (properties && properties->contains(key)) {
        check(value, (*properties)[key], at, depth + 1);
      } else if (additional && additional->is_object()) {
        check(value, *additional, at, depth + 1);
      } else if ((additional && additional->is_boolean() && additional->get<bool>()) || preserve) {
        continue;
      } else {
        add(at, "unknown field");
      }
    }
  }
};

// What a manifest may set of ObjectMeta: the rest is the API server's to write.
const Json& objectMetaSchema() {
  static const Json schema = Json::parse(R"({
    "type": "object",
    "properties": {
      "name": {"type": "string", "maxLength": 253,
               "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"},
      "generateName": {"type": "string"},
      "namespace": {"type": "string", "maxLength": 63,
                    "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"},
      "labels": {"type": "object", "additionalProperties": {"type": "string", "maxLength": 63,
                 "pattern": "^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"}},
      "annotations": {"type": "object", "additionalProperties": {"type": "string"}}
    }
  })");
  return schema;
}

}  // namespace

std::string describe(const SchemaViolation& violation) {
  return violation.path.empty() ? violation.message : violation.path + ": " + violation.message;
}

std::vector<SchemaViolation> validateAgainstSchema(const Json& document, const Json& schema) {
  Checker checker;
  checker.check(document, schema, "", 0);
  return checker.violations;
}

std::vector<SchemaViolation> validateKubernetesObject(const Json& object, const Json& schema) {
  if (!object.is_object() || !object.contains("metadata") || !schema.is_object() ||
      !schema.contains("properties")) {
    return validateAgainstSchema(object, schema);
  }
  Json without = object;
  without.erase("metadata");
  Checker checker;
  checker.check(object["metadata"], objectMetaSchema(), "metadata", 1);
  std::vector<SchemaViolation> meta = std::move(checker.violations);
  std::vector<SchemaViolation> rest = validateAgainstSchema(without, schema);
  meta.insert(meta.end(), rest.begin(), rest.end());
  return meta;
}

}  // namespace cohort::backends
