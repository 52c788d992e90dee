// MPI, Horovod, DeepSpeed: a hostfile ("host slots=N") for the job, and with launcher mpirun a
// single mpirun on the first node that starts every rank itself. On Slurm that mpirun takes the
// allocation from Slurm and reaches the other nodes with srun (a step that overlaps the agents'),
// as mpirun does in any Slurm job: the hostfile's addresses are not Slurm's node names.
#include <map>

#include "plan/wiring.h"

namespace cohort::plan {

void wireMpi(Builder& b) {
  const std::string path = job::Layout(b.ctx.job_dir).filesDir() + "/hostfile";
  std::vector<std::pair<std::string, int>> slots;  // in node order, one line per host
  for (const NodePlan& node : b.plan.nodes) {
    auto it = std::find_if(slots.begin(), slots.end(),
                           [&](const auto& s) { return s.first == node.host; });
    if (it == slots.end()) {
      slots.emplace_back(node.host, static_cast<int>(node.ranks.size()));
    } else {
      it->second += static_cast<int>(node.ranks.size());
    }
  }
  std::string hostfile;
  for (const auto& [host, n] : slots) hostfile += host + " slots=" + std::to_string(n) + "\n";
  b.plan.files.push_back({path, hostfile});
  b.forEachRank([&](NodePlan&, RankPlan& r) { setEnv(r.env, "COHORT_HOSTFILE", path); });
  if (b.spec.launcher != spec::Launcher::kMpirun) return;

  RankPlan mpirun = b.plan.nodes.front().ranks.front();
  mpirun.name = "mpirun/0";
  mpirun.role_rank = 0;
  mpirun.rank = 0;
  mpirun.log_file = job::Layout(b.ctx.job_dir).logFile("mpirun-0");
  // Where nodes are simulated, mpirun's cgroup holds every rank: the job's requests together.
  std::vector<const RankPlan*> started;
  b.forEachRank([&](NodePlan&, RankPlan& r) { started.push_back(&r); });
  takeRequestsOf(mpirun, started);
  for (const char* key : {"COHORT_RANK", "COHORT_LOCAL_RANK", "COHORT_ROLE_RANK"}) {
    unsetEnv(mpirun.env, key);
  }
  const std::string np = std::to_string(b.plan.world_size);
  std::vector<std::string> argv = {"mpirun", "--hostfile", path, "-np", np};
  if (b.spec.backend == spec::Backend::kSlurm) {
    // One role (the job file's check), so every node has as many ranks as the first.
    const std::string per_node = std::to_string(b.plan.nodes.front().ranks.size());
    argv = {"mpirun", "-np", np, "--map-by", "ppr:" + per_node + ":node"};
    setEnv(mpirun.env, "OMPI_MCA_plm_slurm_args", "--overlap");
  }
  if (b.ctx.as_root) argv.push_back("--allow-run-as-root");
  // More ranks than cores is normal when nodes are simulated. The cutoff avoids OpenMPI 4.1's
  // threaded local launch, which can lose a child's exit when many ranks end at once.
  for (const char* flag : {"--oversubscribe", "--mca", "odls_base_cutoff", "100000"}) {
    argv.emplace_back(flag);
  }
  argv.insert(argv.end(), mpirun.argv.begin(), mpirun.argv.end());
  mpirun.argv = std::move(argv);
  for (NodePlan& node : b.plan.nodes) node.ranks.clear();
  b.plan.nodes.front().ranks.push_back(std::move(mpirun));
}

}  // namespace cohort::plan
