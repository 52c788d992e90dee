#include "sched/clock.h"

namespace cohort::sched {

TimePoint SystemClock::now() const {
  return std::chrono::floor<std::chrono::milliseconds>(std::chrono::system_clock::now());
}

}  // namespace cohort::sched
