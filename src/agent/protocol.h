// Protocol: the control channel's messages as types, and their one codec, shared by both ends
// (the coordinator and the node agents; docs/architecture.md, "The protocol"). Each message is a
// struct; what goes one way is a variant of them. The codec is the only place that knows a
// message's field names: encode() makes the JSON object the channel sends (agent/channel.h),
// and decode() checks every field's type and size and returns an error naming the message and
// the field for anything else. Messages cross a trust boundary (the first ones before the sender
// proved the job's secret), so decode never throws and never recurses without a bound; strings
// that come from ranks (their last lines, their stacks) are capped. Log frames are not messages:
// the channel carries them raw. Pure, thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "agent/channel.h"
#include "plan/plan.h"
#include "util/result.h"

namespace cohort::agent::protocol {

// ---- Both ways ---------------------------------------------------------------------------------

struct Heartbeat {};

// ---- Agent to coordinator ----------------------------------------------------------------------

// First message: which node, a fresh nonce for the coordinator to prove itself on, the agent's
// pid, and where its node's ranks are reached (believed only once the agent proved the secret).
struct Hello {
  int node = -1;
  std::string nonce;
  int pid = -1;
  std::string host, interface, hostname;
};
struct Auth {
  std::string proof;
};
struct Staged {
  int64_t files = 0, bytes = 0;
  double seconds = 0;
  bool own_dir = false;  // the node's job directory is its own (no shared filesystem)
};
struct StageFailed {
  std::string error;
};
struct Started {
  int attempt = 0;
  int count = 0;
  int64_t time = 0;  // unix nanos, the agent's clock
};
struct Exited {
  int attempt = 0;
  int rank = -1;  // global
  int code = 0;
  int signal = 0;
  bool by_cohort = false;  // cohort signalled it first
  // Who: "coordinator" (a stop it sent), "agent" (its agent on its own, why in stop_reason), ""
  std::string stopped_by;
  std::string stop_reason;
  int64_t time = 0;
  std::vector<std::string> tail;
  std::string error;          // it could not be started: why
  int64_t memory_limit = 0;   // > 0: the kernel killed it for going over it
};
struct Idle {
  int attempt = 0;
  int64_t time = 0;
};
struct RankProgress {
  int64_t index = -1;  // in the node's plan
  bool running = false;
  int64_t last_output = 0, last_heartbeat = 0;  // unix nanos; 0: none yet
  std::optional<double> cpu_seconds;
  int64_t rss_bytes = 0;
  std::optional<double> gpu_util;
  int64_t gpu_memory_bytes = 0;
};
struct Progress {
  int attempt = 0;
  int64_t time = 0;
  std::vector<RankProgress> ranks;
};
struct Signalled {
  int signal = 0;
};
struct Limits {
  std::string why;
};
struct Debug {
  int attempt = 0;
  int64_t index = -1;
  std::string state, reason, where;
  int64_t time = 0;
};
struct RankStack {
  int64_t index = -1;
  std::string state;  // one letter of /proc/<pid>/stat
  std::string stack;  // py-spy's dump, or "" with `error`
  std::string error;
};
struct Stacks {
  int attempt = 0;
  std::vector<RankStack> ranks;
};
struct OutputCopied {
  int64_t files = 0, bytes = 0;
  std::string error;  // "" when copied
};
struct OutputsCopied {
  std::vector<OutputCopied> results;
};

using ToCoordinator = std::variant<Hello, Auth, Staged, StageFailed, Started, Exited, Idle,
                                   Progress, Signalled, Limits, Debug, Stacks, OutputsCopied,
                                   Heartbeat>;

// ---- Coordinator to agent ----------------------------------------------------------------------

struct Challenge {
  std::string nonce, proof;
  int pid = -1;  // the coordinator's: an agent it started knows it as its parent
};
// The node's part of the plan. The coordinator encodes it once per node as text (its plan is
// large): see encodePlan.
struct PlanMessage {
  plan::NodePlan node;
  std::string workdir, job_dir, mark;
  int64_t heartbeat_ms = 1000, heartbeat_timeout_ms = 30000;
  int stop_signal = 15;
  int64_t grace_ms = 3000;
};
struct Stage {};
struct Files {
  std::vector<plan::GeneratedFile> files;
};
struct Start {
  int attempt = 0;
};
struct Stop {
  int64_t grace_ms = 30000;
  int signal = 15;
  std::optional<int> exit;  // the job's end: leave with this code once the ranks are gone
};
struct StacksRequest {};
struct Exit {
  int code = 0;
  std::vector<plan::OutputPlan> outputs;  // to copy from the node's own job directory first
};

using ToAgent = std::variant<Challenge, PlanMessage, Stage, Files, Start, Stop, StacksRequest,
                             Exit, Heartbeat>;

// ---- The codec ---------------------------------------------------------------------------------

Message encode(const ToCoordinator& message);
Message encode(const ToAgent& message);
Message encode(const Heartbeat& message);  // either way
// A plan message as one line of JSON without its newline (Channel::sendEncoded): the node's plan
// goes in as the text plan::nodeToJson made, not parsed and printed again.
std::string encodePlan(const PlanMessage& head_without_node, const std::string& node_json);

// Errors: kInvalidArgument naming the message and the field ("exited: 'code' must be an
// integer"), for an object that is not a message of that direction, a field of the wrong type,
// or a string or list over its limit. Fields a message does not know are ignored.
Result<ToCoordinator> decodeToCoordinator(const Message& message);
Result<ToAgent> decodeToAgent(const Message& message);

// What a message is called on the wire ("exited"), for errors and logs.
const char* typeName(const ToCoordinator& message);
const char* typeName(const ToAgent& message);

}  // namespace cohort::agent::protocol
