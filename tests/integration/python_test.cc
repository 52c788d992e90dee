// The ranks' Python: the interpreter is found as the ranks will find it and asked, before
// anything starts, for the modules the program imports; a missing one names that interpreter
// and another of the machine that has it. Real interpreters: a virtual environment without the
// system's packages plays the Python first on PATH that lacks them.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>

#include "harness.h"

namespace cohort::testing {
namespace {

std::string write(const std::string& dir, const std::string& name, const std::string& text) {
  const std::string path = dir + "/" + name;
  std::ofstream(path) << text;
  return path;
}

// A virtual environment of Debian's Python without its site packages (no torch, no yaml): its
// bin/ directory, or "" when it cannot be made.
std::string bareVenv(const std::string& root) {
  const std::string venv = root + "/bare";
  if (!have("/usr/bin/python3 -m venv --without-pip " + venv)) return "";
  return venv + "/bin";
}

std::string pathWithFirst(const std::string& dir) {
  const char* path = std::getenv("PATH");
  return "PATH=" + dir + ":" + (path ? path : "/usr/bin:/bin");
}

RunResult runWithFirstOnPath(const std::string& bin, const std::vector<std::string>& args) {
  CohortProcess p(args, {pathWithFirst(bin)});
  return p.wait();
}

TEST(PythonRanks, AMissingModuleNamesTheInterpreterAndOneThatHasIt) {
  REQUIRE("/usr/bin/python3 -c 'import torch'", "Debian's python3-torch is not installed");
  const std::string root = tempDir();
  const std::string bin = bareVenv(root);
  ASSERT_FALSE(bin.empty());
  write(root, "train.py", "import os\nimport torch.distributed as dist\nprint('ran')\n");
  auto r = runWithFirstOnPath(bin, {"run", "--data-root", root + "/data", "--workdir", root,
                                    "--nodes", "2", "--", "python3", "train.py"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "the ranks' interpreter 'python3' (" + bin + "/python3")) << r.err;
  EXPECT_TRUE(contains(r.err, "cannot import 'torch' (train.py line 2)")) << r.err;
  EXPECT_TRUE(contains(r.err, ": /usr/bin/python3 has it: name it in the command (-- "
                              "/usr/bin/python3 train.py)"))
      << r.err;
  EXPECT_EQ(onlyJobDir(root + "/data"), "") << "nothing was started";
}

TEST(PythonRanks, AModuleNoPythonHasSaysHowToInstallIt) {
  const std::string root = tempDir();
  write(root, "train.py", "import json\nfrom no_such_module_anywhere import x\n");
  auto r = runCohort({"run", "--data-root", root + "/data", "--workdir", root, "--",
                      "/usr/bin/python3", "train.py"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "cannot import 'no_such_module_anywhere' (train.py line 2): no "
                              "other python3 on this machine has it: install it for this "
                              "interpreter"))
      << r.err;
  EXPECT_EQ(onlyJobDir(root + "/data"), "") << "nothing was started";
}

TEST(PythonRanks, ImportsAfterTheScriptChangesSysPathAreLeftToIt) {
  const std::string root = tempDir();
  ASSERT_EQ(::mkdir((root + "/lib").c_str(), 0755), 0);
  write(root, "lib/helper_of_the_job.py", "WORD = 'found'\n");
  write(root, "train.py",
        "import sys\ntry:\n    import not_installed_optional\nexcept ImportError:\n    pass\n"
        "sys.path.insert(0, 'lib')\nimport helper_of_the_job\nprint(helper_of_the_job.WORD)\n");
  auto r = runCohort({"run", "--data-root", root + "/data", "--workdir", root, "--",
                      "/usr/bin/python3", "train.py"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "found")) << r.out;
}

TEST(PythonRanks, TheLauncherTorchrunNeedsTorchInTheRanksPython) {
  const std::string root = tempDir();
  const std::string bin = bareVenv(root);
  ASSERT_FALSE(bin.empty());
  write(root, "train.py", "print('ran')\n");
  auto r = runWithFirstOnPath(bin, {"run", "--data-root", root + "/data", "--workdir", root,
                                    "--launcher", "torchrun", "--", "python3", "train.py"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "launcher: the ranks' interpreter 'python3' (" + bin)) << r.err;
  EXPECT_TRUE(contains(r.err, "cannot import 'torch'")) << r.err;
}

// The module's path and the rank, from every rank: the probe of `import cohort`.
constexpr const char* kWhichCohort =
    "import cohort, sys\nprint('cohort from', cohort.__file__, 'rank', cohort.rank(), "
    "'of', cohort.world_size())\n";

TEST(PythonModule, EveryRankImportsItFromAnInterpreterThatNeverHadIt) {
  const std::string root = tempDir();
  const std::string bin = bareVenv(root);
  ASSERT_FALSE(bin.empty());
  ASSERT_FALSE(have(bin + "/python3 -c 'import cohort'")) << "the venv must not have it";
  write(root, "which.py", kWhichCohort);
  // The user's own PYTHONPATH stays in front.
  ASSERT_EQ(::mkdir((root + "/mine").c_str(), 0755), 0);
  write(root + "/mine", "own_module_of_the_user.py", "");
  auto r = runWithFirstOnPath(
      bin, {"run", "--data-root", root + "/data", "--workdir", root, "--nodes", "2",
            "--framework", "generic", "--name", "which", "--env", "PYTHONPATH=" + root + "/mine",
            "--", "python3",
            "-c", "import own_module_of_the_user\n" + std::string(kWhichCohort)});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string job = onlyJobDir(root + "/data");
  for (const char* rank : {"rank 0 of 2", "rank 1 of 2"}) {
    EXPECT_TRUE(contains(r.out, "cohort from " + job + "/files/python/package/cohort/__init__.py " +
                                    rank))
        << r.out;
  }
  EXPECT_EQ(readJson(job + "/plan.json")["nodes"][0]["ranks"][0]["env"].value("PYTHONPATH", ""),
            root + "/mine:" + job + "/files/python");
}

TEST(PythonModule, TheLauncherPreloadsRanksImportItToo) {
  const std::string root = tempDir();
  write(root, "which.py", kWhichCohort);
  auto r = runCohort({"run", "--data-root", root + "/data", "--workdir", root, "--nproc-per-node",
                      "2", "--framework", "generic", "--preload", "json", "--",
                      "/usr/bin/python3", "which.py"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string job = onlyJobDir(root + "/data");
  EXPECT_TRUE(contains(r.out, "cohort from " + job + "/files/python/package/cohort/__init__.py "
                              "rank 1 of 2"))
      << r.out;
}

TEST(PythonModule, TheLauncherTorchrunsRanksImportItToo) {
  REQUIRE("/usr/bin/python3 -c 'import torch'", "Debian's python3-torch is not installed");
  const std::string root = tempDir();
  write(root, "which.py", kWhichCohort);
  auto r = runCohort({"run", "--data-root", root + "/data", "--workdir", root, "--nproc-per-node",
                      "2", "--launcher", "torchrun", "--", "/usr/bin/python3", "which.py"},
                     120s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "/files/python/package/cohort/__init__.py rank 1 of 2")) << r.out;
}

TEST(PythonModule, ACohortTheUserInstalledIsImportedInstead) {
  const std::string root = tempDir();
  const std::string bin = bareVenv(root);
  ASSERT_FALSE(bin.empty());
  const std::string site = shellOutput(bin + "/python3 -c 'import sysconfig; "
                                       "print(sysconfig.get_paths()[\"purelib\"], end=\"\")'");
  ASSERT_FALSE(site.empty());
  ASSERT_EQ(::mkdir((site + "/cohort").c_str(), 0755), 0);
  write(site + "/cohort", "__init__.py", "WHO = 'installed'\n");
  auto r = runWithFirstOnPath(bin, {"run", "--data-root", root + "/data", "--workdir", root,
                                    "--framework", "generic", "--name", "who", "--", "python3",
                                    "-c",
                                    "import cohort; print('who', cohort.WHO, cohort.__file__)"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "who installed " + site + "/cohort/__init__.py")) << r.out;
}


}  // namespace
}  // namespace cohort::testing
