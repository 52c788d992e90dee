#include "agent/coordinator.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <malloc.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <set>

#include "agent/channel.h"
#include "agent/hang.h"
#include "agent/liveness.h"
#include "agent/protocol.h"
#include "agent/metrics.h"
#include "agent/rank_output.h"
#include "agent/staging.h"
#include "agent/strangers.h"
#include "job/events.h"
#include "job/layout.h"
#include "proc/event_loop.h"
#include "proc/spawn.h"

namespace cohort::agent {

namespace {

// "could not write: '/x/result.json.tmp.1.2': write: No space left on device" -> "No space left
// on device": the errno text failErrno put last; the record's file is named by the caller.
std::string causeOf(const Error& error) {
  size_t colon = error.message.rfind(": ");
  return colon == std::string::npos ? error.message : error.message.substr(colon + 2);
}

std::string baseName(const std::string& path) { return path.substr(path.rfind('/') + 1); }

// The parent of process `pid`; -1 when it cannot be read.
pid_t parentOf(pid_t pid) {
  const std::vector<std::string> fields = proc::statFields(pid);
  return fields.size() > 1 ? static_cast<pid_t>(std::atoi(fields[1].c_str())) : -1;
}

// How long the agents have to send their ranks' stacks after a hang.
constexpr Millis kStacksDeadline{15000};

struct Timers {
  proc::Timer connect, runtime, exit, heartbeat, launch_poll, hang, stacks;

  static Result<Timers> create() {
    Timers t;
    for (proc::Timer* timer :
         {&t.connect, &t.runtime, &t.exit, &t.heartbeat, &t.launch_poll, &t.hang, &t.stacks}) {
      COHORT_ASSIGN(*timer, proc::Timer::create());
    }
    return t;
  }
};

class Coordinator {
 public:
  Coordinator(const plan::Plan& plan, AgentLauncher& launcher, const CoordinatorOptions& options,
              proc::EventLoop& loop, proc::SignalFd signals, Timers timers, std::string secret)
      : plan_(plan),
        layout_(plan.job_dir),
        launcher_(launcher),
        options_(options),
        loop_(loop),
        signals_(std::move(signals)),
        connect_(std::move(timers.connect)),
        runtime_(std::move(timers.runtime)),
        exit_(std::move(timers.exit)),
        heartbeat_(std::move(timers.heartbeat)),
        launch_poll_(std::move(timers.launch_poll)),
        hang_(std::move(timers.hang)),
        stacks_deadline_(std::move(timers.stacks)),
        secret_(std::move(secret)),
        decisions_(plan, options.connect_timeout),
        agents_(plan.nodes.size()) {}

  Result<JobOutcome> run() {
    events_.reset(::open(layout_.eventsFile().c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC,
                         0644));
    if (!events_.valid()) return failErrno("open '" + layout_.eventsFile() + "'");
    // Made now, unnamed, written and named at the end: the outcome is not held up by making a
    // file, and nothing a rank writes into the job directory meanwhile can take its place.
    COHORT_ASSIGN(PreparedFile result_file, PreparedFile::create(layout_.resultFile()));
    result_file_ = std::move(result_file);
    // Agents that find this word through their own path to the job directory share it.
    COHORT_ASSIGN(mark_, randomHex(16));
    COHORT_TRY(writeFileAtomic(layout_.markFile(), mark_ + "\n", /*durable=*/false));
    COHORT_TRY(writeFileAtomic(layout_.coordinatorPidFile(), std::to_string(::getpid()) + "\n",
                               /*durable=*/false));
    COHORT_ASSIGN(auto listener, listenTcp(options_.listen_addr, options_.listen_port));
    listener_ = std::move(listener.first);
    port_ = listener.second;
    COHORT_TRY(loop_.add(listener_.get(), EPOLLIN, [this](uint32_t) { onAccept(); }));
    COHORT_TRY(loop_.add(signals_.fd(), EPOLLIN, [this](uint32_t) { onSignal(); }));
    COHORT_TRY(loop_.add(connect_.fd(), EPOLLIN, [this](uint32_t) {
      connect_.consume();
      feed(ConnectDeadlineOver{});
    }));
    COHORT_TRY(loop_.add(runtime_.fd(), EPOLLIN, [this](uint32_t) {
      runtime_.consume();
      feed(MaxRuntimeOver{});
    }));
    COHORT_TRY(loop_.add(exit_.fd(), EPOLLIN, [this](uint32_t) {
      exit_.consume();
      feed(ExitDeadlineOver{});
    }));
    COHORT_TRY(loop_.add(hang_.fd(), EPOLLIN, [this](uint32_t) {
      hang_.consume();
      feed(HangTimeOver{});
    }));
    COHORT_TRY(loop_.add(stacks_deadline_.fd(), EPOLLIN, [this](uint32_t) {
      stacks_deadline_.consume();
      diagnoseHang();
    }));
    COHORT_TRY(loop_.add(heartbeat_.fd(), EPOLLIN, [this](uint32_t) { onHeartbeatTime(); }));
    COHORT_TRY(loop_.add(launch_poll_.fd(), EPOLLIN, [this](uint32_t) { onLaunchPoll(); }));
    for (const auto& [fd, call] : options_.watch) {
      COHORT_TRY(loop_.add(fd, EPOLLIN, [call = call](uint32_t) { call(); }));
    }
    heartbeat_.arm(heartbeatEvery());
    if (options_.report) reporter_ = std::make_unique<Reporter>(*options_.report);
    feed(JobBegins{});
    if (!finished_) COHORT_TRY(loop_.run());
    if (!finished_) return fail(Code::kInternal, "the coordinator's loop ended before the job");
    // Every rank's line is on the console before the outcome is said, and before a caller that
    // ends the process at once (CoordinatorOptions::process_ends_after) does.
    console_.close();
    // The job is over; its end waits for the server (away, or restarting) for report_linger,
    // unless a stop signal says not to wait (the record stays in the job's files), or the job
    // directory is gone (the job was deleted: nobody is left to read its record).
    if (reporter_) {
      reporter_->drain(options_.report_linger, [this] {
        sigset_t stops;
        sigemptyset(&stops);
        for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&stops, sig);
        const timespec now{};
        const int sig = ::sigtimedwait(&stops, nullptr, &now);
        if (sig > 0) return "stopped waiting for it: " + spec::stopSignalName(sig);
        if (::access(layout_.dir().c_str(), F_OK) != 0 && errno == ENOENT) {
          return "stopped waiting for it: the job directory " + layout_.dir() + " is gone";
        }
        return std::string();
      });
    }
    return outcome_;
  }

 private:
  struct Agent {
    std::unique_ptr<Channel> channel;  // null until it said hello, and after it was lost
    Silence silence{Millis(1000), {}};  // since its latest message
    bool local = false;     // forked by this process: watched as a process, not by its silence
    pid_t pid = -1;         // local: its pid (the socket pair's peer)
    std::optional<std::chrono::steady_clock::time_point> stopped_since;  // local: seen stopped
    HostAddress host;  // where its node's ranks are reached, from its hello
    std::string hostname;
    bool dialled = false;  // it proved the secret once
  };

  // "n3 at 10.77.0.13: " on real hosts, to name a lost node where a person looks for it.
  std::string whereIs(size_t node) const {
    const Agent& a = agents_[node];
    if (!options_.place || a.host.address.empty()) return "";
    return (a.hostname.empty() ? "" : a.hostname + " at ") + a.host.address + ": ";
  }

  // Until every agent is there: what the launcher says of them (a cluster's queue, a batch job
  // that ended before its agents dialled in).
  void onLaunchPoll() {
    launch_poll_.consume();
    if (finished_ || all_connected_) return;
    LaunchStatus now = launcher_.status();
    if (now.phase == LaunchStatus::Phase::kEnded) {
      feed(AgentLaunchFailed{-1, now.detail});
      return;
    }
    const std::string queued = now.phase == LaunchStatus::Phase::kQueued ? now.detail : "";
    if (queued != queued_) {
      queued_ = queued;
      feed(LauncherQueued{queued});
    }
    if (!finished_) launch_poll_.arm(Millis(1000));
  }

  // Agents and the coordinator say something at least this often (heartbeats when nothing else).
  Millis heartbeatEvery() const {
    return std::max(Millis(100), Millis(plan_.heartbeat_timeout_ms / 10));
  }

  // An agent on another machine that said nothing for the heartbeat timeout, while we were
  // there to hear it, is lost, even if its connection is still open (a hung machine, a network
  // gone): connections may never close in that case. An agent this process forked is watched as
  // a process: it is lost when it dies (its connection ends then) or has been stopped (SIGSTOP)
  // for the heartbeat timeout; one that is only slow (a busy machine) never is.
  void onHeartbeatTime() {
    heartbeat_.consume();
    const auto timeout = Millis(plan_.heartbeat_timeout_ms);
    for (size_t n = 0; n < agents_.size() && !finished_; ++n) {
      if (!agents_[n].channel) continue;
      onAgent(static_cast<int>(n));  // what it sent while the loop was busy counts
      Agent& agent = agents_[n];
      if (!agent.channel) continue;
      const auto now = std::chrono::steady_clock::now();
      const Millis silent = agent.silence.tick(now);
      bool lost = !agent.local && silent > timeout;
      if (agent.local) {
        const bool stopped = agent.pid > 0 && silent >= heartbeatEvery() && processStopped(agent.pid);
        if (!stopped) {
          agent.stopped_since.reset();
        } else if (!agent.stopped_since) {
          agent.stopped_since = now;
          std::fprintf(stderr,
                       "cohort: node %zu's agent (pid %d) is stopped: it is lost unless it "
                       "continues within %s (kill -CONT %d)\n",
                       n, agent.pid, formatDuration(timeout).c_str(), agent.pid);
        }
        lost = agent.stopped_since && now - *agent.stopped_since >= timeout && silent > timeout;
      }
      if (lost) {
        drop(static_cast<int>(n), "no word from it in " + formatDuration(timeout) +
                                      (agent.local ? std::string() : loadNote()));
        continue;
      }
      (void)agent.channel->send(protocol::encode(protocol::Heartbeat{}));
    }
    if (!finished_) heartbeat_.arm(heartbeatEvery());
  }

  // ---- the state machine's side: events in, actions out ----

  void feed(const JobInput& input) {
    carryOut(decisions_.handle(input, DecisionClock::now()));
  }

  // Actions are carried out in order. Carrying one out may feed an event back (a write that
  // failed, an output copied), whose actions are carried out at once; after a Finish nothing
  // more is.
  void carryOut(const std::vector<JobAction>& actions) {
    for (const JobAction& action : actions) {
      if (finished_) return;
      std::visit([this](const auto& a) { act(a); }, action);
    }
  }

  void act(const LaunchAgents&) {
    auto launched = launcher_.launch(
        static_cast<int>(plan_.nodes.size()),
        Dial{options_.listen_addr, port_, secret_,
             [this](UniqueFd fd) { admit(std::move(fd), /*local=*/true); }});
    // Only now: the local launcher forks its agents from a process with no other thread.
    if (reporter_) reporter_->start();
    // While the agents start (their hellos wait for the loop), and before any rank can.
    if (options_.write_plan) {
      if (auto written = options_.write_plan(); !written) {
        const std::string& message = written.error().message;
        feed(RecordWriteFailed{RecordFile::kPlan, message.substr(0, message.find(": ")),
                               causeOf(written.error())});
        if (finished_) return;  // no agent was there yet to stop: nothing is left to prepare
      }
    }
    if (!launched) {
      feed(AgentLaunchFailed{-1, launched.error().message});
      return;
    }
    launch_poll_.arm(Millis(1000));
    // While the agents start, what they wait for next: each node's plan message. A plan that is
    // placed once the agents are there (place()) is not final yet.
    if (!options_.place) {
      for (size_t n = 0; n < plan_.nodes.size(); ++n) plan_lines_.push_back(planLine(n));
    }
  }

  void act(const SendPlan& a) {
    if (!agents_[a.node].channel) return;
    const size_t n = static_cast<size_t>(a.node);
    (void)agents_[a.node].channel->sendEncoded(
        n < plan_lines_.size() && !plan_lines_[n].empty() ? plan_lines_[n] : planLine(n));
  }

  // Node `n`'s "plan" message, encoded: its node plan (kilobytes per rank) is put in as the JSON
  // text it is printed to, not parsed and printed again.
  std::string planLine(size_t n) const {
    protocol::PlanMessage head;
    head.workdir = plan_.workdir;
    head.job_dir = plan_.job_dir;
    head.mark = mark_;
    head.heartbeat_ms = heartbeatEvery().count();
    head.heartbeat_timeout_ms = plan_.heartbeat_timeout_ms;
    head.stop_signal = plan_.stop_signal;  // for a stop the agent is told from outside
    head.grace_ms = plan_.grace_period_ms;
    return protocol::encodePlan(head, plan::nodeToJson(plan_.nodes[n]));
  }

  void act(const SendStage&) {
    plan_lines_.clear();
    plan_lines_.shrink_to_fit();
    ::malloc_trim(0);  // the nodes' plans were sent; their JSON is garbage now
    broadcast(protocol::encode(protocol::Stage{}));
  }

  void act(const SendStart& a) {
    broadcast(protocol::encode(protocol::Start{a.attempt}));
    // While the agents start their ranks: this loop reads no output before the logs are open.
    openLogs();
    // The attempt's startup, node by node (result.json's "startup"): spawned, first output,
    // first metric, in seconds since the start was sent; the staging came before.
    attempt_start_ = std::chrono::steady_clock::now();
    startup_.assign(plan_.nodes.size(), Startup{});
    for (size_t n = 0; n < startup_.size() && n < staged_seconds_.size(); ++n) {
      startup_[n].staged = staged_seconds_[n];
    }
    said_startup_ = false;
  }

  struct Startup {
    double staged = -1, spawned = -1, first_output = -1, first_metric = -1;  // -1: not yet
  };

  double sinceStart() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - attempt_start_).count();
  }

  // Once every node has shown output: one line on how long that took, and who was last.
  void noteFirstOutput(int node) {
    if (static_cast<size_t>(node) >= startup_.size() || startup_[node].first_output >= 0) return;
    startup_[node].first_output = sinceStart();
    int slowest = 0;
    for (size_t n = 0; n < startup_.size(); ++n) {
      if (startup_[n].first_output < 0) return;
      if (startup_[n].first_output > startup_[slowest].first_output) slowest = static_cast<int>(n);
    }
    if (said_startup_ || !options_.progress) return;
    said_startup_ = true;
    if (startup_.size() == 1) {
      std::fprintf(stderr, "cohort: first output within %.2fs of the start\n",
                   startup_[0].first_output);
    } else {
      std::fprintf(stderr,
                   "cohort: first output from every node within %.2fs of the start (the last: "
                   "node %d)\n",
                   startup_[slowest].first_output, slowest);
    }
  }

  Message startupJson() const {
    Message nodes = Message::array();
    auto seconds = [](double s) {
      return s < 0 ? Message() : Message(std::round(s * 1000) / 1000);
    };
    for (size_t n = 0; n < startup_.size(); ++n) {
      nodes.push_back({{"node", n},
                       {"staged_s", seconds(startup_[n].staged)},
                       {"spawned_s", seconds(startup_[n].spawned)},
                       {"first_output_s", seconds(startup_[n].first_output)},
                       {"first_metric_s", seconds(startup_[n].first_metric)}});
    }
    return nodes;
  }

  void act(const SendStop& a) {
    broadcast(protocol::encode(protocol::Stop{a.grace_ms, a.signal, a.exit_code}));
  }

  void act(const SendExit& a) {
    protocol::Exit message{a.code, {}};
    for (size_t i : a.outputs) message.outputs.push_back(plan_.outputs[i]);
    const Message exit = protocol::encode(message);
    if (!a.node) {
      broadcast(exit);
    } else if (agents_[*a.node].channel) {
      (void)agents_[*a.node].channel->send(exit);
    }
  }

  proc::Timer& timer(TimerKind kind) {
    switch (kind) {
      case TimerKind::kConnect: return connect_;
      case TimerKind::kRuntime: return runtime_;
      case TimerKind::kExit: return exit_;
      case TimerKind::kHang:
        return hang_;
    }
    return exit_;
  }

  void act(const ArmTimer& a) { timer(a.timer).arm(a.after); }
  void act(const DisarmTimer& a) { timer(a.timer).disarm(); }

  void act(const WriteEvent& a) {
    if (auto written = recordEvent(a.event); !written) {
      feed(RecordWriteFailed{RecordFile::kEvents, baseName(layout_.eventsFile()),
                             causeOf(written.error())});
    }
  }

  void act(const Say& a) {
    if (options_.progress || a.always) std::fprintf(stderr, "cohort: %s\n", a.line.c_str());
  }

  // A hang: every agent sends its ranks' stacks ("stacks"), then diagnoseHang() names the rank
  // that holds the others up.
  void act(const CollectStacks&) { collectStacks(/*on_request=*/false); }

  // `cohort stacks` (SIGUSR1): the same, for stacks-now.txt; the job goes on.
  void collectStacks(bool on_request) {
    if (collecting_) return;  // the one under way answers
    on_request_ = on_request;
    stacks_.clear();
    stacks_waiting_.clear();
    for (size_t n = 0; n < agents_.size(); ++n) {
      if (agents_[n].channel &&
          agents_[n].channel->send(protocol::encode(protocol::StacksRequest{}))) {
        stacks_waiting_.insert(static_cast<int>(n));
      }
    }
    collecting_ = true;
    if (stacks_waiting_.empty()) {
      diagnoseHang();
    } else {
      stacks_deadline_.arm(kStacksDeadline);
    }
  }

  void onStacks(int node, const protocol::Stacks& m) {
    if (!collecting_ || !stacks_waiting_.erase(node)) return;
    const plan::NodePlan& plan = plan_.nodes[node];
    for (const protocol::RankStack& r : m.ranks) {
      if (r.index < 0 || static_cast<size_t>(r.index) >= plan.ranks.size()) continue;
      const plan::RankPlan& rp = plan.ranks[r.index];
      RankStack s;
      s.rank = rp.rank;
      s.label = rp.name + " on node " + std::to_string(node) +
                (static_cast<size_t>(node) < plan_.machines.size() && !plan_.machines[node].empty()
                     ? " (" + plan_.machines[node] + ")"
                     : "");
      s.state = r.state.size() == 1 ? r.state[0] : '?';
      s.frames = framesOfPySpy(r.stack.substr(0, 64 * 1024));
      s.error = r.error.substr(0, 512);
      stacks_.push_back(std::move(s));
    }
    if (stacks_waiting_.empty()) diagnoseHang();
  }

  // Every stack is in, or the agents are out of time: the report goes to <job>/stacks.txt, its
  // verdict to the decisions.
  void diagnoseHang() {
    if (!collecting_) return;
    collecting_ = false;
    stacks_deadline_.disarm();
    std::string missing;
    for (int node : stacks_waiting_)
      missing += (missing.empty() ? "" : ", ") + std::to_string(node);
    std::sort(stacks_.begin(), stacks_.end(),
              [](const RankStack& a, const RankStack& b) { return a.rank < b.rank; });
    HangReport report = diagnose(stacks_);
    if (!missing.empty())
      report.text += "\n(no stacks from node(s) " + missing + ": out of time)\n";
    if (on_request_) {
      const std::string now = isoTime(nowUnixNanos()) + "\n" +
                              (report.laggards.empty() ? "" : report.laggards + "\n") + report.text;
      if (auto written = writeFileAtomic(layout_.stacksNowFile(), now, /*durable=*/false);
          !written) {
        std::fprintf(stderr, "cohort: %s\n", written.error().message.c_str());
      }
      return;
    }
    const std::string file = layout_.stacksFile();
    const std::string record =
        "== attempt " + std::to_string(progress_attempt_ + 1) + ", " + isoTime(nowUnixNanos()) +
        "\n" + (report.laggards.empty() ? "" : report.laggards + "\n") + report.text + "\n";
    UniqueFd fd(::open(file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0644));
    if (!fd.valid() || !writeAll(fd.get(), record)) {
      std::fprintf(stderr, "cohort: could not write '%s': %s\n", file.c_str(),
                   std::strerror(errno));
    }
    feed(HangDiagnosed{report.laggards, report.text + "(also in " + file + ")\n"});
  }

  void act(const ReapAgents&) { reapAgents(Millis(5000)); }

  void reapAgents(Millis deadline) {
    if (reaped_) return;
    reaped_ = true;
    loop_.quit();
    // The last words to agents still there (an exit with the job's code) go before we wait for
    // them to leave.
    const auto last_words = std::chrono::steady_clock::now() + Millis(2000);
    for (Agent& agent : agents_) {
      if (!agent.channel || agent.channel->pendingBytes() == 0) continue;
      (void)agent.channel->drain(std::max(
          Millis(0),
          std::chrono::duration_cast<Millis>(last_words - std::chrono::steady_clock::now())));
    }
    // An agent that never dialled in (the job was stopped while they started) would wait for a
    // coordinator that no longer listens: it goes now, not at the reap's deadline.
    for (size_t n = 0; n < agents_.size(); ++n) {
      if (!agents_[n].dialled) launcher_.abandon(static_cast<int>(n));
    }
    launcher_.reap(deadline);
  }

  // After the ranks: the job's results go where the job file says, verified.
  void act(const CopyOutput& a) {
    // As the ranks' user: their output/ is theirs (agent/staging.h).
    const account::Identity ranks =
        plan_.nodes.empty() ? account::Identity{} : ranksIdentity(plan_.nodes.front());
    if (auto copied = copyOutput(plan_.outputs[a.index], ranks)) {
      feed(OutputCopied{a.index, copied->files, copied->bytes});
    } else {
      feed(OutputCopyFailed{a.index, copied.error().message});
    }
  }

  void act(const WriteResult& a) {
    // A record that failed after a success is written again, as a failure: by then as any file.
    const std::string json = resultJson(a.outcome);
    auto written =
        result_file_ ? result_file_->commit(json) : writeFileAtomic(layout_.resultFile(), json);
    result_file_.reset();
    if (!written) {
      feed(RecordWriteFailed{RecordFile::kResult, baseName(layout_.resultFile()),
                             causeOf(written.error())});
    }
  }

  void act(const Finish& a) {
    outcome_ = a.outcome;
    finished_ = true;
    // The agents were leaving while the result was written (their nodes idle, nothing to copy),
    // or are gone already.
    reapAgents(kExitDeadline);
    // The server gets the outcome as it is final, after every write that could still fail, and
    // once nothing of the job is left.
    if (reporter_) reporter_->result(resultJson(a.outcome));
  }

  // ---- I/O ----

  // The one place that writes the job's events. A line that could not be written whole is taken
  // back, so the file keeps whole lines only.
  Result<void> recordEvent(job::Event event) {
    event.t = nowUnixNanos();
    off_t before = ::lseek(events_.get(), 0, SEEK_END);
    std::string line = job::encodeEvent(event);
    auto written = writeAll(events_.get(), line + "\n");
    if (!written && before >= 0) {
      int truncated = ::ftruncate(events_.get(), before);  // the write's error is the one to tell
      (void)truncated;
    }
    // Numbered as the file's lines are: the server is sent what the file has, in its order.
    if (written && reporter_) reporter_->event(std::move(line));
    return written;
  }

  std::string resultJson(const JobOutcome& out) const {
    Message outputs = Message::array();
    for (const OutputResult& o : out.outputs) {
      Message record = {{"source", o.source}, {"target", o.target}};
      if (o.error.empty()) {
        record["files"] = o.files;
        record["bytes"] = o.bytes;
      } else {
        record["error"] = o.error;
      }
      outputs.push_back(std::move(record));
    }
    Message record = {{"job_id", plan_.job_id},
                      {"name", plan_.job_name},
                      {"state", jobStateName(out.state)},
                      {"exit_code", out.exit_code},
                      {"reason", out.reason},
                      {"attempts", out.attempts},
                      {"outputs", std::move(outputs)},
                      {"duration_s", out.duration_s}};
    if (!out.diagnosis.empty()) record["diagnosis"] = out.diagnosis;
    if (out.lost_node) {
      record["lost_node"] = {{"node", out.lost_node->node},
                             {"why", out.lost_node->why},
                             {"ranks", out.lost_node->ranks}};
    }
    if (!startup_.empty()) record["startup"] = startupJson();  // of the last attempt
    if (out.root_cause) {
      const RankExit& rc = *out.root_cause;
      record["root_cause"] = {{"name", rc.name},     {"role", rc.role},
                              {"role_rank", rc.role_rank},
                              {"rank", rc.rank},     {"node", rc.node},
                              {"code", rc.code},     {"signal", rc.signal},
                              {"attempt", rc.attempt}, {"tail", rc.tail},
                              {"hint", hintFor(rc)}};
      if (rc.memory_limit > 0) record["root_cause"]["memory_limit"] = rc.memory_limit;
      // A launcher (torchrun, mpirun) that failed because a rank under it did: that rank.
      if (auto launched = launchedFailure(rc)) {
        record["root_cause"]["launched"] = {
            {"rank", launched->rank}, {"name", launched->name}, {"what", launched->what}};
      }
      if (!rc.while_debugged.empty()) record["root_cause"]["while_debugged"] = rc.while_debugged;
    }
    // Tails come from ranks: never let bad UTF-8 make dump() throw.
    return record.dump(2, ' ', false, Message::error_handler_t::replace) + "\n";
  }

  // The ranks a launcher tees (plan::RankPlan::teed): its output split into theirs.
  struct Teed {
    std::vector<std::optional<LogFile>> logs;     // [its rank]
    std::vector<std::optional<RankOutput>> echo;  // [its rank], to console_
    std::optional<TeeSplitter> split;
  };

  // Every rank's log file, made as its ranks start (also for a rank that never writes), and its
  // lines on the merged console stream, "[worker/3 node1] ...".
  void openLogs() {
    logs_.resize(plan_.nodes.size());
    echo_.resize(plan_.nodes.size());
    for (size_t n = 0; n < plan_.nodes.size(); ++n) {
      logs_[n].resize(plan_.nodes[n].ranks.size());
      echo_[n].resize(plan_.nodes[n].ranks.size());
      for (size_t i = 0; i < logs_[n].size(); ++i) {
        const plan::RankPlan& rank = plan_.nodes[n].ranks[i];
        if (!echo_[n][i]) {
          // A launcher's own lines are no rank's metrics; its ranks' lines are (openTeed).
          std::function<void(std::string_view)> on_line;
          if (rank.teed.empty()) {
            on_line = [this, node = static_cast<int>(n), r = rank.rank](std::string_view line) {
              onLine(node, r, line);
            };
          }
          echo_[n][i].emplace("[" + rank.name + " node" + std::to_string(rank.node) + "] ",
                              rank.console ? &console_ : nullptr, std::move(on_line));
        }
        if (!rank.teed.empty() && !teedOf(static_cast<int>(n), i)) {
          openTeed(static_cast<int>(n), i);
        }
        if (logs_[n][i]) continue;
        logs_[n][i] = openLog(rank.log_file);
      }
    }
  }

  std::optional<LogFile> openLog(const std::string& path) {
    auto log = LogFile::open(path);
    if (log) return std::move(*log);
    if (!said_log_error_) {
      said_log_error_ = true;
      std::fprintf(stderr, "cohort: %s; that rank's output is only on the console\n",
                   log.error().message.c_str());
    }
    return std::nullopt;
  }

  // A launcher that tees its ranks' lines (torchrun): each rank's lines go to its own log, its
  // own console prefix and its metrics, as if cohort had started it; the launcher's own lines
  // stay its. The launcher's log keeps everything it wrote.
  void openTeed(int node, size_t index) {
    teed_.resize(plan_.nodes.size());
    teed_[node].resize(plan_.nodes[node].ranks.size());
    const plan::RankPlan& launcher = plan_.nodes[node].ranks[index];
    auto teed = std::make_unique<Teed>();
    for (const plan::TeedRank& rank : launcher.teed) {
      teed->logs.push_back(openLog(rank.log_file));
      teed->echo.emplace_back(std::in_place, "[" + rank.name + " node" + std::to_string(node) + "] ",
                              rank.console ? &console_ : nullptr,
                              [this, node, r = rank.rank](std::string_view line) {
                                onLine(node, r, line);
                              });
    }
    Teed* t = teed.get();
    RankOutput* own = &*echo_[node][index];
    t->split.emplace(
        launcher.tee_prefix, launcher.teed.size(),
        [t](size_t i, std::string_view line) {
          if (t->logs[i]) t->logs[i]->append(line);
          t->echo[i]->consume(line.data(), line.size());
        },
        [own](std::string_view line) { own->consume(line.data(), line.size()); });
    teed_[node][index] = std::move(teed);
  }

  // A chunk of a rank's output, as the agent read it from the rank.
  void onLog(int node, size_t index, std::string_view bytes) {
    if (static_cast<size_t>(node) >= logs_.size() || index >= logs_[node].size()) return;
    // A log that could not be opened was said once; the console still shows the rank.
    if (logs_[node][index]) logs_[node][index]->append(bytes);
    noteFirstOutput(node);
    if (Teed* teed = teedOf(node, index)) {
      teed->split->consume(bytes);
    } else {
      echo_[node][index]->consume(bytes.data(), bytes.size());
    }
  }

  Teed* teedOf(int node, size_t index) {
    if (static_cast<size_t>(node) >= teed_.size() || index >= teed_[node].size()) return nullptr;
    return teed_[node][index].get();
  }

  // A line of a rank's output: a training metric (agent/metrics.h) goes to metrics.jsonl.
  void onLine(int node, int rank, std::string_view line) {
    if (rank < 0 || line.substr(0, 11) != "cohort.log ") return;
    auto record = parseMetricLine(line);
    if (!record) return;
    if (static_cast<size_t>(node) < startup_.size() && startup_[node].first_metric < 0) {
      startup_[node].first_metric = sinceStart();
    }
    appendRecord(metrics_, layout_.metricsFile(), metricJson(nowUnixNanos(), rank, *record));
  }

  // One line of metrics.jsonl or resources.jsonl, opened at the first. A write that fails is
  // said once; the job goes on (its events and logs are the record that must be whole).
  void appendRecord(UniqueFd& fd, const std::string& path, const std::string& line) {
    if (!fd.valid() && !said_metrics_error_) {
      fd.reset(::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0644));
    }
    if (!fd.valid() || !writeAll(fd.get(), line + "\n")) {
      if (!said_metrics_error_) {
        said_metrics_error_ = true;
        std::fprintf(stderr, "cohort: writing '%s': %s; metrics are not recorded\n", path.c_str(),
                     std::strerror(errno));
      }
      fd.reset();
    }
  }

  // A rank's output ended with it: a last line without a newline is shown too.
  void endOutput(int node, int rank) {
    if (static_cast<size_t>(node) >= echo_.size()) return;
    for (size_t i = 0; i < echo_[node].size(); ++i) {
      if (plan_.nodes[node].ranks[i].rank != rank || !echo_[node][i]) continue;
      if (Teed* teed = teedOf(node, i)) {
        teed->split->finish();
        for (auto& echo : teed->echo) echo->finish();
      }
      echo_[node][i]->finish();
    }
  }

  // A rank's GPU use, where its agent sampled one (agent/gpu.h): utilisation in percent, memory.
  static void copyGpuUse(const protocol::RankProgress& from, Message& to) {
    if (!from.gpu_util) return;
    to["gpu_util"] = std::clamp(*from.gpu_util, 0.0, 100.0);
    to["gpu_memory_bytes"] = std::max<int64_t>(0, from.gpu_memory_bytes);
  }

  // A node's latest word on its ranks: the job's snapshot, by rank, goes to the server.
  void onProgress(int node, const protocol::Progress& m) {
    const plan::NodePlan& plan = plan_.nodes[node];
    // Which ranks made progress since the node's last report: for hang detection.
    last_output_.resize(plan_.nodes.size());
    last_output_[node].resize(plan.ranks.size(), 0);
    const int attempt = m.attempt;
    if (attempt != progress_attempt_) {
      for (auto& node_outputs : last_output_)
        std::fill(node_outputs.begin(), node_outputs.end(), 0);
      progress_attempt_ = attempt;
    }
    RanksProgressed progressed{node, attempt, {}};
    Message sampled = Message::array();  // for resources.jsonl
    Message mine = Message::array();     // for the server
    for (const protocol::RankProgress& r : m.ranks) {
      if (r.index < 0 || static_cast<size_t>(r.index) >= plan.ranks.size()) continue;
      const plan::RankPlan& rp = plan.ranks[r.index];
      // Output, or a cohort.heartbeat() (its file's change, as the agent saw it): either is
      // the rank's latest sign of life.
      const int64_t last = std::max(r.last_output, r.last_heartbeat);
      if (last != 0 && last != last_output_[node][r.index]) progressed.ranks.push_back(rp.rank);
      last_output_[node][r.index] = last;
      if (r.running && r.cpu_seconds) {
        sampled.push_back(
            {{"rank", rp.rank}, {"cpu_seconds", *r.cpu_seconds}, {"rss_bytes", r.rss_bytes}});
        copyGpuUse(r, sampled.back());
      }
      if (!reporter_) continue;
      Message out = {{"rank", rp.rank},
                     {"name", rp.name},
                     {"node", node},
                     {"running", r.running},
                     {"last_output", r.last_output}};
      if (r.last_heartbeat) out["last_heartbeat"] = r.last_heartbeat;
      if (r.cpu_seconds) {
        out["cpu_seconds"] = *r.cpu_seconds;
        out["rss_bytes"] = r.rss_bytes;
      }
      copyGpuUse(r, out);
      out["role"] = rp.role;
      mine.push_back(std::move(out));
    }
    if (!sampled.empty()) {
      Message line = {{"t", nowUnixNanos()},
                      {"node", node},
                      {"attempt", attempt},
                      {"ranks", std::move(sampled)}};
      appendRecord(resources_, layout_.resourcesFile(), line.dump());
    }
    if (!progressed.ranks.empty()) feed(std::move(progressed));
    if (!reporter_) return;
    progress_.resize(plan_.nodes.size());
    progress_[node] = std::move(mine);
    Message all = Message::array();
    for (const Message& ranks_of_node : progress_) {
      for (const Message& r : ranks_of_node) all.push_back(r);
    }
    Message snapshot = {{"time", nowUnixNanos()}, {"attempt", attempt}, {"ranks", std::move(all)}};
    reporter_->progress(snapshot.dump());
  }

  void broadcast(const Message& m) {
    for (Agent& agent : agents_) {
      if (agent.channel) (void)agent.channel->send(m);
    }
  }

  // A connection that has not finished the handshake (channel.h): it may send no more than a
  // hello and an answer to its challenge, within Strangers::kDeadline, as one of a bounded
  // number (agent/strangers.h).
  struct Pending {
    uint64_t id = 0;     // among strangers_; 0: a socket pair to an agent of ours
    std::unique_ptr<Channel> channel;
    int node = -1;      // from its hello; -1 until then
    std::string nonce;  // ours, for its proof
    HostAddress host;   // from its hello; believed only once it proved the secret
    std::string hostname;
    bool local = false;  // a socket pair to an agent this process forked
    pid_t pid = -1;      // from its hello (local: a child of ours, which knows the secret)
  };

  void onAccept() {
    for (;;) {
      int fd = ::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0 && (errno == EMFILE || errno == ENFILE) && spare_fd_.valid()) {
        // Out of descriptors: the connection would stay in the backlog, the listener readable,
        // and the loop spinning. The spare one makes room to take it and close it at once.
        spare_fd_.reset();
        UniqueFd refused(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
        spare_fd_.reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));
        if (refused.valid()) continue;
      }
      if (fd < 0) return;
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      admit(UniqueFd(fd));
    }
  }

  // Anyone on the machine (or the network) can connect: until it proves it knows the secret, a
  // connection is nobody's.
  // `local`: the other end is an agent this process forked (a socket pair, no network between
  // them): it is watched as a process, not by its silence (agent/liveness.h).
  void admit(UniqueFd fd, bool local = false) {
    auto pending = std::make_shared<Pending>();
    pending->local = local;
    const int raw = fd.get();
    // A hello and a proof are a few hundred bytes.
    pending->channel = std::make_unique<Channel>(std::move(fd), local ? 64 * 1024 : 4096);
    if (!local) {
      if (!strangers_deadline_) {
        // The first stranger: what bounds them from now on.
        auto timer = proc::Timer::create();
        if (!timer) return;  // `fd` goes: no stranger is kept unbounded
        strangers_deadline_ = std::make_unique<proc::Timer>(std::move(*timer));
        (void)loop_.add(strangers_deadline_->fd(), EPOLLIN, [this](uint32_t) {
          strangers_deadline_->consume();
          for (uint64_t id : strangers_.expired(std::chrono::steady_clock::now())) dropStranger(id);
          armStrangersDeadline();
        });
        spare_fd_.reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));
      }
      pending->id = ++last_stranger_;
      for (uint64_t id : strangers_.admit(pending->id, std::chrono::steady_clock::now())) {
        dropStranger(id);
      }
      strangers_by_id_[pending->id] = pending;
      armStrangersDeadline();
    }
    (void)loop_.add(raw, EPOLLIN, [this, pending](uint32_t) { onPending(pending); });
  }

  // Closes the stranger `id` without a word.
  void dropStranger(uint64_t id) {
    auto it = strangers_by_id_.find(id);
    if (it == strangers_by_id_.end()) return;
    const std::shared_ptr<Pending> p = it->second;
    strangers_by_id_.erase(it);
    strangers_.forget(id);
    loop_.remove(p->channel->fd());  // the loop's copy of `p` goes, and with the last, the socket
  }

  void armStrangersDeadline() {
    auto next = strangers_.nextDeadline();
    if (!next) return strangers_deadline_->disarm();
    const auto left = std::chrono::duration_cast<Millis>(*next - std::chrono::steady_clock::now());
    strangers_deadline_->arm(std::max(left, Millis(1)));
  }

  void onPending(const std::shared_ptr<Pending>& p) {
    auto messages = p->channel->receive();
    const int fd = p->channel->fd();
    auto drop = [&] {  // not one of ours: drop it without a word
      if (p->id) {
        strangers_by_id_.erase(p->id);
        strangers_.forget(p->id);
      }
      loop_.remove(fd);
    };
    if (!messages || (p->channel->closed() && messages->empty())) return drop();
    size_t used = 0;
    for (const Message& m : *messages) {
      ++used;
      auto decoded = protocol::decodeToCoordinator(m);
      if (!decoded) return drop();
      if (p->node < 0) {
        const auto* hello = std::get_if<protocol::Hello>(&*decoded);
        if (!hello || hello->node < 0 || hello->node >= static_cast<int>(agents_.size()) ||
            agents_[hello->node].channel || hello->nonce.size() != 32) {
          return drop();
        }
        auto ours = makeSecret();
        if (!ours) return drop();
        p->node = hello->node;
        p->nonce = *ours;
        p->host = {hello->interface, hello->host};
        p->hostname = hello->hostname.substr(0, 255);
        p->pid = hello->pid;
        if (p->id) strangers_.saidHello(p->id);
        // An agent we started knows us as its parent by our pid.
        const protocol::Challenge challenge{
            p->nonce, handshakeProof(secret_, "coordinator", hello->nonce, hello->node), ::getpid()};
        if (!p->channel->send(protocol::encode(challenge))) return drop();
        continue;
      }
      const int node = p->node;
      const auto* auth = std::get_if<protocol::Auth>(&*decoded);
      if (!auth || agents_[node].channel ||
          !secretsEqual(auth->proof, handshakeProof(secret_, "agent", p->nonce, node))) {
        return drop();
      }
      drop();  // no stranger any more: its socket goes on in the agent's channel (a copy)
      Agent& agent = agents_[node];
      agent.channel = std::make_unique<Channel>(UniqueFd(dup(fd)));
      agent.silence = Silence(heartbeatEvery(), std::chrono::steady_clock::now());
      // Ours: forked (a socket pair), or `cohort exec` started by this process's launcher.
      agent.local = p->local || (p->pid > 0 && parentOf(p->pid) == ::getpid());
      agent.pid = agent.local ? p->pid : -1;
      agent.host = p->host;
      agent.hostname = p->hostname;
      agent.dialled = true;
      agent.channel->setLogSink(
          [this, node](size_t index, std::string_view bytes) { onLog(node, index, bytes); });
      agent.channel->setOnPending([this, node](bool pending) {
        if (agents_[node].channel) {
          (void)loop_.modify(agents_[node].channel->fd(), EPOLLIN | (pending ? uint32_t{EPOLLOUT} : 0u));
        }
      });
      (void)loop_.add(agent.channel->fd(), EPOLLIN, [this, node](uint32_t events) {
        if ((events & EPOLLOUT) && agents_[node].channel) (void)agents_[node].channel->flush();
        if (events & ~uint32_t{EPOLLOUT}) onAgent(node);
      });
      if (!all_connected_ && allConnected()) {
        all_connected_ = true;
        if (auto placed = place(); !placed) {
          feed(AgentLaunchFailed{-1, "placing the job on its nodes: " + placed.error().message});
        }
      }
      feed(AgentConnected{node});
      for (size_t i = used; i < messages->size() && !finished_; ++i) handle(node, (*messages)[i]);
      return;
    }
    if (p->channel->closed()) drop();
  }

  bool allConnected() const {
    return std::all_of(agents_.begin(), agents_.end(), [](const Agent& a) { return a.channel != nullptr; });
  }

  // Every agent said where its node is: the plan gets the nodes' real addresses.
  Result<void> place() {
    if (!options_.place) return {};
    std::vector<HostAddress> hosts;
    for (const Agent& agent : agents_) {
      // It goes into every rank's variables and files: an IPv4 address and an interface name,
      // nothing else, even from an agent that knows the secret.
      in_addr parsed{};
      const std::string& ifname = agent.host.interface;
      const bool plain_ifname =
          ifname.size() <= 15 && std::all_of(ifname.begin(), ifname.end(), [](char c) {
            return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
          });
      if (::inet_pton(AF_INET, agent.host.address.c_str(), &parsed) != 1 || !plain_ifname) {
        return fail(Code::kInvalidArgument,
                    "node " + std::to_string(hosts.size()) + "'s agent sent no usable address ('" +
                        agent.host.address.substr(0, 64) + "')");
      }
      hosts.push_back(agent.host);
    }
    COHORT_ASSIGN(plan_, options_.place(hosts));
    return {};
  }

  void onAgent(int node) {
    Agent& agent = agents_[node];
    if (!agent.channel) return;
    const uint64_t before = agent.channel->bytesReceived();
    auto messages = agent.channel->receive();
    if (agent.channel->bytesReceived() != before) {
      agent.silence.heard(std::chrono::steady_clock::now());
    }
    if (messages) {
      for (const Message& m : *messages) {
        if (finished_ || !agent.channel) return;
        handle(node, m);
      }
    }
    if (!messages || agent.channel->closed()) {
      if (!messages) {
        std::fprintf(stderr, "cohort: node %d: %s\n", node, messages.error().message.c_str());
      }
      loop_.remove(agent.channel->fd());
      agent.channel.reset();  // it cannot run or report ranks any more
      const std::string where = whereIs(static_cast<size_t>(node));
      feed(AgentLost{node, where.empty() ? "" : where + "its connection closed"});
    }
  }

  // One message of an agent, as an event for the decisions.
  // One message of an agent, decoded by the channel's one codec (agent/protocol.h), as an event
  // for the decisions. A message that cannot be read is from an agent that cannot be trusted to
  // report its ranks: it is lost.
  void handle(int node, const Message& m) {
    auto decoded = protocol::decodeToCoordinator(m);
    if (!decoded) {
      std::fprintf(stderr, "cohort: node %d: %s\n", node, decoded.error().message.c_str());
      drop(node, "it sent what cannot be read: " + decoded.error().message);
      return;
    }
    std::visit([this, node](const auto& message) { on(node, message); }, *decoded);
  }

  void on(int, const protocol::Heartbeat&) {}  // word from it is all it says
  // Said once, before the handshake's end (onPending); again, it is not for us.
  void on(int, const protocol::Hello&) {}
  void on(int, const protocol::Auth&) {}

  void on(int node, const protocol::Started& m) {
    if (static_cast<size_t>(node) < startup_.size()) startup_[node].spawned = sinceStart();
    feed(NodeStarted{node, m.attempt, m.count});
  }

  void on(int node, const protocol::Staged& m) {
    // Its job directory is not this one: it gets the files cohort wrote for the ranks here,
    // before its "start".
    if (m.own_dir && !plan_.files.empty()) {
      (void)agents_[node].channel->send(protocol::encode(protocol::Files{plan_.files}));
    }
    staged_seconds_.resize(plan_.nodes.size(), -1);
    staged_seconds_[node] = m.seconds;
    feed(NodeStaged{node, m.files, m.bytes, m.seconds, m.own_dir});
  }

  void on(int node, const protocol::OutputsCopied& m) {
    std::vector<OutputResult> results;
    for (const protocol::OutputCopied& r : m.results) {
      results.push_back({"", "", r.files, r.bytes, r.error});
    }
    feed(NodeOutputsCopied{node, std::move(results)});
  }

  void on(int node, const protocol::StageFailed& m) { feed(StagingFailed{node, m.error}); }

  void on(int node, const protocol::Exited& m) {
    endOutput(node, m.rank);
    // Who stopped it: this coordinator's decision, its agent on its own, or nobody.
    const StoppedBy by = m.stopped_by == "coordinator" ? StoppedBy::kCoordinator
                         : m.stopped_by == "agent"     ? StoppedBy::kAgent
                         : m.by_cohort                 ? StoppedBy::kCoordinator
                                                       : StoppedBy::kNobody;
    feed(RankExited{node, m.attempt, m.rank, m.code, m.signal, by, m.time, m.tail,
                    m.memory_limit, m.stop_reason.substr(0, 512)});
  }

  void on(int node, const protocol::Limits& m) {
    feed(LimitsNotEnforced{node, m.why.substr(0, 1024)});
  }

  void on(int node, const protocol::Idle& m) { feed(NodeIdle{node, m.attempt}); }
  void on(int node, const protocol::Progress& m) { onProgress(node, m); }
  void on(int node, const protocol::Stacks& m) { onStacks(node, m); }
  void on(int node, const protocol::Signalled& m) { feed(NodeSignalled{node, m.signal}); }

  void on(int node, const protocol::Debug& m) {
    const plan::NodePlan& plan = plan_.nodes[node];
    if (m.index < 0 || static_cast<size_t>(m.index) >= plan.ranks.size()) return;
    feed(RankDebugged{node, m.attempt, plan.ranks[m.index].rank, m.state, m.reason.substr(0, 32),
                      m.where.substr(0, 512), m.time});
  }

  // Agent `node` cannot be heard any more (`why`): it is lost.
  void drop(int node, const std::string& why) {
    Agent& agent = agents_[node];
    if (!agent.channel) return;
    loop_.remove(agent.channel->fd());
    agent.channel.reset();
    launcher_.abandon(node);
    feed(AgentLost{node, whereIs(static_cast<size_t>(node)) + why});
  }

  void onSignal() {
    while (int sig = signals_.next()) {
      if (finished_) continue;
      if (sig == SIGUSR1) {
        if (decisions_.finished()) continue;
        collectStacks(/*on_request=*/true);
        continue;
      }
      feed(StopSignal{sig});
    }
  }

  plan::Plan plan_;  // its hosts are final once every agent is there (place())
  job::Layout layout_;
  AgentLauncher& launcher_;
  const CoordinatorOptions& options_;
  proc::EventLoop& loop_;
  proc::SignalFd signals_;
  proc::Timer connect_;
  proc::Timer runtime_;
  proc::Timer exit_;
  proc::Timer heartbeat_;
  proc::Timer launch_poll_;
  proc::Timer hang_;
  proc::Timer stacks_deadline_;
  std::string secret_;
  JobDecisions decisions_;
  std::vector<Agent> agents_;
  UniqueFd listener_;
  // Connections that have not proved the job's secret (agent/strangers.h), the timer of the
  // next one's deadline (made with the first), and a descriptor to give up when there is no
  // other to accept and close one with.
  Strangers strangers_{Strangers::capacityFor(plan_.nodes.size()), Strangers::kDeadline};
  std::map<uint64_t, std::shared_ptr<Pending>> strangers_by_id_;
  uint64_t last_stranger_ = 0;
  std::unique_ptr<proc::Timer> strangers_deadline_;
  UniqueFd spare_fd_;
  UniqueFd events_;
  std::optional<PreparedFile> result_file_;  // result.json until it is first written
  std::unique_ptr<Reporter> reporter_;  // null when no server follows the job
  std::vector<std::vector<std::optional<LogFile>>> logs_;  // [node][index in the node's plan]
  Console console_{STDOUT_FILENO};  // the merged stream of every rank's lines
  std::vector<std::vector<std::optional<RankOutput>>> echo_;  // [node][index], to console_
  std::vector<std::vector<std::unique_ptr<Teed>>> teed_;  // [node][index]; null: not a launcher
  std::string mark_;  // in layout_.markFile(), for agents to tell whether they share it
  std::vector<std::string> plan_lines_;  // [node]: its "plan" message, made while agents start
  bool all_connected_ = false;  // every agent has been there (once is enough)
  std::string queued_;  // why the launcher's cluster holds the agents, while it does
  bool said_log_error_ = false;
  std::vector<Message> progress_;  // [node]: its ranks' latest progress
  // [node][index]: its latest output or heartbeat, as its node's last report said
  std::vector<std::vector<int64_t>> last_output_;
  int progress_attempt_ = 0;
  // A hang's stacks, while the agents send them.
  bool collecting_ = false;
  bool on_request_ = false;  // for `cohort stacks`, not a hang
  std::chrono::steady_clock::time_point attempt_start_{};
  std::vector<Startup> startup_;        // [node], of the latest attempt
  std::vector<double> staged_seconds_;  // [node]
  bool said_startup_ = false;
  UniqueFd metrics_;    // metrics.jsonl, once a rank logged a metric
  UniqueFd resources_;  // resources.jsonl, once an agent sampled a running rank
  bool said_metrics_error_ = false;
  std::set<int> stacks_waiting_;  // nodes
  std::vector<RankStack> stacks_;
  int port_ = 0;
  bool finished_ = false;
  bool reaped_ = false;  // the agents' processes are gone
  JobOutcome outcome_;
};

}  // namespace

Result<JobOutcome> runCoordinator(const plan::Plan& plan, AgentLauncher& launcher,
                                  const CoordinatorOptions& options) {
  raiseFileLimit();
  COHORT_ASSIGN(proc::SignalFd signals, proc::SignalFd::create({SIGINT, SIGTERM, SIGHUP, SIGUSR1}));
  COHORT_ASSIGN(auto loop, proc::EventLoop::create());
  COHORT_ASSIGN(Timers timers, Timers::create());
  std::string secret = options.secret;
  if (secret.empty()) {
    COHORT_ASSIGN(secret, makeSecret());
  }
  auto coordinator = std::make_unique<Coordinator>(
      plan, launcher, options, *loop, std::move(signals), std::move(timers), std::move(secret));
  auto outcome = coordinator->run();
  if (outcome && options.process_ends_after) (void)coordinator.release();
  return outcome;
}

}  // namespace cohort::agent
