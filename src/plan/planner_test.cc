#include <gtest/gtest.h>

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
  ctx.master_port = 41234;
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

TEST(Planner, PyTorchTwoByTwoMatchesGolden) {
  auto plan = makePlan(parse(kDdp), context());
  ASSERT_TRUE(plan) << plan.error().message;
  expectGolden("plan_pytorch_2x2.json", toJson(*plan));
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
}

TEST(Planner, RejectsInvalidSpec) {
  auto spec = parse(kDdp);
  spec.roles[0].nodes = 0;
  auto plan = makePlan(spec, context());
  ASSERT_FALSE(plan);
  EXPECT_EQ(plan.error().code, Code::kInvalidArgument);
}

}  // namespace
}  // namespace cohort::plan
