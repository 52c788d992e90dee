#include "backends/local.h"

#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "agent/channel.h"
#include "agent/node_agent.h"
#include "util/text.h"

extern char** environ;

namespace cohort::backends {

Result<std::string> checkCommand(const spec::JobSpec& s, const ProgramFinder& find) {
  auto absolute = [](const std::string& path, const std::string& base) {
    if (!path.empty() && path[0] == '/') return path;
    if (path.empty() || path == ".") return base;
    return base + "/" + path;
  };
  std::string workdir = absolute(s.workdir, s.base_dir);
  struct stat st{};
  if (::stat(workdir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    std::string note = s.workdir.empty() || s.workdir[0] == '/'
                           ? std::string()
                           : " ('" + s.workdir + "' is relative to " + s.base_dir + ")";
    return fail(Code::kInvalidArgument, "workdir: '" + workdir + "' is not a directory" + note);
  }
  std::string path = std::getenv("PATH") ? std::getenv("PATH") : "/usr/bin:/bin";
  for (const auto& [k, v] : s.env) {
    if (k == "PATH") path = v;
  }
  auto program =
      find ? find(s.command[0], path, workdir) : proc::findProgram(s.command[0], path, workdir);
  if (!program) return withContext(program.error(), "command");
  std::string base = program->substr(program->rfind('/') + 1);
  if (startsWith(base, "python") && s.command.size() > 1 && s.command[1][0] != '-') {
    std::string script = absolute(s.command[1], workdir);
    if (::access(script.c_str(), R_OK) != 0) {
      return fail(Code::kInvalidArgument, "command: script '" + s.command[1] +
                                              "' not found in the workdir '" + workdir + "'");
    }
  }
  return workdir;
}

std::string selfExecutable() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "cohort";
  return std::string(buf, static_cast<size_t>(n));
}

std::vector<int> localGpus() {
  std::vector<int> gpus;
  if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES")) {
    for (const std::string& id : split(visible, ',')) {
      if (auto n = parseInt(id); n && *n >= 0) gpus.push_back(*n);
    }
    return gpus;
  }
  // Asking a shell for nvidia-smi costs milliseconds on every job start: look for it first.
  const char* path = std::getenv("PATH");
  if (!proc::findProgram("nvidia-smi", path ? path : "/usr/bin:/bin", "/")) return gpus;
  FILE* smi = ::popen("nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null", "r");
  if (!smi) return gpus;
  char line[64];
  while (std::fgets(line, sizeof line, smi)) {
    std::string text(line);
    while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
    if (auto n = parseInt(text)) gpus.push_back(*n);
  }
  if (::pclose(smi) != 0) gpus.clear();  // no driver, or no nvidia-smi
  return gpus;
}

int localCpus() {
  int cores = 0;
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  if (::sched_getaffinity(0, sizeof(cpus), &cpus) == 0) cores = CPU_COUNT(&cpus);
  if (const char* given = std::getenv("COHORT_CPUS")) {
    char* end = nullptr;
    const double share = std::strtod(given, &end);
    if (end != given && *end == '\0' && share > 0 && share < 1e6) {
      const int whole = static_cast<int>(std::ceil(share));
      if (cores == 0 || whole < cores) cores = whole;
    }
  }
  return cores;
}

std::vector<std::string> sharedDevices() {
  std::vector<std::string> found;
  for (const char* name : {"davinci_manager", "devmm_svm", "hisi_hdc", "infiniband", "kfd", "dri"}) {
    const std::string path = std::string("/dev/") + name;
    if (::access(path.c_str(), F_OK) == 0) found.push_back(path);
  }
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/dev", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("davinci", 0) == 0 && name.size() > 7 &&
        name.find_first_not_of("0123456789", 7) == std::string::npos) {
      found.push_back(entry.path().string());
    }
  }
  return found;
}

std::vector<std::string> localAscendAddresses() {
  std::vector<std::string> ips;
  auto text = readFile("/etc/hccn.conf");
  if (!text) return ips;
  for (const std::string& line : split(*text, '\n')) {
    // address_3=192.98.92.131
    if (!startsWith(line, "address_")) continue;
    auto eq = line.find('=');
    auto index = parseInt(line.substr(8, eq == std::string::npos ? 0 : eq - 8));
    if (!index || *index < 0 || *index > 64) continue;
    if (ips.size() <= static_cast<size_t>(*index)) ips.resize(*index + 1);
    ips[*index] = line.substr(eq + 1);
  }
  return ips;
}

Result<void> LocalLauncher::launch(int nodes, const agent::Dial& dial) {
  // An agent is a copy of this process that runs the agent: that saves each agent the start of
  // the cohort binary (its dynamic loading is most of a launch's fixed cost). Only a process
  // with one thread can be copied, and a copy talks to its coordinator over a socket pair that
  // the coordinator adopts; otherwise each is `cohort exec`, which dials.
  const bool copy = proc::threadCount() == 1 && dial.adopt;
  proc::SpawnRequest req;
  req.death_signal = SIGTERM;  // the agent stops its ranks, then exits
  if (share_stdin_) req.stdin_fd = STDIN_FILENO;
  if (!copy) {
    for (char** e = environ; *e; ++e) {
      if (!startsWith(*e, "COHORT_JOB_SECRET=")) req.env.emplace_back(*e);
    }
    req.env.push_back("COHORT_JOB_SECRET=" + dial.secret);  // not in argv, where `ps` shows it
  }
  agent::AgentOptions options;
  options.coordinator_addr = dial.addr;
  options.coordinator_port = dial.port;
  options.secret = dial.secret;
  // The forked agents share one cgroup watchdog (a fork and an exit each, else), where the
  // machine gives cohort cgroups; the agents tell it theirs.
  if (copy) {
    auto base = proc::cgroupBase();
    auto watchdog = base ? proc::CgroupWatchdog::start() : tl::unexpected(base.error());
    if (watchdog) {
      watchdog_ = std::move(*watchdog);
      options.watchdog_fd = watchdog_->fd();
      options.cgroup_base = *base;
    }
  }
  auto run_agent = [&options] {
    // What `ps -e` and top show (pgrep -P <coordinator> -x finds it: a rank may take any name).
    ::prctl(PR_SET_NAME, ("cohort node " + std::to_string(options.node)).c_str());
    return agent::agentMain(options);
  };
  auto start = [&](int node) -> Result<proc::Child> {
    options.node = node;
    const int netns = network_ ? network_->nodeNamespace(node) : -1;
    if (!copy) {
      req.argv = {exe_,
                  "exec",
                  "--coordinator",
                  dial.addr + ":" + std::to_string(dial.port),
                  "--node",
                  std::to_string(node)};
      req.fd3 = netns;
      if (netns >= 0) req.argv.insert(req.argv.end(), {"--netns-fd", "3"});
      return proc::spawn(req);
    }
    // No dialling, and no TCP to cross.
    COHORT_ASSIGN(auto ends, agent::socketPair());
    options.coordinator_fd = ends.second.get();
    options.netns_fd = netns;
    COHORT_ASSIGN(proc::Child child,
                  proc::forkCall(req.death_signal, req.stdin_fd, run_agent,
                                 {ends.second.get(), options.watchdog_fd, netns}));
    dial.adopt(std::move(ends.first));
    return child;
  };
  for (int node = 0; node < nodes; ++node) {
    auto child = start(node);
    if (!child) {
      if (watchdog_) watchdog_->detach();
      return withContext(child.error(), "node " + std::to_string(node));
    }
    agents_.push_back(std::move(*child));
  }
  if (watchdog_) watchdog_->detach();  // the agents hold the pipe now
  return {};
}

void LocalLauncher::abandon(int node) {
  // Agents are launched in node order. Its cgroup's watchdog then kills its ranks.
  if (node >= 0 && static_cast<size_t>(node) < agents_.size() && agents_[node].pidfd.valid()) {
    ::kill(agents_[node].pid, SIGKILL);
  }
}

void LocalLauncher::reap(Millis deadline) {
  auto until = std::chrono::steady_clock::now() + deadline;
  for (proc::Child& agent : agents_) {
    if (!agent.pidfd.valid()) continue;
    auto left = std::chrono::duration_cast<Millis>(until - std::chrono::steady_clock::now());
    pollfd p{agent.pidfd.get(), POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(std::max<int64_t>(left.count(), 0))) <= 0) {
      ::kill(agent.pid, SIGKILL);
    }
    (void)proc::reap(agent.pidfd.get());
    agent.pidfd.reset();
  }
  agents_.clear();
  // With the agents gone it has nothing left to hear: it exits at once, or after killing and
  // removing the cgroups of an agent that could not.
  if (watchdog_) watchdog_->reap(Millis(15000));
  watchdog_.reset();
}

}  // namespace cohort::backends
