#include "agent/root_cause.h"

#include <gtest/gtest.h>
#include <signal.h>

namespace cohort::agent {
namespace {

RankExit exitOf(int rank, int code, int64_t t, bool by_cohort = false, int sig = 0) {
  RankExit e;
  e.role = "worker";
  e.name = "worker/" + std::to_string(rank);
  e.role_rank = rank;
  e.rank = rank;
  e.node = rank / 2;
  e.code = code;
  e.signal = sig;
  e.time_ns = t;
  e.by_cohort = by_cohort;
  return e;
}

TEST(FirstFailure, IsEarliestInTimeNotInArrival) {
  std::vector<RankExit> exits = {exitOf(1, 1, 300), exitOf(3, 2, 100), exitOf(2, 0, 50)};
  auto first = firstFailure(exits);
  ASSERT_TRUE(first);
  EXPECT_EQ(first->rank, 3);
}

TEST(FirstFailure, RanksCohortStoppedAreNeverTheCause) {
  std::vector<RankExit> exits = {exitOf(0, 0, 10, true, SIGTERM), exitOf(1, 143, 20, true),
                                 exitOf(2, 1, 30)};
  EXPECT_EQ(firstFailure(exits)->rank, 2);
}

TEST(FirstFailure, NoneWhenAllSucceeded) {
  EXPECT_FALSE(firstFailure({exitOf(0, 0, 1), exitOf(1, 0, 2)}));
}

TEST(RootCause, ARankKilledForItsMemoryLimitIsToldSoWithTheLimit) {
  RankExit e = exitOf(2, 0, 10, false, SIGKILL);
  e.memory_limit = 512 << 20;
  EXPECT_EQ(e.label() + " " + e.describe(),
            "worker/2 on node 1 was killed by the kernel for using more than its memory limit "
            "of 512 MiB (memory.max)");
  EXPECT_NE(hintFor(e).find("raise resources.memory"), std::string::npos) << hintFor(e);
  RankExit plain = exitOf(2, 0, 10, false, SIGKILL);
  EXPECT_EQ(plain.describe(), "was killed by SIGKILL");
  EXPECT_NE(formatRootCause(e, {e}).find("memory limit of 512 MiB"), std::string::npos);
}

TEST(HintFor, KnownFailures) {
  RankExit e = exitOf(0, 1, 1);
  e.tail = {"RuntimeError: Address already in use"};
  EXPECT_NE(hintFor(e).find("port"), std::string::npos);
  e.tail = {"RuntimeError: connect() timed out. Original timeout was 1800000 ms."};
  EXPECT_NE(hintFor(e).find("could not reach its peers"), std::string::npos);
  e.tail = {"ModuleNotFoundError: No module named 'torchvision'"};
  EXPECT_NE(hintFor(e).find("module is missing"), std::string::npos);
  e.tail = {"torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate"};
  EXPECT_NE(hintFor(e).find("GPU ran out of memory"), std::string::npos);
  e.tail = {"cohort: worker/0: the preload template: 2 threads are running after importing x"};
  e.code = 127;
  EXPECT_NE(hintFor(e).find("--launcher direct"), std::string::npos) << "not the PATH hint";
  e.code = 1;
  e.tail = {};
  e.signal = SIGKILL;
  EXPECT_NE(hintFor(e).find("out-of-memory killer"), std::string::npos);
}

TEST(HintFor, NoHintForAnOrdinaryError) {
  RankExit e = exitOf(0, 3, 1);
  e.tail = {"ValueError: bad shape"};
  EXPECT_EQ(hintFor(e), "");
}

TEST(FormatRootCause, NamesRankLinesAndConsequences) {
  RankExit root = exitOf(3, 1, 100);
  root.tail = {"Traceback (most recent call last):", "ValueError: bad shape"};
  root.log_file = "/j/logs/worker-3.log";
  std::vector<RankExit> exits = {root, exitOf(0, 0, 200, true, SIGTERM),
                                 exitOf(1, 0, 200, true, SIGTERM), exitOf(2, 1, 150)};
  std::string report = formatRootCause(root, exits);
  EXPECT_NE(report.find("worker/3 on node 1 exited with code 1"), std::string::npos)
      << report;
  EXPECT_NE(report.find("| ValueError: bad shape"), std::string::npos) << report;
  EXPECT_NE(report.find("1 other rank(s) failed after it"), std::string::npos) << report;
  EXPECT_NE(report.find("2 rank(s) were stopped by cohort"), std::string::npos) << report;
}

// mpirun starts the ranks: its report, in its last lines, names the one that failed first.
TEST(FormatRootCause, UnderMpirunNamesTheMpiRankFromMpirunsReport) {
  RankExit root = exitOf(0, 0, 100);
  root.name = "mpirun/0";
  root.code = 3;
  root.tail = {"mpirun detected that one or more processes exited with non-zero status, thus "
               "causing",
               "the job to be terminated. The first process to do so was:", "",
               "  Process name: [[966,1],2]", "  Exit code:    3",
               "--------------------------------------------------------------------------"};
  std::string report = formatRootCause(root, {root});
  EXPECT_NE(report.find("root cause: MPI rank 2 exited with code 3, under mpirun/0 on node 0, "
                        "which then exited with code 3 (the first failure)"),
            std::string::npos)
      << report;
  root.code = 137;
  root.tail = {"mpirun noticed that process rank 1 with PID 0 on node vm exited on signal 9 "
               "(Killed)."};
  report = formatRootCause(root, {root});
  EXPECT_NE(report.find("root cause: MPI rank 1 was killed by signal 9 (Killed), under mpirun/0"),
            std::string::npos)
      << report;
  root.name = "worker/0";  // only mpirun's own report counts
  report = formatRootCause(root, {root});
  EXPECT_NE(report.find("root cause: worker/0 on node 0 exited with code 137"), std::string::npos)
      << report;
}

// torchrun starts the ranks: its ChildFailedError report names the global rank that failed
// first, and its exit code (negative: the signal that killed it).
TEST(FormatRootCause, UnderTorchrunNamesTheRankFromTorchrunsReport) {
  RankExit root = exitOf(1, 1, 100);
  root.name = "torchrun/node1";
  root.node = 1;
  root.tail = {"Failures:", "[1]:", "  time      : 2026-12-07_18:50:31", "  rank      : 3 (local_rank: 1)",
               "  exitcode  : -15 (pid: 3329)", "------------------------------------------------------------",
               "Root Cause (first observed failure):", "[0]:",
               "  time      : 2026-12-07_18:50:30", "  host      : localhost",
               "  rank      : 2 (local_rank: 0)", "  exitcode  : 3 (pid: 3328)",
               "  error_file: <N/A>",
               "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html",
               "============================================================"};
  std::string report = formatRootCause(root, {root});
  EXPECT_NE(report.find("root cause: worker/2 exited with code 3, under torchrun/node1 on node 1, "
                        "which then exited with code 1 (the first failure)"),
            std::string::npos)
      << report;
  auto launched = launchedFailure(root);
  ASSERT_TRUE(launched);
  EXPECT_EQ(launched->rank, 2);
  root.tail[11] = "  exitcode  : -9 (pid: 3328)";
  EXPECT_EQ(launchedFailure(root)->what, "was killed by SIGKILL");
  root.tail.erase(root.tail.begin() + 6);  // no "Root Cause" line: another failure's fields
  EXPECT_FALSE(launchedFailure(root));
  root.name = "worker/1";  // only torchrun's own report counts
  root.tail = {"Root Cause (first observed failure):", "  rank      : 2 (local_rank: 0)",
               "  exitcode  : 3 (pid: 3328)"};
  EXPECT_FALSE(launchedFailure(root));
}

}  // namespace
}  // namespace cohort::agent
