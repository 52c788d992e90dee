#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "plan/plan.h"
#include "spec/job_spec.h"

namespace cohort::plan {
namespace {

// Compares with tests/golden/<name>; COHORT_UPDATE_GOLDEN=1 rewrites the file instead.
void expectGolden(const std::string& name, const std::string& actual) {
  std::string path = std::string(COHORT_GOLDEN_DIR) + "/" + name;
  if (std::getenv("COHORT_UPDATE_GOLDEN")) {
    std::ofstream(path) << actual;
    return;
  }
  std::ifstream in(path);
  ASSERT_TRUE(in) << "missing golden file " << path << " (run with COHORT_UPDATE_GOLDEN=1)";
  std::stringstream expected;
  expected << in.rdbuf();
  EXPECT_EQ(expected.str(), actual) << "golden file " << path << " differs";
}

PlanContext context() {
  PlanContext ctx;
  ctx.job_id = "digits-ddp-1";
  ctx.job_dir = "/data/jobs/digits-ddp-1";
  ctx.workdir = "/src/examples/pytorch";
  ctx.ports = {41234};
  return ctx;
}

spec::JobSpec parse(const std::string& yaml) {
  auto spec = spec::parseJobFile(yaml, "job.yaml");
  EXPECT_TRUE(spec) << spec.error().message;
  return *spec;
}

const std::string kDdp = R"(
name: digits-ddp
framework: pytorch
command: [python3, ddp.py]
hyperparameters: {epochs: 5, lr: 0.05}
roles:
  worker: {nodes: 2, procs_per_node: 2}
)";

std::string envOf(const RankPlan& r, const std::string& key) {
  for (const auto& [k, v] : r.env) {
    if (k == key) return v;
  }
  return "<unset>";
}

std::string fileOf(const Plan& plan, const std::string& path) {
  for (const auto& f : plan.files) {
    if (f.path == path) return f.content;
  }
  return "<none>";
}

TEST(Planner, PyTorchTwoByTwoMatchesGolden) {
  auto plan = makePlan(parse(kDdp), context());
  ASSERT_TRUE(plan) << plan.error().message;
  expectGolden("plan_pytorch_2x2.json", toJson(*plan));
}

TEST(Planner, EachRankCarriesItsRequestsAndALauncherTheSumOfItsNodes) {
  auto plan = makePlan(parse(R"(
name: limited
framework: pytorch
command: [python3, ddp.py]
roles:
  worker: {nodes: 2, procs_per_node: 3, resources: {cpus: 1.5, memory: 2Gi}}
)"),
                       context());
  ASSERT_TRUE(plan) << plan.error().message;
  for (const NodePlan& node : plan->nodes) {
    for (const RankPlan& r : node.ranks) {
      EXPECT_EQ(r.cpus, 1.5);
      EXPECT_EQ(r.memory_bytes, int64_t{2} << 30);
    }
  }
  auto back = nodeFromJson(nodeToJson(plan->nodes[1]));
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(back->ranks[2].memory_bytes, int64_t{2} << 30);
  EXPECT_EQ(back->ranks[2].cpus, 1.5);

  auto torchrun = makePlan(parse(R"(
name: limited
framework: pytorch
launcher: torchrun
command: [python3, ddp.py]
roles:
  worker: {nodes: 2, procs_per_node: 3, resources: {cpus: 1.5, memory: 2Gi}}
)"),
                           context());
  ASSERT_TRUE(torchrun) << torchrun.error().message;
  ASSERT_EQ(torchrun->nodes[0].ranks.size(), 1u);
  EXPECT_EQ(torchrun->nodes[0].ranks[0].cpus, 4.5);
  EXPECT_EQ(torchrun->nodes[0].ranks[0].memory_bytes, int64_t{6} << 30);
}

// The scheduler counts a rank as 1 CPU when the job names none, but a default is no request:
// the rank is not held to it, and the job file written back does not name one either.
TEST(Planner, ARankIsHeldOnlyToTheCpusTheJobAskedFor) {
  spec::JobSpec spec = parse(R"(
name: unlimited
framework: pytorch
command: [python3, ddp.py]
roles:
  worker: {nodes: 1, procs_per_node: 2, resources: {memory: 1Gi}}
)");
  EXPECT_EQ(spec.roles[0].resources.cpus, 1);
  auto plan = makePlan(spec, context());
  ASSERT_TRUE(plan) << plan.error().message;
  for (const RankPlan& r : plan->nodes[0].ranks) {
    EXPECT_EQ(r.cpus, 0);
    EXPECT_EQ(r.memory_bytes, int64_t{1} << 30);
  }
  auto again = spec::parseJobFile(spec::toJobFile(spec), "again");
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_FALSE(again->roles[0].resources.cpus_given);
  spec.roles[0].resources.cpus_given = true;
  again = spec::parseJobFile(spec::toJobFile(spec), "again");
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_TRUE(again->roles[0].resources.cpus_given);
}

// A session's ranks are told what they were given, so that a run started in one fits it; a
// job's ranks are not (they are the run).
TEST(Planner, ASessionsRanksAreToldTheirAllocation) {
  spec::JobSpec spec = parse(R"(
name: dev
framework: generic
command: [cohort, session-host]
roles:
  worker: {nodes: 1, procs_per_node: 1, resources: {cpus: 2.5, memory: 4Gi}}
)");
  PlanContext ctx = context();
  ctx.gpus = {3, 5};
  auto job = makePlan(spec, ctx);
  ASSERT_TRUE(job) << job.error().message;
  EXPECT_EQ(envOf(job->nodes[0].ranks[0], "COHORT_CPUS"), "<unset>");
  spec.session = spec::Session{};
  auto session = makePlan(spec, ctx);
  ASSERT_TRUE(session) << session.error().message;
  const RankPlan& r = session->nodes[0].ranks[0];
  EXPECT_EQ(envOf(r, "COHORT_CPUS"), "2.5");
  EXPECT_EQ(envOf(r, "COHORT_MEMORY"), std::to_string(int64_t{4} << 30));
  EXPECT_EQ(envOf(r, "CUDA_VISIBLE_DEVICES"), "3");
  EXPECT_EQ(envOf(r, "COHORT_GPUS"), "1");
  spec.roles[0].resources.memory_bytes = 0;
  ctx.gpus.clear();
  session = makePlan(spec, ctx);
  ASSERT_TRUE(session) << session.error().message;
  EXPECT_EQ(envOf(session->nodes[0].ranks[0], "COHORT_MEMORY"), "<unset>");
  EXPECT_EQ(envOf(session->nodes[0].ranks[0], "COHORT_GPUS"), "0");
}

TEST(Planner, GenericTwoRolesMatchesGolden) {
  auto plan = makePlan(parse(R"(
name: ps-job
framework: generic
command: [./train.sh]
env: {OMP_NUM_THREADS: "4"}
roles:
  ps: {nodes: 1, procs_per_node: 1}
  worker: {nodes: 2, procs_per_node: 2}
policy: {success: [worker]}
)"), context());
  ASSERT_TRUE(plan) << plan.error().message;
  expectGolden("plan_generic_ps_worker.json", toJson(*plan));
}

// Every framework's rendered plan, files included, against a golden file.
struct GoldenCase {
  std::string name;
  std::string yaml;
  std::vector<int> gpus;
};

void PrintTo(const GoldenCase& c, std::ostream* os) { *os << c.name; }

class FrameworkGolden : public ::testing::TestWithParam<GoldenCase> {};

TEST_P(FrameworkGolden, MatchesGolden) {
  PlanContext ctx = context();
  ctx.ports = {41234, 41235, 41236, 41237, 41238, 41239};
  ctx.gpus = GetParam().gpus;
  ctx.as_root = true;
  auto plan = makePlan(parse(GetParam().yaml), ctx);
  ASSERT_TRUE(plan) << plan.error().message;
  expectGolden("plan_" + GetParam().name + ".json", toJson(*plan));
}

INSTANTIATE_TEST_SUITE_P(
    Frameworks, FrameworkGolden,
    ::testing::Values(
        GoldenCase{"torchrun_2x2", "name: t\ncommand: [python3, train.py]\nlauncher: torchrun\n"
                                   "roles: {worker: {nodes: 2, procs_per_node: 2}}\n", {}},
        GoldenCase{"spawn_2x2", "name: s\ncommand: [python3, boot.py]\nlauncher: spawn\n"
                                "roles: {worker: {nodes: 2, procs_per_node: 2}}\n", {}},
        GoldenCase{"mindspore_dynamic_2x2",
                   "name: ms\nframework: mindspore\ncommand: [python3, train.py]\n"
                   "roles: {worker: {nodes: 2, procs_per_node: 2}}\n", {}},
        GoldenCase{"mindspore_rank_table_v1_2x8",
                   "name: ms\nframework: mindspore\nmode: rank_table\ncompat: none\n"
                   "command: [python3, train.py]\nroles: {worker: {nodes: 2, procs_per_node: 8}}\n",
                   {}},
        GoldenCase{"mindspore_rank_table_v01_1x2",
                   "name: ms\nframework: mindspore\nmode: rank_table\nrank_table_version: '0.1'\n"
                   "command: [python3, train.py]\nroles: {worker: {nodes: 1, procs_per_node: 2}}\n",
                   {}},
        GoldenCase{"tensorflow_ps",
                   "name: tf\nframework: tensorflow\ncommand: [python3, ps.py]\n"
                   "roles: {chief: {}, worker: {nodes: 2}, ps: {}}\n", {}},
        GoldenCase{"tensorflow_multi_worker",
                   "name: tf\nframework: tensorflow\ncompat: none\ncommand: [python3, mw.py]\n"
                   "roles: {worker: {nodes: 2}}\n", {}},
        GoldenCase{"mpi_mpirun_2x2",
                   "name: m\nframework: mpi\ncompat: none\ncommand: [python3, hello.py]\n"
                   "roles: {worker: {nodes: 2, procs_per_node: 2}}\n", {}},
        GoldenCase{"deepspeed_2x2",
                   "name: d\nframework: deepspeed\ncompat: none\ncommand: [python3, train.py]\n"
                   "roles: {worker: {nodes: 2, procs_per_node: 2}}\n", {}},
        GoldenCase{"deepspeed_launcher_2x2",
                   "name: d\nframework: deepspeed\ncompat: none\n"
                   "command: [deepspeed, train.py, --steps, '5']\n"
                   "roles: {worker: {nodes: 2, procs_per_node: 2}}\n", {}},
        GoldenCase{"pytorch_gpus_2x2",
                   "name: g\ncompat: none\ncommand: [python3, train.py]\n"
                   "roles: {worker: {nodes: 2, procs_per_node: 2}}\n", {0, 1, 2, 3}}),
    [](const ::testing::TestParamInfo<GoldenCase>& info) { return info.param.name; });

const RankPlan& onlyRank(const Plan& plan, const std::string& name) {
  for (const NodePlan& node : plan.nodes) {
    for (const RankPlan& r : node.ranks) {
      if (r.name == name) return r;
    }
  }
  ADD_FAILURE() << "no process " << name;
  return plan.nodes[0].ranks[0];
}

TEST(Planner, TorchrunIsOnePerNodeWithC10dRendezvous) {
  auto plan = makePlan(parse("name: t\ncommand: [python3, train.py, --x]\nlauncher: torchrun\n"
                             "roles: {worker: {nodes: 2, procs_per_node: 3}}\n"), context());
  ASSERT_TRUE(plan);
  const RankPlan& node1 = onlyRank(*plan, "torchrun/node1");
  EXPECT_EQ(plan->nodes[1].ranks.size(), 1u);
  const std::vector<std::string>& a = node1.argv;
  EXPECT_EQ(std::vector<std::string>(a.begin(), a.begin() + 2),
            (std::vector<std::string>{"python3", "-c"}));
  // torchrun itself, without its exit barrier after a failure (its 300 s wait has no flag).
  EXPECT_NE(a[2].find("runpy.run_module('torch.distributed.run'"), std::string::npos) << a[2];
  EXPECT_NE(a[2].find("!= api.WorkerState.FAILED: barrier(agent)"), std::string::npos) << a[2];
  for (const char* flag : {"--nnodes=2", "--node_rank=1", "--nproc_per_node=3",
                           "--rdzv_backend=static", "--rdzv_endpoint=127.0.0.1:41234"}) {
    EXPECT_NE(std::find(a.begin(), a.end(), flag), a.end()) << flag;
  }
  EXPECT_EQ(a.back(), "--x");
  EXPECT_EQ(envOf(node1, "RANK"), "<unset>") << "torchrun sets the ranks' identities";
  EXPECT_EQ(envOf(node1, "COHORT_NODE_RANK"), "1");
}

TEST(Planner, SpawnGetsTheManagedServiceBootArguments) {
  auto plan = makePlan(parse("name: s\ncommand: [python3, boot.py]\nlauncher: spawn\n"
                             "roles: {worker: {nodes: 3, procs_per_node: 2}}\n"), context());
  ASSERT_TRUE(plan);
  EXPECT_EQ(onlyRank(*plan, "spawn/node2").argv,
            (std::vector<std::string>{"python3", "boot.py", "--init_method",
                                      "tcp://127.0.0.1:41234", "--rank", "2", "--world_size",
                                      "3"}));
}

TEST(Planner, MindSporeAddsANonKeySchedulerRunningTheSameScript) {
  auto plan = makePlan(parse("name: ms\nframework: mindspore\ncommand: [python3, train.py]\n"
                             "roles: {worker: {nodes: 2, procs_per_node: 2}}\n"), context());
  ASSERT_TRUE(plan);
  const RankPlan& sched = onlyRank(*plan, "scheduler/0");
  EXPECT_FALSE(sched.key);
  EXPECT_EQ(sched.argv, plan->nodes[0].ranks[0].argv);
  EXPECT_EQ(envOf(sched, "MS_ROLE"), "MS_SCHED");
  EXPECT_EQ(envOf(sched, "MS_NODE_ID"), "<unset>");
  const RankPlan& w3 = onlyRank(*plan, "worker/3");
  EXPECT_EQ(envOf(w3, "MS_ROLE"), "MS_WORKER");
  EXPECT_EQ(envOf(w3, "MS_WORKER_NUM"), "4");
  EXPECT_EQ(envOf(w3, "MS_SCHED_PORT"), "41234");
  EXPECT_EQ(plan->world_size, 4) << "the scheduler is not part of the training world";
}

TEST(Planner, TensorFlowTasksGetTfConfigAndTaskArguments) {
  PlanContext ctx = context();
  ctx.ports = {5000, 5001, 5002, 5003, 5004};
  auto plan = makePlan(parse("name: tf\nframework: tensorflow\ncommand: [python3, ps.py]\n"
                             "roles: {chief: {}, worker: {nodes: 2}, ps: {}}\n"), ctx);
  ASSERT_TRUE(plan);
  const RankPlan& w1 = onlyRank(*plan, "worker/1");
  EXPECT_EQ(envOf(w1, "TF_CONFIG"),
            R"({"cluster":{"chief":["127.0.0.1:5001"],"worker":["127.0.0.1:5002","127.0.0.1:5003"],)"
            R"("ps":["127.0.0.1:5004"]},"task":{"type":"worker","index":1}})");
  EXPECT_EQ(std::vector<std::string>(w1.argv.end() - 2, w1.argv.end()),
            (std::vector<std::string>{"--task_name=worker", "--task_index=1"}));
  EXPECT_TRUE(onlyRank(*plan, "chief/0").key);
  EXPECT_FALSE(w1.key);
  EXPECT_FALSE(onlyRank(*plan, "ps/0").key);
}

// DeepSpeed's launcher appends --local_rank=N to each rank's command unless told not to
// (--no_local_rank); cohort does the same, and task_flags: false is that setting.
TEST(Planner, DeepSpeedRanksGetLocalRankUnlessTaskFlagsSaysNo) {
  const std::string job = "name: d\nframework: deepspeed\ncommand: [python3, train.py]\n"
                          "roles: {worker: {nodes: 2, procs_per_node: 2}}\n";
  auto plan = makePlan(parse(job), context());
  ASSERT_TRUE(plan) << plan.error().message;
  const RankPlan& r = onlyRank(*plan, "worker/3");
  EXPECT_EQ(r.argv, (std::vector<std::string>{"python3", "train.py", "--local_rank=1"}));
  for (const auto& [key, value] : std::vector<std::pair<std::string, std::string>>{
           {"RANK", "3"}, {"LOCAL_RANK", "1"}, {"WORLD_SIZE", "4"}, {"CROSS_RANK", "1"},
           {"CROSS_SIZE", "2"}, {"LOCAL_SIZE", "2"}}) {
    EXPECT_EQ(envOf(r, key), value) << key;
  }
  auto off = makePlan(parse(job + "task_flags: false\n"), context());
  ASSERT_TRUE(off) << off.error().message;
  EXPECT_EQ(onlyRank(*off, "worker/3").argv, (std::vector<std::string>{"python3", "train.py"}));
  // Its own launcher runs once per node, told its node and where rank 0 listens; no ssh.
  auto own = makePlan(parse("name: d\nframework: deepspeed\ncommand: [deepspeed, t.py]\n"
                            "task_flags: false\nroles: {worker: {nodes: 2, procs_per_node: 2}}\n"),
                      context());
  ASSERT_TRUE(own) << own.error().message;
  const RankPlan& node1 = onlyRank(*own, "deepspeed/node1");
  ASSERT_GE(node1.argv.size(), 8u);
  EXPECT_EQ(node1.argv[2], "--no_ssh");
  EXPECT_EQ(node1.argv[3], "--node_rank=1");
  EXPECT_EQ(node1.argv[6], "--no_local_rank");
  EXPECT_EQ(node1.argv.back(), "t.py");
  EXPECT_EQ(envOf(node1, "RANK"), "<unset>");
  // Simulated nodes share an address; DeepSpeed refuses a hostfile that names a host twice.
  EXPECT_EQ(own->files.back().content, "node0 slots=2\nnode1 slots=2\n");
}

// The managed service's convention is on by default for its ps/worker jobs, one setting away
// for a script that parses its flags strictly (absl's app.run).
TEST(Planner, TensorFlowTaskFlagsAreASetting) {
  const std::string ps = "name: tf\nframework: tensorflow\ncommand: [python3, ps.py]\n"
                         "roles: {chief: {}, worker: {nodes: 2}, ps: {}}\n";
  auto lastArg = [](const std::string& yaml) {
    auto plan = makePlan(parse(yaml), context());
    EXPECT_TRUE(plan) << plan.error().message;
    return plan ? onlyRank(*plan, "worker/1").argv.back() : "";
  };
  EXPECT_EQ(lastArg(ps), "--task_index=1");
  EXPECT_EQ(lastArg(ps + "compat: none\n"), "ps.py");
  EXPECT_EQ(lastArg(ps + "task_flags: false\n"), "ps.py");
  EXPECT_EQ(lastArg(ps + "compat: none\ntask_flags: true\n"), "--task_index=1");
  // Without a ps role (MultiWorkerMirroredStrategy), only when asked.
  const std::string mw = "name: tf\nframework: tensorflow\ncommand: [python3, mw.py]\n"
                         "roles: {worker: {nodes: 2}}\n";
  EXPECT_EQ(lastArg(mw), "mw.py");
  EXPECT_EQ(lastArg(mw + "task_flags: true\n"), "--task_index=1");
  auto wrong = spec::parseJobFile("name: x\ncommand: [a]\ntask_flags: true\n", "job.yaml");
  ASSERT_TRUE(wrong);
  auto refused = makePlan(*wrong, context());
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("task_flags: appends --task_name/--task_index to "
                                         "TensorFlow's tasks and --local_rank to DeepSpeed's "
                                         "ranks; this job's framework is 'pytorch'"),
            std::string::npos)
      << refused.error().message;
}

TEST(Planner, MpirunRunsOnceWithTheHostfile) {
  auto plan = makePlan(parse("name: m\nframework: mpi\ncommand: [./hello]\n"
                             "roles: {worker: {nodes: 2, procs_per_node: 2}}\n"), context());
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->nodes[0].ranks.size(), 1u);
  EXPECT_TRUE(plan->nodes[1].ranks.empty());
  const RankPlan& mpirun = onlyRank(*plan, "mpirun/0");
  EXPECT_EQ(mpirun.argv[0], "mpirun");
  EXPECT_EQ(mpirun.argv.back(), "./hello");
  EXPECT_EQ(fileOf(*plan, "/data/jobs/digits-ddp-1/files/hostfile"), "127.0.0.1 slots=4\n")
      << "simulated nodes share one host line; without the machine's CPUs, the job's ranks";
}

// Open MPI yields the CPU in a waiting rank only when it counts more processes than slots: on
// one machine the hostfile says its CPUs, so 4 ranks on 2 CPUs do not busy-poll.
TEST(Planner, MpiHostfileSaysTheMachinesCpusAndRanksYieldWhenTheyOutnumberThem) {
  PlanContext ctx = context();
  ctx.cores = 2;
  auto plan = makePlan(parse("name: m\nframework: mpi\ncommand: [./hello]\n"
                             "roles: {worker: {nodes: 2, procs_per_node: 2}}\n"), ctx);
  ASSERT_TRUE(plan);
  EXPECT_EQ(fileOf(*plan, "/data/jobs/digits-ddp-1/files/hostfile"), "127.0.0.1 slots=2\n");
  const RankPlan& mpirun = onlyRank(*plan, "mpirun/0");
  EXPECT_EQ(envOf(mpirun, "OMPI_MCA_mpi_yield_when_idle"), "1");
  EXPECT_EQ(envOf(mpirun, "OMPI_MCA_rmaps_base_oversubscribe"), "1");
  EXPECT_EQ(std::count(mpirun.argv.begin(), mpirun.argv.end(), "--oversubscribe"), 1);

  ctx.cores = 8;  // enough CPUs: Open MPI may bind and poll
  plan = makePlan(parse("name: m\nframework: mpi\ncommand: [./hello]\n"
                        "roles: {worker: {nodes: 2, procs_per_node: 2}}\n"), ctx);
  ASSERT_TRUE(plan);
  EXPECT_EQ(fileOf(*plan, "/data/jobs/digits-ddp-1/files/hostfile"), "127.0.0.1 slots=8\n");
  EXPECT_EQ(envOf(onlyRank(*plan, "mpirun/0"), "OMPI_MCA_mpi_yield_when_idle"), "<unset>");

  // The job's own setting wins.
  plan = makePlan(parse("name: m\nframework: mpi\ncommand: [./hello]\n"
                        "env: {OMPI_MCA_mpi_yield_when_idle: '0'}\n"
                        "roles: {worker: {nodes: 2, procs_per_node: 2}}\n"), context());
  ASSERT_TRUE(plan);
  EXPECT_EQ(envOf(onlyRank(*plan, "mpirun/0"), "OMPI_MCA_mpi_yield_when_idle"), "0");
}

// A command that is itself an MPI launcher makes one MPI world for the job, whatever the
// launcher: it runs once, with the job's hostfile as its default, not once per rank.
TEST(Planner, AJobsOwnMpirunRunsOnceWithTheJobsHostfile) {
  for (const char* launcher : {"mpirun", "direct"}) {
    SCOPED_TRACE(launcher);
    PlanContext ctx = context();
    ctx.cores = 2;
    ctx.as_root = true;
    auto plan = makePlan(parse(std::string("name: m\nframework: mpi\nlauncher: ") + launcher +
                               "\ncommand: [mpirun, -np, '4', python3, x.py]\n"
                               "roles: {worker: {nodes: 2, procs_per_node: 2}}\n"),
                         ctx);
    ASSERT_TRUE(plan);
    EXPECT_TRUE(plan->nodes[1].ranks.empty());
    const RankPlan& mpirun = onlyRank(*plan, "mpirun/0");
    EXPECT_EQ(mpirun.argv,
              (std::vector<std::string>{"mpirun", "-np", "4", "python3", "x.py"}));
    EXPECT_EQ(envOf(mpirun, "OMPI_MCA_orte_default_hostfile"),
              "/data/jobs/digits-ddp-1/files/hostfile");
    EXPECT_EQ(envOf(mpirun, "OMPI_ALLOW_RUN_AS_ROOT"), "1");
    EXPECT_EQ(envOf(mpirun, "OMPI_MCA_mpi_yield_when_idle"), "1");
  }
}

// Horovod's horovodrun runs mpirun with a host list of its own: it runs once, as the job's
// mpirun, told the job's hostfile and world size before its own flags (which win).
TEST(Planner, AJobsOwnHorovodrunRunsOnceWithTheJobsHostfile) {
  PlanContext ctx = context();
  ctx.as_root = true;
  auto plan = makePlan(parse("name: h\nframework: mpi\n"
                             "command: [/venv/bin/horovodrun, --verbose, python3, x.py]\n"
                             "roles: {worker: {nodes: 2, procs_per_node: 2}}\n"),
                       ctx);
  ASSERT_TRUE(plan);
  EXPECT_TRUE(plan->nodes[1].ranks.empty());
  const RankPlan& run = onlyRank(*plan, "mpirun/0");
  EXPECT_EQ(run.argv, (std::vector<std::string>{"/venv/bin/horovodrun", "--hostfile",
                                                "/data/jobs/digits-ddp-1/files/hostfile", "-np",
                                                "4", "--verbose", "python3", "x.py"}));
  EXPECT_EQ(envOf(run, "OMPI_ALLOW_RUN_AS_ROOT"), "1");
}

TEST(Planner, MpirunOnSlurmTakesTheNodesFromTheAllocation) {
  auto spec = parse("name: m\nframework: mpi\ncommand: [./hello]\n"
                    "roles: {worker: {nodes: 2, procs_per_node: 3}}\n");
  spec.backend = spec::Backend::kSlurm;
  auto plan = makePlan(spec, context());
  ASSERT_TRUE(plan);
  const RankPlan& mpirun = onlyRank(*plan, "mpirun/0");
  EXPECT_EQ(std::vector<std::string>(mpirun.argv.begin(), mpirun.argv.begin() + 5),
            (std::vector<std::string>{"mpirun", "-np", "6", "--map-by", "ppr:3:node"}));
  EXPECT_EQ(std::find(mpirun.argv.begin(), mpirun.argv.end(), "--hostfile"), mpirun.argv.end());
  EXPECT_TRUE(std::any_of(mpirun.env.begin(), mpirun.env.end(), [](const auto& kv) {
    return kv.first == "OMPI_MCA_plm_slurm_args" && kv.second == "--overlap";
  }));
}

// cohort run's stdin goes to global rank 0 only (the job's mpirun, which passes it on), never
// beside a rank on the terminal, and not into a preload template's fork.
TEST(Planner, StdinIsForwardedToRankZeroAlone) {
  auto plan = makePlan(parse(kDdp), context());
  ASSERT_TRUE(plan);
  ASSERT_TRUE(forwardStdin(*plan));
  int forwarded = 0;
  for (const NodePlan& node : plan->nodes) {
    for (const RankPlan& r : node.ranks) {
      EXPECT_EQ(r.stdin_forwarded, r.rank == 0) << r.name;
      forwarded += r.stdin_forwarded;
    }
  }
  EXPECT_EQ(forwarded, 1);
  auto node = nodeFromJson(nodeToJson(plan->nodes[0]));
  ASSERT_TRUE(node);
  EXPECT_TRUE(node->ranks[0].stdin_forwarded) << "the agent learns it from the plan";

  auto mpi = makePlan(parse("name: m\nframework: mpi\ncommand: [./hello]\n"
                            "roles: {worker: {nodes: 2, procs_per_node: 2}}\n"), context());
  ASSERT_TRUE(mpi);
  ASSERT_TRUE(forwardStdin(*mpi));
  EXPECT_TRUE(onlyRank(*mpi, "mpirun/0").stdin_forwarded);

  spec::JobSpec pdb = parse(kDdp + "debug: {ranks: [2]}\n");
  pdb.debug.pdb = true;
  auto on_terminal = makePlan(pdb, context());
  ASSERT_TRUE(on_terminal);
  EXPECT_FALSE(forwardStdin(*on_terminal));
  auto preload = makePlan(parse("name: p\nlauncher: preload\ncommand: [/usr/bin/python3, t.py]\n"
                                "roles: {worker: {nodes: 2, procs_per_node: 2}}\n"), context());
  ASSERT_TRUE(preload);
  EXPECT_FALSE(forwardStdin(*preload));
  for (const NodePlan& node : on_terminal->nodes) {
    for (const RankPlan& r : node.ranks) EXPECT_FALSE(r.stdin_forwarded) << r.name;
  }
}

TEST(Planner, PreloadMarksEveryRankAndNamesEachNodesTemplate) {
  auto plan = makePlan(parse("name: p\nlauncher: preload\ncommand: [/usr/bin/python3, train.py]\n"
                             "roles: {worker: {nodes: 2, procs_per_node: 2}}\n"), context());
  ASSERT_TRUE(plan) << plan.error().message;
  for (const NodePlan& node : plan->nodes) {
    ASSERT_TRUE(node.preload);
    EXPECT_EQ(node.preload->python, "/usr/bin/python3");
    EXPECT_EQ(node.preload->modules, std::vector<std::string>{"torch"}) << "pytorch's default";
    for (const RankPlan& r : node.ranks) EXPECT_TRUE(r.preload) << r.name;
  }
  // The agents get it over the wire.
  auto back = nodeFromJson(nodeToJson(plan->nodes[1]));
  ASSERT_TRUE(back);
  ASSERT_TRUE(back->preload);
  EXPECT_EQ(back->preload->modules, std::vector<std::string>{"torch"});
  EXPECT_TRUE(back->ranks[0].preload);
  EXPECT_NE(toText(*plan).find("preload: /usr/bin/python3 imports torch once"), std::string::npos);

  auto generic = makePlan(parse("name: p\nframework: generic\nlauncher: preload\npreload: []\n"
                                "command: [python3, -m, pkg.main, --x]\n"), context());
  ASSERT_TRUE(generic) << generic.error().message;
  EXPECT_TRUE(generic->nodes[0].preload->modules.empty());
  for (const char* command : {"[sh, run.sh]", "[python3, -u, train.py]", "[python3]"}) {
    auto refused = makePlan(parse(std::string("name: p\nlauncher: preload\ncommand: ") + command +
                                  "\n"), context());
    ASSERT_FALSE(refused) << command;
    EXPECT_NE(refused.error().message.find("launcher: preload forks Python ranks"), std::string::npos);
  }
  PlanContext sandboxed = context();
  sandboxed.isolate = true;
  auto in_sandbox = makePlan(parse("name: p\nlauncher: preload\ncommand: [python3, t.py]\n"), sandboxed);
  ASSERT_FALSE(in_sandbox);
  EXPECT_NE(in_sandbox.error().message.find("--no-isolate"), std::string::npos);
}

TEST(Planner, ModelArtsVariablesAndHostFiles) {
  auto plan = makePlan(parse("name: ma\ncommand: [sh, start.sh]\n"
                             "env: {MA_NUM_GPUS: '2'}\n"
                             "roles: {worker: {nodes: 3}}\n"), context());
  ASSERT_TRUE(plan);
  const RankPlan& w2 = onlyRank(*plan, "worker/2");
  EXPECT_EQ(envOf(w2, "VC_TASK_INDEX"), "2");
  EXPECT_EQ(envOf(w2, "VK_TASK_INDEX"), "2");
  EXPECT_EQ(envOf(w2, "VC_WORKER_HOSTS"), "127.0.0.1,127.0.0.1,127.0.0.1");
  EXPECT_EQ(envOf(w2, "VC_WORKER_NUM"), "3");
  EXPECT_EQ(envOf(w2, "MA_NUM_HOSTS"), "3");
  EXPECT_EQ(envOf(w2, "MA_TASK_NAME"), "worker");
  EXPECT_EQ(envOf(w2, "MA_NUM_GPUS"), "2") << "the user's value wins";
  bool host_file = false;
  for (const auto& f : plan->files) {
    host_file |= f.path == "/data/jobs/digits-ddp-1/files/volcano/worker.host" &&
                 f.content == "127.0.0.1\n127.0.0.1\n127.0.0.1\n";
  }
  EXPECT_TRUE(host_file);
}

TEST(Planner, EachRankGetsItsOwnGpu) {
  PlanContext ctx = context();
  ctx.gpus = {4, 5, 6, 7};
  auto plan = makePlan(parse(kDdp), ctx);
  ASSERT_TRUE(plan);
  EXPECT_EQ(envOf(onlyRank(*plan, "worker/0"), "CUDA_VISIBLE_DEVICES"), "4");
  EXPECT_EQ(envOf(onlyRank(*plan, "worker/3"), "CUDA_VISIBLE_DEVICES"), "7");
  ctx.nodes_share_machine = false;  // real nodes: by local rank
  plan = makePlan(parse(kDdp), ctx);
  EXPECT_EQ(envOf(onlyRank(*plan, "worker/3"), "CUDA_VISIBLE_DEVICES"), "5");
}

TEST(Planner, WorldSizeCountsProcessesNeverNodes) {
  auto plan = makePlan(parse(kDdp), context());
  ASSERT_TRUE(plan);
  for (const NodePlan& node : plan->nodes) {
    for (const RankPlan& r : node.ranks) {
      EXPECT_EQ(envOf(r, "WORLD_SIZE"), "4");
      EXPECT_EQ(envOf(r, "COHORT_WORLD_SIZE"), "4");
      EXPECT_EQ(envOf(r, "COHORT_NUM_NODES"), "2");
    }
  }
}

TEST(Planner, EachRankIsToldItsStopSignalAndItsHeartbeatFile) {
  auto plan = makePlan(parse(kDdp + "policy: {stop_signal: USR1}\n"), context());
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->stop_signal, SIGUSR1);
  const RankPlan& r = onlyRank(*plan, "worker/3");
  EXPECT_EQ(envOf(r, "COHORT_STOP_SIGNAL"), "SIGUSR1");
  EXPECT_EQ(envOf(r, "COHORT_HEARTBEAT_FILE"),
            "/data/jobs/digits-ddp-1/work/node1/.cohort-heartbeat-3");
  auto plain = makePlan(parse(kDdp), context());
  EXPECT_EQ(envOf(onlyRank(*plain, "worker/0"), "COHORT_STOP_SIGNAL"), "SIGTERM");
}

// bubblewrap must not die of a stop signal its rank is meant to catch: it ignores the job's, and
// the rank gets the default back.
TEST(Planner, TheSandboxPassesTheJobsStopSignalToTheRank) {
  PlanContext ctx = context();
  ctx.isolate = true;
  ctx.data_root = "/data";
  auto plan = makePlan(parse(kDdp + "policy: {stop_signal: SIGUSR2}\n"), ctx);
  ASSERT_TRUE(plan);
  const std::vector<std::string>& argv = onlyRank(*plan, "worker/0").argv;
  ASSERT_GE(argv.size(), 2u);
  EXPECT_EQ(argv[1], "--ignore-signal=TERM,INT,HUP,USR2");
  EXPECT_NE(std::find(argv.begin(), argv.end(), "--default-signal=TERM,INT,HUP,USR2"), argv.end());
  auto plain = makePlan(parse(kDdp), ctx);
  EXPECT_EQ(onlyRank(*plain, "worker/0").argv[1], "--ignore-signal=TERM,INT,HUP");
}

// A sandboxed job's /tmp, /var/tmp, /run/lock and /dev/shm are its own on each node, mounted
// before the data root's parts: a data root below /tmp must land inside the job's /tmp.
TEST(Planner, ASandboxedJobHasItsOwnTmpAndShmOnEachNode) {
  PlanContext ctx = context();
  ctx.isolate = true;
  ctx.data_root = "/tmp/data";
  auto plan = makePlan(parse(kDdp), ctx);
  ASSERT_TRUE(plan);
  const NodePlan& node = plan->nodes[1];
  const std::string shm = "/dev/shm/cohort-" + plan->job_id + "-node1";
  EXPECT_EQ(node.scratch_dirs,
            (std::vector<std::string>{node.work_dir + "/.scratch/tmp",
                                      node.work_dir + "/.scratch/var-tmp",
                                      node.work_dir + "/.scratch/run-lock", shm}));
  const std::vector<std::string>& argv = node.ranks[0].argv;
  auto at = [&](const std::vector<std::string>& words) {
    return std::search(argv.begin(), argv.end(), words.begin(), words.end()) - argv.begin();
  };
  const auto tmp = at({"--bind", node.work_dir + "/.scratch/tmp", "/tmp"});
  const auto root = at({"--tmpfs", "/tmp/data"});
  ASSERT_LT(tmp, static_cast<long>(argv.size()));
  ASSERT_LT(root, static_cast<long>(argv.size()));
  EXPECT_LT(tmp, root);
  EXPECT_LT(at({"--bind", shm, "/dev/shm"}), root);
  EXPECT_TRUE(node.ranks[0].sandboxed);
  EXPECT_FALSE(makePlan(parse(kDdp), context())->nodes[0].ranks[0].sandboxed);
  EXPECT_EQ(at({"--bind-try", "/tmp/data", "/tmp/data"}), static_cast<long>(argv.size()))
      << "the data root is put back in parts only";
  // A workdir in the machine's /tmp is put back, with its neighbours, after the job's own /tmp.
  ctx.workdir = "/tmp/project/code";
  auto in_tmp = makePlan(parse(kDdp), ctx);
  ASSERT_TRUE(in_tmp);
  const std::vector<std::string>& words = in_tmp->nodes[0].ranks[0].argv;
  const std::vector<std::string> want = {"--bind-try", "/tmp/project", "/tmp/project"};
  const auto put_back = std::search(words.begin(), words.end(), want.begin(), want.end());
  ASSERT_NE(put_back, words.end());
  EXPECT_GT(put_back - std::find(words.begin(), words.end(), "/tmp"), 0);
  auto back = nodeFromJson(nodeToJson(node));
  ASSERT_TRUE(back);
  EXPECT_EQ(back->scratch_dirs, node.scratch_dirs);
  EXPECT_TRUE(back->ranks[0].sandboxed);
  auto plain = makePlan(parse(kDdp), context());
  EXPECT_TRUE(plain->nodes[1].scratch_dirs.empty());
}

// In the sandbox a node sees only its own GPUs' device files, numbered from 0 as in a
// container; a GPU the job's env names that the job was not given is not put back.
TEST(Planner, ASandboxedNodeGetsOnlyItsOwnGpusDeviceFiles) {
  PlanContext ctx = context();
  ctx.isolate = true;
  ctx.data_root = "/data";
  ctx.gpus = {2, 3, 5, 7};
  ctx.shared_devices = {"/dev/infiniband"};
  auto plan = makePlan(parse(kDdp), ctx);
  ASSERT_TRUE(plan) << plan.error().message;
  auto bound = [](const RankPlan& r) {
    std::vector<std::string> devices;
    for (size_t i = 0; i + 2 < r.argv.size(); ++i) {
      if (r.argv[i] == "--dev-bind-try") devices.push_back(r.argv[i + 1]);
    }
    return devices;
  };
  const std::vector<std::string> shared = {"/dev/nvidiactl", "/dev/nvidia-uvm",
                                           "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset"};
  auto with = [&](std::vector<std::string> own) {
    std::vector<std::string> all = shared;
    all.insert(all.end(), own.begin(), own.end());
    all.push_back("/dev/infiniband");
    return all;
  };
  EXPECT_EQ(bound(onlyRank(*plan, "worker/0")), with({"/dev/nvidia2", "/dev/nvidia3"}));
  EXPECT_EQ(bound(onlyRank(*plan, "worker/3")), with({"/dev/nvidia5", "/dev/nvidia7"}));
  EXPECT_EQ(envOf(onlyRank(*plan, "worker/0"), "CUDA_VISIBLE_DEVICES"), "0");
  EXPECT_EQ(envOf(onlyRank(*plan, "worker/1"), "CUDA_VISIBLE_DEVICES"), "1");
  EXPECT_EQ(envOf(onlyRank(*plan, "worker/3"), "CUDA_VISIBLE_DEVICES"), "1");
  const std::vector<std::string>& argv = onlyRank(*plan, "worker/0").argv;
  EXPECT_LT(std::find(argv.begin(), argv.end(), "--dev") - argv.begin(),
            std::find(argv.begin(), argv.end(), "/dev/nvidia2") - argv.begin())
      << "a /dev of its own first";
  // A job given no GPU that names one in its env gets none.
  ctx.gpus.clear();
  auto thief = makePlan(parse(kDdp + "env: {CUDA_VISIBLE_DEVICES: \"3\"}\n"), ctx);
  ASSERT_TRUE(thief) << thief.error().message;
  EXPECT_EQ(bound(onlyRank(*thief, "worker/0")), std::vector<std::string>{"/dev/infiniband"});
  EXPECT_EQ(envOf(onlyRank(*thief, "worker/0"), "CUDA_VISIBLE_DEVICES"), "");
}

TEST(Planner, RanksAreNumberedNodeByNode) {
  auto plan = makePlan(parse(kDdp), context());
  ASSERT_TRUE(plan);
  ASSERT_EQ(plan->nodes.size(), 2u);
  const RankPlan& r3 = plan->nodes[1].ranks[1];
  EXPECT_EQ(r3.rank, 3);
  EXPECT_EQ(envOf(r3, "RANK"), "3");
  EXPECT_EQ(envOf(r3, "LOCAL_RANK"), "1");
  EXPECT_EQ(envOf(r3, "GROUP_RANK"), "1");
  EXPECT_EQ(envOf(r3, "MASTER_PORT"), "41234");
  EXPECT_EQ(envOf(r3, "OMP_NUM_THREADS"), "1");
}

TEST(Planner, HyperparametersAreAppendedInOrder) {
  auto plan = makePlan(parse(kDdp), context());
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->nodes[0].ranks[0].argv,
            (std::vector<std::string>{"python3", "ddp.py", "--epochs=5", "--lr=0.05"}));
}

TEST(Planner, GenericFrameworkSetsNoTorchVariables) {
  auto spec = parse(kDdp);
  spec.framework = spec::Framework::kGeneric;
  auto plan = makePlan(spec, context());
  ASSERT_TRUE(plan);
  EXPECT_EQ(envOf(plan->nodes[0].ranks[0], "RANK"), "<unset>");
  EXPECT_EQ(envOf(plan->nodes[0].ranks[0], "COHORT_RANK"), "0");
}

TEST(Planner, UserOmpThreadsWins) {
  auto spec = parse(kDdp);
  spec.env.emplace_back("OMP_NUM_THREADS", "8");
  auto plan = makePlan(spec, context());
  ASSERT_TRUE(plan);
  EXPECT_EQ(envOf(plan->nodes[0].ranks[0], "OMP_NUM_THREADS"), "8");
}

TEST(Planner, AMasterPortOrAddressOfTheJobIsHonouredNeverReplaced) {
  auto spec = parse("name: t\ncommand: [python3, train.py]\nlauncher: torchrun\n"
                    "env: {MASTER_PORT: '29500', MASTER_ADDR: 10.0.0.5}\n");
  auto plan = makePlan(spec, context());
  ASSERT_TRUE(plan);
  const std::vector<std::string>& a = onlyRank(*plan, "torchrun/node0").argv;
  EXPECT_NE(std::find(a.begin(), a.end(), "--rdzv_endpoint=10.0.0.5:29500"), a.end());
  spec.launcher = spec::Launcher::kDirect;
  plan = makePlan(spec, context());
  ASSERT_TRUE(plan);
  EXPECT_EQ(envOf(plan->nodes[0].ranks[0], "MASTER_PORT"), "29500");
  EXPECT_EQ(envOf(plan->nodes[0].ranks[0], "MASTER_ADDR"), "10.0.0.5");

  spec.env = {{"MASTER_PORT", "auto"}};
  plan = makePlan(spec, context());
  ASSERT_FALSE(plan);
  EXPECT_NE(plan.error().message.find("env.MASTER_PORT: 'auto' is not a port (1 to 65535)"),
            std::string::npos)
      << plan.error().message;
}

TEST(Planner, ConsoleRanksFilter) {
  PlanContext ctx = context();
  ctx.console_ranks = {0, 3};
  auto plan = makePlan(parse(kDdp), ctx);
  ASSERT_TRUE(plan);
  EXPECT_TRUE(plan->nodes[0].ranks[0].console);
  EXPECT_FALSE(plan->nodes[0].ranks[1].console);
  EXPECT_TRUE(plan->nodes[1].ranks[1].console);
}

TEST(Planner, NodePlanRoundTripsThroughJson) {
  auto plan = makePlan(parse(kDdp), context());
  ASSERT_TRUE(plan);
  auto node = nodeFromJson(nodeToJson(plan->nodes[1]));
  ASSERT_TRUE(node) << node.error().message;
  EXPECT_EQ(nodeToJson(*node), nodeToJson(plan->nodes[1]));
  // Every rank gets back all of its variables, those it shares with the others included.
  ASSERT_EQ(node->ranks.size(), plan->nodes[1].ranks.size());
  for (size_t i = 0; i < node->ranks.size(); ++i) {
    auto sorted = [](KeyValues env) {
      std::sort(env.begin(), env.end());
      return env;
    };
    EXPECT_EQ(sorted(node->ranks[i].env), sorted(plan->nodes[1].ranks[i].env)) << "rank " << i;
  }
}

TEST(Planner, ANodePlanSendsWhatItsRanksShareOnce) {
  auto plan = makePlan(parse(kDdp), context());
  ASSERT_TRUE(plan);
  const std::string text = nodeToJson(plan->nodes[1]);
  const std::string job = "\"COHORT_JOB_ID\":";
  EXPECT_EQ(text.find(job), text.rfind(job)) << "the job id is the same for every rank";
  EXPECT_NE(text.find("\"RANK\":\"2\""), std::string::npos) << "each rank's own stays with it";
  EXPECT_NE(text.find("\"RANK\":\"3\""), std::string::npos);
}

TEST(Planner, AMachinePathThatIsNotUtf8IsRefusedByName) {
  PlanContext ctx = context();
  ctx.workdir = "/tmp/x\xffy";
  auto plan = makePlan(parse(kDdp), ctx);
  ASSERT_FALSE(plan);
  EXPECT_EQ(plan.error().code, Code::kInvalidArgument);
  EXPECT_NE(plan.error().message.find("the work directory '/tmp/x\xffy' is not UTF-8 text"),
            std::string::npos)
      << plan.error().message;
}

TEST(Planner, RejectsInvalidSpec) {
  auto spec = parse(kDdp);
  spec.roles[0].nodes = 0;
  auto plan = makePlan(spec, context());
  ASSERT_FALSE(plan);
  EXPECT_EQ(plan.error().code, Code::kInvalidArgument);
}

// debug: every rank runs through the bootstrap the plan writes, with its own port; only the
// chosen ranks wait from the start.
TEST(Planner, DebugRunsEveryRankUnderTheBootstrapOnItsOwnPort) {
  spec::JobSpec spec = parse(kDdp + "debug: {ranks: [1], post_mortem: true, wait_limit: 2m}\n");
  PlanContext ctx = context();
  ctx.debug_ports = {50000, 50001, 50002, 50003};
  auto plan = makePlan(spec, ctx);
  ASSERT_TRUE(plan) << plan.error().message;
  const std::string bootstrap = "/data/jobs/digits-ddp-1/files/debug/cohort_debug.py";
  bool written = false;
  for (const GeneratedFile& f : plan->files) {
    if (f.path == bootstrap) {
      written = true;
      EXPECT_NE(f.content.find("def main():"), std::string::npos);
    }
  }
  EXPECT_TRUE(written) << "the bootstrap is one of the job's files";
  int waiting = 0;
  for (const NodePlan& node : plan->nodes) {
    for (const RankPlan& r : node.ranks) {
      EXPECT_EQ(r.argv, (std::vector<std::string>{"python3", "-Xfrozen_modules=off", bootstrap,
                                                  "ddp.py", "--epochs=5", "--lr=0.05"}));
      EXPECT_EQ(envOf(r, "COHORT_DEBUG_LISTEN"), "127.0.0.1:" + std::to_string(50000 + r.rank));
      EXPECT_EQ(envOf(r, "COHORT_DEBUG_POST_MORTEM"), "1");
      EXPECT_EQ(envOf(r, "COHORT_DEBUG_WAIT_LIMIT"), "120.000");
      EXPECT_EQ(envOf(r, "COHORT_DEBUG_FILE"), "/data/jobs/digits-ddp-1/work/node" +
                                                   std::to_string(r.node) + "/.cohort-debug-" +
                                                   std::to_string(r.rank));
      if (envOf(r, "COHORT_DEBUG_WAIT") == "1") {
        ++waiting;
        EXPECT_EQ(r.rank, 1);
      }
      EXPECT_FALSE(r.terminal);
    }
  }
  EXPECT_EQ(waiting, 1);
  EXPECT_EQ(portsNeeded(spec), 1) << "debug ports are counted apart";
  EXPECT_EQ(debugPortsNeeded(spec), 4);
}

TEST(Planner, DebugKeepsPythonsOptionsAndModulesAndConnectNeedsNoPorts) {
  spec::JobSpec spec = parse(
      "name: m\ncommand: [python3, -u, -X, dev, -m, pkg.train]\ndebug: {connect: \"ide:5678\"}\n");
  auto plan = makePlan(spec, context());
  ASSERT_TRUE(plan) << plan.error().message;
  const RankPlan& r = plan->nodes[0].ranks[0];
  EXPECT_EQ(r.argv, (std::vector<std::string>{"python3", "-Xfrozen_modules=off", "-u", "-X", "dev",
                                              "/data/jobs/digits-ddp-1/files/debug/cohort_debug.py",
                                              "-m", "pkg.train"}));
  EXPECT_EQ(envOf(r, "COHORT_DEBUG_CONNECT"), "ide:5678");
  EXPECT_EQ(envOf(r, "COHORT_DEBUG_LISTEN"), "<unset>");
  EXPECT_EQ(debugPortsNeeded(spec), 0);
}

TEST(Planner, DryDebugPlanShowsAutoPortsAndPdbTakesTheTerminal) {
  spec::JobSpec spec = parse(kDdp + "debug: {ranks: [2]}\n");
  spec.debug.pdb = true;
  auto plan = makePlan(spec, context());
  ASSERT_TRUE(plan) << plan.error().message;
  for (const NodePlan& node : plan->nodes) {
    for (const RankPlan& r : node.ranks) {
      EXPECT_EQ(envOf(r, "COHORT_DEBUG_LISTEN"), "127.0.0.1:auto");
      EXPECT_EQ(r.terminal, r.rank == 2);
      EXPECT_EQ(envOf(r, "COHORT_DEBUG_PDB"), r.rank == 2 ? "1" : "<unset>");
    }
  }
  auto node = nodeFromJson(nodeToJson(plan->nodes[1]));
  ASSERT_TRUE(node);
  EXPECT_TRUE(node->ranks[0].terminal) << "the agent learns it from the plan";
}

// A preloaded rank runs the bootstrap as its script, in its node's template, which loads frozen
// modules from their files; the rank on pdb's terminal is started by cohort itself.
TEST(Planner, DebugOfPreloadedRanksRunsTheBootstrapInTheTemplate) {
  spec::JobSpec spec = parse(kDdp + "launcher: preload\ndebug: {ranks: [2]}\n");
  spec.debug.pdb = true;
  auto plan = makePlan(spec, context());
  ASSERT_TRUE(plan) << plan.error().message;
  const std::string bootstrap = "/data/jobs/digits-ddp-1/files/debug/cohort_debug.py";
  for (const NodePlan& node : plan->nodes) {
    ASSERT_TRUE(node.preload);
    EXPECT_EQ(node.preload->options, std::vector<std::string>{"-Xfrozen_modules=off"});
    for (const RankPlan& r : node.ranks) {
      EXPECT_EQ(r.preload, r.rank != 2) << r.name;
      EXPECT_EQ(r.argv, r.rank == 2 ? (std::vector<std::string>{"python3", "-Xfrozen_modules=off",
                                                                bootstrap, "ddp.py", "--epochs=5",
                                                                "--lr=0.05"})
                                    : (std::vector<std::string>{"python3", bootstrap, "ddp.py",
                                                                "--epochs=5", "--lr=0.05"}));
    }
  }
  auto node = nodeFromJson(nodeToJson(plan->nodes[0]));
  ASSERT_TRUE(node && node->preload);
  EXPECT_EQ(node->preload->options, std::vector<std::string>{"-Xfrozen_modules=off"});
  EXPECT_NE(toText(*plan).find("preload: python3 -Xfrozen_modules=off imports torch once"),
            std::string::npos)
      << toText(*plan);

  // A node whose one rank is on the terminal starts no template.
  spec::JobSpec one = parse("name: p\nlauncher: preload\ncommand: [python3, t.py]\n");
  one.debug.enabled = true;
  one.debug.ranks = {0};
  one.debug.pdb = true;
  auto alone = makePlan(one, context());
  ASSERT_TRUE(alone) << alone.error().message;
  EXPECT_FALSE(alone->nodes[0].preload);
  EXPECT_FALSE(alone->nodes[0].ranks[0].preload);
}

}  // namespace
}  // namespace cohort::plan
