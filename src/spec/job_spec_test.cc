#include "spec/job_spec.h"

#include <gtest/gtest.h>

namespace cohort::spec {
namespace {

std::string errorOf(const std::string& yaml) {
  auto spec = parseJobFile(yaml, "job.yaml");
  if (spec) {
    auto valid = validate(*spec);
    return valid ? "" : valid.error().message;
  }
  return spec.error().message;
}

TEST(ParseJobFile, ReadsTheDesignExample) {
  auto spec = parseJobFile(R"(
name: digits-ddp
framework: pytorch
workdir: examples/pytorch
command: [python3, ddp_digits.py, --epochs, "5"]
hyperparameters: {lr: 0.05}
env: {OMP_NUM_THREADS: "1"}
roles:
  worker: {nodes: 2, procs_per_node: 2, resources: {gpus: 0, cpus: 1, memory: 2Gi}}
policy:
  success: [worker]
  max_restarts: 2
  grace_period: 30s
  max_runtime: 2h
)", "job.yaml");
  ASSERT_TRUE(spec) << spec.error().message;
  EXPECT_EQ(spec->name, "digits-ddp");
  EXPECT_EQ(spec->framework, Framework::kPyTorch);
  EXPECT_EQ(spec->command.size(), 4u);
  ASSERT_EQ(spec->hyperparameters.size(), 1u);
  EXPECT_EQ(spec->hyperparameters[0].second, "0.05");
  ASSERT_EQ(spec->roles.size(), 1u);
  EXPECT_EQ(spec->roles[0].nodes, 2);
  EXPECT_EQ(spec->roles[0].procs_per_node, 2);
  EXPECT_EQ(spec->roles[0].resources.memory_bytes, 2147483648LL);
  EXPECT_EQ(spec->policy.max_restarts, 2);
  EXPECT_EQ(spec->policy.grace_period.count(), 30000);
  EXPECT_EQ(spec->policy.max_runtime->count(), 7200000);
  EXPECT_TRUE(validate(*spec));
}

TEST(ParseJobFile, KeepsRoleOrder) {
  auto spec = parseJobFile("name: x\ncommand: [a]\nroles:\n  ps: {}\n  worker: {nodes: 2}\n",
                           "job.yaml");
  ASSERT_TRUE(spec);
  ASSERT_EQ(spec->roles.size(), 2u);
  EXPECT_EQ(spec->roles[0].name, "ps");
  EXPECT_EQ(spec->roles[1].name, "worker");
  EXPECT_EQ(totalNodes(*spec), 3);
}

TEST(ParseJobFile, UnknownFieldNamesFieldAndLine) {
  std::string msg = errorOf("name: x\ncommand: [a]\nnodse: 2\n");
  EXPECT_NE(msg.find("job.yaml:3"), std::string::npos) << msg;
  EXPECT_NE(msg.find("nodse: unknown field"), std::string::npos) << msg;
}

TEST(ParseJobFile, UnknownNestedFieldHasFullPath) {
  std::string msg = errorOf("name: x\ncommand: [a]\nroles:\n  worker: {nodes: 1, gpu: 2}\n");
  EXPECT_NE(msg.find("roles.worker.gpu: unknown field"), std::string::npos) << msg;
}

TEST(ParseJobFile, WrongTypeIsNamed) {
  std::string msg = errorOf("name: x\ncommand: [a]\nroles:\n  worker: {nodes: two}\n");
  EXPECT_NE(msg.find("roles.worker.nodes: expected an integer, got 'two'"), std::string::npos)
      << msg;
}

TEST(ParseJobFile, CpusMustBeAPositiveFiniteNumber) {
  for (const char* cpus : {"nan", "inf", "-1", "0", "1e3", "two"}) {
    std::string msg = errorOf(std::string("name: x\ncommand: [a]\nroles:\n  worker: "
                                          "{resources: {cpus: ") + cpus + "}}\n");
    EXPECT_NE(msg.find("roles.worker.resources.cpus: expected a positive number of CPUs"),
              std::string::npos)
        << cpus << ": " << msg;
  }
}

TEST(ParseJobFile, ZeroNodesIsRefused) {
  std::string msg = errorOf("name: x\ncommand: [a]\nroles:\n  worker: {nodes: 0}\n");
  EXPECT_NE(msg.find("roles.worker.nodes: must be at least 1, got 0"), std::string::npos) << msg;
}

TEST(ParseJobFile, BadDurationIsNamed) {
  std::string msg = errorOf("name: x\ncommand: [a]\npolicy: {grace_period: soon}\n");
  EXPECT_NE(msg.find("policy.grace_period: 'soon' is not a duration"), std::string::npos) << msg;
}

TEST(ParseJobFile, SyntaxErrorHasLine) {
  std::string msg = errorOf("name: x\ncommand: [a\n");
  EXPECT_NE(msg.find("not valid YAML"), std::string::npos) << msg;
}

TEST(ParseJobFile, UnsupportedFrameworkSaysWhatIsSupported) {
  std::string msg = errorOf("name: x\ncommand: [a]\nframework: caffe\n");
  EXPECT_NE(msg.find("(pytorch, mindspore, tensorflow, mpi, generic)"), std::string::npos) << msg;
}

TEST(ParseJobFile, InputsAndOutputs) {
  auto spec = parseJobFile(R"(
name: x
command: [a]
inputs:
  - {source: store://datasets/digits, target: data/digits}
  - {source: /srv/vocab.txt, target: vocab.txt, mode: link, arg: vocab}
outputs:
  - {source: output/, target: "store://models/{job}/", when: always}
)", "job.yaml");
  ASSERT_TRUE(spec) << spec.error().message;
  ASSERT_EQ(spec->inputs.size(), 2u);
  EXPECT_EQ(spec->inputs[0].source, "store://datasets/digits");
  EXPECT_EQ(spec->inputs[1].mode, Input::Mode::kLink);
  EXPECT_EQ(spec->inputs[1].arg, "vocab");
  ASSERT_EQ(spec->outputs.size(), 1u);
  EXPECT_TRUE(spec->outputs[0].always);
  EXPECT_EQ(spec->outputs[0].target, "store://models/{job}/");
}

TEST(ParseJobFile, InputTargetsStayInsideTheWorkDirectory) {
  for (const char* target : {"../escape", "/etc/passwd", "a/../../b"}) {
    std::string msg = errorOf(std::string("name: x\ncommand: [a]\ninputs: [{source: s, target: ") +
                              target + "}]\n");
    EXPECT_NE(msg.find("inputs[0].target: must be a relative path"), std::string::npos) << msg;
  }
  std::string msg = errorOf("name: x\ncommand: [a]\noutputs: [{source: ../x, target: /t}]\n");
  EXPECT_NE(msg.find("outputs[0].source: must be a path inside the job directory"),
            std::string::npos)
      << msg;
}

TEST(ParseJobFile, FieldsOfLaterVersionsAreRefusedNotIgnored) {
  std::string msg = errorOf("name: x\ncommand: [a]\npolicy: {hang_timeout: 15m}\n");
  EXPECT_NE(msg.find("policy.hang_timeout: not supported by this version"), std::string::npos)
      << msg;
}

TEST(ParseJobFile, FrameworkOptions) {
  auto spec = parseJobFile("name: x\ncommand: [a]\nframework: mindspore\nmode: rank_table\n"
                           "rank_table_version: '0.1'\ncompat: none\n"
                           "roles: {worker: {procs_per_node: auto}}\n", "j");
  ASSERT_TRUE(spec) << spec.error().message;
  EXPECT_EQ(spec->mindspore_mode, MindSporeMode::kRankTable);
  EXPECT_EQ(spec->rank_table_version, "0.1");
  EXPECT_FALSE(spec->compat_modelarts);
  EXPECT_EQ(spec->roles[0].procs_per_node, kAutoProcs);
  auto mpi = parseJobFile("name: x\ncommand: [a]\nframework: mpi\n", "j");
  EXPECT_EQ(mpi->launcher, Launcher::kMpirun) << "mpi defaults to one mpirun";
}

TEST(Validate, LauncherMustFitTheFramework) {
  EXPECT_NE(errorOf("name: x\ncommand: [a]\nframework: generic\nlauncher: torchrun\n")
                .find("launcher: 'torchrun' is for framework pytorch"),
            std::string::npos);
  EXPECT_NE(errorOf("name: x\ncommand: [a]\nlauncher: mpirun\n")
                .find("launcher: 'mpirun' is for framework mpi"),
            std::string::npos);
}

TEST(Validate, AscendRankTableNeedsEightDevicesPerMachine) {
  std::string msg = errorOf("name: x\ncommand: [a]\nframework: mindspore\nmode: rank_table\n"
                            "roles: {worker: {nodes: 2, procs_per_node: 4}}\n");
  EXPECT_NE(msg.find("needs 8 devices per machine, got 4"), std::string::npos) << msg;
  EXPECT_EQ(errorOf("name: x\ncommand: [a]\nframework: mindspore\nmode: rank_table\n"
                    "roles: {worker: {nodes: 2, procs_per_node: 8}}\n"), "");
}

TEST(Validate, TensorFlowRoleNames) {
  std::string msg = errorOf("name: x\ncommand: [a]\nframework: tensorflow\n"
                            "roles: {master: {}}\n");
  EXPECT_NE(msg.find("TensorFlow roles are chief, worker, ps and evaluator"), std::string::npos)
      << msg;
}

TEST(KeyRoles, TensorFlowChiefOrWorkersDecide) {
  auto ps = parseJobFile("name: x\ncommand: [a]\nframework: tensorflow\n"
                         "roles: {chief: {}, worker: {nodes: 2}, ps: {}}\n", "j");
  EXPECT_EQ(keyRoles(*ps), (std::vector<std::string>{"chief"}));
  auto pw = parseJobFile("name: x\ncommand: [a]\nframework: tensorflow\n"
                         "roles: {ps: {}, worker: {nodes: 2}}\n", "j");
  EXPECT_EQ(keyRoles(*pw), (std::vector<std::string>{"worker"}));
}

TEST(Validate, NeedsACommand) {
  std::string msg = errorOf("name: x\n");
  EXPECT_NE(msg.find("command: no command"), std::string::npos) << msg;
}

TEST(Validate, KeyRoleMustExist) {
  std::string msg = errorOf("name: x\ncommand: [a]\npolicy: {success: [chief]}\n");
  EXPECT_NE(msg.find("policy.success: no role named 'chief'"), std::string::npos) << msg;
}

TEST(Validate, NameMustBeUsableAsADirectory) {
  std::string msg = errorOf("name: ../etc\ncommand: [a]\n");
  EXPECT_NE(msg.find("name:"), std::string::npos) << msg;
}

TEST(Validate, CohortVariablesAreReserved) {
  std::string msg = errorOf("name: x\ncommand: [a]\nenv: {COHORT_RANK: '3'}\n");
  EXPECT_NE(msg.find("env.COHORT_RANK"), std::string::npos) << msg;
}

TEST(KeyRoles, DefaultIsEveryRole) {
  auto spec = parseJobFile("name: x\ncommand: [a]\nroles: {ps: {}, worker: {}}\n", "j");
  ASSERT_TRUE(spec);
  EXPECT_EQ(keyRoles(*spec), (std::vector<std::string>{"ps", "worker"}));
  spec->policy.success = {"worker"};
  EXPECT_EQ(keyRoles(*spec), (std::vector<std::string>{"worker"}));
}

}  // namespace
}  // namespace cohort::spec
