// Seeing inside a running job, with plain Python ranks (Debian's /usr/bin/python3, no torch): a
// job in which no rank makes progress for hang_timeout names the rank that is stopped and
// records every rank's stack; `cohort stacks` prints the stacks of a running job that goes on;
// `cohort top` shows each rank's resources and latest metrics. The real gloo DDP cases (a rank
// stopped or stuck outside all_reduce; the losses it logged) are in frameworks_test.cc.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
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
  EXPECT_TRUE(contains(stacks, "worker/1 on node 0 (1 rank(s), stopped)")) << stacks;
  if (havePySpy()) {
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

}  // namespace
}  // namespace cohort::testing
