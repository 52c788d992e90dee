#include "cli/job_options.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include <algorithm>
#include <cstdlib>

#include "backends/local.h"
#include "job/id.h"
#include "job/layout.h"
#include "storage/uri.h"
#include "util/fd.h"
#include "util/text.h"

namespace cohort::cli {

namespace {

std::string currentDir() {
  char buf[4096];
  return ::getcwd(buf, sizeof buf) ? buf : ".";
}

std::string absolute(const std::string& path, const std::string& base) {
  if (!path.empty() && path[0] == '/') return path;
  if (path.empty() || path == ".") return base;
  return base + "/" + path;
}

std::string dirName(const std::string& path) {
  auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

Result<void> splitKeyValue(const std::string& flag, const std::string& text, spec::KeyValues& out) {
  auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0) {
    return fail(Code::kInvalidArgument, flag + ": expected KEY=VALUE, got '" + text + "'");
  }
  std::string key = text.substr(0, eq);
  for (auto& kv : out) {
    if (kv.first == key) {
      kv.second = text.substr(eq + 1);
      return {};
    }
  }
  out.emplace_back(key, text.substr(eq + 1));
  return {};
}

// The job file, read no further than parseJobFile's limit, so that a huge file (or -f
// /dev/zero) is refused without being read.
Result<std::string> readJobFile(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  auto failed = [](const Error& e) {
    return fail(Code::kInvalidArgument, "job file: " + e.message);
  };
  if (!fd.valid()) return failed(failErrno("open '" + path + "'").value());
  std::string out;
  char buf[65536];
  while (out.size() <= spec::kMaxJobFileBytes) {
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return failed(failErrno("read '" + path + "'").value());
    if (n == 0) return out;
    out.append(buf, static_cast<size_t>(n));
  }
  return fail(Code::kInvalidArgument,
              path + ":1: job: the job file is larger than " +
                  std::to_string(spec::kMaxJobFileBytes) +
                  " bytes, the most it may have (1 MiB: keep data and long lists in files the "
                  "job reads)");
}

// A job name from the command: "python3 ddp.py" -> "ddp".
std::string nameFromCommand(const std::vector<std::string>& command) {
  std::string word = command.empty() ? "job" : command[0];
  for (size_t i = 1; i < command.size(); ++i) {
    if (command[i][0] != '-' && command[i].find('.') != std::string::npos &&
        command[i].find('=') == std::string::npos) {
      word = command[i];
      break;
    }
  }
  word = word.substr(word.rfind('/') + 1);
  word = word.substr(0, word.find('.'));
  std::string name;
  for (char c : word) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_';
    name += ok ? c : '-';
  }
  return name.empty() ? "job" : name;
}

}  // namespace

std::string jobFlagsHelp() {
  return R"(Job:
  -f, --file FILE          job file (YAML or JSON); flags below override its fields
  --name NAME              job name (default: from the file or the script's name)
  --framework NAME         pytorch (default) | mindspore | tensorflow | mpi | generic
                           (generic sets only the COHORT_* variables)
  --launcher NAME          direct (default): cohort starts every rank; torchrun: one torchrun
                           per node; spawn: one process per node with --init_method --rank
                           --world_size (mp.spawn); mpirun: one mpirun (default for mpi);
                           preload: one Python process per node imports `preload` (torch)
                           once, then forks every rank of the node from it
  --mode NAME              MindSpore: dynamic_cluster (default) | rank_table (Ascend)
  --compat NAME            modelarts (default): also set the managed service's MA_* and
                           VC_* variables | none
  --backend NAME           local (default): nodes simulated on this machine | slurm: the nodes
                           of a Slurm batch job, one per host (docs/slurm.md)
  --nodes N                nodes of a single-role job
  --nproc-per-node N|auto  processes per node (auto: one per GPU, 1 without GPUs)
  --workdir DIR            where ranks run (default: the job file's directory, or here)
  --env KEY=VALUE          set a variable for every rank (repeatable)
  --hp KEY=VALUE           hyperparameter, appended to the command as --KEY=VALUE (repeatable)
  --max-restarts N         restart the whole gang up to N times after a failure (default 0)
  --grace-period DUR       SIGTERM -> SIGKILL delay when stopping ranks (default 30s)
  --heartbeat-timeout DUR  a node that says nothing for this long is lost (default 5s)
  --max-runtime DUR        stop the job after this long (e.g. 2h); exit code 124
  --hang-timeout DUR       no rank printed for this long: take every rank's stack, name the
                           one that holds the others up, exit code 124 (docs/observing.md)
  --startup-timeout DUR    the limit until the first output instead (imports, data loading)
  --success ROLE[,ROLE]    key roles: the job succeeds when all their ranks exit 0
  --data-root DIR          where job directories go (default $COHORT_DATA_ROOT or ~/.cohort)
  --isolate                run ranks under bubblewrap: other jobs' directories and the store
                           are not visible to them, only this job's directory
  -- COMMAND...            the command every rank runs
)";
}

Result<JobOptions> parseJobOptions(int argc, char** argv, int first) {
  JobOptions o;
  for (int i = first; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--") {
      for (++i; i < argc; ++i) o.command.emplace_back(argv[i]);
      break;
    }
    std::string value;
    bool inline_value = false;
    if (startsWith(arg, "--") && arg.find('=') != std::string::npos) {
      value = arg.substr(arg.find('=') + 1);
      arg = arg.substr(0, arg.find('='));
      inline_value = true;
    }
    auto next = [&]() -> Result<std::string> {
      if (inline_value) return value;
      if (i + 1 >= argc) return fail(Code::kInvalidArgument, arg + ": needs a value");
      return std::string(argv[++i]);
    };
    auto number = [&](int min) -> Result<int> {
      COHORT_ASSIGN(std::string text, next());
      auto n = parseInt(text);
      if (!n || *n < min) {
        return fail(Code::kInvalidArgument, arg + ": expected an integer >= " +
                                                std::to_string(min) + ", got '" + text + "'");
      }
      return *n;
    };
    if (arg == "-f" || arg == "--file") {
      COHORT_ASSIGN(o.file, next());
    } else if (arg == "--name") {
      COHORT_ASSIGN(o.name, next());
    } else if (arg == "--framework") {
      COHORT_ASSIGN(o.framework, next());
    } else if (arg == "--nodes") {
      COHORT_ASSIGN(o.nodes, number(1));
    } else if (arg == "--nproc-per-node" || arg == "--nproc_per_node") {
      if ((inline_value && value == "auto") ||
          (!inline_value && i + 1 < argc && std::string(argv[i + 1]) == "auto")) {
        if (!inline_value) ++i;
        o.procs_per_node = spec::kAutoProcs;
      } else {
        COHORT_ASSIGN(o.procs_per_node, number(1));
      }
    } else if (arg == "--launcher") {
      COHORT_ASSIGN(o.launcher, next());
    } else if (arg == "--backend") {
      COHORT_ASSIGN(o.backend, next());
    } else if (arg == "--mode") {
      COHORT_ASSIGN(o.mode, next());
    } else if (arg == "--compat") {
      COHORT_ASSIGN(o.compat, next());
    } else if (arg == "--workdir") {
      COHORT_ASSIGN(o.workdir, next());
    } else if (arg == "--env") {
      COHORT_ASSIGN(std::string kv, next());
      o.env.push_back(kv);
    } else if (arg == "--hp") {
      COHORT_ASSIGN(std::string kv, next());
      o.hyperparameters.push_back(kv);
    } else if (arg == "--max-restarts") {
      COHORT_ASSIGN(o.max_restarts, number(0));
    } else if (arg == "--grace-period") {
      COHORT_ASSIGN(o.grace_period, next());
    } else if (arg == "--heartbeat-timeout") {
      COHORT_ASSIGN(o.heartbeat_timeout, next());
    } else if (arg == "--max-runtime") {
      COHORT_ASSIGN(o.max_runtime, next());
    } else if (arg == "--hang-timeout") {
      COHORT_ASSIGN(o.hang_timeout, next());
    } else if (arg == "--startup-timeout") {
      COHORT_ASSIGN(o.startup_timeout, next());
    } else if (arg == "--success") {
      COHORT_ASSIGN(o.success, next());
    } else if (arg == "--data-root") {
      COHORT_ASSIGN(o.data_root, next());
    } else if (arg == "--log-ranks") {
      COHORT_ASSIGN(o.log_ranks, next());
    } else if (arg == "--job-id") {
      COHORT_ASSIGN(o.job_id, next());
    } else if (arg == "--run-as") {
      COHORT_ASSIGN(o.run_as, next());
    } else if (arg == "--report") {
      o.report = true;
    } else if (arg == "--isolate") {
      o.isolate = true;
    } else if (arg == "--json") {
      o.json = true;
    } else if (arg == "-q" || arg == "--quiet") {
      o.quiet = true;
    } else if (!startsWith(arg, "-")) {
      // The command without "--": everything from here on.
      for (; i < argc; ++i) o.command.emplace_back(argv[i]);
      break;
    } else {
      return fail(Code::kInvalidArgument, "unknown flag '" + arg + "' (see --help)");
    }
  }
  return o;
}

Result<spec::JobSpec> buildSpec(const JobOptions& o) {
  spec::JobSpec s;
  const std::string cwd = currentDir();
  if (!o.file.empty()) {
    COHORT_ASSIGN(std::string text, readJobFile(o.file));
    COHORT_ASSIGN(s, spec::parseJobFile(text, o.file));
    s.base_dir = dirName(absolute(o.file, cwd));
  } else {
    s = spec::defaultSpec();
    s.base_dir = cwd;
  }
  // Flags take a field's place: refusals of it then name the flag, not the file's line.
  spec::Origin& origin = s.origin;
  if (!o.command.empty()) {
    s.command = o.command;
    origin.setByFlag("command", "");  // the words after "--": their messages need no label
  }
  if (!o.name.empty()) {
    s.name = o.name;
    origin.setByFlag("name", "--name");
  } else if (s.name.empty()) {
    s.name = nameFromCommand(s.command);
  }
  if (!o.framework.empty()) {
    auto f = spec::parseFramework(o.framework);
    if (!f) return withContext(f.error(), "--framework");
    s.framework = *f;
    origin.setByFlag("framework", "--framework");
    if (*f == spec::Framework::kMpi && o.launcher.empty()) s.launcher = spec::Launcher::kMpirun;
  }
  if (!o.backend.empty()) {
    auto b = spec::parseBackend(o.backend);
    if (!b) return withContext(b.error(), "--backend");
    s.backend = *b;
    origin.setByFlag("backend", "--backend");
  }
  if (!o.launcher.empty()) {
    auto l = spec::parseLauncher(o.launcher);
    if (!l) return withContext(l.error(), "--launcher");
    s.launcher = *l;
    origin.setByFlag("launcher", "--launcher");
  }
  if (!o.mode.empty()) {
    if (o.mode != "dynamic_cluster" && o.mode != "rank_table") {
      return fail(Code::kInvalidArgument,
                  "--mode: unknown mode '" + o.mode + "' (dynamic_cluster, rank_table)");
    }
    s.mindspore_mode = o.mode == "rank_table" ? spec::MindSporeMode::kRankTable
                                              : spec::MindSporeMode::kDynamicCluster;
    origin.setByFlag("mode", "--mode");
  }
  if (!o.compat.empty()) {
    if (o.compat != "modelarts" && o.compat != "none") {
      return fail(Code::kInvalidArgument,
                  "--compat: unknown compat '" + o.compat + "' (modelarts, none)");
    }
    s.compat_modelarts = o.compat == "modelarts";
    origin.setByFlag("compat", "--compat");
  }
  if (o.nodes || o.procs_per_node) {
    if (s.roles.size() != 1) {
      return fail(Code::kInvalidArgument,
                  "--nodes/--nproc-per-node apply to single-role jobs; this job has " +
                      std::to_string(s.roles.size()) + " roles: set them in the job file");
    }
    const std::string role = "roles." + s.roles[0].name;
    if (o.nodes) {
      s.roles[0].nodes = o.nodes;
      origin.setByFlag(role + ".nodes", "--nodes");
    }
    if (o.procs_per_node) {
      s.roles[0].procs_per_node = o.procs_per_node;
      origin.setByFlag(role + ".procs_per_node", "--nproc-per-node");
    }
  }
  if (!o.workdir.empty()) {
    s.workdir = o.workdir;
    s.base_dir = cwd;
    origin.setByFlag("workdir", "--workdir");
  }
  // Counted before they are merged (one by one, by name) into the file's.
  if (o.env.size() > static_cast<size_t>(spec::kMaxEnv)) {
    return fail(Code::kInvalidArgument, "--env: given " + std::to_string(o.env.size()) +
                                            " times; at most " + std::to_string(spec::kMaxEnv) +
                                            " (put the settings in a file the job reads)");
  }
  if (o.hyperparameters.size() > static_cast<size_t>(spec::kMaxHyperparameters)) {
    return fail(Code::kInvalidArgument,
                "--hp: given " + std::to_string(o.hyperparameters.size()) + " times; at most " +
                    std::to_string(spec::kMaxHyperparameters) +
                    " (pass a configuration file as one hyperparameter)");
  }
  for (const auto& kv : o.env) {
    COHORT_TRY(splitKeyValue("--env", kv, s.env));
    origin.setByFlag("env." + kv.substr(0, kv.find('=')), "--env");
  }
  for (const auto& kv : o.hyperparameters) {
    COHORT_TRY(splitKeyValue("--hp", kv, s.hyperparameters));
    origin.setByFlag("hyperparameters." + kv.substr(0, kv.find('=')), "--hp");
  }
  if (o.max_restarts >= 0) {
    s.policy.max_restarts = o.max_restarts;
    origin.setByFlag("policy.max_restarts", "--max-restarts");
  }
  // Durations are range-checked by spec::validate (policy.<field>).
  auto duration = [&](const std::string& value, const char* flag, const char* field,
                      auto& into) -> Result<void> {
    if (value.empty()) return {};
    auto d = parseDuration(value);
    if (!d) return withContext(d.error(), flag);
    into = *d;
    origin.setByFlag(std::string("policy.") + field, flag);
    return {};
  };
  COHORT_TRY(duration(o.heartbeat_timeout, "--heartbeat-timeout", "heartbeat_timeout",
                      s.policy.heartbeat_timeout));
  COHORT_TRY(duration(o.grace_period, "--grace-period", "grace_period", s.policy.grace_period));
  COHORT_TRY(duration(o.max_runtime, "--max-runtime", "max_runtime", s.policy.max_runtime));
  COHORT_TRY(duration(o.hang_timeout, "--hang-timeout", "hang_timeout", s.policy.hang_timeout));
  COHORT_TRY(duration(o.startup_timeout, "--startup-timeout", "startup_timeout",
                      s.policy.startup_timeout));
  if (!o.success.empty()) {
    s.policy.success = split(o.success, ',');
    origin.setByFlag("policy.success", "--success");
  }
  COHORT_TRY(spec::validate(s));
  return s;
}

Result<PreparedJob> prepareJob(const JobOptions& o) {
  PreparedJob job;
  COHORT_ASSIGN(job.spec, buildSpec(o));
  spec::JobSpec& s = job.spec;
  const std::string cwd = currentDir();
  const char* env_root = std::getenv("COHORT_DATA_ROOT");
  const char* home = std::getenv("HOME");
  job.data_root = !o.data_root.empty() ? absolute(o.data_root, cwd)
                  : env_root && *env_root ? std::string(env_root)
                                          : std::string(home ? home : "/tmp") + "/.cohort";
  const std::string job_id = o.job_id.empty() ? job::newJobId(s.name) : o.job_id;

  // Where inputs come from and outputs go: store:// URIs and paths relative to the job file.
  for (size_t i = 0; i < s.inputs.size(); ++i) {
    spec::Input& in = s.inputs[i];
    std::string field = "inputs[" + std::to_string(i) + "].source";
    auto path = storage::resolve(in.source, job.data_root, s.base_dir);
    if (!path) {
      return fail(path.error().code, spec::fieldLabel(s, field) + path.error().message);
    }
    struct stat st{};
    if (::stat(path->c_str(), &st) < 0) {
      return fail(Code::kInvalidArgument, spec::fieldLabel(s, field) + "'" + in.source +
                                              "' does not exist (" + *path + ")");
    }
    in.source_path = *path;
  }
  for (size_t i = 0; i < s.outputs.size(); ++i) {
    spec::Output& out = s.outputs[i];
    auto path = storage::resolve(spec::expandTarget(out.target, job_id, s.name), job.data_root,
                                 s.base_dir);
    if (!path) {
      return fail(path.error().code,
                  spec::fieldLabel(s, "outputs[" + std::to_string(i) + "].target") +
                      path.error().message);
    }
    out.target_path = *path;
  }

  // The file system: refuse now what would fail at start.
  auto checked = backends::checkCommand(s);
  if (!checked) {
    // Its messages start with the field; say where that field came from.
    std::string msg = checked.error().message;
    for (const std::string field : {"command", "workdir"}) {
      if (startsWith(msg, field + ": ")) msg = spec::fieldLabel(s, field) + msg.substr(field.size() + 2);
    }
    return fail(checked.error().code, msg);
  }
  const std::string workdir = *checked;
  plan::PlanContext& ctx = job.context;
  ctx.as_root = ::geteuid() == 0;
  if (s.backend == spec::Backend::kSlurm) {
    // Real hosts: each node has the GPUs Slurm gives it (--gres), numbered from 0 in the step.
    ctx.nodes_share_machine = false;
    int per_node = 0;
    for (const spec::Role& role : s.roles) {
      if (role.procs_per_node == spec::kAutoProcs) {
        return fail(Code::kInvalidArgument,
                    spec::fieldLabel(s, "roles." + role.name + ".procs_per_node") +
                        "auto counts this machine's GPUs, not the cluster nodes': give a number "
                        "for the slurm backend");
      }
      per_node = std::max(per_node, role.procs_per_node * role.resources.gpus);
    }
    for (int g = 0; g < per_node; ++g) ctx.gpus.push_back(g);
  } else {
    ctx.gpus = backends::localGpus();
    ctx.device_ips = backends::localAscendAddresses();
  }
  for (spec::Role& role : s.roles) {
    if (role.procs_per_node != spec::kAutoProcs) continue;
    // One per device; simulated nodes share this machine's devices.
    int per_node = static_cast<int>(ctx.gpus.size()) / spec::totalNodes(s);
    role.procs_per_node = std::max(per_node, 1);
  }
  ctx.job_id = job_id;
  ctx.data_root = job.data_root;
  ctx.cohort_bin = backends::selfExecutable();
  if (o.isolate) {
    if (::access("/usr/bin/bwrap", X_OK) != 0) {
      return fail(Code::kFailedPrecondition,
                  "--isolate needs bubblewrap (/usr/bin/bwrap): apt-get install bubblewrap");
    }
    ctx.isolate = true;
  }
  ctx.job_dir = job::Layout::of(job.data_root, ctx.job_id).dir();
  if (!o.run_as.empty()) {
    auto colon = o.run_as.find(':');
    auto uid = parseInt(o.run_as.substr(0, colon));
    auto gid = colon == std::string::npos ? uid : parseInt(o.run_as.substr(colon + 1));
    if (!uid || !gid || *uid <= 0 || *gid <= 0) {
      return fail(Code::kInvalidArgument, "--run-as: expected UID:GID (not root), got '" +
                                              o.run_as + "'");
    }
    if (::geteuid() != 0) {
      return fail(Code::kFailedPrecondition, "--run-as: only root can run ranks as another user");
    }
    ctx.uid = *uid;
    ctx.gid = *gid;
  }
  ctx.workdir = workdir;
  if (o.log_ranks == "none") {
    ctx.console_ranks = {-1};  // no rank has that number: nothing is echoed
  } else if (!o.log_ranks.empty()) {
    auto ranks = parseRankList(o.log_ranks);
    if (!ranks) return withContext(ranks.error(), "--log-ranks");
    ctx.console_ranks = *ranks;
  }
  return job;
}

}  // namespace cohort::cli
