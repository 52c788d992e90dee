// DeepSpeed: what its launcher gives each rank, so that a script written for `deepspeed` runs
// unchanged, started either way:
//  - cohort starts every rank itself (the default): PyTorch's variables (what DeepSpeed's
//    launch.py sets: MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK), its own CROSS_RANK
//    (the node), CROSS_SIZE (the nodes) and LOCAL_SIZE (the node's ranks), and `--local_rank=N`
//    appended to the command unless the job's task_flags says no (DeepSpeed's --no_local_rank);
//  - a command that is itself `deepspeed ...` runs once per node as that node's launcher, told
//    which node it is and where rank 0 listens (`--no_ssh --node_rank --master_addr
//    --master_port`, its hostfile the job's), instead of reaching every host over ssh itself.
// Either way the job's hostfile (COHORT_HOSTFILE) is DeepSpeed's: one line per node,
// "NAME slots=N", the names unique as DeepSpeed requires (simulated nodes share one address, so
// they are named node0, node1, ...).
#include "plan/wiring.h"

namespace cohort::plan {

namespace {

// True when the command is DeepSpeed's own launcher.
bool isDeepSpeedLauncher(const std::vector<std::string>& argv) {
  if (argv.empty()) return false;
  if (argv[0].substr(argv[0].rfind('/') + 1) == "deepspeed") return true;
  return isPython(argv) && argv.size() > 2 && argv[1] == "-m" &&
         argv[2] == "deepspeed.launcher.runner";
}

std::string hostfile(const Builder& b) {
  bool unique = true;
  for (size_t i = 0; i < b.plan.nodes.size(); ++i) {
    for (size_t j = 0; j < i; ++j) unique = unique && b.plan.nodes[i].host != b.plan.nodes[j].host;
  }
  std::string text;
  for (const NodePlan& node : b.plan.nodes) {
    text += (unique ? node.host : "node" + std::to_string(node.node)) +
            " slots=" + std::to_string(node.ranks.size()) + "\n";
  }
  return text;
}

}  // namespace

void wireDeepSpeed(Builder& b) {
  const std::string path = job::Layout(b.ctx.job_dir).filesDir() + "/hostfile";
  b.plan.files.push_back({path, hostfile(b)});
  const bool local_rank_flag = spec::taskFlags(b.spec);
  const bool own_launcher = isDeepSpeedLauncher(b.spec.command);
  b.forEachRank([&](NodePlan& node, RankPlan& r) {
    setTorchRankVars(b, r);
    setEnv(r.env, "CROSS_RANK", std::to_string(r.node));
    setEnv(r.env, "CROSS_SIZE", std::to_string(b.numNodes()));
    setEnv(r.env, "LOCAL_SIZE", std::to_string(node.ranks.size()));
    setEnv(r.env, "COHORT_HOSTFILE", path);
    if (local_rank_flag && !own_launcher) {
      r.argv.push_back("--local_rank=" + std::to_string(r.local_rank));
    }
  });
  if (!own_launcher) return;
  const std::string addr = jobOr(b, "MASTER_ADDR", b.ctx.master_addr);
  const std::string port = jobOr(b, "MASTER_PORT", b.port(0));
  b.onePerNode("deepspeed", [&](NodePlan& node, RankPlan& r) {
    for (const char* key : kTorchRankVars) unsetEnv(r.env, key);
    for (const char* key : {"CROSS_RANK", "LOCAL_SIZE"}) unsetEnv(r.env, key);
    // Before the job's own arguments: a --hostfile or --master_port it names wins.
    const size_t at = r.argv[0].substr(r.argv[0].rfind('/') + 1) == "deepspeed" ? 1 : 3;
    std::vector<std::string> flags = {"--hostfile=" + path, "--no_ssh",
                                      "--node_rank=" + std::to_string(node.node),
                                      "--master_addr=" + addr, "--master_port=" + port};
    if (!local_rank_flag) flags.emplace_back("--no_local_rank");
    r.argv.insert(r.argv.begin() + static_cast<std::ptrdiff_t>(at), flags.begin(), flags.end());
  });
}

}  // namespace cohort::plan
