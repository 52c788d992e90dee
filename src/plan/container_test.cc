// environment: {image: REF}: each rank's argv under `cohort env exec`, what is bound in, what is
// refused (plan/container.cc).
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "plan/plan.h"
#include "spec/job_spec.h"

namespace cohort::plan {
namespace {

spec::JobSpec parse(const std::string& yaml) {
  auto spec = spec::parseJobFile(yaml, "job.yaml");
  EXPECT_TRUE(spec) << spec.error().message;
  return *spec;
}

const std::string kJob = R"(
name: in-image
framework: pytorch
command: [python3, ddp.py]
environment: {image: localhost/train:1}
inputs: [{source: /store/data, target: data, mode: link}]
roles:
  worker: {nodes: 2, procs_per_node: 2}
)";

PlanContext context() {
  PlanContext ctx;
  ctx.job_id = "in-image-1";
  ctx.job_dir = "/data/jobs/in-image-1";
  ctx.workdir = "/src/examples/pytorch";
  ctx.data_root = "/data";
  ctx.cohort_bin = "/usr/bin/cohort";
  ctx.ports = {41234};
  ctx.image = Image{"localhost/train:1", "abc123", {"/s/overlay/top/diff", "/s/overlay/base/diff"}};
  ctx.environment = {{"PATH", "/opt/conda/bin:/usr/bin:/bin"},
                     {"COHORT_IMAGE", "localhost/train:1"}};
  return ctx;
}

// The words after `flag`, each time it comes before "--".
std::vector<std::string> valuesOf(const std::vector<std::string>& argv, const std::string& flag) {
  std::vector<std::string> out;
  for (size_t i = 0; i + 1 < argv.size() && argv[i] != "--"; ++i) {
    if (argv[i] == flag) out.push_back(argv[i + 1]);
  }
  return out;
}

TEST(Container, EveryRankRunsItsOwnCommandUnderCohortEnvExec) {
  spec::JobSpec spec = parse(kJob);
  spec.inputs[0].source_path = "/store/data";  // what the launcher resolves it to
  auto plan = makePlan(spec, context());
  ASSERT_TRUE(plan) << plan.error().message;
  for (const NodePlan& node : plan->nodes) {
    ASSERT_TRUE(node.image);
    EXPECT_EQ(node.image->ref, "localhost/train:1");
    for (const RankPlan& r : node.ranks) {
      const std::vector<std::string> head = {"/usr/bin/cohort", "env", "exec", "--image",
                                             "localhost/train:1"};
      ASSERT_GE(r.argv.size(), head.size());
      EXPECT_TRUE(std::equal(head.begin(), head.end(), r.argv.begin()));
      EXPECT_EQ(valuesOf(r.argv, "--layer"),
                (std::vector<std::string>{"/s/overlay/top/diff", "/s/overlay/base/diff"}));
      // The rank's own command follows "--" unchanged.
      auto dash = std::find(r.argv.begin(), r.argv.end(), "--");
      ASSERT_NE(dash, r.argv.end());
      EXPECT_EQ(std::vector<std::string>(dash + 1, r.argv.end()),
                (std::vector<std::string>{"python3", "ddp.py"}));
      // The job's directories at the same paths; the record (job.json, events) is not there.
      EXPECT_EQ(valuesOf(r.argv, "--bind"),
                (std::vector<std::string>{"/src/examples/pytorch", "/data/jobs/in-image-1/work",
                                          "/data/jobs/in-image-1/output"}));
      EXPECT_EQ(valuesOf(r.argv, "--ro-bind"),
                (std::vector<std::string>{"/data/jobs/in-image-1/files",
                                          "/data/jobs/in-image-1/logs", "/store/data"}));
      // The host's loader and Python variables are not the image's: PYTHONPATH is cohort's
      // Python module alone (in files/, bound in), not the launcher's.
      const auto unset = valuesOf(r.argv, "--unset");
      EXPECT_NE(std::find(unset.begin(), unset.end(), "LD_LIBRARY_PATH"), unset.end());
      EXPECT_NE(std::find(unset.begin(), unset.end(), "PYTHONHOME"), unset.end());
      // The rank contract is unchanged, with the image's PATH.
      bool path = false, rank = false, python_path = false;
      for (const auto& [k, v] : r.env) {
        path = path || (k == "PATH" && v == "/opt/conda/bin:/usr/bin:/bin");
        rank = rank || k == "COHORT_RANK";
        python_path = python_path || (k == "PYTHONPATH" && v == "/data/jobs/in-image-1/files/python");
      }
      EXPECT_TRUE(path && rank && python_path);
    }
  }
  // cohort plan says which image.
  EXPECT_NE(toText(*plan).find("image: localhost/train:1 (abc123, 2 layer(s))"), std::string::npos);
}

TEST(Container, TheJobsOwnVariablesAreNotUnset) {
  spec::JobSpec spec = parse(kJob);
  spec.env.emplace_back("PYTHONPATH", "/src/lib");
  auto plan = makePlan(spec, context());
  ASSERT_TRUE(plan) << plan.error().message;
  const auto unset = valuesOf(plan->nodes[0].ranks[0].argv, "--unset");
  EXPECT_EQ(std::find(unset.begin(), unset.end(), "PYTHONPATH"), unset.end());
}

TEST(Container, CodeInTheDataRootIsBoundReadOnly) {
  PlanContext ctx = context();
  ctx.workdir = "/data/uploads/abc";
  auto plan = makePlan(parse(kJob), ctx);
  ASSERT_TRUE(plan) << plan.error().message;
  const auto ro = valuesOf(plan->nodes[0].ranks[0].argv, "--ro-bind");
  EXPECT_NE(std::find(ro.begin(), ro.end(), "/data/uploads/abc"), ro.end());
}

TEST(Container, TheNodePlanCarriesTheImageToItsAgent) {
  auto plan = makePlan(parse(kJob), context());
  ASSERT_TRUE(plan) << plan.error().message;
  auto node = nodeFromJson(nodeToJson(plan->nodes[1]));
  ASSERT_TRUE(node) << node.error().message;
  ASSERT_TRUE(node->image);
  EXPECT_EQ(node->image->id, "abc123");
  EXPECT_EQ(node->image->layers, plan->nodes[1].image->layers);
}

TEST(Container, TorchrunRunsInTheImageToo) {
  spec::JobSpec spec = parse(kJob);
  spec.launcher = spec::Launcher::kTorchrun;
  auto plan = makePlan(spec, context());
  ASSERT_TRUE(plan) << plan.error().message;
  const auto& argv = plan->nodes[0].ranks[0].argv;
  auto dash = std::find(argv.begin(), argv.end(), "--");
  ASSERT_NE(dash, argv.end());
  EXPECT_EQ(std::vector<std::string>(dash + 1, dash + 3),
            (std::vector<std::string>{"python3", "-c"}));
  EXPECT_NE(dash[3].find("torch.distributed.run"), std::string::npos) << dash[3];
  EXPECT_EQ(plan->nodes[0].ranks[0].name, "torchrun/node0");
}

TEST(Container, WhatCannotRunInAnImageIsRefused) {
  PlanContext isolated = context();
  isolated.isolate = true;
  auto a = makePlan(parse(kJob), isolated);
  ASSERT_FALSE(a);
  EXPECT_NE(a.error().message.find("--isolate"), std::string::npos) << a.error().message;

  PlanContext account = context();
  account.uid = 1234;
  account.gid = 1234;
  auto b = makePlan(parse(kJob), account);
  ASSERT_FALSE(b);
  EXPECT_NE(b.error().message.find("another user"), std::string::npos) << b.error().message;

  spec::JobSpec preload = parse(kJob);
  preload.launcher = spec::Launcher::kPreload;
  auto c = makePlan(preload, context());
  ASSERT_FALSE(c);
  EXPECT_NE(c.error().message.find("launcher: preload"), std::string::npos) << c.error().message;

  PlanContext root = context();
  root.workdir = "/";
  auto d = makePlan(parse(kJob), root);
  ASSERT_FALSE(d);
  EXPECT_NE(d.error().message.find("workdir: '/'"), std::string::npos) << d.error().message;
}

TEST(ImageReference, WhatPodmanTakesIsTaken) {
  for (const char* ref :
       {"ubuntu", "ubuntu:22.04", "localhost/cohort-test:abc123", "docker.io/pytorch/pytorch:2.5.1",
        "registry.example:5000/team/train_v2:1.0-rc1", "quay.io/a__b/c.d-e",
        "localhost/x@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
        "7df027d7b0e3"}) {
    EXPECT_TRUE(spec::validImageReference(ref)) << ref;
  }
  for (const char* ref : {"", "Ubuntu", "UPPER/case:1", "a b", "x:", ":tag", "-x", "x/", "/x",
                          "a//b", "x:-tag", "a..b", "a___b", "host:port/x", "x@sha256:short",
                          "x@:0123456789abcdef0123456789abcdef", "x;rm -rf /", "x\n"}) {
    EXPECT_FALSE(spec::validImageReference(ref)) << ref;
  }
}

TEST(ImageReference, AJobFileWithABadOneNamesTheField) {
  auto spec = spec::parseJobFile(
      "name: x\ncommand: [python3]\nenvironment: {image: 'Not/An:image:ref'}\n", "job.yaml");
  ASSERT_TRUE(spec) << spec.error().message;
  auto valid = spec::validate(*spec);
  ASSERT_FALSE(valid);
  EXPECT_NE(valid.error().message.find("environment.image"), std::string::npos)
      << valid.error().message;
  EXPECT_NE(valid.error().message.find("is not an image reference"), std::string::npos)
      << valid.error().message;
}

}  // namespace
}  // namespace cohort::plan
