// Debugging a distributed job (docs/debugging.md) as an IDE does it: a small Debug Adapter
// Protocol client (dap_client.py, what VS Code's "attach" speaks) attaches to a rank that cohort
// ran under debugpy, reads a variable where it stopped and lets it go on. RealDebugger runs real
// gloo DDP jobs (Debian's python3-torch); DebugFlags the refusals and the timeouts with plain
// Python ranks.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <optional>
#include <thread>

#include "harness.h"

namespace cohort::testing {
namespace {

const char* kDebugpy = "/usr/bin/python3 -c 'import debugpy'";
const char* kTorchAndDebugpy = "/usr/bin/python3 -c 'import torch, debugpy'";

std::string example() { return sourceDir() + "/examples/pytorch/debug_ddp.py"; }

// The line of `path` that contains `marker`, counting from 1.
int lineOf(const std::string& path, const std::string& marker) {
  std::ifstream in(path);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (contains(line, marker)) return n;
  }
  return 0;
}

// The job `cohort run` started under `root`, once its directory is there.
std::string jobIdUnder(const std::string& root) {
  std::string dir;
  waitFor([&] { return !(dir = onlyJobDir(root)).empty(); }, 30s, 20ms);
  return dir.substr(dir.rfind('/') + 1);
}

// `cohort debug JOB --json`: the rank named `name` once it is in state `state`.
std::optional<nlohmann::json> pausedRank(const std::string& root, const std::string& id,
                                         const std::string& name,
                                         const std::string& state = "waiting") {
  std::optional<nlohmann::json> found;
  waitFor(
      [&] {
        const std::string out = shellOutput(std::string(COHORT_BIN) + " debug " + id +
                                            " --data-root " + root + " --json 2>/dev/null");
        auto j = nlohmann::json::parse(out, nullptr, false);
        if (!j.is_object() || !j["ranks"].is_array()) return false;
        for (const auto& r : j["ranks"]) {
          if (r["name"] == name && r["state"] == state) found = r;
        }
        return found.has_value();
      },
      45s, 100ms);
  return found;
}

// Runs the DAP client against `port`; its JSON answer, or null with what it said in `why`.
nlohmann::json attach(int port, const std::string& flags, std::string* why = nullptr) {
  const std::string out =
      shellOutput("/usr/bin/python3 " + sourceDir() + "/tests/integration/dap_client.py --port " +
                  std::to_string(port) + " " + flags + " 2>&1");
  auto j = nlohmann::json::parse(out.substr(out.find('{') == std::string::npos ? 0 : out.find('{')),
                                 nullptr, false);
  if (why) *why = out;
  return j.is_object() ? j : nlohmann::json();
}

std::vector<std::string> ddp(const std::string& root, const std::vector<std::string>& flags) {
  std::vector<std::string> args = {"run", "--data-root", root,  "--nodes", "2", "--nproc-per-node",
                                   "2",   "--log-ranks", "none"};
  args.insert(args.end(), flags.begin(), flags.end());
  for (const std::string& a : {std::string("--"), std::string("/usr/bin/python3"), example()}) {
    args.push_back(a);
  }
  return args;
}

// Each case runs as launched directly and as forked from a preload template (launcher: preload).
class RealDebugger : public ::testing::TestWithParam<const char*> {
 protected:
  std::vector<std::string> job(const std::string& root, std::vector<std::string> flags) const {
    flags.insert(flags.begin(), {"--launcher", GetParam()});
    return ddp(root, flags);
  }
};

INSTANTIATE_TEST_SUITE_P(Launchers, RealDebugger, ::testing::Values("direct", "preload"),
                         [](const auto& info) { return std::string(info.param); });

TEST_P(RealDebugger, AttachesToAWaitingRankStopsAtABreakpointAndTheJobSucceeds) {
  REQUIRE(kTorchAndDebugpy, "Debian's python3-torch and python3-debugpy are not installed");
  const std::string root = tempDir();
  CohortProcess job(this->job(root, {"--debug", "1"}));
  const std::string id = jobIdUnder(root);
  auto rank = pausedRank(root, id, "worker/1");
  ASSERT_TRUE(rank) << job.wait(5s).err;
  EXPECT_EQ((*rank)["reason"], "start");
  EXPECT_EQ((*rank)["host"], "127.0.0.1");
  const int line = lineOf(example(), "a line to stop at");
  std::string said;
  auto stop =
      attach((*rank)["port"].get<int>(),
             "--breakpoint " + example() + ":" + std::to_string(line) + " --evaluate step", &said);
  ASSERT_TRUE(stop.is_object()) << said;
  EXPECT_EQ(stop["stopped"], "breakpoint");
  EXPECT_EQ(stop["file"], example());
  EXPECT_EQ(stop["line"], line);
  EXPECT_EQ(stop["value"], "0") << "the first step";
  auto r = job.wait(60s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "cohort: worker/1 on node 0 is waiting for a debugger at 127.0.0.1:" +
                                  std::to_string((*rank)["port"].get<int>())))
      << r.err;
  EXPECT_TRUE(contains(r.err, "a debugger is attached to worker/1 on node 0")) << r.err;
  bool recorded = false;
  for (const auto& e : readJsonLines(onlyJobDir(root) + "/events.jsonl")) {
    recorded = recorded || (e["event"] == "debug" && e["state"] == "waiting" && e["rank"] == 1);
  }
  EXPECT_TRUE(recorded) << "the pause is an event of the job";
}

TEST_P(RealDebugger, ABreakpointCallPausesItsRankUnderTheDebugger) {
  REQUIRE(kTorchAndDebugpy, "Debian's python3-torch and python3-debugpy are not installed");
  const std::string root = tempDir();
  CohortProcess job(this->job(root, {"--debug", "none", "--env", "BREAK_ON_RANK=2"}));
  const std::string id = jobIdUnder(root);
  auto rank = pausedRank(root, id, "worker/2");
  ASSERT_TRUE(rank) << job.wait(5s).err;
  EXPECT_EQ((*rank)["reason"], "breakpoint");
  EXPECT_TRUE(contains((*rank)["where"].get<std::string>(), "debug_ddp.py:")) << *rank;
  std::string said;
  auto stop = attach((*rank)["port"].get<int>(), "--evaluate step", &said);
  ASSERT_TRUE(stop.is_object()) << said;
  EXPECT_EQ(stop["file"], example()) << "stopped in the script, not in cohort's hook";
  EXPECT_EQ(stop["function"], "main");
  EXPECT_EQ(stop["value"], "2");
  auto r = job.wait(60s);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(contains(r.err, "BdbQuit")) << r.err;
}

TEST_P(RealDebugger, PostMortemStopsAtTheExceptionAndTheJobFailsWithThatRank) {
  REQUIRE(kTorchAndDebugpy, "Debian's python3-torch and python3-debugpy are not installed");
  const std::string root = tempDir();
  CohortProcess job(this->job(root, {"--post-mortem", "--env", "RAISE_ON_RANK=3"}));
  const std::string id = jobIdUnder(root);
  auto rank = pausedRank(root, id, "worker/3");
  ASSERT_TRUE(rank) << job.wait(5s).err;
  EXPECT_EQ((*rank)["reason"], "exception");
  EXPECT_TRUE(contains((*rank)["where"].get<std::string>(), "RuntimeError: rank 3: a bad batch"))
      << *rank;
  std::string said;
  auto stop = attach((*rank)["port"].get<int>(), "--evaluate step --then disconnect", &said);
  ASSERT_TRUE(stop.is_object()) << said;
  EXPECT_EQ(stop["stopped"], "exception");
  EXPECT_TRUE(contains(stop["exception"].get<std::string>(), "RuntimeError")) << stop;
  EXPECT_EQ(stop["line"], lineOf(example(), "raise RuntimeError"));
  EXPECT_EQ(stop["value"], "2");
  auto r = job.wait(60s);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  const auto result = readJson(onlyJobDir(root) + "/result.json");
  EXPECT_EQ(result["root_cause"]["name"], "worker/3") << result.dump(2);
  EXPECT_TRUE(contains(result["root_cause"]["tail"].dump(), "a bad batch")) << result.dump(2);
}

// ---- without torch: refusals before anything starts, and the timeouts held ----------------

std::string script(const std::string& dir, const std::string& name, const std::string& body) {
  const std::string path = dir + "/" + name;
  std::ofstream(path) << body;
  return path;
}

void expectNothingStarted(const std::string& root) {
  EXPECT_EQ(onlyJobDir(root), "") << "no job directory: nothing was started";
}

TEST(DebugFlags, ARankThatDoesNotExistIsRefused) {
  const std::string root = tempDir();
  const std::string py = script(root, "x.py", "print(1)\n");
  auto r = runCohort({"run", "--data-root", root, "--nodes", "2", "--nproc-per-node", "2",
                      "--debug", "7", "--", "/usr/bin/python3", py});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(contains(r.err,
                       "--debug: debug.ranks: rank 7 does not exist: the job has 4 rank(s), "
                       "0 to 3"))
      << r.err;
  expectNothingStarted(root);
}

TEST(DebugFlags, AnInterpreterWithoutDebugpyIsRefused) {
  const std::string root = tempDir();
  const std::string py = script(root, "x.py", "print(1)\n");
  // An interpreter that sees no site packages, as a bare virtual environment would.
  const std::string bare = script(root, "python3", "#!/bin/sh\nexec /usr/bin/python3 -S \"$@\"\n");
  ASSERT_EQ(::chmod(bare.c_str(), 0755), 0);
  auto r = runCohort({"run", "--data-root", root + "/data", "--debug", "0", "--", bare, py});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "debug: the ranks' interpreter '" + bare + "'")) << r.err;
  EXPECT_TRUE(contains(r.err, "cannot import 'debugpy'")) << r.err;
  expectNothingStarted(root + "/data");
}

TEST(DebugFlags, APortThatCannotBeLeasedIsRefused) {
  REQUIRE(kDebugpy, "Debian's python3-debugpy is not installed");
  const std::string root = tempDir();
  const std::string py = script(root, "x.py", "print(1)\n");
  // Something else listens on the port the job file names.
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
  ASSERT_EQ(::listen(fd, 1), 0);
  socklen_t len = sizeof sa;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
  const int port = ntohs(sa.sin_port);
  const std::string file = script(root, "job.yaml",
                                  "name: d\ncommand: [/usr/bin/python3, x.py]\ndebug: {ranks: [0], "
                                  "port: " +
                                      std::to_string(port) + "}\n");
  auto r = runCohort({"run", "--data-root", root + "/data", "-f", file});
  ::close(fd);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "job.yaml:3: debug.port: no port for rank 0's debugger: port " +
                                  std::to_string(port) + " on 127.0.0.1 is in use"))
      << r.err;
  expectNothingStarted(root + "/data");
}

TEST(DebugFlags, PlanShowsTheDebugWiring) {
  const std::string root = tempDir();
  const std::string py = script(root, "x.py", "print(1)\n");
  auto r = runCohort({"plan", "--data-root", root, "--nproc-per-node", "2", "--debug", "1",
                      "--post-mortem", "--json", "--", "/usr/bin/python3", py});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto plan = nlohmann::json::parse(r.out);
  const auto& ranks = plan["nodes"][0]["ranks"];
  ASSERT_EQ(ranks.size(), 2u);
  EXPECT_TRUE(contains(ranks[0]["argv"].dump(), "files/debug/cohort_debug.py")) << ranks[0];
  EXPECT_EQ(ranks[1]["env"]["COHORT_DEBUG_WAIT"], "1");
  EXPECT_FALSE(ranks[0]["env"].contains("COHORT_DEBUG_WAIT"));
  EXPECT_EQ(ranks[0]["env"]["COHORT_DEBUG_POST_MORTEM"], "1");
  EXPECT_EQ(ranks[0]["env"]["COHORT_DEBUG_LISTEN"], "127.0.0.1:auto");
  expectNothingStarted(root);
}

// A rank waits for a debugger while the other fails at once and max_runtime passes: nothing
// ends the job until the debugger detaches; then fail-fast does, with the failed rank as the
// cause.
TEST(DebugFlags, FailFastAndMaxRuntimeHoldWhileARankIsDebuggedAndApplyAfter) {
  REQUIRE(kDebugpy, "Debian's python3-debugpy is not installed");
  for (const bool fails : {true, false}) {
    SCOPED_TRACE(fails ? "a rank fails" : "max_runtime");
    const std::string root = tempDir();
    const std::string py = script(root, "x.py",
                                  "import os, sys, time\n"
                                  "rank = int(os.environ['COHORT_RANK'])\n"
                                  "if rank == 0 and os.environ.get('FAIL') == '1':\n"
                                  "    sys.exit(3)\n"
                                  "time.sleep(60)\n");
    CohortProcess job({"run", "--data-root", root + "/data", "--framework", "generic",
                       "--nproc-per-node", "2", "--debug", "1", "--max-runtime", "3s", "--env",
                       std::string("FAIL=") + (fails ? "1" : "0"), "--", "/usr/bin/python3", py});
    const std::string data = root + "/data";
    const std::string id = jobIdUnder(data);
    auto rank = pausedRank(data, id, "worker/1");
    ASSERT_TRUE(rank) << job.wait(5s).err;
    const std::string go = root + "/detach";
    std::string said;
    // Attached and holding, like a user reading variables at a breakpoint.
    std::thread client([&] {
      attach((*rank)["port"].get<int>(), "--no-stop --hold-until " + go + " --timeout 50", &said);
    });
    const std::string events = onlyJobDir(data) + "/events.jsonl";
    const bool held = waitFor(
        [&] {
          const std::string text = readText(events);
          return contains(text, "max_runtime 3.0s reached while worker/1 is being debugged") &&
                 (!fails || contains(text, "held while worker/1 is being debugged"));
        },
        30s, 50ms);
    EXPECT_TRUE(held) << readText(events);
    EXPECT_FALSE(processGone(job.pid())) << "the job is still running";
    std::ofstream(go) << "";
    client.join();
    auto r = job.wait(30s);
    if (fails) {
      EXPECT_EQ(r.exit_code, 3) << r.err;
      EXPECT_TRUE(contains(r.err, "worker/0 on node 0 exited with code 3")) << r.err;
    } else {
      EXPECT_EQ(r.exit_code, 124) << r.err;
      EXPECT_TRUE(contains(r.err,
                           "max_runtime 3.0s exceeded (held while ranks were being "
                           "debugged)"))
          << r.err;
    }
    EXPECT_TRUE(contains(r.err, "apply again")) << r.err;
  }
}

TEST(DebugFlags, PdbRunsTheRankOnCohortsTerminal) {
  REQUIRE(kDebugpy, "Debian's python3-debugpy is not installed");
  const std::string root = tempDir();
  const std::string py = script(root, "x.py", "total = 40 + 2\nprint('done', total)\n");
  const std::string out = shellOutput("printf 'next\\np total * 10\\ncont\\n' | " +
                                      std::string(COHORT_BIN) + " run -q --data-root " + root +
                                      " --debug 0 --pdb -- /usr/bin/python3 " + py + " 2>&1");
  EXPECT_TRUE(contains(out, "(Pdb)")) << out;
  EXPECT_TRUE(contains(out, "420")) << out;
  EXPECT_TRUE(contains(out, "done 42")) << out;
}

// pdb's stack is the program's, as `python3 -m pdb` shows it: `where` at a breakpoint() names
// the program's frames and none of cohort's (its bootstrap, runpy, bdb); a post-mortem stops
// once, where the exception was raised, and the rank then ends with it.
TEST(DebugFlags, PdbShowsTheProgramsFramesOnlyAndAPostMortemStopsOnce) {
  REQUIRE(kDebugpy, "Debian's python3-debugpy is not installed");
  const std::string root = tempDir();
  const std::string py = script(root, "x.py",
                                "def inner():\n    x = 41\n    breakpoint()\n    return x + 1\n"
                                "\nprint('got', inner())\n");
  const std::string out = shellOutput("printf 'cont\\nwhere\\ncont\\n' | " +
                                      std::string(COHORT_BIN) + " run -q --data-root " + root +
                                      " --debug 0 --pdb -- /usr/bin/python3 " + py + " 2>&1");
  EXPECT_TRUE(contains(out, py + "(6)<module>()\n-> print('got', inner())")) << out;
  EXPECT_TRUE(contains(out, py + "(4)inner()")) << out;
  EXPECT_FALSE(contains(out, "cohort_debug")) << out;
  EXPECT_FALSE(contains(out, "bdb.py")) << out;
  EXPECT_FALSE(contains(out, "runpy")) << out;
  EXPECT_TRUE(contains(out, "got 42")) << out;

  const std::string root2 = tempDir();
  const std::string crash =
      script(root2, "crash.py", "def f():\n    raise ValueError('boom')\n\nf()\n");
  const std::string pm = shellOutput("printf 'cont\\nwhere\\ncont\\ncont\\ncont\\n' | " +
                                     std::string(COHORT_BIN) + " run -q --data-root " + root2 +
                                     " --debug 0 --pdb --post-mortem -- /usr/bin/python3 " +
                                     crash + " 2>&1; echo exit=$?");
  EXPECT_TRUE(contains(pm, "ValueError: boom")) << pm;
  EXPECT_TRUE(contains(pm, crash + "(2)f()\n-> raise ValueError('boom')")) << pm;
  EXPECT_FALSE(contains(pm, "bdb.py")) << pm;
  EXPECT_FALSE(contains(pm, "cohort_debug")) << pm;
  // Its first line, then the exception: two stops, and the rank ends with code 1.
  size_t prompts = 0;
  for (size_t at = pm.find("(Pdb)"); at != std::string::npos; at = pm.find("(Pdb)", at + 1)) {
    ++prompts;
  }
  EXPECT_EQ(prompts, 3u) << "a stop, `where`'s prompt, the post-mortem's: " << pm;
  EXPECT_TRUE(contains(pm, "exit=1")) << pm;
}

// With launcher: preload, the rank on the terminal is started directly and the others are
// forked from their template.
TEST(DebugFlags, PdbTakesTheTerminalWhileTheOtherPreloadedRanksRun) {
  REQUIRE(kDebugpy, "Debian's python3-debugpy is not installed");
  const std::string root = tempDir();
  const std::string py = script(root, "x.py",
                                "import os\ntotal = 40 + int(os.environ['RANK'])\n"
                                "print('done', total)\n");
  const std::string out = shellOutput(
      "printf 'next\\nnext\\np total * 10\\ncont\\n' | " + std::string(COHORT_BIN) +
      " run -q --data-root " + root +
      " --launcher preload --nproc-per-node 2 --debug 0 --pdb -- /usr/bin/python3 " + py + " 2>&1");
  EXPECT_TRUE(contains(out, "(Pdb)")) << out;
  EXPECT_TRUE(contains(out, "400")) << out;
  EXPECT_TRUE(contains(out, "done 40")) << out;
  EXPECT_TRUE(contains(out, "done 41")) << out;
  const auto plan = readJson(onlyJobDir(root) + "/plan.json");
  EXPECT_FALSE(plan["nodes"][0]["ranks"][0].value("preload", false)) << plan.dump(2);
  EXPECT_TRUE(plan["nodes"][0]["ranks"][1].value("preload", false)) << plan.dump(2);
}

// The IDE, listening first as PyCharm's debug server does (pycharm_server.py, with `flags`); the
// port it listens on, "" when it did not start. It writes what it saw to `out`.
std::string startPyCharmServer(const std::string& root, const std::string& flags,
                               const std::string& out) {
  const std::string port_file = root + "/ide.port";
  if (std::system(("/usr/bin/python3 " + sourceDir() +
                   "/tests/integration/pycharm_server.py --port-file " + port_file +
                   " --evaluate step --timeout 60 " + flags + " > " + out + " 2>&1 &")
                      .c_str()) != 0) {
    return "";
  }
  std::string port;
  waitFor([&] { return !(port = readText(port_file)).empty(); }, 10s, 20ms);
  return port;
}

std::string pydevdPyCharm() {
  const std::string bin = COHORT_BIN;
  return bin.substr(0, bin.rfind('/')) + "/pydevd-pycharm";
}

// PyCharm's flow (docs/debugging.md): the IDE listens, the rank dials it with pydevd-pycharm,
// PyCharm's own debugger (scripts/test installs it into build/pydevd-pycharm). The IDE is
// played by pycharm_server.py, speaking pydevd's protocol as PyCharm does.
TEST(DebugFlags, ARankDialsPyCharmsDebugServerAndStopsAtABreakpointOrItsException) {
  REQUIRE(kDebugpy, "Debian's python3-debugpy is not installed");
  const std::string pydevd = pydevdPyCharm();
  REQUIRE("PYTHONPATH=" + pydevd + " /usr/bin/python3 -c 'import pydevd_pycharm' 2>/dev/null",
          "pydevd-pycharm is not installed (scripts/test puts it in build/pydevd-pycharm)");
  for (const bool post_mortem : {false, true}) {
    SCOPED_TRACE(post_mortem ? "post-mortem" : "breakpoint()");
    const std::string root = tempDir();
    const std::string py = script(
        root, "t.py",
        std::string("import os\nstep = 40 + int(os.environ['COHORT_RANK'])\nif step == 41:\n") +
            (post_mortem ? "    raise RuntimeError('a bad batch')\n"
                         : "    breakpoint()\n    print('resumed', step)\n") +
            "print('done', step)\n");
    const std::string ide_out = root + "/ide.json";
    const std::string port = startPyCharmServer(root, "", ide_out);
    ASSERT_FALSE(port.empty());
    std::ofstream(root + "/job.yaml")
        << "name: pc\nframework: generic\ncommand: [/usr/bin/python3, " << py
        << "]\nroles: {worker: {nodes: 1, procs_per_node: 2}}\nenv: {PYTHONPATH: " << pydevd
        << "}\ndebug: {connect: \"127.0.0.1:" << port
        << "\", ranks: [], post_mortem: " << (post_mortem ? "true" : "false") << "}\n";
    auto r = runCohort({"run", "--data-root", root, "-f", root + "/job.yaml"}, 90s);
    EXPECT_TRUE(contains(r.out, "done 40")) << r.out;
    nlohmann::json stop;
    ASSERT_TRUE(waitFor(
        [&] {
          std::string text = readText(ide_out);
          stop = nlohmann::json::parse(text.substr(0, text.find('\n')), nullptr, false);
          return stop.is_object();
        },
        10s, 50ms))
        << readText(ide_out);
    EXPECT_FALSE(stop.contains("error")) << stop;
    EXPECT_EQ(stop["file"], py) << "stopped in the script, not in cohort's hook: " << stop;
    EXPECT_EQ(stop["value"], "41") << stop;
    if (post_mortem) {
      EXPECT_EQ(stop["stopped"], "exception") << stop;
      EXPECT_EQ(stop["line"], 4) << stop;
      EXPECT_EQ(r.exit_code, 1) << r.err;
      const auto result = readJson(onlyJobDir(root) + "/result.json");
      EXPECT_EQ(result["root_cause"]["name"], "worker/1") << result.dump(2);
    } else {
      EXPECT_EQ(stop["line"], 5) << stop;
      EXPECT_EQ(r.exit_code, 0) << r.err;
      // Connected until the rank ends (the post-mortem rank ends as soon as it is let go).
      EXPECT_TRUE(contains(r.err, "a debugger is attached to worker/1 on node 0")) << r.err;
      EXPECT_TRUE(contains(r.out, "resumed 41")) << r.out;
    }
  }
}

// `cohort debug` without a job id: the one job running on this machine with a paused rank, or
// which of several to name.
TEST(DebugFlags, WithoutAJobIdDebugFindsTheJobWithAPausedRank) {
  REQUIRE(kDebugpy, "Debian's python3-debugpy is not installed");
  const std::string root = tempDir();
  auto none = runCohort({"debug", "--data-root", root});
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_TRUE(contains(none.err, "has a rank waiting for a debugger")) << none.err;
  const std::string py = script(root, "x.py", "print('ran')\n");
  CohortProcess first({"run", "--data-root", root, "--debug", "0", "--", "/usr/bin/python3", py});
  const std::string id = jobIdUnder(root);
  ASSERT_TRUE(pausedRank(root, id, "worker/0")) << "the rank never waited";
  auto found = runCohort({"debug", "--data-root", root, "--json"});
  EXPECT_EQ(found.exit_code, 0) << found.err;
  EXPECT_EQ(nlohmann::json::parse(found.out, nullptr, false).value("job", ""), id) << found.out;
  CohortProcess second({"run", "--data-root", root, "--debug", "0", "--", "/usr/bin/python3", py});
  ASSERT_TRUE(waitFor(
      [&] {
        return contains(runCohort({"debug", "--data-root", root}).err, "several jobs");
      },
      45s, 100ms));
  auto several = runCohort({"debug", "--data-root", root});
  EXPECT_EQ(several.exit_code, 2);
  EXPECT_TRUE(contains(several.err, id)) << several.err;
  ::kill(first.pid(), SIGINT);
  ::kill(second.pid(), SIGINT);
  EXPECT_EQ(first.wait().exit_code, 130);
  EXPECT_EQ(second.wait().exit_code, 130);
}

// A debugger that attached and left between two looks of the agent at the status file (the rank
// writes it; here its own code does) is still told and recorded as having been there.
TEST(DebugFlags, AnAttachThatCameAndWentBetweenTwoLooksIsStillTold) {
  const std::string root = tempDir();
  const std::string py =
      script(root, "x.py",
             "import json, os, time\n"
             "with open(os.environ['COHORT_DEBUG_FILE'], 'w') as f:\n"
             "    json.dump({'state': 'running', 'reason': 'start', 'where': '', 'seq': 3, "
             "'attaches': 1}, f)\n"
             "time.sleep(2.5)\n");
  auto r = runCohort({"run", "--data-root", root, "--debug", "none", "--", "/usr/bin/python3", py});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "a debugger is attached to worker/0 on node 0")) << r.err;
  bool recorded = false;
  for (const auto& e : readJsonLines(onlyJobDir(root) + "/events.jsonl")) {
    recorded = recorded || (e["event"] == "debug" && e["state"] == "attached");
  }
  EXPECT_TRUE(recorded) << "the attach is an event of the job";
}

// A breakpoint() after the IDE detached pauses the rank again, as the first one did (pydevd's
// own hook would skip it).
TEST(DebugFlags, ABreakpointAfterTheDebuggerDetachedPausesTheRankAgain) {
  REQUIRE(kDebugpy, "Debian's python3-debugpy is not installed");
  const std::string root = tempDir();
  const std::string py = script(root, "loop.py",
                                "import time\nfor i in range(2):\n    breakpoint()\n"
                                "    time.sleep(0.2)\nprint('done', i)\n");
  CohortProcess job({"run", "--data-root", root, "--debug", "none", "--", "/usr/bin/python3", py});
  const std::string id = jobIdUnder(root);
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE(round);
    auto rank = pausedRank(root, id, "worker/0");
    ASSERT_TRUE(rank) << job.wait(5s).err;
    EXPECT_EQ((*rank)["reason"], "breakpoint");
    std::string said;
    auto stop = attach((*rank)["port"].get<int>(), "--evaluate i --then disconnect", &said);
    ASSERT_TRUE(stop.is_object()) << said;
    EXPECT_EQ(stop["value"], std::to_string(round));
  }
  auto r = job.wait(60s);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "done 1")) << r.out;
}

// The debugger shows the program's frames only, as for `python3 -m debugpy script.py`: none of
// cohort's bootstrap (nor runpy's that it runs the program with), with justMyCode and without.
TEST(DebugFlags, TheDebuggersStackHoldsOnlyTheProgramsFrames) {
  REQUIRE(kDebugpy, "Debian's python3-debugpy is not installed");
  const std::string root = tempDir();
  const std::string py = script(root, "deep.py",
                                "import time\ndef step(i):\n    breakpoint()\n    return i\n"
                                "for i in range(2):\n    step(i)\n    time.sleep(0.2)\n"
                                "print('done', i)\n");
  CohortProcess job({"run", "--data-root", root, "--debug", "none", "--", "/usr/bin/python3", py});
  const std::string id = jobIdUnder(root);
  for (const int just_my_code : {1, 0}) {
    SCOPED_TRACE("justMyCode " + std::to_string(just_my_code));
    auto rank = pausedRank(root, id, "worker/0");
    ASSERT_TRUE(rank) << job.wait(5s).err;
    std::string said;
    auto stop = attach((*rank)["port"].get<int>(),
                       "--evaluate i --then disconnect --just-my-code " +
                           std::to_string(just_my_code),
                       &said);
    ASSERT_TRUE(stop.is_object()) << said;
    EXPECT_EQ(stop["stack"], nlohmann::json::array({py + ":step", py + ":<module>"})) << stop;
  }
  auto r = job.wait(60s);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "done 1")) << r.out;
}

// One stop per post-mortem: Continue after the exception was shown lets the rank end (with its
// exception's exit code) rather than stopping again on the SystemExit that ends it.
TEST(DebugFlags, ContinueAfterAPostMortemStopEndsTheRankWithoutAnotherStop) {
  REQUIRE(kDebugpy, "Debian's python3-debugpy is not installed");
  const std::string root = tempDir();
  const std::string py = script(root, "bad.py",
                                "def load(batch):\n    raise RuntimeError('a bad batch')\n"
                                "load(7)\n");
  CohortProcess job({"run", "--data-root", root, "--debug", "none", "--post-mortem", "--",
                     "/usr/bin/python3", py});
  const std::string id = jobIdUnder(root);
  auto rank = pausedRank(root, id, "worker/0");
  ASSERT_TRUE(rank) << job.wait(5s).err;
  EXPECT_EQ((*rank)["reason"], "exception");
  std::string said;
  auto stop =
      attach((*rank)["port"].get<int>(), "--evaluate batch --then continue --after", &said);
  ASSERT_TRUE(stop.is_object()) << said;
  EXPECT_EQ(stop["stopped"], "exception");
  EXPECT_EQ(stop["value"], "7");
  EXPECT_EQ(stop["stack"], nlohmann::json::array({py + ":load", py + ":<module>"})) << stop;
  EXPECT_NE(stop["after"], "stopped") << "stopped again: " << stop;
  auto r = job.wait(60s);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(contains(r.err, "a bad batch")) << r.err;
}

// The user stops PyCharm's debug server while the rank runs: the breakpoint() calls after it go
// on, and the rank says why once, not at every call.
TEST(DebugFlags, WhenPyCharmGoesAwayTheRankGoesOnAndSaysSoOnce) {
  const std::string pydevd = pydevdPyCharm();
  REQUIRE("PYTHONPATH=" + pydevd + " /usr/bin/python3 -c 'import pydevd_pycharm' 2>/dev/null",
          "pydevd-pycharm is not installed (scripts/test puts it in build/pydevd-pycharm)");
  const std::string root = tempDir();
  const std::string py = script(root, "loop.py",
                                "import time\nstep = 40\nfor i in range(4):\n"
                                "    breakpoint()\n    time.sleep(0.3)\nprint('done', step)\n");
  const std::string port = startPyCharmServer(root, "--leave", root + "/ide.json");
  ASSERT_FALSE(port.empty());
  std::ofstream(root + "/job.yaml")
      << "name: gone\nframework: generic\ncommand: [/usr/bin/python3, " << py
      << "]\nenv: {PYTHONPATH: " << pydevd << "}\ndebug: {connect: \"127.0.0.1:" << port
      << "\", ranks: []}\n";
  auto r = runCohort({"run", "--data-root", root, "-f", root + "/job.yaml"}, 90s);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "done 40")) << r.out;
  EXPECT_TRUE(contains(readText(root + "/ide.json"), "\"stopped\"")) << "the first one stopped";
  const std::string log = readText(onlyJobDir(root) + "/logs/worker-0.log");
  size_t said = 0;
  for (size_t at = 0; (at = log.find("went away", at)) != std::string::npos; ++at) ++said;
  EXPECT_EQ(said, 1u) << log;
}

TEST(DebugFlags, DebugOfAnUnknownJobIsRefused) {
  auto r = runCohort(
      {"debug", "no-such-job", "--data-root", tempDir(), "--server", "http://127.0.0.1:1"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  auto usage = runCohort({"debug", "a", "b"});
  EXPECT_EQ(usage.exit_code, 2) << usage.err;
  auto help = runCohort({"debug", "--help"});
  EXPECT_TRUE(contains(help.out, "--vscode")) << help.out;
  EXPECT_TRUE(contains(runCohort({"--help"}).out, "cohort debug JOB"));
}

}  // namespace
}  // namespace cohort::testing

namespace cohort::testing {
namespace {

// A job of the server: `cohort debug` asks the server, which reads the job's debug events, and
// the VS Code configuration maps the local root to the directory the ranks run in.
TEST(DebugFlags, AServerJobsPausedRanksComeThroughTheServer) {
  REQUIRE(kDebugpy, "Debian's python3-debugpy is not installed");
  std::string why;
  auto server = startServer(&why, {"--cpus", "4"});
  ASSERT_TRUE(server) << why;
  const std::vector<std::string> env = {"COHORT_SERVER=" + server->url(),
                                        "COHORT_TOKEN=" + server->adminToken()};
  const std::string dir = tempDir();
  const std::string py = script(dir, "x.py", "value = 7\nvalue += 0\nprint('ran', value)\n");
  RunResult submitted = CohortProcess({"submit", "--framework", "generic", "--workdir", dir,
                                       "--debug", "0", "--", "/usr/bin/python3", py},
                                      env)
                            .wait();
  ASSERT_EQ(submitted.exit_code, 0) << submitted.err << server->log();
  const std::string id = submitted.out.substr(0, submitted.out.find('\n'));
  nlohmann::json listed;
  const bool waiting = waitFor(
      [&] {
        RunResult r = CohortProcess({"debug", id, "--json"}, env).wait();
        listed = nlohmann::json::parse(r.out, nullptr, false);
        return listed.is_object() && listed["ranks"].size() == 1 &&
               listed["ranks"][0]["state"] == "waiting";
      },
      45s, 200ms);
  ASSERT_TRUE(waiting) << listed << server->log();
  EXPECT_EQ(listed["workdir"], dir);
  EXPECT_EQ(listed["ranks"][0]["name"], "worker/0");
  RunResult told = CohortProcess({"debug", id}, env).wait();
  EXPECT_TRUE(contains(told.err, "cohort debug " + id + " --attach 0")) << told.err;
  // --attach --vscode --write: a launch.json for a local port, then that port carried through
  // the server to the rank (which may listen in a network of its job's own).
  const std::string workspace = tempDir();
  const int local_port = freePort();
  char here[4096];
  ASSERT_TRUE(::getcwd(here, sizeof here));
  ASSERT_EQ(::chdir(workspace.c_str()), 0);  // where it writes .vscode/launch.json
  CohortProcess carrier(
      {"debug", id, "--attach", "--vscode", "--write", "--port", std::to_string(local_port)}, env);
  ASSERT_EQ(::chdir(here), 0);
  nlohmann::json launch;
  ASSERT_TRUE(waitFor(
      [&] {
        launch = nlohmann::json::parse(readText(workspace + "/.vscode/launch.json"), nullptr, false);
        return launch.is_object();
      },
      30s, 50ms));
  EXPECT_EQ(launch["configurations"][0]["pathMappings"][0]["remoteRoot"], dir);
  EXPECT_EQ(launch["configurations"][0]["connect"]["port"], local_port);
  EXPECT_EQ(launch["configurations"][0]["connect"]["host"], "127.0.0.1");
  std::string said;
  const nlohmann::json stopped =
      attach(local_port, "--breakpoint " + py + ":2 --evaluate value --step", &said);
  EXPECT_EQ(stopped["line"], 2) << said << server->log();
  EXPECT_EQ(stopped["value"], "7") << said;
  EXPECT_EQ(stopped["locals"]["value"], "7") << said;
  const bool ran = waitFor(
      [&] { return contains(CohortProcess({"logs", id}, env).wait().out, "ran 7"); }, 30s, 200ms);
  EXPECT_TRUE(ran) << said << server->log();
}

}  // namespace
}  // namespace cohort::testing
