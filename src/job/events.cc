#include "job/events.h"

#include <cmath>
#include <limits>

#include <nlohmann/json.hpp>

#include "job/state.h"
#include "util/json_limits.h"
#include "util/json_reader.h"
#include "util/text.h"

namespace cohort::job {

namespace {

using Json = nlohmann::ordered_json;

struct KindName {
  EventKind kind;
  const char* name;
};
constexpr KindName kKinds[] = {
    {EventKind::kSubmitted, "submitted"},   {EventKind::kState, "state"},
    {EventKind::kStaged, "staged"},         {EventKind::kStageFailed, "stage_failed"},
    {EventKind::kRankExit, "rank_exit"},    {EventKind::kOutput, "output"},
    {EventKind::kReconciled, "reconciled"}, {EventKind::kLimits, "limits"},
    {EventKind::kDebug, "debug"},
};

using Reader = JsonReader<Json>;

}  // namespace

bool isDebugState(std::string_view state) {
  return state == "waiting" || state == "attached" || state == "running";
}

const char* eventKindName(EventKind kind) {
  for (const KindName& k : kKinds) {
    if (k.kind == kind) return k.name;
  }
  return "state";
}

Event stateEvent(int64_t t, std::string state, std::string reason) {
  Event e;
  e.t = t;
  e.kind = EventKind::kState;
  e.state = std::move(state);
  e.reason = std::move(reason);
  return e;
}

std::string encodeEvent(const Event& e) {
  Json j = {{"time", isoTime(e.t)}, {"t", e.t}, {"event", eventKindName(e.kind)}};
  switch (e.kind) {
    case EventKind::kSubmitted:
      j["name"] = e.name;
      break;
    case EventKind::kState:
      j["state"] = e.state;
      if (e.attempt) j["attempt"] = *e.attempt;
      if (e.exit_code) j["exit_code"] = *e.exit_code;
      if (!e.reason.empty()) j["reason"] = e.reason;
      break;
    case EventKind::kStaged:
      j["node"] = e.node.value_or(0);
      j["seconds"] = e.seconds;
      j["files"] = e.files;
      j["bytes"] = e.bytes;
      break;
    case EventKind::kStageFailed:
      j["node"] = e.node.value_or(0);
      j["error"] = e.error;
      break;
    case EventKind::kLimits:
      j["node"] = e.node.value_or(0);
      j["warning"] = e.warning;
      break;
    case EventKind::kRankExit:
      j["attempt"] = e.attempt.value_or(0);
      j["name"] = e.name;
      j["role"] = e.role;
      j["role_rank"] = e.role_rank;
      j["rank"] = e.rank;
      j["node"] = e.node.value_or(0);
      j["code"] = e.code;
      j["signal"] = e.signal;
      j["by_cohort"] = e.by_cohort;
      j["exit_time"] = isoTime(e.exit_time);
      j["exit_t"] = e.exit_time;
      if (e.memory_limit > 0) j["memory_limit"] = e.memory_limit;
      if (!e.reason.empty()) j["reason"] = e.reason;
      break;
    case EventKind::kOutput: {
      Json out = {{"source", e.source}, {"target", e.target}};
      if (e.error.empty()) {
        out["files"] = e.files;
        out["bytes"] = e.bytes;
      } else {
        out["error"] = e.error;
      }
      j["output"] = std::move(out);
      break;
    }
    case EventKind::kReconciled:
      j["found"] = e.found;
      break;
    case EventKind::kDebug:
      j["attempt"] = e.attempt.value_or(0);
      j["name"] = e.name;
      j["rank"] = e.rank;
      j["node"] = e.node.value_or(0);
      j["state"] = e.state;
      j["reason"] = e.reason;
      if (!e.where.empty()) j["where"] = e.where;
      j["address"] = e.address;
      break;
  }
  // Strings come from users and ranks: never let bad UTF-8 make dump() throw.
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

Result<Event> decodeEvent(std::string_view line) {
  auto bad = [](const std::string& why) { return fail(Code::kInvalidArgument, "event: " + why); };
  if (line.size() > kMaxEventBytes) {
    return bad("longer than " + std::to_string(kMaxEventBytes) + " bytes");
  }
  // An event nests two levels at most (the output record); refuse deeper text unparsed.
  if (!checkJsonDepth(line, 3)) return bad("nested too deep");
  Json j = Json::parse(line.begin(), line.end(), nullptr, false);
  if (j.is_discarded()) return bad("not JSON");
  if (!j.is_object()) return bad("not a JSON object");
  Event e;
  Reader r(j, kMaxEventString);
  std::string kind;
  r.integer("t", e.t, true);
  r.text("event", kind, true);
  if (!r.error().empty()) return bad(r.error());
  bool known = false;
  for (const KindName& k : kKinds) {
    if (kind == k.name) {
      e.kind = k.kind;
      known = true;
    }
  }
  if (!known) return bad("unknown kind '" + kind.substr(0, 64) + "'");
  switch (e.kind) {
    case EventKind::kSubmitted:
      r.text("name", e.name);
      break;
    case EventKind::kState:
      r.text("state", e.state, true);
      r.optionalInt("attempt", e.attempt);
      r.optionalInt("exit_code", e.exit_code);
      r.text("reason", e.reason);
      if (r.error().empty() && !isJobState(e.state)) {
        return bad("unknown state '" + e.state.substr(0, 64) + "'");
      }
      break;
    case EventKind::kStaged:
      r.optionalInt("node", e.node);
      r.number("seconds", e.seconds);
      r.integer("files", e.files);
      r.integer("bytes", e.bytes);
      break;
    case EventKind::kStageFailed:
      r.optionalInt("node", e.node);
      r.text("error", e.error);
      break;
    case EventKind::kLimits:
      r.optionalInt("node", e.node);
      r.text("warning", e.warning);
      if (e.warning.empty()) r.text("error", e.warning);  // a record from before it was a warning
      break;
    case EventKind::kRankExit:
      r.optionalInt("attempt", e.attempt);
      r.text("name", e.name);
      r.text("role", e.role);
      r.integer("role_rank", e.role_rank);
      r.integer("rank", e.rank);
      r.optionalInt("node", e.node);
      r.integer("code", e.code);
      r.integer("signal", e.signal);
      r.boolean("by_cohort", e.by_cohort);
      r.integer("exit_t", e.exit_time);
      r.integer("memory_limit", e.memory_limit);
      r.text("reason", e.reason);
      break;
    case EventKind::kOutput: {
      auto it = j.find("output");
      if (it == j.end() || !it->is_object()) return bad("'output' must be an object");
      Reader o(*it, kMaxEventString);
      o.text("source", e.source);
      o.text("target", e.target);
      o.integer("files", e.files);
      o.integer("bytes", e.bytes);
      o.text("error", e.error);
      if (!o.error().empty()) return bad("output: " + o.error());
      break;
    }
    case EventKind::kReconciled:
      r.text("found", e.found);
      break;
    case EventKind::kDebug:
      r.optionalInt("attempt", e.attempt);
      r.text("name", e.name);
      r.integer("rank", e.rank);
      r.optionalInt("node", e.node);
      r.text("state", e.state, true);
      r.text("reason", e.reason);
      r.text("where", e.where);
      r.text("address", e.address);
      if (r.error().empty() && !isDebugState(e.state)) {
        return bad("unknown debug state '" + e.state.substr(0, 64) + "'");
      }
      break;
  }
  if (!r.error().empty()) return bad(r.error());
  return e;
}

}  // namespace cohort::job

namespace cohort::job {

Result<JobResult> decodeResult(std::string_view text) {
  auto bad = [](const std::string& why) { return fail(Code::kInvalidArgument, "result: " + why); };
  if (text.size() > (1 << 20)) return bad("larger than 1 MiB");
  if (!checkJsonDepth(text, 4)) return bad("nested too deep");
  Json j = Json::parse(text.begin(), text.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) return bad("not a JSON object");
  JobResult out;
  Reader r(j, kMaxEventString);
  r.text("state", out.state, true);
  r.integer("exit_code", out.exit_code);
  r.text("reason", out.reason);
  r.integer("attempts", out.attempts);
  if (!r.error().empty()) return bad(r.error());
  if (!isFinalState(out.state)) return bad("'state' must be a final state, got '" +
                                           out.state.substr(0, 64) + "'");
  if (auto rc = j.find("root_cause"); rc != j.end() && !rc->is_null()) {
    if (!rc->is_object()) return bad("'root_cause' must be an object");
    out.root_cause_json = rc->dump(-1, ' ', false, Json::error_handler_t::replace);
  }
  return out;
}

}  // namespace cohort::job
