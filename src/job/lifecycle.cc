#include "job/lifecycle.h"

namespace cohort::job {

std::string_view stateName(JobState state) {
  switch (state) {
    case JobState::kQueued: return "queued";
    case JobState::kStarting: return "starting";
    case JobState::kStaging: return "staging";
    case JobState::kRunning: return "running";
    case JobState::kRestarting: return "restarting";
    case JobState::kStopping: return "stopping";
    case JobState::kSucceeded: return "succeeded";
    case JobState::kFailed: return "failed";
    case JobState::kStopped: return "stopped";
  }
  return "failed";
}

std::optional<JobState> parseJobState(std::string_view name) {
  for (JobState s : kAllJobStates) {
    if (stateName(s) == name) return s;
  }
  return std::nullopt;
}

bool isFinal(JobState state) {
  return state == JobState::kSucceeded || state == JobState::kFailed ||
         state == JobState::kStopped;
}

std::optional<JobState> nextState(JobState current, JobInput input, JobState reported) {
  if (isFinal(current)) return std::nullopt;  // rule 1
  if (current == JobState::kQueued) {         // rule 2
    switch (input) {
      case JobInput::kStarted: return JobState::kStarting;
      case JobInput::kStopAsked: return JobState::kStopped;
      case JobInput::kStartFailed: return JobState::kFailed;
      case JobInput::kReported:
      case JobInput::kCoordinatorGone: return std::nullopt;
    }
    return std::nullopt;
  }
  switch (input) {
    case JobInput::kStarted:
      return std::nullopt;
    case JobInput::kStartFailed:  // rule 3
      return JobState::kFailed;
    case JobInput::kStopAsked:  // rule 4
      if (current == JobState::kStopping) return std::nullopt;
      return JobState::kStopping;
    case JobInput::kReported:  // rule 5
      if (reported == JobState::kQueued || reported == current) return std::nullopt;
      if (current == JobState::kStopping && !isFinal(reported)) return std::nullopt;
      return reported;
    case JobInput::kCoordinatorGone:  // rule 6
      return current == JobState::kStopping ? JobState::kStopped : JobState::kFailed;
  }
  return std::nullopt;
}

}  // namespace cohort::job
