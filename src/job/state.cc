#include "job/state.h"

#include <algorithm>

namespace cohort::job {

bool isJobState(std::string_view state) {
  return std::find(kJobStates.begin(), kJobStates.end(), state) != kJobStates.end();
}

bool isFinalState(std::string_view state) {
  return state == "succeeded" || state == "failed" || state == "stopped";
}

}  // namespace cohort::job
