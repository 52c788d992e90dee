#include "agent/agent_decisions.h"

#include <algorithm>
#include <csignal>

#include "spec/job_spec.h"

namespace cohort::agent {

using Millis = std::chrono::milliseconds;

namespace {

// How long ranks get to end after a word that is not a stop of the coordinator's with a grace
// period of its own (the job's exit, a lost coordinator, a second look at the exit after a
// chore): as long as the coordinator waits for the agent's last words.
constexpr Millis kLeaveGrace{3000};

int exitCodeOf(int code) { return std::clamp(code, 0, 255); }

// Appends an action, made in place (a temporary moved into the variant trips GCC's
// maybe-uninitialized analysis).
template <typename T>
void emit(std::vector<AgentAction>& out, T action) {
  out.emplace_back(std::in_place_type<T>, std::move(action));
}

}  // namespace

int noticeSignal(int signal) {
  if (signal == SIGKILL || signal == SIGSTOP || signal <= 0 || signal >= 65) return SIGTERM;
  return signal;
}

void AgentDecisions::configure(int stop_signal, Millis outside_grace) {
  stop_signal_ = stop_signal;
  outside_grace_ = std::max(Millis(0), outside_grace);
}

void AgentDecisions::onOwn(const std::string& reason) {
  if (own_reason_.empty()) own_reason_ = reason;
}

// One notice, then SIGKILL when the grace ends; a grace of 0 is SIGKILL at once. Once stopping,
// only that SIGKILL is left to send. Ranks not yet signalled are stopped by whoever decided this
// stop: the coordinator, unless the agent has a reason of its own.
void AgentDecisions::stop(Millis grace, int signal, std::vector<AgentAction>& out) {
  if (!stopping_ || grace.count() == 0) {
    const bool notice = grace.count() > 0;
    const int sig = notice ? noticeSignal(signal) : SIGKILL;
    if (running_ > 0) {
      emit(out, SignalRanks{sig, notice ? grace : Millis(0),
                                own_reason_.empty() ? "coordinator" : "agent", own_reason_});
    }
    // Only ranks that got the notice need the SIGKILL: a timer armed with nothing running would
    // go off in the next attempt and kill its ranks.
    grace_armed_ = notice && running_ > 0;
    if (notice) sent_signal_ = sig;
  }
  stopping_ = true;
}

// The agent's one way out: leave now if nothing runs and no chore is under way; otherwise stop
// the ranks and leave when the last is gone, or when the chore is over.
void AgentDecisions::exitWhenDone(Millis grace, std::vector<AgentAction>& out) {
  exiting_ = true;
  if (chore_ || left_) return;
  if (running_ == 0) {
    left_ = true;
    emit(out, Leave{});
  } else {
    stop(grace, stop_signal_, out);
  }
}

std::vector<AgentAction> AgentDecisions::on(const AgentInput& input) {
  std::vector<AgentAction> out;
  std::visit(
      [&](const auto& in) {
        using T = std::decay_t<decltype(in)>;
        if constexpr (std::is_same_v<T, StopAsked>) {
          stop(in.grace, in.signal, out);
          if (in.exit) {  // the job's end: leave once the ranks are gone
            exit_code_ = exitCodeOf(in.exit_code);
            exitWhenDone(in.grace, out);
          }
        } else if constexpr (std::is_same_v<T, ExitAsked>) {
          // The job's code, so that a cluster's accounting (sacct) agrees with cohort.
          exit_code_ = exitCodeOf(in.code);
          exitWhenDone(kLeaveGrace, out);
        } else if constexpr (std::is_same_v<T, SignalCame>) {
          const std::string reason = spec::stopSignalName(in.signal) + " came from outside";
          if (!in.coordinator_there) {
            onOwn(reason);
            exitWhenDone(stopping_ ? Millis(0) : kLeaveGrace, out);
            return;
          }
          // The coordinator is there, so it was not our parent going away: a cluster preempts or
          // cancels the job, the machine shuts down. The ranks get their notice and grace
          // period, and the coordinator stops every other node's too. A second signal kills at
          // once; the first does not cut short a stop the coordinator began.
          if (!stopping_) {
            emit(out, TellSignalled{in.signal});
            onOwn(reason);
          }
          exitWhenDone(signalled_ ? Millis(0) : outside_grace_, out);
          signalled_ = true;
        } else if constexpr (std::is_same_v<T, CoordinatorLost>) {
          if (lost_coordinator_) return;
          lost_coordinator_ = true;
          onOwn("it lost its coordinator: " + in.why);
          emit(out, StopListening{});
          exitWhenDone(kLeaveGrace, out);
        } else if constexpr (std::is_same_v<T, GraceOver>) {
          grace_armed_ = false;
          if (stopping_ && running_ > 0) emit(out, KillRanks{});
        } else if constexpr (std::is_same_v<T, AttemptBegins>) {
          stopping_ = false;
          grace_armed_ = false;
          emit(out, DisarmGrace{});
        } else if constexpr (std::is_same_v<T, RanksStarted>) {
          running_ = std::max(0, in.running);
        } else if constexpr (std::is_same_v<T, RankGone>) {
          running_ = std::max(0, running_ - 1);
        } else if constexpr (std::is_same_v<T, AttemptOver>) {
          running_ = 0;
          grace_armed_ = false;
          emit(out, DisarmGrace{});
          if (exiting_ && !chore_ && !left_) {
            left_ = true;
            emit(out, Leave{});
          }
        } else if constexpr (std::is_same_v<T, ChoreBegins>) {
          chore_ = true;
        } else if constexpr (std::is_same_v<T, ChoreOver>) {
          chore_ = false;
          if (exiting_) exitWhenDone(kLeaveGrace, out);
        }
      },
      input);
  return out;
}

}  // namespace cohort::agent
