// Decisions: what a job's coordinator decides, apart from what it does. JobDecisions is a state
// machine: the coordinator's shell (coordinator.cc) feeds it events (an agent connected, a node
// staged, a rank exited, a signal came, a timer ran out, a file of the job's record could not be
// written) with the time they happened, and carries out the actions it returns (send a message
// to the agents, arm a timer, write an event, say a line, copy an output, finish with an
// outcome), in order. It does no I/O and reads no clock: the time comes with each event, so its
// decision table is a unit test (decisions_test.cc). The rules, in docs/architecture.md:
// key roles decide success, the first failure cohort did not cause stops every rank, the whole
// gang restarts within `max_restarts` (never after a stop, a staging failure, a lost agent or a
// record that cannot be written), `max_runtime` ends with exit code 124, a job in which no rank
// made progress for `hang_timeout` (or not every rank within `startup_timeout`) has every rank's
// stack collected, then ends with 124 too (or restarts), and a job whose record cannot be
// written never reports success. One owner, one thread.
#pragma once

#include <chrono>
#include <csignal>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "agent/root_cause.h"
#include "job/events.h"
#include "plan/plan.h"
#include "util/text.h"

namespace cohort::agent {

using DecisionClock = std::chrono::steady_clock;
using TimePoint = DecisionClock::time_point;

enum class JobState { kSucceeded, kFailed, kStopped };
const char* jobStateName(JobState state);

// One output of the plan after its copy.
struct OutputResult {
  std::string source;
  std::string target;
  int64_t files = 0;
  int64_t bytes = 0;
  std::string error;  // empty when it was copied
};

struct JobOutcome {
  JobState state = JobState::kFailed;
  int exit_code = 1;     // what `cohort run` exits with
  std::string reason;    // one line for a person
  std::optional<RankExit> root_cause;
  std::vector<RankExit> exits;  // every rank exit of every attempt
  std::vector<OutputResult> outputs;
  int attempts = 0;
  double duration_s = 0;
  std::string diagnosis;  // a hang: who held the others up, and every rank's stack, grouped
  std::optional<LostNode> lost_node;  // the job failed because this node's agent was lost
};

// The files of the job's record the coordinator writes.
enum class RecordFile { kEvents, kResult, kPlan };  // kPlan: plan.json, the ranks' files

// ---- Events: what happened -------------------------------------------------------------------

struct JobBegins {};                                   // the coordinator listens
struct AgentLaunchFailed { int node; std::string error; };  // node -1: all of them
// The launcher's cluster holds the agents in its queue, for `reason`; "" once it no longer does.
struct LauncherQueued { std::string reason; };
struct AgentConnected { int node; };                   // said hello with the job's secret
// own_dir: the node's job directory is its own, not the coordinator's (no shared filesystem):
// the node copies its part of the outputs itself, before it exits.
struct NodeStaged { int node; int64_t files; int64_t bytes; double seconds; bool own_dir = false; };
struct StagingFailed { int node; std::string error; };
struct NodeStarted { int node; int attempt; int count; };  // every rank of the node spawned
// Who signalled a rank before it exited: nobody (it ended by itself, whatever its code or
// signal), its agent because the coordinator decided a stop (a `stop` or `exit` it sent), or its
// agent on its own (it lost its coordinator, say), which the coordinator never decided.
enum class StoppedBy { kNobody, kCoordinator, kAgent };
struct RankExited {
  int node;
  int attempt;
  int rank;  // global rank
  int code;
  int signal;
  StoppedBy stopped_by;
  int64_t time_ns;  // unix nanos, the agent's clock
  std::vector<std::string> tail;
  int64_t memory_limit = 0;  // > 0: the kernel killed it for going over this (memory.max)
  std::string stop_reason = {};  // kAgent: why the agent stopped it ("it lost its coordinator")
};
// The node's ranks run without their resource requests enforced, for reason `why`.
struct LimitsNotEnforced {
  int node;
  std::string why;
};
struct NodeIdle { int node; int attempt; };  // no process of the attempt is left on the node
struct AgentLost {  // its connection closed, or it said nothing for too long
  int node;
  std::string why = {};  // "" for a closed connection
};
struct StopSignal { int signal; };           // SIGINT, SIGTERM or SIGHUP reached the coordinator
// A node's agent was told to stop from outside (SIGTERM from a cluster that preempts or cancels
// its part of the job, a machine shutting down): it stops its ranks; so does every other node.
struct NodeSignalled { int node; int signal; };
// Ranks (global) of the attempt that made progress (printed, logged a metric, sent a heartbeat)
// since the node's last report.
struct RanksProgressed {
  int node;
  int attempt;
  std::vector<int> ranks;
};
// debug: a rank waits for a debugger, has one attached, or goes on without one (its status file,
// as its agent read it). While any rank waits or has one, the job is being debugged: max_runtime,
// hang detection and fail-fast hold (said, and carried out once no rank is debugged any more).
struct RankDebugged {
  int node;
  int attempt;
  int rank;            // global
  std::string state;   // waiting | attached | running
  std::string reason;  // start | breakpoint | exception | pdb
  std::string where;
  int64_t time_ns;  // the agent's clock, unix nanos
};
struct HangTimeOver {};
// Every rank's stack is in (or the agents ran out of time): `diagnosis` says who held the others
// up, for the reason of the job's end.
struct HangDiagnosed {
  std::string laggards;
  std::string diagnosis;
};
struct MaxRuntimeOver {};
struct ConnectDeadlineOver {};
struct ExitDeadlineOver {};  // agents told to exit did not all go in time
struct OutputCopied { size_t index; int64_t files; int64_t bytes; };
struct OutputCopyFailed { size_t index; std::string error; };
// A node with a job directory of its own copied its outputs: one result per index it was given
// in SendExit, in that order (files, bytes and error are read).
struct NodeOutputsCopied { int node; std::vector<OutputResult> results; };
struct RecordWriteFailed {
  RecordFile file;
  std::string name;   // "events.jsonl"
  std::string error;  // "No space left on device"
};

using JobInput =
    std::variant<JobBegins, AgentLaunchFailed, LauncherQueued, AgentConnected, NodeStaged,
                 StagingFailed, NodeStarted, RankExited, NodeIdle, AgentLost, StopSignal,
                 NodeSignalled, RanksProgressed, HangTimeOver, HangDiagnosed, MaxRuntimeOver,
                 ConnectDeadlineOver, ExitDeadlineOver, OutputCopied, OutputCopyFailed,
                 NodeOutputsCopied, RecordWriteFailed, LimitsNotEnforced, RankDebugged>;

// ---- Actions: what to do, in order -----------------------------------------------------------

enum class TimerKind { kConnect, kRuntime, kExit, kHang };

struct LaunchAgents {};              // have the launcher start one agent per node
struct SendPlan { int node; };       // the node's part of the plan, once every agent is there
struct SendStage {};                 // to every connected agent
struct SendStart { int attempt; };   // to every connected agent
// To every connected agent: `signal` (policy.stop_signal) to every rank, SIGKILL `grace_ms`
// later; grace 0: SIGKILL at once. With `exit_code`, the stop ends the job (no restart follows,
// no node copies outputs): each agent also leaves once its ranks are gone, with that code (the
// job's as it stands), without waiting to be told to (SendExit).
struct SendStop {
  int64_t grace_ms;
  int signal = SIGTERM;
  std::optional<int> exit_code = std::nullopt;
};
struct SendExit {  // to one agent, or to every connected one
  std::optional<int> node;
  int code = 0;  // the job's exit code as it stands: what the agents exit with
  // plan.outputs indices the node copies from its own job directory first; it answers with
  // NodeOutputsCopied, then goes.
  std::vector<size_t> outputs = {};
};
struct ArmTimer { TimerKind timer; Millis after; };
struct DisarmTimer { TimerKind timer; };
struct WriteEvent { job::Event event; };  // `t` is left for the writer to stamp
struct Say {
  std::string line;
  bool always = false;  // a failure of the coordinator itself: said even without progress
};
struct CollectStacks {};  // ask every agent for its ranks' stacks; answer HangDiagnosed
// Every agent is gone or out of time: wait for them, kill what is left. Finish does it too.
struct ReapAgents {};
// How long agents told to exit have to go (ArmTimer kExit; Finish, when it comes first).
inline constexpr Millis kExitDeadline{10000};
struct CopyOutput { size_t index; };  // plan.outputs[index]; answer OutputCopied or ...Failed
struct WriteResult { JobOutcome outcome; };  // result.json
// The job is over: the agents are reaped (those still leaving have kExitDeadline), then the
// server hears the outcome; nothing after this is carried out.
struct Finish { JobOutcome outcome; };

using JobAction = std::variant<LaunchAgents, SendPlan, SendStage, SendStart, SendStop, SendExit,
                               ArmTimer, DisarmTimer, WriteEvent, Say, CollectStacks, ReapAgents,
                               CopyOutput, WriteResult, Finish>;

// ---- The machine -----------------------------------------------------------------------------

class JobDecisions {
 public:
  // Copies what it needs from `plan`. `connect_timeout`: how long every agent has to dial in.
  JobDecisions(const plan::Plan& plan, Millis connect_timeout);

  // What to do about `input`, which happened at `now`. Inputs that no longer matter (a stale
  // attempt's report, a timer after the end) return nothing.
  std::vector<JobAction> handle(const JobInput& input, TimePoint now);

  // True once Finish was returned.
  bool finished() const { return finished_; }

 private:
  enum class Ending {
    kNone,
    kSucceeded,
    kFailed,
    kStopped,
    kTimedOut,
    kHung,
    kLost,
    kStagingFailed,
    kOutputFailed,
    kRecordFailed
  };
  struct Rank {
    std::string name, role, log_file;
    int role_rank = 0;
    bool key = false;
    std::string debug_address;    // HOST:PORT of its debugger (debug:), "" without
    bool waits_at_start = false;  // debug.ranks: it waits for a debugger before its first line
    int node = 0;
  };
  struct Node {
    bool connected = false;
    bool ever_connected = false;
    bool idle = true;
    bool has_inputs = false;
    bool own_dir = false;  // its job directory is not the coordinator's
    bool copying = false;  // told to copy its outputs; no answer yet
    bool leaving = false;  // told to exit (SendExit, or a SendStop with an exit code)
    int running = 0;       // ranks of the attempt it started that have not exited
  };
  using Actions = std::vector<JobAction>;

  void on(const JobBegins&, Actions& out);
  void on(const AgentLaunchFailed& e, Actions& out);
  void on(const LauncherQueued& e, Actions& out);
  void on(const AgentConnected& e, Actions& out);
  void on(const NodeStaged& e, Actions& out);
  void on(const StagingFailed& e, Actions& out);
  void on(const NodeStarted& e, Actions& out);
  void on(const RankExited& e, Actions& out);
  void on(const LimitsNotEnforced& e, Actions& out);
  void on(const NodeIdle& e, Actions& out);
  void on(const AgentLost& e, Actions& out);
  void on(const StopSignal& e, Actions& out);
  void on(const NodeSignalled& e, Actions& out);
  void on(const RanksProgressed& e, Actions& out);
  void on(const HangTimeOver&, Actions& out);
  void on(const HangDiagnosed& e, Actions& out);
  void on(const MaxRuntimeOver&, Actions& out);
  void on(const ConnectDeadlineOver&, Actions& out);
  void on(const ExitDeadlineOver&, Actions& out);
  void on(const OutputCopied& e, Actions& out);
  void on(const OutputCopyFailed& e, Actions& out);
  void on(const NodeOutputsCopied& e, Actions& out);
  void on(const RecordWriteFailed& e, Actions& out);
  void on(const RankDebugged& e, Actions& out);

  void say(Actions& out, std::string line, bool always = false) const;
  void state(Actions& out, const std::string& name, std::optional<int> attempt,
             const std::string& reason = {}) const;
  void startAttempt(Actions& out);
  void armHangTimer(Actions& out);
  void beginStop(Ending ending, const std::string& why, Actions& out);
  void maybeAttemptOver(Actions& out);
  bool allIdle() const;                // no node runs anything: every connected one is idle
  bool restarts(Ending ending) const;  // the attempt that `ending` ends is followed by another
  // `after_ranks`: every node went idle at the end of an attempt (maybeAttemptOver).
  void finish(Ending ending, const std::string& why, Actions& out, bool after_ranks = false);
  void agentsGone(Actions& out);
  // `missing`: the error for an output the node gave no result for.
  void nodeCopied(int node, const std::vector<OutputResult>& results, const std::string& missing,
                  Actions& out);
  std::vector<size_t> outputsToCopy() const;  // by the ending: all, or the `always` ones
  void nextOutput(Actions& out);
  void complete(Actions& out);
  JobOutcome outcome() const;
  // debug: the ranks being debugged, by name ("worker/1, worker/3"); holding an ending while
  // there are any; carrying out what was held once there are none.
  std::string debuggedNames() const;
  void hold(Ending ending, const std::string& why, Actions& out);
  void debuggingOver(Actions& out);
  // "node 1", or "node 1 (h2)" where the plan names the node's machine.
  std::string nodeLabel(int node) const;

  // From the plan.
  std::vector<Node> nodes_;
  std::vector<std::string> machines_;  // plan::Plan::machines
  std::vector<std::optional<Rank>> ranks_;  // by global rank
  std::vector<plan::OutputPlan> outputs_;
  int key_total_ = 0;
  int max_restarts_ = 0;
  int64_t grace_ms_ = 0;
  int rank_stop_signal_ = SIGTERM;  // policy.stop_signal: what the ranks get
  int64_t max_runtime_ms_ = 0;
  int64_t debug_wait_limit_ms_ = 0;
  int64_t hang_ms_ = 0;     // 0: no hang detection
  int64_t startup_ms_ = 0;  // 0: hang_ms_ from the attempt's start
  Millis connect_timeout_;

  TimePoint now_{};
  TimePoint began_{};
  TimePoint attempt_started_{};
  int connected_ = 0;
  int staged_nodes_ = 0;
  int started_nodes_ = 0;
  int started_processes_ = 0;
  int key_ok_ = 0;
  int attempt_ = 0;
  int signals_seen_ = 0;
  int stop_signal_ = 0;
  Ending ending_ = Ending::kNone;
  std::string why_;
  std::string diagnosis_;         // of a hang
  bool progressed_ = false;       // some rank made progress in this attempt
  bool collecting_stacks_ = false;  // a hang was seen; the stacks are on their way
  bool no_restart_ = false;
  bool finishing_ = false;  // agents were told to exit
  bool reaped_ = false;
  bool copy_all_outputs_ = false;
  int copying_ = 0;  // nodes told to copy their outputs that have not answered
  std::vector<OutputResult> node_copies_;  // by output index: what the nodes copied themselves
  size_t next_output_ = 0;  // into outputsToCopy()
  bool completed_ = false;  // the final state and result were asked for
  bool finished_ = false;
  std::vector<RankExit> exits_;
  std::optional<LostNode> lost_node_;  // the first node lost while its ranks ran
  std::vector<OutputResult> output_results_;
  bool limits_said_ = false;  // that limits are not enforced: said once per job
  std::set<RecordFile> unwritable_;  // record files that failed, each said once
  std::optional<JobOutcome> final_;
  // debug: of the current attempt.
  std::map<int, std::string> debugged_;  // rank -> waiting | attached
  std::map<int, int64_t> raised_at_;     // rank -> when it stopped at its exception (post-mortem)
  std::optional<std::pair<Ending, std::string>> held_;  // an ending that waits for debugging
  bool runtime_over_ = false;  // max_runtime passed while ranks were debugged
  bool hold_said_ = false;     // that timeouts hold was said in this attempt
};

}  // namespace cohort::agent
