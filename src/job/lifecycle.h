// The job lifecycle of `cohort server`: the one typed list of the states a job goes through,
// and one pure function that says what each thing that happens to a job does in each state
// (Volcano's job controller keeps one small rule set per phase; this is the same table, in one
// place). JobService (server/jobs.h) applies it and assigns a job's state nowhere else; the
// store keeps the state's name; the API, the SDK and the console take their lists from
// kJobStates (state.h), which is made from this one.
//
//   queued ──started──► starting ─► staging ─► running ─► (restarting ─► running)...
//     │                    │  reported by the coordinator, in any order   │
//     │ stop asked         └──────────── stop asked ───► stopping ◄───────┘
//     ▼                                                     │
//   stopped ◄──────────── result: succeeded | failed | stopped ◄── coordinator gone (lost)
//
// Pure, thread-safe.
#pragma once

#include <optional>
#include <string_view>

namespace cohort::job {

enum class JobState {
  kQueued,      // waiting for the scheduler
  kStarting,    // placed: its coordinator is being started
  kStaging,     // its nodes copy its inputs
  kRunning,     // its ranks run (an attempt)
  kRestarting,  // an attempt failed and the gang starts again (policy.max_restarts)
  kStopping,    // a stop was asked for: its ranks are being stopped
  kSucceeded,   // final: every key rank exited 0
  kFailed,      // final
  kStopped,     // final: stopped on request
};

// Every state, in the order a job goes through them; the last three are final.
inline constexpr JobState kAllJobStates[] = {
    JobState::kQueued,   JobState::kStarting,  JobState::kStaging,
    JobState::kRunning,  JobState::kRestarting, JobState::kStopping,
    JobState::kSucceeded, JobState::kFailed,   JobState::kStopped};

std::string_view stateName(JobState state);  // "queued", ...
std::optional<JobState> parseJobState(std::string_view name);
bool isFinal(JobState state);

// What happens to a job, as the job service sees it.
enum class JobInput {
  kStarted,          // the scheduler placed it and it is handed to its backend
  kStartFailed,      // it could not be started (its backend refused it, its data is gone)
  kStopAsked,        // someone asked it to stop
  kReported,         // its coordinator says it is in `reported` (an event, or its result)
  kCoordinatorGone,  // its coordinator ended without saying the job ended
};

// The state a job in `current` goes to on `input` (`reported` is the coordinator's word, for
// kReported); nothing when the input changes nothing in that state. The rules, each tested in
// lifecycle_test.cc:
//   1. A final state is final: nothing moves a job out of it.
//   2. queued: started -> starting; a stop -> stopped; a failed start -> failed; a
//      coordinator's word or end means nothing (it has none).
//   3. A started job's failed start -> failed.
//   4. A started job: a stop -> stopping (once).
//   5. A started job: the coordinator's word -> that state, but never back to queued, and a
//      stopping job stays stopping until the word is a final state.
//   6. A started job whose coordinator is gone -> stopped when it was stopping, else failed
//      (lost).
std::optional<JobState> nextState(JobState current, JobInput input,
                                  JobState reported = JobState::kQueued);

}  // namespace cohort::job
