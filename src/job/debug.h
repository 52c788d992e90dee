// Debug targets: which ranks of a job wait for a debugger, or have one attached, now, as its
// events say (kDebug, docs/debugging.md). The one reading of those events that `cohort debug`
// (from a local job's events.jsonl) and the server (GET /v1/jobs/{id}/debug, from its store)
// share. Pure, thread-safe.
#pragma once

#include <string>
#include <vector>

#include "job/events.h"

namespace cohort::job {

struct DebugTarget {
  std::string name;  // "worker/1"
  int rank = 0;      // global
  int node = 0;
  int attempt = 0;
  std::string state;    // waiting | attached
  std::string reason;   // start | breakpoint | exception | pdb
  std::string where;    // "train.py:42", an exception; may be empty
  std::string address;  // HOST:PORT to attach to (or the IDE's a rank dials)
  int64_t since = 0;    // unix nanos of the event that put it in this state
};

// The ranks of the job's latest attempt whose last kDebug event says waiting or attached, and
// that have not exited since, by rank; none once the job has a final state. `events` in the order
// they were recorded.
std::vector<DebugTarget> debugTargets(const std::vector<Event>& events);

// {"ranks": [{name, rank, node, attempt, state, reason, where, host, port, address, since}]}
// as one line of JSON: what `cohort debug --json` prints and the server serves.
std::string debugTargetsJson(const std::vector<DebugTarget>& targets);

}  // namespace cohort::job
