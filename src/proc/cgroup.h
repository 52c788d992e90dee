// Cgroups for ranks: a cgroup v2 directory per node that holds every process of that node's
// ranks, including those that leave their process group with setsid, so they can all be killed
// at once (cgroup.kill); and a watchdog process that kills and removes that cgroup when the
// process that made it dies, however it dies (kill -9 included). The agent, as root or inside a
// delegated subtree, creates the cgroup under its own and places each child in it between fork
// and exec (SpawnRequest::cgroup_fd), so a rank that runs under another uid needs no access to
// it. Where no writable cgroup v2 tree exists, ownWritableCgroup() says why and callers keep to
// process groups and the child subreaper. A cgroup's processes can be held to a memory and CPU
// limit (setLimits) once enableLimitControllers() has made the memory and cpu controllers
// available to it; where the machine does not allow that, it says why. Not thread-safe: a
// Cgroup or a CgroupWatchdog belongs to one owner.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "util/fd.h"
#include "util/result.h"
#include "util/text.h"

namespace cohort::proc {

// The directory of this process's own cgroup in the cgroup v2 hierarchy (found from
// /proc/self/mountinfo and /proc/self/cgroup), when this process may create cgroups in it and
// move processes into them. Errors: kNotFound when no cgroup v2 hierarchy is mounted or this
// process's cgroup is not visible in it; kPermissionDenied when it is not writable.
Result<std::string> ownWritableCgroup();

// Where cohort makes its cgroups: COHORT_CGROUP_ROOT when it is set (an empty cgroup delegated
// to cohort, docs/observing.md: cgroup v2 gives no controllers to the children of a cgroup that
// holds processes), else ownWritableCgroup(). Errors: those of ownWritableCgroup();
// kPermissionDenied when COHORT_CGROUP_ROOT is not a writable cgroup.
Result<std::string> cgroupBase();

// What the processes of one cgroup may use together. 0: not limited.
struct CgroupLimits {
  int64_t memory_bytes = 0;  // memory.max (and memory.swap.max 0: swap does not stretch it)
  double cpus = 0;           // cpu.max: this many CPUs' time per period (at least 0.01)
};

// Makes the memory and cpu controllers available to the cgroups made under `dir`, by enabling
// them in cgroup.subtree_control of `base` and of every directory from there down to `dir`
// (`dir` is `base` or below it). Errors, each with the reason in words: kFailedPrecondition
// when `base` does not offer a controller (cgroup.controllers: it is bound to a cgroup v1
// hierarchy, or was not delegated) or when a directory on the way holds processes of its own
// (cgroup v2 gives controllers only to cgroups whose parents hold none); kPermissionDenied when
// the kernel refuses the write; kIo otherwise.
Result<void> enableLimitControllers(const std::string& base, const std::string& dir);

// Every process in the cgroup at `path` and in the cgroups below it (up to 8 levels).
std::vector<pid_t> cgroupProcesses(const std::string& path);

// One cgroup made by this process. Moving it transfers the duty to remove it.
class Cgroup {
 public:
  // Creates `base`/`relative` ("cohort/<job>/node0") and the missing directories between.
  // Errors: kAlreadyExists when the leaf exists; kPermissionDenied when the kernel refuses;
  // kIo otherwise.
  static Result<Cgroup> create(const std::string& base, const std::string& relative);

  Cgroup(Cgroup&& other) noexcept;
  Cgroup& operator=(Cgroup&& other) noexcept;
  ~Cgroup();  // remove(), quietly

  const std::string& path() const { return path_; }
  // The cgroup's directory (O_DIRECTORY), for SpawnRequest::cgroup_fd.
  int fd() const { return dir_.get(); }
  // How many directories above path() create() may remove when they are empty.
  int parents() const { return parents_; }

  // Moves process `pid` (of ours, or a child's child we were given) into it. Errors: kIo.
  Result<void> adopt(pid_t pid) const;
  // Holds its processes to `limits` (after enableLimitControllers() for its parent); with a
  // memory limit, the kernel's out-of-memory killer takes the whole cgroup (memory.oom.group).
  // Errors: kIo naming the file that could not be written.
  Result<void> setLimits(const CgroupLimits& limits) const;
  // How many processes the kernel's out-of-memory killer killed in it (memory.events'
  // oom_kill); 0 without the memory controller. Errors: none but kIo for an unreadable file.
  Result<int64_t> oomKills() const;
  // Kills every process in it and waits until none is left. Errors: kDeadlineExceeded after
  // `deadline`, kIo.
  Result<void> killAll(Millis deadline);
  // How many times killAll() found processes to kill (it writes cgroup.kill only then).
  int kills() const { return kills_; }
  // killAll(), then removes the cgroup and, when empty, the directories above it that
  // create() was given. Errors: as killAll(), or kIo when the directory cannot be removed.
  Result<void> remove(Millis deadline = Millis(10000));

 private:
  Cgroup() = default;
  std::string path_;
  UniqueFd dir_;
  int parents_ = 0;
  int kills_ = 0;
};

// Kills every process in the cgroup at `path` (cgroup.kill; on kernels without it, SIGKILL to
// each listed process until none is left) and waits until it is empty. Returns whether there
// was any; a cgroup that does not exist is empty. Errors: kDeadlineExceeded, kIo.
Result<bool> killCgroup(const std::string& path, Millis deadline);

// Removes the cgroup at `path` (the empty cgroups below it first), then up to `parents`
// directories above it, stopping at the first that is not empty. Errors: kIo when `path` itself
// cannot be removed.
Result<void> removeCgroup(const std::string& path, int parents);

// A small process that outlives its creators by moments: when a process that told it about a
// cgroup is gone (exit, crash or kill -9), it kills and removes that process's cgroups; once no
// process can tell it anything more (every holder of its pipe is gone), it cleans up after all
// of them and exits. One serves the process that started it, or every process that adopted it:
// the agents that `cohort run` forks share one, started before them. It sits in a process group
// of its own, ignores SIGINT/SIGTERM/SIGHUP, and watches each creator through a pidfd, so it
// neither dies with a terminal's Ctrl-C nor mistakes a new process with a reused pid for one of
// them.
class CgroupWatchdog {
 public:
  // Forks the watchdog. Call it before the process starts any thread: the child runs ordinary
  // code after fork. Errors: kIo.
  static Result<CgroupWatchdog> start();
  // One that another process started, through the write end of its pipe, `fd`, which this
  // process inherited (a copy of the starter).
  static CgroupWatchdog adopt(UniqueFd fd);

  CgroupWatchdog(CgroupWatchdog&&) noexcept = default;
  CgroupWatchdog& operator=(CgroupWatchdog&&) noexcept = default;

  pid_t pid() const { return pid_; }      // -1 for one adopted
  int fd() const { return pipe_.get(); }  // the pipe's write end, for the copies that adopt it
  // From now on the watchdog removes `cgroup` when this process is gone. Errors: kIo when the
  // watchdog is no longer there.
  Result<void> watch(const Cgroup& cgroup);
  // Every cgroup this process told it about is removed. One this process started (which serves
  // it alone) ends at once (SIGKILL) and is reaped, rather than wake when we are gone to find
  // nothing to do; one adopted forgets this process's cgroups and goes on for the others.
  void retire();
  // For the starter of one that its copies adopted: closes our end of the pipe (they hold
  // theirs), so that the watchdog ends once they are gone; then reap() waits for that, up to
  // `deadline` (SIGKILL after it).
  void detach();
  void reap(Millis deadline);

 private:
  CgroupWatchdog() = default;
  pid_t pid_ = -1;
  UniqueFd pidfd_;  // ours when we started it: it may have been reaped (its pid reused) by now
  UniqueFd pipe_;   // write end; the watchdog reads "<pid> <parents> <path>\n" and "<pid> -\n"
};

}  // namespace cohort::proc
