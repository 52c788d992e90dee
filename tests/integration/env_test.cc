// Environments with the real binary, pip and PyPI: the pytorch preset built on first use, a
// saved environment on it with one small package, a job that imports both, a rebuild from the
// lock file, removal, and bad input. One data root for the suite (the preset is built once).
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "harness.h"

namespace cohort::testing {
namespace {

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

class RealEnvironments : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { root_ = new std::string(tempDir()); }
  static void TearDownTestSuite() {
    std::error_code ec;
    std::filesystem::remove_all(*root_, ec);
    delete root_;
  }
  static RunResult cohort(std::vector<std::string> args,
                          std::chrono::milliseconds deadline = 240s) {
    // After the subcommand (and env's verb), before any "--" and the command.
    const size_t at = args[0] == "env" ? 2 : 1;
    args.insert(args.begin() + static_cast<long>(std::min(at, args.size())),
                {"--data-root", *root_});
    // pip asks an index that has no such package once, not five times with back-off.
    return CohortProcess(args, {"PIP_RETRIES=1", "PIP_TIMEOUT=20"}).wait(deadline);
  }
  static std::string* root_;
};
std::string* RealEnvironments::root_ = nullptr;

TEST_F(RealEnvironments, ASavedEnvironmentRunsAJobIsRebuiltTheSameAndRemoved) {
  RunResult ls = cohort({"env", "ls"});
  ASSERT_EQ(ls.exit_code, 0) << ls.err;
  EXPECT_TRUE(std::regex_search(ls.out, std::regex("\\npytorch +preset +no +-"))) << ls.out;

  // cohort plan starts nothing: it shows where the environment will be, and builds nothing.
  RunResult plan = cohort({"plan", "--environment", "pytorch", "--", "python3", "-c", "1"});
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  EXPECT_TRUE(contains(plan.out, "VIRTUAL_ENV=" + *root_ + "/envs/pytorch/venv")) << plan.out;
  EXPECT_FALSE(std::filesystem::exists(*root_ + "/envs/pytorch"));

  // On pytorch, which is built first.
  RunResult made =
      cohort({"env", "create", "extra", "--from", "pytorch", "--pip", "termcolor==3.3.0"});
  ASSERT_EQ(made.exit_code, 0) << made.err;
  EXPECT_TRUE(contains(made.err, "Successfully installed termcolor-3.3.0")) << made.err;
  EXPECT_TRUE(contains(made.err, "cohort env: extra is saved (termcolor 3.3.0)")) << made.err;
  const std::string lock = readText(*root_ + "/envs/extra/lock.txt");
  EXPECT_EQ(lock, "termcolor==3.3.0\n");
  RunResult show = cohort({"env", "show", "extra", "--json"});
  ASSERT_EQ(show.exit_code, 0) << show.err;
  nlohmann::json shown = nlohmann::json::parse(show.out);
  EXPECT_EQ(shown["from"], "pytorch");
  EXPECT_EQ(shown["packages"]["termcolor"], "3.3.0");

  // Two ranks import the package and the base's torch, with the environment's python3; its
  // `pip` is the base's pip, looking at this environment.
  std::string job = tempDir();
  std::ofstream(job + "/job.yaml")
      << "name: in-env\nframework: generic\nenvironment: extra\nworkdir: .\n"
         "command: [python3, -c, \"import os, subprocess, sys, termcolor, torch; "
         "print('ran', sys.executable, os.environ['VIRTUAL_ENV']); "
         "shown = subprocess.run(['pip', 'show', 'termcolor'], capture_output=True, text=True); "
         "print('pip shows', shown.stdout.split('Location: ')[1].split()[0])\"]\n"
         "roles: {worker: {nodes: 2}}\n";
  RunResult run = cohort({"run", "-f", job + "/job.yaml"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const std::string venv = *root_ + "/envs/extra/venv";
  EXPECT_TRUE(contains(run.out, "[worker/1 node1] ran " + venv + "/bin/python3 " + venv))
      << run.out;
  EXPECT_TRUE(contains(run.out, "[worker/0 node0] pip shows " + venv + "/lib/python3")) << run.out;

  // The lock file builds the same versions.
  RunResult again = cohort({"env", "rebuild", "extra"});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(readText(*root_ + "/envs/extra/lock.txt"), lock);

  // pytorch cannot go while extra is built on it; extra can.
  RunResult base = cohort({"env", "rm", "pytorch"});
  EXPECT_EQ(base.exit_code, 2) << base.err;
  EXPECT_TRUE(contains(base.err, "environment extra is built on pytorch")) << base.err;
  ASSERT_EQ(cohort({"env", "rm", "extra"}).exit_code, 0);
  EXPECT_FALSE(std::filesystem::exists(venv));
  RunResult gone = cohort({"run", "-f", job + "/job.yaml"});
  EXPECT_EQ(gone.exit_code, 2);
  EXPECT_TRUE(contains(gone.err,
                       "environment: no environment 'extra' (there are: system, "
                       "pytorch, deepspeed, jupyter, tensorflow, mindspore;"))
      << gone.err;
}

// An environment built on pytorch keeps Debian's torch: torchmetrics 1.9.0 wants torch>=2.0,
// which pip would otherwise fetch from PyPI (gigabytes of CUDA torch) over Debian's 1.13.0a0.
// The build fails instead, naming the package and the torch it wanted, and leaves nothing.
TEST_F(RealEnvironments, AnEnvironmentKeepsItsBasesTorch) {
  RunResult made = cohort({"env", "create", "newtorch", "--from", "pytorch", "--pip",
                           "torchmetrics==1.9.0"});
  EXPECT_EQ(made.exit_code, 1) << made.err;
  EXPECT_TRUE(contains(made.err, "the packages of pytorch stay as they are")) << made.err;
  EXPECT_TRUE(contains(made.err, "torchmetrics 1.9.0 depends on torch>=2.0.0")) << made.err;
  EXPECT_TRUE(contains(made.err, "torch==1.13.0a0")) << made.err;
  EXPECT_FALSE(std::filesystem::exists(*root_ + "/envs/newtorch"));
  EXPECT_FALSE(contains(cohort({"env", "ls"}).out, "newtorch"));
}

TEST_F(RealEnvironments, APackageThatDoesNotExistFailsInPipsWordsAndLeavesNothing) {
  RunResult made = cohort({"env", "create", "broken", "--from", "pytorch", "--pip",
                           "cohort-no-such-package-anywhere==9.9.9"});
  EXPECT_EQ(made.exit_code, 1) << made.err;
  EXPECT_TRUE(contains(made.err, "environment broken:")) << made.err;
  EXPECT_TRUE(contains(made.err, "cohort-no-such-package-anywhere")) << made.err;
  EXPECT_FALSE(std::filesystem::exists(*root_ + "/envs/broken"));
  EXPECT_FALSE(contains(cohort({"env", "ls"}).out, "broken"));
  RunResult bad = cohort({"env", "create", "../x", "--from", "pytorch"});
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  RunResult preset = cohort({"env", "create", "pytorch", "--from", "system"});
  EXPECT_EQ(preset.exit_code, 2) << preset.err;
  EXPECT_TRUE(contains(preset.err, "it is a preset")) << preset.err;
  RunResult none = cohort({"env", "show", "nope"});
  EXPECT_EQ(none.exit_code, 2) << none.err;
  EXPECT_TRUE(contains(none.err, "no environment 'nope'")) << none.err;
}

// The pip install running under `env create`, once it is there (a child of `parent`).
bool pipInstallRunsUnder(pid_t parent) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    const size_t close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 2));
    char state;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid != parent) continue;
    std::ifstream cmdline(entry.path() / "cmdline");
    std::string argv((std::istreambuf_iterator<char>(cmdline)), std::istreambuf_iterator<char>());
    if (contains(argv, std::string("pip\0install", 11))) return true;
  }
  return false;
}

// `env create` killed (kill -9, as a lost terminal or an impatient user's Ctrl-C can) while pip
// installs leaves a directory without env.json: `env ls` shows it as broken, `env show` and a
// job say what it is, and `env rm` takes it away.
TEST_F(RealEnvironments, AKilledBuildIsShownAsBrokenAndRemoved) {
  ASSERT_EQ(cohort({"env", "build", "pytorch"}).exit_code, 0);
  CohortProcess create({"env", "create", "--data-root", *root_, "killed", "--from", "pytorch",
                        "--pip", "termcolor==3.3.0"},
                       {"PIP_RETRIES=1", "PIP_TIMEOUT=20"});
  const auto until = std::chrono::steady_clock::now() + 120s;
  while (!pipInstallRunsUnder(create.pid()) && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(5ms);
  }
  ASSERT_EQ(::kill(create.pid(), SIGKILL), 0);
  RunResult killed = create.wait(30s);
  ASSERT_TRUE(std::filesystem::exists(*root_ + "/envs/killed/venv")) << killed.err;
  ASSERT_FALSE(std::filesystem::exists(*root_ + "/envs/killed/env.json")) << killed.err;
  const std::string ls = cohort({"env", "ls"}).out;
  EXPECT_TRUE(std::regex_search(ls, std::regex(R"(killed\s+saved\s+broken\s+[0-9.]+ [KMG]i?B)")))
      << ls;
  RunResult show = cohort({"env", "show", "killed"});
  EXPECT_NE(show.exit_code, 0);
  EXPECT_TRUE(contains(show.err, "cohort env rm killed")) << show.err;
  RunResult rm = cohort({"env", "rm", "killed"});
  EXPECT_EQ(rm.exit_code, 0) << rm.err;
  EXPECT_FALSE(std::filesystem::exists(*root_ + "/envs/killed"));
  EXPECT_FALSE(contains(cohort({"env", "ls"}).out, "killed"));
}

// A cluster's node that does not see a virtual environment the job names only through its
// variables (VIRTUAL_ENV, not `environment: NAME`, whose definition a node builds its own copy
// from: env/node_copy.h) fails the job before any rank starts, naming the node and the path,
// rather than letting its ranks find another python3. Here the one named is nowhere.
TEST(Environments, ANodeThatCannotSeeTheEnvironmentFailsTheJobBeforeAnyRankStarts) {
  const std::string root = tempDir(), pids = root + "/pids";
  RunResult r =
      CohortProcess({"run", "--data-root", root, "--nodes", "2", "--env",
                     "VIRTUAL_ENV=" + root + "/nowhere/venv", "--", testRank(), "pidfile=" + pids})
          .wait(60s);
  EXPECT_NE(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "environment: " + root + "/nowhere/venv is not on node")) << r.err;
  EXPECT_TRUE(contains(r.err, "COHORT_ENVS")) << r.err;
  EXPECT_TRUE(contains(r.err, "or name a cohort environment (environment: NAME)")) << r.err;
  EXPECT_TRUE(readPids(pids).empty()) << "no rank started";
}

}  // namespace
}  // namespace cohort::testing
