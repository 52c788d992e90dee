// `cohort run --hosts` against real sshd: hosts in network namespaces with a filesystem view of
// their own (tests/ssh/cluster; ctest brings them up as the fixture "ssh"). Each test's data
// root is below the hosts' private directory, so no host sees the coordinator's job directory
// and every host needs cohort's binary and the workdir's snapshot, as separate machines would.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>
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

std::string trimmed(const std::string& text) {
  const size_t begin = text.find_first_not_of(" \n");
  const size_t end = text.find_last_not_of(" \n");
  return begin == std::string::npos ? "" : text.substr(begin, end - begin + 1);
}

// The job's id: its directory's name.
std::string jobIdOf(const std::string& data_root) {
  std::string dir;
  waitFor([&] { return !(dir = onlyJobDir(data_root)).empty(); }, 30s, 50ms);
  return dir.empty() ? "" : dir.substr(dir.rfind('/') + 1);
}

// Waits until each of `ranks` ranks touched `shared`/running-RANK.
bool ranksRunning(const Job& j, int ranks, std::chrono::milliseconds deadline = 90s) {
  return waitFor(
      [&] {
        for (int r = 0; r < ranks; ++r) {
          if (::access((j.shared + "/running-" + std::to_string(r)).c_str(), F_OK) != 0) {
            return false;
          }
        }
        return true;
      },
      deadline, 50ms);
}

// A host cut off the network (its bridge end down) while it lives; back on it when this goes.
class CutOff {
 public:
  explicit CutOff(std::string host)
      : command_(sourceDir() + "/tests/ssh/cluster link " + std::move(host) + " ") {}
  ~CutOff() { up(); }
  void down() { shellOutput(command_ + "down"); }
  void up() { shellOutput(command_ + "up"); }

 private:
  std::string command_;
};

TEST(SshRun, StacksAndTopOfARunningTwoHostJob) {
  NEED_CLUSTER(c);
  Job j = makeJob(c, "");
  std::ofstream(j.workdir + "/work.py")
      << "import os, time\n"
         "open(os.environ['SHARED'] + '/running-' + os.environ['COHORT_RANK'], 'w').close()\n"
         "def work():\n    time.sleep(300)\nwork()\n";
  std::vector<std::string> args = {"run", "-q", "--hosts", "h1,h2", "--ssh", "ssh -F " + c.config,
                                   "--data-root", j.data_root, "--workdir", j.workdir,
                                   "--framework", "generic", "--env", "SHARED=" + j.shared,
                                   "--", "/usr/bin/python3", "work.py"};
  CohortProcess p(args);
  const std::string id = jobIdOf(j.data_root);
  ASSERT_FALSE(id.empty());
  ASSERT_TRUE(ranksRunning(j, 2)) << "the ranks did not start";
  RunResult stacks = runCohort({"stacks", id, "--data-root", j.data_root}, 60s);
  EXPECT_EQ(stacks.exit_code, 0) << stacks.err;
  EXPECT_TRUE(contains(stacks.out, "stacks of 2 rank(s), grouped:")) << stacks.out;
  EXPECT_TRUE(contains(stacks.out, "worker/1 on node 1 (h2)")) << stacks.out;
  // Each rank on its host: sampled by that host's agent.
  bool sampled = waitFor(
      [&] {
        RunResult top = runCohort({"top", id, "--once", "--data-root", j.data_root});
        return std::regex_search(top.out,
                                 std::regex(R"(\n1 +worker/1 +1 +([0-9.]+|-) +[0-9]+ MiB)"));
      },
      20s, 500ms);
  RunResult top = runCohort({"top", id, "--once", "--data-root", j.data_root});
  EXPECT_TRUE(sampled) << top.out << top.err;
  EXPECT_TRUE(contains(top.out, "job " + id + ": running, 2 rank(s)")) << top.out;
  ::kill(p.pid(), SIGINT);  // Ctrl-C
  RunResult r = p.wait(60s);
  EXPECT_EQ(r.exit_code, 130) << r.err;
  EXPECT_EQ(waitClean(c), "");
}

TEST(SshRun, HangTimeoutTakesTheStacksOnEveryHost) {
  NEED_CLUSTER(c);
  Job j = makeJob(c, "");
  std::ofstream(j.workdir + "/wait.py") << "import time\ndef wait_for_peers():\n"
                                           "    time.sleep(300)\nwait_for_peers()\n";
  std::vector<std::string> args = {"run", "--hosts", "h1,h2", "--ssh", "ssh -F " + c.config,
                                   "--data-root", j.data_root, "--workdir", j.workdir,
                                   "--framework", "generic", "--hang-timeout", "5s",
                                   "--grace-period", "3s", "--", "/usr/bin/python3", "wait.py"};
  RunResult r = runCohort(args, 120s);
  EXPECT_EQ(r.exit_code, 124) << r.err;
  EXPECT_TRUE(contains(r.err, "no rank made progress for hang_timeout 5.0s")) << r.err;
  const std::string stacks = readText(onlyJobDir(j.data_root) + "/stacks.txt");
  EXPECT_TRUE(contains(stacks, "on node 1 (h2)")) << stacks;
  EXPECT_EQ(waitClean(c), "");
}

TEST(SshRun, AHostCutOffMidJobIsNamedAndNothingIsLeftOnIt) {
  NEED_CLUSTER(c);
  Job j = makeJob(c, "touch \"$SHARED/running-$COHORT_RANK\"\nexec sleep 300\n");
  CutOff cut("h2");
  CohortProcess p(runArgs(c, j, "h1,h2", {"--env", "SHARED=" + j.shared}));
  ASSERT_TRUE(ranksRunning(j, 2)) << "the ranks did not start";
  cut.down();
  const auto cut_at = std::chrono::steady_clock::now();
  RunResult r = p.wait(90s);
  EXPECT_NE(r.exit_code, 0) << r.err;
  EXPECT_NE(r.exit_code, -1) << "the job did not end: " << r.err;
  EXPECT_LT(std::chrono::steady_clock::now() - cut_at, 45s) << r.err;
  EXPECT_TRUE(contains(r.err, "node 1 (h2)'s agent was lost")) << r.err;
  EXPECT_TRUE(contains(r.err, "root cause: node 1 (h2)'s agent was lost")) << r.err;
  EXPECT_EQ(readJson(onlyJobDir(j.data_root) + "/result.json")["state"], "failed") << r.err;
  // Still cut off: its agent, hearing nothing, stopped its ranks and removed its job directory.
  // Only sshd's own session is left there, waiting for its connection to time out: it holds
  // nothing of the job, and goes as soon as the host is back on the network.
  std::string left;
  waitFor(
      [&] {
        left.clear();
        std::istringstream all(leftovers(c, "h1") + leftovers(c, "h2"));
        for (std::string line; std::getline(all, line);) {
          if (!contains(line, "sshd: ")) left += line + "\n";
        }
        return left.empty();
      },
      40s, 200ms);
  EXPECT_EQ(left, "") << "left on the hosts while h2 is cut off";
  cut.up();
  EXPECT_EQ(waitClean(c, 40s), "");
}

// `cohort server --backend ssh`: the hosts are the scheduler's nodes.
struct Server {
  std::unique_ptr<ServerProcess> process;
  std::string token;
  RunResult cli(std::vector<std::string> args) const {
    args.insert(args.begin() + 1, {"--server", process->url(), "--token", token});
    return runCohort(args, 60s);
  }
  nlohmann::json record(const std::string& id) const {
    return nlohmann::json::parse(cli({"status", id, "--json"}).out, nullptr, false)["job"];
  }
  std::string state(const std::string& id) const { return record(id).value("state", ""); }
};

Server startSshServer(const Cluster& c, const std::string& hosts, std::string* why) {
  Server s;
  const std::string root = c.private_dir + "/server-" + std::to_string(::getpid()) + "-" +
                           std::to_string(std::rand());
  s.process = startServer(why, {"--backend", "ssh", "--hosts", hosts, "--ssh",
                                "ssh -F " + c.config, "--single-user", "--data-root", root});
  if (s.process) s.token = trimmed(readText(root + "/server/admin.token"));
  return s;
}

std::string jobFile(const Job& j, const std::string& name, int nodes) {
  const std::string file = j.workdir + "/" + name + ".yaml";
  std::ofstream(file) << "name: " << name << "\nframework: generic\nworkdir: " << j.workdir
                      << "\ncommand: [sh, " << name << ".sh]\nenv: {SHARED: " << j.shared
                      << "}\nroles: {worker: {nodes: " << nodes << "}}\n";
  return file;
}

TEST(SshServer, JobsRunOnTheHostsAndOneWaitsWhileTheyAreFull) {
  NEED_CLUSTER(c);
  Job j = makeJob(c, "");
  std::string why;
  Server s = startSshServer(c, "h1:1,h2:1", &why);
  ASSERT_TRUE(s.process) << why;
  EXPECT_TRUE(contains(s.process->log(), "host h2: 1 CPU and ")) << s.process->log();
  std::ofstream(j.workdir + "/wide.sh")
      << "cat data.txt\necho \"rank $COHORT_RANK on $(hostname)\"\n"
         "echo $COHORT_RANK > \"$COHORT_OUTPUT_DIR/out-$COHORT_RANK.txt\"\n"
         "touch \"$SHARED/running-$COHORT_RANK\"\n"
         "while [ ! -e \"$SHARED/go\" ]; do sleep 0.2; done\n";
  std::ofstream(j.workdir + "/narrow.sh") << "echo \"narrow on $(hostname)\"\n";
  RunResult wide = s.cli({"submit", "-f", jobFile(j, "wide", 2)});
  ASSERT_EQ(wide.exit_code, 0) << wide.err;
  const std::string wide_id(trimmed(wide.out));
  ASSERT_TRUE(ranksRunning(j, 2)) << s.record(wide_id).dump() << s.process->log();
  // Both hosts are full: the next job waits in the queue, saying why.
  RunResult narrow = s.cli({"submit", "-f", jobFile(j, "narrow", 1)});
  ASSERT_EQ(narrow.exit_code, 0) << narrow.err;
  const std::string narrow_id(trimmed(narrow.out));
  EXPECT_TRUE(waitFor(
      [&] { return contains(s.cli({"ps"}).out, "needs 1 CPU on one node, at most 0 free"); }, 10s))
      << s.cli({"ps"}).out;
  EXPECT_EQ(s.state(narrow_id), "queued") << s.record(narrow_id).dump();
  std::ofstream(j.shared + "/go") << "go\n";
  ASSERT_TRUE(waitFor([&] { return s.state(wide_id) == "succeeded"; }, 60s))
      << s.record(wide_id).dump();
  const std::string wide_dir = s.process->dataRoot() + "/jobs/" + wide_id;
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(readText(wide_dir + "/output/out-" + std::to_string(rank) + ".txt"),
              std::to_string(rank) + "\n")
        << "rank " << rank << "'s output did not come back";
  }
  RunResult logs = s.cli({"logs", wide_id});
  EXPECT_TRUE(contains(logs.out, "rank 1 on h2")) << logs.out << logs.err;
  EXPECT_TRUE(contains(logs.out, "from the workdir")) << logs.out;
  ASSERT_TRUE(waitFor([&] { return s.state(narrow_id) == "succeeded"; }, 60s))
      << s.record(narrow_id).dump();
  EXPECT_TRUE(contains(s.cli({"logs", narrow_id}).out, "narrow on h1"));
  EXPECT_EQ(waitClean(c), "");
  // More nodes than hosts can never start: refused at once.
  RunResult wider = s.cli({"submit", "-f", jobFile(j, "wide", 3)});
  EXPECT_NE(wider.exit_code, 0);
  EXPECT_TRUE(contains(wider.err, "this server has 2 hosts")) << wider.err;
}

TEST(SshServer, AHostThatCannotBeReachedIsNamedAndNotUsed) {
  NEED_CLUSTER(c);
  Job j = makeJob(c, "");
  std::string why;
  Server s = startSshServer(c, "h1,h2", &why);
  ASSERT_TRUE(s.process) << why;
  CutOff cut("h2");
  cut.down();
  std::ofstream(j.workdir + "/wide.sh") << "echo started\n";
  RunResult wide = s.cli({"submit", "-f", jobFile(j, "wide", 2)});
  ASSERT_EQ(wide.exit_code, 0) << wide.err;
  const std::string wide_id(trimmed(wide.out));
  ASSERT_TRUE(waitFor([&] { return s.state(wide_id) == "failed"; }, 90s))
      << s.record(wide_id).dump();
  EXPECT_TRUE(contains(s.record(wide_id).value("reason", ""), "host h2 (node 1)"))
      << s.record(wide_id).dump();
  RunResult events = s.cli({"status", wide_id});
  EXPECT_TRUE(contains(events.out, "host h2 (node 1): ssh could not reach it")) << events.out;
  // The server asks h2 again, finds it gone, and places nothing more on it.
  EXPECT_TRUE(waitFor([&] { return contains(s.process->log(), "no job is placed on it"); }, 40s))
      << s.process->log();
  std::ofstream(j.workdir + "/narrow.sh") << "echo \"narrow on $(hostname)\"\n";
  for (int k = 0; k < 2; ++k) {
    RunResult narrow = s.cli({"submit", "-f", jobFile(j, "narrow", 1)});
    ASSERT_EQ(narrow.exit_code, 0) << narrow.err;
    const std::string id(trimmed(narrow.out));
    ASSERT_TRUE(waitFor([&] { return s.state(id) == "succeeded"; }, 60s)) << s.record(id).dump();
    EXPECT_TRUE(contains(s.cli({"logs", id}).out, "narrow on h1"));
  }
  EXPECT_EQ(waitClean(c), "");
}

}  // namespace
}  // namespace cohort::testing
