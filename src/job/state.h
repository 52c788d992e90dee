// The one list of job states. The store, the API (its OpenAPI document), the CLI, the SDK and
// the console take theirs from here. Pure, thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace cohort::job {

// Every state a job can be in, in the order a job goes through them; the last three are final.
inline const std::vector<std::string> kJobStates = {"queued",    "starting",   "staging",
                                                    "running",   "restarting", "stopping",
                                                    "succeeded", "failed",     "stopped"};

bool isJobState(std::string_view state);
// Final states: succeeded, failed, stopped.
bool isFinalState(std::string_view state);

}  // namespace cohort::job
