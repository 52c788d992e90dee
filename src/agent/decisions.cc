#include "agent/decisions.h"

#include <signal.h>
#include <string.h>

#include <algorithm>
#include <cstdio>

namespace cohort::agent {

const char* jobStateName(JobState state) {
  switch (state) {
    case JobState::kSucceeded: return "succeeded";
    case JobState::kFailed: return "failed";
    case JobState::kStopped: return "stopped";
  }
  return "failed";
}

namespace {

std::string signalName(int sig) { return spec::stopSignalName(sig); }

double secondsBetween(TimePoint from, TimePoint to) {
  return std::chrono::duration<double>(to - from).count();
}

}  // namespace

JobDecisions::JobDecisions(const plan::Plan& plan, Millis connect_timeout)
    : nodes_(plan.nodes.size()),
      machines_(plan.machines),
      outputs_(plan.outputs),
      max_restarts_(plan.max_restarts),
      grace_ms_(plan.grace_period_ms),
      rank_stop_signal_(plan.stop_signal),
      max_runtime_ms_(plan.max_runtime_ms),
      debug_wait_limit_ms_(plan.debug_wait_limit_ms),
      hang_ms_(plan.hang_timeout_ms),
      startup_ms_(plan.startup_timeout_ms),
      connect_timeout_(connect_timeout) {
  for (size_t n = 0; n < plan.nodes.size(); ++n) {
    nodes_[n].has_inputs = !plan.nodes[n].inputs.empty();
    for (const plan::RankPlan& r : plan.nodes[n].ranks) {
      if (r.rank < 0) continue;
      if (static_cast<size_t>(r.rank) >= ranks_.size()) ranks_.resize(r.rank + 1);
      std::string address;
      bool waits = false;
      for (const auto& [key, value] : r.env) {
        if (key == "COHORT_DEBUG_LISTEN" || key == "COHORT_DEBUG_CONNECT") address = value;
        waits = waits || (key == "COHORT_DEBUG_WAIT" && value == "1");
      }
      ranks_[r.rank] = Rank{r.name, r.role, r.log_file, r.role_rank, r.key, address, waits, r.node};
      if (r.key) ++key_total_;
    }
  }
}

std::vector<JobAction> JobDecisions::handle(const JobInput& input, TimePoint now) {
  Actions out;
  if (finished_ && !std::holds_alternative<RecordWriteFailed>(input)) return out;
  now_ = now;
  std::visit([&](const auto& e) { on(e, out); }, input);
  return out;
}

// ---- helpers ---------------------------------------------------------------------------------

void JobDecisions::say(Actions& out, std::string line, bool always) const {
  out.push_back(Say{std::move(line), always});
}

void JobDecisions::state(Actions& out, const std::string& name, std::optional<int> attempt,
                         const std::string& reason) const {
  job::Event e = job::stateEvent(0, name, reason);
  e.attempt = attempt;
  out.push_back(WriteEvent{std::move(e)});
}

void JobDecisions::startAttempt(Actions& out) {
  key_ok_ = 0;
  started_nodes_ = 0;
  started_processes_ = 0;
  attempt_started_ = now_;
  progressed_ = false;
  collecting_stacks_ = false;
  debugged_.clear();
  raised_at_.clear();
  held_.reset();
  hold_said_ = false;
  // debug.ranks wait from their start, before they can say so: a peer that fails meanwhile is
  // held like one that fails later.
  for (size_t r = 0; r < ranks_.size(); ++r) {
    if (ranks_[r] && ranks_[r]->waits_at_start) debugged_[static_cast<int>(r)] = "waiting";
  }
  for (Node& node : nodes_) {
    node.idle = false;
    node.running = 0;
  }
  state(out, "running", attempt_);
  out.push_back(SendStart{attempt_});
  armHangTimer(out);
}

// From now: startup_timeout until the attempt's first progress (when given), then hang_timeout
// from each progress. Not "every rank once": many scripts print on rank 0 only.
void JobDecisions::armHangTimer(Actions& out) {
  const int64_t limit = !progressed_ && startup_ms_ > 0 ? startup_ms_ : hang_ms_;
  if (limit > 0) {
    out.push_back(ArmTimer{TimerKind::kHang, Millis(limit)});
  } else {
    out.push_back(DisarmTimer{TimerKind::kHang});
  }
}

// The attempt ends: say why once, tell every agent to stop its ranks, and see whether that is
// already done (nothing ran yet).
void JobDecisions::beginStop(Ending ending, const std::string& why, Actions& out) {
  if (ending_ == Ending::kNone) {
    ending_ = ending;
    why_ = why;
    // What the ranks get, in words, for the console and the "stopping" event: the stop signal
    // is each rank's one notice to save its work (a checkpoint) before the SIGKILL.
    int running = 0;
    for (const Node& node : nodes_) running += node.connected ? node.running : 0;
    std::string sent;
    if (running > 0) {
      sent = "sent " + signalName(rank_stop_signal_) + " to " + std::to_string(running) +
             " rank(s), SIGKILL " +
             (grace_ms_ > 0 ? "in " + formatDuration(Millis(grace_ms_)) : "at once");
    }
    if (ending != Ending::kSucceeded) {
      say(out, why + "; stopping every rank" + (sent.empty() ? "" : ": " + sent),
          ending == Ending::kRecordFailed);
    }
    state(out, "stopping", attempt_, sent.empty() ? why : why + "; " + sent);
  }
  SendStop stop{grace_ms_, rank_stop_signal_};
  // The end of the job, unless a restart follows or a node with a job directory of its own has
  // outputs to copy first: the agents go as soon as their ranks are, which saves telling them
  // (a round trip to every node) once the last one is idle.
  const bool nodes_copy = std::any_of(nodes_.begin(), nodes_.end(), [](const Node& node) {
    return node.connected && node.own_dir;
  });
  const bool outputs = std::any_of(outputs_.begin(), outputs_.end(), [&](const auto& o) {
    return o.always || ending_ == Ending::kSucceeded;
  });
  if (!restarts(ending_) && !(nodes_copy && outputs)) {
    stop.exit_code = outcome().exit_code;
    for (Node& node : nodes_) node.leaving = node.leaving || node.connected;
  }
  out.push_back(stop);
  maybeAttemptOver(out);
}

bool JobDecisions::restarts(Ending ending) const {
  return (ending == Ending::kFailed || ending == Ending::kHung) && attempt_ < max_restarts_ &&
         !no_restart_ && connected_ == static_cast<int>(nodes_.size());
}

// When no connected agent runs anything of the attempt, the attempt is over: restart the whole
// gang if the budget allows, or finish.
void JobDecisions::maybeAttemptOver(Actions& out) {
  if (finishing_ || ending_ == Ending::kNone || !allIdle()) return;
  if (restarts(ending_)) {
    ++attempt_;
    say(out, "attempt " + std::to_string(attempt_) + " failed (" + why_ + "); restarting (" +
                 std::to_string(attempt_) + " of " + std::to_string(max_restarts_) +
                 " restarts)");
    state(out, "restarting", attempt_, why_);
    ending_ = Ending::kNone;
    startAttempt(out);
    return;
  }
  finish(ending_, why_, out, /*after_ranks=*/true);
}

// Nothing of the job runs any more (or nothing ever will): the agents are told to exit.
void JobDecisions::finish(Ending ending, const std::string& why, Actions& out, bool after_ranks) {
  ending_ = ending;
  why_ = why;
  finishing_ = true;
  out.push_back(DisarmTimer{TimerKind::kConnect});
  out.push_back(DisarmTimer{TimerKind::kRuntime});
  out.push_back(DisarmTimer{TimerKind::kHang});
  // The job's results go where the job file says; after a failure only the `always` ones.
  copy_all_outputs_ = ending_ == Ending::kSucceeded;
  const std::vector<size_t> to_copy = outputsToCopy();
  const int code = outcome().exit_code;
  // A node whose job directory is its own has the only copy of what its ranks saved: it copies
  // that before it goes. The coordinator copies the job directory it shares with the others.
  for (size_t n = 0; n < nodes_.size() && !to_copy.empty(); ++n) {
    if (!nodes_[n].connected || !nodes_[n].own_dir || nodes_[n].copying) continue;
    nodes_[n].copying = true;
    nodes_[n].leaving = true;
    ++copying_;
    out.push_back(SendExit{static_cast<int>(n), code, to_copy});
  }
  for (size_t n = 0; n < nodes_.size(); ++n) {
    Node& node = nodes_[n];
    if (!node.connected || node.leaving) continue;  // those told by the stop go by themselves
    node.leaving = true;
    if (!node.copying) out.push_back(SendExit{static_cast<int>(n), code});
  }
  if (connected_ == 0) {
    agentsGone(out);
  } else if (after_ranks && to_copy.empty()) {
    // Every node is idle: the attempt's ranks, and all they left behind, are gone. With nothing
    // to copy, nothing the agents do as they leave changes the outcome: the record is written
    // while they go, not after, and Finish waits for them.
    reaped_ = true;
    complete(out);
  } else if (copying_ == 0) {
    out.push_back(ArmTimer{TimerKind::kExit, kExitDeadline});
  }
}

bool JobDecisions::allIdle() const {
  return std::all_of(nodes_.begin(), nodes_.end(),
                     [](const Node& n) { return !n.connected || n.idle; });
}

// A node's copies are in (or it was lost before they were): the agents that are left have the
// exit deadline once none copies any more.
void JobDecisions::nodeCopied(int node, const std::vector<OutputResult>& results,
                              const std::string& missing, Actions& out) {
  Node& n = nodes_[node];
  if (!n.copying) return;
  n.copying = false;
  --copying_;
  node_copies_.resize(outputs_.size());
  const std::vector<size_t> given = outputsToCopy();
  for (size_t k = 0; k < given.size(); ++k) {
    OutputResult& total = node_copies_[given[k]];
    const OutputResult r = k < results.size() ? results[k] : OutputResult{"", "", 0, 0, missing};
    total.files += r.files;
    total.bytes += r.bytes;
    if (!r.error.empty() && total.error.empty()) {
      total.error = nodeLabel(node) + ": " + r.error;
    }
  }
  if (copying_ == 0 && !reaped_) out.push_back(ArmTimer{TimerKind::kExit, kExitDeadline});
}

void JobDecisions::on(const NodeOutputsCopied& e, Actions& out) {
  if (e.node < 0 || e.node >= static_cast<int>(nodes_.size())) return;
  nodeCopied(e.node, e.results, "its agent did not say what it copied", out);
}

void JobDecisions::agentsGone(Actions& out) {
  if (reaped_) return;
  reaped_ = true;
  out.push_back(DisarmTimer{TimerKind::kExit});
  // Once every agent has closed its channel, what is left of them is their processes' exit: the
  // result and the final state need not wait for it (Finish reaps them). Unless outputs are
  // copied from what their nodes wrote, or an agent out of time is still there to be killed.
  if (connected_ > 0 || !outputsToCopy().empty()) out.push_back(ReapAgents{});
  nextOutput(out);
}

std::vector<size_t> JobDecisions::outputsToCopy() const {
  std::vector<size_t> out;
  for (size_t i = 0; i < outputs_.size(); ++i) {
    if (copy_all_outputs_ || outputs_[i].always) out.push_back(i);
  }
  return out;
}

void JobDecisions::nextOutput(Actions& out) {
  const std::vector<size_t> to_copy = outputsToCopy();
  if (next_output_ < to_copy.size()) {
    out.push_back(CopyOutput{to_copy[next_output_++]});
    return;  // the next one after its answer
  }
  complete(out);
}

JobOutcome JobDecisions::outcome() const {
  JobOutcome o;
  o.exits = exits_;
  o.outputs = output_results_;
  o.attempts = attempt_ + 1;
  o.reason = why_;
  o.duration_s = secondsBetween(began_, now_);
  switch (ending_) {
    case Ending::kSucceeded:
      o.state = JobState::kSucceeded;
      o.exit_code = 0;
      break;
    case Ending::kFailed: {
      std::vector<RankExit> last;
      for (const RankExit& e : exits_) {
        if (e.attempt == attempt_) last.push_back(e);
      }
      o.state = JobState::kFailed;
      o.root_cause = firstFailure(last);
      o.exit_code = o.root_cause ? o.root_cause->shellCode() : 1;
      if (o.exit_code == 0) o.exit_code = 1;
      break;
    }
    case Ending::kStopped:
      o.state = JobState::kStopped;
      o.exit_code = 128 + (stop_signal_ ? stop_signal_ : SIGTERM);
      break;
    case Ending::kTimedOut:
      o.state = JobState::kFailed;
      o.exit_code = 124;
      break;
    case Ending::kHung:
      o.state = JobState::kFailed;
      o.exit_code = 124;
      o.diagnosis = diagnosis_;
      break;
    case Ending::kLost:
      o.state = JobState::kFailed;
      o.exit_code = 1;
      o.lost_node = lost_node_;
      break;
    case Ending::kNone:  // cannot end so; never report success for it
    case Ending::kStagingFailed:
    case Ending::kOutputFailed:
    case Ending::kRecordFailed:
      o.state = JobState::kFailed;
      o.exit_code = 1;
      break;
  }
  return o;
}

// The last step: the result, then the final state as an event, then the job is over. The result
// comes first so that when it cannot be written the events never say "succeeded" at all.
void JobDecisions::complete(Actions& out) {
  completed_ = true;
  JobOutcome o = outcome();
  out.push_back(WriteResult{o});
  job::Event e = job::stateEvent(0, jobStateName(o.state), o.reason);
  e.exit_code = o.exit_code;
  out.push_back(WriteEvent{std::move(e)});
  final_ = o;
  finished_ = true;
  out.push_back(Finish{std::move(o)});
}

// ---- events ----------------------------------------------------------------------------------

void JobDecisions::on(const JobBegins&, Actions& out) {
  began_ = now_;
  state(out, "starting", std::nullopt);
  out.push_back(ArmTimer{TimerKind::kConnect, connect_timeout_});
  out.push_back(LaunchAgents{});
}

void JobDecisions::on(const AgentLaunchFailed& e, Actions& out) {
  if (finishing_) return;
  finish(Ending::kLost,
         (e.node < 0 ? std::string("could not start the agents: ")
                     : "could not start node " + std::to_string(e.node) + "'s agent: ") +
             e.error,
         out);
}

// Time in a cluster's queue is not time to connect: the connect timeout starts when it is over.
void JobDecisions::on(const LauncherQueued& e, Actions& out) {
  if (finishing_ || connected_ == static_cast<int>(nodes_.size())) return;
  if (e.reason.empty()) {
    out.push_back(ArmTimer{TimerKind::kConnect, connect_timeout_});
    state(out, "starting", std::nullopt, "the nodes are allocated");
    say(out, "the nodes are allocated; waiting for their agents");
    return;
  }
  out.push_back(DisarmTimer{TimerKind::kConnect});
  state(out, "starting", std::nullopt, e.reason);
  say(out, e.reason);
}

void JobDecisions::on(const AgentConnected& e, Actions& out) {
  if (e.node < 0 || e.node >= static_cast<int>(nodes_.size())) return;
  Node& node = nodes_[e.node];
  if (node.connected) return;
  const bool again = node.ever_connected;
  node.connected = true;
  node.ever_connected = true;
  node.idle = true;
  ++connected_;
  if (finishing_ || again) {
    // Too late to take part (or it came back after it was lost): it only has to go.
    node.leaving = true;
    out.push_back(SendExit{e.node});
    return;
  }
  if (connected_ == static_cast<int>(nodes_.size()) && ending_ == Ending::kNone) {
    // The plans go once every node is there: only then are the nodes' addresses known. Every
    // node stages its inputs; ranks start only when all have (the start barrier).
    for (size_t n = 0; n < nodes_.size(); ++n) out.push_back(SendPlan{static_cast<int>(n)});
    out.push_back(DisarmTimer{TimerKind::kConnect});
    state(out, "staging", std::nullopt);
    out.push_back(SendStage{});
  }
}

void JobDecisions::on(const NodeStaged& e, Actions& out) {
  if (e.node >= 0 && e.node < static_cast<int>(nodes_.size())) nodes_[e.node].own_dir = e.own_dir;
  job::Event staged;
  staged.kind = job::EventKind::kStaged;
  staged.node = e.node;
  staged.seconds = e.seconds;
  staged.files = e.files;
  staged.bytes = e.bytes;
  out.push_back(WriteEvent{std::move(staged)});
  if (e.node >= 0 && e.node < static_cast<int>(nodes_.size()) && nodes_[e.node].has_inputs) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "node %d staged %lld file(s), %.1f MiB in %.2fs", e.node,
                  static_cast<long long>(e.files), static_cast<double>(e.bytes) / (1 << 20),
                  e.seconds);
    say(out, buf);
  }
  if (++staged_nodes_ == static_cast<int>(nodes_.size()) && ending_ == Ending::kNone) {
    if (max_runtime_ms_ > 0) out.push_back(ArmTimer{TimerKind::kRuntime, Millis(max_runtime_ms_)});
    startAttempt(out);
  }
}

void JobDecisions::on(const StagingFailed& e, Actions& out) {
  job::Event failed;
  failed.kind = job::EventKind::kStageFailed;
  failed.node = e.node;
  failed.error = e.error;
  out.push_back(WriteEvent{std::move(failed)});
  no_restart_ = true;
  if (ending_ != Ending::kNone || finishing_) return;
  std::string why = "staging on node " + std::to_string(e.node) + " failed: " +
                    (e.error.empty() ? std::string("unknown error") : e.error);
  say(out, why);
  finish(Ending::kStagingFailed, why, out);
}

void JobDecisions::on(const NodeStarted& e, Actions& out) {
  if (e.attempt != attempt_) return;
  started_processes_ += e.count;
  if (e.node >= 0 && e.node < static_cast<int>(nodes_.size())) nodes_[e.node].running += e.count;
  if (++started_nodes_ == static_cast<int>(nodes_.size())) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "%d process(es) started on %zu node(s) in %.3fs",
                  started_processes_, nodes_.size(), secondsBetween(attempt_started_, now_));
    say(out, buf);
  }
}

std::string JobDecisions::nodeLabel(int node) const {
  const bool named = node >= 0 && static_cast<size_t>(node) < machines_.size() &&
                     !machines_[node].empty();
  return "node " + std::to_string(node) + (named ? " (" + machines_[node] + ")" : "");
}

void JobDecisions::on(const RankExited& e, Actions& out) {
  if (e.attempt != attempt_) return;
  if (e.rank < 0 || static_cast<size_t>(e.rank) >= ranks_.size() || !ranks_[e.rank]) return;
  const Rank& r = *ranks_[e.rank];
  RankExit x;
  x.attempt = attempt_;
  x.name = r.name;
  x.role = r.role;
  x.role_rank = r.role_rank;
  x.rank = e.rank;
  x.node = e.node;
  x.machine = e.node >= 0 && static_cast<size_t>(e.node) < machines_.size() ? machines_[e.node] : "";
  x.code = e.code;
  x.signal = e.signal;
  x.by_cohort = e.stopped_by != StoppedBy::kNobody;
  x.time_ns = e.time_ns;
  x.tail = e.tail;
  x.log_file = r.log_file;
  x.memory_limit = e.memory_limit;
  // Post-mortem: it failed when it stopped at its exception, before the peers it held up.
  if (auto raised = raised_at_.find(e.rank); raised != raised_at_.end() && x.failed()) {
    x.time_ns = std::min(x.time_ns, raised->second);
  }
  if (x.failed() && !x.by_cohort) {
    for (const auto& [rank, state] : debugged_) {
      if (rank != e.rank) x.while_debugged.push_back(ranks_[rank]->name);
    }
  }
  const bool was_debugged = debugged_.erase(e.rank) > 0;
  exits_.push_back(x);
  if (e.node >= 0 && e.node < static_cast<int>(nodes_.size()) && nodes_[e.node].running > 0) {
    --nodes_[e.node].running;
  }
  job::Event ev;
  ev.kind = job::EventKind::kRankExit;
  ev.attempt = attempt_;
  ev.name = x.name;
  ev.role = x.role;
  ev.role_rank = x.role_rank;
  ev.rank = x.rank;
  ev.node = x.node;
  ev.code = x.code;
  ev.signal = x.signal;
  ev.by_cohort = x.by_cohort;
  if (e.stopped_by == StoppedBy::kAgent) ev.reason = "stopped by its node's agent: " + e.stop_reason;
  ev.exit_time = x.time_ns;
  ev.memory_limit = x.memory_limit;
  out.push_back(WriteEvent{std::move(ev)});
  if (ending_ != Ending::kNone || finishing_) return;
  if (x.by_cohort) {
    // No stop was decided, yet cohort signalled the rank: its agent did so on its own (it lost
    // its coordinator, say). Whatever its exit code, the rank did not finish by itself: never a
    // success, and no restart (an agent that lost its coordinator is leaving).
    no_restart_ = true;
    beginStop(Ending::kLost,
              x.label() + " was stopped by " +
                  (e.stopped_by == StoppedBy::kAgent
                       ? "its node's agent on its own" +
                             (e.stop_reason.empty() ? std::string() : " (" + e.stop_reason + ")")
                       : std::string("cohort although no stop was decided")),
              out);
    return;
  }
  if (x.failed()) {
    std::string why = x.label() + " " + x.describe();
    if (x.memory_limit > 0) why += "; raise resources.memory or use less";
    if (!debugged_.empty()) {
      hold(Ending::kFailed, why, out);
      return;
    }
    beginStop(Ending::kFailed, why, out);
  } else if (r.key && ++key_ok_ == key_total_) {
    beginStop(Ending::kSucceeded, "every rank of the key role(s) exited 0", out);
  } else if (was_debugged && debugged_.empty()) {
    debuggingOver(out);
  }
}

// ---- debug: while a rank waits for a debugger or has one, nothing ends the job but a stop ----

std::string JobDecisions::debuggedNames() const {
  std::vector<std::string> names;
  for (const auto& [rank, state] : debugged_) names.push_back(ranks_[rank]->name);
  return join(names, ", ");
}

// `why` would end the attempt now: it waits until no rank is being debugged. The first to come
// is the one carried out.
void JobDecisions::hold(Ending ending, const std::string& why, Actions& out) {
  if (held_) return;
  held_ = {ending, why};
  const std::string line =
      why + "; held while " + debuggedNames() + " is being debugged: the job stops once no rank is";
  say(out, line);
  state(out, "running", attempt_, line);
}

// No rank waits for a debugger or has one any more: what was held is carried out, and the
// hang timer starts again from now.
void JobDecisions::debuggingOver(Actions& out) {
  if (ending_ != Ending::kNone || finishing_) return;
  say(out, "no rank is being debugged: max_runtime, hang detection and fail-fast apply again");
  if (held_) {
    auto [ending, why] = *held_;
    held_.reset();
    beginStop(ending, why, out);
    return;
  }
  if (runtime_over_) {
    beginStop(Ending::kTimedOut,
              "max_runtime " + formatDuration(Millis(max_runtime_ms_)) +
                  " exceeded (held while ranks were being debugged)",
              out);
    return;
  }
  armHangTimer(out);
}

void JobDecisions::on(const RankDebugged& e, Actions& out) {
  if (e.attempt != attempt_ || ending_ != Ending::kNone || finishing_) return;
  if (e.rank < 0 || static_cast<size_t>(e.rank) >= ranks_.size() || !ranks_[e.rank]) return;
  if (!job::isDebugState(e.state)) return;
  const Rank& r = *ranks_[e.rank];
  job::Event ev;
  ev.kind = job::EventKind::kDebug;
  ev.attempt = attempt_;
  ev.name = r.name;
  ev.rank = e.rank;
  ev.node = e.node;
  ev.state = e.state;
  ev.reason = e.reason;
  ev.where = e.where;
  ev.address = r.debug_address;
  out.push_back(WriteEvent{std::move(ev)});
  const std::string who = r.name + " on " + nodeLabel(e.node);
  if (e.state == "running") {
    if (debugged_.erase(e.rank) == 0) return;
    say(out, who + " goes on without a debugger");
    if (debugged_.empty()) debuggingOver(out);
    return;
  }
  debugged_[e.rank] = e.state;
  if (e.state == "waiting") {
    if (e.reason == "exception") raised_at_.emplace(e.rank, e.time_ns);
    std::string line = who + " is waiting for a debugger at " + r.debug_address;
    if (!e.where.empty()) line += " (" + e.where + ")";
    say(out, line);
  } else {
    say(out, (e.reason == "pdb" ? "pdb runs " : "a debugger is attached to ") + who);
  }
  if (!hold_said_) {
    hold_said_ = true;
    say(out, "while a rank is being debugged, max_runtime, hang detection and fail-fast hold");
  }
}

void JobDecisions::on(const LimitsNotEnforced& e, Actions& out) {
  // Once per job: what the job goes without is the same on every node that says it.
  if (limits_said_) return;
  limits_said_ = true;
  const std::string warning =
      "resource requests (resources.cpus, .memory, .pids) are not enforced here: the job "
      "runs, but a rank may use more CPU, memory and processes than it asked for, and one over "
      "its memory is not stopped at its limit (" +
      nodeLabel(e.node) + ": " + e.why + ")";
  job::Event ev;
  ev.kind = job::EventKind::kLimits;
  ev.node = e.node;
  ev.warning = warning;
  out.push_back(WriteEvent{std::move(ev)});
  say(out, "warning: " + warning);
}

void JobDecisions::on(const NodeIdle& e, Actions& out) {
  if (e.attempt != attempt_) return;
  if (e.node < 0 || e.node >= static_cast<int>(nodes_.size())) return;
  nodes_[e.node].idle = true;
  maybeAttemptOver(out);
}

void JobDecisions::on(const AgentLost& e, Actions& out) {
  if (e.node < 0 || e.node >= static_cast<int>(nodes_.size())) return;
  Node& node = nodes_[e.node];
  if (!node.connected) return;
  const bool goodbye = node.leaving && node.idle;  // told to go once idle, and it went
  node.connected = false;
  node.idle = true;  // it cannot run or report ranks any more
  --connected_;
  if (goodbye && !finishing_) {
    maybeAttemptOver(out);
    return;
  }
  if (finishing_) {
    nodeCopied(e.node, {}, "its agent was lost before it copied its outputs", out);
    if (connected_ == 0) agentsGone(out);
    return;
  }
  no_restart_ = true;  // a gang without one of its nodes cannot start again
  if (!lost_node_ && ending_ == Ending::kNone) {
    LostNode lost{e.node, e.why, e.node < static_cast<int>(machines_.size()) ? machines_[e.node] : "",
                  {}, {}};
    for (const std::optional<Rank>& r : ranks_) {
      if (r && r->node == e.node) {
        lost.ranks.push_back(r->name);
        lost.logs.push_back(r->log_file);
      }
    }
    lost_node_ = std::move(lost);
  }
  beginStop(Ending::kLost,
            nodeLabel(e.node) + "'s agent was lost" +
                (e.why.empty() ? std::string() : " (" + e.why + ")"),
            out);
}

void JobDecisions::on(const StopSignal& e, Actions& out) {
  ++signals_seen_;
  if (!stop_signal_) stop_signal_ = e.signal;
  if (finishing_) return;
  if (signals_seen_ > 1) {
    say(out, "second signal: killing every rank now");
    out.push_back(SendStop{0, SIGKILL});
    return;
  }
  std::string name = signalName(e.signal);
  std::string why = "stopped by " + name;
  no_restart_ = true;
  if (connected_ < static_cast<int>(nodes_.size()) && ending_ == Ending::kNone) {
    finish(Ending::kStopped, why, out);  // nothing runs yet
    return;
  }
  say(out, name + " received: stopping the job (send it again to kill at once)");
  beginStop(Ending::kStopped, why, out);
}

// A cluster that preempts a job signals its tasks (the agents), not the coordinator: the agent
// stops its own ranks and says so; every other node's ranks get the same notice.
void JobDecisions::on(const NodeSignalled& e, Actions& out) {
  if (e.node < 0 || e.node >= static_cast<int>(nodes_.size()) || finishing_) return;
  if (ending_ != Ending::kNone) return;
  if (!stop_signal_) stop_signal_ = e.signal;
  no_restart_ = true;
  beginStop(Ending::kStopped,
            nodeLabel(e.node) + "'s agent got " + signalName(e.signal) +
                " (its cluster preempts or cancels the job, or its machine shuts down)",
            out);
}

void JobDecisions::on(const RanksProgressed& e, Actions& out) {
  if (e.attempt != attempt_ || ending_ != Ending::kNone || finishing_ || collecting_stacks_) return;
  bool any = false;
  for (int r : e.ranks) {
    any = any || (r >= 0 && static_cast<size_t>(r) < ranks_.size() && ranks_[r]);
  }
  if (!any) return;
  progressed_ = true;  // the first progress also ends the startup
  armHangTimer(out);
}

void JobDecisions::on(const HangTimeOver&, Actions& out) {
  if (ending_ != Ending::kNone || finishing_ || collecting_stacks_) return;
  if (!debugged_.empty()) {  // a paused rank and the peers it holds up make no progress
    armHangTimer(out);
    return;
  }
  collecting_stacks_ = true;
  say(out, "no progress: collecting every rank's stack");
  out.push_back(CollectStacks{});
}

void JobDecisions::on(const HangDiagnosed& e, Actions& out) {
  if (ending_ != Ending::kNone || finishing_ || !collecting_stacks_) return;
  collecting_stacks_ = false;
  if (!debugged_.empty()) {  // a debugger attached while the stacks came
    armHangTimer(out);
    return;
  }
  const bool starting = !progressed_ && startup_ms_ > 0;
  std::string why = starting ? "no rank made progress within startup_timeout " +
                                   formatDuration(Millis(startup_ms_)) + " of the start"
                             : "no rank made progress for hang_timeout " +
                                   formatDuration(Millis(hang_ms_));
  if (!e.laggards.empty()) why += ": " + e.laggards;
  diagnosis_ = e.diagnosis;
  beginStop(Ending::kHung, why, out);
}

void JobDecisions::on(const MaxRuntimeOver&, Actions& out) {
  if (finishing_) return;
  const std::string limit = "max_runtime " + formatDuration(Millis(max_runtime_ms_));
  if (!debugged_.empty() && ending_ == Ending::kNone && !runtime_over_) {
    // Held, but not for ever: that a rank is being debugged is the rank's own word, so after
    // debug.wait_limit more the job stops whatever its ranks say.
    const std::string line = limit + " reached while " + debuggedNames() +
                             " is being debugged: the job stops once no rank is, or in " +
                             formatDuration(Millis(debug_wait_limit_ms_)) + " (debug.wait_limit)";
    say(out, line);
    state(out, "running", attempt_, line);
    runtime_over_ = true;
    out.push_back(ArmTimer{TimerKind::kRuntime, Millis(debug_wait_limit_ms_)});
    return;
  }
  beginStop(Ending::kTimedOut,
            runtime_over_
                ? limit + " and debug.wait_limit " + formatDuration(Millis(debug_wait_limit_ms_)) +
                      " exceeded while ranks were being debugged"
                : limit + " exceeded",
            out);
}

void JobDecisions::on(const ConnectDeadlineOver&, Actions& out) {
  if (finishing_ || connected_ == static_cast<int>(nodes_.size())) return;
  std::vector<std::string> missing;
  for (size_t n = 0; n < nodes_.size(); ++n) {
    if (!nodes_[n].connected) missing.push_back(std::to_string(n));
  }
  finish(Ending::kLost, "the agent(s) of node(s) " + join(missing, ", ") +
                            " did not connect within " + formatDuration(connect_timeout_),
         out);
}

void JobDecisions::on(const ExitDeadlineOver&, Actions& out) {
  if (finishing_) agentsGone(out);  // reaping kills the agents that did not say goodbye
}

void JobDecisions::on(const OutputCopied& e, Actions& out) {
  if (!reaped_ || completed_ || e.index >= outputs_.size()) return;
  const plan::OutputPlan& plan = outputs_[e.index];
  OutputResult r{plan.source, plan.target, e.files, e.bytes, ""};
  if (e.index < node_copies_.size()) {
    // With what the nodes with job directories of their own copied there.
    const OutputResult& nodes = node_copies_[e.index];
    if (!nodes.error.empty()) {
      on(OutputCopyFailed{e.index, nodes.error}, out);
      return;
    }
    r.files += nodes.files;
    r.bytes += nodes.bytes;
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, " (%lld file(s), %.1f MiB)", static_cast<long long>(r.files),
                static_cast<double>(r.bytes) / (1 << 20));
  say(out, "output " + plan.source + " -> " + plan.target + buf);
  job::Event ev;
  ev.kind = job::EventKind::kOutput;
  ev.source = r.source;
  ev.target = r.target;
  ev.files = r.files;
  ev.bytes = r.bytes;
  out.push_back(WriteEvent{std::move(ev)});
  output_results_.push_back(std::move(r));
  nextOutput(out);
}

void JobDecisions::on(const OutputCopyFailed& e, Actions& out) {
  if (!reaped_ || completed_ || e.index >= outputs_.size()) return;
  const plan::OutputPlan& plan = outputs_[e.index];
  OutputResult r{plan.source, plan.target, 0, 0, e.error};
  // A copy that fails fails the job (the results are still in the job directory).
  std::string why = "copying output '" + plan.source + "' failed: " + e.error;
  say(out, why);
  if (ending_ == Ending::kSucceeded) {
    ending_ = Ending::kOutputFailed;
    why_ = why;
  }
  job::Event ev;
  ev.kind = job::EventKind::kOutput;
  ev.source = r.source;
  ev.target = r.target;
  ev.error = r.error;
  out.push_back(WriteEvent{std::move(ev)});
  output_results_.push_back(std::move(r));
  nextOutput(out);
}

// A job whose record is incomplete must not say it succeeded: whoever reads the record (the
// server, a script) would believe a job that may have lost its events or its result.
void JobDecisions::on(const RecordWriteFailed& e, Actions& out) {
  const bool first_for_file = unwritable_.insert(e.file).second;
  const std::string why = "could not write the job's record '" + e.name + "': " + e.error;
  no_restart_ = true;
  if (completed_) {
    if (!final_ || final_->state != JobState::kSucceeded) {
      if (first_for_file) say(out, why, true);
      return;
    }
    // The final answer said "succeeded": take it back, and record the failure where we still
    // can.
    ending_ = Ending::kRecordFailed;
    why_ = why;
    JobOutcome o = outcome();
    o.outputs = final_->outputs;
    o.duration_s = final_->duration_s;
    say(out, why, true);
    if (e.file != RecordFile::kResult) out.push_back(WriteResult{o});
    job::Event ev = job::stateEvent(0, jobStateName(o.state), o.reason);
    ev.exit_code = o.exit_code;
    out.push_back(WriteEvent{std::move(ev)});
    final_ = o;
    out.push_back(Finish{std::move(o)});
    return;
  }
  if (ending_ == Ending::kNone && !finishing_) {
    beginStop(Ending::kRecordFailed, why, out);  // says it, always
    return;
  }
  if (ending_ == Ending::kSucceeded) {
    ending_ = Ending::kRecordFailed;
    why_ = why;
  }
  if (first_for_file) say(out, why, true);
}

}  // namespace cohort::agent
