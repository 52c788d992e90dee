#include "cli/cli.h"

#include <fcntl.h>
#include <linux/nsfs.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "account/as_account.h"
#include "agent/coordinator.h"
#include "agent/job_ports.h"
#include "agent/node_agent.h"
#include "agent/reporter.h"
#include "backends/local.h"
#include "backends/slurm.h"
#include "backends/ssh.h"
#include "backends/volcano.h"
#include "cli/args.h"
#include "cli/code_upload.h"
#include "cli/client.h"
#include "cli/client_cmd.h"
#include "cli/command.h"
#include "cli/coordinate_cmd.h"
#include "cli/cp_cmd.h"
#include "cli/debug_cmd.h"
#include "cli/session_cmd.h"
#include "cli/session_host.h"
#include "cli/env_cmd.h"
#include "cli/job_options.h"
#include "cli/job_run.h"
#include "cli/volcano_run.h"
#include "cli/server_cmd.h"
#include "cli/stacks_cmd.h"
#include "cli/top_cmd.h"
#include "job/layout.h"
#include "plan/port_lease.h"
#include "spec/job_spec.h"
#include "storage/archive.h"
#include "util/fd.h"
#include "util/net.h"
#include "util/text.h"

#ifndef COHORT_VERSION
#define COHORT_VERSION "0.1.0"
#endif

namespace cohort::cli {

namespace {

const char* kMainHelp = R"(cohort: run distributed training jobs, on this machine or a cluster

Usage:
%HERE%

Server commands (a cohort server queues jobs for several users; start with cohort login):
%SERVER%

Examples:
  cohort run --nodes 2 --nproc-per-node 2 --framework pytorch -- python3 train.py
  cohort run -f examples/pytorch/ddp.yaml
  cohort run --debug 1 --nodes 2 --nproc-per-node 2 -- python3 train.py
  cohort plan -f examples/pytorch/ddp.yaml --json
  cohort plan -f examples/pytorch/ddp.yaml --backend volcano --image REF   # a Volcano Job
  cohort run -f examples/pytorch/ddp.yaml --backend volcano --image REF    # run it there
  cohort run --hosts gpu1,gpu2 --nproc-per-node 8 -- python3 train.py        # two machines, ssh
  cohort cp ./digits store://datasets/digits

Exit codes: 0 the job succeeded; 2 bad usage or a bad job (nothing was started); 124 max_runtime
exceeded, or no rank made progress for hang_timeout; 128+N stopped by signal N; otherwise the
exit code of the rank that failed first (128+N if it was killed by signal N); 1 when the job
could not run or finish for another reason (staging an input or copying an output failed, a
node's agent was lost), which cohort prints with the file or node concerned.
)";

// cohort --help: every command's line, from the table.
std::string mainHelp() {
  std::string text = kMainHelp;
  text.replace(text.find("%HERE%\n"), 7, commandLines(commands(), Command::Group::kHere));
  text.replace(text.find("%SERVER%\n"), 9, commandLines(commands(), Command::Group::kServer));
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

With --backend volcano (or backend: volcano in the job file) the job runs as a Volcano Job in
the Kubernetes cluster of your kubeconfig (--namespace NS, else the context's): cohort creates
it, says what its gang waits for, prints what its coordinator pod prints and exits with the
job's exit code; Ctrl-C deletes it, stopping every rank gracefully (docs/volcano.md).

With --hosts h1,h2 (or --hostfile FILE) each node runs on one of those machines: cohort runs
your ssh (--ssh to change it) to start a node agent on each, copying cohort itself into the
host's ~/.cache/cohort/bin when it lacks it and the workdir as a snapshot (unless
--shared-workdir); the agents dial back to this machine, where the job is coordinated, logged
and decided as locally. A host that cannot be reached or lacks the job's Python or modules is
named before anything starts; whatever ends the job, nothing of it is left on the hosts, and
what the ranks wrote in the job's output/ comes back here (docs/multi-host.md).

)") + jobFlagsHelp("run") + "\nOutput:\n" + jobOutputFlagsHelp("run") + R"(
Ctrl-C stops the job gracefully (every rank gets the stop signal, SIGTERM unless
--stop-signal says otherwise, then SIGKILL after the grace period); press it again to kill at
once.
)";
}

std::string planHelp() {
  return std::string(R"(cohort plan: print what `cohort run` would start, without starting anything

Usage: cohort plan [flags] [-f job.yaml] [--json] [-- command...]

Shows each rank's identity, argv and the variables cohort sets, and the files it writes.
MASTER_PORT shows as "auto": a free port is leased when the job starts. With --backend slurm
(or backend: slurm in the job file) it prints the batch script cohort would submit instead.
With --backend volcano it prints the job as a Volcano Job (batch.volcano.sh/v1alpha1) for
kubectl create -f - (YAML; JSON with --json): its pods run the image of --image REF (or the
job file's environment: {image: REF}) and read the job's secret from the Kubernetes Secret
<job>-secret (docs/volcano.md).

)") + jobFlagsHelp("plan") + "\nOutput:\n" + jobOutputFlagsHelp("plan");
}

// The flags of cohort exec, each once with its help.
const std::vector<FlagSpec>& execFlags() {
  static const std::vector<FlagSpec> kFlags = {
      {"--coordinator", "", "ADDR:PORT", "the job's coordinator, which this agent dials"},
      {"--node", "", "N", "this node's index (default: Slurm's SLURM_NODEID)"},
      {"--interface", "", "NAME",
       "tell the coordinator this host's address on NAME (default: the address this host "
       "reaches the coordinator from)"},
      {"--cidr", "", "NET", "tell the coordinator this host's address in NET"},
      // cohort run hands an agent it starts its node's network namespace.
      {"--netns-fd", "", "FD", ""},
  };
  return kFlags;
}

std::string execHelp() {
  return R"(cohort exec: the node agent (started by srun on a cluster, by a Volcano Job's pods, or
by cohort run, whose agents are most often copies of itself named "cohort node N")

Usage: cohort exec --coordinator ADDR:PORT [--node N] [--interface NAME | --cidr NET]

Reads the job secret from COHORT_JOB_SECRET, dials the coordinator, runs this node's ranks.
ADDR is an IPv4 address or a host name (a pod's, from Volcano's svc plugin), looked up forward
until it resolves or 60 s have passed.

)" + flagsHelp(execFlags());
}

int reportError(const Error& e) {
  std::fprintf(stderr, "cohort: error: %s\n", e.message.c_str());
  return exitCodeFor(e);
}

int cmdRun(int argc, char** argv);

// How long a server's coordinator that refused its job waits for the server to hear it (the
// server may be restarting).
constexpr Millis kRefusalLinger{600000};

// Whether SIGINT, SIGTERM or SIGHUP came (they are blocked in cohort run): a stop says not to wait
// for the server any longer. "" when none did.
std::string stopSignalCame() {
  sigset_t stops;
  sigemptyset(&stops);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&stops, sig);
  const timespec now{};
  const int sig = ::sigtimedwait(&stops, nullptr, &now);
  return sig > 0 ? "stopped waiting for it: " + spec::stopSignalName(sig) : std::string();
}

// `cohort rerun JOB [flags]`: a job of this machine runs again from the job file in its
// directory, the flags applied as cohort run applies them; any other job is the server's
// (client_cmd.cc).
int cmdRerun(int argc, char** argv) {
  if (argc < 3 || argv[2][0] == '-' || argv[2][0] == '\0') {
    std::fprintf(stderr, "cohort rerun: give a job id first (see cohort rerun --help)\n");
    return kExitUsage;
  }
  const std::string id = argv[2];
  // Its flags are cohort run's for a job of this machine, and its own for a job of the server:
  // here only where the job is matters (--data-root, --server, --token, --ca).
  std::vector<FlagSpec> specs = clientFlags("rerun");
  for (const FlagSpec& f : jobFlagSpecs()) specs.push_back(f);
  auto flags = parseArgs("rerun", argc, argv, withServerFlags(std::move(specs)),
                         ParseMode::kPositionals, 3);
  if (!flags) return reportError(flags.error());
  const std::string root = dataRoot(flags->get("--data-root"));
  const job::Layout layout = job::Layout::of(root, id);
  if (id.find('/') != std::string::npos || id[0] == '.' ||
      ::access(layout.dir().c_str(), F_OK) != 0) {
    // Not a job of this machine: one of the server this machine is logged in to, if any.
    if (auto server = resolveServerSettings(*flags); !server) {
      std::fprintf(stderr, "cohort rerun: no job '%s' in %s, and no server to ask (%s)\n",
                   id.c_str(), job::jobsDir(root).c_str(), server.error().message.c_str());
      return kExitUsage;
    }
    return cmdServerRerun(argc, argv);
  }
  if (::access(layout.specFile().c_str(), R_OK) != 0) {
    std::fprintf(stderr,
                 "cohort rerun: job %s has no job file (%s): it ran with an older cohort; run "
                 "its job.yaml again with cohort run -f\n",
                 id.c_str(), layout.specFile().c_str());
    return kExitUsage;
  }
  std::string run = "run", flag = "-f", file = layout.specFile();
  std::vector<char*> args = {argv[0], run.data(), flag.data(), file.data()};
  for (int i = 3; i < argc; ++i) args.push_back(argv[i]);
  args.push_back(nullptr);
  return cmdRun(static_cast<int>(args.size()) - 1, args.data());
}

int cmdPlan(int argc, char** argv) {
  auto options = parseJobOptions("plan", argc, argv, 2);
  if (!options) return reportError(options.error());
  for (const std::string& note : options->notes) std::fprintf(stderr, "cohort: %s\n", note.c_str());
  auto job = prepareJob(*options, /*dry=*/true);
  if (!job) return reportError(job.error());
  auto plan = plan::makePlan(job->spec, job->context);
  if (!plan) return reportError(plan.error());
  if (job->spec.backend == spec::Backend::kVolcano) {
    auto manifest = backends::volcanoJob(job->spec, *plan);
    if (!manifest) return reportError(manifest.error());
    const std::string out =
        options->json ? manifest->dump(2) + "\n" : backends::manifestYaml(*manifest);
    std::fwrite(out.data(), 1, out.size(), stdout);
    return 0;
  }
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

bool progress_wanted(const JobOptions& options) { return !options.quiet; }

// How `cohort run --hosts` reaches its hosts. Errors: kInvalidArgument for --hosts, --hostfile
// or --ssh.
Result<backends::SshOptions> sshOptions(const JobOptions& options, const PreparedJob& job,
                                        bool progress) {
  backends::SshOptions o;
  COHORT_ASSIGN(o.hosts, hostsOf(options));
  COHORT_ASSIGN(o.ssh, backends::splitSshCommand(options.ssh.empty() ? "ssh" : options.ssh));
  o.cohort_exe = backends::selfExecutable();
  if (!job.host_python.args.empty()) {
    o.python = job.spec.command[0];
    o.python_args = job.host_python.args;
    o.explain = job.host_python.explain;
  }
  o.progress = progress;
  return o;
}

// The snapshot of `workdir` that hosts without it get (storage/archive.h: its .cohortignore,
// else its .gitignore, is left out), also unpacked into `code_dir` for a host that shares this
// machine's job directory. Errors: those of listTree and writeArchive, naming --shared-workdir.
Result<std::string> workdirSnapshot(const std::string& workdir, const std::string& code_dir) {
  auto made = [&]() -> Result<std::string> {
    COHORT_ASSIGN(auto rules, storage::IgnoreRules::forTree(workdir));
    storage::ArchiveLimits limits;
    limits.max_bytes = kDefaultMaxUpload;
    COHORT_ASSIGN(auto listing, storage::listTree(workdir, rules, limits));
    UniqueFd file(::memfd_create("cohort-snapshot", MFD_CLOEXEC));
    if (!file.valid()) return failErrno("memfd_create");
    COHORT_TRY(storage::writeArchive(workdir, listing, file.get()));
    struct stat st{};
    if (::fstat(file.get(), &st) != 0) return failErrno("stat the snapshot");
    std::string archive(static_cast<size_t>(st.st_size), '\0');
    if (::pread(file.get(), archive.data(), archive.size(), 0) != st.st_size) {
      return failErrno("read the snapshot");
    }
    COHORT_TRY(storage::extractArchive(archive, code_dir, limits));
    return archive;
  }();
  if (!made) {
    return fail(made.error().code,
                "workdir: its snapshot for the hosts (" + workdir + "): " + made.error().message +
                    " (on a filesystem every host shares, --shared-workdir sends none)");
  }
  return made;
}

// `cohort snapshot pack DIR` (to stdout) | `unpack DIR` (from stdin): what a host's script
// over SSH runs to receive the workdir and send back what the ranks wrote (backends/ssh.h).
int cmdSnapshot(int argc, char** argv) {
  if (argc != 4 || (std::strcmp(argv[2], "pack") != 0 && std::strcmp(argv[2], "unpack") != 0)) {
    std::fprintf(stderr, "cohort snapshot: pack DIR | unpack DIR (started by cohort itself)\n");
    return kExitUsage;
  }
  const std::string dir = argv[3];
  storage::ArchiveLimits limits;
  if (std::strcmp(argv[2], "pack") == 0) {
    auto listing = storage::listTree(dir, storage::IgnoreRules::fromText(""), limits);
    auto written = listing ? storage::writeArchive(dir, *listing, STDOUT_FILENO)
                           : Result<void>(tl::unexpected<Error>(listing.error()));
    if (!written) return reportError(withContext(written.error(), dir).value());
    return 0;
  }
  std::string archive;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(STDIN_FILENO, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return reportError(Error{Code::kIo, std::string("read: ") + std::strerror(errno)});
    if (n == 0) break;
    archive.append(buf, static_cast<size_t>(n));
    if (static_cast<int64_t>(archive.size()) > limits.max_bytes + (int64_t{64} << 20)) {
      return reportError(Error{Code::kInvalidArgument, "the snapshot is over its limit"});
    }
  }
  auto extracted = storage::extractArchive(archive, dir, limits);
  if (!extracted) return reportError(withContext(extracted.error(), dir).value());
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
  // Rank 0 reads cohort's stdin when it is a pipe or a file (as under mpirun), not a terminal
  // that cohort's user types Ctrl-C into. Asked before anything is opened, which could take
  // descriptor 0 when it was closed.
  const bool stdin_to_forward = ::fcntl(STDIN_FILENO, F_GETFD) >= 0 && !::isatty(STDIN_FILENO);
  auto options = parseJobOptions("run", argc, argv, 2);
  if (!options) return reportError(options.error());
  for (const std::string& note : options->notes) std::fprintf(stderr, "cohort: %s\n", note.c_str());
  if (auto spec = buildSpec(*options); spec && spec->backend == spec::Backend::kVolcano) {
    return runOnVolcano(*options);  // the coordinator runs in the cluster (volcano_run.h)
  }
  // A server's job (--report) that cannot run is refused in its record and to the server, with
  // its cause: never a coordinator gone without a word.
  std::optional<agent::ReportTarget> target;
  auto refuse = [&](const Error& e) {
    const int code = reportError(e);
    if (options->report && !options->job_id.empty()) {
      const job::Layout layout(jobDirFor(*options));
      if (auto reported = agent::reportRefusal(layout, options->job_id, std::move(target),
                                               e.message, code, kRefusalLinger, stopSignalCame);
          !reported) {
        std::fprintf(stderr, "cohort: the job's refusal could not be reported: %s\n",
                     reported.error().message.c_str());
      }
    }
    return code;
  };
  auto job = prepareJob(*options);
  if (!job) return refuse(job.error());
  auto network = makeJobNetwork(*job, *options);  // held until cohort exits
  if (!network) return refuse(network.error());
  std::vector<plan::PortLease> leases;  // held until cohort exits
  if (auto leased = leasePorts(*job, leases); !leased) return refuse(leased.error());
  auto plan = plan::makePlan(job->spec, job->context);
  if (!plan) return refuse(plan.error());
  const bool slurm = job->spec.backend == spec::Backend::kSlurm;
  const bool ssh = job->spec.backend == spec::Backend::kSsh;
  std::string listen_addr = "127.0.0.1";
  if (slurm) {
    // Asked before anything is made: a cluster that cannot be reached leaves nothing behind.
    auto at = backends::slurmCoordinatorAddress(job->spec.network);
    if (!at) return refuse(at.error());
    listen_addr = at->address;
  }
  std::optional<backends::SshOptions> on_hosts;
  if (ssh) {
    auto made = sshOptions(*options, *job, progress_wanted(*options));
    if (!made) return refuse(made.error());
    on_hosts = std::move(*made);
    // The job's network setting, where this machine has it; else every address, each host's
    // agent dialling the one that host reached this machine from.
    listen_addr = "0.0.0.0";
    const spec::Network& net = job->spec.network;
    if (!net.interface.empty() || !net.cidr.empty()) {
      if (auto here = chooseAddress(net.interface, net.cidr, ""); here) listen_addr = here->address;
    }
  }

  if (auto made = makeJobDirs(plan->job_dir, !options->job_id.empty(), job->context.uid,
                              job->context.gid);
      !made) {
    return refuse(made.error());
  }
  if (options->job_id.empty()) {
    // The job file, to run it again (cohort rerun): a server's job has the one it submitted.
    spec::JobSpec portable = job->spec;
    makePathsAbsolute(portable);
    const std::string file = job::Layout(plan->job_dir).specFile();
    if (auto w = writeFileAtomic(file, spec::toJobFile(portable), false); !w) {
      return refuse(w.error());
    }
  }
  const bool progress = !options->quiet;
  if (on_hosts && !options->shared_workdir) {
    auto snapshot = workdirSnapshot(job->source_workdir, job::Layout(plan->job_dir).codeDir());
    if (!snapshot) return refuse(snapshot.error());
    on_hosts->snapshot = std::move(*snapshot);
  }
  agent::CoordinatorOptions copts;
  copts.progress = progress;
  copts.listen_addr = listen_addr;
  std::unique_ptr<agent::AgentLauncher> launcher;
  if (on_hosts) {
    // Each host's agent says where its node is; the plan is made again with those addresses.
    copts.place = placeOnHosts(*job);
    launcher = std::make_unique<backends::SshLauncher>(*plan, job->spec.network,
                                                       std::move(*on_hosts));
  } else if (slurm) {
    // The agents dial in from the cluster's nodes; each says where its node is, and the plan is
    // made again with those addresses (MASTER_ADDR is node 0's).
    copts.place = placeOnHosts(*job);
    launcher = std::make_unique<backends::SlurmLauncher>(job->spec, *plan,
                                                         backends::selfExecutable(), progress);
  } else {
    bool terminal = false;
    for (const plan::NodePlan& node : plan->nodes) {
      for (const plan::RankPlan& r : node.ranks) terminal = terminal || r.terminal;
    }
    // A server's job (--report) reads nothing of the server's.
    const bool forwarded = stdin_to_forward && !options->report && plan::forwardStdin(*plan);
    auto local = std::make_unique<backends::LocalLauncher>(backends::selfExecutable(),
                                                           terminal || forwarded);
    if (*network) local->useNetwork(&**network);
    launcher = std::move(local);
  }
  if (progress) {
    int nodes = static_cast<int>(plan->nodes.size());
    std::fprintf(stderr, "cohort: job %s: %s, %d node(s), %d rank(s), master port %d%s\n",
                 plan->job_id.c_str(), plan->framework.c_str(), nodes, plan->world_size,
                 job->context.ports[0],
                 *network ? (" on the job's own network (" +
                             std::string(proc::egressName((*network)->egress())) +
                             ", node 0 at " + (*network)->address(0) + ")")
                                .c_str()
                          : "");
    std::fprintf(stderr, "cohort: job directory %s\n", plan->job_dir.c_str());
    // In a session, more ranks than its CPUs run, as they do on a laptop: they share its quota.
    const int cores = job->context.cores;
    if (job->spec.backend == spec::Backend::kLocal && std::getenv("COHORT_CPUS") && cores > 0 &&
        plan->world_size > cores) {
      std::fprintf(stderr,
                   "cohort: %d rank(s) share the %d CPU(s) this session was given (COHORT_CPUS): "
                   "each runs slower (cohort session start --cpus N gives a session more)\n",
                   plan->world_size, cores);
    }
  }
  std::fflush(stdout);
  if (options->report) {
    if (options->job_id.empty()) {
      return reportError(Error{Code::kInvalidArgument, "--report: only with --job-id"});
    }
    auto taken = agent::reportTarget(job::Layout(plan->job_dir), plan->job_id);
    if (!taken) return reportError(taken.error());  // nowhere to report to
    target = *taken;
    copts.report = std::move(*taken);
  }
  copts.write_plan = [&plan] { return writePlan(*plan); };
  // A server's job: the server reaches a port inside the job's network (a paused rank's
  // debugger) by asking this coordinator, which holds the nodes' namespaces (agent/job_ports.h).
  std::optional<agent::JobPortsEndpoint> ports;
  if (options->report && !slurm) {
    std::vector<int> namespaces;
    for (size_t node = 0; node < plan->nodes.size(); ++node) {
      namespaces.push_back(*network ? (*network)->nodeNamespace(static_cast<int>(node)) : -1);
    }
    auto endpoint = agent::JobPortsEndpoint::listen(plan->job_dir, std::move(namespaces));
    if (!endpoint) return refuse(endpoint.error());
    ports = std::move(*endpoint);
    copts.watch.emplace_back(ports->fd(), [&ports] { ports->answer(); });
  }
  // The job is over and its record written when runCoordinator() returns. What is left is freeing
  // this process's memory piece by piece (the coordinator's state, the plan, the spec, the
  // libraries' tables at exit): the kernel takes it all back at once. That was 0.3 ms of a
  // failing 64-rank job's teardown, and the coordinator's state another 0.3 ms
  // (docs/benchmarks.md).
  copts.process_ends_after = true;
  auto outcome = agent::runCoordinator(*plan, *launcher, copts);
  ports.reset();  // its socket goes with it: nothing reaches the job's network any more
  if (!outcome) return refuse(outcome.error());
  printOutcome(*plan, *outcome, progress);
  std::fflush(nullptr);
  network->reset();  // what it made outside its namespaces (a nat network's rule) goes now
  ::_exit(outcome->exit_code);
}

int cmdExec(int argc, char** argv) {
  agent::AgentOptions options;
  auto args = parseArgs("exec", argc, argv, execFlags());
  if (args && !args->positional.empty()) {
    args = fail(Code::kInvalidArgument, "exec: unexpected argument '" + args->positional[0] + "'");
  }
  if (!args) {
    std::fprintf(stderr, "cohort exec: %s\n", args.error().message.c_str());
    return kExitUsage;
  }
  if (args->has("--coordinator")) {
    const std::string value = args->get("--coordinator");
    auto colon = value.rfind(':');
    auto port = colon == std::string::npos ? Result<int>(0) : parseInt(value.substr(colon + 1));
    if (colon == std::string::npos || !port) {
      std::fprintf(stderr, "cohort exec: --coordinator: expected ADDR:PORT, got '%s'\n",
                   value.c_str());
      return kExitUsage;
    }
    options.coordinator_addr = value.substr(0, colon);
    options.coordinator_port = *port;
  }
  const bool node_given = args->has("--node");
  if (node_given) {
    auto node = parseInt(args->get("--node"));
    if (!node || *node < 0) {
      std::fprintf(stderr, "cohort exec: --node: expected a node index, got '%s'\n",
                   args->get("--node").c_str());
      return kExitUsage;
    }
    options.node = *node;
  }
  options.interface = args->get("--interface");
  options.cidr = args->get("--cidr");
  if (args->has("--netns-fd")) {
    auto fd = parseInt(args->get("--netns-fd"));
    if (!fd || *fd < 3 || ::ioctl(*fd, NS_GET_NSTYPE) != CLONE_NEWNET) {
      std::fprintf(stderr, "cohort exec: --netns-fd: %s is not a network namespace\n",
                   args->get("--netns-fd").c_str());
      return kExitUsage;
    }
    ::fcntl(*fd, F_SETFD, FD_CLOEXEC);
    options.netns_fd = *fd;
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
  if (!options.coordinator_addr.empty()) {
    auto resolved = resolveIpv4(options.coordinator_addr, Millis(60000));
    if (!resolved) {
      std::fprintf(stderr, "cohort exec: --coordinator: %s\n", resolved.error().message.c_str());
      return 1;
    }
    options.coordinator_addr = *resolved;
  }
  const char* secret = std::getenv("COHORT_JOB_SECRET");
  if (!secret || !*secret || options.coordinator_port == 0) {
    std::fprintf(stderr, "cohort exec: needs --coordinator ADDR:PORT and COHORT_JOB_SECRET; "
                         "it is started by cohort itself\n");
    return kExitUsage;
  }
  options.secret = secret;
  return agent::agentMain(options);
}

bool wantsHelp(int argc, char** argv) {
  for (int i = 2; i < argc; ++i) {
    if (std::strcmp(argv[i], "--") == 0) return false;
    if (std::strcmp(argv[i], "-h") == 0 || std::strcmp(argv[i], "--help") == 0) return true;
  }
  return false;
}

}  // namespace

const Command* findCommand(const std::string& name) {
  for (const Command& c : commands()) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

namespace {

// `cohort help [COMMAND]`.
int cmdHelp(int argc, char** argv) {
  const Command* c = argc > 2 ? findCommand(argv[2]) : nullptr;
  std::fputs(c ? c->help().c_str() : mainHelp().c_str(), stdout);
  return 0;
}

int cmdVersion(int, char**) {
  std::printf("cohort %s\n", COHORT_VERSION);
  return 0;
}

}  // namespace

// Every command of cohort, once (command.h): cohort --help, each command's help, the "did you
// mean" and the dispatch come from here. The server's commands are client_cmd.cc's.
const std::vector<Command>& commands() {
  using G = Command::Group;
  static const std::vector<Command> kCommands = [] {
    std::vector<Command> c = {
        {"run", "run [flags] [-f job.yaml] [-- command...]",
         "run a job here, nodes simulated locally", G::kHere, runHelp, cmdRun},
        {"plan", "plan [flags] [-f job.yaml] [-- command...]",
         "show what each rank would get; start nothing", G::kHere, planHelp, cmdPlan},
        {"cp", "cp [flags] SRC DST", "copy files to, from or within the store", G::kHere, cpHelp,
         cmdCp},
        {"env", "env ls | show | build | create | rm | push",
         "the environments jobs run in (presets, saved; push: to a server, which builds it)",
         G::kHere, envHelp, cmdEnv},
        {"stacks", "stacks JOB", "every rank's Python stack of a running job, now", G::kHere,
         stacksHelp, cmdStacks},
        {"debug", "debug JOB [--vscode]", "the ranks waiting for a debugger, where to attach",
         G::kHere, debugHelp, cmdDebug},
        {"top", "top JOB", "a running job's ranks: CPU, memory, metrics", G::kHere, topHelp,
         cmdTop},
        {"server", "server [flags]", "the multi-user job service (queue, accounts)", G::kHere,
         serverHelp, cmdServer},
        {"exec", "exec --coordinator ADDR:PORT --node N", "a node agent (started by cohort itself)",
         G::kHere, execHelp, cmdExec},
        {"coordinate", "coordinate [--listen ADDR:PORT]",
         "a Volcano Job's coordinator (its pod's command)", G::kHere, coordinateHelp,
         cmdCoordinate},
        {"version", "version", "print the version", G::kHere,
         [] { return std::string("Usage: cohort version\n\nPrints cohort's version.\n"); },
         cmdVersion},
        {"help", "help [command]", "help for a command", G::kHere, mainHelp, cmdHelp,
         /*reads_help=*/true},
        // Started by cohort itself, as an account (account/as_account.h).
        {"account-worker", "", "", G::kInternal, mainHelp,
         [](int, char**) { return account::accountWorkerMain(); }, /*reads_help=*/true},
        // A session's ranks run it, started by the server (cli/session_host.h).
        {"session-host", "", "", G::kInternal, mainHelp, cmdSessionHost, /*reads_help=*/true},
        // Run on a host over SSH by cohort itself (backends/ssh.h).
        {"snapshot", "", "", G::kInternal, mainHelp, cmdSnapshot, /*reads_help=*/true},
    };
    c.push_back({"session", "session start | ls | stop NAME | ssh NAME",
                 "interactive sessions on the server: SSH, VS Code, PyCharm", G::kServer,
                 sessionHelp, [](int argc, char** argv) {
                   auto done = cmdSession(argc, argv);
                   if (done) return *done;
                   std::fprintf(stderr, "cohort: %s\n", done.error().message.c_str());
                   return exitCodeFor(done.error());
                 }});
    for (Command& server_command : clientCommands()) {
      // A job of this machine runs again here; any other is the server's (cmdRerun above).
      if (server_command.name == "rerun") server_command.run = cmdRerun;
      c.push_back(std::move(server_command));
    }
    return c;
  }();
  return kCommands;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fputs(mainHelp().c_str(), stderr);
    return kExitUsage;
  }
  std::string name = argv[1];
  if (name == "-h" || name == "--help") name = "help";
  if (name == "--version") name = "version";
  const Command* command = findCommand(name);
  if (!command) {
    std::vector<std::string> names;
    for (const Command& c : commands()) {
      if (c.group != Command::Group::kInternal) names.push_back(c.name);
    }
    const std::string near = nearestName(name, names);
    std::fprintf(stderr, "cohort: unknown command '%s'%s (see cohort --help)\n", name.c_str(),
                 near.empty() ? "" : (": did you mean " + near + "?").c_str());
    return kExitUsage;
  }
  if (!command->reads_help && wantsHelp(argc, argv)) {
    std::fputs(command->help().c_str(), stdout);
    return 0;
  }
  return command->run(argc, argv);
}

}  // namespace cohort::cli
