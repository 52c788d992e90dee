#include "agent/root_cause.h"

#include <signal.h>
#include <string.h>

#include <algorithm>

#include "util/text.h"

namespace cohort::agent {

std::string RankExit::label() const {
  return name + " on node " + std::to_string(node) + (machine.empty() ? "" : " (" + machine + ")");
}

std::string RankExit::describe() const {
  if (memory_limit > 0) {
    return "was killed by the kernel for using more than its memory limit of " +
           formatSize(static_cast<double>(memory_limit)) + " (memory.max)";
  }
  if (signal) {
    const char* name = sigabbrev_np(signal);
    return std::string("was killed by SIG") + (name ? name : std::to_string(signal).c_str());
  }
  return "exited with code " + std::to_string(code);
}

namespace {

bool allDigits(std::string_view s) {
  return !s.empty() && s.size() < 10 && s.find_first_not_of("0123456789") == std::string::npos;
}

// mpirun's own report (Open MPI 4): "Process name: [[966,1],2]" then "Exit code:    3", or
// "mpirun noticed that process rank 1 with PID 0 on node vm exited on signal 9 (Killed).".
std::optional<LaunchedFailure> mpiRankFailure(const RankExit& exit) {
  std::string rank, what;
  for (const std::string& line : exit.tail) {
    const size_t name = line.find("Process name: [[");
    if (name != std::string::npos) {
      const size_t comma = line.find("],", name);
      const size_t end = line.find(']', comma == std::string::npos ? line.size() : comma + 2);
      if (comma != std::string::npos && end != std::string::npos) {
        rank = line.substr(comma + 2, end - comma - 2);
      }
    }
    const size_t code = line.find("Exit code:");
    if (code != std::string::npos && !rank.empty()) {
      what = "exited with code " + std::string(trim(line.substr(code + 10)));
    }
    const size_t noticed = line.find("noticed that process rank ");
    const size_t on_signal = line.find(" exited on signal ");
    if (noticed != std::string::npos && on_signal != std::string::npos) {
      const size_t start = noticed + 26;
      rank = line.substr(start, line.find(' ', start) - start);
      std::string signal = line.substr(on_signal + 18);
      while (!signal.empty() && (signal.back() == '.' || signal.back() == ' ')) signal.pop_back();
      what = "was killed by signal " + signal;
    }
  }
  if (!allDigits(rank) || what.empty()) return std::nullopt;
  return LaunchedFailure{std::stoi(rank), "MPI rank " + rank, what};
}

// torchrun's ChildFailedError report (torch 1.13 to 2.x): after "Root Cause (first observed
// failure):", "  rank      : 2 (local_rank: 0)" and "  exitcode  : 3 (pid: 1234)" (-9: killed
// by signal 9). Its rank is the global one.
std::optional<LaunchedFailure> torchrunRankFailure(const RankExit& exit) {
  std::string rank, code;
  bool in_root = false;
  auto field = [](const std::string& line, std::string_view key) -> std::string {
    std::string_view text = trim(line);
    if (text.substr(0, key.size()) != key) return "";
    text = trim(text.substr(key.size()));
    if (text.empty() || text[0] != ':') return "";
    text = trim(text.substr(1));
    return std::string(text.substr(0, text.find(' ')));
  };
  for (const std::string& line : exit.tail) {
    if (line.find("Root Cause (first observed failure):") != std::string::npos) {
      in_root = true;
      rank.clear();
      code.clear();
    }
    if (!in_root) continue;
    if (std::string v = field(line, "rank"); !v.empty() && rank.empty()) rank = v;
    if (std::string v = field(line, "exitcode"); !v.empty() && code.empty()) code = v;
  }
  const bool signalled = !code.empty() && code[0] == '-';
  if (!allDigits(rank) || !allDigits(signalled ? code.substr(1) : code)) return std::nullopt;
  std::string what;
  if (signalled) {
    const int signal = std::stoi(code.substr(1));
    const char* abbrev = sigabbrev_np(signal);
    what = std::string("was killed by SIG") + (abbrev ? abbrev : code.substr(1).c_str());
  } else {
    what = "exited with code " + code;
  }
  return LaunchedFailure{std::stoi(rank), exit.role + "/" + rank, what};
}

}  // namespace

std::optional<LaunchedFailure> launchedFailure(const RankExit& launcher) {
  if (startsWith(launcher.name, "mpirun/")) return mpiRankFailure(launcher);
  if (startsWith(launcher.name, "torchrun/")) return torchrunRankFailure(launcher);
  return std::nullopt;
}

std::optional<RankExit> firstFailure(const std::vector<RankExit>& exits) {
  std::optional<RankExit> first;
  for (const RankExit& e : exits) {
    if (!e.failed() || e.by_cohort) continue;
    if (!first || e.time_ns < first->time_ns) first = e;
  }
  return first;
}

std::string hintFor(const RankExit& exit) {
  auto seen = [&](const char* needle) {
    for (const std::string& line : exit.tail) {
      if (line.find(needle) != std::string::npos) return true;
    }
    return false;
  };
  if (exit.memory_limit > 0) {
    return "raise resources.memory (per rank) or use less: smaller batches, fewer DataLoader "
           "workers";
  }
  if (seen("CUDA out of memory") || seen("CUDA error: out of memory")) {
    return "the GPU ran out of memory: lower the batch size per rank, or use fewer ranks per GPU";
  }
  // A peer held up in a collective by a paused rank gives up when its timeout passes.
  if (!exit.while_debugged.empty() &&
      (seen("timed out") || seen("Timed out") || seen("timeout") || seen("Timeout") ||
       seen("Connection closed") || seen("Connection reset") || seen("Connection refused"))) {
    return "it failed while " + join(exit.while_debugged, ", ") +
           " was paused under a debugger: a rank that waits for a paused peer in a collective "
           "gives up after the collective's timeout; raise init_process_group's timeout while "
           "debugging (docs/debugging.md)";
  }
  if (seen("Address already in use") || seen("EADDRINUSE")) {
    return "a port was already taken: cohort leases MASTER_PORT for you, so do not hard-code a "
           "port (use the MASTER_PORT variable); another program may hold the one you chose";
  }
  if (seen("NCCL") && (seen("Watchdog") || seen("timeout") || seen("Timeout"))) {
    return "a collective timed out: one rank stopped participating (it crashed, hung, or runs "
           "different code); look at the ranks that failed or hung before this one";
  }
  if (seen("connect() timed out") || seen("Socket Timeout") || seen("rendezvous") ||
      seen("Rendezvous") || seen("Connection refused") || seen("Connection reset by peer")) {
    return "a rank could not reach its peers: check that every rank calls init_process_group "
           "with the same MASTER_ADDR/MASTER_PORT and that no rank exited early";
  }
  if (seen("ModuleNotFoundError") || seen("ImportError")) {
    return "a Python module is missing for the interpreter the job runs: install it for that "
           "interpreter (check the command's python and its PATH)";
  }
  if (seen("the preload template")) {
    return "launcher: preload forks the ranks from one process per node that imports the job's "
           "`preload` modules first: fix what stopped it, or run with --launcher direct";
  }
  if (exit.code == 127) {
    return "the command could not be started: check the program name, the PATH and the workdir";
  }
  if (seen("No such file or directory") || seen("FileNotFoundError")) {
    return "a file was not found: relative paths are resolved from the job's workdir";
  }
  if (exit.signal == SIGKILL || seen("MemoryError") || seen("Out of memory") ||
      seen("out of memory")) {
    return exit.signal == SIGKILL && !seen("MemoryError")
               ? "SIGKILL that cohort did not send usually means the kernel's out-of-memory "
                 "killer: check `dmesg` and the job's memory use"
               : "the process ran out of memory: use smaller batches or fewer ranks per node";
  }
  if (exit.signal == SIGSEGV || exit.signal == SIGBUS || exit.signal == SIGABRT) {
    return "the process crashed in native code: run this rank alone to reproduce, or look for a "
           "core dump";
  }
  return "";
}

std::string formatRootCause(const RankExit& root, const std::vector<RankExit>& exits) {
  // Under mpirun or torchrun the failed rank is the launcher's child: its report names it.
  const std::optional<LaunchedFailure> launched = launchedFailure(root);
  std::string out = "root cause: " +
                    (!launched ? root.label() + " " + root.describe()
                               : launched->name + " " + launched->what + ", under " +
                                     root.label() + ", which then " + root.describe()) +
                    " (the first failure" +
                    (root.attempt ? ", attempt " + std::to_string(root.attempt + 1) : "") + ")\n";
  if (!root.tail.empty()) {
    out += "  last lines of " + (root.log_file.empty() ? "its output" : root.log_file) + ":\n";
    for (const std::string& line : root.tail) out += "    | " + line + "\n";
  }
  std::string hint = hintFor(root);
  if (!hint.empty()) out += "  hint: " + hint + "\n";
  int after = 0;
  int stopped = 0;
  for (const RankExit& e : exits) {
    if (e.attempt != root.attempt || e.rank == root.rank) continue;
    if (e.by_cohort) {
      ++stopped;
    } else if (e.failed()) {
      ++after;
    }
  }
  if (after) {
    out += "  " + std::to_string(after) + " other rank(s) failed after it (consequences)\n";
  }
  if (stopped) out += "  " + std::to_string(stopped) + " rank(s) were stopped by cohort\n";
  return out;
}

std::string formatLostNode(const LostNode& lost, const std::vector<std::vector<std::string>>& tails,
                           const std::vector<RankExit>& exits) {
  std::string out = "root cause: node " + std::to_string(lost.node) +
                    (lost.machine.empty() ? "" : " (" + lost.machine + ")") + "'s agent was lost" +
                    (lost.why.empty() ? std::string() : " (" + lost.why + ")") +
                    " (the first failure)\n";
  if (!lost.ranks.empty()) out += "  its rank(s): " + join(lost.ranks, ", ") + "\n";
  for (size_t i = 0; i < lost.ranks.size() && i < tails.size() && i < lost.logs.size(); ++i) {
    if (tails[i].empty()) continue;
    out += "  last lines of " + lost.logs[i] + ":\n";
    for (const std::string& line : tails[i]) out += "    | " + line + "\n";
  }
  out += "  hint: the node's agent died, was stopped, or could not be heard: look at its host "
         "(is it up, is its network there, is it overloaded?); a node that is only slow can be "
         "given longer with policy.heartbeat_timeout (--heartbeat-timeout)\n";
  int stopped = 0;
  for (const RankExit& e : exits) stopped += e.by_cohort ? 1 : 0;
  if (stopped) out += "  " + std::to_string(stopped) + " rank(s) were stopped by cohort\n";
  return out;
}

}  // namespace cohort::agent
