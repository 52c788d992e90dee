// Clock: where the scheduler (and anything else that must be tested without waiting) gets the
// time. Production code passes a SystemClock; tests pass a FakeClock and move it by hand, so a
// test never sleeps. Time is wall-clock time in milliseconds since the Unix epoch, because
// reservations are shown to users as times of day and compared with jobs' expected end times.
// SystemClock is thread-safe; a FakeClock belongs to one test thread.
#pragma once

#include <chrono>

#include "util/text.h"

namespace cohort::sched {

using TimePoint = std::chrono::sys_time<std::chrono::milliseconds>;

class Clock {
 public:
  virtual ~Clock() = default;
  virtual TimePoint now() const = 0;
};

// The system's real-time clock (CLOCK_REALTIME).
class SystemClock final : public Clock {
 public:
  TimePoint now() const override;
};

// A clock that only moves when told to.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(TimePoint start) : now_(start) {}
  TimePoint now() const override { return now_; }
  void advance(Millis by) { now_ += by; }
  void set(TimePoint to) { now_ = to; }

 private:
  TimePoint now_;
};

}  // namespace cohort::sched
