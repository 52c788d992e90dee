// JobSpec: what a user asks for, parsed from a job file (YAML or JSON) and CLI flags, and
// validated with the file, line and path of every offending field
// ("job.yaml:7: roles.worker.nodes: must be at least 1, got 0") and against the limits below.
// Pure: parsing reads a string, never the file system; resolving paths is the caller's job.
// Thread-safe (no shared state).
#pragma once

#include <csignal>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "util/result.h"
#include "util/text.h"

namespace cohort::spec {

enum class Framework { kPyTorch, kMindSpore, kTensorFlow, kMpi, kDeepSpeed, kGeneric };
const char* frameworkName(Framework f);

// How ranks are started. direct: cohort starts every rank. torchrun: one torchrun per node.
// spawn: one process per node gets --init_method/--rank/--world_size and forks its ranks
// (mp.spawn). mpirun: one mpirun for the whole job.
enum class Launcher { kDirect, kTorchrun, kSpawn, kMpirun, kPreload };
const char* launcherName(Launcher l);

// MindSpore: dynamic cluster (a scheduler process plus workers; CPU, GPU, Ascend) or an HCCL
// rank table (Ascend only).
enum class MindSporeMode { kDynamicCluster, kRankTable };

// Where a job's nodes come from. local: simulated on this machine (the default). slurm: an
// allocation of a Slurm cluster, each node its own host (docs/slurm.md). volcano: the pods of a
// Volcano Job on Kubernetes, each node a pod (docs/volcano.md).
enum class Backend { kLocal, kSlurm, kVolcano, kSsh };
const char* backendName(Backend b);

inline constexpr int kAutoProcs = -1;  // procs_per_node: auto (one per device)

// What one job may ask for (docs/architecture.md, "Limits"). Every job file, request body and
// flag is held to them: parseJobFile refuses what it cannot read in bounded time and memory,
// validate the rest; each refusal names the field and the limit. They keep parsing and planning
// a job well under a second, before any signal handling or rank starts: the plan gives every rank
// its own copy of its arguments and some 50 variables (COHORT_HOSTS lists every node), so the
// processes of a job and the size of its plan are bounded together.
inline constexpr size_t kMaxJobFileBytes = 1 << 20;  // a job file or a request's job: 1 MiB
inline constexpr int kMaxNestingDepth = 64;          // [ ] and { } inside one another
inline constexpr size_t kMaxJobFileNodes = 200000;  // values in a job file, aliases counted
inline constexpr int kMaxRoles = 64;
inline constexpr int kMaxNodesPerRole = 1024;
inline constexpr int kMaxTotalNodes = 1024;
inline constexpr int kMaxProcsPerNode = 1024;
inline constexpr int kMaxTotalProcs = 4096;  // processes of every role together
inline constexpr int kMaxCommandArgs = 4096;
inline constexpr int kMaxHyperparameters = 1024;
inline constexpr int kMaxEnv = 4096;
inline constexpr int kMaxInputs = 256;
inline constexpr int kMaxOutputs = 256;
inline constexpr size_t kMaxNameBytes = 63;         // the job's and each role's name
inline constexpr size_t kMaxKeyBytes = 256;         // an env or hyperparameter name, an input's arg
inline constexpr size_t kMaxPathBytes = 4096;       // workdir, sources and targets (PATH_MAX)
inline constexpr size_t kMaxValueBytes = 128 << 10; // one argument or value (MAX_ARG_STRLEN)
inline constexpr size_t kMaxRankBytes = 1 << 20;    // a rank's argv and environment together
inline constexpr int64_t kMaxPlanEntries = 1 << 19; // ranks x (variables + arguments) of a plan
inline constexpr int64_t kMaxPlanBytes = 32 << 20;  // ranks x (bytes of each rank's share)
inline constexpr int kMaxRestarts = 1000;
inline constexpr int kMaxGpusPerRank = 1024;
inline constexpr double kMaxCpusPerRank = 4096;
inline constexpr int64_t kMaxMemoryPerRank = int64_t{64} << 40;  // 64 TiB
inline constexpr int64_t kMaxPidsPerRank = 4194304;              // Linux's largest pid_max
inline constexpr Millis kMaxGracePeriod{30LL * 86400 * 1000};     // 30 days
inline constexpr Millis kMaxRuntime{365LL * 86400 * 1000};        // 365 days

struct Resources {
  int gpus = 0;
  double cpus = 1;           // what the scheduler counts; a limit only when given
  bool cpus_given = false;   // the job file named cpus: its ranks are held to it (cgroups)
  int64_t memory_bytes = 0;  // 0: not limited
  int64_t pids = 0;          // processes and threads at once; 0: not limited (by the job)
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
  // A node on another machine whose agent says nothing for this long is lost (also when its
  // connection stays open: a hung machine, a network that went away); an agent forked on the
  // coordinator's machine is lost when it dies or has been stopped for this long. Long enough
  // that a busy machine (load average 30 on 2 cores) is not taken for a dead one.
  Millis heartbeat_timeout{30000};
  // No rank made progress (output, a metric, cohort.heartbeat()) for this long: the job hangs.
  // Until the attempt's first progress (any rank's), startup_timeout is the limit instead (when
  // given).
  std::optional<Millis> hang_timeout;
  std::optional<Millis> startup_timeout;
  // What a graceful stop sends every rank (a user's stop, max_runtime, a failure elsewhere, a
  // hang, a preempted node): the rank's notice to save what it must, SIGKILL `grace_period`
  // later. One of kStopSignals; ranks see its name in COHORT_STOP_SIGNAL.
  int stop_signal = SIGTERM;
};

// The signals policy.stop_signal may name: those a rank can catch and whose default ends it.
// SIGKILL and SIGSTOP cannot be caught, so they give no notice.
inline constexpr int kStopSignals[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};

// "SIGUSR1" for a stop signal (any signal number gives its SIG name).
std::string stopSignalName(int signal);
// The stop signal `text` names: "SIGUSR1", "USR1" or "usr1". Errors: kInvalidArgument, saying
// which names are accepted (and why SIGKILL and SIGSTOP are not).
Result<int> parseStopSignal(const std::string& text);

// How each node's address is chosen, the one its ranks are reached at: the IPv4 address of
// `interface`, or the node's address inside `cidr`; with neither, the address the node reaches
// the coordinator from. Never from a name: nothing depends on DNS.
struct Network {
  std::string interface;
  std::string cidr;  // "10.0.0.0/8"
};

// What the slurm backend gives sbatch besides what the roles ask for (docs/slurm.md).
struct SlurmOptions {
  std::string partition, account, qos;
  std::vector<std::string> options;  // more sbatch options, each "--name=value" or "--flag"
};
inline constexpr int kMaxSlurmOptions = 64;

// What the volcano backend gives the Volcano Job besides what the roles ask for
// (docs/volcano.md): the Volcano queue and the Kubernetes PriorityClass of its pods ("": the
// cluster's defaults), and which extended resource `resources.gpus` counts on its nodes.
struct VolcanoOptions {
  std::string queue, priority_class;
  // "nvidia.com/gpu", or "huawei.com/Ascend910" for Ascend NPUs; "": by framework (a MindSpore
  // rank-table job, which runs on Ascend only, counts NPUs; every other job NVIDIA GPUs).
  std::string device_resource;
};
inline constexpr int kMaxPreload = 64;  // modules in `preload`

using KeyValues = std::vector<std::pair<std::string, std::string>>;  // in the order given

// debug: ranks that wait for a debugger (docs/debugging.md). The ranks of `ranks` (every rank
// with `all`) start paused under debugpy, each listening on a port of its own; in a job with
// debug: a breakpoint() in any rank pauses that rank the same way, and with `post_mortem` so
// does an exception nothing caught. A paused rank waits `wait_limit` for a debugger, then goes
// on (a post-mortem one ends with its exception). With `connect`, a paused rank dials the IDE's
// debug server at HOST:PORT instead of listening (PyCharm's remote debug server).
struct Debug {
  bool enabled = false;    // debug: was given (or --debug, --post-mortem)
  bool all = false;        // ranks: all
  std::vector<int> ranks;  // global ranks that wait from their start, ascending
  bool post_mortem = false;
  Millis wait_limit{30 * 60 * 1000};
  int port = 0;         // rank r listens on port + r; 0: a leased port each
  std::string connect;  // "HOST:PORT"
  bool pdb = false;     // --pdb: the one rank of `ranks` runs pdb on cohort's terminal
};
inline constexpr int kMaxDebugRanks = 256;

// session: the job is an interactive session of its account on a server (docs/sessions.md):
// its ranks hold the allocation, and rank 0 serves an SSH server that its account reaches only
// through the server. The server, not the job file, decides its command. It ends once nothing
// has been connected to it through the server for `idle_timeout`, or at policy.max_runtime.
// The SSH server's keys come with the job: `authorized_key`, the one public key that may log
// in ("ssh-ed25519 AAAA... comment"), and `host_key`, the server's private key as base64 of its
// OpenSSH file, which the client made, so that it knows the host key before the first login.
// `user` is the login name (the server sets its account's).
struct Session {
  Millis idle_timeout{60 * 60 * 1000};
  std::string user = "cohort";
  std::string authorized_key;
  std::string host_key;
  bool jupyter = false;       // rank 0 serves JupyterLab too (job/session.h)
  std::string jupyter_token;  // the lab's token: the server makes it, its records never show it
};
inline constexpr size_t kMaxSessionKeyBytes = 16 << 10;  // each rank of a debug job gets a port of its own
inline constexpr Millis kMaxDebugWait{7LL * 86400 * 1000};

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

// Where a spec's fields came from, so that a refusal points at them: for each field path given
// ("roles.worker.nodes", "env.LR", "command[2]"; "" for the job file's top level), either
// "file:line", the flag that set it ("--nodes"), or "" (set from the command line, nothing to
// point at). A field that is in neither is named by its nearest ancestor that is.
struct Origin {
  std::map<std::string, std::string> where;
  // The field at `path` (and whatever is under it) now comes from `flag`.
  void setByFlag(const std::string& path, const std::string& flag);
};

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
  // launcher: preload: the modules each node's template process imports before it forks the
  // ranks (docs/frameworks.md); when not given, [torch] for framework pytorch.
  std::vector<std::string> preload;
  bool preload_given = false;
  // The environment every rank runs in (env/environments.h): a preset (pytorch, ...) or a
  // saved one; empty: the launcher's own PATH, as it is.
  std::string environment;
  // environment: {image: REF}: a container image instead (the pods' image on the volcano
  // backend; each rank runs in it locally and on Slurm: plan/container.cc). Empty unless given.
  std::string image;
  MindSporeMode mindspore_mode = MindSporeMode::kDynamicCluster;
  std::string rank_table_version = "1.0";  // or "0.1"
  bool compat_modelarts = true;  // set the managed service's MA_*/VC_* variables too
  // TensorFlow: append --task_name=<role> --task_index=<i> to every task's command (the managed
  // service's convention). Unset: on for a ps/worker job (one with a `ps` role) with compat
  // modelarts, off otherwise (taskFlags()).
  std::optional<bool> task_flags;
  Backend backend = Backend::kLocal;
  Network network;
  SlurmOptions slurm;
  VolcanoOptions volcano;
  Debug debug;
  std::optional<Session> session;  // session: was given
  Origin origin;                 // not part of toJobFile
};

// Whether `ref` is a container image reference as podman and Docker read one:
// [HOST[:PORT]/]PATH[:TAG][@ALGORITHM:HEX], PATH's components lower-case letters and digits
// joined by '.', '_', '__' or dashes; or an image id (hex).
bool validImageReference(const std::string& ref);

// Whether the flags a framework's own launcher appends are appended: TensorFlow's
// --task_name/--task_index (by default in a ps/worker job under compat modelarts) and
// DeepSpeed's --local_rank (by default, as the deepspeed launcher does). The job's `task_flags`
// decides when it is given.
bool taskFlags(const JobSpec& spec);

Result<Framework> parseFramework(const std::string& text);
Result<Launcher> parseLauncher(const std::string& text);
Result<Backend> parseBackend(const std::string& text);

// Parses a job file's text (YAML, or JSON, its subset). `file_name` only labels messages.
// Errors: kInvalidArgument, "file:line: field.path: what is wrong", for text over
// kMaxJobFileBytes, nested deeper than kMaxNestingDepth or over kMaxJobFileNodes values
// (refused as the parse reaches them, spec/yaml_tree.h), syntax
// errors, unknown or repeated fields, wrong types (a quoted "2" is a string, not an integer),
// impossible values and lists or mappings over their limits. Never throws.
Result<JobSpec> parseJobFile(const std::string& text, const std::string& file_name);

// The spec as a job file in JSON, with every field written out (durations in ms, memory in
// bytes), so that parseJobFile(toJobFile(s)) gives `s` back (less base_dir and the resolved
// paths). What `cohort submit` sends to the server.
std::string toJobFile(const JobSpec& spec);

// The spec a bare `cohort run -- cmd` starts from: one role "worker", 1 node, 1 process.
JobSpec defaultSpec();

// Checks what parsing alone cannot (after CLI flags were applied): a command, a sane name,
// key roles that exist, and every limit above. Returns the first problem as kInvalidArgument,
// prefixed with where the field came from (spec.origin).
Result<void> validate(const JobSpec& spec);

// "where: path: ", the start of a message about the field at `path`: where is the file:line or
// the flag it came from (spec.origin), or nothing when neither is known.
std::string fieldLabel(const JobSpec& spec, const std::string& path);

// The key roles: policy.success or, when empty, the framework's default: TensorFlow's chief if
// there is one, else its workers; every role otherwise.
std::vector<std::string> keyRoles(const JobSpec& spec);

// Whether global rank `rank` of the job waits for a debugger from its start (debug.ranks).
bool debugWaitsAtStart(const Debug& debug, int rank);

int totalNodes(const JobSpec& spec);
int totalProcs(const JobSpec& spec);

}  // namespace cohort::spec
