// TensorFlow: TF_CONFIG for every task (chief, worker, ps, evaluator), each task listening on a
// port of its own, and --task_name/--task_index appended as the managed service does when the
// job wants them (spec::taskFlags: by default a ps/worker job under compat modelarts).
#include <nlohmann/json.hpp>

#include "plan/wiring.h"

namespace cohort::plan {

void wireTensorFlow(Builder& b) {
  nlohmann::ordered_json cluster = nlohmann::ordered_json::object();
  for (const char* type : {"chief", "worker", "ps"}) {
    b.forEachRank([&](NodePlan& node, RankPlan& r) {
      if (r.role != type) return;
      cluster[type].push_back(node.host + ":" + b.port(1 + static_cast<size_t>(r.rank)));
    });
  }
  const bool task_flags = spec::taskFlags(b.spec);
  b.forEachRank([&](NodePlan&, RankPlan& r) {
    nlohmann::ordered_json config = {
        {"cluster", cluster}, {"task", {{"type", r.role}, {"index", r.role_rank}}}};
    setEnv(r.env, "TF_CONFIG", config.dump());
    if (!task_flags) return;
    r.argv.push_back("--task_name=" + r.role);
    r.argv.push_back("--task_index=" + std::to_string(r.role_rank));
  });
}

}  // namespace cohort::plan
