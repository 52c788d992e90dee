#include "backends/slurm.h"

#include <netdb.h>
#include <sys/socket.h>
#include <arpa/inet.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "job/layout.h"
#include "proc/spawn.h"
#include "util/fd.h"
#include "util/text.h"

extern char** environ;

namespace cohort::backends {

namespace {

// The environment of cohort, which Slurm hands the batch job (sbatch --export=ALL), plus more.
std::vector<std::string> environment(const std::vector<std::string>& extra) {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    if (!startsWith(*e, "COHORT_JOB_SECRET=")) env.emplace_back(*e);
  }
  env.insert(env.end(), extra.begin(), extra.end());
  return env;
}

// Runs one of Slurm's commands. Errors: kUnavailable naming the command and with its own words.
Result<std::string> slurm(std::vector<std::string> argv, Millis timeout = Millis(30000),
                          const std::vector<std::string>& extra_env = {}) {
  proc::SpawnRequest req;
  req.argv = std::move(argv);
  req.env = environment(extra_env);
  req.death_signal = SIGKILL;
  auto ran = proc::runCaptured(req, timeout);
  if (!ran) {
    std::string hint = ran.error().code == Code::kNotFound
                           ? " (is this a Slurm login node? install slurm-client, or put sbatch "
                             "on PATH)"
                           : "";
    return fail(Code::kUnavailable, ran.error().message + hint);
  }
  if (ran->status.shellCode() != 0) {
    std::string words(trim(ran->err.empty() ? ran->out : ran->err));
    return fail(Code::kUnavailable, req.argv[0] + " " + ran->status.describe() +
                                        (words.empty() ? "" : ": " + words));
  }
  return ran->out;
}

bool active(const std::string& state) {
  static const char* kActive[] = {"PENDING",  "RUNNING",  "CONFIGURING", "COMPLETING",
                                  "SUSPENDED", "REQUEUED", "RESIZING",    "SIGNALING",
                                  "STOPPED",  "REQUEUE_HOLD", "REQUEUE_FED", "STAGE_OUT"};
  return std::any_of(std::begin(kActive), std::end(kActive),
                     [&](const char* s) { return state == s; });
}

}  // namespace

Result<std::string> slurmBatchScript(const spec::JobSpec& spec, const plan::Plan& plan,
                                     const std::string& cohort_exe,
                                     const std::string& coordinator) {
  const job::Layout layout(plan.job_dir);
  const std::string output = layout.batchOutput();
  if (output.find_first_of(" \t\n'\"\\") != std::string::npos) {
    return fail(Code::kInvalidArgument,
                "the job directory '" + plan.job_dir +
                    "' has a space or quote, which sbatch's #SBATCH lines cannot carry: choose a "
                    "data root (--data-root) without one");
  }
  // Every node is sized for the largest role: one allocation, one task per node.
  int cpus = 1, gpus = 0;
  int64_t memory = 0;
  for (const spec::Role& role : spec.roles) {
    const int procs = std::max(role.procs_per_node, 1);
    cpus = std::max(cpus, static_cast<int>(std::ceil(procs * role.resources.cpus)));
    gpus = std::max(gpus, procs * role.resources.gpus);
    memory = std::max(memory, procs * role.resources.memory_bytes);
  }
  const int nodes = static_cast<int>(plan.nodes.size());
  std::string s = "#!/bin/sh\n";
  s += "# cohort job " + plan.job_id + " (" + plan.job_name + "): one cohort agent per node, " +
       "each dialling the job's\n# coordinator at " + coordinator +
       ". Made by cohort; submit it with cohort, not by hand.\n";
  auto option = [&](const std::string& o) { s += "#SBATCH " + o + "\n"; };
  option("--job-name=" + plan.job_name);
  option("--comment=cohort:" + plan.job_id);
  option("--nodes=" + std::to_string(nodes));
  option("--ntasks-per-node=1");
  option("--cpus-per-task=" + std::to_string(cpus));
  if (gpus > 0) option("--gres=gpu:" + std::to_string(gpus));
  if (memory > 0) option("--mem=" + std::to_string((memory + (1 << 20) - 1) >> 20) + "M");
  if (spec.policy.max_runtime) {
    // Slurm's limit is the backstop: cohort's own max_runtime stops the ranks first, gracefully.
    const int64_t ms = spec.policy.max_runtime->count() + spec.policy.grace_period.count() + 60000;
    option("--time=" + std::to_string((ms + 59999) / 60000));
  }
  if (!spec.slurm.partition.empty()) option("--partition=" + spec.slurm.partition);
  if (!spec.slurm.account.empty()) option("--account=" + spec.slurm.account);
  if (!spec.slurm.qos.empty()) option("--qos=" + spec.slurm.qos);
  for (const std::string& o : spec.slurm.options) option(o);
  option("--output=" + output);
  std::string agent = shellQuote(cohort_exe) + " exec --coordinator " + coordinator;
  if (!spec.network.interface.empty()) agent += " --interface " + spec.network.interface;
  if (!spec.network.cidr.empty()) agent += " --cidr " + spec.network.cidr;
  // cohort, not Slurm, ends the job when a rank fails (--kill-on-bad-exit=0): it stops every
  // rank gracefully, says which failed first, and exits with its code.
  s += "srun --nodes=" + std::to_string(nodes) + " --ntasks=" + std::to_string(nodes) +
       " --ntasks-per-node=1 --kill-on-bad-exit=0 " + agent + "\n";
  // The batch job ends with cohort's verdict, so that sacct agrees with cohort even when a node's
  // agent was killed (srun would say 137 where the job failed with 1): the exit code in
  // result.json, which the coordinator writes as its agents exit. Only where this node sees the
  // coordinator's job directory (its mark file); else srun's code.
  const std::string mark = shellQuote(layout.markFile());
  const std::string result = shellQuote(layout.resultFile());
  s += "code=$?\n";
  s += "if [ -f " + mark + " ]; then\n";
  s += "  i=0; while [ ! -f " + result + " ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done\n";
  s += "  verdict=$(sed -n 's/^  \"exit_code\": \\([0-9][0-9]*\\),$/\\1/p' " + result +
       " 2>/dev/null)\n";
  s += "  [ -n \"$verdict\" ] && exit \"$verdict\"\n";
  s += "fi\n";
  s += "exit $code\n";
  return s;
}

Result<HostAddress> slurmCoordinatorAddress(const spec::Network& network) {
  if (!network.interface.empty() || !network.cidr.empty()) {
    auto chosen = chooseAddress(network.interface, network.cidr, "");
    if (chosen || !network.cidr.empty()) return chosen;
    // The nodes' interface name need not exist here: then the route toward the controller.
  }
  auto asked = slurm({"scontrol", "show", "config"}, Millis(15000));
  if (!asked) {
    const char* conf = std::getenv("SLURM_CONF");
    return fail(Code::kUnavailable,
                asked.error().message + "\ncohort: is Slurm up, and is SLURM_CONF (" +
                    (conf ? std::string(conf) : "not set") + ") the cluster's configuration?");
  }
  const std::string config = *asked;
  // "SlurmctldHost[0]        = head(10.77.0.1)", or a bare name.
  std::string controller;
  for (const std::string& line : split(config, '\n')) {
    if (!startsWith(line, "SlurmctldHost[0]")) continue;
    std::string value(trim(line.substr(line.find('=') + 1)));
    auto open = value.find('(');
    controller = open == std::string::npos ? value : value.substr(open + 1, value.find(')') - open - 1);
    break;
  }
  if (controller.empty()) {
    return fail(Code::kUnavailable, "scontrol show config names no SlurmctldHost");
  }
  in_addr probe{};
  if (::inet_pton(AF_INET, controller.c_str(), &probe) != 1) {
    // A name: looked up forward (never backward), as Slurm itself does.
    addrinfo hints{};
    hints.ai_family = AF_INET;
    addrinfo* found = nullptr;
    if (::getaddrinfo(controller.c_str(), nullptr, &hints, &found) != 0 || !found) {
      return fail(Code::kUnavailable, "the Slurm controller's name '" + controller +
                                          "' does not resolve here: set network.cidr");
    }
    char buf[INET_ADDRSTRLEN];
    ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(found->ai_addr)->sin_addr, buf,
                sizeof buf);
    ::freeaddrinfo(found);
    controller = buf;
  }
  return chooseAddress("", "", controller);
}

std::string pendingReason(const std::string& r) {
  static const std::pair<const char*, const char*> kWords[] = {
      {"Resources", "waiting for free nodes"},
      {"Priority", "other jobs come first"},
      {"None", "waiting to be scheduled"},
      {"BeginTime", "waiting for its start time"},
      {"Dependency", "waiting for the jobs it depends on"},
      {"PartitionDown", "its partition is down"},
      {"PartitionInactive", "its partition is inactive"},
      {"PartitionNodeLimit", "it asks for more nodes than its partition allows"},
      {"PartitionTimeLimit", "its time limit (max_runtime) is over its partition's"},
      {"ReqNodeNotAvail", "the nodes it needs are down, drained or reserved"},
      {"NodeDown", "a node it needs is down"},
      {"JobHeldUser", "it is held (scontrol release releases it)"},
      {"JobHeldAdmin", "an administrator holds it"},
      {"Reservation", "waiting for its reservation"},
      {"BadConstraints", "no node has what it asks for (slurm.options, resources)"},
  };
  for (const auto& [reason, words] : kWords) {
    if (r == reason) return std::string(words) + " (" + r + ")";
  }
  if (startsWith(r, "QOS") || startsWith(r, "Assoc")) {
    return "a limit of its account or QOS holds it (" + r + ")";
  }
  return "Slurm says: " + r;
}

Result<void> SlurmLauncher::launch(int nodes, const agent::Dial& dial) {
  if (nodes != static_cast<int>(plan_.nodes.size())) {
    return fail(Code::kInternal, "the plan has " + std::to_string(plan_.nodes.size()) + " nodes");
  }
  const job::Layout layout(plan_.job_dir);
  COHORT_ASSIGN(std::string script,
                slurmBatchScript(spec_, plan_, exe_, dial.addr + ":" + std::to_string(dial.port)));
  COHORT_TRY(writeFileAtomic(layout.batchScript(), script, false, 0600));
  // The secret goes in the batch job's environment, which only its owner and Slurm can read.
  COHORT_ASSIGN(std::string out, slurm({"sbatch", "--parsable", layout.batchScript()},
                                       Millis(30000), {"COHORT_JOB_SECRET=" + dial.secret}));
  job_ = std::string(trim(out.substr(0, out.find(';'))));  // "42" or "42;cluster"
  if (!parseInt(job_)) return fail(Code::kUnavailable, "sbatch printed no job id: '" + std::string(trim(out)) + "'");
  if (progress_) {
    std::fprintf(stderr, "cohort: Slurm job %s submitted (%d node(s)); scancel %s stops it too\n",
                 job_.c_str(), nodes, job_.c_str());
  }
  return {};
}

std::string SlurmLauncher::squeueState() {
  auto out = slurm({"squeue", "-h", "-t", "all", "-j", job_, "-o", "%T|%r"}, Millis(10000));
  if (!out) {
    // "Invalid job id specified": Slurm has forgotten the job; it ended long ago.
    return out.error().message.find("Invalid job id") != std::string::npos ? "" : "UNKNOWN|";
  }
  return std::string(trim(*out));
}

agent::LaunchStatus SlurmLauncher::status() {
  if (job_.empty()) return {};
  const std::string now = squeueState();
  const std::string state = now.substr(0, now.find('|'));
  const std::string reason = now.find('|') == std::string::npos ? "" : now.substr(now.find('|') + 1);
  // Reasons that only an administrator's change could lift: waiting would be forever.
  static const char* kNever[] = {"PartitionNodeLimit", "PartitionTimeLimit", "BadConstraints",
                                 "PartitionConfig",    "AccountNotAllowed",  "QOSNotAllowed",
                                 "InvalidAccount",     "InvalidQOS"};
  if (state == "PENDING" && std::any_of(std::begin(kNever), std::end(kNever),
                                        [&](const char* r) { return reason == r; })) {
    return {agent::LaunchStatus::Phase::kEnded,
            "Slurm job " + job_ + " can never start: " + pendingReason(reason) +
                "; it is cancelled"};
  }
  if (state == "PENDING") {
    return {agent::LaunchStatus::Phase::kQueued,
            "Slurm job " + job_ + " is pending: " + pendingReason(reason)};
  }
  if (state == "UNKNOWN" || active(state)) return {};
  const std::string how = state.empty() ? "ended" : "ended (" + state + ")";
  return {agent::LaunchStatus::Phase::kEnded,
          "Slurm job " + job_ + " " + how + " before every node's agent dialled in; see " +
              job::Layout(plan_.job_dir).dir() + "/slurm-" + job_ + ".out"};
}

void SlurmLauncher::abandon(int) { abandoned_ = true; }

void SlurmLauncher::reap(Millis deadline) {
  if (job_.empty() || reaped_) return;
  reaped_ = true;
  auto gone_within = [&](Millis limit) {
    const auto until = std::chrono::steady_clock::now() + limit;
    for (;;) {
      const std::string now = squeueState();
      if (!active(now.substr(0, now.find('|'))) && now.rfind("UNKNOWN", 0) != 0) return true;
      if (std::chrono::steady_clock::now() >= until) return false;
      std::this_thread::sleep_for(Millis(50));
    }
  };
  // Agents told to exit end the batch job by themselves; one still in the queue has none, and
  // a node given up on cannot be told.
  const bool queued = startsWith(squeueState(), "PENDING");
  if (!queued && !abandoned_ && gone_within(deadline)) return;
  if (auto cancelled = slurm({"scancel", job_}, Millis(10000)); !cancelled) {
    std::fprintf(stderr, "cohort: %s\n", cancelled.error().message.c_str());
  }
  if (abandoned_) {
    if (!gone_within(Millis(2000))) {
      std::fprintf(stderr,
                   "cohort: Slurm job %s is cancelled; Slurm ends it once it can reach every "
                   "node again (squeue -j %s shows it until then)\n",
                   job_.c_str(), job_.c_str());
    }
    return;
  }
  if (!gone_within(Millis(10000))) {
    std::fprintf(stderr, "cohort: Slurm job %s is still there after scancel; see squeue -j %s\n",
                 job_.c_str(), job_.c_str());
  }
}

}  // namespace cohort::backends
