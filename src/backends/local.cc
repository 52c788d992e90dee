#include "backends/local.h"

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>

extern char** environ;

namespace cohort::backends {

std::string selfExecutable() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "cohort";
  return std::string(buf, static_cast<size_t>(n));
}

Result<void> LocalLauncher::launch(int node, const std::string& addr, int port,
                                   const std::string& secret) {
  proc::SpawnRequest req;
  req.argv = {exe_, "exec", "--coordinator", addr + ":" + std::to_string(port), "--node",
              std::to_string(node)};
  for (char** e = environ; *e; ++e) {
    if (!startsWith(*e, "COHORT_JOB_SECRET=")) req.env.emplace_back(*e);
  }
  req.env.push_back("COHORT_JOB_SECRET=" + secret);  // not in argv, where `ps` would show it
  req.death_signal = SIGTERM;  // the agent stops its ranks, then exits
  COHORT_ASSIGN(proc::Child child, proc::spawn(req));
  agents_.push_back(std::move(child));
  return {};
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
}

}  // namespace cohort::backends
