#include "backends/slurm.h"

#include <gtest/gtest.h>

#include "plan/plan.h"

namespace cohort::backends {
namespace {

struct Job {
  spec::JobSpec spec;
  plan::Plan plan;
};

Job makeJob(const std::string& yaml, const std::string& job_dir = "/data/jobs/big-1") {
  auto spec = spec::parseJobFile(yaml, "job.yaml");
  EXPECT_TRUE(spec) << spec.error().message;
  plan::PlanContext ctx;
  ctx.job_id = "big-1";
  ctx.job_dir = job_dir;
  ctx.workdir = "/work";
  ctx.ports = {41000};
  auto plan = plan::makePlan(*spec, ctx);
  EXPECT_TRUE(plan) << plan.error().message;
  return {*spec, *plan};
}

bool has(const std::string& text, const std::string& line) {
  return text.find(line + "\n") != std::string::npos;
}

TEST(SlurmBatchScript, SizesEveryNodeForTheLargestRoleAndRunsOneAgentPerNode) {
  Job j = makeJob(R"(
name: big
command: [python3, train.py]
roles:
  chief: {nodes: 1, procs_per_node: 1, resources: {cpus: 8, memory: 1Gi}}
  worker: {nodes: 3, procs_per_node: 4, resources: {cpus: 1.5, gpus: 1, memory: 3Gi}}
policy: {max_runtime: 2h, grace_period: 30s}
network: {cidr: 10.0.0.0/8}
slurm: {partition: gpu, account: ml, qos: high, options: [--exclusive, --constraint=ib]}
)");
  auto script = slurmBatchScript(j.spec, j.plan, "/opt/cohort/bin/cohort", "10.0.0.5:41234");
  ASSERT_TRUE(script) << script.error().message;
  for (const char* line :
       {"#SBATCH --job-name=big", "#SBATCH --comment=cohort:big-1", "#SBATCH --nodes=4",
        "#SBATCH --ntasks-per-node=1", "#SBATCH --cpus-per-task=8", "#SBATCH --gres=gpu:4",
        "#SBATCH --mem=12288M", "#SBATCH --time=122", "#SBATCH --partition=gpu",
        "#SBATCH --account=ml", "#SBATCH --qos=high", "#SBATCH --exclusive",
        "#SBATCH --constraint=ib", "#SBATCH --output=/data/jobs/big-1/slurm-%j.out",
        "srun --nodes=4 --ntasks=4 --ntasks-per-node=1 --kill-on-bad-exit=0 "
        "/opt/cohort/bin/cohort exec --coordinator 10.0.0.5:41234 --cidr 10.0.0.0/8"}) {
    EXPECT_TRUE(has(*script, line)) << line << "\n" << *script;
  }
  EXPECT_EQ(script->find("SECRET"), std::string::npos) << "the secret is never in the script";
}

TEST(SlurmBatchScript, PathsAreQuotedOrRefused) {
  Job j = makeJob("name: x\ncommand: [\"true\"]\n");
  auto script = slurmBatchScript(j.spec, j.plan, "/opt/my tools/cohort", "10.0.0.5:1");
  ASSERT_TRUE(script);
  EXPECT_NE(script->find("'/opt/my tools/cohort' exec"), std::string::npos) << *script;
  Job spaced = makeJob("name: x\ncommand: [\"true\"]\n", "/data/my jobs/x-1");
  auto refused = slurmBatchScript(spaced.spec, spaced.plan, "/bin/cohort", "10.0.0.5:1");
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("--data-root"), std::string::npos);
}

TEST(PendingReason, SaysSlurmsReasonInCohortsWords) {
  EXPECT_EQ(pendingReason("Resources"), "waiting for free nodes (Resources)");
  EXPECT_EQ(pendingReason("QOSMaxJobsPerUserLimit"),
            "a limit of its account or QOS holds it (QOSMaxJobsPerUserLimit)");
  EXPECT_EQ(pendingReason("Licenses"), "Slurm says: Licenses");
}

}  // namespace
}  // namespace cohort::backends
