// Data in and models out, end to end: inputs staged on every node before any rank starts (the
// start barrier), failed staging, link mode, and outputs copied out with placeholders.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <sstream>

#include "harness.h"

namespace cohort::testing {
namespace {

// A small data set in the embedded store: <root>/store/datasets/digits/{a.txt, sub/b.txt}.
void makeDataset(const std::string& root) {
  std::string dir = root + "/store/datasets/digits";
  ASSERT_EQ(std::system(("mkdir -p " + dir + "/sub").c_str()), 0);
  std::ofstream(dir + "/a.txt") << "alpha\n";
  std::ofstream(dir + "/sub/b.txt") << "beta\n";
}

std::string writeJob(const std::string& yaml) {
  std::string file = tempDir() + "/job.yaml";
  std::ofstream(file) << yaml;
  return file;
}

TEST(Staging, EveryNodeStagesBeforeAnyRankStarts) {
  std::string root = tempDir();
  makeDataset(root);
  std::string stamps = root + "/stamps";
  std::string job = writeJob("name: staged\ncommand: [" + testRank() + ", stamp=" + stamps +
                             ", work-file=data/digits/sub/b.txt]\n"
                             "inputs: [{source: store://datasets/digits, target: data/digits}]\n"
                             "roles: {worker: {nodes: 2, procs_per_node: 2}}\n");
  // The rule itself (no rank starts until the last node has staged, however long it takes) is
  // JobDecisions.RanksStartOnlyWhenEveryNodeStaged; this is the whole path, agents included.
  auto r = runCohort({"run", "--data-root", root, "-f", job});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("node 1 staged 2 file(s)"), std::string::npos) << r.err;
  std::string dir = onlyJobDir(root);
  int64_t last_staged = 0;
  for (const auto& e : readJsonLines(dir + "/events.jsonl")) {
    if (e["event"] == "staged") last_staged = std::max<int64_t>(last_staged, e["t"]);
  }
  ASSERT_GT(last_staged, 0);
  std::istringstream in(readText(stamps));
  int ranks = 0;
  for (int rank; in >> rank; ++ranks) {
    int64_t started = 0;
    in >> started;
    EXPECT_GT(started, last_staged) << "rank " << rank << " started before staging ended";
  }
  EXPECT_EQ(ranks, 4);
  // Each simulated node has its own copy.
  EXPECT_EQ(readText(dir + "/work/node0/data/digits/a.txt"), "alpha\n");
  EXPECT_EQ(readText(dir + "/work/node1/data/digits/sub/b.txt"), "beta\n");
}

TEST(Staging, LinkModeLinksInsteadOfCopying) {
  std::string root = tempDir();
  makeDataset(root);
  std::string job = writeJob("name: linked\ncommand: [" + testRank() +
                             ", work-file=data/sub/b.txt]\n"
                             "inputs: [{source: store://datasets/digits, target: data, "
                             "mode: link}]\n");
  auto r = runCohort({"run", "--data-root", root, "-f", job});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  char target[4096] = {};
  ASSERT_GT(::readlink((onlyJobDir(root) + "/work/node0/data").c_str(), target, sizeof target), 0);
  EXPECT_EQ(std::string(target), root + "/store/datasets/digits");
}

TEST(Staging, InputArgumentIsAppendedWithTheStagedPath) {
  std::string root = tempDir();
  makeDataset(root);
  std::string job = writeJob("name: arg\ncommand: [" + testRank() + ", echo=go]\n"
                             "inputs: [{source: store://datasets/digits, target: d, "
                             "arg: data_url}]\n");
  auto r = runCohort({"run", "--data-root", root, "-f", job});
  // cohort-test-rank refuses the unknown action, which shows what was appended.
  EXPECT_EQ(r.exit_code, 64);
  EXPECT_NE(r.err.find("unknown action '--data_url=" + onlyJobDir(root) + "/work/node0/d'"),
            std::string::npos)
      << r.err;
}

TEST(Staging, FailedStagingFailsTheJobBeforeAnyRankRuns) {
  std::string root = tempDir();
  makeDataset(root);
  // A directory loop in the data set: the copy refuses it.
  ASSERT_EQ(::symlink("..", (root + "/store/datasets/digits/sub/loop").c_str()), 0);
  std::string pids = root + "/pids";
  std::string job = writeJob("name: broken\ncommand: [" + testRank() + ", pidfile=" + pids +
                             "]\ninputs: [{source: store://datasets/digits, target: data}]\n"
                             "roles: {worker: {nodes: 2}}\n");
  auto r = runCohort({"run", "--data-root", root, "-f", job});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("staging on node"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("loop"), std::string::npos) << r.err;
  EXPECT_TRUE(readPids(pids).empty()) << "a rank ran although staging failed";
  EXPECT_EQ(readJson(onlyJobDir(root) + "/result.json")["state"], "failed");
}

TEST(Staging, MissingInputIsRefusedBeforeAnythingStarts) {
  std::string root = tempDir();
  std::string job = writeJob("name: missing\ncommand: [" + testRank() + "]\n"
                             "inputs: [{source: store://datasets/nothing, target: data}]\n");
  auto r = runCohort({"run", "--data-root", root, "-f", job});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("inputs[0].source: 'store://datasets/nothing' does not exist"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(onlyJobDir(root), "");
}

TEST(Outputs, AreCopiedOutWithPlaceholdersAndRecorded) {
  std::string root = tempDir();
  std::string job = writeJob("name: trained\ncommand: [" + testRank() +
                             ", rank0:output-file=model.txt]\n"
                             "outputs: [{source: output/, target: 'store://models/{name}/{job}/'}]\n"
                             "roles: {worker: {nodes: 2}}\n");
  auto r = runCohort({"run", "--data-root", root, "-f", job});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string dir = onlyJobDir(root);
  std::string id = dir.substr(dir.rfind('/') + 1);
  std::string copied = root + "/store/models/trained/" + id + "/model.txt";
  EXPECT_EQ(readText(copied), "rank 0\n");
  auto outputs = readJson(dir + "/result.json")["outputs"];
  ASSERT_EQ(outputs.size(), 1u);
  EXPECT_EQ(outputs[0]["target"], root + "/store/models/trained/" + id + "/");
  EXPECT_EQ(outputs[0]["files"], 1);
}

TEST(Outputs, OnFailureOnlyWhenAlways) {
  std::string root = tempDir();
  std::string job = writeJob("name: failing\ncommand: [" + testRank() +
                             ", output-file=partial.txt, exit=3]\n"
                             "outputs:\n"
                             "  - {source: output/, target: 'store://kept/{job}/', when: always}\n"
                             "  - {source: output/, target: 'store://dropped/{job}/'}\n");
  auto r = runCohort({"run", "--data-root", root, "-f", job});
  EXPECT_EQ(r.exit_code, 3) << r.err;
  std::string id = onlyJobDir(root).substr(onlyJobDir(root).rfind('/') + 1);
  EXPECT_EQ(readText(root + "/store/kept/" + id + "/partial.txt"), "rank 0\n");
  struct stat st{};
  EXPECT_NE(::stat((root + "/store/dropped").c_str(), &st), 0);
}

TEST(Isolation, RanksSeeTheirJobButNotOtherJobsOrTheStore) {
  if (std::system("bwrap --dev-bind / / true >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "bubblewrap cannot create a sandbox here (apt-get install bubblewrap; it "
                    "needs root or unprivileged user namespaces)";
  }
  std::string root = tempDir();
  makeDataset(root);
  std::string other = root + "/jobs/other-job";
  ASSERT_EQ(std::system(("mkdir -p " + other).c_str()), 0);
  std::ofstream(other + "/secret.txt") << "not yours\n";
  ASSERT_EQ(std::system(("mkdir -p " + root + "/store/private").c_str()), 0);
  std::ofstream(root + "/store/private/weights.bin") << "someone else's\n";
  std::string job = writeJob("name: isolated\ncommand: [" + testRank() + ", absent=" + other +
                             "/secret.txt, absent=" + root + "/store/private/weights.bin" +
                             ", work-file=data/a.txt, work-file=linked/sub/b.txt" +
                             ", rank0:output-file=model.txt]\n"
                             "inputs:\n"
                             "  - {source: store://datasets/digits, target: data}\n"
                             "  - {source: store://datasets/digits, target: linked, mode: link}\n"
                             "roles: {worker: {nodes: 2}}\n");
  auto r = runCohort({"run", "--isolate", "--data-root", root, "-f", job});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(readText(onlyJobDir(root, "isolated-") + "/output/model.txt"), "rank 0\n");
  // The same job without --isolate does see the other job: the test can fail.
  auto open = runCohort({"run", "--data-root", root, "-f", job});
  EXPECT_EQ(open.exit_code, 4) << open.err;
}

}  // namespace
}  // namespace cohort::testing
