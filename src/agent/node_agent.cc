#include "agent/node_agent.h"

#include <dirent.h>
#include <fcntl.h>
#include <malloc.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>
#include <thread>

#include "agent/channel.h"
#include "agent/rank_output.h"
#include "agent/staging.h"
#include "plan/plan.h"
#include "proc/event_loop.h"
#include "proc/spawn.h"
#include "util/text.h"

extern char** environ;

namespace cohort::agent {

namespace {

constexpr size_t kTailLines = 20;

// Processes whose parent is `parent`, from /proc.
std::vector<pid_t> childrenOf(pid_t parent) {
  std::vector<pid_t> out;
  DIR* dir = ::opendir("/proc");
  if (!dir) return out;
  while (dirent* entry = ::readdir(dir)) {
    if (entry->d_name[0] < '0' || entry->d_name[0] > '9') continue;
    auto stat = readFile(std::string("/proc/") + entry->d_name + "/stat");
    if (!stat) continue;
    // pid (comm) state ppid ...; comm may contain spaces and parentheses.
    size_t close = stat->rfind(')');
    if (close == std::string::npos) continue;
    int ppid = 0;
    char state = 0;
    if (std::sscanf(stat->c_str() + close + 1, " %c %d", &state, &ppid) == 2 && ppid == parent) {
      out.push_back(static_cast<pid_t>(std::atoi(entry->d_name)));
    }
  }
  ::closedir(dir);
  return out;
}

struct Rank {
  plan::RankPlan plan;
  proc::Child child;
  UniqueFd out;  // read end of the rank's output pipe
  std::optional<RankOutput> output;
  bool running = false;
  bool signalled = false;  // cohort sent it a signal
};

class Agent {
 public:
  Agent(const AgentOptions& options, proc::EventLoop& loop, proc::SignalFd signals,
        proc::Timer grace, Channel channel)
      : options_(options),
        loop_(loop),
        signals_(std::move(signals)),
        grace_(std::move(grace)),
        channel_(std::move(channel)),
        console_(STDOUT_FILENO) {}
  ~Agent() {
    if (staging_.joinable()) staging_.join();
  }

  Result<int> run() {
    COHORT_TRY(channel_.send({{"type", "hello"},
                              {"node", options_.node},
                              {"secret", options_.secret},
                              {"pid", ::getpid()}}));
    COHORT_TRY(loop_.add(channel_.fd(), EPOLLIN, [this](uint32_t) { onChannel(); }));
    COHORT_TRY(loop_.add(signals_.fd(), EPOLLIN, [this](uint32_t) { onSignal(); }));
    COHORT_TRY(loop_.add(grace_.fd(), EPOLLIN, [this](uint32_t) { onGraceOver(); }));
    COHORT_TRY(loop_.run());
    return lost_coordinator_ ? 1 : 0;
  }

 private:
  void onChannel() {
    auto messages = channel_.receive();
    if (!messages) {
      std::fprintf(stderr, "cohort exec: node %d: %s\n", options_.node,
                   messages.error().message.c_str());
      lostCoordinator();
      return;
    }
    for (const Message& m : *messages) handle(m);
    if (trim_after_message_) {
      // Give the parsed plan's memory back: an agent of 256 ranks would otherwise keep several
      // MiB of freed heap for the whole job.
      messages->clear();
      ::malloc_trim(0);
      trim_after_message_ = false;
    }
    if (channel_.closed()) lostCoordinator();
  }

  void handle(const Message& m) {
    std::string type = m.value("type", "");
    if (type == "plan") {
      auto node = plan::nodeFromJson(m.at("node").dump());
      if (!node) {
        std::fprintf(stderr, "cohort exec: %s\n", node.error().message.c_str());
        lostCoordinator();
        return;
      }
      node_ = std::move(*node);
      workdir_ = m.value("workdir", ".");
      trim_after_message_ = true;  // the plan's JSON was large and is garbage now
    } else if (type == "stage") {
      startStaging();
    } else if (type == "start") {
      startAttempt(m.value("attempt", 0));
    } else if (type == "stop") {
      stopRanks(Millis(m.value("grace_ms", int64_t{30000})));
    } else if (type == "exit") {
      exitWhenDone(Millis(m.value("grace_ms", int64_t{3000})));
    }
  }

  // The agent's one way out: quit now if nothing runs; otherwise stop the ranks (SIGTERM, then
  // SIGKILL after `grace`) and quit when the last is gone (attemptOver), or when staging, which
  // cannot be interrupted, is over (onStaged).
  void exitWhenDone(Millis grace) {
    exiting_ = true;
    if (staging_.joinable()) return;
    if (running_count_ == 0) {
      loop_.quit();
    } else {
      stopRanks(grace);
    }
  }

  // Staging runs on its own thread (copies block); its end wakes the loop through an eventfd.
  void startStaging() {
    staged_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    (void)loop_.add(staged_.get(), EPOLLIN, [this](uint32_t) { onStaged(); });
    staging_ = std::thread([this] {
      staging_result_ = stageInputs(node_);
      uint64_t one = 1;
      ssize_t n = ::write(staged_.get(), &one, sizeof one);
      (void)n;
    });
  }

  void onStaged() {
    staging_.join();
    loop_.remove(staged_.get());
    staged_.reset();
    if (!staging_result_) {
      (void)channel_.send({{"type", "stage_failed"}, {"error", staging_result_.error().message}});
    } else {
      (void)channel_.send({{"type", "staged"},
                           {"files", staging_result_->files},
                           {"bytes", staging_result_->bytes},
                           {"seconds", staging_result_->seconds}});
    }
    if (exiting_) loop_.quit();
  }

  void lostCoordinator() {
    if (lost_coordinator_) return;
    lost_coordinator_ = true;
    loop_.remove(channel_.fd());
    exitWhenDone(Millis(3000));
  }

  void onSignal() {
    while (int sig = signals_.next()) {
      if (sig == SIGTERM || sig == SIGINT || sig == SIGHUP) {
        // Our parent (cohort run or the cluster's launcher) is going away: end the job here;
        // a second signal kills at once.
        exitWhenDone(stopping_ ? Millis(0) : Millis(3000));
      }
    }
  }

  std::vector<std::string> rankEnvironment(const plan::RankPlan& r) const {
    std::vector<std::string> env;
    std::vector<std::pair<std::string, std::string>> overrides = r.env;
    for (const char* name : plan::kRestartCountVars) {
      for (auto& kv : overrides) {
        if (kv.first == name) kv.second = std::to_string(attempt_);
      }
    }
    for (char** e = environ; *e; ++e) {
      std::string_view entry(*e);
      std::string_view key = entry.substr(0, entry.find('='));
      if (key == "COHORT_JOB_SECRET") continue;
      bool overridden = false;
      for (const auto& kv : overrides) overridden = overridden || kv.first == key;
      if (!overridden) env.emplace_back(entry);
    }
    for (const auto& [k, v] : overrides) env.push_back(k + "=" + v);
    return env;
  }

  void startAttempt(int attempt) {
    attempt_ = attempt;
    stopping_ = false;
    ranks_.clear();
    ranks_.resize(node_.ranks.size());
    for (size_t i = 0; i < node_.ranks.size(); ++i) {
      Rank& rank = ranks_[i];
      rank.plan = node_.ranks[i];
      std::string error;
      if (auto r = spawnRank(i); !r) error = r.error().message;
      if (!error.empty()) {
        // The rank never ran: report it as exit code 127, the shell's "could not execute".
        report(rank, proc::ExitStatus{127, 0}, nowUnixNanos(), error);
      }
    }
    (void)channel_.send({{"type", "started"},
                         {"attempt", attempt_},
                         {"count", running_count_},
                         {"time", nowUnixNanos()}});
    if (running_count_ == 0) attemptOver();
  }

  Result<void> spawnRank(size_t index) {
    Rank& rank = ranks_[index];
    const plan::RankPlan& p = rank.plan;
    std::string prefix = "[" + p.name + " node" + std::to_string(p.node) + "] ";
    COHORT_ASSIGN(RankOutput output, RankOutput::open(p.log_file, prefix,
                                                      p.console ? &console_ : nullptr));
    rank.output = std::move(output);
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) < 0) return failErrno("pipe2");
    UniqueFd write_end(fds[1]);
    rank.out.reset(fds[0]);
    ::fcntl(fds[0], F_SETPIPE_SZ, 1 << 20);
    COHORT_TRY(setNonBlocking(fds[0]));
    proc::SpawnRequest req;
    req.argv = p.argv;
    req.env = rankEnvironment(p);
    req.cwd = workdir_;
    req.stdout_fd = write_end.get();
    auto child = proc::spawn(req);
    if (!child) {
      return withContext(child.error(), p.name);
    }
    rank.child = std::move(*child);
    rank.running = true;
    ++running_count_;
    COHORT_TRY(loop_.add(rank.child.pidfd.get(), EPOLLIN, [this, index](uint32_t) { onExit(index); }));
    COHORT_TRY(loop_.add(rank.out.get(), EPOLLIN, [this, index](uint32_t) { pump(index, 16); }));
    return {};
  }

  // Reads up to `max_reads` chunks of a rank's output. Returns false at end of output.
  bool pump(size_t index, int max_reads) {
    Rank& rank = ranks_[index];
    if (!rank.out.valid()) return false;
    static char buf[256 * 1024];
    for (int i = 0; i < max_reads; ++i) {
      ssize_t n = ::read(rank.out.get(), buf, sizeof buf);
      if (n > 0) {
        rank.output->consume(buf, static_cast<size_t>(n));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN) return true;
      loop_.remove(rank.out.get());  // end of output (or a read error)
      rank.out.reset();
      rank.output->finish();
      return false;
    }
    return true;
  }

  void onExit(size_t index) {
    int64_t time = nowUnixNanos();
    Rank& rank = ranks_[index];
    loop_.remove(rank.child.pidfd.get());
    auto status = proc::reap(rank.child.pidfd.get());
    rank.child.pidfd.reset();
    rank.running = false;
    --running_count_;
    // All the rank wrote is in the pipe now: read it up to EAGAIN (an escaped child may keep
    // the pipe open) or end of output.
    pump(index, std::numeric_limits<int>::max());
    rank.output->finish();
    report(rank, status ? *status : proc::ExitStatus{1, 0}, time, "");
    if (running_count_ == 0) attemptOver();
  }

  void report(const Rank& rank, const proc::ExitStatus& status, int64_t time,
              const std::string& error) {
    std::vector<std::string> tail = rank.output ? rank.output->tail(kTailLines)
                                                : std::vector<std::string>{};
    if (!error.empty()) tail.push_back("cohort: " + error);
    (void)channel_.send({{"type", "exited"},
                         {"attempt", attempt_},
                         {"rank", rank.plan.rank},
                         {"code", status.code},
                         {"signal", status.signal},
                         {"by_cohort", rank.signalled},
                         {"time", time},
                         {"tail", tail},
                         {"error", error}});
  }

  void stopRanks(Millis grace) {
    if (!stopping_ || grace.count() == 0) {
      int sig = grace.count() == 0 ? SIGKILL : SIGTERM;
      for (Rank& rank : ranks_) {
        if (!rank.running) continue;
        rank.signalled = true;
        ::kill(-rank.child.pid, sig);
      }
      if (sig == SIGTERM) grace_.arm(grace);
    }
    stopping_ = true;
  }

  void onGraceOver() {
    grace_.consume();
    for (Rank& rank : ranks_) {
      if (rank.running) ::kill(-rank.child.pid, SIGKILL);
    }
  }

  // Every rank has exited: kill what they left behind (escaped children came back to us as the
  // subreaper), close their pipes, and tell the coordinator.
  void attemptOver() {
    grace_.disarm();
    for (int round = 0; round < 100; ++round) {
      std::vector<pid_t> orphans = childrenOf(::getpid());
      if (orphans.empty()) break;
      for (pid_t pid : orphans) {
        ::kill(-pid, SIGKILL);
        ::kill(pid, SIGKILL);
      }
      for (pid_t pid : orphans) ::waitpid(pid, nullptr, 0);
    }
    for (size_t i = 0; i < ranks_.size(); ++i) {
      if (ranks_[i].out.valid()) {
        pump(i, std::numeric_limits<int>::max());
        if (ranks_[i].out.valid()) loop_.remove(ranks_[i].out.get());
        ranks_[i].out.reset();
      }
    }
    (void)channel_.send({{"type", "idle"}, {"attempt", attempt_}, {"time", nowUnixNanos()}});
    if (exiting_) loop_.quit();
  }

  const AgentOptions& options_;
  proc::EventLoop& loop_;
  proc::SignalFd signals_;
  proc::Timer grace_;
  Channel channel_;
  Console console_;
  plan::NodePlan node_;
  std::string workdir_;
  std::vector<Rank> ranks_;
  std::thread staging_;
  UniqueFd staged_;
  Result<StagingResult> staging_result_ = StagingResult{};
  int attempt_ = 0;
  int running_count_ = 0;
  bool stopping_ = false;
  bool exiting_ = false;
  bool trim_after_message_ = false;
  bool lost_coordinator_ = false;
};

}  // namespace

Result<int> runNodeAgent(const AgentOptions& options) {
  // Signals first, before the console thread exists, so no thread can take them.
  COHORT_ASSIGN(proc::SignalFd signals, proc::SignalFd::create({SIGTERM, SIGINT, SIGHUP}));
  ::signal(SIGPIPE, SIG_IGN);
  if (::prctl(PR_SET_CHILD_SUBREAPER, 1) < 0) return failErrno("prctl(PR_SET_CHILD_SUBREAPER)");
  COHORT_ASSIGN(UniqueFd sock, connectTcp(options.coordinator_addr, options.coordinator_port,
                                          Millis(30000)));
  COHORT_ASSIGN(auto loop, proc::EventLoop::create());
  COHORT_ASSIGN(proc::Timer grace, proc::Timer::create());
  Agent agent(options, *loop, std::move(signals), std::move(grace), Channel(std::move(sock)));
  return agent.run();
}

}  // namespace cohort::agent
