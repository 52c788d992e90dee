// The strict OpenAPI v3 checker (openapi_schema.h), rule by rule, on small hand-written schemas.
#include "backends/openapi_schema.h"

#include <gtest/gtest.h>

namespace cohort::backends {
namespace {

using Json = nlohmann::json;

// Every violation, one "path: message" a line.
std::string check(const std::string& document, const std::string& schema) {
  std::string out;
  for (const SchemaViolation& v :
       validateAgainstSchema(Json::parse(document), Json::parse(schema))) {
    out += describe(v) + "\n";
  }
  return out;
}

const char* kTask = R"({
  "type": "object",
  "required": ["name"],
  "properties": {
    "name": {"type": "string", "maxLength": 8, "pattern": "^[a-z]+$"},
    "replicas": {"type": "integer", "format": "int32", "minimum": 0},
    "weight": {"type": "number"},
    "enabled": {"type": "boolean"},
    "event": {"type": "string", "enum": ["PodFailed", "TaskCompleted"]},
    "args": {"type": "array", "items": {"type": "string"}, "minItems": 1},
    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
    "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
    "closed": {"type": "object"},
    "port": {"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string"}],
             "pattern": "^[a-z]+$"},
    "note": {"type": "string", "nullable": true},
    "ports": {"type": "array", "x-kubernetes-list-type": "map",
              "x-kubernetes-list-map-keys": ["name"],
              "items": {"type": "object", "properties": {"name": {"type": "string"},
                                                         "number": {"type": "integer"}}}},
    "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}}
  }
})";

TEST(OpenApiSchema, ADocumentThatFollowsTheSchemaHasNoViolations) {
  EXPECT_EQ(check(R"({"name": "worker", "replicas": 2, "weight": 0.5, "enabled": true,
                      "event": "PodFailed", "args": ["a"], "labels": {"k": "v"},
                      "extra": {"anything": [1, {"goes": true}]}, "port": 8080, "note": null,
                      "ports": [{"name": "a", "number": 1}, {"name": "b", "number": 1}],
                      "tags": ["x", "y"]})",
                  kTask),
            "");
  EXPECT_EQ(check(R"({"name": "w", "port": "http", "weight": 3})", kTask), "")
      << "an integer is a number; int-or-string takes a string";
}

TEST(OpenApiSchema, UnknownFieldsAreRefusedWithTheirPath) {
  const char* schema = R"({"type": "object", "properties": {"spec": {"type": "object",
      "properties": {"tasks": {"type": "array", "items": {"type": "object",
      "properties": {"name": {"type": "string"}}}}}}}})";
  EXPECT_EQ(
      check(R"({"spec": {"tasks": [{"name": "a"}, {"name": "b", "foo": 1}], "bar": 2}})", schema),
      "spec.bar: unknown field\nspec.tasks[1].foo: unknown field\n");
  EXPECT_EQ(check(R"({"name": "w", "closed": {"x": 1}})", kTask), "closed.x: unknown field\n")
      << "an object schema that names no field takes none";
}

TEST(OpenApiSchema, AdditionalPropertiesCheckEveryValueAndPreserveTakesAnything) {
  EXPECT_EQ(check(R"({"name": "w", "labels": {"a": "x", "b": 2}})", kTask),
            "labels.b: expected a string, got an integer\n");
  EXPECT_EQ(check(R"({"name": "w", "extra": {"deep": {"deeper": [null]}}})", kTask), "");
  EXPECT_EQ(check(R"({"x": 1})", R"({"type": "object", "additionalProperties": false})"),
            "x: unknown field\n");
  EXPECT_EQ(check(R"({"x": 1})", R"({"type": "object", "additionalProperties": true})"), "");
}

TEST(OpenApiSchema, WrongTypesAreRefused) {
  EXPECT_EQ(check(R"({"name": 3, "replicas": "2", "weight": "heavy", "enabled": "yes",
                      "args": "a", "labels": [], "note": 1})",
                  kTask),
            "args: expected a list, got a string\n"
            "enabled: expected a boolean, got a string\n"
            "labels: expected an object, got a list\n"
            "name: expected a string, got an integer\n"
            "note: expected a string, got an integer\n"
            "replicas: expected an integer, got a string\n"
            "weight: expected a number, got a string\n");
  EXPECT_EQ(check(R"({"name": "w", "replicas": 1.5})", kTask),
            "replicas: expected an integer, got a number\n");
  EXPECT_EQ(check(R"({"name": null})", kTask), "name: must not be null\n")
      << "null only where the schema says nullable";
  EXPECT_EQ(check("[]", kTask), "expected an object, got a list\n");
}

TEST(OpenApiSchema, RequiredFieldsMustBeThere) {
  EXPECT_EQ(check(R"({"replicas": 1})", kTask), "name: required field missing\n");
  EXPECT_EQ(check(R"({"ports": [{"number": 1}]})",
                  R"({"type": "object", "properties": {"ports": {"type": "array", "items":
                      {"type": "object", "required": ["name"], "properties": {"number": {}}}}}})"),
            "ports[0].name: required field missing\n");
}

TEST(OpenApiSchema, EnumsTakeOnlyTheirValues) {
  EXPECT_EQ(
      check(R"({"name": "w", "event": "PodCompleted"})", kTask),
      "event: unsupported value \"PodCompleted\" (one of \"PodFailed\", \"TaskCompleted\")\n");
}

TEST(OpenApiSchema, IntegerFormatsAndBoundsAreChecked) {
  EXPECT_EQ(check(R"({"name": "w", "replicas": 2147483648})", kTask),
            "replicas: 2147483648 does not fit in a 32-bit integer\n");
  EXPECT_EQ(check(R"({"name": "w", "replicas": 2147483647})", kTask), "");
  EXPECT_EQ(check(R"({"name": "w", "replicas": -1})", kTask),
            "replicas: must be at least 0, got -1\n");
  EXPECT_EQ(check("18446744073709551615", R"({"type": "integer", "format": "int64"})"),
            "18446744073709551615 does not fit in a 64-bit integer\n");
  EXPECT_EQ(check("11", R"({"type": "integer", "maximum": 10})"), "must be at most 10, got 11\n");
}

TEST(OpenApiSchema, IntOrStringTakesBothAndNothingElse) {
  EXPECT_EQ(check(R"({"name": "w", "port": true})", kTask),
            "port: expected an integer or a string, got a boolean\n");
  EXPECT_EQ(check(R"({"name": "w", "port": "HTTP"})", kTask),
            "port: 'HTTP' does not match ^[a-z]+$\n")
      << "a string is held to the pattern";
  EXPECT_EQ(check(R"({"name": "w", "port": 1.5})", kTask),
            "port: expected an integer or a string, got a number\n");
}

TEST(OpenApiSchema, PatternsLengthsAndItemCountsAreChecked) {
  EXPECT_EQ(check(R"({"name": "Worker"})", kTask), "name: 'Worker' does not match ^[a-z]+$\n");
  EXPECT_EQ(check(R"({"name": "abcdefghi"})", kTask), "name: longer than 8 characters\n");
  EXPECT_EQ(check(R"({"name": "w", "args": []})", kTask), "args: needs at least 1 items\n");
  EXPECT_EQ(check(R"("\u00e9\u00e9")", R"({"type": "string", "maxLength": 2, "minLength": 2})"), "")
      << "lengths count characters, not bytes";
  EXPECT_EQ(check(R"("")", R"({"type": "string", "minLength": 1})"), "shorter than 1 characters\n");
}

TEST(OpenApiSchema, ListsOfUniqueEntriesRefuseDuplicates) {
  EXPECT_EQ(check(R"({"name": "w", "ports": [{"name": "a"}, {"name": "a", "number": 2}],
                      "tags": ["x", "x"]})",
                  kTask),
            "ports[1]: duplicate entry in a list of unique entries\n"
            "tags[1]: duplicate entry in a list of unique entries\n");
}

TEST(OpenApiSchema, AnyOfNeedsOneChoiceToHold) {
  const char* schema = R"({"type": "string", "anyOf": [{"pattern": "^a"}, {"pattern": "z$"}]})";
  EXPECT_EQ(check(R"("abc")", schema), "");
  EXPECT_EQ(check(R"("xyz")", schema), "");
  EXPECT_EQ(check(R"("mmm")", schema), "matches none of the schema's anyOf choices\n");
}

TEST(OpenApiSchema, EveryViolationIsReportedNotJustTheFirst) {
  EXPECT_EQ(check(R"({"replicas": -2, "bogus": 1, "event": "Nope"})", kTask),
            "name: required field missing\n"
            "bogus: unknown field\n"
            "event: unsupported value \"Nope\" (one of \"PodFailed\", \"TaskCompleted\")\n"
            "replicas: must be at least 0, got -2\n");
}

TEST(OpenApiSchema, DeepDocumentsAreRefusedNotFollowed) {
  std::string deep;
  for (int i = 0; i < 200; ++i) deep += "[";
  for (int i = 0; i < 200; ++i) deep += "]";
  std::string schema = R"({"type": "array"})";
  for (int i = 0; i < 200; ++i) schema = R"({"type": "array", "items": )" + schema + "}";
  EXPECT_NE(check(deep, schema).find("nested deeper than 128 levels"), std::string::npos);
}

TEST(OpenApiSchema, AKubernetesObjectsMetadataIsObjectMeta) {
  const char* schema = R"({"type": "object", "properties": {"apiVersion": {"type": "string"},
      "kind": {"type": "string"}, "metadata": {"type": "object"},
      "spec": {"type": "object", "properties": {"x": {"type": "integer"}}}}})";
  auto violations = [&](const std::string& object) {
    std::string out;
    for (const SchemaViolation& v :
         validateKubernetesObject(Json::parse(object), Json::parse(schema))) {
      out += describe(v) + "\n";
    }
    return out;
  };
  EXPECT_EQ(violations(R"({"apiVersion": "v1", "kind": "K", "metadata": {"name": "a-b",
                          "labels": {"app.kubernetes.io/name": "a"}, "annotations": {"n": "long text"}},
                          "spec": {"x": 1}})"),
            "");
  EXPECT_EQ(violations(R"({"metadata": {"name": "A_b", "labels": {"k": 1}, "uid": "x"},
                          "spec": {"y": 1}})"),
            "metadata.labels.k: expected a string, got an integer\n"
            "metadata.name: 'A_b' does not match "
            "^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$\n"
            "metadata.uid: unknown field\n"
            "spec.y: unknown field\n");
}

}  // namespace
}  // namespace cohort::backends
