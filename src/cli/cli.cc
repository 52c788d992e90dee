#include "cli/cli.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "agent/coordinator.h"
#include "agent/node_agent.h"
#include "backends/local.h"
#include "backends/slurm.h"
#include "cli/args.h"
#include "cli/client_cmd.h"
#include "cli/cp_cmd.h"
#include "cli/job_options.h"
#include "cli/server_cmd.h"
#include "cli/stacks_cmd.h"
#include "cli/top_cmd.h"
#include "job/layout.h"
#include "plan/port_lease.h"
#include "util/fd.h"
#include "util/text.h"

#ifndef COHORT_VERSION
#define COHORT_VERSION "0.1.0"
#endif

namespace cohort::cli {

namespace {

const char* kMainHelp = R"(cohort: run distributed training jobs, on this machine or a cluster

Usage:
  cohort run [flags] [-f job.yaml] [-- command...]   run a job here, nodes simulated locally
  cohort plan [flags] [-f job.yaml] [-- command...]  show what each rank would get; start nothing
  cohort cp [flags] SRC DST                          copy files to, from or within the store
  cohort stacks JOB                                  every rank's Python stack of a running job, now
  cohort top JOB                                     a running job's ranks: CPU, memory, metrics
  cohort server [flags]                              the multi-user job service (queue, accounts)
  cohort exec --coordinator ADDR:PORT --node N       a node agent (started by cohort itself)
  cohort version                                     print the version
  cohort help [command]                              help for a command

%CLIENT%
Examples:
  cohort run --nodes 2 --nproc-per-node 2 --framework pytorch -- python3 train.py
  cohort run -f examples/pytorch/ddp.yaml
  cohort plan -f examples/pytorch/ddp.yaml --json
  cohort cp ./digits store://datasets/digits

Exit codes: 0 the job succeeded; 2 bad usage or a bad job (nothing was started); 124 max_runtime
exceeded, or no rank made progress for hang_timeout; 128+N stopped by signal N; otherwise the
exit code of the rank that failed first (128+N if it was killed by signal N); 1 when the job
could not run or finish for another reason (staging an input or copying an output failed, a node's agent was lost), which cohort
prints with the file or node concerned.
)";

std::string mainHelp() {
  std::string text = kMainHelp;
  text.replace(text.find("%CLIENT%"), 8, clientCommandsHelp());
  return text;
}

std::string runHelp() {
  return std::string(R"(cohort run: run a job on this machine; each node is simulated by a node agent process

Usage: cohort run [flags] [-f job.yaml] [-- command...]

Every rank gets cohort's variables (COHORT_RANK, COHORT_WORLD_SIZE, ...) and, for PyTorch jobs
(the default), the variables torchrun sets (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
MASTER_PORT (a free port leased for this job), ...), so torchrun scripts run unchanged.
When one rank fails, every rank is stopped and the first failure is reported with its last
log lines. The job directory (<data-root>/jobs/<id>/) holds logs/<role>-<rank>.log, output/
(COHORT_OUTPUT_DIR), work/node<i>/ (COHORT_WORK_DIR, where inputs are staged before any rank
starts), files/ (the rank table and other files cohort writes for the ranks), and the job's
record: plan.json, events.jsonl and result.json. Ranks may write only work/ and output/.

)") + jobFlagsHelp() + R"(
Output:
  --log-ranks LIST         ranks echoed on the console: all (default), none, 0, 0,2-3
                           (every rank's full output is always in its log file)
  -q, --quiet              no progress lines from cohort on stderr

Ctrl-C stops the job gracefully (SIGTERM, then SIGKILL after the grace period); press it
again to kill at once.
)";
}

std::string planHelp() {
  return std::string(R"(cohort plan: print what `cohort run` would start, without starting anything

Usage: cohort plan [flags] [-f job.yaml] [--json] [-- command...]

Shows each rank's identity, argv and the variables cohort sets, and the files it writes.
MASTER_PORT shows as "auto": a free port is leased when the job starts. With --backend slurm
(or backend: slurm in the job file) it prints the batch script cohort would submit instead.

)") + jobFlagsHelp() + R"(
Output:
  --json                   the plan as JSON
)";
}

const char* kExecHelp = R"(cohort exec: the node agent (started by cohort run, or by srun on a cluster)

Usage: cohort exec --coordinator ADDR:PORT [--node N] [--interface NAME | --cidr NET]

Reads the job secret from COHORT_JOB_SECRET, dials the coordinator, runs this node's ranks.
  --node N          this node's index (default: Slurm's SLURM_NODEID)
  --interface NAME  tell the coordinator this host's address on NAME (default: the address
  --cidr NET        in NET; by default the address this host reaches the coordinator from)
)";

int reportError(const Error& e) {
  std::fprintf(stderr, "cohort: error: %s\n", e.message.c_str());
  return exitCodeFor(e);
}

// The job's own directory must be new (jobs never share directories), unless `cohort server`
// made it for this job (--job-id) and put the job file and console log there. Ranks that run as
// an identity of their own (`uid` >= 0) own work/ and output/ and nothing else.
Result<void> makeJobDirs(const std::string& job_dir, bool made_by_server, int uid, int gid) {
  const job::Layout layout(job_dir);
  COHORT_TRY(makeDirs(job_dir.substr(0, job_dir.rfind('/'))));
  if (::mkdir(job_dir.c_str(), 0755) < 0 && !(made_by_server && errno == EEXIST)) {
    return failErrno("create '" + job_dir + "'");
  }
  for (const std::string& dir : {layout.filesDir(), layout.logsDir()}) {
    if (::mkdir(dir.c_str(), 0755) < 0) return failErrno("create '" + dir + "'");
  }
  for (const std::string& dir : {layout.workDir(), layout.outputDir()}) {
    if (::mkdir(dir.c_str(), 0755) < 0) return failErrno("create '" + dir + "'");
    if (uid >= 0 && ::chown(dir.c_str(), uid, gid) < 0) return failErrno("chown '" + dir + "'");
  }
  return {};
}

// The plan and the files made from it; they can be made again: no fsync on the way to the start.
Result<void> writePlan(const plan::Plan& plan) {
  COHORT_TRY(writeFileAtomic(job::Layout(plan.job_dir).planFile(), plan::toJson(plan), false));
  for (const plan::GeneratedFile& f : plan.files) {
    COHORT_TRY(makeDirs(f.path.substr(0, f.path.rfind('/'))));
    COHORT_TRY(writeFileAtomic(f.path, f.content, false));
  }
  return {};
}

int cmdPlan(int argc, char** argv) {
  auto options = parseJobOptions(argc, argv, 2);
  if (!options) return reportError(options.error());
  auto job = prepareJob(*options);
  if (!job) return reportError(job.error());
  auto plan = plan::makePlan(job->spec, job->context);
  if (!plan) return reportError(plan.error());
  if (job->spec.backend == spec::Backend::kSlurm && !options->json) {
    // What would be submitted; the ranks' addresses are the nodes' own, known once they run.
    auto at = backends::slurmCoordinatorAddress(job->spec.network);
    auto script = backends::slurmBatchScript(job->spec, *plan, backends::selfExecutable(),
                                             (at ? at->address : "ADDR") + ":PORT");
    if (!script) return reportError(script.error());
    if (!at) std::fprintf(stderr, "cohort: %s\n", at.error().message.c_str());
    std::fwrite(script->data(), 1, script->size(), stdout);
    return 0;
  }
  std::string out = options->json ? plan::toJson(*plan) : plan::toText(*plan);
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

int cmdRun(int argc, char** argv) {
  // A stop that comes while the job is being prepared is held for the coordinator (its signalfd
  // reads it), which then stops the job and writes its result, rather than ending cohort with no
  // record of the job.
  sigset_t stops;
  sigemptyset(&stops);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&stops, sig);
  ::sigprocmask(SIG_BLOCK, &stops, nullptr);
  auto options = parseJobOptions(argc, argv, 2);
  if (!options) return reportError(options.error());
  auto job = prepareJob(*options);
  if (!job) return reportError(job.error());
  std::vector<plan::PortLease> leases;  // held until cohort exits
  for (int i = 0; i < plan::portsNeeded(job->spec); ++i) {
    auto lease = plan::PortLease::acquire(job->context.master_addr, plan::defaultLeaseDir());
    if (!lease) return reportError(lease.error());
    job->context.ports.push_back(lease->port());
    leases.push_back(std::move(*lease));
  }
  auto plan = plan::makePlan(job->spec, job->context);
  if (!plan) return reportError(plan.error());
  const bool slurm = job->spec.backend == spec::Backend::kSlurm;
  std::string listen_addr = "127.0.0.1";
  if (slurm) {
    // Asked before anything is made: a cluster that cannot be reached leaves nothing behind.
    auto at = backends::slurmCoordinatorAddress(job->spec.network);
    if (!at) return reportError(at.error());
    listen_addr = at->address;
  }

  if (auto made = makeJobDirs(plan->job_dir, !options->job_id.empty(), job->context.uid,
                              job->context.gid);
      !made) {
    return reportError(made.error());
  }
  if (auto w = writePlan(*plan); !w) return reportError(w.error());
  const bool progress = !options->quiet;
  agent::CoordinatorOptions copts;
  copts.progress = progress;
  copts.listen_addr = listen_addr;
  std::unique_ptr<agent::AgentLauncher> launcher;
  if (slurm) {
    // The agents dial in from the cluster's nodes; each says where its node is, and the plan is
    // made again with those addresses (MASTER_ADDR is node 0's).
    copts.place = [&job](const std::vector<HostAddress>& hosts) -> Result<plan::Plan> {
      plan::PlanContext ctx = job->context;
      ctx.hosts.clear();
      for (const HostAddress& h : hosts) {
        ctx.hosts.push_back(h.address);
        ctx.interfaces.push_back(h.interface);
      }
      ctx.master_addr = hosts.at(0).address;
      COHORT_ASSIGN(plan::Plan placed, plan::makePlan(job->spec, ctx));
      COHORT_TRY(writePlan(placed));
      return placed;
    };
    launcher = std::make_unique<backends::SlurmLauncher>(job->spec, *plan,
                                                         backends::selfExecutable(), progress);
  } else {
    launcher = std::make_unique<backends::LocalLauncher>(backends::selfExecutable());
  }
  if (progress) {
    int nodes = static_cast<int>(plan->nodes.size());
    std::fprintf(stderr, "cohort: job %s: %s, %d node(s), %d rank(s), master port %d\n",
                 plan->job_id.c_str(), plan->framework.c_str(), nodes, plan->world_size,
                 job->context.ports[0]);
    std::fprintf(stderr, "cohort: job directory %s\n", plan->job_dir.c_str());
  }
  std::fflush(stdout);
  if (options->report) {
    if (options->job_id.empty()) {
      return reportError(Error{Code::kInvalidArgument, "--report: only with --job-id"});
    }
    auto target = agent::reportTarget(job::Layout(plan->job_dir), plan->job_id);
    if (!target) return reportError(target.error());
    copts.report = std::move(*target);
  }
  auto outcome = agent::runCoordinator(*plan, *launcher, copts);
  if (!outcome) return reportError(outcome.error());
  if (outcome->state == agent::JobState::kSucceeded) {
    if (progress) {
      std::fprintf(stderr, "cohort: job %s succeeded; outputs in %s/output\n",
                   plan->job_id.c_str(), plan->job_dir.c_str());
    }
  } else {
    std::fprintf(stderr, "cohort: job %s %s: %s (exit code %d)\n", plan->job_id.c_str(),
                 agent::jobStateName(outcome->state), outcome->reason.c_str(),
                 outcome->exit_code);
    if (!outcome->diagnosis.empty()) std::fprintf(stderr, "%s", outcome->diagnosis.c_str());
    if (outcome->root_cause) {
      std::string report = agent::formatRootCause(*outcome->root_cause, outcome->exits);
      std::fprintf(stderr, "%s", report.c_str());
    }
    std::fprintf(stderr, "cohort: logs in %s/logs\n", plan->job_dir.c_str());
  }
  return outcome->exit_code;
}

int cmdExec(int argc, char** argv) {
  agent::AgentOptions options;
  bool node_given = false;
  for (int i = 2; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(kExecHelp, stdout);
      return 0;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "cohort exec: %s needs a value\n", arg.c_str());
      return kExitUsage;
    }
    std::string value = argv[++i];
    if (arg == "--coordinator") {
      auto colon = value.rfind(':');
      auto port = colon == std::string::npos ? Result<int>(0) : parseInt(value.substr(colon + 1));
      if (colon == std::string::npos || !port) {
        std::fprintf(stderr, "cohort exec: --coordinator: expected ADDR:PORT, got '%s'\n",
                     value.c_str());
        return kExitUsage;
      }
      options.coordinator_addr = value.substr(0, colon);
      options.coordinator_port = *port;
    } else if (arg == "--node") {
      auto node = parseInt(value);
      if (!node || *node < 0) {
        std::fprintf(stderr, "cohort exec: --node: expected a node index, got '%s'\n",
                     value.c_str());
        return kExitUsage;
      }
      options.node = *node;
      node_given = true;
    } else if (arg == "--interface") {
      options.interface = value;
    } else if (arg == "--cidr") {
      options.cidr = value;
    } else {
      std::fprintf(stderr, "cohort exec: unknown flag '%s'\n", arg.c_str());
      return kExitUsage;
    }
  }
  if (!node_given) {
    // Started by srun: one agent per node of the allocation, in node order.
    const char* id = std::getenv("SLURM_NODEID");
    auto node = parseInt(id ? id : "");
    if (!node || *node < 0) {
      std::fprintf(stderr, "cohort exec: needs --node N (or SLURM_NODEID, set by srun)\n");
      return kExitUsage;
    }
    options.node = *node;
  }
  const char* secret = std::getenv("COHORT_JOB_SECRET");
  if (!secret || !*secret || options.coordinator_port == 0) {
    std::fprintf(stderr, "cohort exec: needs --coordinator ADDR:PORT and COHORT_JOB_SECRET; "
                         "it is started by cohort itself\n");
    return kExitUsage;
  }
  options.secret = secret;
  auto result = agent::runNodeAgent(options);
  if (!result) {
    std::fprintf(stderr, "cohort exec: node %d: %s\n", options.node,
                 result.error().message.c_str());
    return 1;
  }
  return *result;
}

bool wantsHelp(int argc, char** argv) {
  for (int i = 2; i < argc; ++i) {
    if (std::strcmp(argv[i], "--") == 0) return false;
    if (std::strcmp(argv[i], "-h") == 0 || std::strcmp(argv[i], "--help") == 0) return true;
  }
  return false;
}

int help(const std::string& topic) {
  if (topic == "run") {
    std::fputs(runHelp().c_str(), stdout);
  } else if (topic == "plan") {
    std::fputs(planHelp().c_str(), stdout);
  } else if (topic == "exec") {
    std::fputs(kExecHelp, stdout);
  } else if (topic == "cp") {
    std::fputs(cpHelp(), stdout);
  } else if (topic == "stacks") {
    std::fputs(stacksHelp(), stdout);
  } else if (topic == "top") {
    std::fputs(topHelp(), stdout);
  } else if (topic == "server") {
    std::fputs(serverHelp(), stdout);
  } else if (!clientHelp(topic).empty()) {
    std::fputs(clientHelp(topic).c_str(), stdout);
  } else {
    std::fputs(mainHelp().c_str(), stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fputs(mainHelp().c_str(), stderr);
    return kExitUsage;
  }
  std::string command = argv[1];
  if (command == "-h" || command == "--help" || command == "help") {
    return help(argc > 2 ? argv[2] : "");
  }
  if (command == "version" || command == "--version") {
    std::printf("cohort %s\n", COHORT_VERSION);
    return 0;
  }
  if (command == "cp") return cmdCp(argc, argv);
  if (command == "stacks") return cmdStacks(argc, argv);
  if (command == "top") return cmdTop(argc, argv);
  if (command == "server") {
    if (wantsHelp(argc, argv)) return help(command);
    return cmdServer(argc, argv);
  }
  if (isClientCommand(command)) {
    if (wantsHelp(argc, argv)) return help(command);
    return cmdClient(argc, argv);
  }
  if (command == "run" || command == "plan" || command == "exec") {
    if (command != "exec" && wantsHelp(argc, argv)) return help(command);
    if (command == "run") return cmdRun(argc, argv);
    if (command == "plan") return cmdPlan(argc, argv);
    return cmdExec(argc, argv);
  }
  std::fprintf(stderr, "cohort: unknown command '%s' (see cohort --help)\n", command.c_str());
  return kExitUsage;
}

}  // namespace cohort::cli
