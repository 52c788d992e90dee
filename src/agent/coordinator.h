// The coordinator: one per job. It listens on the control channel, has the backend start one
// node agent per node, hands each agent its part of the plan, starts every node's ranks at once
// when all agents are there, and decides the job's fate from the exits the agents report:
// success when every rank of the key roles exited 0 (the other roles are then stopped),
// failure at the first non-zero exit (every agent is told to stop its ranks at once), whole-gang
// restarts within `max_restarts`, `max_runtime`, and a graceful stop on SIGINT/SIGTERM (a second
// signal kills at once). It writes the job's events file and result, and names the root cause.
// Runs on the calling thread; blocks SIGINT, SIGTERM and SIGHUP while it runs.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "agent/root_cause.h"
#include "plan/plan.h"
#include "util/result.h"
#include "util/text.h"

namespace cohort::agent {

// How agents get started: by forking locally, by srun, by Kubernetes. The coordinator does not
// care which.
class AgentLauncher {
 public:
  virtual ~AgentLauncher() = default;
  // Starts the agent for `node`; it must dial `addr:port` and present `secret`.
  virtual Result<void> launch(int node, const std::string& addr, int port,
                              const std::string& secret) = 0;
  // After the job: waits up to `deadline` for the agents to end, then kills what is left.
  virtual void reap(Millis deadline) = 0;
};

enum class JobState { kSucceeded, kFailed, kStopped };
const char* jobStateName(JobState state);

struct JobOutcome {
  JobState state = JobState::kFailed;
  int exit_code = 1;     // what `cohort run` exits with
  std::string reason;    // one line for a person
  std::optional<RankExit> root_cause;
  std::vector<RankExit> exits;  // every rank exit of every attempt
  int attempts = 0;
};

struct CoordinatorOptions {
  std::string listen_addr = "127.0.0.1";
  Millis connect_timeout{60000};  // for every agent to dial in
  bool progress = true;           // print lifecycle lines on stderr
};

// Runs the job to its end. Errors: only when the coordinator itself cannot work (no socket, no
// job directory); everything that happens to the job is in the JobOutcome.
Result<JobOutcome> runCoordinator(const plan::Plan& plan, AgentLauncher& launcher,
                                  const CoordinatorOptions& options);

}  // namespace cohort::agent
