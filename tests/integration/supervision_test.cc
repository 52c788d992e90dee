// Supervision semantics of DESIGN.md, driven through the real binary with cohort-test-rank
// playing the ranks: fail-fast across nodes, key roles, restarts, grace escalation, max_runtime,
// signals, and no process left behind after any ending (kill -9 of an agent included, where
// the machine gives cohort a cgroup).
#include <arpa/inet.h>
#include <dirent.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "harness.h"
#include "tests/versitygw.h"
#include "proc/cgroup.h"

namespace cohort::testing {
namespace {

std::vector<nlohmann::json> rankExits(const std::string& job) {
  std::vector<nlohmann::json> out;
  for (const auto& e : readJsonLines(job + "/events.jsonl")) {
    if (e["event"] == "rank_exit") out.push_back(e);
  }
  return out;
}

void expectAllGone(const std::vector<pid_t>& pids) {
  for (pid_t pid : pids) {
    EXPECT_TRUE(waitFor([&] { return processGone(pid); }, 5s)) << "process " << pid << " survived";
    if (!processGone(pid)) ::kill(pid, SIGKILL);  // not left to the next test
  }
}

// The node agents that `cohort` started, by node index, from /proc: "cohort node N" (a copy of
// cohort), or `cohort exec ... --node N`.
std::map<int, pid_t> agentsOf(pid_t cohort) {
  std::map<int, pid_t> agents;
  DIR* dir = ::opendir("/proc");
  if (!dir) return agents;
  while (dirent* entry = ::readdir(dir)) {
    if (entry->d_name[0] < '0' || entry->d_name[0] > '9') continue;
    std::string proc = std::string("/proc/") + entry->d_name;
    std::string stat = readText(proc + "/stat");
    size_t close = stat.rfind(')');
    if (close == std::string::npos || std::atoi(stat.c_str() + close + 4) != cohort) continue;
    std::string comm = readText(proc + "/comm");
    if (comm.rfind("cohort node ", 0) == 0) {
      agents[std::atoi(comm.c_str() + 12)] = std::atoi(entry->d_name);
      continue;
    }
    std::vector<std::string> args;
    std::string cmdline = readText(proc + "/cmdline");
    for (size_t at = 0; at < cmdline.size(); at = cmdline.find('\0', at) + 1) {
      args.emplace_back(cmdline.c_str() + at);
    }
    for (size_t i = 0; i + 1 < args.size(); ++i) {
      if (args[1] == "exec" && args[i] == "--node") {
        agents[std::atoi(args[i + 1].c_str())] = std::atoi(entry->d_name);
      }
    }
  }
  ::closedir(dir);
  return agents;
}

// The directory in which cohort makes its cgroups (the test's own cgroup, which the agents
// share), or "" with the reason in `why` when the machine has no writable cgroup v2 tree.
std::string cgroupBase(std::string* why) {
  auto base = proc::ownWritableCgroup();
  if (!base) {
    *why = base.error().message;
    return "";
  }
  return *base;
}

bool pathExists(const std::string& path) {
  struct stat st{};
  return ::stat(path.c_str(), &st) == 0;
}

// The cgroup path /proc says `pid` is in ("" when gone).
std::string cgroupOf(pid_t pid) {
  std::string text = readText("/proc/" + std::to_string(pid) + "/cgroup");
  auto at = text.find("0::");
  return at == std::string::npos ? "" : text.substr(at + 3, text.find('\n', at) - at - 3);
}

TEST(Supervision, FirstFailureStopsEveryRankOnEveryNode) {
  std::string root = tempDir();
  std::string pids = root + "/pids";
  auto start = std::chrono::steady_clock::now();
  auto r = runCohort({"run", "--data-root", root, "--nodes", "2", "--nproc-per-node", "2", "--",
                      testRank(), "pidfile=" + pids, "echo=up", "rank3:sleep=0.2",
                      "rank3:echo=about to fail", "rank3:exit=7", "sleep=60"});
  EXPECT_LT(std::chrono::steady_clock::now() - start, 20s) << "the survivors were not stopped";
  EXPECT_EQ(r.exit_code, 7) << r.err;
  EXPECT_NE(r.err.find("root cause: worker/3 on node 1 exited with code 7"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("| about to fail"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("3 rank(s) were stopped by cohort"), std::string::npos) << r.err;
  std::string job = onlyJobDir(root);
  auto result = readJson(job + "/result.json");
  EXPECT_EQ(result["state"], "failed");
  EXPECT_EQ(result["root_cause"]["rank"], 3);
  EXPECT_EQ(result["root_cause"]["node"], 1);
  int stopped = 0;
  for (const auto& e : rankExits(job)) {
    if (e["rank"] != 3) {
      EXPECT_TRUE(e["by_cohort"].get<bool>());
      EXPECT_EQ(e["signal"], SIGTERM);
      ++stopped;
    }
  }
  EXPECT_EQ(stopped, 3);
  expectAllGone(readPids(pids));
}

TEST(Supervision, KilledBySignalGivesShellStyleExitCode) {
  // In the sandbox too: bubblewrap ends with 128 + N, which is the rank's signal N again.
  const bool sandbox = ::access("/usr/bin/bwrap", X_OK) == 0 &&
                       std::system("/usr/bin/bwrap --dev-bind / / true 2>/dev/null") == 0;
  for (const bool isolate : {false, true}) {
    if (isolate && !sandbox) continue;
    std::string root = tempDir();
    std::vector<std::string> args = {"run", "--data-root", root, "--nodes", "2"};
    if (isolate) args.push_back("--isolate");
    for (const std::string& a :
         {std::string("--"), testRank(), std::string("rank1:kill=9"), std::string("sleep=60")}) {
      args.push_back(a);
    }
    auto r = runCohort(args);
    EXPECT_EQ(r.exit_code, 128 + 9) << r.err;
    EXPECT_NE(r.err.find("was killed by SIGKILL"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("hint:"), std::string::npos) << r.err;
  }
}

TEST(Supervision, KeyRoleSuccessStopsTheOtherRoles) {
  std::string root = tempDir();
  std::string dir = tempDir();
  std::ofstream(dir + "/job.yaml") << "name: ps-worker\ncommand: [" << testRank()
                                   << ", pidfile=" << root << "/pids, rank0:sleep=600, "
                                   << "echo=worked]\n"
                                   << "roles:\n  ps: {nodes: 1}\n  worker: {nodes: 2}\n"
                                   << "policy: {success: [worker]}\n";
  auto r = runCohort({"run", "--data-root", root, "-f", dir + "/job.yaml"}, 30s);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::string job = onlyJobDir(root);
  EXPECT_EQ(readJson(job + "/result.json")["state"], "succeeded");
  for (const auto& e : rankExits(job)) {
    if (e["role"] == "ps") {
      EXPECT_TRUE(e["by_cohort"].get<bool>()) << "ps should have been stopped by cohort";
    } else {
      EXPECT_EQ(e["code"], 0);
    }
  }
  expectAllGone(readPids(root + "/pids"));
}

TEST(Supervision, RestartsTheWholeGangWithTheRestartCount) {
  std::string root = tempDir();
  auto r = runCohort({"run", "--data-root", root, "--framework", "pytorch", "--nodes", "2",
                      "--max-restarts", "2", "--", testRank(), "env", "attempt0:rank1:exit=3",
                      "attempt0:sleep=60", "echo=done"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("restarting (1 of 2 restarts)"), std::string::npos) << r.err;
  std::string job = onlyJobDir(root);
  auto result = readJson(job + "/result.json");
  EXPECT_EQ(result["attempts"], 2);
  // Rank 1 prints its environment, then fails, in attempt 0 (rank 0 may be stopped before it
  // prints anything), and prints it again in attempt 1.
  std::string log = readText(job + "/logs/worker-1.log");
  EXPECT_NE(log.find("COHORT_RESTART_COUNT=0"), std::string::npos);
  EXPECT_NE(log.find("COHORT_RESTART_COUNT=1"), std::string::npos);
  EXPECT_NE(log.find("TORCHELASTIC_RESTART_COUNT=1"), std::string::npos);
  int restarting = 0;
  for (const auto& e : readJsonLines(job + "/events.jsonl")) {
    if (e["event"] == "state" && e["state"] == "restarting") ++restarting;
  }
  EXPECT_EQ(restarting, 1);
}

// The node whose rank failed has nothing to stop when the coordinator says "stop": no SIGKILL
// may be left armed for the restarted gang, which here runs well past the grace period.
TEST(Supervision, RestartedGangOutlivesTheGracePeriodOfTheStopBeforeIt) {
  std::string root = tempDir();
  auto r = runCohort({"run", "--data-root", root, "--nodes", "2", "--max-restarts", "1",
                      "--grace-period", "1s", "--", testRank(), "attempt0:rank1:exit=3",
                      "attempt0:sleep=60", "attempt1:sleep=3", "echo=done"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::string job = onlyJobDir(root);
  EXPECT_EQ(readJson(job + "/result.json")["attempts"], 2);
  for (const auto& e : rankExits(job)) {
    if (e["attempt"] == 1) {
      EXPECT_EQ(e["code"], 0) << e.dump();
      EXPECT_EQ(e["signal"], 0) << e.dump();
    }
  }
  EXPECT_NE(readText(job + "/logs/worker-1.log").find("done"), std::string::npos);
}

// A rank that leaves a process behind has its node's cgroup killed at the attempt's end; the
// next attempt's ranks still start and run (they go into a cgroup of their own, as the kernel
// kills what is cloned into a cgroup that was killed), and nothing is left after the job.
TEST(Supervision, AttemptAfterAnEscapedProcessWasKilledRunsItsRanks) {
  std::string why;
  std::string base = cgroupBase(&why);
  if (base.empty()) GTEST_SKIP() << "no writable cgroup v2 tree: " << why;
  std::string root = tempDir();
  const std::string script =
      "setsid sleep 60 & echo $! >> " + root +
      "/escaped; "
      "if [ \"$COHORT_RESTART_COUNT\" = 0 ]; then exit 3; fi; echo second attempt ran";
  auto r = runCohort({"run", "--data-root", root, "--nodes", "2", "--max-restarts", "1", "--", "sh",
                      "-c", script});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::string job = onlyJobDir(root);
  EXPECT_EQ(readJson(job + "/result.json")["attempts"], 2);
  EXPECT_NE(readText(job + "/logs/worker-1.log").find("second attempt ran"), std::string::npos)
      << readText(job + "/logs/worker-1.log");
  expectAllGone(readPids(root + "/escaped"));
  EXPECT_FALSE(pathExists(base + "/cohort/" + job.substr(root.size() + 6)));
}

TEST(Supervision, RestartBudgetIsGlobalAndRunsOut) {
  std::string root = tempDir();
  auto r = runCohort({"run", "--data-root", root, "--nodes", "2", "--max-restarts", "2", "--",
                      testRank(), "rank1:exit=5", "sleep=60"});
  EXPECT_EQ(r.exit_code, 5) << r.err;
  auto result = readJson(onlyJobDir(root) + "/result.json");
  EXPECT_EQ(result["attempts"], 3);
  EXPECT_EQ(result["root_cause"]["attempt"], 2);
}

TEST(Supervision, RankIgnoringSigtermIsKilledAfterTheGracePeriod) {
  std::string root = tempDir();
  auto start = std::chrono::steady_clock::now();
  auto r = runCohort({"run", "--data-root", root, "--nodes", "2", "--grace-period", "500ms",
                      "--", testRank(), "ignore-term", "pidfile=" + root + "/pids",
                      "rank0:touch=" + root + "/ignoring", "rank1:wait-file=" + root + "/ignoring",
                      "rank1:exit=1", "sleep=60"});
  auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_LT(took, 15s);
  bool killed = false;
  for (const auto& e : rankExits(onlyJobDir(root))) {
    if (e["rank"] == 0) killed = e["signal"] == SIGKILL;
  }
  EXPECT_TRUE(killed) << "rank 0 ignores SIGTERM and must end by SIGKILL";
  expectAllGone(readPids(root + "/pids"));
}

TEST(Supervision, MaxRuntimeStopsTheJobWithExitCode124) {
  std::string root = tempDir();
  auto r = runCohort({"run", "--data-root", root, "--nodes", "2", "--max-runtime", "300ms",
                      "--", testRank(), "sleep=60"});
  EXPECT_EQ(r.exit_code, 124) << r.err;
  EXPECT_NE(r.err.find("max_runtime"), std::string::npos) << r.err;
}

TEST(Supervision, SetsidGrandchildIsKilledWhenTheJobEnds) {
  std::string root = tempDir();
  std::string escaped = root + "/escaped";
  auto r = runCohort({"run", "--data-root", root, "--nodes", "2", "--", testRank(),
                      "setsid-child=" + escaped, "echo=done"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  auto pids = readPids(escaped);
  EXPECT_EQ(pids.size(), 2u);
  expectAllGone(pids);
}

// Four sleeping ranks on two nodes, each with a grandchild that escaped with setsid.
struct SleepingJob {
  std::string root = tempDir();
  CohortProcess cohort{{"run", "--data-root", root, "--nodes", "2", "--nproc-per-node", "2", "--",
                        testRank(), "pidfile=" + root + "/pids",
                        "setsid-child=" + root + "/escaped", "sleep=60"}};

  bool waitUntilRunning() {
    return waitFor([&] { return readPids(root + "/pids").size() == 4 &&
                                readPids(root + "/escaped").size() == 4; }, 20s);
  }
  void expectNothingLeft() {
    expectAllGone(readPids(root + "/pids"));
    expectAllGone(readPids(root + "/escaped"));
  }
};

class StopSignal : public ::testing::TestWithParam<int> {};

TEST_P(StopSignal, StopsGracefullyWithShellStyleExitCode) {
  const int sig = GetParam();
  SleepingJob job;
  ASSERT_TRUE(job.waitUntilRunning());
  ::kill(job.cohort.pid(), sig);
  auto r = job.cohort.wait(20s);
  EXPECT_EQ(r.exit_code, 128 + sig) << r.err;
  EXPECT_NE(r.err.find(std::string("SIG") + sigabbrev_np(sig) + " received"), std::string::npos)
      << r.err;
  EXPECT_EQ(readJson(onlyJobDir(job.root) + "/result.json")["state"], "stopped");
  for (const auto& e : rankExits(onlyJobDir(job.root))) {
    EXPECT_EQ(e["signal"], SIGTERM) << "ranks get SIGTERM first, whatever cohort received";
  }
  job.expectNothingLeft();
}

INSTANTIATE_TEST_SUITE_P(Signals, StopSignal, ::testing::Values(SIGINT, SIGTERM),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return std::string("SIG") + sigabbrev_np(info.param);
                         });

// A stop that comes while the ranks start, sandboxed or not: the sandbox ignores the stop signals
// until the rank's own program runs, and an agent still dialling in has no coordinator to hear
// from. Neither may hold the stop up for the grace period (60 s here) or the reap's deadline.
TEST(Supervision, AStopWhileTheRanksStartEndsTheJobAtOnce) {
  const bool sandbox = ::access("/usr/bin/bwrap", X_OK) == 0 &&
                       std::system("/usr/bin/bwrap --dev-bind / / true 2>/dev/null") == 0;
  for (int round = 0; round < 12; ++round) {
    const std::string root = tempDir();
    std::vector<std::string> args = {"run", "--data-root", root, "--grace-period", "60s",
                                     "--nodes", "2", "--framework", "generic"};
    if (sandbox && round % 2 == 0) args.push_back("--isolate");
    for (const std::string& a : {std::string("--"), testRank(), std::string("sleep=60")}) {
      args.push_back(a);
    }
    CohortProcess cohort(args);
    ::usleep(static_cast<useconds_t>(round * 4000));  // 0 to 44 ms: every phase of the start
    ::kill(cohort.pid(), SIGTERM);
    const auto began = std::chrono::steady_clock::now();
    RunResult r = cohort.wait(50s);
    EXPECT_EQ(r.exit_code, 143) << "round " << round << ": " << r.err;
    EXPECT_LT(std::chrono::steady_clock::now() - began, 4s) << "round " << round << ": " << r.err;
  }
}

TEST(Supervision, SecondSignalKillsAtOnce) {
  std::string root = tempDir();
  std::string pids = root + "/pids";
  CohortProcess cohort({"run", "--data-root", root, "--nodes", "2", "--grace-period", "60s",
                        "--", testRank(), "ignore-term", "pidfile=" + pids, "sleep=60"});
  ASSERT_TRUE(waitFor([&] { return readPids(pids).size() == 2; }, 20s));
  ::kill(cohort.pid(), SIGINT);
  ASSERT_TRUE(waitFor([&] {
    return readText(onlyJobDir(root) + "/events.jsonl").find("stopping") != std::string::npos;
  }, 10s));
  ::kill(cohort.pid(), SIGINT);
  auto r = cohort.wait(20s);  // well before the 60 s grace period
  EXPECT_EQ(r.exit_code, 130) << r.err;
  EXPECT_NE(r.err.find("second signal"), std::string::npos) << r.err;
  expectAllGone(readPids(pids));
}

TEST(Supervision, KillDashNineOfCohortLeavesNoProcess) {
  SleepingJob job;
  ASSERT_TRUE(job.waitUntilRunning());
  ::kill(job.cohort.pid(), SIGKILL);
  job.cohort.wait(20s);
  job.expectNothingLeft();
}

TEST(Supervision, KillDashNineOfOneAgentLeavesNoProcessOfItsNode) {
  std::string why;
  std::string base = cgroupBase(&why);
  if (base.empty()) GTEST_SKIP() << "no writable cgroup v2 tree: " << why;
  SleepingJob job;
  ASSERT_TRUE(job.waitUntilRunning());
  const std::string job_id = onlyJobDir(job.root).substr(job.root.size() + 6);
  const std::string cgroup = base + "/cohort/" + job_id;
  // The escaped grandchildren are where the agents put them, one cgroup per node.
  for (pid_t pid : readPids(job.root + "/escaped")) {
    EXPECT_NE(cgroupOf(pid).find("/cohort/" + job_id + "/node"), std::string::npos)
        << "process " << pid << " is in '" << cgroupOf(pid) << "'";
  }
  auto agents = agentsOf(job.cohort.pid());
  ASSERT_EQ(agents.size(), 2u);
  ASSERT_EQ(::kill(agents[1], SIGKILL), 0);
  auto r = job.cohort.wait(30s);
  EXPECT_GT(r.exit_code, 0) << "a job that lost a node must fail: " << r.err;
  job.expectNothingLeft();
  EXPECT_TRUE(waitFor([&] { return !pathExists(cgroup); }, 10s)) << cgroup << " is left";
}

TEST(Supervision, ANodeThatSaysNothingIsLostByItsHeartbeatsAndNamed) {
  // A stopped agent keeps its connection open, as a hung machine or a cut network would:
  // only the missing heartbeats tell.
  std::string root = tempDir();
  CohortProcess cohort{{"run", "--data-root", root, "--nodes", "2", "--heartbeat-timeout", "2s",
                        "--", testRank(), "pidfile=" + root + "/pids", "sleep=60"}};
  ASSERT_TRUE(waitFor([&] { return readPids(root + "/pids").size() == 2; }, 20s));
  auto agents = agentsOf(cohort.pid());
  ASSERT_EQ(agents.size(), 2u);
  ASSERT_EQ(::kill(agents[1], SIGSTOP), 0);
  auto r = cohort.wait(30s);
  ::kill(agents[1], SIGCONT);  // it finds its coordinator gone and stops its rank
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("node 1's agent was lost (no word from it in 2.0s)"), std::string::npos)
      << r.err;
  // The same root cause block as for a failed rank: the node, its ranks, a hint.
  EXPECT_NE(r.err.find("root cause: node 1's agent was lost (no word from it in 2.0s) (the first "
                       "failure)\n  its rank(s): worker/1\n"),
            std::string::npos)
      << r.err;
  expectAllGone(readPids(root + "/pids"));
}

// The reproduction of a verdict that lied: a coordinator paused (SIGSTOP) for longer than the
// heartbeat timeout used to have its agents stop every rank on their own, and the job was then
// recorded as succeeded with nothing run. An agent on the coordinator's machine watches its
// process, not a clock: the paused coordinator finds its job as it was, and the job's verdict is
// the ranks' own.
TEST(Supervision, ACoordinatorPausedLongerThanTheHeartbeatTimeoutFindsItsJobAsItWas) {
  std::string root = tempDir();
  CohortProcess cohort{{"run", "--data-root", root, "--nodes", "2", "--heartbeat-timeout", "1s",
                        "--", testRank(), "pidfile=" + root + "/pids", "wait-file=" + root + "/go",
                        "echo=finished by itself"}};
  ASSERT_TRUE(waitFor([&] { return readPids(root + "/pids").size() == 2; }, 20s));
  ASSERT_EQ(::kill(cohort.pid(), SIGSTOP), 0);
  std::this_thread::sleep_for(3500ms);  // the pause under test: over three heartbeat timeouts
  std::ofstream(root + "/go") << "go\n";
  std::this_thread::sleep_for(500ms);  // the ranks finish while the coordinator is still paused
  ASSERT_EQ(::kill(cohort.pid(), SIGCONT), 0);
  auto r = cohort.wait(30s);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const std::string job = onlyJobDir(root);
  for (const std::string rank : {"0", "1"}) {
    EXPECT_NE(readText(job + "/logs/worker-" + rank + ".log").find("finished by itself"),
              std::string::npos);
  }
  for (const auto& e : rankExits(job)) {
    EXPECT_FALSE(e["by_cohort"].get<bool>()) << e.dump();
    EXPECT_EQ(e["code"], 0) << e.dump();
  }
}

// Ranks that write while their coordinator is paused: what the agent cannot hand over waits
// (then the ranks wait on their own output), nothing is cut or lost, and the agent's own loop
// never stalls on the coordinator.
TEST(Supervision, OutputWrittenWhileTheCoordinatorIsPausedIsKeptWhole) {
  std::string root = tempDir();
  CohortProcess cohort{{"run", "--data-root", root, "--nodes", "2", "--", testRank(),
                        "pidfile=" + root + "/pids", "wait-file=" + root + "/go",
                        "flood=50000000", "echo=the last line"}};
  ASSERT_TRUE(waitFor([&] { return readPids(root + "/pids").size() == 2; }, 20s));
  ASSERT_EQ(::kill(cohort.pid(), SIGSTOP), 0);
  std::ofstream(root + "/go") << "go\n";
  std::this_thread::sleep_for(3s);
  ASSERT_EQ(::kill(cohort.pid(), SIGCONT), 0);
  auto r = cohort.wait(60s);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const std::string job = onlyJobDir(root);
  for (const std::string rank : {"0", "1"}) {
    const std::string log = readText(job + "/logs/worker-" + rank + ".log");
    EXPECT_GE(log.size(), 50000000u);
    EXPECT_NE(log.find("the last line"), std::string::npos);
    EXPECT_NE(log.find("rank " + rank + " line 0 "), std::string::npos);
  }
}

// An agent on another machine cannot tell a paused coordinator from a dead one: after the
// heartbeat timeout it stops its ranks on its own. When the coordinator comes back it hears
// why, and the job fails saying so: a rank its agent stopped is never a success, even one that
// was killed by a signal and so reported code 0 (as the issue's events.jsonl showed).
TEST(Supervision, RanksAnAgentStoppedOnItsOwnAreNeverASuccessAndTheRecordSaysWhy) {
  std::string root = tempDir();
  const int port = freeLoopbackPort();
  const std::string secret = "5ec2e75ec2e75ec2e75ec2e75ec2e75e";
  nlohmann::json spec = {{"name", "paused"},
                         {"framework", "generic"},
                         {"command", {testRank(), "pidfile=" + root + "/pids", "sleep=60"}},
                         {"policy", {{"heartbeat_timeout", "1s"}}}};
  std::vector<std::string> env = {"COHORT_DATA_ROOT=" + root, "COHORT_JOB_ID=paused-1",
                                  "COHORT_JOB_SECRET=" + secret, "COHORT_JOB=" + spec.dump()};
  CohortProcess coordinator({"coordinate", "--listen", "127.0.0.1:" + std::to_string(port)}, env);
  CohortProcess agent({"exec", "--coordinator", "127.0.0.1:" + std::to_string(port), "--node", "0"},
                      {"COHORT_JOB_SECRET=" + secret});
  ASSERT_TRUE(waitFor([&] { return readPids(root + "/pids").size() == 1; }, 20s))
      << coordinator.wait(1s).err;
  ASSERT_EQ(::kill(coordinator.pid(), SIGSTOP), 0);
  auto a = agent.wait(30s);  // it gives the coordinator up, stops its rank, and goes
  ASSERT_EQ(::kill(coordinator.pid(), SIGCONT), 0);
  auto r = coordinator.wait(30s);
  EXPECT_NE(a.err.find("no word from the coordinator in 1.0s"), std::string::npos) << a.err;
  EXPECT_NE(a.err.find("load average"), std::string::npos) << a.err;
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("was stopped by its node's agent on its own (it lost its coordinator: "
                       "no word from the coordinator in 1.0s"),
            std::string::npos)
      << r.err;
  const std::string job = onlyJobDir(root);
  const auto result = nlohmann::json::parse(readText(job + "/result.json"));
  EXPECT_EQ(result["state"], "failed");
  EXPECT_NE(result["reason"].get<std::string>().find("stopped by its node's agent"),
            std::string::npos);
  auto exits = rankExits(job);
  ASSERT_EQ(exits.size(), 1u);
  EXPECT_TRUE(exits[0]["by_cohort"].get<bool>());
  EXPECT_NE(exits[0]["reason"].get<std::string>().find("it lost its coordinator"),
            std::string::npos);
  expectAllGone(readPids(root + "/pids"));
}

// Connects to 127.0.0.1:`port`, sends `text`, and reads what comes until the peer closes or 3 s
// pass. Returns what came and whether the peer closed.
std::pair<std::string, bool> strangerSays(int port, const std::string& text) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    if (fd >= 0) ::close(fd);
    return {"", false};
  }
  (void)::send(fd, text.data(), text.size(), MSG_NOSIGNAL);
  timeval timeout{3, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  std::string got;
  char buf[4096];
  bool closed = false;
  for (;;) {
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n > 0) {
      got.append(buf, static_cast<size_t>(n));
      continue;
    }
    closed = n == 0 || (n < 0 && errno == ECONNRESET);
    break;
  }
  ::close(fd);
  return {got, closed};
}

TEST(Supervision, AStrangerOnTheControlChannelLearnsNoSecretAndIsDropped) {
  std::string root = tempDir();
  CohortProcess cohort{{"run", "--data-root", root, "--nodes", "2", "--", testRank(),
                        "pidfile=" + root + "/pids", "wait-file=" + root + "/go", "echo=done"}};
  ASSERT_TRUE(waitFor([&] { return readPids(root + "/pids").size() == 2; }, 20s));
  const int port = listeningPort(cohort.pid());
  ASSERT_NE(port, 0);
  // Hellos as a stranger: for a node already there, for one that is not, with the secret
  // guessed in the old style, and one that answers its challenge with a wrong proof.
  const std::vector<std::pair<std::string, std::string>> tries = {
      {R"({"type":"hello","node":1,"nonce":"0123456789abcdef0123456789abcdef"})", ""},
      {R"({"type":"hello","node":7,"nonce":"0123456789abcdef0123456789abcdef"})", ""},
      {R"({"type":"hello","node":0,"secret":"0123456789abcdef0123456789abcdef"})", ""},
      {R"({"type":"hello","node":0,"nonce":"0123456789abcdef0123456789abcdef"})",
       R"({"type":"auth","proof":"00"})"}};
  for (const auto& [hello, answer] : tries) {
    auto [got, closed] = strangerSays(port, hello + "\n" + (answer.empty() ? "" : answer + "\n"));
    EXPECT_EQ(got, "") << "a stranger is dropped without a word (the secret least of all)";
    EXPECT_TRUE(closed) << hello << " got: " << got;
  }
  std::ofstream(root + "/go").put('\n');
  auto r = cohort.wait(30s);
  EXPECT_EQ(r.exit_code, 0) << "the job must not notice the strangers: " << r.err;
}

TEST(Supervision, AnAgentSendsNoSecretAndLeavesACoordinatorThatCannotProveIt) {
  // A fake coordinator: it listens, reads the agent's hello, and answers with a wrong proof.
  int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(listener, 4), 0);
  socklen_t len = sizeof addr;
  ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len);
  const std::string secret = "5ec2e75ec2e75ec2e75ec2e75ec2e75e";
  CohortProcess agent({"exec", "--coordinator", "127.0.0.1:" + std::to_string(ntohs(addr.sin_port)),
                       "--node", "0"},
                      {"COHORT_JOB_SECRET=" + secret});
  int conn = ::accept(listener, nullptr, nullptr);
  ASSERT_GE(conn, 0);
  std::string hello;
  char c;
  while (::read(conn, &c, 1) == 1 && c != '\n') hello += c;
  EXPECT_NE(hello.find("\"nonce\""), std::string::npos) << hello;
  EXPECT_EQ(hello.find(secret), std::string::npos) << "the agent sent the secret: " << hello;
  const std::string challenge =
      R"({"type":"challenge","nonce":"0123456789abcdef0123456789abcdef","proof":"00"})" "\n";
  ASSERT_EQ(::write(conn, challenge.data(), challenge.size()),
            static_cast<ssize_t>(challenge.size()));
  auto r = agent.wait(20s);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("did not prove that it knows the job's secret"), std::string::npos) << r.err;
  ::close(conn);
  ::close(listener);
}

// In a Volcano Job's pod the agent knows the coordinator's pod only by its name (svc plugin).
TEST(Supervision, AnAgentDialsACoordinatorGivenByName) {
  int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(listener, 4), 0);
  socklen_t len = sizeof addr;
  ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len);
  CohortProcess agent(
      {"exec", "--coordinator", "localhost:" + std::to_string(ntohs(addr.sin_port)), "--node", "0"},
      {"COHORT_JOB_SECRET=5ec2e75ec2e75ec2e75ec2e75ec2e75e"});
  pollfd dialled{listener, POLLIN, 0};
  ASSERT_EQ(::poll(&dialled, 1, 20000), 1) << "the agent never dialled: " << agent.wait(5s).err;
  int conn = ::accept(listener, nullptr, nullptr);
  ASSERT_GE(conn, 0);
  std::string hello;
  char c;
  while (::read(conn, &c, 1) == 1 && c != '\n') hello += c;
  EXPECT_NE(hello.find("\"nonce\""), std::string::npos) << hello;
  ::close(conn);
  auto r = agent.wait(20s);
  EXPECT_EQ(r.exit_code, 1) << "a coordinator that hangs up is lost: " << r.err;
  ::close(listener);
}

TEST(Supervision, KillDashNineOfCohortAndEveryAgentLeavesNoProcess) {
  std::string why;
  std::string base = cgroupBase(&why);
  if (base.empty()) GTEST_SKIP() << "no writable cgroup v2 tree: " << why;
  SleepingJob job;
  ASSERT_TRUE(job.waitUntilRunning());
  const std::string cgroup = base + "/cohort/" + onlyJobDir(job.root).substr(job.root.size() + 6);
  auto agents = agentsOf(job.cohort.pid());
  ASSERT_EQ(agents.size(), 2u);
  // Nobody gets to clean up: neither the agents (SIGTERM from their dying parent) nor cohort,
  // which is stopped first so that it cannot end the other agents when the first one dies.
  ASSERT_EQ(::kill(job.cohort.pid(), SIGSTOP), 0);
  for (const auto& [node, pid] : agents) ASSERT_EQ(::kill(pid, SIGKILL), 0);
  ASSERT_EQ(::kill(job.cohort.pid(), SIGKILL), 0);
  job.cohort.wait(20s);
  job.expectNothingLeft();
  EXPECT_TRUE(waitFor([&] { return !pathExists(cgroup); }, 10s)) << cgroup << " is left";
}

TEST(Supervision, ExitCodeZeroOnlyWhenEveryKeyRankSucceeded) {
  std::string root = tempDir();
  auto r = runCohort({"run", "--data-root", root, "--nodes", "3", "--", testRank(),
                      "rank2:exit=1"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
}

}  // namespace
}  // namespace cohort::testing
