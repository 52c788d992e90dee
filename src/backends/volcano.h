// The volcano backend's rendering: a job as a Volcano Job (batch.volcano.sh/v1alpha1), the
// object a platform team running Volcano on Kubernetes expects to see in `kubectl get vcjob`.
// One task per role (a pod per node, each running a `cohort exec` node agent) and one task of
// one pod for the job's coordinator, which the agents dial by the name Volcano's svc plugin gives
// it; gang scheduling over every pod; Volcano's policies for what cohort decides in a pod's
// stead (a pod that fails or is evicted restarts or aborts the whole Job, the key roles'
// completion completes it). The job's secret is a Kubernetes Secret that the pods read, never
// part of the manifest. Submitting, watching and cancelling through the API server are
// volcano_cluster.h's. Pure functions, no I/O; thread-safe.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>

#include "plan/plan.h"
#include "spec/job_spec.h"
#include "util/result.h"

namespace cohort::backends {

// The port the coordinator's pod listens on for the agents (each pod has an address of its own,
// so one fixed port never collides).
inline constexpr int kVolcanoCoordinatorPort = 7070;
// The Volcano task of the coordinator's pod; no role may be named so.
inline constexpr const char* kVolcanoCoordinatorTask = "coordinator";
// The keys of the job's Secret (<job>-secret): the secret the agents prove they know, and for a
// job of `cohort server`, where its coordinator reports, with which credential, and (a server with
// TLS) the certificate's pin it trusts. A server whose
// store is in S3 adds it too, each of storage::siteVariableNames() a key of its own, which the
// coordinator's and the agents' pods get as variables of that name (never the ranks).
inline constexpr const char* kVolcanoSecretKey = "secret";
inline constexpr const char* kVolcanoReportUrlKey = "report-url";
inline constexpr const char* kVolcanoReportTokenKey = "report-token";
inline constexpr const char* kVolcanoReportPinKey = "report-pin";

// Where the coordinator of a server's job reports: the server's URL, the job's report credential,
// and, for an https:// server, the SHA-256 pin of the public key it presents ("" to trust the
// system's certificate authorities).
struct VolcanoReport {
  std::string url;
  std::string token;
  std::string pin;
};
// Seconds a stopped pod gets beyond the job's grace period before the kubelet kills it: the
// agents' to report their ranks' ends, the coordinator's to copy outputs and report the record.
inline constexpr int64_t kAgentGraceS = 15;
inline constexpr int64_t kCoordinatorGraceS = 60;
// A role's task name is at most this long, so that its pods' names (<job>-<task>-<index>, also
// their host names) fit a DNS label of 63 characters with room for the job's name.
inline constexpr size_t kMaxVolcanoTaskName = 20;

// `text` as a DNS-1123 label of at most `max` characters: lower-case, every run of characters
// other than letters and digits one '-', no '-' at either end; `fallback` when nothing is left.
std::string dnsLabel(const std::string& text, size_t max, const std::string& fallback);

// The Volcano Job for `spec` (its backend need not be volcano) and its plan, as JSON: what
// `cohort plan --backend volcano` prints. Deterministic: the same spec and plan give the same
// bytes (the job id comes from the plan). Errors: kInvalidArgument naming the field for a job
// that cannot be one: no container image (environment: {image: REF}), procs_per_node: auto,
// roles whose task names collide, a job file too large for a pod's environment.
Result<nlohmann::json> volcanoJob(const spec::JobSpec& spec, const plan::Plan& plan);

// The name of the Secret of the Job named `job`.
inline std::string volcanoSecretName(const std::string& job) { return job + "-secret"; }

// The Secret the pods of `job` (a volcanoJob) read: the job's `secret`, with `report` where and
// how its coordinator reports to the server, and the server's store (`store`:
// storage::siteVariables). Labelled and annotated as the Job is. Pure.
nlohmann::json volcanoSecret(const nlohmann::json& job, const std::string& secret,
                             const std::optional<VolcanoReport>& report,
                             const std::vector<std::pair<std::string, std::string>>& store = {});

// A manifest as YAML for `kubectl create -f -`: block style, keys in the JSON's order, strings
// that YAML would read as anything else (numbers, booleans, null) double-quoted.
std::string manifestYaml(const nlohmann::json& manifest);

// A YAML document (a manifest, a CustomResourceDefinition) as JSON, its plain scalars typed as
// Kubernetes reads them (integers, floats, true/false, null), quoted ones strings. Errors:
// kInvalidArgument with the line for text that is not one YAML document.
Result<nlohmann::json> parseYamlDocument(const std::string& text);

}  // namespace cohort::backends
