// MPI and Horovod: a hostfile ("host slots=N") that describes the whole job, and one
// MPI world for it: with launcher mpirun a single mpirun on the first node starts every rank;
// a command that is itself an MPI launcher (mpirun, mpiexec, or Horovod's horovodrun, which runs
// mpirun) is run once, as that mpirun, with the job's hostfile as its default. On Slurm that
// mpirun takes the allocation from Slurm and reaches the other nodes with srun (a step that
// overlaps the agents'), as mpirun does in any Slurm job: the hostfile's addresses are not
// Slurm's node names.
//
// Open MPI reads a hostfile's slots as the processors a host has, and busy-polls in every rank
// unless it finds more processes than slots: then it yields the CPU while a rank waits. Where
// nodes are simulated they share this machine, whose CPUs cohort knows (PlanContext::cores): the
// hostfile then says them, as Open MPI's own default would, every process may oversubscribe
// them, and when the job's ranks outnumber them every rank yields, whichever mpirun starts the
// ranks (cohort's, or the job's own). On real hosts slots are the job's processes there (what
// Horovod's host list means too). DeepSpeed has a framework of its own (deepspeed.cc).
#include <algorithm>
#include <string>
#include <vector>

#include "plan/wiring.h"

namespace cohort::plan {

namespace {

// True when argv[0] names an MPI launcher: the job brings its own mpirun, to be run once.
bool isMpiLauncher(const std::vector<std::string>& argv) {
  if (argv.empty()) return false;
  const std::string base = argv[0].substr(argv[0].rfind('/') + 1);
  for (const char* name : {"mpirun", "mpiexec", "orterun", "mpirun.openmpi", "mpiexec.openmpi",
                           "mpirun.mpich", "mpiexec.mpich", "mpiexec.hydra"}) {
    if (base == name) return true;
  }
  return false;
}

// True when argv[0] is Horovod's launcher. horovodrun gives mpirun a host list of its own
// (localhost:NP unless told hosts), so the job's hostfile is passed to it as a flag.
bool isHorovodrun(const std::vector<std::string>& argv) {
  return !argv.empty() && argv[0].substr(argv[0].rfind('/') + 1) == "horovodrun";
}

// `horovodrun ARGS` as the launcher of the whole job: `horovodrun --hostfile <job's hostfile>
// -np <world size> ARGS`. A flag in ARGS wins (argparse keeps the last), and so do hosts named
// with -H (horovodrun reads its hostfile only when it has no -H).
std::vector<std::string> horovodrunArgv(const std::vector<std::string>& argv,
                                        const std::string& hostfile, int world_size) {
  std::vector<std::string> out = {argv.front(), "--hostfile", hostfile, "-np",
                                  std::to_string(world_size)};
  out.insert(out.end(), argv.begin() + 1, argv.end());
  return out;
}

}  // namespace

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
  // Simulated nodes: one host, this machine, whose CPUs cohort knows.
  const bool one_machine = b.ctx.nodes_share_machine && slots.size() == 1 && b.ctx.cores > 0;
  if (one_machine) slots.front().second = b.ctx.cores;
  std::string hostfile;
  for (const auto& [host, n] : slots) hostfile += host + " slots=" + std::to_string(n) + "\n";
  b.plan.files.push_back({path, hostfile});

  const bool slurm = b.spec.backend == spec::Backend::kSlurm;
  const bool horovodrun = isHorovodrun(b.spec.command);
  const bool own_mpirun = isMpiLauncher(b.spec.command) || horovodrun;
  KeyValues mpi_env = {{"COHORT_HOSTFILE", path}};
  if (one_machine) {
    // As cohort's own mpirun is told (--oversubscribe): -np above the CPUs starts every rank.
    mpi_env.emplace_back("OMPI_MCA_rmaps_base_oversubscribe", "1");
    // What Open MPI does itself when it counts more processes than slots, said explicitly.
    if (b.plan.world_size > b.ctx.cores) mpi_env.emplace_back("OMPI_MCA_mpi_yield_when_idle", "1");
  }
  if (own_mpirun) {
    if (slurm) {
      mpi_env.emplace_back("OMPI_MCA_plm_slurm_args", "--overlap");
    } else {
      mpi_env.emplace_back("OMPI_MCA_orte_default_hostfile", path);  // unless it names hosts
    }
    mpi_env.emplace_back("OMPI_MCA_odls_base_cutoff", "100000");  // as below
    if (b.ctx.as_root) {
      mpi_env.emplace_back("OMPI_ALLOW_RUN_AS_ROOT", "1");
      mpi_env.emplace_back("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    }
  }
  b.forEachRank([&](NodePlan&, RankPlan& r) {
    for (const auto& [key, value] : mpi_env) {
      if (!hasEnv(b.spec.env, key)) setEnv(r.env, key, value);  // the job's own setting wins
    }
  });
  if (b.spec.launcher != spec::Launcher::kMpirun && !own_mpirun) return;

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
  if (!own_mpirun) {
    const std::string np = std::to_string(b.plan.world_size);
    std::vector<std::string> argv = {"mpirun", "--hostfile", path, "-np", np};
    if (slurm) {
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
  } else if (horovodrun) {
    mpirun.argv = horovodrunArgv(mpirun.argv, path, b.plan.world_size);
  }
  for (NodePlan& node : b.plan.nodes) node.ranks.clear();
  b.plan.nodes.front().ranks.push_back(std::move(mpirun));
}

}  // namespace cohort::plan
