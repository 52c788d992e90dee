// Each framework's wiring against the real framework: PyTorch's launch modes (direct, torchrun,
// spawn), a start script written for the managed training service, MPI through mpirun, Horovod,
// MindSpore's dynamic cluster and TensorFlow's strategies. A test whose framework is not
// installed is skipped with the reason.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>

#include "harness.h"

namespace cohort::testing {
namespace {

const char* kTorch = "/usr/bin/python3 -c 'import torch, sklearn'";

// The DDP example ran on 4 ranks over 2 nodes and trained to >= 0.90 held-out accuracy.
void expectDdpTrained(const RunResult& r) {
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("rank 3/4 (local 1, node 1) ready"), std::string::npos) << r.out;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex(R"(held-out accuracy: ([0-9.]+))"))) << r.out;
  EXPECT_GE(std::stod(m[1]), 0.90) << r.out;
}

TEST(RealPyTorch, TorchrunModeOneTorchrunPerNode) {
  REQUIRE(kTorch, "Debian's python3-torch and python3-sklearn are not installed");
  std::string root = tempDir();
  auto r = runCohort({"run", "--data-root", root, "--launcher", "torchrun", "--nodes", "2",
                      "--nproc-per-node", "2", "--workdir", sourceDir() + "/examples/pytorch",
                      "--", "/usr/bin/python3", "ddp.py", "--epochs", "6"},
                     300s);
  expectDdpTrained(r);
  // Every rank's line is prefixed with the rank that wrote it, as when cohort starts the
  // ranks: torchrun's tee ("[default1]:...") is split back into the ranks. And the ranks
  // torchrun made are where cohort's record puts them: each node's torchrun started the ranks
  // that the rank table gives that node (c10d's rendezvous, in the order the nodes joined,
  // swapped them in about one run of two).
  std::smatch m;
  int seen = 0;
  const std::regex ready(R"(\[worker/(\d) node(\d)\] rank (\d)/4 \(local (\d), node (\d)\) ready)");
  for (auto it = r.out.cbegin(); std::regex_search(it, r.out.cend(), m, ready);
       it = m.suffix().first) {
    EXPECT_EQ(m[1], m[3]) << m[0];
    EXPECT_EQ(m[2], m[5]) << m[0];
    EXPECT_EQ(std::stoi(m[3]), std::stoi(m[5]) * 2 + std::stoi(m[4])) << m[0];
    ++seen;
  }
  EXPECT_EQ(seen, 4) << r.out;
  EXPECT_FALSE(contains(r.out, "[default")) << r.out;
  const std::string dir = onlyJobDir(root);
  EXPECT_TRUE(contains(readText(dir + "/logs/worker-3.log"), "rank 3/4 (local 1, node 1) ready"));
  // torchrun's own log keeps everything it wrote, its ranks' lines as it teed them.
  EXPECT_TRUE(contains(readText(dir + "/logs/torchrun-node1.log"), "]:rank 3/4 (local 1, node 1)"));
  const std::string table = readText(dir + "/files/rank_table.json");
  EXPECT_TRUE(std::regex_search(
      table, std::regex(R"("rank": 3,\s*"role": "worker",\s*"role_rank": 3,\s*"node": 1,)")))
      << table;
  // Rank 0's cohort.log lines are its metrics, as in direct mode.
  const std::string metrics = readText(dir + "/metrics.jsonl");
  for (int step = 1; step <= 6; ++step) {
    EXPECT_TRUE(contains(metrics, "\"rank\":0,\"step\":" + std::to_string(step) + ",\"loss\":"))
        << metrics;
  }
  EXPECT_FALSE(contains(metrics, "\"rank\":1,")) << metrics;
}

// A directory with fail.py: a gloo job whose rank 2 exits 3 once every rank is up, while the
// others sleep for 10 minutes without talking to it again.
std::string failingTorchScript() {
  const std::string work = tempDir();
  std::ofstream script(work + "/fail.py");
  script << "import sys, time\n"
            "import torch.distributed as dist\n"
            "dist.init_process_group('gloo')\n"
            "rank = dist.get_rank()\n"
            "print(f'rank {rank} up', flush=True)\n"
            "if rank == 2:\n"
            "    print('rank 2 fails on purpose', file=sys.stderr, flush=True)\n"
            "    sys.exit(3)\n"
            "time.sleep(600)\n";
  return work;
}

// Under torchrun a rank that fails is torchrun's child: torchrun's own report names it, and so
// do cohort's root cause and the job's record; its lines carry its own prefix. And the job
// fails then, not when the other ranks end: stock torchrun waits in its exit barrier for the
// other nodes' torchruns (up to 300 s) before it reports, and the ranks here that do not fail
// never talk to the failed one again and would sleep for 10 minutes. The bound is only "no
// hang": the job's startup alone takes seconds to tens of seconds on a busy machine.
TEST(RealPyTorch, TorchrunModeNamesTheRankThatFailed) {
  REQUIRE(kTorch, "Debian's python3-torch and python3-sklearn are not installed");
  const std::string work = failingTorchScript();
  std::string root = tempDir();
  const auto start = std::chrono::steady_clock::now();
  auto r = runCohort({"run", "--data-root", root, "--launcher", "torchrun", "--nodes", "2",
                      "--nproc-per-node", "2", "--grace-period", "5s", "--workdir", work, "--",
                      "/usr/bin/python3", "fail.py"},
                     400s);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 150s) << "fail-fast: " << r.out << r.err;
  EXPECT_NE(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "[worker/2 node1] rank 2 fails on purpose")) << r.out;
  EXPECT_TRUE(contains(r.out, "[worker/3 node1] rank 3 up")) << r.out;
  EXPECT_TRUE(contains(r.err, "root cause: worker/2 exited with code 3, under torchrun/node1 on "
                              "node 1, which then exited with code 1"))
      << r.err;
  const std::string dir = onlyJobDir(root);
  EXPECT_TRUE(contains(readText(dir + "/logs/worker-2.log"), "rank 2 fails on purpose"));
  const std::string result = readText(dir + "/result.json");
  EXPECT_TRUE(std::regex_search(result, std::regex(R"("launched": \{\s*"name": "worker/2",\s*"rank": 2,)")))
      << result;
}

// Through the server too: the job's record (the API's root_cause.launched, `cohort status`)
// names the rank under torchrun that failed, and the job fails without waiting for the others.
TEST(RealPyTorch, TorchrunModeFailureThroughTheServerNamesTheRank) {
  REQUIRE(kTorch, "Debian's python3-torch and python3-sklearn are not installed");
  const std::string work = failingTorchScript();
  std::string why;
  auto server = startServer(&why, {"--cpus", "2"});
  ASSERT_TRUE(server) << why;
  const std::vector<std::string> env = {"COHORT_SERVER=" + server->url(),
                                        "COHORT_TOKEN=" + server->adminToken()};
  const auto start = std::chrono::steady_clock::now();
  CohortProcess submit({"submit", "--launcher", "torchrun", "--nodes", "2", "--nproc-per-node",
                        "2", "--cpus", "0.5", "--grace-period", "5s", "--workdir", work, "--wait",
                        "--", "/usr/bin/python3", "fail.py"},
                       env);
  RunResult s = submit.wait(400s);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 150s) << "fail-fast: " << s.out << s.err;
  ASSERT_NE(s.exit_code, 0) << s.out << s.err;
  const std::string id = s.out.substr(0, s.out.find('\n'));
  CohortProcess status({"status", id, "--json"}, env);
  RunResult j = status.wait(60s);
  ASSERT_EQ(j.exit_code, 0) << j.err;
  const nlohmann::json record = nlohmann::json::parse(j.out, nullptr, false);
  ASSERT_TRUE(record.is_object()) << j.out;
  const nlohmann::json& rc = record["job"]["root_cause"];
  EXPECT_EQ(rc.value("name", ""), "torchrun/node1") << rc.dump(2);
  EXPECT_EQ(rc["launched"], nlohmann::json({{"rank", 2}, {"name", "worker/2"},
                                            {"what", "exited with code 3"}}))
      << rc.dump(2);
  CohortProcess text({"status", id}, env);
  RunResult t = text.wait(60s);
  EXPECT_TRUE(contains(t.out, "Root cause: worker/2 exited with code 3, under torchrun/node1"))
      << t.out;
}

TEST(RealPyTorch, PreloadForksTheRanksFromOneTemplatePerNode) {
  REQUIRE(kTorch, "Debian's python3-torch and python3-sklearn are not installed");
  std::string root = tempDir();
  auto r = runCohort({"run", "--data-root", root, "--launcher", "preload", "--nodes", "2",
                      "--nproc-per-node", "2", "--workdir", sourceDir() + "/examples/pytorch",
                      "--", "/usr/bin/python3", "ddp.py", "--epochs", "6"},
                     300s);
  expectDdpTrained(r);
  // torch was imported by each node's template, not by each rank.
  EXPECT_TRUE(contains(readText(onlyJobDir(root) + "/plan.json"), "\"modules\": [\n")) << root;
  // The losses rank 0 printed are its training metrics, step by step; every rank was sampled.
  const std::string metrics = readText(onlyJobDir(root) + "/metrics.jsonl");
  std::smatch m;
  for (auto it = r.out.cbegin();
       std::regex_search(it, r.out.cend(), m, std::regex(R"(epoch ([0-9]+)/6 loss ([0-9.]+))"));
       it = m.suffix().first) {
    std::smatch logged;
    ASSERT_TRUE(std::regex_search(
        metrics, logged,
        std::regex("\"rank\":0,\"step\":" + m[1].str() + ",\"loss\":([0-9.e+-]+)\\}")))
        << m[0] << " not in\n"
        << metrics;
    EXPECT_DOUBLE_EQ(std::stod(logged[1]), std::stod(m[2])) << m[0];
  }
  EXPECT_TRUE(contains(metrics, "\"step\":6,")) << metrics;
  const std::string resources = readText(onlyJobDir(root) + "/resources.jsonl");
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_TRUE(contains(resources, "{\"cpu_seconds\":")) << resources;
    EXPECT_TRUE(contains(resources, "\"rank\":" + std::to_string(rank) + ",\"rss_bytes\":"))
        << resources;
  }
}

// examples/pytorch/hang.yaml: one rank of a gloo job stops (SIGSTOP), or gets stuck outside the
// collective, at step 3 while the others wait in all_reduce. hang_timeout notices, every rank's
// stack is taken, and the rank that holds the others up is the root cause.
TEST(RealPyTorch, AHungRankIsNamedWithEveryRanksStack) {
  REQUIRE(kTorch, "Debian's python3-torch and python3-sklearn are not installed");
  const std::string bin = COHORT_BIN;
  const bool py_spy = have("test -x " + bin.substr(0, bin.rfind('/')) +
                           "/venv-tools/bin/py-spy || command -v py-spy");
  for (const std::string how : {"stop", "sleep"}) {  // NOLINT: a copy per case
    SCOPED_TRACE(how);
    if (how == "sleep" && !py_spy) {
      GTEST_SKIP() << "py-spy is not installed (scripts/test puts it in build/venv-tools): "
                      "the stuck-outside-the-collective case needs the Python stacks";
    }
    std::string root = tempDir();
    auto r = runCohort({"run", "--data-root", root, "-f",
                        sourceDir() + "/examples/pytorch/hang.yaml", "--env", "HOW=" + how},
                       180s);
    EXPECT_EQ(r.exit_code, 124) << r.out << r.err;
    EXPECT_TRUE(contains(r.err, "cohort: no progress: collecting every rank's stack")) << r.err;
    const std::string laggard =
        how == "stop"
            ? "no rank made progress for hang_timeout 10.0s: worker/2 on node 1 is stopped"
            : "no rank made progress for hang_timeout 10.0s: worker/2 on node 1 is elsewhere (at "
              "load_next_batch (hang.py:20)) while 3 other rank(s) wait at all_reduce";
    EXPECT_TRUE(contains(r.err, laggard)) << r.err;
    const std::string stacks = readText(onlyJobDir(root) + "/stacks.txt");
    EXPECT_TRUE(contains(stacks, "stacks of 4 rank(s), grouped:")) << stacks;
    if (py_spy) {
      EXPECT_TRUE(contains(stacks,
                           "worker/0 on node 0, worker/1 on node 0, worker/3 on node 1 "
                           "(3 rank(s), sleeping):\nThread \"MainThread\"\n"
                           "    all_reduce"))
          << stacks;
    }
    EXPECT_TRUE(contains(readText(onlyJobDir(root) + "/result.json"), "\"diagnosis\""));
  }
}

TEST(RealPyTorch, DdpExampleTrainsThroughTheServer) {
  REQUIRE(kTorch, "Debian's python3-torch and python3-sklearn are not installed");
  std::string why;
  // The README's job as it is, on a 2-CPU server: its 4 ranks ask half a CPU each.
  auto server = startServer(&why, {"--cpus", "2"});
  ASSERT_TRUE(server) << why;
  const std::vector<std::string> env = {"COHORT_SERVER=" + server->url(),
                                        "COHORT_TOKEN=" + server->adminToken()};
  CohortProcess submit({"submit", "-f", sourceDir() + "/examples/pytorch/ddp.yaml", "--wait"},
                       env);
  RunResult s = submit.wait(300s);
  ASSERT_EQ(s.exit_code, 0) << s.out << s.err;
  const std::string id = s.out.substr(0, s.out.find('\n'));
  CohortProcess logs({"logs", id}, env);
  RunResult l = logs.wait(60s);
  ASSERT_EQ(l.exit_code, 0) << l.err;
  expectDdpTrained(l);
  CohortProcess outputs({"outputs", id}, env);
  RunResult o = outputs.wait(60s);
  EXPECT_NE(o.out.find("model.pt"), std::string::npos) << o.out << o.err;
}

TEST(RealPyTorch, SpawnModeGetsTheBootFileArguments) {
  REQUIRE(kTorch, "Debian's python3-torch and python3-sklearn are not installed");
  std::string root = tempDir();
  auto r = runCohort({"run", "--data-root", root, "--launcher", "spawn", "--nodes", "2",
                      "--nproc-per-node", "2", "--workdir", sourceDir() + "/examples/pytorch",
                      "--", "/usr/bin/python3", "ddp_spawn.py", "--epochs", "6"},
                     300s);
  expectDdpTrained(r);
}

TEST(RealPyTorch, ManagedServiceStartScriptRunsUnchanged) {
  REQUIRE(kTorch, "Debian's python3-torch and python3-sklearn are not installed");
  std::string root = tempDir();
  // The script says `python3`: put the interpreter that has torch first, as a user would.
  CohortProcess cohort({"run", "--data-root", root, "--nodes", "2", "--env", "MA_NUM_GPUS=2",
                        "--workdir", sourceDir() + "/examples/modelarts", "--", "sh",
                        "start.sh", "--epochs", "6"},
                       {"PATH=/usr/bin:/bin"});
  auto r = cohort.wait(300s);
  expectDdpTrained(r);
}

TEST(RealMpi, MpirunRunsOnceWithTheHostfile) {
  REQUIRE("mpirun --version && /usr/bin/python3 -c 'import mpi4py'",
          "Debian's openmpi-bin and python3-mpi4py are not installed");
  std::string root = tempDir();
  auto r = runCohort({"run", "--data-root", root, "-f",
                      sourceDir() + "/examples/mpi/hello.yaml"},
                     120s);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_NE(r.out.find("rank " + std::to_string(rank) + "/4 on"), std::string::npos) << r.out;
  }
  EXPECT_NE(r.out.find(": sum 6"), std::string::npos) << r.out;
  // Simulated nodes share this machine: the hostfile says its CPUs, as Open MPI's own default.
  const std::string cpus = shellOutput("nproc");
  EXPECT_EQ(readText(onlyJobDir(root) + "/files/hostfile"),
            "127.0.0.1 slots=" + cpus.substr(0, cpus.find('\n')) + "\n");
}

// A command that is itself mpirun runs once: one MPI world of 4 ranks over the job's 2 nodes, not
// one mpirun per rank.
TEST(RealMpi, AJobsOwnMpirunMakesOneWorld) {
  REQUIRE("mpirun --version && /usr/bin/python3 -c 'import mpi4py'",
          "Debian's openmpi-bin and python3-mpi4py are not installed");
  std::string root = tempDir();
  auto r = runCohort({"run", "--data-root", root, "--framework", "mpi", "--launcher", "direct",
                      "--nodes", "2", "--nproc-per-node", "2", "--workdir",
                      sourceDir() + "/examples/mpi", "--", "mpirun", "-np", "4",
                      "/usr/bin/python3", "hello.py"},
                     120s);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("rank 3/4 on"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(": sum 6"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("rank 0/1 on"), std::string::npos) << "no world of its own: " << r.out;
  EXPECT_NE(r.out.find("[mpirun/0 node0]"), std::string::npos) << r.out;
}

// cohort's stdin reaches MPI rank 0 through the job's mpirun, as under plain mpirun.
TEST(RealMpi, RankZeroReadsCohortsStdin) {
  REQUIRE("mpirun --version && /usr/bin/python3 -c 'import mpi4py'",
          "Debian's openmpi-bin and python3-mpi4py are not installed");
  std::string root = tempDir();
  std::ofstream(root + "/input.txt") << "to rank zero\n";
  const int in = ::open((root + "/input.txt").c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(in, 0);
  // Each rank writes what it read to a file: mpirun interleaves the ranks' output.
  auto r = CohortProcess({"run", "--data-root", root, "--workdir", root, "--framework", "mpi",
                          "--nodes", "2", "--nproc-per-node", "1", "--", "/usr/bin/python3", "-c",
                          "import sys\nfrom mpi4py import MPI\n"
                          "open(f'read-{MPI.COMM_WORLD.Get_rank()}.txt', 'w')"
                          ".write(sys.stdin.read())"},
                         {}, in)
               .wait(120s);
  ::close(in);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(readText(root + "/read-0.txt"), "to rank zero\n");
  EXPECT_EQ(readText(root + "/read-1.txt"), "");
  EXPECT_TRUE(std::filesystem::exists(root + "/read-1.txt"));
}

// mpirun stops every rank when one fails (the others would sleep 30 s) and exits with its code;
// the root cause names the MPI rank when mpirun's report does (Open MPI 4.1 prints that report
// in some runs and not in others: the unit test FormatRootCause.UnderMpirun... pins its reading).
TEST(RealMpi, AFailedRankStopsTheOthersWithItsExitCode) {
  REQUIRE("mpirun --version", "Debian's openmpi-bin is not installed");
  std::string root = tempDir();
  const auto start = std::chrono::steady_clock::now();
  auto r = runCohort({"run", "--data-root", root, "--framework", "mpi", "--nodes", "2",
                      "--nproc-per-node", "2", "--", "sh", "-c",
                      "if [ \"$OMPI_COMM_WORLD_RANK\" = 2 ]; then echo bad; exit 3; fi; sleep 30"},
                     120s);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 25s) << "fail-fast";
  EXPECT_EQ(r.exit_code, 3) << r.out << r.err;
  const bool named =
      contains(r.err, "root cause: MPI rank 2 exited with code 3, under mpirun/0 on node 0");
  const bool unnamed = contains(r.err, "root cause: mpirun/0 on node 0 exited with code 3") &&
                       contains(r.err, "| bad") && !contains(r.err, "Process name:");
  EXPECT_TRUE(named || unnamed) << r.err;
}

// mpi4py's own test suite (its point-to-point and collective modules), on 4 ranks over 2
// simulated nodes, next to plain mpirun: the same tests pass both ways.
TEST(RealMpi, Mpi4pyTestSuitePassesUnderCohortAsUnderMpirun) {
  REQUIRE("mpirun --version && /usr/bin/python3 -c 'import mpi4py'",
          "Debian's openmpi-bin and python3-mpi4py are not installed");
  std::string src = shellOutput(sourceDir() + "/tests/mpi4py/sources 2>&1");
  src = src.substr(0, src.find('\n'));
  if (!have("test -f " + src + "/test/runtests.py")) {
    GTEST_SKIP() << "mpi4py's sources (its test suite) could not be fetched: " << src;
  }
  const std::vector<std::string> suite = {"/usr/bin/python3", src + "/test/runtests.py", "-q",
                                          "--no-builddir", "-i", "test_p2p_obj", "-i",
                                          "test_cco_obj"};
  auto counts = [](const std::string& out) {
    std::vector<std::string> ran;
    std::smatch m;
    for (auto it = out.cbegin(); std::regex_search(it, out.cend(), m, std::regex(R"(Ran \d+ tests)"));
         it = m.suffix().first) {
      ran.push_back(m[0]);
    }
    std::sort(ran.begin(), ran.end());
    return ran;
  };
  std::string cmd = "cd " + src + " && mpirun --oversubscribe -np 4";
  if (::geteuid() == 0) cmd += " --allow-run-as-root";
  for (const std::string& arg : suite) cmd += " " + arg;
  const std::string plain = shellOutput(cmd + " 2>&1; echo exit=$?");
  ASSERT_NE(plain.find("exit=0"), std::string::npos) << plain;
  std::string root = tempDir();
  std::vector<std::string> args = {"run",     "--data-root", root, "--framework", "mpi",
                                   "--nodes", "2", "--nproc-per-node", "2", "--workdir", src, "--"};
  args.insert(args.end(), suite.begin(), suite.end());
  auto r = runCohort(args, 300s);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(counts(r.out + r.err).size(), 4u) << r.out << r.err;
  EXPECT_EQ(counts(r.out + r.err), counts(plain)) << r.out << r.err << plain;
}

// Horovod (built with MPI over Debian's torch and Open MPI by tests/horovod/build, which
// scripts/test runs, into the build folder's horovod/): its example under horovodrun, under
// cohort's mpirun, and under horovodrun as a cohort job's command, back to back. Horovod takes
// its ranks from MPI, so each is one world of 4 ranks, and training ends with the same weights,
// bit for bit.
std::string horovodPython() {
  const std::string bin = COHORT_BIN;
  return bin.substr(0, bin.rfind('/')) + "/horovod/bin/python3";
}

// The last line of examples/horovod/train.py: every rank's weights, compared, exactly.
std::string horovodWeights(const std::string& out) {
  std::smatch m;
  const std::regex weights(R"(weights \w+ on \d+ ranks:( -?0x[0-9a-f.]+p[-+]\d+)+)");
  if (!std::regex_search(out, m, weights)) return "";
  return m[0];
}

TEST(RealHorovod, TrainsUnderCohortAsUnderHorovodrun) {
  const std::string python = horovodPython();
  REQUIRE("mpirun --version && " + python +
              " -c 'import horovod.torch as h; assert h.mpi_built()'",
          "Horovod is not built here: tests/horovod/build builds it (scripts/test runs it; 10 to "
          "14 minutes the first time, then cached)");
  const std::string dir = sourceDir() + "/examples/horovod";
  const std::string bin = python.substr(0, python.rfind('/'));
  const std::string plain = shellOutput("cd " + dir + " && " + bin + "/horovodrun -np 4 -H " +
                                        "localhost:4 " + python + " train.py 2>&1; echo exit=$?");
  ASSERT_TRUE(contains(plain, "exit=0")) << plain;
  const std::string expected = horovodWeights(plain);
  ASSERT_TRUE(contains(expected, "weights identical on 4 ranks: ")) << plain;

  std::string root = tempDir();
  auto r = runCohort({"run", "--data-root", root, "--framework", "mpi", "--nodes", "2",
                      "--nproc-per-node", "2", "--workdir", dir, "--", python, "train.py"},
                     300s);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_TRUE(contains(r.out, "rank " + std::to_string(rank) + "/4 (local")) << r.out;
  }
  EXPECT_TRUE(contains(r.out, "[mpirun/0 node0] allreduce: sum of 1..4 is 10")) << r.out;
  EXPECT_EQ(horovodWeights(r.out), expected) << r.out << plain;

  // horovodrun as the job's command: run once, as the job's mpirun, over the job's hostfile.
  root = tempDir();
  r = runCohort({"run", "--data-root", root, "--framework", "mpi", "--nodes", "2",
                 "--nproc-per-node", "2", "--workdir", dir, "--", bin + "/horovodrun", python,
                 "train.py"},
                300s);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "[mpirun/0 node0] [1,3]<stdout>:rank 3/4 (local")) << r.out;
  EXPECT_FALSE(contains(r.out, "rank 0/1")) << "one world, not one per rank: " << r.out;
  EXPECT_EQ(horovodWeights(r.out), expected) << r.out << plain;
}

// horovodrun as a job's command is supervised as the job's mpirun: a rank that fails stops the
// others (which would sleep 2 minutes) and its exit code is the job's (horovodrun becomes
// mpirun); the root cause names the MPI rank when mpirun's report does (in about half the runs).
TEST(RealHorovod, AFailedRankUnderHorovodrunEndsTheJobWithItsCode) {
  const std::string python = horovodPython();
  REQUIRE("mpirun --version && " + python + " -c 'import horovod.torch'",
          "Horovod is not built here: tests/horovod/build builds it");
  const std::string bin = python.substr(0, python.rfind('/'));
  std::string root = tempDir();
  const auto start = std::chrono::steady_clock::now();
  auto r = runCohort({"run", "--data-root", root, "--framework", "mpi", "--nodes", "2",
                      "--nproc-per-node", "2", "--workdir", root, "--", bin + "/horovodrun",
                      python, "-c",
                      "import sys, time\nimport horovod.torch as hvd\nhvd.init()\n"
                      "if hvd.rank() == 2:\n    print('bad', flush=True)\n    sys.exit(3)\n"
                      "time.sleep(120)\n"},
                     300s);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 100s) << "fail-fast: " << r.out << r.err;
  EXPECT_EQ(r.exit_code, 3) << r.out << r.err;
  const bool named =
      contains(r.err, "root cause: MPI rank 2 exited with code 3, under mpirun/0 on node 0");
  const bool unnamed = contains(r.err, "root cause: mpirun/0 on node 0 exited with code 3");
  EXPECT_TRUE(named || unnamed) << r.err;
}

// MindSpore and TensorFlow come from PyPI: the examples name their preset environments.
#define REQUIRE_PRESET(name)                                               \
  do {                                                                     \
    if (!usePresetEnvironment(name, name))                                 \
      GTEST_SKIP() << "the " name                                          \
                      " environment is not built: COHORT_ENVS=build/envs " \
                      "build/cohort env build " name;                      \
  } while (0)

// The last line DeepSpeed's example prints: every rank's weights, compared and summed.
std::string deepSpeedWeights(const std::string& out) {
  std::smatch m;
  if (!std::regex_search(out, m, std::regex(R"(weights identical on \d+/\d+ ranks, sum \S+)"))) {
    return "";
  }
  return m[0];
}

// cohort starts DeepSpeed's ranks itself, with its launcher's variables and --local_rank: the
// same weights, bit for bit, as under `deepspeed --num_gpus 4` (4 ranks either way, here on 2
// simulated nodes).
TEST(RealDeepSpeed, TrainsUnderCohortAsUnderItsOwnLauncher) {
  REQUIRE_PRESET("deepspeed");
  const std::string bin = COHORT_BIN;
  const std::string venv = bin.substr(0, bin.rfind('/')) + "/envs/deepspeed/venv/bin/";
  const std::string plain = shellOutput("cd " + sourceDir() + "/examples/deepspeed && " + venv +
                                        "deepspeed --num_gpus 4 train.py --steps=30 2>&1; "
                                        "echo exit=$?");
  ASSERT_TRUE(contains(plain, "exit=0")) << plain;
  ASSERT_NE(deepSpeedWeights(plain), "") << plain;
  std::string root = tempDir();
  auto r = runCohort({"run", "--data-root", root, "-f",
                      sourceDir() + "/examples/deepspeed/train.yaml"},
                     300s);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "[worker/3 node1] rank 3/4 local 1 ready")) << r.out;
  EXPECT_EQ(deepSpeedWeights(r.out), deepSpeedWeights(plain)) << r.out << plain;
  EXPECT_EQ(readText(onlyJobDir(root) + "/files/hostfile"), "node0 slots=2\nnode1 slots=2\n");
}

// A command that is DeepSpeed's own launcher runs once per node, without ssh; a rank that fails
// under cohort's own start is named, with its node, as the root cause.
TEST(RealDeepSpeed, ItsOwnLauncherRunsOncePerNodeAndAFailedRankIsNamed) {
  REQUIRE_PRESET("deepspeed");
  std::string root = tempDir();
  auto own = runCohort({"run", "--data-root", root, "--framework", "deepspeed", "--environment",
                        "deepspeed", "--nodes", "2", "--nproc-per-node", "1", "--workdir",
                        sourceDir() + "/examples/deepspeed", "--", "deepspeed", "train.py",
                        "--steps=5"},
                       300s);
  ASSERT_EQ(own.exit_code, 0) << own.out << own.err;
  EXPECT_TRUE(contains(own.out, "[deepspeed/node1 node1]")) << own.out;
  EXPECT_TRUE(contains(own.out, "weights identical on 2/2 ranks")) << own.out;
  std::string failed_root = tempDir();
  auto failed = runCohort({"run", "--data-root", failed_root, "--framework", "deepspeed",
                           "--environment", "deepspeed", "--nodes", "2", "--nproc-per-node", "1",
                           "--workdir", sourceDir() + "/examples/deepspeed", "--", "python3",
                           "train.py", "--steps=30", "--fail_rank=1"},
                          300s);
  EXPECT_EQ(failed.exit_code, 1) << failed.out << failed.err;
  EXPECT_TRUE(contains(failed.err, "root cause: worker/1 on node 1 exited with code 1"))
      << failed.err;
  EXPECT_TRUE(contains(failed.err, "rank 1 failed on purpose at step 3")) << failed.err;
}

TEST(RealMindSpore, DynamicClusterTrainsDataParallelOnCpu) {
  REQUIRE_PRESET("mindspore");
  std::string root = tempDir();
  auto r = runCohort({"run", "--data-root", root, "-f",
                      sourceDir() + "/examples/mindspore/train.yaml"},
                     300s);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("[worker/0 node0] mindspore data-parallel ok"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("rank 1/2 step 7"), std::string::npos) << r.out;
  // The scheduler ran the same script on node 0, as a process of its own.
  std::string job = onlyJobDir(root);
  EXPECT_NE(readText(job + "/plan.json").find("\"MS_ROLE\": \"MS_SCHED\""), std::string::npos);
  bool scheduler_ran = false;
  for (const auto& e : readJsonLines(job + "/events.jsonl")) {
    scheduler_ran |= e["event"] == "rank_exit" && e["name"] == "scheduler/0";
  }
  EXPECT_TRUE(scheduler_ran);
}

TEST(RealTensorFlow, ParameterServerJobEndsWithTheChiefAndStopsTheServers) {
  REQUIRE_PRESET("tensorflow");
  std::string root = tempDir();
  auto r = runCohort({"run", "--data-root", root, "-f",
                      sourceDir() + "/examples/tensorflow/ps.yaml"},
                     300s);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("tensorflow ps ok"), std::string::npos) << r.out;
  int stopped = 0;
  for (const auto& e : readJsonLines(onlyJobDir(root) + "/events.jsonl")) {
    if (e["event"] != "rank_exit") continue;
    if (e["role"] == "chief") {
      EXPECT_EQ(e["code"], 0);
    } else {
      EXPECT_TRUE(e["by_cohort"].get<bool>()) << e.dump();
      ++stopped;
    }
  }
  EXPECT_EQ(stopped, 3) << "2 workers and 1 ps serve forever and are stopped";
}

// A ps/worker script that parses its flags with absl (which refuses --task_name) runs with
// task_flags: false, its hyperparameters still arriving as flags.
TEST(RealTensorFlow, AnAbslFlagsScriptRunsWithTaskFlagsOff) {
  REQUIRE_PRESET("tensorflow");
  std::string root = tempDir();
  auto r = runCohort({"run", "--data-root", root, "-f",
                      sourceDir() + "/examples/tensorflow/absl_ps.yaml"},
                     300s);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("[chief/0 node0] tensorflow absl ps ok (3 steps)"), std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("task_name"), std::string::npos) << r.out;
}

TEST(RealTensorFlow, MultiWorkerMirroredStrategyTrainsOnTwoWorkers) {
  REQUIRE_PRESET("tensorflow");
  std::string root = tempDir();
  auto r = runCohort({"run", "--data-root", root, "-f",
                      sourceDir() + "/examples/tensorflow/multi_worker.yaml"},
                     300s);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("[worker/0 node0] tensorflow multi-worker ok"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace cohort::testing
