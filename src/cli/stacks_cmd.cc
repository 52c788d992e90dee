#include "cli/stacks_cmd.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "cli/args.h"
#include "cli/client.h"
#include "cli/command.h"
#include "job/layout.h"
#include "util/fd.h"
#include "util/text.h"

namespace cohort::cli {

namespace {

constexpr auto kAnswerWithin = std::chrono::seconds(30);

// The file's modification time in nanoseconds; 0 when it is not there.
int64_t modified(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return 0;
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

// A job of the server: ask (POST .../stacks), then wait until GET has newer ones.
int serverStacks(ApiClient api, const std::string& id) {
  const std::string path = "/v1/jobs/" + urlEncode(id) + "/stacks";
  auto before = api.call("GET", path);
  if (!before) return failWith("stacks", exitCodeFor(before.error()), before.error().message);
  const int64_t then = before->value("time", int64_t{0});
  if (auto asked = api.call("POST", path); !asked) {
    return failWith("stacks", exitCodeFor(asked.error()), asked.error().message);
  }
  const auto until = std::chrono::steady_clock::now() + kAnswerWithin;
  while (std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    auto now = api.call("GET", path);
    if (!now) return failWith("stacks", exitCodeFor(now.error()), now.error().message);
    if (now->value("time", int64_t{0}) != then && (*now)["stacks"].is_string()) {
      std::fputs((*now)["stacks"].get<std::string>().c_str(), stdout);
      return 0;
    }
  }
  return failWith("stacks", kExitFailed, "job " + id + " did not answer within 30s");
}

}  // namespace

// The flags of cohort stacks, each once with its help.
const std::vector<FlagSpec>& stacksFlags() {
  static const std::vector<FlagSpec> kFlags = withServerFlags({
      {"--data-root", "", "DIR",
       "where job directories are (default $COHORT_DATA_ROOT or ~/.cohort)"},
  });
  return kFlags;
}

std::string stacksHelp() {
  return R"(Usage: cohort stacks JOB [--data-root DIR] [--server URL] [--token T]

Prints every rank's Python stack of JOB now, identical stacks once with the ranks that share
them: a job that `cohort run` runs on this machine, or else a job of the server you logged in
to (cohort login). The job goes on. Stacks are read with
py-spy (pip install py-spy; or beside cohort, in venv-tools/), without stopping the ranks; a
rank's state (stopped, in uninterruptible sleep) is shown too. A job that hung with
policy.hang_timeout has its stacks of that moment in its stacks.txt.

)" + flagsHelp(stacksFlags());
}

int cmdStacks(int argc, char** argv) {
  auto args = parseArgs("stacks", argc, argv, stacksFlags());
  if (!args) return failWith("stacks", kExitUsage, args.error().message);
  if (args->positional.size() != 1) {
    return failWith("stacks", kExitUsage, "give one job id (see cohort stacks --help)");
  }
  const std::string id = args->positional[0];
  auto where = locateJob(id, dataRoot(args->get("--data-root")), *args);
  if (!where) return failWith("stacks", kExitUsage, where.error().message);
  if (where->dir.empty()) return serverStacks(ApiClient(where->settings), id);
  const job::Layout layout(where->dir);
  if (::access(layout.resultFile().c_str(), F_OK) == 0) {
    return failWith("stacks", kExitFailed, "job " + id + " has ended" +
                                     (::access(layout.stacksFile().c_str(), F_OK) == 0
                                          ? "; the stacks of its hang are in " + layout.stacksFile()
                                          : std::string()));
  }
  if (::access(layout.coordinatorPidFile().c_str(), F_OK) != 0) {
    return failWith("stacks", kExitFailed,
                    "job " + id + " has no coordinator.pid: it has not started");
  }
  const std::optional<int> pid = runningCoordinator(layout.dir());
  if (!pid) return failWith("stacks", kExitFailed, "job " + id + "'s coordinator is not running");
  const int64_t before = modified(layout.stacksNowFile());
  if (::kill(*pid, SIGUSR1) != 0) {
    return failWith("stacks", kExitFailed, "cannot signal job " + id + "'s coordinator (pid " +
                                     std::to_string(*pid) + "): " + std::strerror(errno));
  }
  const auto until = std::chrono::steady_clock::now() + kAnswerWithin;
  while (std::chrono::steady_clock::now() < until) {
    if (modified(layout.stacksNowFile()) != before) {
      auto text = readFile(layout.stacksNowFile());
      if (!text) return failWith("stacks", kExitFailed, text.error().message);
      std::fputs(text->c_str(), stdout);
      return 0;
    }
    if (::kill(*pid, 0) != 0) {
      return failWith("stacks", kExitFailed, "job " + id + " ended meanwhile");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return failWith("stacks", kExitFailed, "job " + id + " did not answer within 30s");
}

}  // namespace cohort::cli
