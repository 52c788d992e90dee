// Liveness: telling a peer that is slow from one that is gone, for the control channel's two
// ends. A peer on this machine (a forked agent, or its coordinator) is watched as a process: its
// connection ends when it dies, so silence alone never makes it lost, and a stopped one (SIGSTOP)
// is only said to be stopped. A peer on another machine is watched by its silence, counted only
// while this side was there to hear it: a timer tick that comes late (this process was stopped,
// or starved of CPU on a busy machine) adds at most two intervals, so our own absence is never
// the peer's silence. What is said of a lost remote peer names the load on this machine and the
// setting to raise. Pure but for loadNote (reads /proc/loadavg). Not thread-safe.
#pragma once

#include <chrono>
#include <string>

#include "util/text.h"

namespace cohort::agent {

class Silence {
 public:
  using Clock = std::chrono::steady_clock;

  // `every`: how often the owner ticks (and the peer is expected to say something).
  Silence(Millis every, Clock::time_point now) : every_(every), last_tick_(now) {}

  // The peer said something at `now`.
  void heard(Clock::time_point now) {
    silent_ = Millis(0);
    last_tick_ = now;
  }
  // A tick at `now`: the peer's silence so far, counted while we were there.
  Millis tick(Clock::time_point now) {
    const auto gap = std::chrono::duration_cast<Millis>(now - last_tick_);
    silent_ += std::min(gap, 2 * every_);
    last_tick_ = now;
    return silent_;
  }
  Millis silent() const { return silent_; }

 private:
  Millis every_;
  Clock::time_point last_tick_;
  Millis silent_{0};
};

// "; this machine's load average is 28.1 over 2 CPUs: if the peer is only slow, raise
// policy.heartbeat_timeout (--heartbeat-timeout)", for the message that says a peer was lost
// after `timeout` of silence; "" when /proc/loadavg cannot be read.
std::string loadNote();

// Whether process `pid` is stopped (SIGSTOP, a debugger: state T or t in /proc/<pid>/stat).
bool processStopped(int pid);

}  // namespace cohort::agent
