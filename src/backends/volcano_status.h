// What a cohort job's Volcano Job is doing, in cohort's words, from the objects the API server
// has: the Job (batch.volcano.sh/v1alpha1, its status.state), its PodGroup
// (scheduling.volcano.sh, whose Unschedulable condition says why a gang waits) and its pods
// (their PodScheduled condition, their containers' waiting and terminated states). This is what
// `cohort run --backend volcano` prints while the gang waits and how it learns the job's end, and
// how `cohort server --backend volcano` tells whether a job still runs. The objects come from the
// API server and are read defensively: a field missing or of the wrong type is a field not set.
// Pure functions, no I/O; thread-safe.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace cohort::backends {

// The value at `path` (object keys) in an object that came from the API server, or null: never
// throws, whatever the types on the way.
const nlohmann::json& jsonAt(const nlohmann::json& object, std::initializer_list<const char*> path);

// Volcano's Job phases after which nothing of the Job runs again.
bool volcanoPhaseFinal(const std::string& phase);

struct VolcanoView {
  std::string phase;   // the Job's status.state.phase ("" before Volcano has seen it)
  bool final = false;  // Completed, Failed, Aborted, Terminated
  // While the gang is not running: why, in cohort's words ("waiting for the gang: 2 of 5 pods
  // can be scheduled (worker-1: 0/3 nodes are unavailable: 3 Insufficient cpu)"); "" otherwise.
  std::string waiting;
  // A pod that cannot start however long one waits (an image that does not exist, a container
  // that cannot be configured): what cohort says before it ends the job; "" when none.
  std::string broken;
  // The coordinator's pod.
  std::string coordinator_uid;          // "" until Volcano made it
  bool coordinator_started = false;     // its container runs or ran: its log can be read
  std::optional<int> coordinator_exit;  // its container's exit code, once it ended
  std::string coordinator_gone;         // why it ended without one (evicted, deleted): words
  // Once it ended: its container's end in cohort's words, with what an exit code that the job's
  // coordinator never gives means ("its container ended with exit code 127 (...): the image
  // has no `cohort` on its PATH"); "" before it ended.
  std::string coordinator_end;
  int pods = 0;                         // the Job's pods that exist
};

// The view of the Job `job` (an object of the API; null when it is not there), its PodGroup
// (null when unknown) and `pods` (a PodList's "items"), whose coordinator pod is named
// `coordinator_pod`.
VolcanoView volcanoView(const nlohmann::json& job, const nlohmann::json& podgroup,
                        const nlohmann::json& pods, const std::string& coordinator_pod);

// A coordinator container's end (exit code, the kubelet's reason and message) in cohort's words,
// naming what a code that cohort's coordinator does not itself exit with means (126, 127: its
// command could not run; 137: killed, by the kernel's OOM killer or a deletion).
std::string coordinatorEndWords(int exit_code, const std::string& reason,
                                const std::string& message);

// Volcano's gang message ("3/5 tasks in gang unschedulable: pod group is not ready, 5 Pending,
// 5 minAvailable; Pending: 3 Unschedulable, 2 Schedulable") in cohort's words: "2 of 5 pods can
// be scheduled"; "" when it is not one.
std::string gangWords(const std::string& volcano_message);

}  // namespace cohort::backends
