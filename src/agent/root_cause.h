// Root cause: from every rank exit of a failed attempt, the first failure in time across all
// nodes, with a hint for failures that have a known cause. Ranks that cohort stopped are
// consequences, never causes. Pure functions, thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace cohort::agent {

struct RankExit {
  int attempt = 0;
  std::string name;  // "worker/3"
  std::string role;
  int role_rank = 0;
  int rank = 0;
  int node = 0;
  std::string machine;  // the node's host as a person names it ("h2"); "": simulated
  int code = 0;
  int signal = 0;
  bool by_cohort = false;  // cohort signalled it (stopping the job) before it exited
  int64_t time_ns = 0;
  std::vector<std::string> tail;
  std::string log_file;
  int64_t memory_limit = 0;  // > 0: the kernel killed it for going over this (memory.max)
  std::vector<std::string> while_debugged;  // the other ranks paused under a debugger then

  bool failed() const { return code != 0 || signal != 0; }
  int shellCode() const { return signal ? 128 + signal : code; }
  std::string label() const;     // "worker/3 on node 1", "worker/3 on node 1 (h2)"
  // "exited with code 1" / "was killed by SIGKILL" / "was killed by the kernel for using more
  // than its memory limit of 512 MiB (memory.max)"
  std::string describe() const;
};

// A node whose agent was lost (it died, was stopped past the heartbeat timeout, or went silent
// on another machine) before its ranks ended: the job's first failure when no rank failed first.
struct LostNode {
  int node = 0;
  std::string why;                  // "n2 at 10.77.0.12: no word from it in 30s"
  std::string machine;              // its host as a person names it ("h2"); "": simulated
  std::vector<std::string> ranks;   // "worker/2", the ranks it ran
  std::vector<std::string> logs;    // their log files, in the same order
};

// The report printed when a node's loss failed the job: which node, why, the ranks that ran
// there with the last lines of their logs (`tails`, by rank, may be empty), a hint, and how
// many other ranks cohort stopped.
std::string formatLostNode(const LostNode& lost, const std::vector<std::vector<std::string>>& tails,
                           const std::vector<RankExit>& exits);

// The first failure in time that cohort did not cause, if any.
std::optional<RankExit> firstFailure(const std::vector<RankExit>& exits);

// What a launcher that starts ranks itself says, in its last lines, of the rank that failed
// first under it: mpirun ("Process name: [[966,1],2]" then "Exit code:    3"), torchrun (its
// "Root Cause (first observed failure):" with "rank      : 2 (local_rank: 0)" and
// "exitcode  : 3 (pid: 1234)"). Empty for any other process, or when the report is not there.
struct LaunchedFailure {
  int rank = 0;
  std::string name;  // "MPI rank 2", "worker/2"
  std::string what;  // "exited with code 3", "was killed by signal 9 (Killed)"
};
std::optional<LaunchedFailure> launchedFailure(const RankExit& launcher);

// A hint for a known failure, judged from the exit and its last log lines; empty when none.
std::string hintFor(const RankExit& exit);

// The report printed when a job fails: the root cause, its last lines, the hint, and how many
// other ranks failed after it or were stopped by cohort.
std::string formatRootCause(const RankExit& root, const std::vector<RankExit>& exits);

}  // namespace cohort::agent
