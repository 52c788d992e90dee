// Helpers for tests that run the real `cohort` binary as a user would: start it with arguments,
// collect its stdout, stderr and exit code under a deadline, find the job directory, and check
// that processes are gone. No sleeps to synchronise: waitFor() polls a condition with a deadline.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace cohort::testing {

using namespace std::chrono_literals;

struct RunResult {
  int exit_code = -1;  // -1: killed by the harness at its deadline
  std::string out;
  std::string err;
};

// A running `cohort` process with captured output. `extra_env` ("KEY=VALUE") is added to the
// test's environment, replacing a variable of the same name ("KEY=" sets it empty). Its stdin is
// `stdin_fd` (-1: the test's).
class CohortProcess {
 public:
  explicit CohortProcess(const std::vector<std::string>& args,
                         const std::vector<std::string>& extra_env = {}, int stdin_fd = -1);
  ~CohortProcess();
  pid_t pid() const { return pid_; }
  // Waits for it to end; kills it (and fails the result) after `deadline`.
  RunResult wait(std::chrono::milliseconds deadline = 60s);

 private:
  pid_t pid_ = -1;
  int out_ = -1;
  int err_ = -1;
  bool done_ = false;
};

RunResult runCohort(const std::vector<std::string>& args,
                    std::chrono::milliseconds deadline = 60s);

// A `cohort server` listening on 127.0.0.1 (a port the kernel picks) over a fresh data root;
// SIGTERM stops it when this object goes. Its stdout and stderr go to files, read by tests.
class ServerProcess {
 public:
  ~ServerProcess();
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  const std::string& url() const { return url_; }                  // "http://127.0.0.1:PORT"
  const std::string& adminToken() const { return admin_token_; }  // printed on the first start
  const std::string& dataRoot() const { return data_root_; }
  pid_t pid() const { return pid_; }
  std::string log() const;  // what it printed so far, stdout then stderr

 private:
  friend std::unique_ptr<ServerProcess> startServer(std::string* why,
                                                    const std::vector<std::string>& flags);
  ServerProcess() = default;
  pid_t pid_ = -1;
  std::string url_, admin_token_, data_root_, out_path_, err_path_;
};

// Starts a server (with `flags` after the listen address and data root) and waits (up to 30 s)
// until it printed its URL and admin token (only its URL when `flags` name a --data-root: a
// restart over a data root that has its accounts). Returns null when it did not come up, with what it
// printed in `why`.
std::unique_ptr<ServerProcess> startServer(std::string* why = nullptr,
                                           const std::vector<std::string>& flags = {});

std::string testRank();   // path of cohort-test-rank
std::string sourceDir();  // the project's source tree

// The preset environments scripts/test builds into the build folder's envs/ (`cohort env build
// tensorflow mindspore`, with COHORT_ENVS there). True when preset `name` is built and `module`
// imports in it; COHORT_ENVS is then set for the cohort processes this test starts.
bool usePresetEnvironment(const std::string& name, const std::string& module);

// A fresh directory under /tmp.
std::string tempDir();

// The only job directory under `data_root`/jobs ("" when there is none); with `prefix`, the
// only one whose name starts with it.
std::string onlyJobDir(const std::string& data_root, const std::string& prefix = "");

bool waitFor(const std::function<bool()>& condition, std::chrono::milliseconds deadline,
             std::chrono::milliseconds every = 5ms);

// Pids listed one per line in `path` (missing file: none).
std::vector<pid_t> readPids(const std::string& path);

// True when `pid` no longer runs (gone, or a zombie).
bool processGone(pid_t pid);

std::string readText(const std::string& path);

// The TCP port that process `pid` listens on (a coordinator's control channel), from /proc; 0 if
// none.
int listeningPort(pid_t pid);
// A port of 127.0.0.1 that nothing listens on now (for a command's --port).
int freePort();
// What `sh -c command` printed on stdout.
std::string shellOutput(const std::string& command);
// Whether `sh -c check` succeeds (quietly): what a test needs is installed.
bool have(const std::string& check);

// Skips the test, saying `why`, unless `check` succeeds.
#define REQUIRE(check, why)                                   \
  do {                                                        \
    if (!::cohort::testing::have(check)) GTEST_SKIP() << why; \
  } while (0)

inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}
nlohmann::json readJson(const std::string& path);
std::vector<nlohmann::json> readJsonLines(const std::string& path);

}  // namespace cohort::testing
