// An offline, strict check of a JSON document against an OpenAPI v3 schema as Kubernetes
// structural schemas use them (a CustomResourceDefinition's openAPIV3Schema): type, nullable,
// properties, required, additionalProperties, items, enum, pattern, lengths, minimum/maximum,
// minItems/maxItems, format int32/int64, anyOf, x-kubernetes-int-or-string,
// x-kubernetes-preserve-unknown-fields and x-kubernetes-list-type (set, map). Like
// `kubectl create --validate=strict`, a field the schema does not name is refused, not pruned.
// What it does not check: CEL rules (x-kubernetes-validations), defaults, and formats other than
// the integer ones. The schema is trusted (it comes with the software); the document is not: its
// nesting is bounded. Pure; thread-safe.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace cohort::backends {

// One thing wrong with a document: where (a JSON path such as
// "spec.tasks[0].template.spec.containers[0].foo"; "" for the document itself) and what
// ("unknown field").
struct SchemaViolation {
  std::string path;
  std::string message;
};

// "spec.tasks[0].foo: unknown field".
std::string describe(const SchemaViolation& violation);

// Every violation of `schema` by `document`, in the order found; empty when it conforms.
std::vector<SchemaViolation> validateAgainstSchema(const nlohmann::json& document,
                                                   const nlohmann::json& schema);

// The same for a Kubernetes object whose kind's schema is `schema` (a CRD's openAPIV3Schema):
// as the API server does, the object's metadata is checked as ObjectMeta (name, generateName,
// namespace, labels, annotations: what a manifest sets), whatever the schema says of it.
std::vector<SchemaViolation> validateKubernetesObject(const nlohmann::json& object,
                                                      const nlohmann::json& schema);

}  // namespace cohort::backends
