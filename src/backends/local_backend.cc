#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <map>
#include <set>

#include "backends/backend.h"
#include "backends/ssh_pool.h"
#include "job/layout.h"
#include "proc/spawn.h"
#include "spec/job_spec.h"
#include "util/fd.h"
#include "util/json_reader.h"
#include "util/text.h"

extern char** environ;

namespace cohort::backends {

namespace {

using Json = nlohmann::json;

// A process's state letter and start time (clock ticks since boot) from /proc/<pid>/stat.
struct ProcStat {
  char state = '?';
  int64_t start = 0;
};

std::optional<ProcStat> procStat(int64_t pid) {
  if (pid <= 0 || pid > std::numeric_limits<pid_t>::max()) return std::nullopt;
  const std::vector<std::string> fields = proc::statFields(static_cast<pid_t>(pid));
  if (fields.size() < 20) return std::nullopt;
  ProcStat st;
  st.state = fields[0].empty() ? '?' : fields[0][0];
  st.start = std::strtoll(fields[19].c_str(), nullptr, 10);
  return st;
}

// The handle: the coordinator's pid and its start time (so that a reused pid is never taken for
// it), the GPUs it was given, and on hosts over SSH the hosts its nodes run on, by name (the
// server's host list may change across a restart).
struct Handle {
  int64_t pid = 0;
  int64_t start = 0;
  std::vector<int> gpus;
  std::vector<std::string> hosts;
};

std::string encode(const Handle& h) {
  Json j{{"pid", h.pid}, {"start", h.start}, {"gpus", h.gpus}};
  if (!h.hosts.empty()) j["hosts"] = h.hosts;
  return j.dump();
}

std::optional<Handle> decode(const std::string& text) {
  Json j = Json::parse(text, nullptr, false);
  if (!j.is_object()) return std::nullopt;
  auto pid = j.find("pid");
  auto start = j.find("start");
  auto gpus = j.find("gpus");
  if (pid == j.end() || !pid->is_number_integer() || start == j.end() ||
      !start->is_number_integer()) {
    return std::nullopt;
  }
  Handle h{pid->get<int64_t>(), start->get<int64_t>(), {}};
  if (gpus != j.end() && gpus->is_array()) {
    for (const Json& g : *gpus) {
      if (g.is_number_integer()) h.gpus.push_back(g.get<int>());
    }
  }
  h.hosts = stringItems(j.value("hosts", Json::array()));
  if (h.pid <= 0) return std::nullopt;
  return h;
}

bool alive(const Handle& h) {
  auto st = procStat(h.pid);
  return st && st->start == h.start && st->state != 'Z';
}

class LocalBackend : public Backend {
 public:
  LocalBackend(std::string cohort_bin, spec::Backend nodes, std::shared_ptr<SshHostPool> hosts)
      : cohort_bin_(std::move(cohort_bin)), nodes_(nodes), hosts_(std::move(hosts)) {}

  const char* name() const override { return spec::backendName(nodes_); }

  Result<std::string> submit(const JobLaunch& l) override {
    const job::Layout layout(l.job_dir);
    std::vector<std::string> args = {cohort_bin_,  "run",       "--job-id", l.job_id,
                                     "--data-root", l.data_root, "-f",       layout.specFile()};
    if (nodes_ == spec::Backend::kSlurm) {
      args.push_back("--backend");
      args.push_back("slurm");
    }
    std::vector<std::string> on_hosts;  // the placement's hosts, node i on the i-th
    if (nodes_ == spec::Backend::kSsh) {
      if (!hosts_ || l.nodes.empty()) return fail(Code::kInternal, "no hosts placed");
      for (int n : l.nodes) {
        if (n < 0 || static_cast<size_t>(n) >= hosts_->hosts().size()) {
          return fail(Code::kInternal, "a node past the hosts");
        }
        on_hosts.push_back(hosts_->hosts()[n].name);
      }
      // Names only: the job file says how many processes each node runs.
      args.insert(args.end(), {"--hosts", join(on_hosts, ","), "--ssh", join(hosts_->ssh(), " ")});
    }
    if (l.isolate) args.push_back("--isolate");
    if (l.report) args.push_back("--report");
    if (!l.job_network.empty() && nodes_ == spec::Backend::kLocal) {
      args.push_back("--job-network");
      args.push_back(l.job_network);
    }
    for (const std::string& root : l.input_roots) {
      args.push_back("--input-root");
      args.push_back(root);
    }
    if (l.uid >= 0) {
      args.push_back("--run-as");
      args.push_back(std::to_string(l.uid) + ":" + std::to_string(l.gid));
    }
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);

    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    const std::string console = layout.consoleLog();
    posix_spawn_file_actions_addopen(&actions, 1, console.c_str(), O_WRONLY | O_CREAT | O_APPEND,
                                     0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    sigset_t none, defaults;
    sigemptyset(&none);
    sigemptyset(&defaults);
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGCHLD}) sigaddset(&defaults, sig);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &defaults);
    // Its own session: the job survives the server (and the server's terminal).
    posix_spawnattr_setflags(&attr,
                             POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    // The job's own GPUs, and no others: the coordinator hands them to its ranks.
    std::vector<std::string> env_strings;
    for (char** e = environ; *e; ++e) {
      if (!startsWith(*e, "CUDA_VISIBLE_DEVICES=")) env_strings.emplace_back(*e);
    }
    std::vector<std::string> ids;
    for (int gpu : l.gpus) ids.push_back(std::to_string(gpu));
    env_strings.push_back("CUDA_VISIBLE_DEVICES=" + join(ids, ","));
    if (!l.environments.empty()) {
      std::erase_if(env_strings,
                    [](const std::string& e) { return startsWith(e, "COHORT_ENVS="); });
      env_strings.push_back("COHORT_ENVS=" + l.environments);
    }
    std::vector<char*> envp;
    for (std::string& e : env_strings) envp.push_back(e.data());
    envp.push_back(nullptr);
    pid_t pid = 0;
    int err = ::posix_spawn(&pid, argv[0], &actions, &attr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
    if (err != 0) return failErrno("start the coordinator '" + args[0] + "'", err);
    children_.insert(pid);
    auto st = procStat(pid);
    return encode(Handle{pid, st ? st->start : 0, l.gpus, on_hosts});
  }

  Found recover(const std::string& handle) override {
    auto h = decode(handle);
    if (!h || !alive(*h)) return {};
    Found found{true, h->gpus, {}};
    for (const std::string& name : h->hosts) {
      const int n = hosts_ ? hosts_->indexOf(name) : -1;
      if (n >= 0) found.nodes.push_back(n);
    }
    return found;
  }

  bool running(const std::string& handle) override {
    auto h = decode(handle);
    if (h && alive(*h)) return true;
    // A host of an ended job may be why it ended: asked again before it gets the next job.
    if (h && hosts_ && !h->hosts.empty()) hosts_->recheck(h->hosts);
    if (h && children_.erase(static_cast<pid_t>(h->pid))) {
      int status = 0;
      if (::waitpid(static_cast<pid_t>(h->pid), &status, WNOHANG) > 0) {
        ended_[handle] = WIFSIGNALED(status)
                             ? "it was killed by " + spec::stopSignalName(WTERMSIG(status))
                             : "it exited with code " + std::to_string(WEXITSTATUS(status)) +
                                   " (its console.log says why)";
      }
    }
    return false;
  }

  std::string endWords(const std::string& handle) const override {
    auto it = ended_.find(handle);
    return it == ended_.end() ? "" : it->second;
  }

  void cancel(const std::string& handle) override {
    auto h = decode(handle);
    if (h && alive(*h)) ::kill(static_cast<pid_t>(h->pid), SIGTERM);
  }

  // The coordinator takes SIGUSR1 as the request (agent/coordinator.cc).
  bool requestStacks(const std::string& handle) override {
    auto h = decode(handle);
    return h && alive(*h) && ::kill(static_cast<pid_t>(h->pid), SIGUSR1) == 0;
  }

  std::string describe(const std::string& handle) const override {
    auto h = decode(handle);
    if (!h) return "no coordinator";
    return "coordinator pid " + std::to_string(h->pid) +
           (h->hosts.empty() ? "" : " (hosts " + join(h->hosts, ", ") + ")");
  }

  std::vector<sched::Node> nodes() const override {
    return hosts_ ? hosts_->nodes() : std::vector<sched::Node>{};
  }

  bool nodesChanged() override { return hosts_ && hosts_->changed(); }

 private:
  std::string cohort_bin_;
  spec::Backend nodes_;
  std::shared_ptr<SshHostPool> hosts_;
  std::set<pid_t> children_;  // spawned by this server: reaped by it
  std::map<std::string, std::string> ended_;  // handle -> how its coordinator ended (endWords)
};

}  // namespace

std::unique_ptr<Backend> makeLocalBackend(std::string cohort_bin, spec::Backend nodes,
                                          std::shared_ptr<SshHostPool> hosts) {
  return std::make_unique<LocalBackend>(std::move(cohort_bin), nodes, std::move(hosts));
}

}  // namespace cohort::backends
