#include "agent/node_agent.h"

#include <dirent.h>
#include <fcntl.h>
#include <malloc.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <thread>

#include "agent/agent_decisions.h"
#include "agent/channel.h"
#include "agent/debug_status.h"
#include "agent/gpu.h"
#include "agent/liveness.h"
#include "agent/preload.h"
#include "agent/protocol.h"
#include "agent/rank_env.h"
#include "agent/rank_output.h"
#include "plan/python_helpers.h"
#include "agent/staging.h"
#include "plan/plan.h"
#include "proc/cgroup.h"
#include "proc/event_loop.h"
#include "proc/spawn.h"
#include "proc/tmpfs.h"
#include "util/fd.h"
#include "util/net.h"
#include "util/text.h"

namespace cohort::agent {

namespace {

constexpr size_t kTailLines = 20;
// How often the agent tells the coordinator how its ranks are doing.
constexpr Millis kProgressEvery{2000};
constexpr Millis kFirstProgress{500};  // after an attempt's start
constexpr Millis kStackDumpTimeout{5000};  // one rank's py-spy dump
constexpr Millis kStacksTimeout{10000};    // every rank of the node
constexpr Millis kLookEvery{500};  // at the latest: the ranks' debug status, lost stops
// Ranks' output waiting in the channel for a coordinator that does not read (stopped, starved):
// past the high mark the agent stops reading the ranks' pipes (a rank then waits on its own
// output, as it would on a full terminal) until the channel is down to the low mark; nothing is
// dropped.
constexpr size_t kOutputHighWater = 32u << 20;
constexpr size_t kOutputLowWater = 8u << 20;
// What the agent's last words (exits, outputs copied) have to reach the coordinator as it leaves.
constexpr Millis kLastWordsTimeout{30000};

// py-spy reads a Python process's stack from outside, without stopping it or changing the
// script: from PATH, else beside cohort (venv-tools/bin, where scripts/test installs it).
std::string findPySpy() {
  const char* path = std::getenv("PATH");
  if (auto found = proc::findProgram("py-spy", path ? path : "/usr/local/bin:/usr/bin:/bin", "/")) {
    return *found;
  }
  char exe[4096];
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return "";
  const std::string self(exe, static_cast<size_t>(n));
  const std::string beside = self.substr(0, self.rfind('/')) + "/venv-tools/bin/py-spy";
  return ::access(beside.c_str(), X_OK) == 0 ? beside : "";
}

// The state letter of /proc/PID/stat (R, S, D, T, t, Z...); "?" when it cannot be read.
std::string processState(pid_t pid) {
  const std::vector<std::string> fields = proc::statFields(pid);
  return fields.empty() || fields[0].empty() ? "?" : fields[0].substr(0, 1);
}

// What a rank's py-spy dump said: the stack, or why there is none.
protocol::RankStack dumpStack(const std::string& py_spy, pid_t pid,
                              std::chrono::steady_clock::time_point deadline) {
  protocol::RankStack out;
  auto error = [&out](std::string why) {
    out.error = std::move(why);
    return out;
  };
  if (py_spy.empty()) return error("py-spy is not installed (pip install py-spy)");
  if (std::chrono::steady_clock::now() >= deadline) return error("out of time");
  proc::SpawnRequest req;
  req.argv = {py_spy, "dump", "--pid", std::to_string(pid), "--nonblocking"};
  req.env = {"PATH=/usr/bin:/bin"};
  req.cwd = "/";
  auto got = proc::runCaptured(req, kStackDumpTimeout);
  if (!got) return error(got.error().message);
  if (got->status.shellCode() != 0) {
    // py-spy's first line says why ("Error: Failed to find python version...").
    std::string why = got->err.substr(0, got->err.find('\n'));
    if (startsWith(why, "Error: ")) why = why.substr(7);
    return error("py-spy: " + (why.empty() ? got->status.describe() : why.substr(0, 300)));
  }
  out.stack = got->out.substr(0, 16 * 1024);  // 1,024 ranks fit in one message
  return out;
}

// Calls `fn(pid, fields)` for every process in /proc, or only for those in the cgroup at
// `cgroup` when one is given and readable (what a node's ranks can be: a machine may run many
// agents, and reading every process's stat for each of them grows as their square), with the
// fields of its stat line (proc::statFields).
template <class Fn>
void forEachProcess(Fn fn, const std::string& cgroup = {}) {
  auto visit = [&](pid_t pid) {
    const std::vector<std::string> fields = proc::statFields(pid);
    if (!fields.empty()) fn(pid, fields);
  };
  if (!cgroup.empty() && ::access((cgroup + "/cgroup.procs").c_str(), R_OK) == 0) {
    // The node's cgroup and those of its ranks below it.
    for (pid_t pid : proc::cgroupProcesses(cgroup)) visit(pid);
    return;
  }
  DIR* dir = ::opendir("/proc");
  if (!dir) return;
  while (dirent* entry = ::readdir(dir)) {
    if (entry->d_name[0] < '0' || entry->d_name[0] > '9') continue;
    visit(static_cast<pid_t>(std::atoi(entry->d_name)));
  }
  ::closedir(dir);
}

// What the processes of one process group (a rank and what it started) use now: CPU time
// (theirs and their reaped children's) and resident memory.
struct Usage {
  double cpu_seconds = 0;
  int64_t rss_bytes = 0;
};

// With `group_of`, also each process's group (to find a rank's processes among nvidia-smi's).
std::map<pid_t, Usage> usageByProcessGroup(const std::string& cgroup,
                                           std::map<pid_t, pid_t>* group_of = nullptr) {
  std::map<pid_t, Usage> out;
  static const double ticks = static_cast<double>(::sysconf(_SC_CLK_TCK));
  static const int64_t page = ::sysconf(_SC_PAGESIZE);
  forEachProcess(
      [&](pid_t pid, const std::vector<std::string>& f) {
        if (f.size() < 22) return;
        auto num = [&](size_t i) { return std::strtoll(f[i].c_str(), nullptr, 10); };
        // pgrp, then utime stime cutime cstime, then rss in pages
        if (group_of) (*group_of)[pid] = static_cast<pid_t>(num(2));
        Usage& u = out[static_cast<pid_t>(num(2))];
        u.cpu_seconds += static_cast<double>(num(11) + num(12) + num(13) + num(14)) / ticks;
        u.rss_bytes += num(21) * page;
      },
      cgroup);
  return out;
}

// Whether some process of process group `pgid` would take `sig` now: neither ignores nor blocks
// it (/proc/<pid>/status). A sandboxed rank's group ignores the stop signals until the rank's
// own program runs (plan/isolation.cc): a stop sent before then is lost, and must be sent again.
bool groupTakes(pid_t pgid, int sig, const std::string& cgroup) {
  const uint64_t bit = uint64_t{1} << (sig - 1);
  bool takes = false;
  forEachProcess([&](pid_t pid, const std::vector<std::string>& f) {
    if (takes || f.size() < 3 || std::atoi(f[2].c_str()) != pgid) return;
    auto status = readFile("/proc/" + std::to_string(pid) + "/status");
    if (!status) return;
    uint64_t ignored = 0, blocked = 0;
    for (const std::string& line : split(*status, '\n')) {
      if (startsWith(line, "SigIgn:")) ignored = std::strtoull(line.c_str() + 7, nullptr, 16);
      if (startsWith(line, "SigBlk:")) blocked = std::strtoull(line.c_str() + 7, nullptr, 16);
    }
    takes = !((ignored | blocked) & bit);
  }, cgroup);
  return takes;
}

// Processes whose parent is `parent`.
std::vector<pid_t> childrenOf(pid_t parent) {
  std::vector<pid_t> out;
  forEachProcess([&](pid_t pid, const std::vector<std::string>& f) {
    if (f.size() > 1 && std::atoi(f[1].c_str()) == parent) out.push_back(pid);
  });
  return out;
}

// A job id as one cgroup name: letters, digits, '.', '_' and '-' only, never "." or "..".
std::string cgroupName(const std::string& id) {
  std::string name;
  for (char c : id) {
    bool plain = std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
    name.push_back(plain ? c : '_');
  }
  if (name.empty() || name[0] == '.') name.insert(0, "job");
  return name.substr(0, 200);
}

// Where cohort puts a node's ranks: <the agent's own cgroup, or COHORT_CGROUP_ROOT>/cohort/
// <job id>/node<i>/rank<r>, one cgroup per rank (its resource requests are per rank), and the
// watchdog that removes them if the agent dies. Empty when the machine gives no writable
// cgroup; `why` then says so.
struct CgroupSupport {
  std::optional<std::string> base;
  std::optional<proc::CgroupWatchdog> watchdog;
  std::string why;
};

// Said once per agent, on stderr: the job runs, with the weaker guarantee.
void sayNoCgroup(int node, const std::string& why) {
  std::fprintf(stderr,
               "cohort exec: node %d: no cgroup for the ranks (%s): a process that leaves its "
               "process group is only found while this agent lives\n",
               node, why.c_str());
}

// The value of variable `name` in a rank's plan; "" when it has none.
std::string planEnv(const plan::RankPlan& rank, const std::string& name) {
  for (const auto& [key, value] : rank.env) {
    if (key == name) return value;
  }
  return "";
}

// cohort.heartbeat(): a rank says it is alive, without a line of output, by touching its file
// ($COHORT_HEARTBEAT_FILE, in its node's work directory). Output would have to be taken out of
// the rank's log again (every byte goes there as it came, partial lines included), and a
// descriptor handed to the rank would not survive launchers that close what they inherit
// (torchrun, mpirun, subprocess); a variable and a path do, in the sandbox too, and the agent is
// on the rank's node on every backend. The file is the rank's: it is only looked at (lstat: a
// link is not followed, nothing is opened or read), and any change of its times is a sign of
// life. What the agent saw last, or nothing when there is no such file.
std::optional<std::pair<timespec, timespec>> heartbeatTimes(const std::string& path) {
  struct stat st {};
  if (path.empty() || ::lstat(path.c_str(), &st) != 0) return std::nullopt;
  return std::pair{st.st_mtim, st.st_ctim};
}

bool sameTimes(const std::optional<std::pair<timespec, timespec>>& a,
               const std::optional<std::pair<timespec, timespec>>& b) {
  auto same = [](const timespec& x, const timespec& y) {
    return x.tv_sec == y.tv_sec && x.tv_nsec == y.tv_nsec;
  };
  if (!a || !b) return !a && !b;
  return same(a->first, b->first) && same(a->second, b->second);
}

struct Rank {
  plan::RankPlan plan;
  proc::Child child;
  UniqueFd out;  // read end of the rank's output pipe
  std::optional<RankOutput> output;
  int64_t last_output = 0;     // unix nanos of its latest output; 0: none yet
  std::string heartbeat_file;  // $COHORT_HEARTBEAT_FILE
  std::optional<std::pair<timespec, timespec>> heartbeat_seen;  // its times, as last seen
  int64_t last_heartbeat = 0;  // unix nanos when the agent saw it change; 0: not yet
  std::string debug_file;      // $COHORT_DEBUG_FILE, in a job with debug:
  std::optional<DebugStatus> debug_said;  // what the coordinator was told last
  bool running = false;
  bool signalled = false;  // cohort sent it a signal
  std::string stopped_by;  // then: "coordinator" (a stop it decided) or "agent" (on its own)
  std::string stop_reason;  // "agent": why
  bool stop_lost = false;  // its stop signal came when no process of it could take it
  std::chrono::steady_clock::time_point spawned;
  std::optional<proc::Cgroup> cgroup;  // its own, below the node's
  bool memory_limited = false;         // cgroup holds it to plan.memory_bytes
  UniqueFd oom_events;                 // cgroup v1: readable when the kernel kills in it for memory
  bool over_memory = false;            // it said so: the agent killed the rest of the rank
};

class Agent {
 public:
  Agent(const AgentOptions& options, proc::EventLoop& loop, proc::SignalFd signals,
        proc::Timer grace, proc::Timer progress, proc::Timer heartbeat, Channel channel,
        CgroupSupport cgroups)
      : options_(options),
        loop_(loop),
        signals_(std::move(signals)),
        grace_(std::move(grace)),
        progress_(std::move(progress)),
        heartbeat_(std::move(heartbeat)),
        channel_(std::move(channel)),
        cgroups_(std::move(cgroups)) {}
  ~Agent() {
    if (chore_.joinable()) chore_.join();
  }

  Result<int> run() {
    COHORT_ASSIGN(nonce_, makeSecret());
    // Where this node's ranks are reached: the coordinator places the job with it.
    COHORT_ASSIGN(HostAddress self, chooseAddress(options_.interface, options_.cidr,
                                                  options_.coordinator_addr));
    COHORT_TRY(channel_.send(protocol::encode(protocol::Hello{
        options_.node, nonce_, ::getpid(), self.address, self.interface, hostName()})));
    channel_.setOnPending([this](bool pending) {
      (void)loop_.modify(channel_.fd(), EPOLLIN | (pending ? uint32_t{EPOLLOUT} : 0u));
    });
    COHORT_TRY(loop_.add(channel_.fd(), EPOLLIN, [this](uint32_t events) {
      if (events & EPOLLOUT) onWritable();
      if (events & ~uint32_t{EPOLLOUT}) onChannel();
    }));
    COHORT_TRY(loop_.add(signals_.fd(), EPOLLIN, [this](uint32_t) { onSignal(); }));
    COHORT_TRY(loop_.add(grace_.fd(), EPOLLIN, [this](uint32_t) { onGraceOver(); }));
    COHORT_TRY(loop_.add(progress_.fd(), EPOLLIN, [this](uint32_t) { onProgressTime(); }));
    COHORT_TRY(loop_.add(heartbeat_.fd(), EPOLLIN, [this](uint32_t) { onHeartbeatTime(); }));
    const char* path = std::getenv("PATH");
    gpu_.emplace(loop_, path ? path : "/usr/local/bin:/usr/bin:/bin", [this] { reapOrphans(); });
    COHORT_TRY(loop_.run());
    if (chore_.joinable()) chore_.join();
    // What waits in the channel (the last exits, outputs_copied) goes before we do.
    (void)channel_.drain(kLastWordsTimeout);
    gpu_.reset();
    template_.reset();  // killed and reaped
    // The node's cgroup holds the ranks' and the attempts' below it; the template's is beside it.
    bool cgroups_left = false;
    for (std::optional<proc::Cgroup>* cgroup : {&template_cgroup_, &cgroup_}) {
      if (!*cgroup) continue;
      if (auto removed = (*cgroup)->remove(); !removed) {
        std::fprintf(stderr, "cohort exec: node %d: %s\n", options_.node,
                     removed.error().message.c_str());
        cgroups_left = true;
      }
    }
    // Nothing is left for the watchdog to remove, unless a removal failed: then it tries again
    // once we are gone.
    if (cgroups_.watchdog && !cgroups_left) cgroups_.watchdog->retire();
    proc::unmountTmpfs(node_.tmpfs_dirs);
    if (auto removed = removeScratchDirs(node_); !removed) {
      std::fprintf(stderr, "cohort exec: node %d: %s\n", options_.node,
                   removed.error().message.c_str());
    }
    return decisions_.exitCode();
  }

 private:
  // What the agent's decisions (agent/agent_decisions.h) say to what happened, done in order.
  void decide(const AgentInput& input) {
    for (const AgentAction& action : decisions_.on(input)) {
      std::visit([this](const auto& a) { act(a); }, action);
    }
  }

  // Every running rank's process group gets the signal (the rank's one notice, never repeated
  // but for a sandbox that could not take it yet, or SIGKILL); SIGKILL follows a notice when its
  // grace ends. A rank is stopped by whoever decided its first signal.
  void act(const SignalRanks& a) {
    const bool notice = a.grace.count() > 0;
    for (Rank& rank : ranks_) {
      if (!rank.running) continue;
      if (!rank.signalled) {
        rank.stopped_by = a.stopped_by;
        rank.stop_reason = a.reason;
      }
      rank.signalled = true;
      // Looked at before the signal: a process that takes it then gets it.
      if (notice && mayLoseStop(rank)) {
        rank.stop_lost = !groupTakes(rank.child.pid, a.signal, cgroupPath());
      }
      ::kill(-rank.child.pid, a.signal);
      // A stopped rank (SIGSTOP, Ctrl-Z) takes the signal only once it runs again: as systemd
      // does, SIGCONT follows.
      if (notice) ::kill(-rank.child.pid, SIGCONT);
    }
    if (notice) grace_.arm(a.grace);
  }
  void act(const KillRanks&) {
    for (Rank& rank : ranks_) {
      if (rank.running) ::kill(-rank.child.pid, SIGKILL);
    }
  }
  void act(const DisarmGrace&) { grace_.disarm(); }
  void act(const TellSignalled& a) { send(protocol::Signalled{a.signal}); }
  void act(const StopListening&) { loop_.remove(channel_.fd()); }
  void act(const Leave&) { leave(); }

  // Says it is alive, and gives up on a coordinator on another machine that has said nothing
  // for the heartbeat timeout while we were there to hear it (its machine hung, the network
  // between them went away): the ranks stop. A coordinator on this machine (our parent, over a
  // socket pair) is never given up for silence: its connection ends when it dies, and a
  // coordinator that was stopped or starved finds its job as it was (agent/liveness.h).
  void onHeartbeatTime() {
    heartbeat_.consume();
    if (decisions_.lostCoordinator()) return;
    onChannel();  // what came while the loop was busy counts
    if (decisions_.lostCoordinator()) return;
    const Millis silent = silence_.tick(std::chrono::steady_clock::now());
    if (!coordinator_local_ && silent > heartbeat_timeout_) {
      const std::string why =
          "no word from the coordinator in " + formatDuration(heartbeat_timeout_) + loadNote();
      std::fprintf(stderr, "cohort exec: node %d: %s\n", options_.node, why.c_str());
      lostCoordinator(why);
      return;
    }
    heartbeatIfDue();
    resendLostStops();
    checkDebugStatus();
    heartbeat_.arm(tickEvery());
  }

  // The heartbeat timer's period: a heartbeat when one is due, and the looks that must be
  // frequent whatever the timeout (the ranks' debug status, stops a sandbox could not take yet).
  Millis tickEvery() const { return std::min(heartbeat_every_, kLookEvery); }

  // debug: each running rank's word on its debugger (agent/debug_status.h), to the coordinator
  // when it changes: a rank that waits for one, or has one, holds the job's timeouts.
  void checkDebugStatus() {
    for (size_t i = 0; i < ranks_.size(); ++i) {
      Rank& rank = ranks_[i];
      if (!rank.running || rank.debug_file.empty()) continue;
      auto status =
          readDebugStatus(rank.debug_file, rank.plan.uid >= 0 ? static_cast<uid_t>(rank.plan.uid)
                                                              : static_cast<uid_t>(-1));
      if (!status || (rank.debug_said && *rank.debug_said == *status)) continue;
      auto say = [&](const std::string& state) {
        send(protocol::Debug{attempt_, static_cast<int64_t>(i), state, status->reason,
                             status->where, nowUnixNanos()});
      };
      // A debugger that attached and left between two looks is told as having been there.
      const int64_t attaches_seen = rank.debug_said ? rank.debug_said->attaches : 0;
      const bool missed_attach = status->attaches > attaches_seen && status->state != "attached";
      // Only a change of state is news; a new seq with the same state is not.
      const bool news = missed_attach || !rank.debug_said ||
                        rank.debug_said->state != status->state ||
                        rank.debug_said->reason != status->reason;
      rank.debug_said = *status;
      if (!news) continue;
      if (missed_attach) say("attached");
      say(status->state);
    }
  }

  // A stop signal that reached a rank's group before any of its processes could take it (a
  // sandbox still starting) is sent again once one can, until the grace period ends in SIGKILL.
  void resendLostStops() {
    if (!decisions_.stopping() || !decisions_.graceArmed()) return;
    const int sig = decisions_.sentSignal();
    for (Rank& rank : ranks_) {
      if (rank.running && rank.stop_lost && groupTakes(rank.child.pid, sig, cgroupPath())) {
        rank.stop_lost = false;
        ::kill(-rank.child.pid, sig);
      }
    }
  }

  std::string cgroupPath() const { return cgroup_ ? cgroup_->path() : ""; }

  // Only a rank started with the stop signals ignored (`env --ignore-signal=...`: a sandbox,
  // plan/isolation.cc) can, just after its start, have every process ignore them.
  static bool mayLoseStop(const Rank& rank) {
    const std::vector<std::string>& argv = rank.plan.argv;
    return argv.size() > 1 && argv[0] == plan::kSandboxEnv &&
           startsWith(argv[1], "--ignore-signal=") &&
           std::chrono::steady_clock::now() - rank.spawned < std::chrono::seconds(10);
  }

  // Also called from loops that may take long (spawning many ranks): silence is loss.
  void heartbeatIfDue() {
    const auto now = std::chrono::steady_clock::now();
    if (decisions_.lostCoordinator() || now - last_sent_ < heartbeat_every_) return;
    last_sent_ = now;
    (void)channel_.send(protocol::encode(protocol::Heartbeat{}));
  }

  void onChannel() {
    if (decisions_.lostCoordinator()) return;
    const uint64_t before = channel_.bytesReceived();
    auto messages = channel_.receive();
    if (channel_.bytesReceived() != before || channel_.closed()) {
      silence_.heard(std::chrono::steady_clock::now());
    }
    if (!messages) {
      std::fprintf(stderr, "cohort exec: node %d: %s\n", options_.node,
                   messages.error().message.c_str());
      lostCoordinator("what the coordinator sent could not be read: " + messages.error().message);
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
    if (channel_.closed()) lostCoordinator("its connection to the coordinator closed");
  }

  // The coordinator's answer to hello: it proves it knows the job's secret, and so do we.
  void onChallenge(const protocol::Challenge& m) {
    const std::string expected = handshakeProof(options_.secret, "coordinator", nonce_, options_.node);
    if (!secretsEqual(m.proof, expected)) {
      std::fprintf(stderr,
                   "cohort exec: node %d: the coordinator at %s:%d did not prove that it knows "
                   "the job's secret; leaving it\n",
                   options_.node, options_.coordinator_addr.c_str(), options_.coordinator_port);
      lostCoordinator("the coordinator did not prove that it knows the job's secret");
      return;
    }
    // A coordinator that started us on this machine is our parent: it is watched as a process
    // (agent/liveness.h), and never given up for silence.
    coordinator_local_ = options_.coordinator_fd >= 0 || m.pid == ::getppid();
    send(protocol::Auth{handshakeProof(options_.secret, "agent", m.nonce, options_.node)});
    authenticated_ = true;
  }

  // One message of the coordinator, decoded by the channel's one codec (agent/protocol.h). What
  // cannot be read, or comes before the coordinator proved the secret, ends the agent's trust in
  // it.
  void handle(const Message& m) {
    auto decoded = protocol::decodeToAgent(m);
    if (!decoded) {
      std::fprintf(stderr, "cohort exec: node %d: %s\n", options_.node,
                   decoded.error().message.c_str());
      lostCoordinator("what the coordinator sent could not be read: " + decoded.error().message);
      return;
    }
    if (!authenticated_) {
      const auto* challenge = std::get_if<protocol::Challenge>(&*decoded);
      if (challenge) {
        onChallenge(*challenge);
      } else {
        onChallenge(protocol::Challenge{});  // no proof: it is left
      }
      return;
    }
    std::visit([this](const auto& message) { on(message); }, *decoded);
  }

  void on(const protocol::Heartbeat&) {}  // word from it is all it says
  void on(const protocol::Challenge&) {}  // once is enough

  void on(const protocol::PlanMessage& m) {
    node_ = m.node;
    workdir_ = m.workdir.empty() ? "." : m.workdir;
    job_dir_ = m.job_dir;
    // An agent that finds no mark (no shared filesystem) makes the job directory itself.
    own_dir_ = startsWith(job_dir_, "/") && !sharesJobDir(job_dir_, m.mark);
    heartbeat_every_ = Millis(std::max<int64_t>(100, m.heartbeat_ms));
    heartbeat_timeout_ = Millis(std::max<int64_t>(1000, m.heartbeat_timeout_ms));
    silence_ = Silence(tickEvery(), std::chrono::steady_clock::now());
    decisions_.configure(m.stop_signal, Millis(m.grace_ms));
    heartbeat_.arm(tickEvery());
    trim_after_message_ = true;  // the plan's JSON was large and is garbage now
    setUpCgroup();
  }

  void on(const protocol::Stage&) { startStaging(); }
  void on(const protocol::Files& m) { writeFiles(m); }
  void on(const protocol::Start& m) { startAttempt(m.attempt); }
  void on(const protocol::StacksRequest&) { sendStacks(); }

  void on(const protocol::Stop& m) {
    if (pending_attempt_) {
      // Stopped while the preload template still imports: the attempt starts nothing.
      attempt_ = *pending_attempt_;
      pending_attempt_.reset();
      ranks_.clear();
      send(protocol::Started{attempt_, 0, nowUnixNanos()});
      attemptOver();
    }
    decide(StopAsked{Millis(m.grace_ms), m.signal, m.exit.has_value(), m.exit.value_or(0)});
  }

  void on(const protocol::Exit& m) {
    outputs_.insert(outputs_.end(), m.outputs.begin(), m.outputs.end());
    decide(ExitAsked{m.code});
  }

  // Sends one message to the coordinator; one that has gone is found by the loop.
  void send(const protocol::ToCoordinator& message) { (void)channel_.send(protocol::encode(message)); }

  // Nothing of the job runs here any more. A node whose job directory is its own copies the
  // outputs it was given first, and says what it copied.
  void leave() {
    if (outputs_.empty() || decisions_.lostCoordinator()) {
      loop_.quit();
      return;
    }
    std::vector<plan::OutputPlan> outputs = std::move(outputs_);
    outputs_.clear();
    auto results = std::make_shared<protocol::OutputsCopied>();
    runChore(
        [outputs, results, as = ranksIdentity(node_)] {
          for (const plan::OutputPlan& o : outputs) {
            auto copied = copyOutput(o, as);
            results->results.push_back(
                copied ? protocol::OutputCopied{copied->files, copied->bytes, ""}
                       : protocol::OutputCopied{0, 0, copied.error().message});
          }
        },
        [this, results] {
          send(std::move(*results));
          loop_.quit();
        });
  }

  // A hang: every running rank's state and Python stack, on the chore's thread (a dump takes a
  // few milliseconds, a dead end up to kStackDumpTimeout); the answer is "stacks". A rank is its
  // process group: the leader may be a wrapper (a sandbox, a shell) with Python below it, and a
  // stopped or D-state process anywhere in it is what holds the rank up.
  void sendStacks() {
    auto answer = std::make_shared<std::vector<protocol::RankStack>>();
    std::map<pid_t, std::pair<size_t, std::vector<pid_t>>> groups;  // leader -> index, leader first
    for (size_t i = 0; i < ranks_.size(); ++i) {
      if (ranks_[i].running) groups[ranks_[i].child.pid] = {i, {ranks_[i].child.pid}};
    }
    forEachProcess(
        [&](pid_t pid, const std::vector<std::string>& f) {
          if (f.size() < 3) return;
          auto g = groups.find(static_cast<pid_t>(std::atoi(f[2].c_str())));
          if (g != groups.end() && pid != g->first) g->second.second.push_back(pid);
        },
        cgroupPath());
    auto work = [groups, answer, busy = chore_.joinable()] {
      const std::string py_spy = busy ? "" : findPySpy();
      const auto deadline = std::chrono::steady_clock::now() + kStacksTimeout;
      constexpr size_t kTries = 4;  // processes of one group tried for a Python stack
      for (const auto& [leader, rank] : groups) {
        const auto& [index, pids] = rank;
        std::string state = processState(leader);
        for (pid_t pid : pids) {
          const std::string s = processState(pid);
          if (s == "T" || s == "t") {
            state = s;
            break;
          }
          if (s == "D") state = s;
        }
        protocol::RankStack r;
        r.error = busy ? "the agent was busy staging or copying" : "no process";
        for (size_t k = 0; !busy && k < pids.size() && k < kTries; ++k) {
          protocol::RankStack dumped = dumpStack(py_spy, pids[k], deadline);
          if (k == 0 || !dumped.stack.empty()) r = std::move(dumped);
          if (!r.stack.empty() || py_spy.empty()) break;
        }
        r.index = static_cast<int64_t>(index);
        r.state = state;
        answer->push_back(std::move(r));
      }
    };
    auto over = [this, answer] { send(protocol::Stacks{attempt_, std::move(*answer)}); };
    if (chore_.joinable()) {  // states only: they cannot block
      work();
      over();
      return;
    }
    // py-spy is our child too: orphans wait until the chore is over (reapOrphans).
    runChore(std::move(work), [over] { over(); });
  }

  // What blocks (copies) runs on a thread of its own; its end wakes the loop through an eventfd
  // and `over` runs there. One chore at a time.
  void runChore(std::function<void()> work, std::function<void()> over) {
    chore_done_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    chore_over_ = std::move(over);
    decide(ChoreBegins{});
    (void)loop_.add(chore_done_.get(), EPOLLIN, [this](uint32_t) {
      chore_.join();
      loop_.remove(chore_done_.get());
      chore_done_.reset();
      reapOrphans();  // what came back to us while the chore ran
      std::function<void()> over = std::move(chore_over_);
      over();
      decide(ChoreOver{});
    });
    chore_ = std::thread([this, work = std::move(work)] {
      work();
      uint64_t one = 1;
      ssize_t n = ::write(chore_done_.get(), &one, sizeof one);
      (void)n;
    });
  }

  void startStaging() {
    if (node_.preload) startTemplate();  // its imports overlap the staging and the start barrier
    auto work = [this] {
      // A job directory of its own has nothing yet: make what the ranks expect in it.
      auto prepared = own_dir_ ? prepareOwnJobDir(job_dir_, node_) : Result<void>{};
      if (!prepared) {
        staging_result_ = tl::unexpected<Error>(prepared.error());
      } else {
        staging_result_ = stageInputs(node_);
      }
    };
    if (node_.inputs.empty() && node_.environment.empty()) {
      // Nothing to copy or build, only directories to make: a thread for that, and waking the
      // loop from it, would take longer than the work.
      work();
      onStaged();
      return;
    }
    runChore(std::move(work), [this] { onStaged(); });
  }

  void onStaged() {
    if (staging_result_ && !node_.tmpfs_dirs.empty()) {
      // The job's /tmp and /dev/shm: memory of the node's own, seen by its ranks alone.
      const plan::RankPlan* r = node_.ranks.empty() ? nullptr : &node_.ranks.front();
      if (auto mounted = proc::mountTmpfs(node_.tmpfs_dirs, node_.tmpfs_bytes, r ? r->uid : -1,
                                          r ? r->gid : -1);
          !mounted) {
        staging_result_ = tl::unexpected<Error>(mounted.error());
      }
    }
    if (!staging_result_) {
      send(protocol::StageFailed{staging_result_.error().message});
    } else {
      send(protocol::Staged{staging_result_->files, staging_result_->bytes,
                            staging_result_->seconds, own_dir_});
    }
  }

  // The files cohort generated for the ranks, for a job directory of its own.
  void writeFiles(const protocol::Files& m) {
    if (!own_dir_) return;
    std::vector<plan::GeneratedFile> files = m.files;
    for (plan::GeneratedFile& f : plan::pythonHelperFiles(job_dir_)) files.push_back(std::move(f));
    for (const plan::GeneratedFile& f : files) {
      auto written = writeJobFile(job_dir_, f.path, f.content);
      if (!written) {
        send(protocol::StageFailed{written.error().message});
        return;
      }
    }
  }

  // `why` is what the ranks it stops are told to the coordinator (if it is there after all) as:
  // a stop the agent made on its own, never one the coordinator decided.
  void lostCoordinator(const std::string& why) { decide(CoordinatorLost{why}); }

  // The node's cgroup, made before any rank starts, and handed to the watchdog.
  void setUpCgroup() {
    if (!cgroups_.base) {
      notLimited("no cgroup for the ranks (" + cgroups_.why + ")");
      return;
    }
    if (cgroup_) return;
    std::string job_id;
    for (const auto& [key, value] : node_.ranks.empty() ? plan::KeyValues{} : node_.ranks[0].env) {
      if (key == "COHORT_JOB_ID") job_id = value;
    }
    std::string name = "cohort/" + cgroupName(job_id) + "/node" + std::to_string(options_.node);
    auto cgroup = proc::Cgroup::create(*cgroups_.base, name);
    if (!cgroup && cgroup.error().code == Code::kAlreadyExists) {
      cgroup = proc::Cgroup::create(*cgroups_.base, name + "-" + std::to_string(::getpid()));
    }
    if (!cgroup) {
      withoutCgroup(cgroup.error().message);
      return;
    }
    cgroup_ = std::move(*cgroup);
    if (anyRequests()) enableLimits();
    // With its mirrors in cgroup v1 hierarchies, where it has them.
    if (auto watched = cgroups_.watchdog->watch(*cgroup_); !watched) {
      withoutCgroup(watched.error().message);  // the cgroup goes with cgroup_
      return;
    }
  }

  // The controllers of the ranks' limits, in cgroup v2 or in cgroup v1 hierarchies (where the
  // node's cgroup then has mirrors, proc/cgroup.h); the node's share of contended CPU time is
  // its ranks' together, and its job's is its nodes' together.
  void enableLimits() {
    std::vector<std::string> controllers = {"memory", "cpu"};
    double share = 0;
    for (const plan::RankPlan& r : node_.ranks) {
      if (r.pids > 0 && controllers.size() == 2) controllers.emplace_back("pids");
      share += r.cpus > 0 ? r.cpus : 1;
    }
    auto v1 = proc::enableLimitControllers(*cgroups_.base, cgroup_->path(), controllers);
    if (!v1) return notLimited(v1.error().message);
    if (auto mirrored = cgroup_->mirrorIn(*v1); !mirrored) return notLimited(mirrored.error().message);
    if (auto shared = cgroup_->setLimits({.cpu_share = share}); !shared) {
      return notLimited(shared.error().message);
    }
    (void)cgroup_->shareParent();  // a refinement between jobs: the limits hold without it
    limits_enforced_ = true;
    rank_cgroups_ = true;
  }

  // Says once why this node runs without a cgroup, and from then on does without.
  void withoutCgroup(const std::string& why) {
    sayNoCgroup(options_.node, why);
    notLimited("no cgroup for the ranks (" + why + ")");
    cgroups_.base.reset();
    attempt_cgroup_.reset();
    cgroup_.reset();
  }

  // Whether some rank of the node asks for CPUs, memory or processes (a launcher's may not).
  bool anyRequests() const {
    return std::any_of(node_.ranks.begin(), node_.ranks.end(),
                       [](const plan::RankPlan& r) {
                         return r.cpus > 0 || r.memory_bytes > 0 || r.pids > 0;
                       });
  }

  // Tells the coordinator once why this node's ranks run without their requests enforced.
  void notLimited(const std::string& why) {
    limits_enforced_ = false;
    if (limits_said_ || !anyRequests()) return;
    limits_said_ = true;
    send(protocol::Limits{why});
  }

  // The cgroup a rank starts in: where limits are enforced, one of its own below the node's, held
  // to the rank's requests; else the node's (a cgroup per rank would only cost its making and
  // removing). A cgroup on which cgroup.kill was used takes no more ranks: Linux (6.18 at least)
  // kills a child that clone3 puts into one. After the node's had to be killed (a rank left a
  // process behind), an attempt's ranks share one of their own, made for it. Null without
  // cgroups. Errors: a rank or attempt cgroup that cannot be made where it must be.
  Result<const proc::Cgroup*> rankCgroup(Rank& rank) {
    if (!cgroup_) return nullptr;
    if (!rank_cgroups_) {
      if (cgroup_->kills() == 0) return &*cgroup_;
      if (!attempt_cgroup_ || attempt_cgroup_kills_ != cgroup_->kills()) {
        attempt_cgroup_.reset();
        auto made = cgroup_->child("attempt" + std::to_string(attempt_));
        if (!made) return withContext(made.error(), "the attempt's cgroup");
        attempt_cgroup_ = std::move(*made);
        attempt_cgroup_kills_ = cgroup_->kills();
      }
      return &*attempt_cgroup_;
    }
    const std::string name = "rank" + std::to_string(rank.plan.rank);
    auto made = cgroup_->child(name);
    if (!made && made.error().code == Code::kAlreadyExists) {
      // An earlier attempt's that could not be removed yet (a process slow to go).
      made = cgroup_->child(name + "-" + std::to_string(attempt_));
    }
    if (!made) {
      if (!limits_enforced_) return &*cgroup_;
      return withContext(made.error(), "the rank's cgroup");
    }
    rank.cgroup = std::move(*made);
    if (limits_enforced_) {
      const plan::RankPlan& p = rank.plan;
      auto limited = rank.cgroup->setLimits(
          {p.memory_bytes, p.cpus, p.cpus > 0 ? p.cpus : 1, p.pids});
      if (!limited) {
        notLimited(limited.error().message);
      } else {
        rank.memory_limited = p.memory_bytes > 0;
        if (rank.memory_limited) watchMemory(rank);
      }
    }
    return &*rank.cgroup;
  }

  // cgroup v1 has no memory.oom.group: when the kernel's out-of-memory killer takes one process
  // of a rank (a DataLoader worker, the rank inside its sandbox), the agent kills the rest, so
  // that the rank dies of its memory as a whole, as under cgroup v2.
  void watchMemory(Rank& rank) {
    auto notifier = rank.cgroup->oomNotifier();
    if (!notifier || !notifier->valid()) return;
    if (rank.oom_events.valid()) loop_.remove(rank.oom_events.get());
    rank.oom_events = std::move(*notifier);
    const size_t index = static_cast<size_t>(&rank - ranks_.data());
    (void)loop_.add(rank.oom_events.get(), EPOLLIN, [this, index](uint32_t) {
      Rank& r = ranks_[index];
      uint64_t count = 0;
      (void)!::read(r.oom_events.get(), &count, sizeof count);
      // The kernel may not count its own kill when ours came first: the rank is known to have
      // gone over its memory all the same.
      if (!r.running || !r.cgroup) return;
      r.over_memory = true;
      (void)r.cgroup->killAll(Millis(10000));
    });
  }

  void onSignal() {
    while (int sig = signals_.next()) {
      if (sig == SIGCHLD) reapOrphans();
      if (sig == SIGTERM || sig == SIGINT || sig == SIGHUP) {
        // A coordinator that died closed its connection before its death signal came. With the
        // coordinator there, it is a preemption (Slurm signals its tasks, a cluster deletes the
        // job): agent/agent_decisions.h.
        onChannel();
        decide(SignalCame{sig, !decisions_.lostCoordinator() && authenticated_});
      }
    }
  }

  std::vector<std::string> rankEnvironment(const plan::RankPlan& r) const {
    return agent::rankEnvironment(r, attempt_, processEnvironment());
  }

  // launcher: preload: the node's template, in a cgroup of its own (an attempt's end kills the
  // ranks' cgroup, not it: restarts fork from the same template).
  void startTemplate() {
    template_.reset();
    template_ready_ = false;
    if (cgroups_.base && cgroup_ && !template_cgroup_) {
      auto cg = proc::Cgroup::create(*cgroups_.base, cgroup_->path().substr(cgroups_.base->size() + 1) +
                                                         "-preload");
      if (cg && cgroups_.watchdog->watch(*cg)) template_cgroup_ = std::move(*cg);
    }
    const plan::RankPlan& first = node_.ranks.front();
    PreloadTemplate::Options o;
    o.preload = *node_.preload;
    o.env = rankEnvironment(first);
    o.cwd = workdir_;
    o.uid = first.uid;
    o.gid = first.gid;
    o.cgroup_fd = template_cgroup_ ? template_cgroup_->fd() : -1;
    auto started = PreloadTemplate::start(o);
    if (!started) {
      preload_error_ = "the preload template: " + started.error().message;
      return;
    }
    template_.emplace(std::move(*started));
    (void)loop_.add(template_->fd(), EPOLLIN, [this](uint32_t) { onTemplateReady(); });
  }

  void onTemplateReady() {
    loop_.remove(template_->fd());  // from here on it is asked and answered in turn
    if (auto ready = template_->ready(); !ready) {
      preload_error_ = "the preload template: " + ready.error().message;
      template_.reset();
    } else {
      template_ready_ = true;
    }
    if (pending_attempt_) {
      const int attempt = *pending_attempt_;
      pending_attempt_.reset();
      startAttempt(attempt);
    }
  }

  void startAttempt(int attempt) {
    if (node_.preload && !template_ready_ && preload_error_.empty()) {
      if (!template_) startTemplate();
      if (preload_error_.empty()) {
        pending_attempt_ = attempt;  // onTemplateReady starts it
        return;
      }
    }
    attempt_ = attempt;
    decide(AttemptBegins{});  // the last attempt's stop is over: its SIGKILL must not hit this one
    ranks_.clear();
    ranks_.resize(node_.ranks.size());
    for (size_t i = 0; i < node_.ranks.size(); ++i) {
      heartbeatIfDue();
      Rank& rank = ranks_[i];
      rank.plan = node_.ranks[i];
      // An earlier attempt's heartbeat file is where this one's starts from.
      rank.heartbeat_file = planEnv(rank.plan, "COHORT_HEARTBEAT_FILE");
      rank.heartbeat_seen = heartbeatTimes(rank.heartbeat_file);
      // An earlier attempt's status is not this one's.
      rank.debug_file = planEnv(rank.plan, "COHORT_DEBUG_FILE");
      if (!rank.debug_file.empty()) ::unlink(rank.debug_file.c_str());
      if (auto r = spawnRank(i); !r) neverRan(rank, r.error().message);
    }
    // The ranks exec'd while the next ones started; now each is watched, or reported if it
    // failed before its exec.
    for (size_t i = 0; i < ranks_.size(); ++i) {
      Rank& rank = ranks_[i];
      if (rank.running || rank.child.pid <= 0) continue;
      auto r = proc::finish(rank.child);
      if (r) r = watch(i, std::move(rank.child));
      if (!r) neverRan(rank, rank.plan.name + ": " + r.error().message);
    }
    const int running = static_cast<int>(
        std::count_if(ranks_.begin(), ranks_.end(), [](const Rank& r) { return r.running; }));
    decide(RanksStarted{running});
    send(protocol::Started{attempt_, running, nowUnixNanos()});
    if (running == 0) {
      attemptOver();
    } else {
      progress_.arm(kFirstProgress);  // a short job's ranks are sampled too
    }
  }

  // A rank that could not be started: reported as exit code 127, the shell's "could not
  // execute".
  void neverRan(Rank& rank, const std::string& error) {
    rank.child = {};
    report(rank, proc::ExitStatus{127, 0}, nowUnixNanos(), error);
  }

  // Every few seconds while ranks run: when each last wrote output, and what it uses.
  void onProgressTime() {
    progress_.consume();
    if (decisions_.running() == 0) return;
    std::map<pid_t, pid_t> group_of;
    const bool gpus = gpu_ && gpu_->available() && gpu_->latest();
    std::map<pid_t, Usage> usage = usageByProcessGroup(cgroupPath(), gpus ? &group_of : nullptr);
    std::map<pid_t, RankGpu> gpu_use;
    if (gpus) gpu_use = gpuUseByGroup(gpu_->latest()->first, gpu_->latest()->second, group_of);
    protocol::Progress report{attempt_, 0, {}};
    const int64_t now = nowUnixNanos();
    for (size_t i = 0; i < ranks_.size(); ++i) {
      Rank& rank = ranks_[i];
      if (rank.running && !rank.heartbeat_file.empty()) {
        auto times = heartbeatTimes(rank.heartbeat_file);
        if (!sameTimes(times, rank.heartbeat_seen) && times) rank.last_heartbeat = now;
        rank.heartbeat_seen = times;
      }
      protocol::RankProgress r;
      r.index = static_cast<int64_t>(i);
      r.running = rank.running;
      r.last_output = rank.last_output;
      r.last_heartbeat = rank.last_heartbeat;
      if (rank.running) {
        // Every rank leads a process group of its own (proc/spawn.h).
        const Usage u = usage[rank.child.pid];
        r.cpu_seconds = u.cpu_seconds;
        r.rss_bytes = u.rss_bytes;
        if (auto g = gpu_use.find(rank.child.pid); g != gpu_use.end()) {
          r.gpu_util = g->second.utilization;
          r.gpu_memory_bytes = g->second.memory_bytes;
        }
      }
      report.ranks.push_back(r);
    }
    report.time = nowUnixNanos();
    send(std::move(report));
    if (gpu_) gpu_->poll();  // its answer is the next sample's; it never waits here
    progress_.arm(kProgressEvery);
  }

  Result<void> spawnRank(size_t index) {
    Rank& rank = ranks_[index];
    const plan::RankPlan& p = rank.plan;
    std::string prefix = "[" + p.name + " node" + std::to_string(p.node) + "] ";
    rank.output.emplace(std::move(prefix), nullptr);  // for the tail; the coordinator echoes
    if (p.terminal) return spawnOnTerminal(index);
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) < 0) return failErrno("pipe2");
    UniqueFd write_end(fds[1]);
    rank.out.reset(fds[0]);
    ::fcntl(fds[0], F_SETPIPE_SZ, 1 << 20);
    COHORT_TRY(setNonBlocking(fds[0]));
    if (p.preload) return forkRank(index, std::move(write_end));
    proc::SpawnRequest req;
    req.argv = p.argv;
    COHORT_ASSIGN(RankLaunch launch, rankLaunch(p, attempt_, processEnvironment()));
    req.env = std::move(launch.env);
    req.fd3 = launch.sandbox_args.get();
    req.netns_fd = options_.netns_fd;
    req.cwd = workdir_;
    req.stdout_fd = write_end.get();
    if (p.stdin_forwarded) req.stdin_fd = STDIN_FILENO;  // cohort run's, as mpirun's rank 0
    req.uid = p.uid;
    req.gid = p.gid;
    req.no_new_privs = p.uid >= 0;  // an account's rank gains nothing by exec (set-uid files)
    COHORT_ASSIGN(const proc::Cgroup* cgroup, rankCgroup(rank));
    req.cgroup_fd = cgroup ? cgroup->fd() : -1;
    if (cgroup) req.v1_cgroup_fds = cgroup->v1Fds();
    const bool may_retry = cgroup_ && !cgroup_joined_;
    auto child = may_retry ? proc::start(req) : proc::start(std::move(req));
    if (!child && child.error().code == Code::kFailedPrecondition && may_retry) {
      // The cgroup could be made but not joined (a delegation that stops short): do without.
      withoutCgroup(child.error().message);
      req.cgroup_fd = -1;
      req.v1_cgroup_fds.clear();
      child = proc::start(std::move(req));
    }
    if (child && cgroup_) cgroup_joined_ = true;
    if (!child) {
      return withContext(child.error(), p.name);
    }
    rank.child = std::move(*child);  // startAttempt watches it once it has exec'd
    return {};
  }

  // --pdb: the rank's stdin, stdout and stderr are the agent's (cohort run's terminal), and its
  // process group becomes the terminal's foreground one, so that it may read it and Ctrl-C
  // reaches pdb, until it exits. Its output is not in its log.
  Result<void> spawnOnTerminal(size_t index) {
    Rank& rank = ranks_[index];
    const plan::RankPlan& p = rank.plan;
    proc::SpawnRequest req;
    req.argv = p.argv;
    COHORT_ASSIGN(RankLaunch launch, rankLaunch(p, attempt_, processEnvironment()));
    req.env = std::move(launch.env);
    req.fd3 = launch.sandbox_args.get();
    req.netns_fd = options_.netns_fd;
    req.cwd = workdir_;
    req.stdin_fd = STDIN_FILENO;
    req.stdout_fd = STDOUT_FILENO;
    req.stderr_fd = STDERR_FILENO;
    req.uid = p.uid;
    req.gid = p.gid;
    req.no_new_privs = p.uid >= 0;  // an account's rank gains nothing by exec (set-uid files)
    COHORT_ASSIGN(const proc::Cgroup* cgroup, rankCgroup(rank));
    req.cgroup_fd = cgroup ? cgroup->fd() : -1;
    if (cgroup) req.v1_cgroup_fds = cgroup->v1Fds();
    auto child = proc::spawn(req);
    if (!child) return withContext(child.error(), p.name);
    if (::isatty(STDIN_FILENO)) {
      terminal_owner_ = ::tcgetpgrp(STDIN_FILENO);
      foreground(child->pid);
    }
    return watch(index, std::move(*child));
  }

  // Makes `pgid` the terminal's foreground process group (a background process may, with
  // SIGTTOU ignored for the call).
  static void foreground(pid_t pgid) {
    if (pgid <= 0) return;
    auto old = ::signal(SIGTTOU, SIG_IGN);
    (void)::tcsetpgrp(STDIN_FILENO, pgid);
    ::signal(SIGTTOU, old);
  }

  // A rank that runs: its exit and its output come through the loop.
  Result<void> watch(size_t index, proc::Child child) {
    Rank& rank = ranks_[index];
    rank.child = std::move(child);
    rank.running = true;
    rank.spawned = std::chrono::steady_clock::now();
    COHORT_TRY(loop_.add(rank.child.pidfd.get(), EPOLLIN, [this, index](uint32_t) { onExit(index); }));
    if (rank.out.valid() && !output_held_) COHORT_TRY(watchOutput(index));
    return {};
  }

  Result<void> watchOutput(size_t index) {
    return loop_.add(ranks_[index].out.get(), EPOLLIN, [this, index](uint32_t) {
      if (channel_.pendingBytes() > kOutputHighWater) {
        holdOutput();
        return;
      }
      pump(index, 16);
    });
  }

  // The coordinator does not take what the ranks write as fast as they write it: their pipes
  // wait (and then the ranks) until it has taken most of what is queued (onWritable).
  void holdOutput() {
    if (output_held_) return;
    output_held_ = true;
    for (Rank& rank : ranks_) {
      if (rank.out.valid()) loop_.remove(rank.out.get());
    }
  }

  void onWritable() {
    if (auto flushed = channel_.flush(); !flushed) {
      std::fprintf(stderr, "cohort exec: node %d: %s\n", options_.node,
                   flushed.error().message.c_str());
      lostCoordinator("its connection to the coordinator failed: " + flushed.error().message);
      return;
    }
    if (!output_held_ || channel_.pendingBytes() > kOutputLowWater) return;
    output_held_ = false;
    for (size_t i = 0; i < ranks_.size(); ++i) {
      if (ranks_[i].out.valid()) (void)watchOutput(i);
    }
  }

  // A preloaded rank: forked by the template, then adopted (our child already; its pidfd; the
  // node's cgroup) before it may run.
  Result<void> forkRank(size_t index, UniqueFd out) {
    Rank& rank = ranks_[index];
    const plan::RankPlan& p = rank.plan;
    if (!template_ready_) {
      return fail(Code::kUnavailable, p.name + ": " + (preload_error_.empty()
                                                          ? "the preload template is not ready"
                                                          : preload_error_));
    }
    int go[2];
    if (::pipe2(go, O_CLOEXEC) < 0) return failErrno("pipe2");
    UniqueFd go_read(go[0]);
    UniqueFd go_write(go[1]);
    auto pid = template_->fork({p.argv, rankEnvironment(p), workdir_, out.get(), go_read.get()},
                               Millis(10000));
    out.reset();
    go_read.reset();
    if (!pid) {
      if (pid.error().code == Code::kUnavailable || pid.error().code == Code::kDeadlineExceeded) {
        template_.reset();  // the next attempt starts another
        template_ready_ = false;
      }
      return withContext(pid.error(), p.name);
    }
    proc::Child child;
    child.pid = *pid;
    child.pidfd.reset(proc::openPidfd(*pid));
    if (!child.pidfd.valid()) return failErrno(p.name + ": pidfd_open");
    // The template runs the job's code: the pid it names must be our child (the pidfd pins it),
    // never another process for us to put in the job's cgroup and kill with it.
    siginfo_t info{};
    constexpr int kPidfdType = 3;  // P_PIDFD, which older headers lack
    const bool known = *pid == template_->pid() ||
                       (cgroups_.watchdog && *pid == cgroups_.watchdog->pid()) ||
                       std::any_of(ranks_.begin(), ranks_.end(), [&](const Rank& other) {
                         return other.running && other.child.pid == *pid;
                       });
    if (known || ::waitid(static_cast<idtype_t>(kPidfdType), static_cast<id_t>(child.pidfd.get()),
                          &info, WEXITED | WNOHANG | WNOWAIT) < 0) {
      return fail(Code::kPermissionDenied, p.name + ": the preload template named process " +
                                               std::to_string(*pid) + ", which is not this agent's");
    }
    auto cgroup = rankCgroup(rank);
    if (!cgroup) {
      ::kill(*pid, SIGKILL);
      (void)proc::reap(child.pidfd.get());
      return withContext(cgroup.error(), p.name);
    }
    if (*cgroup) {
      if (auto adopted = (*cgroup)->adopt(*pid); !adopted) {
        ::kill(*pid, SIGKILL);
        (void)proc::reap(child.pidfd.get());
        return withContext(adopted.error(), p.name);
      }
    }
    if (::write(go_write.get(), "g", 1) != 1) return failErrno(p.name + ": start the forked rank");
    return watch(index, std::move(child));
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
        rank.last_output = nowUnixNanos();
        // The coordinator keeps the logs: every byte goes to it, as it came.
        (void)channel_.sendLog(index, std::string_view(buf, static_cast<size_t>(n)));
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
    if (rank.oom_events.valid()) {
      loop_.remove(rank.oom_events.get());
      rank.oom_events.reset();
    }
    auto status = proc::reap(rank.child.pidfd.get());
    rank.child.pidfd.reset();
    rank.running = false;
    decide(RankGone{});
    // All the rank wrote is in the pipe now: read it up to EAGAIN (an escaped child may keep
    // the pipe open) or end of output.
    pump(index, std::numeric_limits<int>::max());
    rank.output->finish();
    proc::ExitStatus exit = status ? *status : proc::ExitStatus{1, 0};
    // The sandbox ends with 128 + N for a rank killed by signal N: say it as the signal, as
    // for a rank that runs without one (a crash, the kernel's out-of-memory killer).
    if (rank.plan.sandboxed && exit.signal == 0 && exit.code > 128 && exit.code < 128 + 65) {
      exit = proc::ExitStatus{0, exit.code - 128};
    }
    // Killed by the kernel for going over its memory limit, rather than by someone's SIGKILL.
    int64_t memory_limit = 0;
    if (exit.signal == SIGKILL && rank.memory_limited && rank.cgroup) {
      if (auto kills = rank.cgroup->oomKills(); rank.over_memory || (kills && *kills > 0)) {
        memory_limit = rank.plan.memory_bytes;
      }
    }
    if (rank.plan.terminal && terminal_owner_ > 0) {
      foreground(terminal_owner_);  // the terminal is cohort run's again
      terminal_owner_ = -1;
    }
    report(rank, exit, time, "", memory_limit);
    reapOrphans();  // what waited behind this rank's exit
    if (decisions_.running() == 0) attemptOver();
  }

  // The fallback without a cgroup: kill and reap every child we still have (found in /proc),
  // but the watchdog, until none is left.
  void killOrphans() {
    const pid_t watchdog = cgroups_.watchdog ? cgroups_.watchdog->pid() : -1;
    for (int round = 0; round < 100; ++round) {
      std::vector<pid_t> orphans = childrenOf(::getpid());
      std::erase(orphans, watchdog);
      if (template_) std::erase(orphans, template_->pid());
      std::erase_if(orphans, [&](pid_t pid) { return gpu_ && gpu_->owns(pid); });
      if (orphans.empty()) break;
      for (pid_t pid : orphans) {
        ::kill(-pid, SIGKILL);
        ::kill(pid, SIGKILL);
      }
      for (pid_t pid : orphans) ::waitpid(pid, nullptr, 0);
    }
  }

  // Reaps the children that came back to us as the subreaper and have exited. A rank is left to
  // onExit, which reaps it through its pidfd: waitid only peeks (WNOWAIT) at whoever is
  // waiting before reaping that one pid.
  void reapOrphans() {
    // A chore's thread spawns children of its own (py-spy, the account's worker for staging or
    // copying outputs) and reaps them through their pidfds: reaping one first would take it from
    // under the chore. Orphans wait until the chore is over.
    if (chore_.joinable()) return;
    for (;;) {
      siginfo_t info{};
      if (::waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) < 0 || info.si_pid == 0) return;
      for (const Rank& rank : ranks_) {
        if (rank.running && rank.child.pid == info.si_pid) return;
      }
      if (template_ && info.si_pid == template_->pid()) return;  // its pidfd reaps it
      if (gpu_ && gpu_->owns(info.si_pid)) return;  // so does the sampler, then calls us again
      if (cgroups_.watchdog && info.si_pid == cgroups_.watchdog->pid()) {
        std::fprintf(stderr, "cohort exec: node %d: the cgroup watchdog exited\n",
                     options_.node);
      }
      const pid_t pid = info.si_pid;
      if (::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG) < 0) return;
    }
  }

  void report(const Rank& rank, const proc::ExitStatus& status, int64_t time,
              const std::string& error, int64_t memory_limit = 0) {
    std::vector<std::string> tail = rank.output ? rank.output->tail(kTailLines)
                                                : std::vector<std::string>{};
    if (!error.empty()) tail.push_back("cohort: " + error);
    protocol::Exited exited;
    exited.attempt = attempt_;
    exited.rank = rank.plan.rank;
    exited.code = status.code;
    exited.signal = status.signal;
    exited.by_cohort = rank.signalled;
    exited.stopped_by = rank.stopped_by;
    exited.stop_reason = rank.stop_reason;
    exited.time = time;
    exited.tail = std::move(tail);
    exited.error = error;
    exited.memory_limit = memory_limit;
    send(std::move(exited));
  }

  void onGraceOver() {
    grace_.consume();
    decide(GraceOver{});
  }

  // Every rank has exited: kill what they left behind (everything still in the node's cgroup;
  // without one, the escaped children that came back to us as the subreaper), close their
  // pipes, and tell the coordinator.
  void attemptOver() {
    grace_.disarm();  // before the kills below: the attempt's stop is over
    progress_.disarm();
    if (cgroup_) {
      if (auto killed = cgroup_->killAll(Millis(10000)); !killed) {
        std::fprintf(stderr, "cohort exec: node %d: %s\n", options_.node,
                     killed.error().message.c_str());
        killOrphans();
      }
      reapOrphans();
    } else {
      killOrphans();
    }
    for (size_t i = 0; i < ranks_.size(); ++i) {
      if (ranks_[i].out.valid()) {
        pump(i, std::numeric_limits<int>::max());
        if (ranks_[i].out.valid()) loop_.remove(ranks_[i].out.get());
        ranks_[i].out.reset();
      }
    }
    send(protocol::Idle{attempt_, nowUnixNanos()});
    decide(AttemptOver{});  // the agent leaves now if it was to
  }

  const AgentOptions& options_;
  proc::EventLoop& loop_;
  proc::SignalFd signals_;
  proc::Timer grace_;
  proc::Timer progress_;
  proc::Timer heartbeat_;
  Millis heartbeat_every_{1000};
  Millis heartbeat_timeout_{5000};
  Silence silence_{heartbeat_every_, std::chrono::steady_clock::now()};  // the coordinator's
  std::chrono::steady_clock::time_point last_sent_{};
  Channel channel_;
  CgroupSupport cgroups_;
  std::optional<proc::Cgroup> cgroup_;  // this node's ranks, when cgroups_ has a base
  bool cgroup_joined_ = false;          // a rank has started in it
  bool limits_enforced_ = false;        // the ranks' cgroups can be held to their requests
  bool rank_cgroups_ = false;  // each rank has a cgroup below the node's (which holds none)
  std::optional<proc::Cgroup> attempt_cgroup_;  // an attempt's ranks, once the node's was killed
  int attempt_cgroup_kills_ = 0;                // the node's kills() when it was made
  bool limits_said_ = false;            // the coordinator was told why they are not
  plan::NodePlan node_;
  std::string workdir_;
  std::vector<Rank> ranks_;
  std::optional<PreloadTemplate> template_;  // launcher: preload
  std::optional<proc::Cgroup> template_cgroup_;
  std::optional<GpuSampler> gpu_;  // while the loop runs
  bool template_ready_ = false;
  std::string preload_error_;        // why this node's ranks cannot be forked
  std::optional<int> pending_attempt_;  // to start once the template is ready
  std::string job_dir_;
  bool own_dir_ = false;  // the job directory here is not the coordinator's
  std::vector<plan::OutputPlan> outputs_;  // to copy from it before leaving
  std::thread chore_;
  UniqueFd chore_done_;
  std::function<void()> chore_over_;
  Result<StagingResult> staging_result_ = StagingResult{};
  int attempt_ = 0;
  bool trim_after_message_ = false;
  AgentDecisions decisions_;  // when to stop the ranks, who stops them, when to leave
  pid_t terminal_owner_ = -1;   // --pdb: the terminal's foreground group before the rank took it
  std::string nonce_;           // ours, for the coordinator's proof
  bool authenticated_ = false;  // the coordinator proved it knows the secret
  bool output_held_ = false;    // the ranks' pipes are not read: the channel is full (holdOutput)
  bool coordinator_local_ = false;  // the coordinator is our parent, on this machine
};

// Runs the agent until the coordinator says "exit" or is gone, then ends the process with the
// agent's exit code (the job's, which the coordinator sends with "exit"; 1 when it lost the
// coordinator). Returns only when the agent could not run. Errors: kUnavailable when the
// coordinator cannot be reached, kIo for setup failures.
Result<void> runNodeAgent(const AgentOptions& options) {
  // Signals first, before any thread exists (staging has one), so no thread can take them.
  COHORT_ASSIGN(proc::SignalFd signals,
                proc::SignalFd::create({SIGTERM, SIGINT, SIGHUP, SIGCHLD}));
  ::signal(SIGPIPE, SIG_IGN);
  raiseFileLimit();
  if (::prctl(PR_SET_CHILD_SUBREAPER, 1) < 0) return failErrno("prctl(PR_SET_CHILD_SUBREAPER)");
  // The watchdog is forked, so it must come before any thread (and before the socket, which it
  // must not hold); a forked agent adopts its coordinator's.
  CgroupSupport cgroups;
  std::string no_cgroup;
  UniqueFd shared_watchdog(options.watchdog_fd);
  auto base =
      shared_watchdog.valid() ? Result<std::string>(options.cgroup_base) : proc::cgroupBase();
  if (!base) {
    no_cgroup = base.error().message;
  } else if (shared_watchdog.valid()) {
    cgroups.base = *base;
    cgroups.watchdog = proc::CgroupWatchdog::adopt(std::move(shared_watchdog));
  } else if (auto watchdog = proc::CgroupWatchdog::start(); !watchdog) {
    no_cgroup = watchdog.error().message;
  } else {
    cgroups.base = *base;
    cgroups.watchdog = std::move(*watchdog);
  }
  if (!no_cgroup.empty()) sayNoCgroup(options.node, no_cgroup);
  cgroups.why = no_cgroup;
  UniqueFd sock(options.coordinator_fd);
  if (!sock.valid()) {
    COHORT_ASSIGN(sock,
                  connectTcp(options.coordinator_addr, options.coordinator_port, Millis(30000)));
  }
  COHORT_ASSIGN(auto loop, proc::EventLoop::create());
  COHORT_ASSIGN(proc::Timer grace, proc::Timer::create());
  COHORT_ASSIGN(proc::Timer progress, proc::Timer::create());
  COHORT_ASSIGN(proc::Timer heartbeat, proc::Timer::create());
  Agent agent(options, *loop, std::move(signals), std::move(grace), std::move(progress),
              std::move(heartbeat), Channel(std::move(sock)), std::move(cgroups));
  COHORT_ASSIGN(const int code, agent.run());
  // The node's work is done: its ranks, template and cgroups are gone and the coordinator has its
  // last word. What is left is freeing memory piece by piece (the node's plan, every rank's
  // buffers), which the kernel does at once: that was 0.8 ms of the 4 agents' CPU time in a
  // failing 64-rank job's teardown (docs/benchmarks.md).
  std::fflush(nullptr);
  ::_exit(code);
}

}  // namespace

int agentMain(const AgentOptions& options) {
  auto result = runNodeAgent(options);
  std::fprintf(stderr, "cohort exec: node %d: %s\n", options.node, result.error().message.c_str());
  return 1;
}

}  // namespace cohort::agent
