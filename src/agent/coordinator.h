// The coordinator: one per job. It listens on the control channel, has the backend start one
// node agent per node, hands each agent its part of the plan, starts every node's ranks at once
// when all agents are there, and ends the job as JobDecisions (decisions.h) decides from what the
// agents report: success when every rank of the key roles exited 0, failure at the first failure
// cohort did not cause, whole-gang restarts within `max_restarts`, `max_runtime`, a graceful stop
// on SIGINT/SIGTERM (a second signal kills at once). This file is the shell around that state
// machine: the sockets, the timers, the signalfd, the job's record (events file, result, the
// ranks' logs the agents ship, their progress), the reports of that record to the server, and
// the output copies; it feeds events in and carries actions out, and decides nothing itself.
// Runs on the calling thread; blocks SIGINT, SIGTERM and SIGHUP while it runs.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "agent/decisions.h"
#include "agent/reporter.h"
#include "agent/root_cause.h"
#include "plan/plan.h"
#include "util/fd.h"
#include "util/net.h"
#include "util/result.h"
#include "util/text.h"

namespace cohort::agent {

// Where the agents dial and what they must prove they know.
struct Dial {
  std::string addr;
  int port = 0;
  std::string secret;
  // Hands the coordinator its end of a connection made without dialling (socketPair(), to an
  // agent the launcher forked): it is taken as one that dialled in, and must prove the secret.
  // Null: every agent dials.
  std::function<void(UniqueFd)> adopt;
};

// What a launcher knows of its agents until every one has dialled in.
struct LaunchStatus {
  enum class Phase {
    kStarting,  // they are being started (or nothing is known)
    kQueued,    // a cluster holds them in its queue; `detail` says why, in cohort's words
    kEnded,     // what was to start them ended first; `detail` says how
  };
  Phase phase = Phase::kStarting;
  std::string detail;
};

// How agents get started: by forking locally, by srun, by Kubernetes. The coordinator does not
// care which.
class AgentLauncher {
 public:
  virtual ~AgentLauncher() = default;
  // Starts one agent for each of the `nodes` nodes; each must dial and prove the secret.
  virtual Result<void> launch(int nodes, const Dial& dial) = 0;
  // Asked every second until every agent has dialled in.
  virtual LaunchStatus status() { return {}; }
  // The agent of `node` is given up on (it said nothing for the heartbeat timeout): end it now,
  // and with it its ranks, rather than wait for it at reap().
  virtual void abandon(int node) = 0;
  // After the job: waits up to `deadline` for the agents to end, then kills what is left.
  virtual void reap(Millis deadline) = 0;
};

// Makes the plan again once every agent has said where its node is (hosts in node order): on a
// cluster the ranks' addresses are known only then.
using Placement = std::function<Result<plan::Plan>(const std::vector<HostAddress>& hosts)>;

struct CoordinatorOptions {
  std::string listen_addr = "127.0.0.1";  // also the address the agents dial
  int listen_port = 0;                    // 0: one the kernel picks
  // The job's secret, which the agents prove they know; "": a new one (the launcher hands it
  // over). Given when something else has handed it to the agents already (a Kubernetes Secret).
  std::string secret;
  Placement place;  // null: the plan's hosts are final (simulated nodes)
  // Writes the files of the plan (plan.json, the files its ranks read): called as soon as the
  // agents are launched, so that it overlaps their start, and always before any rank starts.
  // An error fails the job before it runs; its message begins with the file's name
  // ("rank_table.json: ..."). Null: they are written already.
  std::function<Result<void>()> write_plan;
  Millis connect_timeout{60000};  // for every agent to dial in
  bool progress = true;           // print lifecycle lines on stderr
  // Where the job's record goes as well as its files: the server that runs the job (reporter.h).
  std::optional<ReportTarget> report;
  // After the job, how long to keep trying to hand the server what it does not have yet.
  Millis report_linger{600000};
  // The caller ends the process with _exit() as soon as runCoordinator() returns an outcome: the
  // coordinator's state (its copy of the plan, every rank's record and buffers) is then left for
  // the kernel to take back at once rather than freed piece by piece.
  bool process_ends_after = false;
  // More descriptors the coordinator's loop watches for input (not owned), with what to call
  // then, on the loop thread (the job's ports for the server: job_ports.h).
  std::vector<std::pair<int, std::function<void()>>> watch;
};

// Runs the job to its end. Errors: only when the coordinator itself cannot work (no socket, no
// job directory); everything that happens to the job is in the JobOutcome, including a job
// record (events.jsonl, result.json) that could not be written, which fails the job.
Result<JobOutcome> runCoordinator(const plan::Plan& plan, AgentLauncher& launcher,
                                  const CoordinatorOptions& options);

}  // namespace cohort::agent
