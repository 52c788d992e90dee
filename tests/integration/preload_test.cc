// launcher: preload with real Python ranks (Debian's /usr/bin/python3): every rank of a node is
// forked from one template that imported the job's `preload` modules, and is supervised exactly
// as a directly launched rank is. These tests preload small modules of their own (not torch),
// so they are quick; the DDP example with torch preloaded is in frameworks_test.cc.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "harness.h"

namespace cohort::testing {
namespace {

class Preload : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = tempDir();
    root_ = dir_ + "/root";
    // Imported once per node by the template: each import leaves a line in imports.log.
    write("stamp.py", "import os\nwith open(os.path.join(os.path.dirname(__file__), 'imports.log'), "
                      "'a') as f:\n    f.write('imported %d\\n' % os.getpid())\n");
  }

  void write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ + "/" + name) << text;
  }

  // A job file running `script` on 2 nodes x 2 ranks with launcher preload.
  std::string job(const std::string& script, const std::string& preload = "[stamp]",
                  const std::string& extra = "") {
    const std::string f = dir_ + "/job.yaml";
    std::ofstream(f) << "name: pre\nframework: generic\nlauncher: preload\npreload: " << preload
                     << "\nworkdir: " << dir_ << "\ncommand: [/usr/bin/python3, " << script
                     << ", one, two]\nroles: {worker: {nodes: 2, procs_per_node: 2}}\n" << extra;
    return f;
  }

  RunResult run(const std::string& file, std::vector<std::string> more = {}) {
    std::vector<std::string> args = {"run", "--data-root", root_, "-f", file};
    args.insert(args.end(), more.begin(), more.end());
    return runCohort(args, 120s);
  }

  // The pids of the processes whose working directory is the job's workdir: ranks and
  // templates both run there.
  std::string leftInWorkdir() const {
    return shellOutput("for p in /proc/[0-9]*; do [ \"$(readlink $p/cwd)\" = '" + dir_ +
                       "' ] && echo ${p#/proc/}; done");
  }

  int imports() const {
    std::string log = readText(dir_ + "/imports.log");
    return static_cast<int>(std::count(log.begin(), log.end(), '\n'));
  }

  std::string dir_, root_;
};

TEST_F(Preload, EachRankIsAForkedScriptWithItsOwnIdentity) {
  write("who.py",
        "import os, sys\n"
        "print('who', os.environ['COHORT_RANK'], sys.argv, __name__, 'stamp' in sys.modules,\n"
        "      os.getpgid(0) == os.getpid(), os.getsid(0) == os.getpid(),\n"
        "      open('/proc/%d/comm' % os.getppid()).read().startswith('cohort node'),\n"
        "      sys.path[0] == os.getcwd(), __file__ == os.path.join(os.getcwd(), 'who.py'),\n"
        "      open('/proc/self/cmdline', 'rb').read().replace(b'\\0', b' ').strip().decode(),\n"
        "      flush=True)\n");
  auto r = run(job("who.py"));
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  for (int rank = 0; rank < 4; ++rank) {
    // Its own argv, run as __main__, the module already there, its own process group and
    // session, the agent ("cohort node N") as its parent, the script's directory first on the
    // path, its absolute path as __file__, and its command where ps and pgrep -f look.
    EXPECT_TRUE(
        contains(r.out, "who " + std::to_string(rank) +
                            " ['who.py', 'one', 'two'] __main__ True True True True True True "
                            "/usr/bin/python3 who.py one two\n"))
        << r.out;
  }
  EXPECT_EQ(imports(), 2) << "one import per node, not per rank";
  EXPECT_TRUE(contains(readText(onlyJobDir(root_) + "/plan.json"), "\"preload\": true"));
}

TEST_F(Preload, AModuleRunsAsPythonDashMRunsIt) {
  write("mainmod.py", "import os, sys\nprint('mod', os.environ['COHORT_RANK'], __name__, "
                      "os.path.basename(sys.argv[0]), sys.argv[1:], flush=True)\n");
  auto r = run(job("-m, mainmod", "[]"));  // command: [python3, -m, mainmod, one, two]
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "mod 3 __main__ mainmod.py ['one', 'two']")) << r.out;
}

// A forked rank ends as the interpreter would end it, without the interpreter's teardown:
// threads joined, atexit handlers run, what the script still holds finalized, what it left
// open (in its globals or anywhere else) flushed and closed, wrappers before what they wrap.
TEST_F(Preload, ARankEndsAsTheInterpreterWouldEndIt) {
  write("ending.py",
        "import atexit, gzip, json, os, sys, threading, time\n"
        "rank = os.environ['COHORT_RANK']\n"
        "left_open = open('left-open-' + rank, 'w')\n"
        "left_open.write('flushed')\n"
        "zipped = gzip.open('zipped-' + rank + '.gz', 'wt')\n"
        "zipped.write('zipped in globals')\n"
        "json.held = gzip.open('held-' + rank + '.gz', 'wt')  # in another module's globals\n"
        "json.held.write('zipped elsewhere')\n"
        "class Last:  # as it must be written to work at a plain interpreter's exit too\n"
        "    def __del__(self, write=os.write, fd=os.open('del-' + rank, os.O_WRONLY | "
        "os.O_CREAT)):\n"
        "        write(fd, b'finalized')\n"
        "last = Last()\n"
        "atexit.register(lambda: print('atexit', rank, flush=True))\n"
        "def late():\n    time.sleep(0.3)\n    open('thread-' + rank, 'w').write('joined')\n"
        "threading.Thread(target=late).start()\n"
        "if os.environ.get('FAIL'):\n    sys.exit('bad config')\n");
  auto r = run(job("ending.py"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (int rank = 0; rank < 4; ++rank) {
    const std::string n = std::to_string(rank);
    EXPECT_TRUE(contains(r.out, "atexit " + n)) << r.out;
    EXPECT_EQ(readText(dir_ + "/left-open-" + n), "flushed") << "a file left open is flushed";
    EXPECT_EQ(readText(dir_ + "/thread-" + n), "joined") << "a thread is waited for";
    EXPECT_EQ(readText(dir_ + "/del-" + n), "finalized") << "the script's globals are released";
    for (const auto& [file, text] :
         {std::pair{"zipped-", "zipped in globals"}, std::pair{"held-", "zipped elsewhere"}}) {
      EXPECT_EQ(shellOutput("gzip -dc " + dir_ + "/" + file + n + ".gz"), text)
          << "a gzip file left open is closed whole, trailer included";
    }
  }
  auto failed = run(job("ending.py", "[stamp]", "env: {FAIL: '1'}\n"));
  EXPECT_EQ(failed.exit_code, 1) << failed.err;
  EXPECT_TRUE(contains(failed.err, "| bad config")) << failed.err;
}

TEST_F(Preload, AFailingRankStopsTheOthersGracefullyAndIsTheRootCause) {
  write("fail.py",
        "import os, signal, subprocess, sys, time\n"
        "rank = int(os.environ['COHORT_RANK'])\n"
        "def bye(*_):\n    print('graceful', rank, flush=True)\n    sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, bye)\n"
        "if rank == 0:\n"
        "    p = subprocess.Popen(['sleep', '300'], start_new_session=True)\n"
        "    open('escaped.pid', 'w').write(str(p.pid))\n"
        "print('up', rank, flush=True)\n"
        "if rank == 3:\n    time.sleep(1)\n    raise RuntimeError('boom on three')\n"
        "time.sleep(300)\n");
  auto r = run(job("fail.py"));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(contains(r.err, "root cause: worker/3 on node 1 exited with code 1")) << r.err;
  EXPECT_TRUE(contains(r.err, "RuntimeError: boom on three")) << r.err;
  // Its traceback as `python fail.py` prints it: the script's absolute path (Python 3.9 and
  // later) from its first frame, none of the template's frames under it.
  const std::string log = readText(onlyJobDir(root_) + "/logs/worker-3.log");
  EXPECT_TRUE(contains(log, "Traceback (most recent call last):\n  File \"" + dir_ +
                                "/fail.py\", line 13, in <module>\n"))
      << log;
  EXPECT_FALSE(contains(log, "<string>")) << log;
  for (int rank : {0, 1, 2}) {
    EXPECT_TRUE(contains(r.out, "graceful " + std::to_string(rank))) << r.out;
  }
  // What a rank started in a session of its own went with the job.
  const pid_t escaped = std::atoi(readText(dir_ + "/escaped.pid").c_str());
  ASSERT_GT(escaped, 0);
  EXPECT_TRUE(waitFor([&] { return processGone(escaped); }, 5s));
}

TEST_F(Preload, ARestartForksFromTheSameTemplate) {
  write("flaky.py",
        "import os, sys\n"
        "if os.environ['COHORT_RESTART_COUNT'] == '0' and os.environ['COHORT_RANK'] == '1':\n"
        "    sys.exit(3)\n"
        "print('attempt', os.environ['COHORT_RESTART_COUNT'], 'rank', os.environ['COHORT_RANK'], flush=True)\n");
  auto r = run(job("flaky.py"), {"--max-restarts", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "attempt 1 rank 1")) << r.out;
  EXPECT_EQ(imports(), 2) << "the restart reused each node's template";
}

TEST_F(Preload, ATemplateThatCannotForkSafelySaysWhy) {
  write("threads.py", "import threading, time\nthreading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n");
  write("ok.py", "print('never')\n");
  auto threaded = run(job("ok.py", "[threads]"));
  EXPECT_EQ(threaded.exit_code, 127) << threaded.err;
  EXPECT_TRUE(contains(threaded.err, "threads are running after importing threads: a fork would "
                                     "copy only one"))
      << threaded.err;
  EXPECT_FALSE(contains(threaded.out, "never"));
  // What an imported module prints goes nowhere; what breaks it says where.
  write("broken.py", "print('from the template')\nx = 1\nundefined_name\n");
  auto broken = run(job("ok.py", "[broken]"));
  EXPECT_EQ(broken.exit_code, 127) << broken.err;
  EXPECT_TRUE(contains(broken.err, "importing broken (broken.py:3): NameError: name "
                                   "'undefined_name' is not defined"))
      << broken.err;
  EXPECT_FALSE(contains(broken.err + broken.out, "from the template"));
  // A module the interpreter cannot find is refused before anything starts (env/python_check.h).
  auto missing = run(job("ok.py", "[no_such_module_here]"));
  EXPECT_EQ(missing.exit_code, 2) << missing.err;
  EXPECT_TRUE(contains(missing.err, "preload: the ranks' interpreter '/usr/bin/python3' "
                                    "(/usr/bin/python3, Python "))
      << missing.err;
  EXPECT_TRUE(contains(missing.err, "cannot import 'no_such_module_here'")) << missing.err;
}

// numpy's OpenBLAS starts a thread pool when it is loaded, unless OMP_NUM_THREADS=1, and stops
// it for a fork: the template may fork then, and each rank gets its pool back when it needs it.
TEST_F(Preload, AThreadPoolThatStopsForAForkIsNoReasonToRefuse) {
  write("blas.py",
        "import numpy\na = numpy.ones((300, 300))\n"
        "print('sum', int((a @ a).sum()), flush=True)\n");
  auto r = run(job("blas.py", "[numpy]", "env: {OMP_NUM_THREADS: '2'}\n"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_TRUE(contains(r.out, "[worker/" + std::to_string(rank) + " node" +
                                    std::to_string(rank / 2) + "] sum 27000000"))
        << r.out;
  }
}

// A directly launched rank seeds numpy's global generator (and torch's) when it imports it; a
// forked one must not draw the template's numbers: augmentations and dropout would be the same
// in every rank.
TEST_F(Preload, EachRankDrawsRandomNumbersOfItsOwn) {
  write("draw.py",
        "import random, numpy\n"
        "print('draw', numpy.random.randint(1 << 30), random.randint(0, 1 << 30), flush=True)\n");
  auto r = run(job("draw.py", "[numpy]"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::set<std::string> numpy_draws, python_draws;
  std::istringstream out(r.out);
  for (std::string line; std::getline(out, line);) {
    std::smatch m;
    if (!std::regex_search(line, m, std::regex(R"(draw (\d+) (\d+)$)"))) continue;
    numpy_draws.insert(m[1]);
    python_draws.insert(m[2]);
  }
  EXPECT_EQ(numpy_draws.size(), 4u) << r.out;
  EXPECT_EQ(python_draws.size(), 4u) << r.out;
}

// The template runs the job's code (its preload modules): a module that makes it name another
// process than the rank it forked gets that rank refused, and the other process is left alone.
TEST_F(Preload, ATemplateThatNamesAProcessNotItsRankIsRefused) {
  write("liar.py", "import __main__\nreal = __main__.send\n"
                   "__main__.send = lambda obj: real({'pid': 1} if 'pid' in obj else obj)\n");
  write("ok.py", "print('never')\n");
  const std::string init_cgroup = readText("/proc/1/cgroup");
  auto r = run(job("ok.py", "[liar]"));
  EXPECT_EQ(r.exit_code, 127) << r.err;
  EXPECT_TRUE(contains(r.err, "the preload template named process 1, which is not this agent's"))
      << r.err;
  EXPECT_EQ(readText("/proc/1/cgroup"), init_cgroup) << "pid 1 was moved";
}

TEST_F(Preload, ACtrlCStopsEveryRankAndTheTemplates) {
  write("wait.py", "import os, time\nprint('up', os.environ['COHORT_RANK'], flush=True)\ntime.sleep(300)\n");
  CohortProcess cohort({"run", "--data-root", root_, "-f", job("wait.py")});
  ASSERT_TRUE(waitFor([&] {
    std::string logs;
    for (int i = 0; i < 4; ++i) {
      logs += readText(onlyJobDir(root_) + "/logs/worker-" + std::to_string(i) + ".log");
    }
    return std::count(logs.begin(), logs.end(), '\n') == 4;
  }, 60s));
  ::kill(cohort.pid(), SIGINT);
  RunResult r = cohort.wait(30s);
  EXPECT_EQ(r.exit_code, 130) << r.err;
  EXPECT_TRUE(waitFor([&] { return leftInWorkdir().empty(); }, 10s)) << leftInWorkdir();
}

TEST_F(Preload, ARankIgnoringSigtermIsKilledAfterTheGracePeriod) {
  write("stubborn.py",
        "import os, signal, sys, time\n"
        "rank = os.environ['COHORT_RANK']\n"
        "if rank == '0':\n    signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "print('up', rank, flush=True)\n"
        "if rank == '2':\n    time.sleep(1)\n    sys.exit(4)\n"
        "time.sleep(300)\n");
  auto r = run(job("stubborn.py"), {"--grace-period", "1s"});
  EXPECT_EQ(r.exit_code, 4) << r.err;
  EXPECT_TRUE(contains(r.err, "root cause: worker/2 on node 1 exited with code 4")) << r.err;
  bool killed = false;
  for (const auto& e : readJsonLines(onlyJobDir(root_) + "/events.jsonl")) {
    killed |= e.value("event", "") == "rank_exit" && e.value("name", "") == "worker/0" &&
              e.value("signal", 0) == SIGKILL;
  }
  EXPECT_TRUE(killed) << "worker/0 ignored SIGTERM and got SIGKILL";
}

TEST_F(Preload, KillDashNineOfCohortAndItsAgentsLeavesNoRankAndNoTemplate) {
  write("wait.py", "import time\nprint('up', flush=True)\ntime.sleep(300)\n");
  CohortProcess cohort({"run", "--data-root", root_, "-f", job("wait.py")});
  ASSERT_TRUE(waitFor([&] { return contains(readText(onlyJobDir(root_) + "/logs/worker-3.log"), "up"); }, 60s));
  std::vector<pid_t> agents;
  std::istringstream children(readText("/proc/" + std::to_string(cohort.pid()) + "/task/" +
                                       std::to_string(cohort.pid()) + "/children"));
  for (pid_t pid; children >> pid;) {
    if (contains(readText("/proc/" + std::to_string(pid) + "/comm"), "cohort node"))
      agents.push_back(pid);
  }
  ASSERT_EQ(agents.size(), 2u);
  // Nobody cleans up: cohort is stopped, then everything of cohort's own is killed.
  ASSERT_EQ(::kill(cohort.pid(), SIGSTOP), 0);
  for (pid_t pid : agents) ASSERT_EQ(::kill(pid, SIGKILL), 0);
  ASSERT_EQ(::kill(cohort.pid(), SIGKILL), 0);
  cohort.wait(20s);
  EXPECT_TRUE(waitFor([&] { return leftInWorkdir().empty(); }, 10s)) << leftInWorkdir();
}

TEST_F(Preload, CommandsItCannotForkAreRefusedBeforeAnythingStarts) {
  const std::string f = dir_ + "/bad.yaml";
  std::ofstream(f) << "name: bad\nframework: generic\nlauncher: preload\nworkdir: " << dir_
                   << "\ncommand: [sh, -c, 'true']\n";
  auto r = runCohort({"plan", "-f", f, "--data-root", root_});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "launcher: preload forks Python ranks")) << r.err;
  std::ofstream(f) << "name: bad\nframework: tensorflow\nlauncher: preload\ncommand: [python3, a.py]\n";
  r = runCohort({"plan", "-f", f, "--data-root", root_});
  EXPECT_TRUE(contains(r.err, "'preload' is for framework pytorch or generic")) << r.err;
  std::ofstream(f) << "name: bad\nlauncher: direct\npreload: [torch]\ncommand: [python3, a.py]\n";
  r = runCohort({"plan", "-f", f, "--data-root", root_});
  EXPECT_TRUE(contains(r.err, "preload: names the modules of launcher: preload")) << r.err;
  std::ofstream(f) << "name: bad\nlauncher: preload\npreload: [\"os; rm\"]\ncommand: [python3, a.py]\n";
  r = runCohort({"plan", "-f", f, "--data-root", root_});
  EXPECT_TRUE(contains(r.err, "is not a Python module name")) << r.err;
}

}  // namespace
}  // namespace cohort::testing
