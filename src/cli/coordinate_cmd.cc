#include "cli/coordinate_cmd.h"

#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "agent/coordinator.h"
#include "agent/reporter.h"
#include "cli/args.h"
#include "cli/job_options.h"
#include "cli/job_run.h"
#include "job/layout.h"
#include "util/fd.h"
#include "util/text.h"

namespace cohort::cli {

namespace {

const char* kCoordinateHelp =
    R"(cohort coordinate: the coordinator of a job that runs as a Volcano Job (the command of its
coordinator pod; cohort run --backend volcano and cohort server --backend volcano start it)

Usage: cohort coordinate [--listen ADDR:PORT]

Reads the job from its environment: COHORT_JOB (the job file, as JSON), COHORT_JOB_ID and
COHORT_JOB_SECRET; with COHORT_REPORT_URL and COHORT_REPORT_TOKEN it reports the job to that
server (an https:// one verified by COHORT_REPORT_PIN, its key's pin, when given). Waits for every node's agent (cohort exec, in the job's other pods) to dial in, runs the
job as cohort run does, prints its merged log, and exits with the job's exit code.

)";

const std::vector<FlagSpec>& coordinateFlags() {
  static const std::vector<FlagSpec> kFlags = {
      {"--listen", "", "ADDR:PORT", "where the agents dial (default 0.0.0.0:7070)"},
  };
  return kFlags;
}

// How long every agent has to dial in: the pods of a gang start together, but each node pulls
// the image first, which for a training image can take minutes.
constexpr Millis kAgentsWithin{600000};

// The agents are the pods Volcano starts: there is nothing to launch, abandon or reap; an agent
// told to exit ends its pod, and Volcano's policies end the others.
class PodAgents : public agent::AgentLauncher {
 public:
  Result<void> launch(int, const agent::Dial&) override { return {}; }
  void abandon(int) override {}
  void reap(Millis) override {}
};

int usage(const std::string& why) {
  std::fprintf(stderr, "cohort coordinate: %s\n", why.c_str());
  return kExitUsage;
}

const char* envValue(const char* name) {
  const char* value = std::getenv(name);
  return value && *value ? value : nullptr;
}

}  // namespace

std::string coordinateHelp() { return kCoordinateHelp + flagsHelp(coordinateFlags()); }

int cmdCoordinate(int argc, char** argv) {
  // As cohort run: a stop that comes while the job is prepared is the coordinator's to take.
  sigset_t stops;
  sigemptyset(&stops);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&stops, sig);
  ::sigprocmask(SIG_BLOCK, &stops, nullptr);
  auto args = parseArgs("coordinate", argc, argv, coordinateFlags());
  if (args && !args->positional.empty()) {
    return usage("unexpected argument '" + args->positional[0] +
                 "' (see cohort coordinate --help)");
  }
  if (!args) return usage(args.error().message);
  const std::string listen = args->get("--listen", "0.0.0.0:7070");
  const size_t colon = listen.rfind(':');
  auto port = colon == std::string::npos ? Result<int>(0) : parseInt(listen.substr(colon + 1));
  if (colon == std::string::npos || !port || *port <= 0 || *port > 65535) {
    return usage("--listen: expected ADDR:PORT, got '" + listen + "'");
  }
  const char* job_text = envValue("COHORT_JOB");
  const char* job_id = envValue("COHORT_JOB_ID");
  const char* secret = envValue("COHORT_JOB_SECRET");
  if (!job_text || !job_id || !secret) {
    return usage(
        "needs COHORT_JOB, COHORT_JOB_ID and COHORT_JOB_SECRET: it is the command of a Volcano "
        "Job's coordinator pod, which cohort renders with them (cohort plan --backend volcano)");
  }

  JobOptions options;
  options.text = job_text;
  options.text_name = "COHORT_JOB";
  options.job_id = job_id;
  options.backend = "volcano";  // whatever the job file says: its nodes are this Job's pods
  auto job = prepareJob(options);
  if (!job) {
    std::fprintf(stderr, "cohort: error: %s\n", job.error().message.c_str());
    return exitCodeFor(job.error());
  }
  std::vector<plan::PortLease> leases;
  auto fail = [](const Error& e) {
    std::fprintf(stderr, "cohort: error: %s\n", e.message.c_str());
    return exitCodeFor(e);
  };
  if (auto leased = leasePorts(*job, leases); !leased) return fail(leased.error());
  auto plan = plan::makePlan(job->spec, job->context);
  if (!plan) return fail(plan.error());
  if (auto made = makeJobDirs(plan->job_dir, false, -1, -1); !made) return fail(made.error());
  const job::Layout layout(plan->job_dir);
  if (auto w = writeFileAtomic(layout.specFile(), job_text, false); !w) return fail(w.error());

  agent::CoordinatorOptions copts;
  copts.listen_addr = listen.substr(0, colon);
  copts.listen_port = *port;
  copts.secret = secret;
  copts.place = placeOnHosts(*job);
  copts.write_plan = [&plan] { return writePlan(*plan); };
  copts.connect_timeout = kAgentsWithin;
  const char* report_url = envValue("COHORT_REPORT_URL");
  const char* report_token = envValue("COHORT_REPORT_TOKEN");
  const char* report_pin = envValue("COHORT_REPORT_PIN");
  if (report_url && report_token) {
    // Where the reporter reads them (job::Layout), the token for the coordinator alone; an
    // https:// server's pin on a line of its own, as the server writes it for its local jobs.
    std::string url_file = std::string(report_url) + "\n";
    if (report_pin && *report_pin) url_file += "pin " + std::string(report_pin) + "\n";
    if (auto w = writeFileAtomic(layout.reportUrlFile(), url_file, false, 0600); !w) {
      return fail(w.error());
    }
    if (auto w = writeFileAtomic(layout.reportTokenFile(), std::string(report_token) + "\n", false,
                                 0600);
        !w) {
      return fail(w.error());
    }
    ::unsetenv("COHORT_REPORT_TOKEN");
    auto target = agent::reportTarget(layout, plan->job_id);
    if (!target) return fail(target.error());
    copts.report = std::move(*target);
  }
  std::fprintf(stderr, "cohort: job %s: %s, %d node(s), %d rank(s); waiting for the agents on %s\n",
               plan->job_id.c_str(), plan->framework.c_str(), static_cast<int>(plan->nodes.size()),
               plan->world_size, listen.c_str());
  std::fflush(stdout);
  PodAgents agents;
  auto outcome = agent::runCoordinator(*plan, agents, copts);
  if (!outcome) return fail(outcome.error());
  printOutcome(*plan, *outcome, true);
  return outcome->exit_code;
}

}  // namespace cohort::cli
