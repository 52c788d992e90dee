#include "job/state.h"

#include "job/lifecycle.h"

namespace cohort::job {

const std::vector<std::string> kJobStates = [] {
  std::vector<std::string> names;
  for (JobState s : kAllJobStates) names.emplace_back(stateName(s));
  return names;
}();

bool isJobState(std::string_view state) { return parseJobState(state).has_value(); }

bool isFinalState(std::string_view state) {
  auto s = parseJobState(state);
  return s && isFinal(*s);
}

}  // namespace cohort::job
