// Plan: the complete, concrete description of a job run, made from a JobSpec by a pure function.
// It says for every node which ranks it runs and, for every rank, its identity, argv and the
// environment variables cohort sets (the rank contract of DESIGN.md), plus the files cohort
// writes (the generic rank table). No I/O here: what the planner needs from the machine (job id,
// directories, master port, hosts) comes in PlanContext. Thread-safe.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "spec/job_spec.h"
#include "util/result.h"

namespace cohort::plan {

using spec::KeyValues;

// A rank that a launcher process starts (RankPlan::teed): its name ("worker/3"), global rank,
// log file and whether its lines are echoed on the console.
struct TeedRank {
  std::string name;
  int rank = 0;
  std::string log_file;
  bool console = true;
};

// One process cohort starts and supervises: a rank, or a launcher that starts ranks itself
// (torchrun, mp.spawn, mpirun), or a helper process the framework needs (MindSpore's scheduler).
struct RankPlan {
  std::string name;         // "worker/3", "torchrun/node1", "scheduler/0": prefix and log name
  std::string role;
  int role_rank = 0;        // index within the role
  int role_world_size = 0;  // processes in the role
  int rank = 0;             // global rank; unique among the job's processes
  int local_rank = 0;       // index on its node
  int node = 0;             // global node index
  std::vector<std::string> argv;
  KeyValues env;  // what cohort sets on top of the inherited environment
  std::string log_file;
  bool key = false;      // a key role: its exits decide the job
  bool console = true;   // its output is echoed on the merged console stream
  int uid = -1;          // the Unix identity it runs as; -1: the agent's own
  int gid = -1;
  bool preload = false;  // forked from its node's template (NodePlan::preload), not executed
  // What its processes may use together (the role's resources; a launcher's are its node's
  // ranks'), enforced through its cgroup where the machine allows it. 0: not limited.
  double cpus = 0;
  int64_t memory_bytes = 0;
  int64_t pids = 0;  // processes and threads at once (pids.max); 0: not limited
  // --pdb: its stdin, stdout and stderr are cohort run's terminal, not a pipe to its log.
  bool terminal = false;
  // Its stdin is cohort run's, which is not a terminal (a pipe or a file), as mpirun forwards
  // its own stdin to rank 0 (forwardStdin).
  bool stdin_forwarded = false;
  // It runs under bubblewrap (isolation.cc), which ends with 128 + N when what it runs was
  // killed by signal N: the agent reports that as the signal.
  bool sandboxed = false;
  // A launcher that tees its ranks' output, each line prefixed "[<tee_prefix><i>]:" (torchrun's
  // --tee): the ranks it starts, by that index, so that each line is its rank's (its own log,
  // its console prefix, its metrics), as when cohort starts the ranks. Empty for anything else.
  std::string tee_prefix;
  std::vector<TeedRank> teed;
};

// How a sandboxed rank starts (isolation.cc): cohort's own programs by absolute path, with
// kSandboxLauncherEnvironment, and the rank's environment handed to bubblewrap as `--args` on
// descriptor kSandboxArgsFd (sandboxArguments), never through the launcher's environment.
inline constexpr const char* kSandboxEnv = "/usr/bin/env";
inline constexpr const char* kSandboxBwrap = "/usr/bin/bwrap";
inline constexpr int kSandboxArgsFd = 3;
inline constexpr const char* kSandboxLauncherEnvironment[] = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin",
                                                              "LANG=C.UTF-8"};

// Where a path of the store on disk is as an object store (storage/dir_store.h): the bucket's
// directory and the key below it. Empty for anything else. Staging and outputs reach the store
// through it when they run as an account, which cannot read the store's files (account/).
struct InStore {
  std::string bucket_dir;
  std::string key;  // "" for the whole bucket
  bool empty() const { return bucket_dir.empty(); }
};

// One input to stage on a node before any rank starts: a copy, or a symbolic link.
struct StagedInput {
  std::string source;  // absolute
  std::string target;  // absolute, inside the node's work directory
  bool link = false;
  // A server's job: the input root (cohort server --input-root) `source` is below, opened
  // without following a link; "" for a user's own job.
  std::string beneath;
  InStore store;  // `source` is in the store on disk
};

// launcher: preload: one Python process per node that imports `modules` once, then forks each
// of the node's ranks marked `preload` (agent/preload.h).
struct Preload {
  std::string python;  // the ranks' interpreter, argv[0] of their command
  std::vector<std::string> modules;
  std::vector<std::string> options;  // the interpreter's own, before the template (debug: -X)
};

// environment: {image: REF}: the container image every rank runs in (plan/container.cc): each
// rank's argv becomes `cohort env exec --image REF --layer DIR... -- ARGV` (env/image_exec.h).
struct Image {
  std::string ref;  // as the job names it
  std::string id;   // podman's image id; "" when the image is not here yet (a dry plan)
  std::vector<std::string> layers;  // its layers' directories in podman's storage, top first
};

// One layer of the environment a job runs in (env/environments.h): the environment itself, the
// one it is built on, and so on down to its preset. A node that does not see a layer at its path
// (no file system shared with the machine that planned the job) builds it there from this, before
// any rank starts (agent/staging.h, env/staging.h).
struct EnvironmentLayer {
  std::string name;
  std::string store;  // the directory it is kept in, the same path on every node: store/name
  std::string hash;   // its content hash: what a node's copy must have been built from
  bool preset = false;
  std::string from;                       // a saved one: the layer below
  std::vector<std::string> requirements;  // a saved one: what it asked pip for
  std::string lock;                       // a saved one: its lock file, what is installed
};

struct NodePlan {
  int node = 0;
  std::string host;
  std::string work_dir;  // COHORT_WORK_DIR: <job dir>/work/node<i>
  std::vector<StagedInput> inputs;
  std::vector<RankPlan> ranks;
  std::optional<Preload> preload;
  std::optional<Image> image;  // every rank of the node runs in it (staging checks its layers)
  // The ranks' environment, bottom layer first (empty: none, or the system's): staging finds
  // each layer at its path, or builds it there.
  std::vector<EnvironmentLayer> environment;
  // A sandboxed job's own /tmp, /var/tmp, /run/lock and /dev/shm on this node (isolation.cc):
  // made empty (mode 0700, the ranks' owner) before its ranks start, shared by them, removed
  // with everything in it when the node's agent leaves.
  std::vector<std::string> scratch_dirs;
  // Of those, the ones that are memory (the job's /tmp and /dev/shm, where the agent runs as
  // root): the agent mounts a tmpfs of their own on each, in a mount namespace of its own (so
  // that nothing of them outlives it and its ranks), `tmpfs_bytes` at most (the node's ranks'
  // memory together; 0 where one has no limit: the kernel's default, half the machine's). What
  // a rank writes there is memory its cgroup is charged for, within its own limit.
  std::vector<std::string> tmpfs_dirs;
  int64_t tmpfs_bytes = 0;
};

// Copied out by the coordinator when the job ends.
struct OutputPlan {
  std::string source;  // absolute, inside the job directory
  std::string target;  // absolute
  bool always = false;  // also when the job failed
  InStore store;        // `target` is in the store on disk
};

struct GeneratedFile {
  std::string path;
  std::string content;
};

struct Plan {
  std::string job_id;
  std::string job_name;
  std::string job_dir;
  std::string workdir;
  std::string framework;
  int world_size = 0;
  int max_restarts = 0;
  int64_t grace_period_ms = 0;
  int64_t heartbeat_timeout_ms = 5000;  // an agent silent for this long is lost
  int64_t max_runtime_ms = 0;  // 0: none
  // debug.wait_limit: how much longer than max_runtime a job whose ranks say they are being
  // debugged is held (what a rank says is the job's own code, so the hold has an end).
  int64_t debug_wait_limit_ms = 0;
  int64_t hang_timeout_ms = 0;     // 0: none (spec.h's Policy)
  int64_t startup_timeout_ms = 0;  // 0: none
  int stop_signal = SIGTERM;       // a graceful stop's signal to every rank, then SIGKILL
  std::vector<NodePlan> nodes;
  // The machine each node runs on as a person names it (its host over SSH, "h2"), by node; empty
  // where nodes are simulated or the cluster's. Messages name a node "node 1 (h2)".
  std::vector<std::string> machines;
  std::vector<OutputPlan> outputs;
  std::vector<GeneratedFile> files;
};

struct PlanContext {
  std::string job_id;
  std::string job_dir;  // absolute
  std::string workdir;  // absolute
  std::string master_addr = "127.0.0.1";
  // Leased ports, portsNeeded() of them: [0] is the master port (rendezvous, MindSpore's
  // scheduler), then one per TensorFlow task. Empty for a dry plan: shown as "auto".
  std::vector<int> ports;
  // debug: each rank's debugger port, by global rank (debugPortsNeeded() of them, leased by the
  // caller, debug.port + rank when the job names one). Empty for a dry plan: shown as "auto".
  std::vector<int> debug_ports;
  std::vector<std::string> hosts;  // one per node; missing entries default to master_addr
  std::vector<std::string> machines;  // Plan::machines
  // On real hosts: the interface of each node's address, for GLOO/NCCL_SOCKET_IFNAME. Empty for
  // simulated nodes.
  std::vector<std::string> interfaces;
  std::set<int> console_ranks;     // global ranks echoed on the console; empty: all
  std::vector<int> gpus;           // device indices; each rank gets one in CUDA_VISIBLE_DEVICES
  // The machine's device files that every job's sandbox gets (backends::sharedDevices: NPUs,
  // RDMA, AMD's): cohort does not hand them out per job.
  std::vector<std::string> shared_devices;
  bool nodes_share_machine = true;  // simulated nodes: spread ranks over the machine's devices
  bool as_root = false;             // mpirun needs --allow-run-as-root
  // The CPUs this machine gives the job (its affinity mask), where simulated nodes share it;
  // 0: unknown. MPI's hostfile and oversubscription follow it (mpi.cc).
  int cores = 0;
  std::vector<std::string> device_ips;  // Ascend NIC address per device (from /etc/hccn.conf)
  std::string data_root;  // absolute; hidden from the ranks when isolated
  std::string store_dir;  // the store on disk (storage/place.h), "" when it is in S3
  // Directories local inputs must be below (a server's --input-root); none: anywhere.
  std::vector<std::string> input_roots;
  std::string cohort_bin;  // the cohort binary, for cohort.copy() inside ranks
  // The PYTHONPATH that ranks inheriting the user's environment have there (agent/rank_env.h),
  // kept in front of cohort's module's directory (python_helpers.h); "" for other ranks.
  std::string inherited_python_path;
  bool isolate = false;   // run every process under bubblewrap (see isolation.cc)
  int uid = -1;           // every rank's Unix identity (cohort server gives each account its
  int gid = -1;           // own); -1: the identity cohort runs as
  // Set for every rank over the job's env: its environment's (VIRTUAL_ENV, PATH), or its
  // image's (PATH, the image's own variables, COHORT_IMAGE).
  KeyValues environment;
  std::optional<Image> image;  // environment: {image: REF}, resolved (env/images.h)
  // environment: NAME, resolved: its layers, bottom first, for every node (NodePlan::environment).
  std::vector<EnvironmentLayer> environment_layers;
};

// How many ports makePlan wants leased in PlanContext::ports.
int portsNeeded(const spec::JobSpec& spec);

// How many debugger ports PlanContext::debug_ports wants: one per rank of a job with debug:
// whose ranks listen (not connect).
int debugPortsNeeded(const spec::JobSpec& spec);

// Builds the plan. Errors: kInvalidArgument when the spec fails validation.
Result<Plan> makePlan(const spec::JobSpec& spec, const PlanContext& ctx);

// Gives cohort run's stdin to the process with global rank 0 (under launcher: mpirun, the job's
// mpirun, which passes it on to its rank 0), as mpirun does. Not when a rank is on the terminal
// (--pdb), nor to a rank forked from a preload template (its stdin is its node's). Returns
// whether a rank gets it.
bool forwardStdin(Plan& plan);

// Names of the variables in the contract that change with each restart; the agent sets them.
inline constexpr const char* kRestartCountVars[] = {"COHORT_RESTART_COUNT",
                                                    "TORCHELASTIC_RESTART_COUNT"};

// JSON form of a plan and of one node's part (what `cohort plan --json` prints and what the
// coordinator sends each agent).
std::string toJson(const Plan& plan, int indent = 2);
std::string nodeToJson(const NodePlan& node);
Result<NodePlan> nodeFromJson(const std::string& json);
// The same, from JSON already parsed (the agent's "plan" message), without printing it again.
Result<NodePlan> nodeFromJsonValue(const nlohmann::json& json);

// Human form for `cohort plan`: one block per rank with its variables, then the files.
std::string toText(const Plan& plan);

}  // namespace cohort::plan
