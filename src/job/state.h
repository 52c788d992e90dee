// The one list of job states, by name: what the store keeps, and what the API (its OpenAPI
// document), the CLI, the SDK and the console show. Made from the lifecycle's typed list
// (lifecycle.h), which says how a job moves between them. Pure, thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace cohort::job {

// Every state a job can be in, in the order a job goes through them; the last three are final.
extern const std::vector<std::string> kJobStates;

bool isJobState(std::string_view state);
// Final states: succeeded, failed, stopped.
bool isFinalState(std::string_view state);

}  // namespace cohort::job
