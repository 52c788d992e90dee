// Typed job events and their codec. Every change in a job's life is an Event with a time: its
// state, a node's staging, a rank's exit, an output copied, what a restarted server found.
// Events cross trust boundaries (from a coordinator to the server, from the store to readers),
// so `decodeEvent` checks every field's type and size and returns an error for anything else;
// it never throws and never recurses without a bound. What is stored and served is always
// `encodeEvent` of a decoded event, never the bytes that came in. Pure, thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "util/result.h"

namespace cohort::job {

enum class EventKind {
  kSubmitted,    // the server accepted the job
  kState,        // the job's state changed: state, attempt, reason, exit_code
  kStaged,       // node, files, bytes, seconds
  kStageFailed,  // node, error
  kRankExit,     // attempt, name, role, role_rank, rank, node, code, signal, by_cohort, exit_time,
                 // memory_limit (when the kernel killed it for going over it), reason (when its
                 // node's agent stopped it on its own, not for a stop the coordinator decided)
  kOutput,       // source, target, files, bytes, error
  kReconciled,   // found: what a restarted server found
  kLimits,       // node, error: why the ranks' resource requests are not enforced there
  kDebug,        // attempt, name, rank, node, state (waiting, attached, running), reason (start,
                 // breakpoint, exception, pdb), where, address: a rank paused for a debugger,
                 // one attached to it, or the rank going on without one (docs/debugging.md)
};

// The states of a kDebug event: a rank waits for a debugger, has one attached (it may be stopped
// at a breakpoint any time), or runs without one again.
bool isDebugState(std::string_view state);

const char* eventKindName(EventKind kind);

struct Event {
  int64_t t = 0;  // unix nanos
  EventKind kind = EventKind::kState;
  std::string state;               // kState
  std::optional<int> attempt;      // kState, kRankExit
  std::optional<int> exit_code;    // kState (final)
  std::string reason;              // kState; kRankExit: who stopped it on its own, and why
  std::optional<int> node;         // kStaged, kStageFailed, kRankExit, kLimits
  std::string error;               // kStageFailed, kOutput
  std::string warning;             // kLimits: what the job goes without, and why
  int64_t files = 0;               // kStaged, kOutput
  int64_t bytes = 0;               // kStaged, kOutput
  double seconds = 0;              // kStaged
  std::string name;                // kRankExit: "worker/3"; kSubmitted: the job's name
  std::string role;                // kRankExit
  int role_rank = 0;               // kRankExit
  int rank = 0;                    // kRankExit
  int code = 0;                    // kRankExit
  int signal = 0;                  // kRankExit
  bool by_cohort = false;          // kRankExit: cohort signalled the rank first
  int64_t exit_time = 0;           // kRankExit, unix nanos
  int64_t memory_limit = 0;        // kRankExit: > 0 when it went over it (memory.max) and died
  std::string source, target;      // kOutput
  std::string found;               // kReconciled
  std::string where;               // kDebug: "train.py:42", or the exception
  std::string address;             // kDebug: HOST:PORT a debugger attaches to (or dials)
};

// Limits on a decoded event: a line, and each string in it.
inline constexpr size_t kMaxEventBytes = 64 * 1024;
inline constexpr size_t kMaxEventString = 16 * 1024;

// One line of JSON (no newline) with "time" (ISO 8601), "t" and "event" first.
std::string encodeEvent(const Event& event);

// Errors: kInvalidArgument naming what is wrong ("event: 't' must be an integer"), for a line
// that is not one JSON object, too long, of an unknown kind, or with a field of the wrong type
// or size. Fields that do not belong to the kind are ignored.
Result<Event> decodeEvent(std::string_view line);

// Shorthands for the events cohort writes most.
Event stateEvent(int64_t t, std::string state, std::string reason = {});

}  // namespace cohort::job

namespace cohort::job {

// What a coordinator leaves when a job ends (its result.json): read back by the server.
struct JobResult {
  std::string state;  // a final state
  int exit_code = 1;
  std::string reason;
  int attempts = 0;
  std::string root_cause_json;  // a JSON object, re-encoded; "" when none
};

// Errors: kInvalidArgument naming the field, for text that is not such a record, over 1 MiB, or
// nested deeper than a root cause is. Never throws.
Result<JobResult> decodeResult(std::string_view text);

}  // namespace cohort::job
