#include <algorithm>

#include <nlohmann/json.hpp>

#include "plan/plan.h"
#include "util/text.h"

namespace cohort::plan {

namespace {

void set(KeyValues& env, const std::string& key, const std::string& value) {
  for (auto& kv : env) {
    if (kv.first == key) {
      kv.second = value;
      return;
    }
  }
  env.emplace_back(key, value);
}

bool has(const KeyValues& env, const std::string& key) {
  for (const auto& kv : env) {
    if (kv.first == key) return true;
  }
  return false;
}

// The variables torchrun gives each worker, so torchrun scripts run unchanged.
void addPyTorch(KeyValues& env, const RankPlan& r, const Plan& plan, int num_nodes,
                const std::string& addr, const std::string& port, int local_world) {
  set(env, "MASTER_ADDR", addr);
  set(env, "MASTER_PORT", port);
  set(env, "RANK", std::to_string(r.rank));
  set(env, "WORLD_SIZE", std::to_string(plan.world_size));
  set(env, "LOCAL_RANK", std::to_string(r.local_rank));
  set(env, "LOCAL_WORLD_SIZE", std::to_string(local_world));
  set(env, "GROUP_RANK", std::to_string(r.node));
  set(env, "GROUP_WORLD_SIZE", std::to_string(num_nodes));
  set(env, "ROLE_NAME", r.role);
  set(env, "ROLE_RANK", std::to_string(r.role_rank));
  set(env, "ROLE_WORLD_SIZE", std::to_string(r.role_world_size));
  set(env, "TORCHELASTIC_RESTART_COUNT", "0");
  set(env, "TORCHELASTIC_MAX_RESTARTS", std::to_string(plan.max_restarts));
  set(env, "TORCHELASTIC_RUN_ID", plan.job_id);
}

std::string rankTable(const Plan& plan) {
  nlohmann::ordered_json ranks = nlohmann::ordered_json::array();
  for (const NodePlan& node : plan.nodes) {
    for (const RankPlan& r : node.ranks) {
      ranks.push_back(nlohmann::ordered_json{{"rank", r.rank},
                       {"role", r.role},
                       {"role_rank", r.role_rank},
                       {"node", r.node},
                       {"host", node.host},
                       {"local_rank", r.local_rank}});
    }
  }
  nlohmann::ordered_json table = {{"version", 1},
                          {"job_id", plan.job_id},
                          {"world_size", plan.world_size},
                          {"num_nodes", plan.nodes.size()},
                          {"ranks", ranks}};
  return table.dump(2) + "\n";
}

}  // namespace

Result<Plan> makePlan(const spec::JobSpec& spec, const PlanContext& ctx) {
  COHORT_TRY(spec::validate(spec));
  Plan plan;
  plan.job_id = ctx.job_id;
  plan.job_name = spec.name;
  plan.job_dir = ctx.job_dir;
  plan.workdir = ctx.workdir;
  plan.framework = spec::frameworkName(spec.framework);
  plan.world_size = spec::totalProcs(spec);
  plan.max_restarts = spec.policy.max_restarts;
  plan.grace_period_ms = spec.policy.grace_period.count();
  plan.max_runtime_ms = spec.policy.max_runtime ? spec.policy.max_runtime->count() : 0;

  const int num_nodes = spec::totalNodes(spec);
  const std::vector<std::string> key_roles = spec::keyRoles(spec);
  // A dry plan (`cohort plan`) has no port yet: one is leased when the job starts.
  const std::string port = ctx.master_port ? std::to_string(ctx.master_port) : "auto";
  const std::string rank_table_path = ctx.job_dir + "/rank_table.json";
  std::vector<std::string> hosts;
  for (int n = 0; n < num_nodes; ++n) {
    hosts.push_back(n < static_cast<int>(ctx.hosts.size()) ? ctx.hosts[n] : ctx.master_addr);
  }

  std::vector<std::string> argv = spec.command;
  for (const auto& [key, value] : spec.hyperparameters) argv.push_back("--" + key + "=" + value);

  int node_index = 0;
  int rank = 0;
  for (const spec::Role& role : spec.roles) {
    const int role_world = role.nodes * role.procs_per_node;
    const bool key =
        std::find(key_roles.begin(), key_roles.end(), role.name) != key_roles.end();
    for (int n = 0; n < role.nodes; ++n, ++node_index) {
      NodePlan node{node_index, hosts[node_index], {}};
      for (int local = 0; local < role.procs_per_node; ++local, ++rank) {
        RankPlan r;
        r.role = role.name;
        r.role_rank = n * role.procs_per_node + local;
        r.role_world_size = role_world;
        r.rank = rank;
        r.local_rank = local;
        r.node = node_index;
        r.argv = argv;
        r.key = key;
        r.console = ctx.console_ranks.empty() || ctx.console_ranks.count(rank) > 0;
        r.log_file = ctx.job_dir + "/logs/" + role.name + "-" + std::to_string(r.role_rank) + ".log";

        KeyValues& env = r.env;
        for (const auto& kv : spec.env) set(env, kv.first, kv.second);
        if (role.procs_per_node > 1 && !has(spec.env, "OMP_NUM_THREADS")) {
          set(env, "OMP_NUM_THREADS", "1");  // as torchrun does, so N ranks do not fight
        }
        set(env, "COHORT_JOB_ID", plan.job_id);
        set(env, "COHORT_JOB_NAME", plan.job_name);
        set(env, "COHORT_ROLE", role.name);
        set(env, "COHORT_ROLE_RANK", std::to_string(r.role_rank));
        set(env, "COHORT_ROLE_WORLD_SIZE", std::to_string(role_world));
        set(env, "COHORT_RANK", std::to_string(rank));
        set(env, "COHORT_WORLD_SIZE", std::to_string(plan.world_size));
        set(env, "COHORT_LOCAL_RANK", std::to_string(local));
        set(env, "COHORT_LOCAL_WORLD_SIZE", std::to_string(role.procs_per_node));
        set(env, "COHORT_NODE_RANK", std::to_string(node_index));
        set(env, "COHORT_NUM_NODES", std::to_string(num_nodes));
        set(env, "COHORT_MASTER_ADDR", ctx.master_addr);
        set(env, "COHORT_MASTER_PORT", port);
        set(env, "COHORT_HOSTS", join(hosts, ","));
        set(env, "COHORT_RANK_TABLE_FILE", rank_table_path);
        set(env, "COHORT_OUTPUT_DIR", ctx.job_dir + "/output");
        set(env, "COHORT_LOG_DIR", ctx.job_dir + "/logs");
        set(env, "COHORT_RESTART_COUNT", "0");
        if (spec.framework == spec::Framework::kPyTorch) {
          addPyTorch(env, r, plan, num_nodes, ctx.master_addr, port, role.procs_per_node);
        }
        node.ranks.push_back(std::move(r));
      }
      plan.nodes.push_back(std::move(node));
    }
  }
  plan.files.push_back({rank_table_path, rankTable(plan)});
  return plan;
}

}  // namespace cohort::plan
