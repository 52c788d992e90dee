// MindSpore: dynamic cluster (a scheduler process, added here, plus workers, all running the
// same script) or an HCCL rank table (Ascend), in the 1.0 layout or the older 0.1 one.
#include <nlohmann/json.hpp>

#include "plan/wiring.h"

namespace cohort::plan {

namespace {

using Json = nlohmann::ordered_json;

std::string deviceIp(const Builder& b, const NodePlan& node, int device) {
  if (device < static_cast<int>(b.ctx.device_ips.size())) return b.ctx.device_ips[device];
  return node.host;  // no Ascend NIC known (no /etc/hccn.conf): the node's own address
}

std::string rankTable(const Builder& b) {
  Json out;
  if (b.spec.rank_table_version == "0.1") {
    Json instances = Json::array();
    for (const NodePlan& node : b.plan.nodes) {
      Json devices = Json::array();
      for (const RankPlan& r : node.ranks) {
        devices.push_back({{"device_id", std::to_string(r.local_rank)},
                           {"device_ip", deviceIp(b, node, r.local_rank)}});
      }
      instances.push_back({{"pod_name", b.plan.job_name + "-worker-" + std::to_string(node.node)},
                           {"server_id", node.host},
                           {"devices", devices}});
    }
    out = {{"status", "completed"},
           {"group_count", "1"},
           {"group_list",
            Json::array({{{"group_name", b.plan.job_name},
                          {"device_count", std::to_string(b.plan.world_size)},
                          {"instance_count", std::to_string(b.plan.nodes.size())},
                          {"instance_list", instances}}})}};
  } else {
    Json servers = Json::array();
    for (const NodePlan& node : b.plan.nodes) {
      Json devices = Json::array();
      for (const RankPlan& r : node.ranks) {
        devices.push_back({{"device_id", std::to_string(r.local_rank)},
                           {"device_ip", deviceIp(b, node, r.local_rank)},
                           {"rank_id", std::to_string(r.rank)}});
      }
      servers.push_back(
          {{"server_id", node.host}, {"device", devices}, {"host_nic_ip", "reserve"}});
    }
    out = {{"version", "1.0"},
           {"server_count", std::to_string(b.plan.nodes.size())},
           {"server_list", servers},
           {"status", "completed"}};
  }
  return out.dump(4) + "\n";
}

}  // namespace

void wireMindSpore(Builder& b) {
  if (b.spec.mindspore_mode == spec::MindSporeMode::kRankTable) {
    const std::string path = job::Layout(b.ctx.job_dir).filesDir() + "/hccl_rank_table.json";
    b.plan.files.push_back({path, rankTable(b)});
    b.forEachRank([&](NodePlan&, RankPlan& r) {
      setEnv(r.env, "RANK_TABLE_FILE", path);
      setEnv(r.env, "RANK_ID", std::to_string(r.rank));
      setEnv(r.env, "RANK_SIZE", std::to_string(b.plan.world_size));
      setEnv(r.env, "DEVICE_ID", std::to_string(r.local_rank));
      setEnv(r.env, "ASCEND_DEVICE_ID", std::to_string(r.local_rank));
    });
    return;
  }
  auto common = [&](RankPlan& r, const char* role) {
    setEnv(r.env, "MS_ROLE", role);
    setEnv(r.env, "MS_SCHED_HOST", b.ctx.master_addr);
    setEnv(r.env, "MS_SCHED_PORT", b.port(0));
    setEnv(r.env, "MS_WORKER_NUM", std::to_string(b.plan.world_size));
  };
  b.forEachRank([&](NodePlan&, RankPlan& r) {
    common(r, "MS_WORKER");
    setEnv(r.env, "MS_NODE_ID", std::to_string(r.rank));
  });
  // The scheduler: the same script on the first node, not part of the training world, and not a
  // key role (it ends when the workers have).
  NodePlan& first = b.plan.nodes.front();
  RankPlan sched = first.ranks.front();
  sched.name = "scheduler/0";
  sched.role = "scheduler";
  sched.role_rank = 0;
  sched.role_world_size = 1;
  sched.rank = b.plan.world_size;
  sched.local_rank = static_cast<int>(first.ranks.size());
  sched.key = false;
  sched.log_file = job::Layout(b.ctx.job_dir).logFile("scheduler-0");
  for (const char* key : {"COHORT_RANK", "COHORT_LOCAL_RANK", "COHORT_ROLE_RANK", "MS_NODE_ID",
                          "CUDA_VISIBLE_DEVICES"}) {
    unsetEnv(sched.env, key);
  }
  setEnv(sched.env, "COHORT_ROLE", "scheduler");
  setEnv(sched.env, "COHORT_HEARTBEAT_FILE",
         job::Layout(b.ctx.job_dir).heartbeatFile(first.node, sched.rank));
  common(sched, "MS_SCHED");
  first.ranks.push_back(std::move(sched));
}

}  // namespace cohort::plan
