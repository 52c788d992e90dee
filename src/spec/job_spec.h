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

enum class Framework { kPyTorch, kMindSpore, kTensorFlow, kMpi, kGeneric };
const char* frameworkName(Framework f);

// How ranks are started. direct: cohort starts every rank. torchrun: one torchrun per node.
// spawn: one process per node gets --init_method/--rank/--world_size and forks its ranks
// (mp.spawn). mpirun: one mpirun for the whole job.
enum class Launcher { kDirect, kTorchrun, kSpawn, kMpirun };
const char* launcherName(Launcher l);

// MindSpore: dynamic cluster (a scheduler process plus workers; CPU, GPU, Ascend) or an HCCL
// rank table (Ascend only).
enum class MindSporeMode { kDynamicCluster, kRankTable };

inline constexpr int kAutoProcs = -1;  // procs_per_node: auto (one per device)

struct Resources {
  int gpus = 0;
  double cpus = 1;
  int64_t memory_bytes = 0;  // 0: not limited
};

struct Role {
  std::string name;
  int nodes = 1;
  int procs_per_node = 1;  // or kAutoProcs until the CLI resolves it
  Resources resources;
};

struct Policy {
  std::vector<std::string> success;  // key roles; empty means every role
  int max_restarts = 0;
  Millis grace_period{30000};
  std::optional<Millis> max_runtime;
};

using KeyValues = std::vector<std::pair<std::string, std::string>>;  // in the order given

// Data staged on every node before any rank starts. `target` is relative to the node's work
// directory (COHORT_WORK_DIR). `copy` gives each node its own copy; `link` a symbolic link to the
// source, which ranks must only read. `arg`, when set, appends --<arg>=<staged path> to the
// command (the managed service's --data_url convention).
struct Input {
  std::string source;       // as written: store://bucket/path, file://path or a path
  std::string source_path;  // resolved by the caller before planning
  std::string target;
  enum class Mode { kCopy, kLink } mode = Mode::kCopy;
  std::string arg;
};

// Results copied out when the job ends. `source` is relative to the job directory ("output/");
// `target` may use {job} (the job id) and {name} (the job name).
struct Output {
  std::string source;
  std::string target;       // as written
  std::string target_path;  // resolved by the caller, placeholders expanded
  bool always = false;      // also when the job failed (when: always)
};

// An output target with its placeholders filled in: {job} is the job id, {name} the job's name.
std::string expandTarget(std::string target, const std::string& job_id, const std::string& name);

struct JobSpec {
  std::string name;
  Framework framework = Framework::kPyTorch;  // what most users run; generic sets COHORT_* only
  std::string workdir;  // as written; relative to `base_dir`
  std::string base_dir;  // directory of the job file, or the current directory for flags
  std::vector<std::string> command;
  KeyValues hyperparameters;  // appended to the command as --key=value
  KeyValues env;
  std::vector<Role> roles;  // at least one; default one role "worker"
  std::vector<Input> inputs;
  std::vector<Output> outputs;
  Policy policy;
  Launcher launcher = Launcher::kDirect;  // kMpirun by default for framework mpi
  MindSporeMode mindspore_mode = MindSporeMode::kDynamicCluster;
  std::string rank_table_version = "1.0";  // or "0.1"
  bool compat_modelarts = true;  // set the managed service's MA_*/VC_* variables too
};

Result<Framework> parseFramework(const std::string& text);
Result<Launcher> parseLauncher(const std::string& text);

// Parses a job file's text. `file_name` only labels messages. Unknown fields, wrong types and
// impossible values are kInvalidArgument errors naming the field path and line.
Result<JobSpec> parseJobFile(const std::string& text, const std::string& file_name);

// The spec as a job file in JSON, with every field written out (durations in ms, memory in
// bytes), so that parseJobFile(toJobFile(s)) gives `s` back (less base_dir and the resolved
// paths). What `cohort submit` sends to the server.
std::string toJobFile(const JobSpec& spec);

// The spec a bare `cohort run -- cmd` starts from: one role "worker", 1 node, 1 process.
JobSpec defaultSpec();

// Checks what parsing alone cannot (after CLI flags were applied): a command, a sane name,
// key roles that exist. Returns the first problem as kInvalidArgument.
Result<void> validate(const JobSpec& spec);

// The key roles: policy.success or, when empty, the framework's default: TensorFlow's chief if
// there is one, else its workers; every role otherwise.
std::vector<std::string> keyRoles(const JobSpec& spec);

int totalNodes(const JobSpec& spec);
int totalProcs(const JobSpec& spec);

}  // namespace cohort::spec
