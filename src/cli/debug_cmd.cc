#include "cli/debug_cmd.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "agent/channel.h"
#include "cli/args.h"
#include "cli/client.h"
#include "cli/command.h"
#include "job/debug.h"
#include "job/layout.h"
#include "job/state.h"
#include "util/fd.h"
#include "util/json_limits.h"
#include "util/text.h"

namespace cohort::cli {

namespace {

using Json = nlohmann::json;
using Ordered = nlohmann::ordered_json;

constexpr size_t kMaxRecordBytes = 64u << 20;  // events.jsonl, plan.json read for this
const std::string kPrefix = "cohort: ";

// What the server answers for a job of this machine: its debug targets from its events, and its
// workdir from its plan. Both files are written by cohort's own processes.
Result<Json> localTargets(const job::Layout& layout) {
  std::vector<job::Event> events;
  if (auto text = readFile(layout.eventsFile()); text && text->size() <= kMaxRecordBytes) {
    for (const std::string& line : split(*text, '\n')) {
      if (auto e = job::decodeEvent(line)) events.push_back(std::move(*e));
    }
  }
  Json body = Json::parse(job::debugTargetsJson(job::debugTargets(events)), nullptr, false);
  body["workdir"] = "";
  if (auto plan = readFile(layout.planFile());
      plan && plan->size() <= kMaxRecordBytes && checkJsonDepth(*plan)) {
    Json parsed = Json::parse(*plan, nullptr, false);
    if (parsed.is_object() && parsed["workdir"].is_string()) body["workdir"] = parsed["workdir"];
  }
  return body;
}

// Without a job id: the one job of this machine whose ranks wait for a debugger, or have one.
// Errors: kInvalidArgument when there is none, or several (naming them).
Result<std::string> pausedLocalJob(const std::string& data_root) {
  std::vector<std::string> paused;
  for (const std::string& id : runningJobs(data_root)) {
    auto found = localTargets(job::Layout::of(data_root, id));
    if (found && (*found)["ranks"].is_array() && !(*found)["ranks"].empty()) paused.push_back(id);
  }
  if (paused.size() == 1) return paused[0];
  if (paused.empty()) {
    return fail(Code::kInvalidArgument,
                "no job that runs on this machine (" + job::jobsDir(data_root) +
                    ") has a rank waiting for a debugger: give the job id of a server's job, "
                    "or run one with --debug RANKS");
  }
  return fail(Code::kInvalidArgument,
              "several jobs have ranks waiting for a debugger: give one of " + join(paused, ", "));
}

std::string field(const Json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end()) return "";
  return it->is_string() ? it->get<std::string>() : it->dump();
}

void printTable(const std::string& id, const Json& ranks, bool remote, const std::string& server) {
  if (ranks.empty()) {
    std::fprintf(stderr, "cohort debug: no rank of job %s waits for a debugger now\n", id.c_str());
    return;
  }
  std::printf("%-14s %-5s %-9s %-22s %s\n", "RANK", "NODE", "STATE", "ATTACH TO", "WHERE");
  for (const Json& r : ranks) {
    std::string where = field(r, "reason");
    if (!field(r, "where").empty()) where += ": " + field(r, "where");
    std::printf("%-14s %-5s %-9s %-22s %s\n", field(r, "name").c_str(), field(r, "node").c_str(),
                field(r, "state").c_str(), field(r, "address").c_str(), where.c_str());
  }
  (void)server;
  if (remote) {
    // A server's rank listens in its job's own network: only a tunnel through the server
    // reaches it.
    std::fprintf(stderr,
                 "cohort debug: the ranks listen inside the job's network on the server: "
                 "attach through it with cohort debug %s --attach %s (a local port for your "
                 "debugger), or cohort debug %s --attach %s --vscode --write for VS Code "
                 "(docs/debugging.md)\n",
                 id.c_str(), field(ranks[0], "rank").c_str(), id.c_str(),
                 field(ranks[0], "rank").c_str());
    return;
  }
  std::fprintf(stderr,
               "cohort debug: attach VS Code with cohort debug %s --vscode --write, then Run "
               "and Debug '%s%s %s' (docs/debugging.md)\n",
               id.c_str(), kPrefix.c_str(), id.c_str(), field(ranks[0], "name").c_str());
}

// --attach: a port on this machine's loopback whose every connection is carried through the
// server to the rank's debugger (an HTTP Upgrade: server/tunnels.h). Runs until interrupted.
int attachThroughServer(const ServerSettings& settings, const std::string& id, const Json& target,
                        UniqueFd listener, int port) {
  const std::string name = field(target, "name");
  const std::string path = "/v1/jobs/" + urlEncode(id) + "/debug/" + field(target, "rank") +
                           "/tunnel";
  std::fprintf(stderr,
               "cohort debug: %s of job %s: attach your debugger to 127.0.0.1:%d; cohort carries "
               "each connection through %s to the rank (Ctrl-C ends)\n",
               name.c_str(), id.c_str(), port, settings.server.c_str());
  std::printf("127.0.0.1:%d\n", port);
  std::fflush(stdout);
  for (;;) {
    UniqueFd conn(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!conn.valid()) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return failWith("debug", kExitFailed, std::string("accept: ") + std::strerror(errno));
    }
    std::thread([settings, path, name, conn = std::move(conn)]() mutable {
      // A debugger speaks first (DAP's initialize). A connection that closes before saying
      // anything (a port check) never reaches the rank: debugpy lets its rank run on when a
      // client comes and goes.
      pollfd first{conn.get(), POLLIN, 0};
      char byte;
      while (::poll(&first, 1, -1) < 0 && errno == EINTR) {
      }
      if (::recv(conn.get(), &byte, 1, MSG_PEEK) <= 0) return;
      auto tunnel = ApiClient(settings).tunnel(path, "cohort-tunnel");
      if (!tunnel) {
        std::fprintf(stderr, "cohort debug: %s: %s\n", name.c_str(),
                     tunnel.error().message.c_str());
        return;
      }
      std::fprintf(stderr, "cohort debug: a debugger is connected to %s\n", name.c_str());
      auto relayed = (*tunnel)->relay(conn.get(), conn.get());
      std::fprintf(stderr, "cohort debug: the debugger of %s disconnected%s%s\n", name.c_str(),
                   relayed ? "" : ": ", relayed ? "" : relayed.error().message.c_str());
    }).detach();
  }
}

}  // namespace

Ordered vscodeLaunch(const std::string& job_id, const Json& targets, const std::string& local_root,
                     const std::string& remote_root) {
  Ordered configurations = Ordered::array();
  std::vector<std::string> names;
  for (const Json& r : targets) {
    const std::string name = kPrefix + job_id + " " + field(r, "name");
    auto port = parseInt(field(r, "port"));
    Ordered c = {{"name", name},
                 {"type", "debugpy"},
                 {"request", "attach"},
                 {"connect", {{"host", field(r, "host")}, {"port", port ? *port : 0}}},
                 {"justMyCode", true}};
    if (!remote_root.empty()) {
      c["pathMappings"] = Ordered::array(
          {Ordered{{"localRoot", local_root.empty() ? "${workspaceFolder}" : local_root},
                   {"remoteRoot", remote_root}}});
    }
    configurations.push_back(std::move(c));
    names.push_back(name);
  }
  Ordered launch = {{"version", "0.2.0"}, {"configurations", std::move(configurations)}};
  if (names.size() > 1) {
    launch["compounds"] = Ordered::array(
        {Ordered{{"name", kPrefix + job_id + " every paused rank"}, {"configurations", names}}});
  }
  return launch;
}

Result<Ordered> mergeLaunch(const std::string& existing, const Ordered& ours,
                            const std::string& job_id,
                            const std::function<bool(const std::string&)>& still_runs) {
  if (existing.size() > (4u << 20) || !checkJsonDepth(existing)) {
    return fail(Code::kInvalidArgument, "it is not a launch.json cohort can read");
  }
  Ordered old = Ordered::parse(existing, nullptr, false, /*ignore_comments=*/true);
  if (old.is_discarded() || !old.is_object()) {
    return fail(Code::kInvalidArgument, "it is not a JSON object");
  }
  // The job a configuration is cohort's for ("cohort: JOB worker/1"), or "" for the user's own.
  auto jobOf = [](const Ordered& c) -> std::string {
    if (!c.is_object() || !c.contains("name") || !c["name"].is_string()) return "";
    const std::string name = c["name"].get<std::string>();
    if (!startsWith(name, kPrefix)) return "";
    const std::string rest = name.substr(kPrefix.size());
    return rest.substr(0, rest.find(' '));
  };
  std::map<std::string, bool> runs;  // each other job is asked about once
  auto keep = [&](const char* list, const Ordered& add) {
    Ordered out = Ordered::array();
    if (old.contains(list) && old[list].is_array()) {
      for (const Ordered& c : old[list]) {
        const std::string job = jobOf(c);
        if (job == job_id) continue;  // replaced by ours
        if (!job.empty()) {
          auto [at, asked] = runs.try_emplace(job, false);
          if (asked) at->second = still_runs(job);
          if (!at->second) continue;  // a job that ended: nothing to attach to any more
        }
        out.push_back(c);
      }
    }
    if (add.is_array()) {
      for (const Ordered& c : add) out.push_back(c);
    }
    return out;
  };
  old["version"] = old.value("version", std::string("0.2.0"));
  old["configurations"] = keep("configurations", ours["configurations"]);
  Ordered compounds = keep("compounds", ours.contains("compounds") ? ours["compounds"] : Ordered());
  if (!compounds.empty()) {
    old["compounds"] = std::move(compounds);
  } else {
    old.erase("compounds");
  }
  return old;
}

// The flags of cohort debug, each once with its help.
const std::vector<FlagSpec>& debugFlags() {
  static const std::vector<FlagSpec> kFlags = withServerFlags({
      {"--attach", "", "",
       "a job of the server: listen on 127.0.0.1 here (the port is printed on stdout) and carry "
       "each debugger's connection through the server to RANK, the second argument (default: "
       "the one paused rank); runs until Ctrl-C. With --vscode, the configuration points at "
       "that port"},
      {"--port", "", "N", "with --attach: the local port (default: a free one)"},
      {"--json", "", "",
       "the ranks as JSON: {\"job\", \"ranks\": [{name, rank, node, state, reason, where, host, "
       "port, address, since}], \"workdir\"}"},
      {"--vscode", "", "",
       "print a VS Code launch.json with one attach configuration per rank (\"cohort: JOB "
       "worker/1\"; path mappings for a job of the server)"},
      {"--write", "", "",
       "with --vscode: write it into .vscode/launch.json here, replacing this job's cohort "
       "configurations, dropping those of jobs that have ended, and keeping every other one"},
      {"--local-root", "", "DIR",
       "with --vscode, a job of the server: the local copy of the job's workdir (default "
       "${workspaceFolder})"},
      {"--data-root", "", "DIR",
       "where job directories are (default $COHORT_DATA_ROOT or ~/.cohort)"},
  });
  return kFlags;
}

std::string debugHelp() {
  return R"(Usage: cohort debug [JOB] [--json] [--vscode [--write] [--local-root DIR]]
                      [--data-root DIR] [--server URL] [--token T]
       cohort debug JOB --attach [RANK] [--port N] [--vscode [--write]]

Lists the ranks of JOB that wait for a debugger, or have one attached, and where to attach:
a job that `cohort run` runs on this machine, or else a job of the server you logged in to
(cohort login). Without JOB: the one job running on this machine that has such ranks. Ranks pause in a job with debug: (or cohort run --debug RANKS): the chosen
ranks at their start, any rank at a breakpoint(), and with post_mortem any rank at an exception
nothing caught. Each listens on 127.0.0.1 of its node only. A rank of a server's job listens
inside the job's own network: --attach opens a port on this machine and carries each
connection to it through the server, as your account (docs/debugging.md).

)" + flagsHelp(debugFlags());
}

int cmdDebug(int argc, char** argv) {
  auto args = parseArgs("debug", argc, argv, debugFlags());
  if (!args) return failWith("debug", kExitUsage, args.error().message);
  const bool attach = args->has("--attach");
  if (args->positional.size() > (attach ? 2u : 1u)) {
    return failWith("debug", kExitUsage,
                    attach ? "give a job id and at most one rank (see cohort debug --help)"
                           : "give one job id (see cohort debug --help)");
  }
  if (args->has("--port") && !attach) {
    return failWith("debug", kExitUsage, "--port is the local port of --attach: give both");
  }
  if (attach && args->positional.empty()) {
    return failWith("debug", kExitUsage, "--attach: give the job id (cohort ps lists your jobs)");
  }
  if (args->has("--write") && !args->has("--vscode")) {
    return failWith("debug", kExitUsage, "--write writes the --vscode configurations: give both");
  }
  std::string id;
  if (args->positional.empty()) {
    auto paused = pausedLocalJob(dataRoot(args->get("--data-root")));
    if (!paused) return failWith("debug", kExitUsage, paused.error().message);
    id = *paused;
  } else {
    id = args->positional[0];
  }
  auto where = locateJob(id, dataRoot(args->get("--data-root")), *args);
  if (!where) return failWith("debug", kExitUsage, where.error().message);
  const bool remote = where->dir.empty();
  const std::string server = where->settings.server;
  Result<Json> found =
      remote ? ApiClient(where->settings).call("GET", "/v1/jobs/" + urlEncode(id) + "/debug")
             : localTargets(job::Layout(where->dir));
  if (!found) return failWith("debug", exitCodeFor(found.error()), found.error().message);
  const Json ranks =
      found->contains("ranks") && (*found)["ranks"].is_array() ? (*found)["ranks"] : Json::array();
  const std::string workdir = field(*found, "workdir");
  Json shown = ranks;  // where the IDE connects: the ranks, or --attach's local port
  UniqueFd listener;
  int local_port = 0;
  Json target;
  if (attach) {
    if (!remote) {
      return failWith("debug", kExitUsage,
                      "job " + id + " runs on this machine: attach to the address " +
                          "cohort debug " + id + " lists (--attach is for a job of the server)");
    }
    const std::string wanted = args->positional.size() > 1 ? args->positional[1] : "";
    for (const Json& r : ranks) {
      if (wanted.empty() ? ranks.size() == 1 : field(r, "rank") == wanted) target = r;
    }
    if (target.is_null()) {
      std::vector<std::string> listed;
      for (const Json& r : ranks) listed.push_back(field(r, "rank") + " (" + field(r, "name") + ")");
      if (ranks.empty()) {
        return failWith("debug", kExitFailed, "no rank of job " + id + " waits for a debugger now");
      }
      return failWith("debug", kExitUsage,
                      (wanted.empty() ? "several ranks wait for a debugger: give one of "
                                      : "rank " + wanted + " does not wait for a debugger: give one of ") +
                          join(listed, ", "));
    }
    auto port = parseInt(args->get("--port", "0"));
    if (!port || *port < 0 || *port > 65535) {
      return failWith("debug", kExitUsage, "--port: expected a port number");
    }
    auto listened = agent::listenTcp("127.0.0.1", *port);
    if (!listened) return failWith("debug", kExitFailed, "--port: " + listened.error().message);
    listener = std::move(listened->first);
    ::fcntl(listener.get(), F_SETFL, ::fcntl(listener.get(), F_GETFL) & ~O_NONBLOCK);  // accept waits
    local_port = listened->second;
    target["host"] = "127.0.0.1";
    target["port"] = local_port;
    target["address"] = "127.0.0.1:" + std::to_string(local_port);
    shown = Json::array({target});
  }
  if (args->has("--vscode")) {
    const Ordered launch =
        vscodeLaunch(id, shown, args->get("--local-root"), remote ? workdir : "");
    if (!args->has("--write")) {
      std::printf("%s\n", launch.dump(2).c_str());
      if (attach) return attachThroughServer(where->settings, id, target, std::move(listener), local_port);
      return 0;
    }
    const std::string path = ".vscode/launch.json";
    Ordered merged = launch;
    // Another job's configurations stay while it runs: on this machine, or on the server (one
    // the server cannot be asked about stays too).
    const std::string data_root = dataRoot(args->get("--data-root"));
    auto still_runs = [&](const std::string& other) {
      if (other.find('/') != std::string::npos || other[0] == '.') return false;
      const std::string dir = job::Layout::of(data_root, other).dir();
      if (::access(dir.c_str(), F_OK) == 0) return runningCoordinator(dir).has_value();
      auto settings = resolveServerSettings(*args);
      if (!settings) return false;
      auto job = ApiClient(*settings).call("GET", "/v1/jobs/" + urlEncode(other));
      if (!job) return job.error().code != Code::kNotFound;
      return !job::isFinalState(field(*job, "state"));
    };
    if (auto existing = readFile(path)) {
      auto combined = mergeLaunch(*existing, launch, id, still_runs);
      if (!combined) {
        return failWith("debug", kExitFailed, "'" + path + "': " + combined.error().message +
                                         "; left as it is (cohort debug --vscode prints ours)");
      }
      merged = std::move(*combined);
    }
    if (auto made = makeDirs(".vscode"); !made) {
      return failWith("debug", kExitFailed, made.error().message);
    }
    if (auto written = writeFileAtomic(path, merged.dump(2) + "\n", false); !written) {
      return failWith("debug", kExitFailed, written.error().message);
    }
    std::fprintf(stderr, "cohort debug: %zu configuration(s) for job %s in %s\n", shown.size(),
                 id.c_str(), path.c_str());
    if (attach) return attachThroughServer(where->settings, id, target, std::move(listener), local_port);
    return 0;
  }
  if (attach) return attachThroughServer(where->settings, id, target, std::move(listener), local_port);
  if (args->has("--json")) {
    Ordered out = {{"job", id}, {"ranks", ranks}, {"workdir", workdir}};
    std::printf("%s\n", out.dump(-1, ' ', false, Ordered::error_handler_t::replace).c_str());
    return 0;
  }
  printTable(id, ranks, remote, server);
  return 0;
}

}  // namespace cohort::cli
