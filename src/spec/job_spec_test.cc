#include "spec/job_spec.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <regex>

namespace cohort::spec {
namespace {

using Json = nlohmann::ordered_json;

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
  auto valid = validate(*spec);
  EXPECT_TRUE(valid) << valid.error().message;
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
  EXPECT_NE(msg.find("(pytorch, mindspore, tensorflow, mpi, deepspeed, generic)"), std::string::npos) << msg;
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

const char kDebugJob[] =
    "name: x\ncommand: [python3, train.py]\nroles: {worker: {nodes: 2, procs_per_node: 2}}\n";

TEST(ParseJobFile, DebugNamesRanksPostMortemAndTheWaitLimit) {
  auto spec = parseJobFile(
      std::string(kDebugJob) + "debug: {ranks: [3, 1, 1], post_mortem: true, wait_limit: 5m}\n",
      "job.yaml");
  ASSERT_TRUE(spec) << spec.error().message;
  EXPECT_TRUE(spec->debug.enabled);
  EXPECT_EQ(spec->debug.ranks, (std::vector<int>{1, 3}));
  EXPECT_FALSE(spec->debug.all);
  EXPECT_TRUE(spec->debug.post_mortem);
  EXPECT_EQ(spec->debug.wait_limit, Millis(300000));
  EXPECT_TRUE(validate(*spec));
  EXPECT_TRUE(debugWaitsAtStart(spec->debug, 3));
  EXPECT_FALSE(debugWaitsAtStart(spec->debug, 2));

  auto all = parseJobFile(std::string(kDebugJob) + "debug: {ranks: all}\n", "job.yaml");
  ASSERT_TRUE(all);
  EXPECT_TRUE(all->debug.all);
  EXPECT_TRUE(debugWaitsAtStart(all->debug, 2));
  EXPECT_EQ(all->debug.wait_limit, Millis(30 * 60 * 1000)) << "the default: 30 minutes";
  auto none = parseJobFile(std::string(kDebugJob) + "debug: {}\n", "job.yaml");
  ASSERT_TRUE(none);
  EXPECT_TRUE(none->debug.enabled) << "breakpoint() pauses any rank";
  EXPECT_FALSE(debugWaitsAtStart(none->debug, 0));
}

TEST(ParseJobFile, DebugRoundTripsThroughTheJobFile) {
  auto spec = parseJobFile(std::string(kDebugJob) +
                               "debug: {ranks: [2], post_mortem: true, wait_limit: 90s, "
                               "connect: \"10.0.0.5:5678\"}\n",
                           "job.yaml");
  ASSERT_TRUE(spec) << spec.error().message;
  auto again = parseJobFile(toJobFile(*spec), "job.json");
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_EQ(again->debug.ranks, std::vector<int>{2});
  EXPECT_TRUE(again->debug.post_mortem);
  EXPECT_EQ(again->debug.wait_limit, Millis(90000));
  EXPECT_EQ(again->debug.connect, "10.0.0.5:5678");
  auto plain = parseJobFile(toJobFile(defaultSpec()), "job.json");
  ASSERT_TRUE(plain);
  EXPECT_FALSE(plain->debug.enabled) << "a job without debug: stays without";
}

// The job file a server keeps (and its console shows) says durations in the units a person
// writes them, exactly: `hang_timeout: 10m` reads 10m, never 600000ms.
TEST(ParseJobFile, DurationsRoundTripInTheirOwnUnits) {
  auto spec = parseJobFile(std::string(kDebugJob) +
                               "debug: {wait_limit: 90s}\npolicy: {hang_timeout: 10m, max_runtime: "
                               "1h30m, grace_period: 1500ms, heartbeat_timeout: 45s, "
                               "startup_timeout: 61001ms}\n",
                           "job.yaml");
  ASSERT_TRUE(spec) << spec.error().message;
  const std::string text = toJobFile(*spec);
  for (const char* said : {"\"hang_timeout\":\"10m\"", "\"max_runtime\":\"1h30m\"",
                           "\"grace_period\":\"1s500ms\"", "\"heartbeat_timeout\":\"45s\"",
                           "\"startup_timeout\":\"1m1s1ms\"", "\"wait_limit\":\"1m30s\""}) {
    EXPECT_NE(text.find(said), std::string::npos) << said << " in " << text;
  }
  auto again = parseJobFile(text, "job.json");
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_EQ(again->policy.hang_timeout, Millis(600000));
  EXPECT_EQ(again->policy.max_runtime, Millis(5400000));
  EXPECT_EQ(again->policy.grace_period, Millis(1500));
  EXPECT_EQ(again->policy.startup_timeout, Millis(61001));
}

TEST(ValidateJobSpec, DebugRefusesWhatCannotBeDebugged) {
  auto refused = [](const std::string& tail) { return errorOf(std::string(kDebugJob) + tail); };
  EXPECT_NE(
      refused("debug: {ranks: [7]}\n")
          .find("job.yaml:4: debug.ranks: rank 7 does not exist: the job has 4 rank(s), 0 to 3"),
      std::string::npos)
      << refused("debug: {ranks: [7]}\n");
  EXPECT_NE(refused("launcher: torchrun\ndebug: {}\n").find("debug: needs launcher: direct"),
            std::string::npos);
  EXPECT_EQ(refused("launcher: preload\ndebug: {}\n"), "") << "preloaded ranks are debugged too";
  EXPECT_NE(errorOf("name: x\ncommand: [bash, run.sh]\ndebug: {}\n").find("debugs Python ranks"),
            std::string::npos);
  EXPECT_NE(refused("debug: {wait_limit: 8d}\n").find("debug.wait_limit"), std::string::npos);
  EXPECT_NE(refused("debug: {port: 80}\n").find("debug.port: rank r listens on port + r"),
            std::string::npos);
  EXPECT_NE(refused("debug: {port: 65534}\n").find("debug.port"), std::string::npos)
      << "4 ranks from 65534 go past 65535";
  EXPECT_NE(refused("debug: {connect: ide}\n").find("debug.connect: expected HOST:PORT"),
            std::string::npos);
  EXPECT_NE(refused("debug: {connect: \"h:1\", port: 5678}\n").find("not both"), std::string::npos);
  EXPECT_NE(
      refused("debug: {post_mortem: yes}\n").find("debug.post_mortem: expected true or false"),
      std::string::npos);
  EXPECT_NE(refused("debug: {rank: [1]}\n").find("debug.rank: unknown field"), std::string::npos);
  EXPECT_NE(refused("debug: {ranks: [a]}\n").find("debug.ranks[0]: expected an integer"),
            std::string::npos);
  EXPECT_EQ(refused("debug: {ranks: [0, 3], port: 5678}\n"), "");
}

TEST(ValidateJobSpec, PdbTakesOneRankOfALocalJob) {
  auto spec = parseJobFile(std::string(kDebugJob) + "debug: {ranks: all}\n", "job.yaml");
  ASSERT_TRUE(spec);
  spec->debug.pdb = true;
  auto refused = validate(*spec);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("pdb takes one rank"), std::string::npos);
  spec->debug.all = false;
  spec->debug.ranks = {1};
  EXPECT_TRUE(validate(*spec));
  spec->backend = Backend::kSlurm;
  EXPECT_FALSE(validate(*spec));
}

TEST(ParseJobFile, HangAndStartupTimeouts) {
  auto spec = parseJobFile(
      "name: x\ncommand: [a]\npolicy: {hang_timeout: 15m, startup_timeout: 1h}\n", "job.yaml");
  ASSERT_TRUE(spec) << spec.error().message;
  EXPECT_EQ(spec->policy.hang_timeout, Millis(15 * 60000));
  EXPECT_EQ(spec->policy.startup_timeout, Millis(3600000));
  std::string msg = errorOf("name: x\ncommand: [a]\npolicy: {hang_timeout: 2s}\n");
  EXPECT_NE(msg.find("policy.hang_timeout: must be from 5s to 365d"), std::string::npos) << msg;
}

TEST(ParseJobFile, StopSignalByNameWithOrWithoutSig) {
  for (const auto& [text, sig] : std::vector<std::pair<std::string, int>>{{"SIGTERM", SIGTERM},
                                                                          {"TERM", SIGTERM},
                                                                          {"SIGINT", SIGINT},
                                                                          {"usr1", SIGUSR1},
                                                                          {"SIGUSR2", SIGUSR2},
                                                                          {"HUP", SIGHUP},
                                                                          {"SIGQUIT", SIGQUIT}}) {
    auto spec =
        parseJobFile("name: x\ncommand: [a]\npolicy: {stop_signal: " + text + "}\n", "job.yaml");
    ASSERT_TRUE(spec) << spec.error().message;
    EXPECT_EQ(spec->policy.stop_signal, sig) << text;
    EXPECT_TRUE(validate(*spec));
    // What the server is sent reads back the same.
    auto again = parseJobFile(toJobFile(*spec), "sent.json");
    ASSERT_TRUE(again) << again.error().message;
    EXPECT_EQ(again->policy.stop_signal, sig);
  }
  EXPECT_EQ(parseJobFile("name: x\ncommand: [a]\n", "job.yaml")->policy.stop_signal, SIGTERM);
  EXPECT_NE(toJobFile(defaultSpec()).find("\"stop_signal\":\"SIGTERM\""), std::string::npos);
}

TEST(ParseJobFile, AStopSignalThatGivesNoNoticeIsRefusedWithTheFieldNamed) {
  std::string kill = errorOf("name: x\ncommand: [a]\npolicy:\n  stop_signal: SIGKILL\n");
  EXPECT_NE(kill.find("job.yaml:4: policy.stop_signal: SIGKILL cannot be caught, so it gives a "
                      "rank no notice"),
            std::string::npos)
      << kill;
  EXPECT_NE(kill.find("SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2"), std::string::npos);
  std::string stop = errorOf("name: x\ncommand: [a]\npolicy: {stop_signal: STOP}\n");
  EXPECT_NE(stop.find("policy.stop_signal: SIGSTOP cannot be caught"), std::string::npos) << stop;
  std::string unknown = errorOf("name: x\ncommand: [a]\npolicy: {stop_signal: SIGFOO}\n");
  EXPECT_NE(unknown.find("job.yaml:3: policy.stop_signal: unknown stop signal 'SIGFOO': use one "
                         "of (SIGTERM"),
            std::string::npos)
      << unknown;
  EXPECT_NE(errorOf("name: x\ncommand: [a]\npolicy: {stop_signal: 9}\n").find("unknown stop"),
            std::string::npos);
  JobSpec spec = defaultSpec();
  spec.name = "x";
  spec.command = {"a"};
  spec.policy.stop_signal = SIGKILL;  // a spec made in code is held to the same rule
  auto valid = validate(spec);
  ASSERT_FALSE(valid);
  EXPECT_NE(valid.error().message.find("policy.stop_signal: SIGKILL cannot be caught"),
            std::string::npos)
      << valid.error().message;
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

TEST(ParseJobFile, ClusterFields) {
  auto spec = parseJobFile(R"(
name: big
command: [python3, train.py]
backend: slurm
network: {cidr: 10.77.0.0/24}
slurm: {partition: gpu, account: ml-team, qos: high, options: [--exclusive, --constraint=ib]}
)", "job.yaml");
  ASSERT_TRUE(spec) << spec.error().message;
  EXPECT_EQ(spec->backend, Backend::kSlurm);
  EXPECT_EQ(spec->network.cidr, "10.77.0.0/24");
  EXPECT_EQ(spec->slurm.partition, "gpu");
  EXPECT_EQ(spec->slurm.account, "ml-team");
  EXPECT_EQ(spec->slurm.qos, "high");
  EXPECT_EQ(spec->slurm.options, (std::vector<std::string>{"--exclusive", "--constraint=ib"}));
  EXPECT_TRUE(validate(*spec));
  // What the server is sent reads back the same.
  auto again = parseJobFile(toJobFile(*spec), "sent.json");
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_EQ(again->backend, Backend::kSlurm);
  EXPECT_EQ(again->network.cidr, spec->network.cidr);
  EXPECT_EQ(again->slurm.options, spec->slurm.options);
  EXPECT_EQ(again->slurm.qos, "high");
}

TEST(Validate, VolcanoFieldsAreKubernetesNames) {
  const std::string base = "name: x\ncommand: [python3, t.py]\nbackend: volcano\n";
  EXPECT_NE(errorOf(base + "volcano: {queue: q, bogus: 1}\n").find("volcano.bogus"),
            std::string::npos);
  EXPECT_NE(errorOf(base + "volcano: {priority_class: 'High Priority'}\n")
                .find("volcano.priority_class: 'High Priority' is not a Kubernetes name"),
            std::string::npos);
  EXPECT_NE(errorOf(base + "volcano: {device_resource: amd.com/gpu}\n")
                .find("volcano.device_resource: 'amd.com/gpu': expected nvidia.com/gpu"),
            std::string::npos);
  EXPECT_NE(errorOf(base + "environment: {img: x}\n").find("environment.img"), std::string::npos);
  EXPECT_NE(errorOf(base + "environment: {image: 'a b'}\n")
                .find("environment.image: 'a b' is not an image reference"),
            std::string::npos);
  EXPECT_EQ(errorOf(base + "volcano: {queue: research.gpu, priority_class: high}\n"
                           "environment: {image: ghcr.io/lab/train:1.2}\n"),
            "");
}

TEST(Validate, ClusterFieldsCannotInjectIntoTheBatchScript) {
  const std::string base = "name: x\ncommand: [true]\n";
  EXPECT_NE(errorOf(base + "backend: pbs\n")
                .find("backend: unknown backend 'pbs' (local, slurm, volcano, ssh)"),
            std::string::npos);
  EXPECT_NE(errorOf(base + "network: {interface: eth0, cidr: 10.0.0.0/8}\n").find("not both"),
            std::string::npos);
  EXPECT_NE(errorOf(base + "network: {cidr: 10.0.0/8}\n").find("network.cidr"), std::string::npos);
  EXPECT_NE(errorOf(base + "network: {interface: \"eth0; rm\"}\n").find("network.interface"),
            std::string::npos);
  EXPECT_NE(errorOf(base + "slurm: {partition: \"gpu\\n#SBATCH --uid=0\"}\n")
                .find("slurm.partition"),
            std::string::npos);
  EXPECT_NE(errorOf(base + "slurm: {options: [\"--comment=a b\"]}\n").find("slurm.options[0]"),
            std::string::npos);
  EXPECT_NE(errorOf(base + "slurm: {options: [exclusive]}\n").find("slurm.options[0]"),
            std::string::npos);
  EXPECT_NE(errorOf(base + "slurm: {options: [--nodes=9]}\n").find("cohort sets --nodes itself"),
            std::string::npos);
  EXPECT_EQ(errorOf(base + "slurm: {options: [--time-min=10, --mail-user=a@b.c]}\n"), "");
}

TEST(Validate, LauncherMustFitTheFramework) {
  EXPECT_NE(errorOf("name: x\ncommand: [a]\nframework: generic\nlauncher: torchrun\n")
                .find("launcher: 'torchrun' is for framework pytorch"),
            std::string::npos);
  EXPECT_NE(errorOf("name: x\ncommand: [a]\nlauncher: mpirun\n")
                .find("launcher: 'mpirun' is for framework mpi"),
            std::string::npos);
  EXPECT_NE(errorOf("name: x\ncommand: [a]\nframework: mpi\n"
                    "roles: {worker: {nodes: 1}, helper: {nodes: 1}}\n")
                .find("launcher: 'mpirun' runs one role; this job has 2"),
            std::string::npos);
}

TEST(Validate, PreloadNamesModulesOfThePreloadLauncherOnly) {
  EXPECT_EQ(errorOf("name: x\nlauncher: preload\npreload: [torch, numpy.linalg, my_pkg]\n"
                    "command: [python3, t.py]\n"), "");
  EXPECT_NE(errorOf("name: x\npreload: [torch]\ncommand: [python3, t.py]\n")
                .find("preload: names the modules of launcher: preload"),
            std::string::npos);
  for (const char* bad : {"\"os; rm\"", "\"1abc\"", "\"a..b\"", "\".a\"", "\"\""}) {
    EXPECT_NE(errorOf(std::string("name: x\nlauncher: preload\npreload: [") + bad +
                      "]\ncommand: [python3, t.py]\n")
                  .find("is not a Python module name"),
              std::string::npos)
        << bad;
  }
  // --launcher direct sets a job file's preload launcher aside, its modules with it.
  auto spec = parseJobFile("name: x\nlauncher: preload\npreload: [torch]\ncommand: [python3, t.py]\n",
                           "job.yaml");
  ASSERT_TRUE(spec);
  spec->launcher = Launcher::kDirect;
  spec->origin.setByFlag("launcher", "--launcher");
  EXPECT_TRUE(validate(*spec)) << validate(*spec).error().message;
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

// --- Limits: every count, size and duration has one, and its refusal names the field and it.

std::string withRoles(const std::string& roles) {
  return "name: x\ncommand: [a]\nroles: " + roles + "\n";
}

TEST(Limits, AnOverflowingDurationIsRefusedNotWrappedNegative) {
  std::string msg = errorOf("name: x\ncommand: [a]\npolicy: {grace_period: \"99999999999999999999h\"}\n");
  EXPECT_NE(msg.find("job.yaml:3: policy.grace_period: '99999999999999999999h' is longer than"),
            std::string::npos)
      << msg;
}

TEST(Limits, HeartbeatTimeoutIsFromOneSecondToOneHour) {
  EXPECT_EQ(errorOf("name: x\ncommand: [a]\npolicy: {heartbeat_timeout: 2s}\n"), "");
  for (const std::string& bad : std::vector<std::string>{"500ms", "2h"}) {
    std::string msg = errorOf("name: x\ncommand: [a]\npolicy:\n  heartbeat_timeout: " + bad + "\n");
    EXPECT_NE(msg.find("job.yaml:4: policy.heartbeat_timeout: must be from 1s to 1h"),
              std::string::npos)
        << msg;
  }
}

TEST(Limits, GracePeriodAndMaxRuntimeHaveCeilings) {
  EXPECT_EQ(errorOf("name: x\ncommand: [a]\npolicy: {grace_period: 30d, max_runtime: 365d}\n"), "");
  std::string grace = errorOf("name: x\ncommand: [a]\npolicy:\n  grace_period: 31d\n");
  EXPECT_NE(grace.find("job.yaml:4: policy.grace_period: "), std::string::npos) << grace;
  EXPECT_NE(grace.find("longer than 30 days"), std::string::npos) << grace;
  std::string runtime = errorOf("name: x\ncommand: [a]\npolicy: {max_runtime: 366d}\n");
  EXPECT_NE(runtime.find("job.yaml:3: policy.max_runtime: "), std::string::npos) << runtime;
  EXPECT_NE(runtime.find("longer than 365 days"), std::string::npos) << runtime;
}

TEST(Limits, HugeRolesAreRefusedBeforeAnyPlanIsMade) {
  std::string msg = errorOf(withRoles("{worker: {nodes: 65536, procs_per_node: 65536}}"));
  EXPECT_NE(msg.find("job.yaml:3: roles.worker.nodes: must be at most 1024, got 65536"),
            std::string::npos)
      << msg;
  msg = errorOf(withRoles("{worker: {procs_per_node: 65536}}"));
  EXPECT_NE(msg.find("roles.worker.procs_per_node: must be at most 1024"), std::string::npos) << msg;
  msg = errorOf(withRoles("{worker: {nodes: 8, procs_per_node: 1024}}"));
  EXPECT_NE(msg.find("job.yaml:3: roles: 8192 processes in all"), std::string::npos) << msg;
  EXPECT_NE(msg.find("at most 4096"), std::string::npos) << msg;
  msg = errorOf(withRoles("{a: {nodes: 1024}, b: {nodes: 1}}"));
  EXPECT_NE(msg.find("roles: 1025 nodes in all; at most 1024"), std::string::npos) << msg;
  EXPECT_EQ(errorOf(withRoles("{worker: {nodes: 4, procs_per_node: 1024}}")), "");
  EXPECT_EQ(errorOf(withRoles("{worker: {nodes: 1024, procs_per_node: 1}}")), "");
}

TEST(Limits, ThousandsOfRolesAreRefusedByCount) {
  std::string roles = "{";
  for (int i = 0; i < 2000; ++i) roles += (i ? ", r" : "r") + std::to_string(i) + ": {}";
  std::string msg = errorOf(withRoles(roles + "}"));
  EXPECT_NE(msg.find("job.yaml:3: roles: 2000 roles; at most 64"), std::string::npos) << msg;
}

TEST(Limits, TooManyEnvKeysAreRefusedByCount) {
  std::string env = "{";
  for (int i = 0; i < 5000; ++i) env += (i ? ", K" : "K") + std::to_string(i) + ": v";
  std::string msg = errorOf("name: x\ncommand: [a]\nenv: " + env + "}\n");
  EXPECT_NE(msg.find("job.yaml:3: env: 5000 entries; at most 4096"), std::string::npos) << msg;
}

TEST(Limits, AJobFileOverOneMebibyteIsRefusedUnread) {
  std::string yaml = "name: x\ncommand: [a]\nenv:\n";
  for (int i = 0; yaml.size() <= kMaxJobFileBytes; ++i) yaml += "  K" + std::to_string(i) + ": v\n";
  std::string msg = errorOf(yaml);
  EXPECT_NE(msg.find("job.yaml:1: job: the job file has"), std::string::npos) << msg;
  EXPECT_NE(msg.find("at most 1048576 (1 MiB"), std::string::npos) << msg;
}

TEST(Limits, LongValuesAreRefusedWithTheirField) {
  const std::string big(kMaxValueBytes + 1, 'v');
  std::string msg = errorOf("name: x\ncommand: [a]\nenv:\n  BIG: " + big + "\n");
  EXPECT_NE(msg.find("job.yaml:4: env.BIG: the value has 131073 bytes; at most 131072"),
            std::string::npos)
      << msg.substr(0, 200);
  msg = errorOf("name: x\ncommand: [a, " + big + "]\n");
  EXPECT_NE(msg.find("job.yaml:2: command[1]: has 131073 bytes"), std::string::npos)
      << msg.substr(0, 200);
  msg = errorOf("name: x\ncommand: [a]\nworkdir: " + std::string(5000, 'd') + "\n");
  EXPECT_NE(msg.find("job.yaml:3: workdir: has 5000 bytes; at most 4096"), std::string::npos)
      << msg.substr(0, 200);
}

// Bytes that are not UTF-8 would make the plan's JSON throw: refused with their field, from a job
// file as from flags (--env, the command after --).
TEST(Limits, BytesThatAreNotUtf8AreRefusedWithTheirField) {
  std::string msg = errorOf(
      "name: x\ncommand: [a]\nenv:\n  BAD: a\xff\xfe"
      "b\n");
  EXPECT_NE(msg.find("job.yaml:4: job: not UTF-8 text, or a control character"),
            std::string::npos)
      << msg;
  JobSpec spec;
  spec.name = "x";
  spec.command = {"a", std::string("b\xff")};
  auto checked = validate(spec);
  ASSERT_FALSE(checked);
  EXPECT_NE(checked.error().message.find("command[1]: is not UTF-8 text"), std::string::npos)
      << checked.error().message;
  spec.command = {"a"};
  spec.workdir = std::string("/tmp/\xc3");
  checked = validate(spec);
  ASSERT_FALSE(checked);
  EXPECT_NE(checked.error().message.find("workdir: is not UTF-8 text"), std::string::npos)
      << checked.error().message;
}

TEST(Limits, RanksTimesVariablesIsBoundedSoPlanningStaysFast) {
  std::string env = "{";
  for (int i = 0; i < 2000; ++i) env += (i ? ", K" : "K") + std::to_string(i) + ": v";
  std::string msg = errorOf("name: x\ncommand: [a]\nenv: " + env + "}\n" +
                            "roles: {worker: {nodes: 4, procs_per_node: 1024}}\n");
  EXPECT_NE(msg.find("job.yaml:4: roles: 4096 ranks, each with about 2051"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("at most 524288"), std::string::npos) << msg;
  // Every rank's host list names every node: many nodes and many ranks make a large plan.
  msg = errorOf(withRoles("{worker: {nodes: 512, procs_per_node: 8}}"));
  EXPECT_NE(msg.find("job.yaml:3: roles: 4096 ranks on 512 nodes"), std::string::npos) << msg;
  EXPECT_NE(msg.find("at most 32 MiB"), std::string::npos) << msg;
  EXPECT_EQ(errorOf(withRoles("{worker: {nodes: 128, procs_per_node: 32}}")), "");
  // TensorFlow's TF_CONFIG names every task in every rank's copy.
  msg = errorOf("name: x\ncommand: [a]\nframework: tensorflow\n"
                "roles: {worker: {nodes: 4, procs_per_node: 1024}}\n");
  EXPECT_NE(msg.find("job.yaml:4: roles: 4096 ranks on 4 nodes"), std::string::npos) << msg;
  EXPECT_EQ(errorOf("name: x\ncommand: [a]\nframework: tensorflow\n"
                    "roles: {worker: {nodes: 4, procs_per_node: 256}}\n"),
            "");
}

TEST(Limits, CountsAndRangesAlsoHoldForSpecsNotFromAFile) {
  JobSpec spec = defaultSpec();
  spec.name = "x";
  spec.command = {"a"};
  spec.origin.setByFlag("roles.worker.nodes", "--nodes");
  spec.roles[0].nodes = 5000;
  auto valid = validate(spec);
  ASSERT_FALSE(valid);
  EXPECT_EQ(valid.error().message, "--nodes: roles.worker.nodes: must be at most 1024, got 5000");
  spec.roles[0].nodes = 1;
  spec.policy.max_restarts = 1000000;
  EXPECT_FALSE(validate(spec));
  spec.policy.max_restarts = 0;
  for (int i = 0; i < kMaxEnv + 1; ++i) spec.env.emplace_back("K" + std::to_string(i), "v");
  valid = validate(spec);
  ASSERT_FALSE(valid);
  EXPECT_NE(valid.error().message.find("env: 4097 entries; at most 4096"), std::string::npos);
}

// --- Types: a JSON job file (what the server parses) is typed; YAML's quotes mean a string.

TEST(Types, AQuotedNumberIsAStringWhereAnIntegerIsWanted) {
  Json job = {{"name", "x"}, {"command", {"a"}}, {"roles", {{"worker", {{"nodes", "2"}}}}}};
  auto json = parseJobFile(job.dump(), "job");
  ASSERT_FALSE(json);
  EXPECT_NE(json.error().message.find(
                "job:1: roles.worker.nodes: expected an integer, got the string '2'"),
            std::string::npos)
      << json.error().message;
  std::string msg = errorOf(withRoles("{worker: {nodes: \"2\"}}"));
  EXPECT_NE(msg.find("job.yaml:3: roles.worker.nodes: expected an integer, got the string '2'"),
            std::string::npos)
      << msg;
  EXPECT_NE(errorOf("name: x\ncommand: [a]\npolicy: {max_restarts: '1'}\n")
                .find("policy.max_restarts: expected an integer, got the string '1'"),
            std::string::npos);
  EXPECT_EQ(errorOf(withRoles("{worker: {nodes: 2, resources: {gpus: 0}}}")), "");
}

TEST(Types, AListOrMappingWhereAValueIsWantedSaysWhatItGot) {
  std::string msg = errorOf("name: [x]\ncommand: [a]\n");
  EXPECT_NE(msg.find("job.yaml:1: name: expected a string, got a list"), std::string::npos) << msg;
  msg = errorOf("name: x\ncommand: [a]\nenv: {A: {b: c}}\n");
  EXPECT_NE(msg.find("job.yaml:3: env.A: expected a string, got a mapping"), std::string::npos)
      << msg;
  Json job = {{"name", "x"}, {"command", {"a"}}, {"policy", {{"grace_period", {1, 2}}}}};
  auto json = parseJobFile(job.dump(), "job");
  ASSERT_FALSE(json);
  EXPECT_NE(json.error().message.find("policy.grace_period: expected a string, got a list"),
            std::string::npos)
      << json.error().message;
}

TEST(Types, AFieldGivenTwiceIsRefused) {
  std::string msg = errorOf("name: x\ncommand: [a]\nname: y\n");
  EXPECT_NE(msg.find("job.yaml:3: name: given twice (first on line 1)"), std::string::npos) << msg;
  msg = errorOf("name: x\ncommand: [a]\nenv:\n  A: 1\n  A: 2\n");
  EXPECT_NE(msg.find("job.yaml:5: env.A: given twice (first on line 4)"), std::string::npos) << msg;
}

TEST(Types, TheJsonFormRoundTrips) {
  auto spec = parseJobFile(
      "name: x\ncommand: [a, b]\nhyperparameters: {lr: 0.1}\nenv: {A: '1'}\n"
      "roles: {ps: {}, worker: {nodes: 2, procs_per_node: auto, resources: {memory: 1Gi}}}\n"
      "policy: {max_restarts: 2, grace_period: 5s, max_runtime: 1h, success: [worker]}\n",
      "job.yaml");
  ASSERT_TRUE(spec) << spec.error().message;
  auto again = parseJobFile(toJobFile(*spec), "job");
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_EQ(toJobFile(*again), toJobFile(*spec));
  EXPECT_TRUE(validate(*again));
}

// --- Depth: nesting is refused before yaml-cpp recurses into it (libyaml's events count it).

TEST(Depth, DeepJsonIsRefusedBeforeParsing) {
  const std::string deep = "{\"name\": " + std::string(100000, '[') + std::string(100000, ']') + "}";
  auto spec = parseJobFile(deep, "job");
  ASSERT_FALSE(spec);
  EXPECT_NE(spec.error().message.find("job:1: job: nested deeper than 64 levels"),
            std::string::npos)
      << spec.error().message;
}

TEST(Depth, DeepYamlFlowCollectionsAreRefusedBeforeParsing) {
  std::string msg = errorOf("name: x\ncommand: [a]\nenv: " + std::string(100000, '[') + "\n");
  EXPECT_NE(msg.find("job.yaml:3: job: nested deeper than 64 levels"), std::string::npos) << msg;
  msg = errorOf("name: x\ncommand: [a]\nenv:\n  A: {b: " + std::string(100, '{') + "\n");
  EXPECT_NE(msg.find("job.yaml:4: job: nested deeper than 64 levels"), std::string::npos) << msg;
}

TEST(Depth, BracketsInsideTextAreNotNesting) {
  const std::string brackets(200, '[');
  auto spec = parseJobFile("name: x\ncommand: [echo, '" + brackets + "', \"" + brackets +
                               "\"]\nenv:\n  A: echo " + brackets + "\nhyperparameters:\n  b: a" +
                               brackets + "  # " + brackets + "\nworkdir: |\n  " + brackets + "\n",
                           "job.yaml");
  ASSERT_TRUE(spec) << spec.error().message;
  EXPECT_EQ(spec->command[1], brackets);
  EXPECT_EQ(spec->env[0].second, "echo " + brackets);
}

TEST(Depth, DeepBlockNestingIsRefusedBeforeParsingToo) {
  // Block collections count as flow ones do: libyaml's events say how deep each one is.
  std::string deep = "name: x\ncommand: [a]\nenv:\n  A:\n    ";
  for (int i = 0; i < 2000; ++i) deep += "- ";
  std::string msg = errorOf(deep + "x\n");
  EXPECT_NE(msg.find("job.yaml:5: job: nested deeper than 64 levels"), std::string::npos) << msg;
  deep = "name: x\ncommand: [a]\nenv:\n  A:\n    ";
  for (int i = 0; i < 30; ++i) deep += "- ";
  msg = errorOf(deep + "x\n");
  EXPECT_NE(msg.find("job.yaml:5: env.A: expected a string, got a list"), std::string::npos) << msg;
  std::string blocks;
  for (int i = 0; i < 2000; ++i) blocks += std::string(static_cast<size_t>(i), ' ') + "- \n";
  msg = errorOf(blocks);
  EXPECT_TRUE(std::regex_search(msg, std::regex("^job\\.yaml:[0-9]+: job: "))) << msg;
}

TEST(Depth, AnchorsThatWouldExpandToMillionsOfValuesAreRefused) {
  // Each line nine aliases of the one before: 9^8 values from eight lines.
  std::string bomb = "name: x\ncommand: [a]\nenv:\n  A: &a0 [x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i < 8; ++i) {
    const std::string prev = "*a" + std::to_string(i - 1);
    bomb += "  B" + std::to_string(i) + ": &a" + std::to_string(i) + " [" + prev;
    for (int k = 0; k < 8; ++k) bomb += ", " + prev;
    bomb += "]\n";
  }
  const std::string msg = errorOf(bomb);
  EXPECT_NE(msg.find("job: more than 200000 values (aliases count each time they are used)"),
            std::string::npos)
      << msg;
  // An alias of a value written once is that value.
  EXPECT_EQ(errorOf("name: &n x\ncommand: [*n]\n"), "");
}

TEST(Depth, TextAfterTheJobIsRefusedWithoutEndlessDocuments) {
  // A parser that yielded empty documents without end after this was found by the fuzz test.
  std::string msg = errorOf(",");
  EXPECT_NE(msg.find("job.yaml:1: job: not valid YAML: did not find expected node content"),
            std::string::npos)
      << msg;
  msg = errorOf("name: x\ncommand: [a]\n---\nname: y\n");
  EXPECT_NE(msg.find("job.yaml:3: job: text after the end of the job"), std::string::npos) << msg;
  EXPECT_EQ(errorOf("---\nname: x\ncommand: [a]\n...\n"), "");
}

// --- Every refusal of a job file names file:line and the field.

struct BadFile {
  std::string yaml;   // a whole job file
  std::string field;  // the path its message must name
};

// A valid job with `field: value` set at the given place; `value` is YAML text.
std::vector<BadFile> generatedCorpus() {
  const std::vector<std::string> not_scalars = {"[1, 2]", "{a: 1}", "~", "[]", "{}"};
  const std::vector<std::string> not_integers = {"two",   "\"2\"",  "'3'", "1.5",  "-1",
                                                 "1e3",   "true",   "99999999999999999999",
                                                 "0x10",  "[1]",    "{n: 1}", "~"};
  const std::vector<std::string> not_durations = {"soon",  "-5s",    "1h2", "99999999999999999999h",
                                                  "400d",  "[1s]", "{a: 1}", "\"\"", "~"};
  std::vector<BadFile> corpus;
  auto top = [&](const std::string& key, const std::string& value, const std::string& field) {
    std::string yaml = "name: x\ncommand: [a]\n";
    if (key == "name" || key == "command") yaml = key == "name" ? "command: [a]\n" : "name: x\n";
    corpus.push_back({yaml + key + ": " + value + "\n", field});
  };
  for (const std::string& key : std::vector<std::string>{"name", "framework", "launcher", "mode", "rank_table_version",
                                  "compat", "workdir"}) {
    for (const auto& v : not_scalars) top(key, v, key);
  }
  for (const std::string& v : std::vector<std::string>{"caffe", "\"\"", "1"}) top("framework", v, "framework");
  for (const std::string& v : std::vector<std::string>{"ssh", "1"}) top("launcher", v, "launcher");
  for (const std::string& v : std::vector<std::string>{"static", "2.0"}) top("mode", v, "mode");
  top("rank_table_version", "\"2.0\"", "rank_table_version");
  top("compat", "slurm", "compat");
  for (const std::string& v : std::vector<std::string>{"[[a]]", "[{a: 1}]", "{a: 1}", "~"}) top("command", v, "command");
  for (const std::string& v : std::vector<std::string>{"[a]", "x", "~", "{a: [1]}", "{a: {b: 1}}"}) {
    top("env", v, "env");
    top("hyperparameters", v, "hyperparameters");
  }
  for (const std::string& v : std::vector<std::string>{"[a]", "x", "~", "{}", "{worker: [1]}", "{worker: x}"}) {
    top("roles", v, "roles");
  }
  for (const std::string& v : std::vector<std::string>{"x", "{a: 1}", "[x]", "[{source: s}]", "[{target: t}]",
                        "[{source: s, target: t, mode: move}]", "[{source: s, target: ../t}]",
                        "[{source: s, target: /t}]", "[{source: s, target: t, size: 1}]",
                        "[{source: [s], target: t}]"}) {
    top("inputs", v, "inputs");
  }
  for (const std::string& v : std::vector<std::string>{"x", "{a: 1}", "[x]", "[{source: s}]", "[{source: /o, target: t}]",
                        "[{source: o, target: t, when: never}]", "[{source: o, target: {}}]"}) {
    top("outputs", v, "outputs");
  }
  for (const std::string& v :
       std::vector<std::string>{"x", "[1]", "{restarts: 1}", "{hang_timeout: 1s}",
                                "{success: {a: 1}}", "{success: [chief]}"}) {
    top("policy", v, "policy");
  }
  top("debug", "{ranks: [1]}", "debug");
  top("nodes", "2", "nodes");
  top("Name", "x", "Name");

  auto nested = [&](const std::string& yaml_tail, const std::string& field) {
    corpus.push_back({"name: x\ncommand: [a]\n" + yaml_tail, field});
  };
  for (const auto& v : not_integers) {
    nested("roles:\n  worker:\n    nodes: " + v + "\n", "roles.worker.nodes");
    nested("roles:\n  worker:\n    procs_per_node: " + v + "\n", "roles.worker.procs_per_node");
    nested("roles:\n  worker:\n    resources:\n      gpus: " + v + "\n",
           "roles.worker.resources.gpus");
    nested("policy:\n  max_restarts: " + v + "\n", "policy.max_restarts");
  }
  for (const auto& v : not_durations) {
    nested("policy:\n  grace_period: " + v + "\n", "policy.grace_period");
    nested("policy:\n  max_runtime: " + v + "\n", "policy.max_runtime");
  }
  for (const std::string& v : std::vector<std::string>{"0", "-1", "nan", "inf", "1e3", "two", "5000", "[1]"}) {
    nested("roles:\n  worker:\n    resources:\n      cpus: " + v + "\n",
           "roles.worker.resources.cpus");
  }
  for (const std::string& v : std::vector<std::string>{"2 GB", "-1", "1Pi", "99999999999Ti", "[1]"}) {
    nested("roles:\n  worker:\n    resources:\n      memory: " + v + "\n",
           "roles.worker.resources.memory");
  }
  nested("roles:\n  worker:\n    gpu: 1\n", "roles.worker.gpu");
  nested("roles:\n  worker:\n    resources:\n      disk: 1\n", "roles.worker.resources.disk");
  nested("roles:\n  worker:\n    nodes: 5000\n", "roles.worker.nodes");
  nested("roles:\n  worker:\n    procs_per_node: 2000\n", "roles.worker.procs_per_node");
  nested("roles:\n  worker:\n    resources:\n      gpus: 2000\n", "roles.worker.resources.gpus");
  nested("roles:\n  a/b: {}\n", "roles.a/b");
  nested("roles:\n  worker: {}\n  worker: {}\n", "roles.worker");
  nested("roles:\n  master: {}\nframework: tensorflow\n", "roles.master");
  nested("policy:\n  grace_period: 31d\n", "policy.grace_period");
  nested("roles:\n  ps: {}\n  worker: {}\nlauncher: torchrun\n", "launcher");
  nested("framework: generic\nlauncher: mpirun\n", "launcher");
  nested("framework: mindspore\nroles:\n  ps: {}\n", "roles");
  nested("mode: rank_table\n", "mode");
  nested("framework: tensorflow\nroles:\n  chief:\n    nodes: 2\n", "roles.chief");
  nested("env:\n  COHORT_RANK: '1'\n", "env.COHORT_RANK");
  nested("env:\n  A=B: '1'\n", "env.A=B");
  nested("env:\n  \"\": '1'\n", "env");
  nested("env:\n  A: \"a\\0b\"\n", "env.A");
  nested("policy:\n  max_restarts: 5000\n", "policy.max_restarts");
  nested("policy:\n  max_runtime: 0s\n", "policy.max_runtime");
  nested("policy:\n  success: [chief]\n", "policy.success");
  nested("policy:\n  startup_timeout: 400d\n", "policy.startup_timeout");
  nested("inputs:\n  - source: s\n    target: ../t\n", "inputs[0].target");
  nested("inputs:\n  - source: s\n    target: t\n  - source: s\n    mode: copy\n", "inputs[1]");
  nested("inputs:\n  - {source: s, target: t, arg: " + std::string(300, 'a') + "}\n",
         "inputs[0].arg");
  nested("outputs:\n  - source: ../o\n    target: t\n", "outputs[0].source");
  nested("outputs:\n  - {source: o, target: t, when: later}\n", "outputs[0].when");
  corpus.push_back({"name: ../etc\ncommand: [a]\n", "name"});
  corpus.push_back({"name: " + std::string(64, 'n') + "\ncommand: [a]\n", "name"});
  corpus.push_back({"name: x\n", "command"});
  corpus.push_back({"name: x\ncommand: []\n", "command"});
  corpus.push_back({"", "job"});
  corpus.push_back({"# nothing\n", "job"});
  corpus.push_back({"just text\n", "job"});
  corpus.push_back({"- a\n- b\n", "job"});
  corpus.push_back({"name: x\ncommand: [a\n", "job"});
  corpus.push_back({"name: x\ncommand: [a]\n---\nname: y\n", "job"});
  corpus.push_back({"name: x\ncommand: [a]\n? [a, b]\n: c\n", "job"});
  corpus.push_back({"name: x\ncommand: [a]\nenv: " + std::string(70, '{') + "\n", "job"});
  corpus.push_back({"name: *a\ncommand: [a]\n", "job"});
  return corpus;
}

// The JSON forms of bad jobs, as the server receives them.
std::vector<BadFile> jsonCorpus() {
  const Json base = {{"name", "x"}, {"command", {"a"}}};
  const std::vector<Json> wrong = {"2", 1.5, -1, true, nullptr, Json::array({1}),
                                   Json::object({{"a", 1}}), 1e30};
  std::vector<BadFile> corpus;
  auto with = [&](const Json::json_pointer& at, const Json& value, const std::string& field) {
    Json job = base;
    job[at] = value;
    corpus.push_back({job.dump(2), field});
    corpus.push_back({job.dump(), field});
  };
  for (const Json& v : wrong) {
    with(Json::json_pointer("/roles/worker/nodes"), v, "roles.worker.nodes");
    with(Json::json_pointer("/roles/worker/procs_per_node"), v, "roles.worker.procs_per_node");
    with(Json::json_pointer("/policy/max_restarts"), v, "policy.max_restarts");
    with(Json::json_pointer("/roles/worker/resources/gpus"), v, "roles.worker.resources.gpus");
  }
  for (const Json& v : {Json::array({1}), Json::object({{"a", 1}}), Json(nullptr)}) {
    with(Json::json_pointer("/name"), v, "name");
    with(Json::json_pointer("/workdir"), v, "workdir");
    with(Json::json_pointer("/env/A"), v, "env.A");
    with(Json::json_pointer("/policy/grace_period"), v, "policy.grace_period");
  }
  with(Json::json_pointer("/command"), Json::array({Json::array({"a"})}), "command[0]");
  with(Json::json_pointer("/roles/worker/cpus"), 1, "roles.worker.cpus");
  with(Json::json_pointer("/frobnicate"), 1, "frobnicate");
  with(Json::json_pointer("/policy/grace_period"), "99999999999999999999h", "policy.grace_period");
  return corpus;
}

// `field` as a path in `msg`: followed by ": ", "." or "[".
bool namesField(const std::string& msg, const std::string& field) {
  for (size_t at = msg.find(field); at != std::string::npos; at = msg.find(field, at + 1)) {
    const std::string rest = msg.substr(at + field.size(), 2);
    if (rest == ": " || (!rest.empty() && (rest[0] == '.' || rest[0] == '['))) return true;
  }
  return false;
}

TEST(Refusals, EveryBadJobFileNamesFileLineAndField) {
  std::vector<BadFile> corpus = generatedCorpus();
  for (BadFile& f : jsonCorpus()) corpus.push_back(std::move(f));
  ASSERT_GT(corpus.size(), 300u);
  const std::regex located("^job\\.yaml:[1-9][0-9]*: ");
  for (const BadFile& f : corpus) {
    std::string msg = errorOf(f.yaml);
    ASSERT_NE(msg, "") << "accepted:\n" << f.yaml;
    EXPECT_TRUE(std::regex_search(msg, located)) << msg << "\nfrom:\n" << f.yaml;
    EXPECT_TRUE(namesField(msg, f.field))
        << "no '" << f.field << "' in: " << msg << "\nfrom:\n" << f.yaml;
  }
}

TEST(Refusals, ValidationNamesTheLineOfTheField) {
  std::string msg = errorOf("name: x\ncommand: [a]\nroles:\n  ps: {}\n  worker: {}\npolicy:\n"
                            "  success: [chief]\n");
  EXPECT_NE(msg.find("job.yaml:7: policy.success: no role named 'chief'"), std::string::npos)
      << msg;
  msg = errorOf("name: x\ncommand: [a]\nenv:\n  A: '1'\n  COHORT_RANK: '1'\n");
  EXPECT_NE(msg.find("job.yaml:5: env.COHORT_RANK: names starting with COHORT_"),
            std::string::npos)
      << msg;
}

TEST(Refusals, AFieldSetByAFlagIsNamedByTheFlag) {
  auto spec = parseJobFile("name: x\ncommand: [a]\nroles:\n  worker: {nodes: 2}\n", "job.yaml");
  ASSERT_TRUE(spec);
  spec->roles[0].nodes = 0;
  spec->origin.setByFlag("roles.worker.nodes", "--nodes");
  auto valid = validate(*spec);
  ASSERT_FALSE(valid);
  EXPECT_EQ(valid.error().message, "--nodes: roles.worker.nodes: must be at least 1");
  spec->roles[0].nodes = 1;
  spec->command = {};
  spec->origin.setByFlag("command", "");  // from the words after "--"
  valid = validate(*spec);
  ASSERT_FALSE(valid);
  EXPECT_EQ(valid.error().message.rfind("command: no command", 0), 0u) << valid.error().message;
}

TEST(ParseJobFile, ASessionRoundTripsAndItsFieldsAreChecked) {
  auto spec = parseJobFile(
      "name: dev\nframework: generic\ncommand: [x]\nworkdir: /\n"
      "session: {idle_timeout: 90s, user: alice, authorized_key: 'ssh-ed25519 AAAA k',\n"
      "          jupyter: true, jupyter_token: 0a1b}\n",
      "job.yaml");
  ASSERT_TRUE(spec) << spec.error().message;
  ASSERT_TRUE(spec->session);
  EXPECT_EQ(spec->session->idle_timeout, Millis(90000));
  EXPECT_TRUE(validate(*spec)) << validate(*spec).error().message;
  auto again = parseJobFile(toJobFile(*spec), "job");
  ASSERT_TRUE(again && again->session);
  EXPECT_EQ(again->session->user, "alice");
  EXPECT_EQ(again->session->authorized_key, "ssh-ed25519 AAAA k");
  EXPECT_TRUE(again->session->jupyter);
  EXPECT_EQ(again->session->jupyter_token, "0a1b");
  for (const auto& [field, value] : {std::pair<std::string, std::string>{"user", "Root;x"},
                                     {"idle_timeout", "0s"},
                                     {"authorized_key", "\"a\\nb\""},
                                     {"jupyter_token", "'x y'"}}) {
    auto bad = parseJobFile("name: dev\nframework: generic\ncommand: [x]\nworkdir: /\nsession: {" +
                                field + ": " + value + "}\n",
                            "job.yaml");
    ASSERT_TRUE(bad) << bad.error().message;
    auto refused = validate(*bad);
    ASSERT_FALSE(refused) << field;
    EXPECT_NE(refused.error().message.find("session." + field), std::string::npos)
        << refused.error().message;
  }
}

}  // namespace
}  // namespace cohort::spec
