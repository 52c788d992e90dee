#include "backends/ssh_pool.h"

#include <chrono>
#include <cstdio>

#include "backends/ssh.h"
#include "util/text.h"

namespace cohort::backends {

namespace {
constexpr std::chrono::seconds kAskDownEvery{30};
}  // namespace

SshHostPool::SshHostPool(std::vector<SshHost> hosts, std::vector<std::string> ssh)
    : hosts_(std::move(hosts)), ssh_(std::move(ssh)), state_(hosts_.size()) {}

SshHostPool::~SshHostPool() {
  {
    std::lock_guard lock(mu_);
    quit_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::vector<std::string> SshHostPool::start() {
  std::vector<int> all;
  for (size_t i = 0; i < hosts_.size(); ++i) all.push_back(static_cast<int>(i));
  ask(all);
  std::vector<std::string> lines;
  {
    std::lock_guard lock(mu_);
    changed_ = false;
    for (size_t i = 0; i < hosts_.size(); ++i) {
      const State& s = state_[i];
      if (s.up) {
        lines.push_back("host " + hosts_[i].name + ": " +
                        sched::describe({s.capacity.cpus * 1000, s.capacity.memory_bytes,
                                         s.capacity.gpus}) +
                        (hosts_[i].slots > 0 ? " (its slots=" + std::to_string(hosts_[i].slots) +
                                                   " as CPUs)"
                                             : ""));
      } else {
        lines.push_back(s.why + "; no job is placed on it until it answers (asked again every " +
                        std::to_string(kAskDownEvery.count()) + "s)");
      }
    }
  }
  thread_ = std::thread([this] { loop(); });
  return lines;
}

void SshHostPool::ask(const std::vector<int>& which) {
  if (which.empty()) return;
  std::vector<SshHost> hosts;
  for (int i : which) hosts.push_back(hosts_[i]);
  const std::vector<Result<HostCapacity>> answers = askCapacity(hosts, ssh_);
  std::lock_guard lock(mu_);
  for (size_t k = 0; k < which.size(); ++k) {
    State& s = state_[which[k]];
    const bool was_up = s.up;
    if (answers[k]) {
      s.up = true;
      s.capacity = *answers[k];
      s.why.clear();
    } else {
      s.up = false;
      s.why = answers[k].error().message;
    }
    if (was_up != s.up) {
      changed_ = true;
      if (thread_.joinable()) {
        if (s.up) {
          std::fprintf(stderr, "cohort server: host %s answers again: jobs are placed on it\n",
                       hosts_[which[k]].name.c_str());
        } else {
          std::fprintf(stderr, "cohort server: %s; no job is placed on it until it answers\n",
                       s.why.c_str());
        }
      }
    }
  }
}

void SshHostPool::loop() {
  auto next_down = std::chrono::steady_clock::now() + kAskDownEvery;
  std::unique_lock lock(mu_);
  while (!quit_) {
    cv_.wait_until(lock, next_down, [&] { return quit_ || !recheck_.empty(); });
    if (quit_) break;
    std::set<int> which = std::move(recheck_);
    recheck_.clear();
    if (std::chrono::steady_clock::now() >= next_down) {
      for (size_t i = 0; i < state_.size(); ++i) {
        if (!state_[i].up) which.insert(static_cast<int>(i));
      }
      next_down = std::chrono::steady_clock::now() + kAskDownEvery;
    }
    lock.unlock();
    ask(std::vector<int>(which.begin(), which.end()));
    lock.lock();
  }
}

std::vector<sched::Node> SshHostPool::nodes() const {
  std::lock_guard lock(mu_);
  std::vector<sched::Node> nodes;
  for (size_t i = 0; i < hosts_.size(); ++i) {
    const State& s = state_[i];
    if (s.up) {
      nodes.push_back({hosts_[i].name,
                       {s.capacity.cpus * 1000, s.capacity.memory_bytes, s.capacity.gpus}});
    } else {
      nodes.push_back({hosts_[i].name + " (cannot be reached)", {}});
    }
  }
  return nodes;
}

bool SshHostPool::changed() {
  std::lock_guard lock(mu_);
  return std::exchange(changed_, false);
}

void SshHostPool::recheck(const std::vector<std::string>& names) {
  {
    std::lock_guard lock(mu_);
    for (const std::string& name : names) {
      if (int i = indexOf(name); i >= 0) recheck_.insert(i);
    }
  }
  cv_.notify_all();
}

int SshHostPool::indexOf(const std::string& name) const {
  for (size_t i = 0; i < hosts_.size(); ++i) {
    if (hosts_[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

}  // namespace cohort::backends
