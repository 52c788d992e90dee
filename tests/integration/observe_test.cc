// Seeing inside a running job, with plain Python ranks (Debian's /usr/bin/python3, no torch): a
// job in which no rank makes progress for hang_timeout names the rank that is stopped and
// records every rank's stack; `cohort stacks` prints the stacks of a running job that goes on;
// `cohort top` shows each rank's resources and latest metrics. The real gloo DDP cases (a rank
// stopped or stuck outside all_reduce; the losses it logged) are in frameworks_test.cc.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <thread>

#include "harness.h"

namespace cohort::testing {
namespace {

bool havePySpy() {
  const std::string bin = COHORT_BIN;
  return shellOutput("test -x " + bin.substr(0, bin.rfind('/')) +
                     "/venv-tools/bin/py-spy && echo yes || command -v py-spy") != "";
}

class Observe : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = tempDir();
    root_ = dir_ + "/root";
  }
  void write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ + "/" + name) << text;
  }
  // The id of the job that has just started under root_ ("" if none came within 5 s).
  std::string jobId() const {
    std::string id;
    for (int i = 0; i < 100 && id.empty(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      id = shellOutput("ls " + root_ + "/jobs 2>/dev/null | tr -d '\\n'");
    }
    return id;
  }
  // Every rank of a kCheckpointScript job has written its ready-<rank> into `out`.
  static bool ranksReady(const std::string& out, int ranks) {
    return waitFor(
        [&] {
          for (int r = 0; r < ranks; ++r) {
            if (::access((out + "/ready-" + std::to_string(r)).c_str(), F_OK) != 0) return false;
          }
          return true;
        },
        30s);
  }
  std::string dir_, root_;
};

TEST_F(Observe, NoProgressForHangTimeoutNamesTheStoppedRankAndRecordsEveryStack) {
  // Each rank prints once, then waits silently; rank 1 stops itself first.
  write("wait.py",
        "import os, signal, time\n"
        "print('up', flush=True)\n"
        "def wait_for_peers():\n    time.sleep(600)\n"
        "if os.environ['COHORT_RANK'] == '1':\n    os.kill(os.getpid(), signal.SIGSTOP)\n"
        "wait_for_peers()\n");
  auto r = runCohort(
      {"run", "--data-root", root_, "--nodes", "2", "--nproc-per-node", "2", "--workdir", dir_,
       "--hang-timeout", "5s", "--grace-period", "5s", "--", "/usr/bin/python3", "wait.py"},
      90s);
  EXPECT_EQ(r.exit_code, 124) << r.err;
  EXPECT_TRUE(contains(r.err,
                       "no rank made progress for hang_timeout 5.0s: worker/1 on node 0 is "
                       "stopped (SIGSTOP, or a debugger holds it)"))
      << r.err;
  const std::string stacks = readText(onlyJobDir(root_) + "/stacks.txt");
  if (!havePySpy()) {  // no stacks to tell the ranks apart: one group, the stopped one counted
    EXPECT_TRUE(contains(stacks, "(4 rank(s), 3 sleeping, 1 stopped)")) << stacks;
  } else {
    EXPECT_TRUE(contains(stacks, "worker/1 on node 0 (1 rank(s), stopped)")) << stacks;
    EXPECT_TRUE(contains(stacks,
                         "worker/0 on node 0, worker/2 on node 1, worker/3 on node 1 (3 "
                         "rank(s), sleeping):\nThread\n    wait_for_peers (wait.py:4)"))
        << stacks;
  }
  EXPECT_EQ(shellOutput("for p in /proc/[0-9]*; do [ \"$(readlink $p/cwd)\" = '" + dir_ +
                        "' ] && echo ${p#/proc/}; done; true"),
            "")
      << "every rank is gone";
  // A stopped rank takes the SIGTERM (SIGCONT follows it): no SIGKILL after the grace period.
  EXPECT_FALSE(contains(readText(onlyJobDir(root_) + "/events.jsonl"), "\"signal\":9")) << r.err;
}

TEST_F(Observe, StacksOfARunningJobPrintAndTheJobGoesOn) {
  write("work.py", "import time\ndef work():\n    time.sleep(8)\nwork()\n");
  CohortProcess job({"run", "-q", "--data-root", root_, "--nodes", "2", "--nproc-per-node", "2",
                     "--workdir", dir_, "--name", "busy", "--", "/usr/bin/python3", "work.py"});
  const std::string id = jobId();
  ASSERT_FALSE(id.empty());
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // python is up
  auto stacks = runCohort({"stacks", id, "--data-root", root_}, 40s);
  EXPECT_EQ(stacks.exit_code, 0) << stacks.err;
  EXPECT_TRUE(contains(stacks.out, "stacks of 4 rank(s), grouped:")) << stacks.out;
  if (havePySpy()) {
    EXPECT_TRUE(contains(stacks.out,
                         "worker/0 on node 0, worker/1 on node 0, worker/2 on node 1, "
                         "worker/3 on node 1 (4 rank(s), sleeping):\nThread\n"
                         "    work (work.py:3)"))
        << stacks.out;
  }
  auto done = job.wait(60s);
  EXPECT_EQ(done.exit_code, 0) << done.err << "the job went on";
  auto ended = runCohort({"stacks", id, "--data-root", root_});
  EXPECT_EQ(ended.exit_code, 1);
  EXPECT_TRUE(contains(ended.err, "has ended")) << ended.err;
  auto missing = runCohort({"stacks", "no-such-job", "--data-root", root_});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_TRUE(contains(missing.err, "no job 'no-such-job'")) << missing.err;
}

TEST_F(Observe, TopShowsEachRanksResourcesAndLatestMetrics) {
  write("train.py",
        "import os, sys, time\n"
        "sys.path.insert(0, os.environ['HELPERS'])\n"
        "import cohort\n"
        "for step in range(1, 4):\n"
        "    cohort.log(step=step, loss=1.0 / step, accuracy=0.5 + step / 10)\n"
        "    sum(i * i for i in range(200000))\n"
        "print('cohort.log not a metric', flush=True)\n"
        "time.sleep(9)\n");
  CohortProcess job({"run", "-q", "--data-root", root_, "--nodes", "2", "--nproc-per-node", "1",
                     "--workdir", dir_, "--name", "train", "--env",
                     "HELPERS=" + sourceDir() + "/python", "--", "/usr/bin/python3", "train.py"});
  const std::string id = jobId();
  ASSERT_FALSE(id.empty());
  std::this_thread::sleep_for(std::chrono::milliseconds(4500));  // a resource sample or two
  auto top = runCohort({"top", id, "--once", "--data-root", root_});
  EXPECT_EQ(top.exit_code, 0) << top.err;
  EXPECT_TRUE(contains(top.out, "job " + id + ": running, 2 rank(s)\n")) << top.out;
  EXPECT_TRUE(std::regex_search(top.out,
                                std::regex(R"(RANK +NAME +NODE +CPU% +RSS +STEP +loss +accuracy)")))
      << top.out;
  // Rank 1 on node 1: sampled (a CPU share and a resident size), at step 3.
  EXPECT_TRUE(std::regex_search(
      top.out, std::regex(R"(\n1 +worker/1 +1 +([0-9.]+|-) +[0-9]+ MiB +3 +0.3333 +0.8\n)")))
      << top.out;
  auto done = job.wait(60s);
  EXPECT_EQ(done.exit_code, 0) << done.err;
  const std::string metrics = readText(onlyJobDir(root_) + "/metrics.jsonl");
  EXPECT_EQ(std::count(metrics.begin(), metrics.end(), '\n'), 6) << metrics;
  EXPECT_TRUE(contains(metrics, "\"rank\":1,\"step\":2,\"loss\":0.5,\"accuracy\":0.7}")) << metrics;
  // Each node's startup: spawned, first output and first metric, in seconds after the start.
  const std::string result = readText(onlyJobDir(root_) + "/result.json");
  const std::regex first_metric(R"("first_metric_s": [0-9.]+)");
  EXPECT_EQ(std::distance(std::sregex_iterator(result.begin(), result.end(), first_metric),
                          std::sregex_iterator()),
            2)
      << result;
  auto after = runCohort({"top", id, "--data-root", root_});
  EXPECT_TRUE(contains(after.out, ": succeeded, 2 rank(s)")) << after.out;
}

// A rank that saves a checkpoint when the stop signal comes: rank 0 through the helper
// (cohort.on_stop), rank 1 with no cohort import, from the variable that names the signal.
constexpr const char* kCheckpointScript =
    "import os, signal, sys, time\n"
    "sys.path.insert(0, os.environ['HELPERS'])\n"
    "rank, out = os.environ['COHORT_RANK'], os.environ['COHORT_OUTPUT_DIR']\n"
    "notices = []\n"
    "def save():\n"
    "    notices.append(1)\n"
    "    with open(os.path.join(out, 'ckpt-' + rank), 'w') as f:\n"
    "        f.write(os.environ['COHORT_STOP_SIGNAL'])\n"
    "    sys.exit(0)\n"
    "if rank == '0':\n"
    "    import cohort\n"
    "    cohort.on_stop(save)\n"
    "else:\n"
    "    signal.signal(signal.Signals[os.environ['COHORT_STOP_SIGNAL']], lambda s, f: save())\n"
    "open(os.path.join(out, 'ready-' + rank), 'w').close()\n"
    "while True:\n"
    "    time.sleep(0.1)\n";

std::string stoppingReason(const std::string& job_dir) {
  for (const nlohmann::json& e : readJsonLines(job_dir + "/events.jsonl")) {
    if (e.value("state", "") == "stopping") return e.value("reason", "");
  }
  return "(no stopping event)";
}

std::vector<nlohmann::json> rankExitsOf(const std::string& job_dir) {
  std::vector<nlohmann::json> out;
  for (const nlohmann::json& e : readJsonLines(job_dir + "/events.jsonl")) {
    if (e.value("event", "") == "rank_exit") out.push_back(e);
  }
  return out;
}

// max_runtime with policy.stop_signal from the job file: each rank gets the notice once, saves,
// and exits 0 well within the grace period; the event says what was sent.
TEST_F(Observe, AtMaxRuntimeEveryRankGetsTheStopSignalAndSavesACheckpoint) {
  write("ckpt.py", kCheckpointScript);
  write("job.yaml",
        "name: ckpt\nframework: generic\ncommand: [/usr/bin/python3, ckpt.py]\n"
        "roles: {worker: {nodes: 2, procs_per_node: 1}}\n"
        "env: {HELPERS: " +
            sourceDir() +
            "/python}\n"
            "policy:\n  stop_signal: SIGUSR1\n  max_runtime: 3s\n  grace_period: 20s\n");
  const auto began = std::chrono::steady_clock::now();
  auto r = runCohort({"run", "--data-root", root_, "-f", dir_ + "/job.yaml"}, 60s);
  EXPECT_EQ(r.exit_code, 124) << r.err;
  EXPECT_LT(std::chrono::steady_clock::now() - began, 15s) << "nobody waited for the SIGKILL";
  EXPECT_TRUE(contains(r.err,
                       "max_runtime 3.0s exceeded; stopping every rank: sent SIGUSR1 to "
                       "2 rank(s), SIGKILL in 20.0s"))
      << r.err;
  const std::string job = onlyJobDir(root_);
  for (const char* rank : {"0", "1"}) {
    EXPECT_EQ(readText(job + "/output/ckpt-" + rank), "SIGUSR1") << "rank " << rank;
  }
  EXPECT_EQ(stoppingReason(job),
            "max_runtime 3.0s exceeded; sent SIGUSR1 to 2 rank(s), SIGKILL in 20.0s");
  auto exits = rankExitsOf(job);
  ASSERT_EQ(exits.size(), 2u);
  for (const auto& e : exits) {
    EXPECT_EQ(e.value("code", -1), 0) << e.dump() << ": it saved and left by itself";
    EXPECT_EQ(e.value("signal", -1), 0) << e.dump();
  }
  EXPECT_EQ(readJson(job + "/result.json")["state"], "failed");
}

// The user's stop (Ctrl-C or SIGTERM to `cohort run`; `cohort stop` of a server job signals its
// coordinator the same way) gives the same notice.
TEST_F(Observe, AUsersStopGivesEveryRankTheNoticeToCheckpoint) {
  write("ckpt.py", kCheckpointScript);
  CohortProcess job({"run", "-q", "--data-root", root_, "--nodes", "2", "--workdir", dir_,
                     "--framework", "generic", "--stop-signal", "USR2", "--env",
                     "HELPERS=" + sourceDir() + "/python", "--", "/usr/bin/python3", "ckpt.py"});
  const std::string id = jobId();
  ASSERT_FALSE(id.empty());
  const std::string out = root_ + "/jobs/" + id + "/output";
  ASSERT_TRUE(ranksReady(out, 2));
  ::kill(job.pid(), SIGTERM);
  auto r = job.wait(30s);
  EXPECT_EQ(r.exit_code, 143) << r.err;
  EXPECT_EQ(readText(out + "/ckpt-0"), "SIGUSR2");
  EXPECT_EQ(readText(out + "/ckpt-1"), "SIGUSR2");
  EXPECT_EQ(stoppingReason(root_ + "/jobs/" + id),
            "stopped by SIGTERM; sent SIGUSR2 to 2 rank(s), SIGKILL in 30.0s");
  EXPECT_EQ(readJson(root_ + "/jobs/" + id + "/result.json")["state"], "stopped");
}

// A cluster that preempts a job (Slurm sends its tasks SIGTERM) signals an agent, not the
// coordinator: that node's ranks and every other node's get the notice, and the job is stopped.
TEST_F(Observe, AnAgentSignalledFromOutsideGivesEveryNodesRanksTheNotice) {
  write("ckpt.py", kCheckpointScript);
  CohortProcess job({"run", "--data-root", root_, "--nodes", "2", "--workdir", dir_, "--framework",
                     "generic", "--stop-signal", "SIGUSR1", "--env",
                     "HELPERS=" + sourceDir() + "/python", "--", "/usr/bin/python3", "ckpt.py"});
  const std::string id = jobId();
  ASSERT_FALSE(id.empty());
  const std::string out = root_ + "/jobs/" + id + "/output";
  ASSERT_TRUE(ranksReady(out, 2));
  const std::string agent = shellOutput("pgrep -P " + std::to_string(job.pid()) +
                                        " -x 'cohort node 1' | head -1 | tr -d '\\n'");
  ASSERT_FALSE(agent.empty());
  ::kill(std::atoi(agent.c_str()), SIGTERM);
  auto r = job.wait(30s);
  EXPECT_EQ(r.exit_code, 143) << r.err;
  EXPECT_TRUE(contains(r.err,
                       "node 1's agent got SIGTERM (its cluster preempts or cancels the "
                       "job, or its machine shuts down); stopping every rank"))
      << r.err;
  EXPECT_EQ(readText(out + "/ckpt-0"), "SIGUSR1");
  EXPECT_EQ(readText(out + "/ckpt-1"), "SIGUSR1");
  EXPECT_EQ(readJson(root_ + "/jobs/" + id + "/result.json")["state"], "stopped");
}

// A cluster that deletes a job signals every pod at once: the coordinator, which stops the job
// with its grace period, and each agent, whose stop may reach it after the coordinator's. The
// agent's first signal must not cut that grace short; only a second one kills at once.
TEST_F(Observe, AnAgentSignalledWhileTheJobStopsKeepsTheGracePeriod) {
  CohortProcess job({"run", "-q", "--data-root", root_, "--grace-period", "20s", "--", "/bin/sh",
                     "-c",
                     "trap 'sleep 1; echo got TERM; exit 0' TERM; echo ready; sleep 300 & wait"});
  const std::string id = jobId();
  ASSERT_FALSE(id.empty());
  const std::string dir = root_ + "/jobs/" + id;
  ASSERT_TRUE(
      waitFor([&] { return contains(readText(dir + "/logs/worker-0.log"), "ready"); }, 30s));
  const std::string agent = shellOutput("pgrep -P " + std::to_string(job.pid()) +
                                        " -x 'cohort node 0' | head -1 | tr -d '\\n'");
  ASSERT_FALSE(agent.empty());
  ::kill(job.pid(), SIGTERM);
  // The coordinator's stop is on its way to the agent; the rank's handler takes a second.
  ASSERT_TRUE(waitFor([&] { return stoppingReason(dir) != "(no stopping event)"; }, 10s));
  std::this_thread::sleep_for(200ms);
  ::kill(std::atoi(agent.c_str()), SIGTERM);
  auto r = job.wait(30s);
  EXPECT_EQ(r.exit_code, 143) << r.err;
  EXPECT_TRUE(contains(readText(dir + "/logs/worker-0.log"), "got TERM"))
      << readText(dir + "/logs/worker-0.log");
  auto exits = rankExitsOf(dir);
  ASSERT_EQ(exits.size(), 1u);
  EXPECT_EQ(exits[0].value("code", -1), 0) << exits[0].dump();
  EXPECT_EQ(exits[0].value("signal", -1), 0) << exits[0].dump() << ": killed, not given its grace";
}

// Hostile: a rank that ignores the stop signal gets SIGKILL when the grace period is over.
TEST_F(Observe, ARankThatIgnoresTheStopSignalIsKilledAfterTheGracePeriod) {
  write("deaf.py",
        "import signal, time\nsignal.signal(signal.SIGUSR1, signal.SIG_IGN)\n"
        "print('up', flush=True)\ntime.sleep(600)\n");
  const auto began = std::chrono::steady_clock::now();
  auto r = runCohort({"run", "--data-root", root_, "--workdir", dir_, "--framework", "generic",
                      "--stop-signal", "SIGUSR1", "--max-runtime", "2s", "--grace-period", "1s",
                      "--", "/usr/bin/python3", "deaf.py"},
                     60s);
  EXPECT_EQ(r.exit_code, 124) << r.err;
  EXPECT_LT(std::chrono::steady_clock::now() - began, 15s);
  auto exits = rankExitsOf(onlyJobDir(root_));
  ASSERT_EQ(exits.size(), 1u);
  EXPECT_EQ(exits[0].value("signal", 0), SIGKILL) << exits[0].dump();
  EXPECT_TRUE(exits[0].value("by_cohort", false));
}

// Hostile: a stop signal that gives no notice, or none at all, is refused before anything runs,
// the field (or the flag) named.
TEST_F(Observe, ABadStopSignalIsRefusedNamingTheField) {
  write("bad.yaml", "name: x\ncommand: [/bin/true]\npolicy:\n  stop_signal: SIGKILL\n");
  auto file = runCohort({"run", "--data-root", root_, "-f", dir_ + "/bad.yaml"});
  EXPECT_EQ(file.exit_code, 2) << file.err;
  EXPECT_TRUE(contains(file.err, "bad.yaml:4: policy.stop_signal: SIGKILL cannot be caught"))
      << file.err;
  auto flag =
      runCohort({"run", "--data-root", root_, "--stop-signal", "SIGWINCH", "--", "/bin/true"});
  EXPECT_EQ(flag.exit_code, 2) << flag.err;
  EXPECT_TRUE(contains(flag.err, "--stop-signal: unknown stop signal 'SIGWINCH': use one of"))
      << flag.err;
  EXPECT_EQ(shellOutput("ls " + root_ + "/jobs 2>/dev/null"), "") << "no job was made";
}

// cohort.heartbeat() is progress for hang_timeout, and prints nothing: a rank that only calls
// it is not hung; once it stops calling it, it is.
TEST_F(Observe, HeartbeatsWithoutOutputKeepAJobFromHangingAndTheirEndIsAHang) {
  write("beat.py",
        "import os, sys, time\n"
        "sys.path.insert(0, os.environ['HELPERS'])\n"
        "import cohort\n"
        "end = time.monotonic() + float(sys.argv[1])\n"
        "while time.monotonic() < end:\n"
        "    cohort.heartbeat()\n"
        "    time.sleep(0.2)\n"
        "if sys.argv[2] == 'hang':\n"
        "    time.sleep(600)\n");
  auto run = [&](const std::string& root, const char* seconds, const char* then) {
    return runCohort({"run",
                      "--data-root",
                      root,
                      "--nodes",
                      "2",
                      "--workdir",
                      dir_,
                      "--framework",
                      "generic",
                      "--hang-timeout",
                      "5s",
                      "--grace-period",
                      "1s",
                      "--env",
                      "HELPERS=" + sourceDir() + "/python",
                      "--",
                      "/usr/bin/python3",
                      "beat.py",
                      seconds,
                      then},
                     90s);
  };
  auto alive = run(root_, "9", "exit");
  EXPECT_EQ(alive.exit_code, 0) << alive.err << "9 s of heartbeats are not a 5 s hang";
  const std::string job = onlyJobDir(root_);
  EXPECT_EQ(readText(job + "/logs/worker-0.log"), "") << "a heartbeat is not output";
  EXPECT_EQ(readText(job + "/logs/worker-1.log"), "");
  EXPECT_FALSE(contains(alive.err, "no rank made progress")) << alive.err;

  const std::string hang_root = dir_ + "/hang";
  const auto began = std::chrono::steady_clock::now();
  auto hung = run(hang_root, "3", "hang");
  EXPECT_EQ(hung.exit_code, 124) << hung.err;
  EXPECT_TRUE(contains(hung.err, "no rank made progress for hang_timeout 5.0s")) << hung.err;
  EXPECT_GT(std::chrono::steady_clock::now() - began, 7s) << "the heartbeats held it off";
}

// GPU samples with a stand-in nvidia-smi first on PATH (this machine has no GPU): it answers the
// two queries in nvidia-smi's CSV format, naming the ranks' own pids as its compute processes.
TEST_F(Observe, GpuUseOfEachRankComesFromNvidiaSmiAndTopShowsItsColumns) {
  const std::string bin = dir_ + "/bin";
  ASSERT_EQ(::mkdir(bin.c_str(), 0755), 0);
  const std::string pids = dir_ + "/pids";
  write("bin/nvidia-smi",
        "#!/bin/sh\n"
        "case \"$1\" in\n"
        "--query-gpu=*) echo '0, GPU-0f0f0f0f-0000-0000-0000-000000000000, 87, 2048, 81559';;\n"
        "--query-compute-apps=*) while read p; do "
        "echo \"$p, GPU-0f0f0f0f-0000-0000-0000-000000000000, 1024\"; done < " +
            pids +
            ";;\n"
            "*) exit 2;;\n"
            "esac\n");
  ASSERT_EQ(::chmod((bin + "/nvidia-smi").c_str(), 0755), 0);
  const char* path = std::getenv("PATH");
  CohortProcess job({"run", "-q", "--data-root", root_, "--nodes", "1", "--nproc-per-node", "2",
                     "--name", "gpu", "--", testRank(), "pidfile=" + pids, "sleep=8"},
                    {"PATH=" + bin + ":" + (path ? path : "/usr/bin:/bin")});
  const std::string id = jobId();
  ASSERT_FALSE(id.empty());
  const std::string resources = root_ + "/jobs/" + id + "/resources.jsonl";
  auto sampled = [&] {
    size_t ranks = 0;
    for (const auto& line : readJsonLines(resources)) {
      for (const auto& r : line.value("ranks", nlohmann::json::array())) {
        if (r.value("gpu_memory_bytes", int64_t{0}) == int64_t{1024} << 20 &&
            r.value("gpu_util", 0.0) == 87) {
          ++ranks;
        }
      }
    }
    return ranks >= 2;
  };
  EXPECT_TRUE(waitFor(sampled, 7s, 100ms)) << readText(resources);
  auto top = runCohort({"top", id, "--once", "--data-root", root_});
  EXPECT_TRUE(
      std::regex_search(top.out, std::regex(R"(RANK +NAME +NODE +CPU% +RSS +GPU% +GPU MEM +STEP)")))
      << top.out;
  EXPECT_TRUE(std::regex_search(
      top.out, std::regex(R"(\n1 +worker/1 +0 +\S+ +[0-9]+ MiB +87 +1024 MiB +- *\n)")))
      << top.out;
  auto done = job.wait(60s);
  EXPECT_EQ(done.exit_code, 0) << done.err;
}

// A rank that allocates past its 64 MiB: where this machine lets cohort enforce the request
// (cgroup v2 memory controller, docs/observing.md), the kernel kills it and the root cause says
// so with the limit; elsewhere the job runs and cohort says once, with the reason, that the
// requests are not enforced (a line and an event), and the rank's own exit ends the job.
TEST_F(Observe, ARankOverItsMemoryLimitIsTheRootCauseOrTheLimitIsSaidNotEnforced) {
  write("job.yaml", "name: oom\nframework: generic\nworkdir: " + dir_ + "\ncommand: [" +
                        testRank() +
                        ", 'rank1:hold=268435456', 'rank1:exit=3', 'sleep=30']\n"
                        "roles:\n  worker: {nodes: 2, procs_per_node: 1, resources: {cpus: 1, "
                        "memory: 64Mi}}\npolicy: {grace_period: 1s}\n");
  auto run = runCohort({"run", "--data-root", root_, "-f", dir_ + "/job.yaml"}, 60s);
  const std::string dir = onlyJobDir(root_);
  const nlohmann::json result = readJson(dir + "/result.json");
  const std::string events = readText(dir + "/events.jsonl");
  if (!contains(run.err, "are not enforced")) {
    EXPECT_EQ(run.exit_code, 128 + 9) << run.err;
    const std::string cause =
        "worker/1 on node 1 was killed by the kernel for using more than its memory limit of "
        "64.0 MiB (memory.max); raise resources.memory or use less";
    EXPECT_TRUE(contains(run.err, cause)) << run.err;
    EXPECT_EQ(result.value("reason", ""), cause) << result;
    EXPECT_EQ(result["root_cause"].value("memory_limit", 0), 64 << 20) << result;
    EXPECT_TRUE(contains(events, "\"memory_limit\":67108864")) << events;
    return;
  }
  // Said once for the job, as a warning of what it goes without.
  EXPECT_EQ(run.exit_code, 3) << run.err;
  const std::regex said(
      R"(cohort: warning: resource requests \(resources.cpus, .memory, .pids\) are not )"
      R"(enforced here: [^\n]*is not stopped at its limit \(node [01]: [^\n]*)"
      R"((cgroup|controller)[^\n]*\n)");
  EXPECT_EQ(std::distance(std::sregex_iterator(run.err.begin(), run.err.end(), said),
                          std::sregex_iterator()),
            1)
      << run.err;
  size_t limits = 0;
  for (const auto& e : readJsonLines(dir + "/events.jsonl")) {
    if (e.value("event", "") != "limits") continue;
    ++limits;
    EXPECT_TRUE(contains(e.value("warning", ""), "cgroup")) << e;
    EXPECT_FALSE(e.contains("error")) << e;
  }
  EXPECT_EQ(limits, 1u) << events;
  EXPECT_EQ(result.value("reason", ""), "worker/1 on node 1 exited with code 3") << result;
}


// A sandboxed job run as root has memory of its own for /tmp and /dev/shm, charged to the rank
// that writes it: a rank of 64 MiB that writes 256 MiB into /dev/shm is ended for its memory,
// named as such, and nothing of its /dev/shm is left on the machine.
TEST_F(Observe, ARankThatFillsItsDevShmPastItsMemoryIsKilledForIt) {
  if (::geteuid() != 0) GTEST_SKIP() << "the job's /dev/shm is memory of its own as root only";
  if (!have("bwrap --dev-bind / / true")) GTEST_SKIP() << "bubblewrap does not work here";
  write("job.yaml", "name: shm\nframework: generic\nworkdir: " + dir_ +
                        "\ncommand: [/bin/sh, -c, 'df -k /dev/shm /tmp; dd if=/dev/zero "
                        "of=/dev/shm/fill bs=1M count=256; echo dd $?; sleep 30']\n"
                        "roles:\n  worker: {nodes: 1, procs_per_node: 1, resources: {memory: "
                        "64Mi}}\npolicy: {grace_period: 1s}\n");
  auto run = runCohort({"run", "--isolate", "--data-root", root_, "-f", dir_ + "/job.yaml"}, 60s);
  if (contains(run.err, "are not enforced")) GTEST_SKIP() << run.err;
  const std::string dir = onlyJobDir(root_);
  const std::string log = readText(dir + "/logs/worker-0.log");
  // The job's own: 64 MiB (the ranks' memory together), not the machine's.
  EXPECT_TRUE(std::regex_search(log, std::regex(R"(tmpfs +65536 .* /dev/shm)"))) << log;
  EXPECT_TRUE(std::regex_search(log, std::regex(R"(tmpfs +65536 .* /tmp)"))) << log;
  EXPECT_EQ(run.exit_code, 128 + 9) << run.err << log;
  EXPECT_TRUE(contains(run.err,
                       "worker/0 on node 0 was killed by the kernel for using more than its "
                       "memory limit of 64.0 MiB"))
      << run.err;
  const std::string id = dir.substr(dir.rfind('/') + 1);
  EXPECT_EQ(shellOutput("ls /dev/shm | grep -F '" + id + "'"), "") << "left on /dev/shm";
  EXPECT_EQ(shellOutput("grep -F '" + id + "' /proc/self/mountinfo"), "") << "a mount was left";
}

// A fork bomb in a rank stops at its resources.pids, and the rank goes on.
TEST_F(Observe, AForkBombStopsAtItsRanksPidsLimit) {
  write("bomb.py",
        "import errno, os, time\n"
        "n = 0\n"
        "try:\n"
        "    for _ in range(5000):\n"
        "        if os.fork() == 0:\n"
        "            time.sleep(60)\n"
        "            os._exit(0)\n"
        "        n += 1\n"
        "except OSError as e:\n"
        "    print('fork failed after', n, errno.errorcode[e.errno], flush=True)\n");
  write("job.yaml", "name: bomb\nframework: generic\nworkdir: " + dir_ +
                        "\ncommand: [/usr/bin/python3, bomb.py]\n"
                        "roles:\n  worker: {nodes: 1, procs_per_node: 1, resources: {pids: 32}}\n");
  auto run = runCohort({"run", "--data-root", root_, "-f", dir_ + "/job.yaml"}, 60s);
  if (contains(run.err, "are not enforced")) GTEST_SKIP() << run.err;
  const std::string log = readText(onlyJobDir(root_) + "/logs/worker-0.log");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(log, m, std::regex(R"(fork failed after (\d+) EAGAIN)"))) << log;
  EXPECT_LT(std::stoi(m[1]), 32);
  EXPECT_EQ(run.exit_code, 0) << run.err;
}

// A rank, even one that runs as root (cohort run --isolate as root drops its capabilities),
// cannot move itself out of the cgroups that hold it to its limits.
TEST_F(Observe, ARankCannotLeaveItsCgroups) {
  if (!have("bwrap --dev-bind / / true")) GTEST_SKIP() << "bubblewrap does not work here";
  write("job.yaml",
        "name: leave\nframework: generic\nworkdir: " + dir_ +
            "\ncommand: [/bin/sh, -c, 'for f in /sys/fs/cgroup/*/cgroup.procs "
            "/sys/fs/cgroup/cgroup.procs; do [ -e $f ] && echo $$ 2>/dev/null > $f && echo "
            "LEFT $f; done; cat /proc/self/cgroup']\n"
            "roles:\n  worker: {nodes: 1, procs_per_node: 1, resources: {memory: 256Mi, pids: 64}}\n");
  auto run = runCohort({"run", "--isolate", "--data-root", root_, "-f", dir_ + "/job.yaml"}, 60s);
  if (contains(run.err, "are not enforced")) GTEST_SKIP() << run.err;
  EXPECT_EQ(run.exit_code, 0) << run.err;
  const std::string dir = onlyJobDir(root_);
  const std::string id = dir.substr(dir.rfind('/') + 1);
  const std::string log = readText(dir + "/logs/worker-0.log");
  EXPECT_FALSE(contains(log, "LEFT")) << log;
  EXPECT_TRUE(std::regex_search(log, std::regex(":memory:[^\n]*/cohort/" + id + "/node0/rank0\n")))
      << log;
}

}  // namespace
}  // namespace cohort::testing
