// The hosts of `cohort server --backend ssh`: what each has for the gang scheduler (its slots as
// CPUs, else its CPUs; its memory; its NVIDIA GPUs) and whether it can be reached now. A host
// that cannot be reached gets nothing placed on it (its capacity is none, its name says why)
// until it answers again: such hosts are asked again every 30 s, and a job's hosts are asked
// again as soon as the job ended, so that the next job is not placed on a host that just dropped
// off. Asking is one ssh per host (the server's --ssh command), all at once, on a thread of the
// pool's own. Thread-safe.
#pragma once

#include <condition_variable>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "backends/ssh_hosts.h"
#include "sched/scheduler.h"

namespace cohort::backends {

class SshHostPool {
 public:
  SshHostPool(std::vector<SshHost> hosts, std::vector<std::string> ssh);
  ~SshHostPool();
  SshHostPool(const SshHostPool&) = delete;
  SshHostPool& operator=(const SshHostPool&) = delete;

  // Asks every host now (waits for the answers, at most about 30 s), then starts the thread that
  // asks again. Returns a line per host for the server's log: what it has, or why it is not used.
  std::vector<std::string> start();

  // The scheduler's nodes, one per host in the order given; a host that cannot be reached has
  // no capacity.
  std::vector<sched::Node> nodes() const;
  // Whether nodes() changed since the last call (a host dropped off or came back).
  bool changed();
  // Asks these hosts again, soon (a job on them ended).
  void recheck(const std::vector<std::string>& names);

  const std::vector<SshHost>& hosts() const { return hosts_; }
  const std::vector<std::string>& ssh() const { return ssh_; }
  // The index of the host named `name`; -1 when none is.
  int indexOf(const std::string& name) const;

 private:
  struct State {
    bool up = false;
    HostCapacity capacity;  // the last answer's
    std::string why;        // why it is not up
  };
  // Asks `which` (indices) and records the answers; logs each host that went down or came up.
  void ask(const std::vector<int>& which);
  void loop();

  const std::vector<SshHost> hosts_;
  const std::vector<std::string> ssh_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<State> state_;
  std::set<int> recheck_;
  bool changed_ = false;
  bool quit_ = false;
  std::thread thread_;
};

}  // namespace cohort::backends
