// `cohort run` end to end: the job directory, the rank contract, logs, bad input, and the real
// PyTorch DDP example.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "harness.h"

namespace cohort::testing {
namespace {

std::map<std::string, std::string> envFromLog(const std::string& path) {
  std::map<std::string, std::string> env;
  std::istringstream in(readText(path));
  for (std::string line; std::getline(in, line);) {
    auto eq = line.find('=');
    if (eq != std::string::npos) env[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return env;
}

TEST(Run, SuccessWritesTheJobDirectory) {
  std::string root = tempDir();
  auto r = runCohort({"run", "--data-root", root, "--nodes", "2", "--nproc-per-node", "2", "--",
                      testRank(), "echo=hello"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string job = onlyJobDir(root);
  ASSERT_FALSE(job.empty());
  for (const char* sub : {"/work", "/output", "/logs"}) {
    struct stat st {};
    EXPECT_EQ(::stat((job + sub).c_str(), &st), 0) << sub;
  }
  EXPECT_EQ(readJson(job + "/plan.json")["world_size"], 4);
  EXPECT_EQ(readJson(job + "/result.json")["state"], "succeeded");
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_EQ(readText(job + "/logs/worker-" + std::to_string(rank) + ".log"), "hello\n");
  }
  std::vector<std::string> states;
  for (const auto& e : readJsonLines(job + "/events.jsonl")) {
    ASSERT_TRUE(e.contains("time"));
    if (e["event"] == "state") states.push_back(e["state"]);
  }
  EXPECT_EQ(states,
            (std::vector<std::string>{"starting", "staging", "running", "stopping", "succeeded"}));
  // The merged console stream: whole lines with a [role/rank node] prefix.
  for (const char* line : {"[worker/0 node0] hello\n", "[worker/1 node0] hello\n",
                           "[worker/2 node1] hello\n", "[worker/3 node1] hello\n"}) {
    EXPECT_NE(r.out.find(line), std::string::npos) << line << " missing in:\n" << r.out;
  }
}

TEST(Run, EveryRankGetsTheContractAndTorchrunVariables) {
  std::string root = tempDir();
  auto r = runCohort({"run", "--data-root", root, "--nodes", "2", "--nproc-per-node", "3", "--name",
                      "contract", "--", testRank(), "env"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string job = onlyJobDir(root);
  std::set<std::string> ports;
  for (int rank = 0; rank < 6; ++rank) {
    auto env = envFromLog(job + "/logs/worker-" + std::to_string(rank) + ".log");
    SCOPED_TRACE("rank " + std::to_string(rank));
    EXPECT_EQ(env["COHORT_RANK"], std::to_string(rank));
    EXPECT_EQ(env["RANK"], std::to_string(rank));
    EXPECT_EQ(env["WORLD_SIZE"], "6");
    EXPECT_EQ(env["COHORT_WORLD_SIZE"], "6");
    EXPECT_EQ(env["LOCAL_RANK"], std::to_string(rank % 3));
    EXPECT_EQ(env["LOCAL_WORLD_SIZE"], "3");
    EXPECT_EQ(env["GROUP_RANK"], std::to_string(rank / 3));
    EXPECT_EQ(env["COHORT_NODE_RANK"], std::to_string(rank / 3));
    EXPECT_EQ(env["COHORT_NUM_NODES"], "2");
    EXPECT_EQ(env["MASTER_ADDR"], "127.0.0.1");
    EXPECT_EQ(env["COHORT_JOB_NAME"], "contract");
    EXPECT_EQ(env["COHORT_OUTPUT_DIR"], job + "/output");
    EXPECT_EQ(env["COHORT_LOG_DIR"], job + "/logs");
    EXPECT_EQ(env["COHORT_WORK_DIR"], job + "/work/node" + std::to_string(rank / 3));
    EXPECT_EQ(env["COHORT_DATA_ROOT"], root);
    EXPECT_EQ(env["COHORT_BIN"], COHORT_BIN);
    EXPECT_EQ(env["TORCHELASTIC_RESTART_COUNT"], "0");
    EXPECT_EQ(env["OMP_NUM_THREADS"], "1");
    EXPECT_EQ(env.count("COHORT_JOB_SECRET"), 0u) << "the control-channel secret leaked";
    EXPECT_EQ(env.count("PATH"), 1u) << "the user's environment is inherited";
    ports.insert(env["MASTER_PORT"]);
  }
  ASSERT_EQ(ports.size(), 1u);
  EXPECT_NE(*ports.begin(), "29500");
  auto table = readJson(job + "/files/rank_table.json");
  EXPECT_EQ(table["ranks"].size(), 6u);
  EXPECT_EQ(table["ranks"][4]["node"], 1);
}

TEST(Run, GenericFrameworkSetsOnlyTheCohortContract) {
  std::string root = tempDir();
  auto r =
      runCohort({"run", "--data-root", root, "--framework", "generic", "--", testRank(), "env"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto env = envFromLog(onlyJobDir(root) + "/logs/worker-0.log");
  EXPECT_EQ(env["COHORT_RANK"], "0");
  EXPECT_EQ(env.count("RANK"), 0u);
  EXPECT_EQ(env.count("MASTER_PORT"), 0u);
}

// cohort's stdin, when it is a file or a pipe, is rank 0's, as mpirun forwards its own; every
// other rank reads nothing.
TEST(Run, RankZeroReadsCohortsStdinWhenItIsNotATerminal) {
  std::string root = tempDir();
  const std::string input = root + "/input.txt";
  std::ofstream(input) << "line one\nline two\n";
  const int in = ::open(input.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(in, 0);
  auto r = CohortProcess({"run", "--data-root", root, "--framework", "generic", "--nodes", "2",
                          "--nproc-per-node", "2", "--", "sh", "-c",
                          "echo \"rank $COHORT_RANK read [$(cat | tr '\\n' ' ')]\""},
                         {}, in)
               .wait();
  ::close(in);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "rank 0 read [line one line two ]")) << r.out;
  for (const char* other : {"rank 1 read []", "rank 2 read []", "rank 3 read []"}) {
    EXPECT_TRUE(contains(r.out, other)) << r.out;
  }
}

TEST(Run, TwoJobsStartedAtOnceGetDifferentMasterPorts) {
  std::string root_a = tempDir(), root_b = tempDir();
  auto args = [&](const std::string& root) {
    return std::vector<std::string>{"run", "--data-root", root,  "--framework", "pytorch",
                                    "--",  testRank(),    "env", "sleep=0.3"};
  };
  CohortProcess a(args(root_a)), b(args(root_b));
  ASSERT_EQ(a.wait().exit_code, 0);
  ASSERT_EQ(b.wait().exit_code, 0);
  auto port_a = envFromLog(onlyJobDir(root_a) + "/logs/worker-0.log")["MASTER_PORT"];
  auto port_b = envFromLog(onlyJobDir(root_b) + "/logs/worker-0.log")["MASTER_PORT"];
  EXPECT_FALSE(port_a.empty());
  EXPECT_NE(port_a, port_b);
}

TEST(Run, JobFileWithHyperparametersAndRelativeWorkdir) {
  std::string root = tempDir();
  std::string dir = tempDir();
  ::mkdir((dir + "/code").c_str(), 0755);
  std::ofstream(dir + "/job.yaml") << "name: hp\nworkdir: code\ncommand: [" << testRank()
                                   << ", echo=args]\nhyperparameters: {lr: 0.05}\n";
  auto r = runCohort({"run", "--data-root", root, "-f", dir + "/job.yaml"});
  // cohort-test-rank refuses the unknown action "--lr=0.05": that proves it was appended.
  EXPECT_EQ(r.exit_code, 64) << r.err;
  EXPECT_NE(r.err.find("unknown action '--lr=0.05'"), std::string::npos) << r.err;
}

// A job runs again from the job file kept in its directory, from any directory, with run's
// flags on top; the first run's relative workdir was made absolute in that file.
TEST(Run, RerunRunsTheJobFileKeptInTheJobDirectory) {
  std::string root = tempDir();
  std::string dir = tempDir();
  ::mkdir((dir + "/code").c_str(), 0755);
  std::ofstream(dir + "/code/note.txt") << "in the workdir\n";
  std::ofstream(dir + "/job.yaml") << "name: again\nworkdir: code\ncommand: [/bin/cat, note.txt]\n";
  auto first = runCohort({"run", "--data-root", root, "-q", "-f", dir + "/job.yaml"});
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const std::string job = onlyJobDir(root);
  const std::string id = job.substr(job.rfind('/') + 1);
  EXPECT_EQ(readJson(job + "/job.json")["workdir"], dir + "/code");
  auto again = runCohort({"rerun", id, "--data-root", root, "--nodes", "2"});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_TRUE(contains(again.out, "[worker/1 node1] in the workdir\n")) << again.out;
  auto none = runCohort({"rerun", "nope-20000101-000000-abcdef", "--data-root", root},
                        std::chrono::seconds(10));
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_TRUE(contains(none.err, "no job 'nope-20000101-000000-abcdef' in " + root + "/jobs"))
      << none.err;
}

TEST(Run, LogRanksFiltersTheConsoleButNotTheFiles) {
  std::string root = tempDir();
  auto r = runCohort({"run", "--data-root", root, "--nodes", "2", "--log-ranks", "1", "--",
                      testRank(), "echo=line"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "[worker/1 node1] line\n");
  EXPECT_EQ(readText(onlyJobDir(root) + "/logs/worker-0.log"), "line\n");
}

// Checks that `text` holds lines "rank R line N ..." (after `prefix_re`), numbered from 0 in
// order for each rank. With `gaps_allowed` a console notice about dropped lines may stand
// between two lines, and numbers may then jump forward.
void expectOrderedLines(const std::string& text, const std::string& prefix_re, int ranks,
                        bool gaps_allowed, std::vector<long>& count) {
  std::regex line_re(prefix_re + R"(rank (\d+) line (\d+) [a-zA-Z0-9]+)");
  std::vector<long> next(ranks, 0);
  count.assign(ranks, 0);
  std::istringstream in(text);
  long lines = 0;
  bool dropped = false;
  for (std::string line; std::getline(in, line); ++lines) {
    if (gaps_allowed && line.rfind("[cohort] ", 0) == 0) {
      ASSERT_NE(line.find("lines were not shown here"), std::string::npos) << line;
      dropped = true;
      continue;
    }
    std::smatch m;
    ASSERT_TRUE(std::regex_match(line, m, line_re))
        << "mangled line " << lines << ": " << line.substr(0, 200);
    int rank = std::stoi(m[1]);
    long number = std::stol(m[2]);
    if (dropped) {
      ASSERT_GE(number, next[rank]) << "rank " << rank << " reordered a line";
    } else {
      ASSERT_EQ(number, next[rank]) << "rank " << rank << " lost or reordered a line";
    }
    next[rank] = number + 1;
    ++count[rank];
  }
}

TEST(Run, HeavyOutputKeepsEveryLineWhole) {
  std::string root = tempDir();
  const int ranks = 8;
  const long bytes = 8L << 20;  // per rank
  auto r = runCohort({"run", "--data-root", root, "--nodes", "2", "--nproc-per-node", "4", "--",
                      testRank(), "flood=" + std::to_string(bytes)},
                     120s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<long> shown;
  // The console: whole lines, each with its prefix, in order per rank. If the reader is slower
  // than the ranks, lines are dropped from the console with a notice (never from the files).
  expectOrderedLines(r.out, R"(\[worker/\d node\d\] )", ranks, true, shown);
  std::string job = onlyJobDir(root);
  for (int rank = 0; rank < ranks; ++rank) {
    std::vector<long> in_file;
    std::string log = readText(job + "/logs/worker-" + std::to_string(rank) + ".log");
    EXPECT_GE(static_cast<long>(log.size()), bytes);
    expectOrderedLines(log, "", ranks, false, in_file);
    EXPECT_GT(in_file[rank], 0);
  }
}

TEST(Run, LogFilesHoldEveryByteTheRankWroteAsItWroteThem) {
  // The agents ship output to the coordinator, which writes the logs: no byte may change on the
  // way, not a NUL, not invalid UTF-8, not a last line without a newline.
  std::string root = tempDir();
  auto r = runCohort({"run", "--data-root", root, "--nodes", "2", "--", testRank(),
                      "bytes=6100ff0afe0a", "rank1:partial=no newline"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string job = onlyJobDir(root);
  EXPECT_EQ(readText(job + "/logs/worker-0.log"), std::string("a\0\xff\n\xfe\n", 6));
  EXPECT_EQ(readText(job + "/logs/worker-1.log"), std::string("a\0\xff\n\xfe\nno newline", 16));
}

// Bad input: a clear message naming the field or file, exit code 2, nothing started.
struct BadInput {
  std::string name;
  std::vector<std::string> args;
  std::string yaml;  // written to job.yaml and passed with -f when not empty
  std::string message;
};

void PrintTo(const BadInput& input, std::ostream* os) { *os << input.name; }

class RunRejects : public ::testing::TestWithParam<BadInput> {};

TEST_P(RunRejects, WithExitCode2AndNothingStarted) {
  std::string root = tempDir();
  std::vector<std::string> args = {"run", "--data-root", root};
  if (!GetParam().yaml.empty()) {
    std::string file = tempDir() + "/job.yaml";
    std::ofstream(file) << GetParam().yaml;
    args.insert(args.end(), {"-f", file});
  }
  args.insert(args.end(), GetParam().args.begin(), GetParam().args.end());
  auto r = runCohort(args);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find(GetParam().message), std::string::npos) << r.err;
  EXPECT_EQ(onlyJobDir(root), "") << "a job directory was created";
}

INSTANTIATE_TEST_SUITE_P(
    BadInputs, RunRejects,
    ::testing::Values(BadInput{"UnknownField",
                               {},
                               "name: x\ncommand: [true]\nnodes: 2\n",
                               "nodes: unknown field"},
                      BadInput{"WrongType",
                               {},
                               "name: x\ncommand: [true]\nroles: {worker: {nodes: many}}\n",
                               "roles.worker.nodes: expected an integer, got 'many'"},
                      BadInput{"ZeroNodesInFile",
                               {},
                               "name: x\ncommand: [true]\nroles: {worker: {nodes: 0}}\n",
                               "roles.worker.nodes: must be at least 1"},
                      BadInput{"ZeroNodesFlag",
                               {"--nodes", "0", "--", "true"},
                               "",
                               "--nodes: expected an integer >= 1"},
                      BadInput{"MissingProgram",
                               {"--", "python4", "train.py"},
                               "",
                               "command: 'python4' not found on PATH"},
                      BadInput{"MissingScript",
                               {"--", "/usr/bin/python3", "no_such_script.py"},
                               "",
                               "script 'no_such_script.py' not found"},
                      BadInput{"MissingWorkdir",
                               {"--workdir", "/no/such/dir", "--", "true"},
                               "",
                               "workdir: '/no/such/dir' is not a directory"},
                      BadInput{"MissingJobFile",
                               {"-f", "/no/such/job.yaml"},
                               "",
                               "job file: open '/no/such/job.yaml'"},
                      BadInput{"UnknownFlag", {"--frobnicate"}, "", "unknown flag '--frobnicate'"},
                      BadInput{"NoCommand", {}, "", "command: no command"}),
    [](const ::testing::TestParamInfo<BadInput>& info) { return info.param.name; });

// A program that exists and is executable but that the kernel refuses to run is each rank's
// failure (exit code 127), with the kernel's reason, on every node.
TEST(Run, AProgramTheKernelCannotExecuteFailsWithItsReason) {
  const std::string dir = tempDir();
  const std::string program = dir + "/not-a-program";
  std::ofstream(program) << std::string("\x7f\x01garbage", 9);
  ASSERT_EQ(::chmod(program.c_str(), 0755), 0);
  auto r = runCohort({"run", "--data-root", dir + "/root", "--framework", "generic", "--nodes", "2",
                      "--nproc-per-node", "3", "--", program});
  EXPECT_EQ(r.exit_code, 127) << r.err;
  EXPECT_TRUE(contains(r.err, "exited with code 127")) << r.err;
  EXPECT_TRUE(contains(r.err, "Exec format error")) << r.err;
  int reported = 0;
  for (const auto& e : readJsonLines(onlyJobDir(dir + "/root") + "/events.jsonl")) {
    reported += e.value("event", "") == "rank_exit" && e.value("code", 0) == 127;
  }
  EXPECT_EQ(reported, 6);
}

TEST(Plan, PrintsEveryRankWithoutStartingAnything) {
  std::string root = tempDir();
  auto r = runCohort({"plan", "--data-root", root, "--framework", "pytorch", "--nodes", "2",
                      "--json", "--", testRank()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto plan = nlohmann::json::parse(r.out);
  EXPECT_EQ(plan["nodes"].size(), 2u);
  EXPECT_EQ(plan["nodes"][1]["ranks"][0]["env"]["RANK"], "1");
  EXPECT_EQ(plan["nodes"][1]["ranks"][0]["env"]["MASTER_PORT"], "auto");
  EXPECT_EQ(onlyJobDir(root), "");
}

TEST(Plan, AnS3InputAndOutputNeedNoCredentialsToPlan) {
  const std::string root = tempDir();
  const std::string job = root + "/job.yaml";
  std::ofstream(job) << "name: s3plan\ncommand: [" << testRank() << "]\n"
                     << "inputs: [{source: s3://datasets/digits, target: data}]\n"
                     << "outputs: [{source: output/, target: 's3://models/{job}/'}]\n";
  CohortProcess p({"plan", "--data-root", root, "--json", "-f", job},
                  {"AWS_ACCESS_KEY_ID=", "AWS_SECRET_ACCESS_KEY=", "AWS_PROFILE=", "HOME=" + root});
  RunResult r = p.wait(60s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "s3://datasets/digits")) << r.out;
  // Running it needs them, and says so before anything starts.
  CohortProcess run(
      {"run", "--data-root", root, "-f", job},
      {"AWS_ACCESS_KEY_ID=", "AWS_SECRET_ACCESS_KEY=", "AWS_PROFILE=", "HOME=" + root});
  RunResult ran = run.wait(60s);
  EXPECT_EQ(ran.exit_code, 2) << ran.err;
  EXPECT_TRUE(contains(ran.err, "inputs[0].source")) << ran.err;
  EXPECT_TRUE(contains(ran.err, "no S3 credentials")) << ran.err;
  EXPECT_EQ(onlyJobDir(root), "");
}

TEST(Plan, VolcanoBackendPrintsTheJobAsAVolcanoJob) {
  const std::string root = tempDir();
  const std::string ddp = sourceDir() + "/examples/pytorch/ddp.yaml";
  auto r = runCohort({"plan", "--data-root", root, "--backend", "volcano", "--image",
                      "registry.example.com/cohort/train:0.1.0", "-f", ddp});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "apiVersion: batch.volcano.sh/v1alpha1\n")) << r.out;
  EXPECT_TRUE(contains(r.out, "kind: Job\n")) << r.out;
  EXPECT_TRUE(contains(r.out, "  name: digits-ddp\n")) << r.out;
  auto json = runCohort({"plan", "--data-root", root, "--backend", "volcano", "--image",
                         "registry.example.com/cohort/train:0.1.0", "--json", "-f", ddp});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  auto job = nlohmann::json::parse(json.out);
  EXPECT_EQ(job["kind"], "Job");
  EXPECT_EQ(job["spec"]["minAvailable"], 3);
  EXPECT_EQ(onlyJobDir(root), "") << "plan starts nothing and makes no job directory";
  auto no_image = runCohort({"plan", "--data-root", root, "--backend", "volcano", "-f", ddp});
  EXPECT_EQ(no_image.exit_code, 2);
  EXPECT_TRUE(contains(no_image.err, "environment: {image: REF} (or --image REF)")) << no_image.err;
}

// Without a cluster to talk to, --backend volcano says where it looked and runs nothing here
// (tests/integration/volcano_test.cc runs jobs through a real API server).
TEST(Run, VolcanoBackendWithoutAClusterSaysWhereItLookedAndRunsNothing) {
  const std::string root = tempDir();
  const std::string home = tempDir();
  const std::vector<std::string> nowhere = {"KUBECONFIG=", "HOME=" + home,
                                            "KUBERNETES_SERVICE_HOST="};
  const std::string ddp = sourceDir() + "/examples/pytorch/ddp.yaml";
  auto r = CohortProcess({"run", "--data-root", root, "--backend", "volcano", "--image",
                          "registry.example.com/train:1", "-f", ddp},
                         nowhere)
               .wait();
  EXPECT_EQ(r.exit_code, 2) << r.err;
  for (const char* words : {"no Kubernetes configuration", home.c_str(), "KUBECONFIG"}) {
    EXPECT_TRUE(contains(r.err, words)) << words << "\n" << r.err;
  }
  EXPECT_EQ(onlyJobDir(root), "") << "nothing ran, not even locally";
  auto server = CohortProcess({"server", "--data-root", root + "/server", "--listen",
                               "127.0.0.1:0", "--backend", "volcano"},
                              nowhere)
                    .wait();
  EXPECT_EQ(server.exit_code, 2) << server.err;
  EXPECT_TRUE(contains(server.err, "--backend volcano: no Kubernetes configuration")) << server.err;
}

TEST(Help, EverySubcommandHasHelp) {
  for (const char* cmd : {"run", "plan", "exec", "cp", "coordinate"}) {
    auto r = runCohort({cmd, "--help"});
    EXPECT_EQ(r.exit_code, 0) << cmd;
    EXPECT_NE(r.out.find(std::string("cohort ") + cmd), std::string::npos) << r.out;
  }
  auto r = runCohort({"--help"});
  EXPECT_NE(r.out.find("Exit codes"), std::string::npos);
  EXPECT_EQ(runCohort({"nonsense"}).exit_code, 2);
}

// The README's main job: real PyTorch DDP with gloo, 2 simulated nodes x 2 processes.
TEST(PyTorchExample, DdpTrainsToNinetyPercentAndSavesTheModel) {
  if (std::system("/usr/bin/python3 -c 'import torch, sklearn' >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "Debian's python3-torch and python3-sklearn are not installed "
                    "(scripts/setup installs them)";
  }
  std::string root = tempDir();
  auto r = runCohort({"run", "--data-root", root, "-f", sourceDir() + "/examples/pytorch/ddp.yaml"},
                     300s);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  std::smatch m;
  ASSERT_TRUE(
      std::regex_search(r.out, m, std::regex(R"(\[worker/0 node0\] held-out accuracy: ([0-9.]+))")))
      << r.out;
  EXPECT_GE(std::stod(m[1]), 0.90);
  struct stat st {};
  EXPECT_EQ(::stat((onlyJobDir(root) + "/output/model.pt").c_str(), &st), 0);
  EXPECT_GT(st.st_size, 1000);
}

}  // namespace
}  // namespace cohort::testing
