// JobSpec: what a user asks for, parsed from a job file (YAML or JSON) and CLI flags, and
// validated with the path of every offending field ("roles.worker.nodes: must be at least 1").
// Pure: parsing reads a string, never the file system; resolving paths is the caller's job.
// Thread-safe (no shared state).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "util/result.h"
#include "util/text.h"

namespace cohort::spec {

enum class Framework { kPyTorch, kGeneric };
const char* frameworkName(Framework f);

struct Resources {
  int gpus = 0;
  double cpus = 1;
  int64_t memory_bytes = 0;  // 0: not limited
};

struct Role {
  std::string name;
  int nodes = 1;
  int procs_per_node = 1;
  Resources resources;
};

struct Policy {
  std::vector<std::string> success;  // key roles; empty means every role
  int max_restarts = 0;
  Millis grace_period{30000};
  std::optional<Millis> max_runtime;
};

using KeyValues = std::vector<std::pair<std::string, std::string>>;  // in the order given

struct JobSpec {
  std::string name;
  Framework framework = Framework::kPyTorch;  // what most users run; generic sets COHORT_* only
  std::string workdir;  // as written; relative to `base_dir`
  std::string base_dir;  // directory of the job file, or the current directory for flags
  std::vector<std::string> command;
  KeyValues hyperparameters;  // appended to the command as --key=value
  KeyValues env;
  std::vector<Role> roles;  // at least one; default one role "worker"
  Policy policy;
};

// Parses a job file's text. `file_name` only labels messages. Unknown fields, wrong types and
// impossible values are kInvalidArgument errors naming the field path and line.
Result<JobSpec> parseJobFile(const std::string& text, const std::string& file_name);

// The spec a bare `cohort run -- cmd` starts from: one role "worker", 1 node, 1 process.
JobSpec defaultSpec();

// Checks what parsing alone cannot (after CLI flags were applied): a command, a sane name,
// key roles that exist. Returns the first problem as kInvalidArgument.
Result<void> validate(const JobSpec& spec);

// The key roles: policy.success, or every role when it is empty.
std::vector<std::string> keyRoles(const JobSpec& spec);

int totalNodes(const JobSpec& spec);
int totalProcs(const JobSpec& spec);

}  // namespace cohort::spec
