// `cohort run --hosts` against real sshd: hosts in network namespaces with a filesystem view of
// their own (tests/ssh/cluster; ctest brings them up as the fixture "ssh"). Each test's data
// root is below the hosts' private directory, so no host sees the coordinator's job directory
// and every host needs cohort's binary and the workdir's snapshot, as separate machines would.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "tests/integration/harness.h"

namespace cohort::testing {
namespace {

struct Cluster {
  std::string state, config, private_dir;
};

// The cluster the fixture brought up, or why there is none.
bool cluster(Cluster* c, std::string* why) {
  const char* dir = std::getenv("COHORT_SSH_STATE");
  if (!dir || ::access((std::string(dir) + "/ssh_config").c_str(), R_OK) != 0) {
    *why = "no hosts over SSH: run through ctest (the 'ssh' fixture runs tests/ssh/cluster up), "
           "or set COHORT_SSH_STATE to a directory it made";
    return false;
  }
  c->state = dir;
  c->config = c->state + "/ssh_config";
  c->private_dir = c->state + "/private";
  return true;
}

#define NEED_CLUSTER(c)                       \
  Cluster c;                                  \
  do {                                        \
    std::string why;                          \
    if (!cluster(&c, &why)) GTEST_SKIP() << why; \
  } while (0)

std::string leftovers(const Cluster& c, const std::string& host) {
  return shellOutput(sourceDir() + "/tests/ssh/cluster leftovers " + host + " " + c.state);
}

// Every host clean within `deadline`; otherwise what is left, for the failure message.
std::string waitClean(const Cluster& c, std::chrono::milliseconds deadline = 20s) {
  std::string left;
  waitFor(
      [&] {
        left = leftovers(c, "h1") + leftovers(c, "h2");
        return left.empty();
      },
      deadline, 100ms);
  return left;
}

// A data root the hosts do not see, and a workdir they do not need to.
struct Job {
  std::string data_root, workdir, shared;
};

Job makeJob(const Cluster& c, const std::string& script) {
  Job j;
  j.data_root = c.private_dir + "/" + std::to_string(::getpid()) + "-" +
                std::to_string(std::rand());
  j.workdir = tempDir();
  j.shared = tempDir();  // what ranks on the hosts and the test both see
  std::ofstream(j.workdir + "/job.sh") << script;
  std::ofstream(j.workdir + "/data.txt") << "from the workdir\n";
  return j;
}

std::vector<std::string> runArgs(const Cluster& c, const Job& j, const std::string& hosts,
                                 std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"run",        "--hosts",     hosts,  "--ssh",
                                   "ssh -F " + c.config, "--data-root", j.data_root,
                                   "--workdir",  j.workdir,     "--framework", "generic"};
  args.insert(args.end(), extra.begin(), extra.end());
  args.insert(args.end(), {"--", "sh", "job.sh"});
  return args;
}

TEST(SshRun, TwoHostJobRunsFromASnapshotAndItsOutputsComeBack) {
  NEED_CLUSTER(c);
  Job j = makeJob(c,
                  "cat data.txt\n"
                  "echo \"rank $COHORT_RANK of $COHORT_WORLD_SIZE on $(hostname) master "
                  "$COHORT_MASTER_ADDR\"\n"
                  "echo \"$COHORT_RANK\" > \"$COHORT_OUTPUT_DIR/out-$COHORT_RANK.txt\"\n");
  RunResult r = runCohort(runArgs(c, j, "h1,h2", {"--nproc-per-node", "2"}), 120s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "from the workdir")) << r.out;
  EXPECT_TRUE(contains(r.out, "rank 0 of 4 on h1 master 10.88.0.11")) << r.out;
  EXPECT_TRUE(contains(r.out, "rank 3 of 4 on h2 master 10.88.0.11")) << r.out;
  const std::string job_dir = onlyJobDir(j.data_root);
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_EQ(readText(job_dir + "/output/out-" + std::to_string(rank) + ".txt"),
              std::to_string(rank) + "\n")
        << "rank " << rank << "'s output did not come back: " << r.err;
  }
  EXPECT_EQ(readJson(job_dir + "/result.json")["state"], "succeeded");
  EXPECT_EQ(waitClean(c), "");
  // The second run finds cohort in the hosts' caches: nothing is copied again.
  RunResult again = runCohort(runArgs(c, j, "h1,h2"), 120s);
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_FALSE(contains(again.err, "copying cohort")) << again.err;
  EXPECT_EQ(waitClean(c), "");
}

TEST(SshRun, UnreachableHostIsNamedAndNothingStarts) {
  NEED_CLUSTER(c);
  Job j = makeJob(c, "echo started\n");
  RunResult r = runCohort(runArgs(c, j, "h1,dead"), 60s);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(contains(r.err, "host dead (node 1): ssh could not reach it")) << r.err;
  EXPECT_FALSE(contains(r.err, "host h1")) << r.err;
  EXPECT_EQ(waitClean(c), "");
}

TEST(SshRun, HostWithoutTheModuleIsNamed) {
  NEED_CLUSTER(c);
  Job j = makeJob(c, "");
  std::ofstream(j.workdir + "/train.py") << "import os\nimport no_such_module_for_cohort\n";
  std::vector<std::string> args = {"run", "--hosts", "h1,h2", "--ssh", "ssh -F " + c.config,
                                   "--data-root", j.data_root, "--workdir", j.workdir,
                                   "--framework", "generic", "--", "/usr/bin/python3", "train.py"};
  RunResult r = runCohort(args, 60s);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(contains(r.err, "host h1 (node 0): ")) << r.err;
  EXPECT_TRUE(contains(r.err, "cannot import 'no_such_module_for_cohort' (train.py line 2)"))
      << r.err;
  EXPECT_EQ(waitClean(c), "");
}

TEST(SshRun, RankFailingOnOneHostStopsTheOtherAndIsTheRootCause) {
  NEED_CLUSTER(c);
  Job j = makeJob(c,
                  "if [ \"$COHORT_RANK\" = 1 ]; then echo 'disk full on purpose'; exit 3; fi\n"
                  "exec sleep 300\n");
  const auto start = std::chrono::steady_clock::now();
  RunResult r = runCohort(runArgs(c, j, "h1,h2"), 120s);
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_LT(std::chrono::steady_clock::now() - start, 60s);
  EXPECT_TRUE(contains(r.err, "disk full on purpose")) << r.err;
  EXPECT_TRUE(contains(r.err, "root cause: worker/1 on node 1 (h2) exited with code 3")) << r.err;
  EXPECT_EQ(waitClean(c), "");
}

TEST(SshRun, KillingTheCoordinatorLeavesNothingOnTheHosts) {
  NEED_CLUSTER(c);
  Job j = makeJob(c, "");
  std::ofstream(j.workdir + "/job.sh")
      << "touch '" << j.shared << "/running-'$COHORT_RANK\nexec sleep 300\n";
  CohortProcess p(runArgs(c, j, "h1,h2"));
  ASSERT_TRUE(waitFor(
      [&] {
        return ::access((j.shared + "/running-0").c_str(), F_OK) == 0 &&
               ::access((j.shared + "/running-1").c_str(), F_OK) == 0;
      },
      90s, 50ms))
      << "the ranks did not start";
  EXPECT_FALSE(leftovers(c, "h1").empty());  // the job is there to be left
  ::kill(p.pid(), SIGKILL);
  p.wait(10s);
  EXPECT_EQ(waitClean(c, 30s), "");
}

}  // namespace
}  // namespace cohort::testing
