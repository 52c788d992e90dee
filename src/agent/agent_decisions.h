// AgentDecisions: what a node agent (`cohort exec`) decides about stopping its ranks and leaving,
// apart from what it does. The agent's shell (node_agent.cc: the event loop, the ranks' processes,
// cgroups, timers, the channel) feeds it what happened (the coordinator asked for a stop or the
// exit, a signal came from outside, the coordinator was lost, the grace period ran out, an
// attempt began or its last rank ended, a chore ended) and carries out the actions it returns,
// in order. It does no I/O and reads no clock, so each rule is a unit test
// (agent_decisions_test.cc). The rules:
//   - A stop the coordinator decided is the coordinator's; a stop the agent makes on its own (its
//     coordinator lost, a signal from outside) carries its reason, and its ranks are never
//     counted as stopped by the coordinator (JobDecisions never calls them a success).
//   - A stop gives one notice (the plan's stop signal, never SIGKILL or SIGSTOP) and SIGKILL
//     when its grace period ends; a grace of 0 is SIGKILL at once; once stopping, only that
//     SIGKILL is left to send.
//   - The agent leaves once nothing of the job runs: at once when no rank runs and no chore is
//     under way, else when the last rank has gone or the chore has ended.
//   - A signal from outside while the coordinator is there is a preemption: the coordinator is
//     told (it stops every node), the ranks get the job's grace period, a second signal kills.
//     Without a coordinator, the agent stops its ranks and leaves.
//   - The agent exits with the job's code from the coordinator, 1 when it lost the coordinator.
// One owner, one thread.
#pragma once

#include <chrono>
#include <string>
#include <variant>
#include <vector>

namespace cohort::agent {

// ---- Inputs: what happened -------------------------------------------------------------------

// The coordinator's "stop": the ranks get `signal` and SIGKILL after `grace`; with `exit`, the
// job is over and the agent leaves with that code once they are gone.
struct StopAsked {
  std::chrono::milliseconds grace{0};
  int signal = 15;
  bool exit = false;
  int exit_code = 0;
};
// The coordinator's "exit": the job is over (its code); the agent leaves.
struct ExitAsked { int code = 0; };
// SIGTERM, SIGINT or SIGHUP came from outside; `coordinator_there`: the coordinator proved the
// secret and has not been lost.
struct SignalCame { int signal = 15; bool coordinator_there = false; };
// The coordinator is gone, or cannot be trusted, for `why`.
struct CoordinatorLost { std::string why; };
struct GraceOver {};
struct AttemptBegins {};          // the coordinator's "start": a new attempt's ranks spawn
struct RanksStarted { int running = 0; };  // how many of the attempt's ranks run
struct RankGone {};               // one running rank ended
struct AttemptOver {};            // no rank runs any more; what they left is killed
struct ChoreBegins {};            // staging, a stack dump, copying outputs: cannot be cut short
struct ChoreOver {};
using AgentInput = std::variant<StopAsked, ExitAsked, SignalCame, CoordinatorLost, GraceOver,
                                AttemptBegins, RanksStarted, RankGone, AttemptOver, ChoreBegins,
                                ChoreOver>;

// ---- Actions: what to do, in order -----------------------------------------------------------

// Send every running rank's process group `signal` (SIGCONT after a notice); a rank not yet
// signalled is marked as stopped by `stopped_by` ("coordinator" or "agent") for `reason`. With
// `grace` > 0, SIGKILL follows when it ends (arm the grace timer).
struct SignalRanks {
  int signal = 15;
  std::chrono::milliseconds grace{0};
  std::string stopped_by;
  std::string reason;
};
struct KillRanks {};              // SIGKILL every running rank's process group
struct DisarmGrace {};            // the last stop is over: its SIGKILL must not hit a new attempt
struct TellSignalled { int signal = 15; };  // tell the coordinator: a preemption
struct StopListening {};          // the coordinator's channel is no longer read
struct Leave {};                  // copy the outputs (unless the coordinator was lost), then exit
using AgentAction =
    std::variant<SignalRanks, KillRanks, DisarmGrace, TellSignalled, StopListening, Leave>;

class AgentDecisions {
 public:
  // `stop_signal` and `outside_grace`: the plan's policy.stop_signal and grace_period.
  void configure(int stop_signal, std::chrono::milliseconds outside_grace);

  std::vector<AgentAction> on(const AgentInput& input);

  // The agent's exit code: the job's (from the coordinator), 1 when it lost its coordinator.
  int exitCode() const { return lost_coordinator_ ? 1 : exit_code_; }
  bool stopping() const { return stopping_; }
  bool lostCoordinator() const { return lost_coordinator_; }
  bool graceArmed() const { return grace_armed_; }
  int running() const { return running_; }
  // The signal the current stop sent as its notice (for a stop a sandbox could not take yet).
  int sentSignal() const { return sent_signal_; }

 private:
  void stop(std::chrono::milliseconds grace, int signal, std::vector<AgentAction>& out);
  void exitWhenDone(std::chrono::milliseconds grace, std::vector<AgentAction>& out);
  void onOwn(const std::string& reason);

  int stop_signal_ = 15;
  std::chrono::milliseconds outside_grace_{3000};
  int running_ = 0;
  bool chore_ = false;
  bool stopping_ = false;
  bool exiting_ = false;
  bool left_ = false;
  bool lost_coordinator_ = false;
  bool signalled_ = false;    // a signal came from outside while the coordinator was there
  bool grace_armed_ = false;  // the notice was sent; SIGKILL follows when the grace ends
  int sent_signal_ = 15;
  int exit_code_ = 0;
  // Why this agent stops its ranks on its own; "" while every stop is the coordinator's.
  std::string own_reason_;
};

// A stop signal a plan may name: anything else (SIGKILL, SIGSTOP, none, out of range) is SIGTERM,
// never a stop that gives no notice.
int noticeSignal(int signal);

}  // namespace cohort::agent
