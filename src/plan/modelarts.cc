// Compatibility with the managed training service (ModelArts on Volcano): the MA_* variables,
// Volcano's env/svc plugin variables (VC_TASK_INDEX, VC_<ROLE>_HOSTS, ...) and its <role>.host
// files, so start scripts written for the service run unchanged. Volcano writes the host files
// to /etc/volcano/; cohort writes them to <job dir>/volcano/ and names that directory in
// COHORT_VOLCANO_DIR.
#include <map>

#include "plan/wiring.h"
#include "util/text.h"

namespace cohort::plan {

namespace {

// Volcano's spelling of a task name in a variable: upper case, '-' becomes '_'.
std::string varName(const std::string& role) {
  std::string out;
  for (char c : role) out += c == '-' ? '_' : static_cast<char>(std::toupper(c));
  return out;
}

}  // namespace

void wireModelArts(Builder& b) {
  std::map<std::string, std::vector<std::string>> role_hosts;  // role -> host of each node
  for (const NodePlan& node : b.plan.nodes) {
    role_hosts[node.ranks.front().role].push_back(node.host);
  }
  const std::string dir = job::Layout(b.ctx.job_dir).filesDir() + "/volcano";
  for (const auto& [role, hosts] : role_hosts) {
    b.plan.files.push_back({dir + "/" + role + ".host", join(hosts, "\n") + "\n"});
  }
  // Accelerators per node. Without any it is 1, so that a start script's
  // `torchrun --nproc_per_node=$MA_NUM_GPUS` still starts a process; set MA_NUM_GPUS in the job's
  // env to choose another number (variables the user sets always win).
  const int gpus_per_node =
      b.ctx.gpus.empty() ? 1
                         : std::max<int>(1, static_cast<int>(b.ctx.gpus.size()) /
                                                (b.ctx.nodes_share_machine ? b.numNodes() : 1));
  b.forEachRank([&](NodePlan& node, RankPlan& r) {
    int procs_per_node = static_cast<int>(node.ranks.size());
    int task_index = r.role_rank / std::max(procs_per_node, 1);
    KeyValues env;
    setEnv(env, "MA_NUM_HOSTS", std::to_string(b.numNodes()));
    setEnv(env, "MA_NUM_GPUS", std::to_string(gpus_per_node));
    setEnv(env, "MA_TASK_NAME", r.role);
    setEnv(env, "MA_CURRENT_IP", node.host);
    setEnv(env, "MA_CURRENT_HOST_IP", node.host);
    setEnv(env, "MA_VJ_NAME", b.plan.job_id);
    setEnv(env, "MA_CURRENT_INSTANCE_NAME", b.plan.job_id + "-" + r.role + "-" +
                                                std::to_string(task_index));
    setEnv(env, "MA_LOG_DIR", job::Layout(b.ctx.job_dir).logsDir());
    setEnv(env, "VC_TASK_INDEX", std::to_string(task_index));
    setEnv(env, "VK_TASK_INDEX", std::to_string(task_index));
    for (const auto& [role, hosts] : role_hosts) {
      setEnv(env, "VC_" + varName(role) + "_HOSTS", join(hosts, ","));
      setEnv(env, "VC_" + varName(role) + "_NUM", std::to_string(hosts.size()));
    }
    setEnv(env, "COHORT_VOLCANO_DIR", dir);
    for (const auto& [key, value] : env) {
      if (!hasEnv(b.spec.env, key)) setEnv(r.env, key, value);
    }
  });
}

}  // namespace cohort::plan
