#include "job/debug.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>

#include "job/state.h"
#include "util/text.h"

namespace cohort::job {

std::vector<DebugTarget> debugTargets(const std::vector<Event>& events) {
  std::map<int, DebugTarget> paused;  // by rank
  int attempt = 0;
  for (const Event& e : events) {
    if (e.kind == EventKind::kState) {
      if (isFinalState(e.state)) paused.clear();
      // A restart's ranks start again: nothing of the last attempt waits any more.
      if (e.attempt && *e.attempt != attempt) {
        attempt = *e.attempt;
        paused.clear();
      }
    } else if (e.kind == EventKind::kRankExit) {
      if (e.attempt.value_or(0) == attempt) paused.erase(e.rank);
    } else if (e.kind == EventKind::kDebug && e.attempt.value_or(0) == attempt) {
      if (e.state == "running") {
        paused.erase(e.rank);
        continue;
      }
      paused[e.rank] = DebugTarget{e.name,   e.rank,  e.node.value_or(0), attempt, e.state,
                                   e.reason, e.where, e.address,          e.t};
    }
  }
  std::vector<DebugTarget> out;
  for (auto& [rank, target] : paused) out.push_back(std::move(target));
  return out;
}

std::string debugTargetsJson(const std::vector<DebugTarget>& targets) {
  nlohmann::ordered_json ranks = nlohmann::ordered_json::array();
  for (const DebugTarget& t : targets) {
    const size_t colon = t.address.rfind(':');
    const std::string host = colon == std::string::npos ? t.address : t.address.substr(0, colon);
    auto port = colon == std::string::npos ? Result<int>(0) : parseInt(t.address.substr(colon + 1));
    ranks.push_back({{"name", t.name},
                     {"rank", t.rank},
                     {"node", t.node},
                     {"attempt", t.attempt},
                     {"state", t.state},
                     {"reason", t.reason},
                     {"where", t.where},
                     {"host", host},
                     {"port", port ? *port : 0},
                     {"address", t.address},
                     {"since", isoTime(t.since)}});
  }
  nlohmann::ordered_json out = {{"ranks", std::move(ranks)}};
  return out.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace cohort::job
