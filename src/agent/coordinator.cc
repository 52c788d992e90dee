#include "agent/coordinator.h"

#include <fcntl.h>
#include <malloc.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <memory>

#include "agent/channel.h"
#include "storage/copy.h"
#include "proc/event_loop.h"

namespace cohort::agent {

const char* jobStateName(JobState state) {
  switch (state) {
    case JobState::kSucceeded: return "succeeded";
    case JobState::kFailed: return "failed";
    case JobState::kStopped: return "stopped";
  }
  return "failed";
}

namespace {

// What ends the current attempt.
enum class Ending {
  kNone, kSucceeded, kFailed, kStopped, kTimedOut, kLost, kStagingFailed, kOutputFailed
};

class Coordinator {
 public:
  Coordinator(const plan::Plan& plan, AgentLauncher& launcher, const CoordinatorOptions& options,
              proc::EventLoop& loop, proc::SignalFd signals, proc::Timer runtime,
              proc::Timer deadline, std::string secret)
      : plan_(plan),
        launcher_(launcher),
        options_(options),
        loop_(loop),
        signals_(std::move(signals)),
        runtime_(std::move(runtime)),
        deadline_(std::move(deadline)),
        secret_(std::move(secret)),
        agents_(plan.nodes.size()) {
    for (const plan::NodePlan& node : plan_.nodes) {
      for (const plan::RankPlan& r : node.ranks) {
        ranks_[r.rank] = &r;
        if (r.key) ++key_total_;
      }
    }
  }

  Result<JobOutcome> run() {
    events_.reset(::open((plan_.job_dir + "/events.jsonl").c_str(),
                         O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644));
    if (!events_.valid()) return failErrno("open '" + plan_.job_dir + "/events.jsonl'");
    COHORT_ASSIGN(auto listener, listenTcp(options_.listen_addr));
    listener_ = std::move(listener.first);
    started_ = std::chrono::steady_clock::now();
    event({{"event", "state"}, {"state", "starting"}});
    COHORT_TRY(loop_.add(listener_.get(), EPOLLIN, [this](uint32_t) { onAccept(); }));
    COHORT_TRY(loop_.add(signals_.fd(), EPOLLIN, [this](uint32_t) { onSignal(); }));
    COHORT_TRY(loop_.add(runtime_.fd(), EPOLLIN, [this](uint32_t) { onRuntimeOver(); }));
    COHORT_TRY(loop_.add(deadline_.fd(), EPOLLIN, [this](uint32_t) { onDeadline(); }));
    deadline_.arm(options_.connect_timeout);
    for (size_t n = 0; n < plan_.nodes.size(); ++n) {
      auto launched = launcher_.launch(static_cast<int>(n), options_.listen_addr, listener.second,
                                       secret_);
      if (!launched) {
        finish(Ending::kLost, "could not start node " + std::to_string(n) + "'s agent: " +
                                  launched.error().message);
        break;
      }
    }
    COHORT_TRY(loop_.run());
    launcher_.reap(Millis(5000));
    copyOutputs();
    return outcome();
  }

 private:
  struct Agent {
    std::unique_ptr<Channel> channel;
    bool connected = false;
    bool idle = true;
  };

  void say(const std::string& line) {
    if (options_.progress) std::fprintf(stderr, "cohort: %s\n", line.c_str());
  }

  double elapsed() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  }

  void event(Message m) {
    int64_t now = nowUnixNanos();
    Message line = {{"time", isoTime(now)}, {"t", now}};
    line.update(m);
    (void)writeAll(events_.get(), line.dump() + "\n");
  }

  void onAccept() {
    for (;;) {
      int fd = ::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) return;
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      auto channel = std::make_shared<Channel>(UniqueFd(fd));
      // Until it says hello with the secret, a connection is nobody's.
      (void)loop_.add(fd, EPOLLIN, [this, channel](uint32_t) { onHello(channel); });
    }
  }

  void onHello(const std::shared_ptr<Channel>& channel) {
    auto messages = channel->receive();
    int fd = channel->fd();
    if (!messages || channel->closed() || messages->empty()) {
      if (!messages || channel->closed()) loop_.remove(fd);
      return;
    }
    const Message& hello = messages->front();
    int node = hello.value("node", -1);
    if (hello.value("type", "") != "hello" || !secretsEqual(hello.value("secret", ""), secret_) ||
        node < 0 || node >= static_cast<int>(agents_.size()) || agents_[node].connected) {
      loop_.remove(fd);  // not one of ours: drop it without a word
      return;
    }
    loop_.remove(fd);
    Agent& agent = agents_[node];
    agent.channel = std::make_unique<Channel>(UniqueFd(dup(fd)));
    agent.connected = true;
    (void)loop_.add(agent.channel->fd(), EPOLLIN, [this, node](uint32_t) { onAgent(node); });
    (void)agent.channel->send({{"type", "plan"},
                               {"workdir", plan_.workdir},
                               {"node", Message::parse(plan::nodeToJson(plan_.nodes[node]))}});
    for (size_t i = 1; i < messages->size(); ++i) handle(node, (*messages)[i]);
    if (++connected_ == static_cast<int>(agents_.size()) && ending_ == Ending::kNone) {
      ::malloc_trim(0);  // the nodes' plans were sent; their JSON is garbage now
      // Every node stages its inputs; ranks start only when all have (the start barrier).
      deadline_.disarm();
      event({{"event", "state"}, {"state", "staging"}});
      broadcast({{"type", "stage"}});
    }
  }

  void broadcast(const Message& m) {
    for (Agent& agent : agents_) {
      if (agent.connected) (void)agent.channel->send(m);
    }
  }

  void startAttempt() {
    key_ok_ = 0;
    started_nodes_ = 0;
    started_processes_ = 0;
    attempt_started_ = std::chrono::steady_clock::now();
    for (Agent& agent : agents_) {
      agent.idle = false;
    }
    event({{"event", "state"}, {"state", "running"}, {"attempt", attempt_}});
    broadcast({{"type", "start"}, {"attempt", attempt_}});
  }

  void onAgent(int node) {
    Agent& agent = agents_[node];
    auto messages = agent.channel->receive();
    if (messages) {
      for (const Message& m : *messages) handle(node, m);
    }
    if (!messages || agent.channel->closed()) {
      loop_.remove(agent.channel->fd());
      agent.connected = false;
      agent.idle = true;  // it cannot run or report ranks any more
      --connected_;
      if (finishing_) {
        if (connected_ == 0) loop_.quit();
        return;
      }
      beginStop(Ending::kLost, "node " + std::to_string(node) + "'s agent was lost");
    }
  }

  void handle(int node, const Message& m) {
    std::string type = m.value("type", "");
    if (m.value("attempt", attempt_) != attempt_) return;
    if (type == "started") {
      started_processes_ += m.value("count", 0);
      if (++started_nodes_ == static_cast<int>(agents_.size())) {
        double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                                    attempt_started_).count();
        char buf[160];
        std::snprintf(buf, sizeof buf, "%d process(es) started on %zu node(s) in %.3fs",
                      started_processes_, agents_.size(), secs);
        say(buf);
      }
    } else if (type == "staged") {
      onStaged(node, m);
    } else if (type == "stage_failed") {
      std::string why = "staging on node " + std::to_string(node) + " failed: " +
                        m.value("error", std::string("unknown error"));
      event({{"event", "stage_failed"}, {"node", node}, {"error", m.value("error", "")}});
      no_restart_ = true;
      if (ending_ == Ending::kNone) {
        say(why);
        finish(Ending::kStagingFailed, why);
      }
    } else if (type == "exited") {
      onRankExit(node, m);
    } else if (type == "idle") {
      agents_[node].idle = true;
      maybeAttemptOver();
    }
  }

  void onStaged(int node, const Message& m) {
    double seconds = m.value("seconds", 0.0);
    int64_t files = m.value("files", int64_t{0});
    int64_t bytes = m.value("bytes", int64_t{0});
    event({{"event", "staged"}, {"node", node}, {"seconds", seconds}, {"files", files},
           {"bytes", bytes}});
    if (!plan_.nodes[node].inputs.empty()) {
      char buf[160];
      std::snprintf(buf, sizeof buf, "node %d staged %lld file(s), %.1f MiB in %.2fs", node,
                    static_cast<long long>(files), static_cast<double>(bytes) / (1 << 20),
                    seconds);
      say(buf);
    }
    if (++staged_nodes_ == static_cast<int>(agents_.size()) && ending_ == Ending::kNone) {
      if (plan_.max_runtime_ms > 0) runtime_.arm(Millis(plan_.max_runtime_ms));
      startAttempt();
    }
  }

  void onRankExit(int node, const Message& m) {
    int rank = m.value("rank", -1);
    auto it = ranks_.find(rank);
    if (it == ranks_.end()) return;
    const plan::RankPlan& r = *it->second;
    RankExit e;
    e.attempt = attempt_;
    e.name = r.name;
    e.role = r.role;
    e.role_rank = r.role_rank;
    e.rank = rank;
    e.node = node;
    e.code = m.value("code", 0);
    e.signal = m.value("signal", 0);
    e.by_cohort = m.value("by_cohort", false);
    e.time_ns = m.value("time", int64_t{0});
    e.tail = m.value("tail", std::vector<std::string>{});
    e.log_file = r.log_file;
    exits_.push_back(e);
    event({{"event", "rank_exit"},
           {"attempt", attempt_},
           {"name", e.name},
           {"role", e.role},
           {"role_rank", e.role_rank},
           {"rank", e.rank},
           {"node", e.node},
           {"code", e.code},
           {"signal", e.signal},
           {"by_cohort", e.by_cohort},
           {"exit_time", isoTime(e.time_ns)}});
    if (ending_ != Ending::kNone) return;
    if (e.failed() && !e.by_cohort) {
      beginStop(Ending::kFailed, e.label() + " " + e.describe());
    } else if (r.key && ++key_ok_ == key_total_) {
      beginStop(Ending::kSucceeded, "every rank of the key role(s) exited 0");
    }
  }

  void beginStop(Ending ending, const std::string& why) {
    if (ending_ == Ending::kNone) {
      ending_ = ending;
      why_ = why;
      if (ending != Ending::kSucceeded) say(why + "; stopping every rank");
      event({{"event", "state"}, {"state", "stopping"}, {"attempt", attempt_}, {"reason", why}});
    }
    broadcast({{"type", "stop"}, {"grace_ms", plan_.grace_period_ms}});
    maybeAttemptOver();
  }

  void maybeAttemptOver() {
    if (finishing_ || ending_ == Ending::kNone) return;
    for (const Agent& agent : agents_) {
      if (agent.connected && !agent.idle) return;
    }
    if (ending_ == Ending::kFailed && attempt_ < plan_.max_restarts && !no_restart_ &&
        connected_ == static_cast<int>(agents_.size())) {
      ++attempt_;
      say("attempt " + std::to_string(attempt_) + " failed (" + why_ + "); restarting (" +
          std::to_string(attempt_) + " of " + std::to_string(plan_.max_restarts) +
          " restarts)");
      event({{"event", "state"}, {"state", "restarting"}, {"attempt", attempt_}, {"reason", why_}});
      ending_ = Ending::kNone;
      startAttempt();
      return;
    }
    finish(ending_, why_);
  }

  void finish(Ending ending, const std::string& why) {
    ending_ = ending;
    why_ = why;
    finishing_ = true;
    broadcast({{"type", "exit"}});
    deadline_.arm(Millis(10000));
    if (connected_ == 0) loop_.quit();
  }

  void onSignal() {
    while (int sig = signals_.next()) {
      ++signals_seen_;
      if (!stop_signal_) stop_signal_ = sig;
      if (finishing_) continue;
      if (signals_seen_ > 1) {
        say("second signal: killing every rank now");
        broadcast({{"type", "stop"}, {"grace_ms", 0}});
        continue;
      }
      std::string name = std::string("SIG") + (sigabbrev_np(sig) ? sigabbrev_np(sig) : "?");
      std::string why = "stopped by " + name;
      no_restart_ = true;
      if (connected_ < static_cast<int>(agents_.size()) && ending_ == Ending::kNone) {
        finish(Ending::kStopped, why);  // nothing runs yet
        continue;
      }
      say(name + " received: stopping the job (send it again to kill at once)");
      beginStop(Ending::kStopped, why);
    }
  }

  void onRuntimeOver() {
    runtime_.consume();
    beginStop(Ending::kTimedOut, "max_runtime " + formatDuration(Millis(plan_.max_runtime_ms)) +
                                     " exceeded");
  }

  void onDeadline() {
    deadline_.consume();
    if (finishing_) {
      loop_.quit();  // agents that did not say goodbye are killed by reap()
      return;
    }
    std::vector<std::string> missing;
    for (size_t n = 0; n < agents_.size(); ++n) {
      if (!agents_[n].connected) missing.push_back(std::to_string(n));
    }
    finish(Ending::kLost, "the agent(s) of node(s) " + join(missing, ", ") +
                              " did not connect within " + formatDuration(options_.connect_timeout));
  }

  // After the ranks: the job's results go where the job file says, verified. A copy that fails
  // fails the job (the results are still in the job directory).
  void copyOutputs() {
    const bool succeeded = ending_ == Ending::kSucceeded || ending_ == Ending::kNone;
    for (const plan::OutputPlan& out : plan_.outputs) {
      if (!succeeded && !out.always) continue;
      Message record = {{"source", out.source}, {"target", out.target}};
      auto copied = storage::copyTree(out.source, out.target, storage::CopyOptions{});
      if (copied) {
        record["files"] = copied->files_copied + copied->files_skipped;
        record["bytes"] = copied->bytes_copied;
        char buf[64];
        std::snprintf(buf, sizeof buf, " (%lld file(s), %.1f MiB)",
                      static_cast<long long>(record["files"].get<int64_t>()),
                      static_cast<double>(copied->bytes_copied) / (1 << 20));
        say("output " + out.source + " -> " + out.target + buf);
      } else {
        record["error"] = copied.error().message;
        std::string why = "copying output '" + out.source + "' failed: " + copied.error().message;
        say(why);
        if (succeeded) {
          ending_ = Ending::kOutputFailed;
          why_ = why;
        }
      }
      event({{"event", "output"}, {"output", record}});
      outputs_.push_back(record);
    }
  }

  std::vector<RankExit> exitsOf(int attempt) const {
    std::vector<RankExit> out;
    for (const RankExit& e : exits_) {
      if (e.attempt == attempt) out.push_back(e);
    }
    return out;
  }

  JobOutcome outcome() {
    JobOutcome out;
    out.exits = exits_;
    out.attempts = attempt_ + 1;
    out.reason = why_;
    switch (ending_) {
      case Ending::kSucceeded:
      case Ending::kNone:
        out.state = JobState::kSucceeded;
        out.exit_code = 0;
        break;
      case Ending::kFailed:
        out.state = JobState::kFailed;
        out.root_cause = firstFailure(exitsOf(attempt_));
        out.exit_code = out.root_cause ? out.root_cause->shellCode() : 1;
        if (out.exit_code == 0) out.exit_code = 1;
        break;
      case Ending::kStopped:
        out.state = JobState::kStopped;
        out.exit_code = 128 + (stop_signal_ ? stop_signal_ : SIGTERM);
        break;
      case Ending::kTimedOut:
        out.state = JobState::kFailed;
        out.exit_code = 124;
        break;
      case Ending::kLost:
      case Ending::kStagingFailed:
      case Ending::kOutputFailed:
        out.state = JobState::kFailed;
        out.exit_code = 1;
        break;
    }
    Message record = {{"job_id", plan_.job_id},
                      {"name", plan_.job_name},
                      {"state", jobStateName(out.state)},
                      {"exit_code", out.exit_code},
                      {"reason", out.reason},
                      {"attempts", out.attempts},
                      {"outputs", outputs_},
                      {"duration_s", elapsed()}};
    if (out.root_cause) {
      const RankExit& rc = *out.root_cause;
      record["root_cause"] = {{"name", rc.name},     {"role", rc.role},
                              {"role_rank", rc.role_rank},
                              {"rank", rc.rank},     {"node", rc.node},
                              {"code", rc.code},     {"signal", rc.signal},
                              {"attempt", rc.attempt}, {"tail", rc.tail},
                              {"hint", hintFor(rc)}};
    }
    event({{"event", "state"}, {"state", jobStateName(out.state)}, {"exit_code", out.exit_code},
           {"reason", out.reason}});
    (void)writeFileAtomic(plan_.job_dir + "/result.json", record.dump(2) + "\n");
    return out;
  }

  const plan::Plan& plan_;
  AgentLauncher& launcher_;
  const CoordinatorOptions& options_;
  proc::EventLoop& loop_;
  proc::SignalFd signals_;
  proc::Timer runtime_;
  proc::Timer deadline_;
  std::string secret_;
  std::vector<Agent> agents_;
  std::map<int, const plan::RankPlan*> ranks_;  // by global rank
  UniqueFd listener_;
  UniqueFd events_;
  std::vector<RankExit> exits_;
  Message outputs_ = Message::array();
  std::chrono::steady_clock::time_point started_;
  std::chrono::steady_clock::time_point attempt_started_;
  int connected_ = 0;
  int staged_nodes_ = 0;
  int started_nodes_ = 0;
  int started_processes_ = 0;
  int key_total_ = 0;
  int key_ok_ = 0;
  int attempt_ = 0;
  int signals_seen_ = 0;
  int stop_signal_ = 0;
  Ending ending_ = Ending::kNone;
  bool finishing_ = false;
  bool no_restart_ = false;
  std::string why_;
};

}  // namespace

Result<JobOutcome> runCoordinator(const plan::Plan& plan, AgentLauncher& launcher,
                                  const CoordinatorOptions& options) {
  COHORT_ASSIGN(proc::SignalFd signals, proc::SignalFd::create({SIGINT, SIGTERM, SIGHUP}));
  COHORT_ASSIGN(auto loop, proc::EventLoop::create());
  COHORT_ASSIGN(proc::Timer runtime, proc::Timer::create());
  COHORT_ASSIGN(proc::Timer deadline, proc::Timer::create());
  COHORT_ASSIGN(std::string secret, makeSecret());
  Coordinator coordinator(plan, launcher, options, *loop, std::move(signals), std::move(runtime),
                          std::move(deadline), std::move(secret));
  return coordinator.run();
}

}  // namespace cohort::agent
