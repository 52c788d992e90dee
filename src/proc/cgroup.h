// Cgroups for ranks: a cgroup v2 directory per node that holds every process of that node's
// ranks, including those that leave their process group with setsid, so they can all be killed
// at once (cgroup.kill); and a watchdog process that kills and removes that cgroup when the
// process that made it dies, however it dies (kill -9 included). The agent, as root or inside a
// delegated subtree, creates the cgroup under its own and places each child in it between fork
// and exec (SpawnRequest::cgroup_fd), so a rank that runs under another uid needs no access to
// it. Where no writable cgroup v2 tree exists, ownWritableCgroup() says why and callers keep to
// process groups and the child subreaper.
//
// A cgroup's processes can be held to memory, CPU and process limits (setLimits) once
// enableLimitControllers() has found where each controller is: in the cgroup v2 tree, made
// available down to the node's cgroup, or, where the machine binds it to a cgroup v1 hierarchy
// (cgroup v2 then cannot have it), in that hierarchy, below this process's own cgroup there. A
// cgroup then has a directory of the same name in each such hierarchy (its mirrors), which a
// child joins before exec too (SpawnRequest::v1_cgroup_fds) and the watchdog removes with the
// rest; killing and tracking stay cgroup v2's. Where the machine allows neither, it says why.
// Not thread-safe: a Cgroup or a CgroupWatchdog belongs to one owner.
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
  // memory.max (cgroup v1: memory.limit_in_bytes), with swap held to 0 beside it (a limit that
  // swap could stretch is no limit): what the processes hold, their tmpfs files included.
  int64_t memory_bytes = 0;
  double cpus = 0;  // cpu.max (v1: cpu.cfs_quota_us): this many CPUs' time per period, >= 0.01
  // Its share of the CPU time its siblings contend for, in CPUs: cpu.weight 100 per CPU (v1:
  // cpu.shares 1024 per CPU). 0 leaves the kernel's default, which is 1 CPU's.
  double cpu_share = 0;
  int64_t pids = 0;  // pids.max: processes and threads together
};

// The controllers cohort's limits use (their cgroup v2 names, which are cgroup v1's too).
inline constexpr const char* kLimitControllers[] = {"memory", "cpu", "pids"};

// What the kernel says about this process's cgroups: the texts of /proc/self/mountinfo and
// /proc/self/cgroup (own() reads them; tests give their own).
struct ProcessCgroups {
  std::string mountinfo, cgroup;
  static ProcessCgroups own();
};

// A controller held by a cgroup v1 hierarchy, and this process's own cgroup in it.
struct V1Hierarchy {
  std::string controller;  // "memory", "cpu" or "pids"
  std::string dir;         // e.g. /sys/fs/cgroup/memory/system.slice/cohort.service
};

// Where the controllers `controllers` (of kLimitControllers) are for the cgroups made under
// `dir` (`base` or below it). Those that `base` offers (cgroup.controllers) are made available
// by enabling them in cgroup.subtree_control of `base` and of every directory from there down
// to `dir`; for each other one, this process's cgroup in the cgroup v1 hierarchy that holds it
// (from `self`), which must be writable. Returns those v1 hierarchies (none where cgroup v2
// has every controller). Errors, each with the reason in words: kFailedPrecondition when a
// controller is in neither (it was not delegated) or when a directory on the way holds
// processes of its own (cgroup v2 gives controllers only to cgroups whose parents hold none);
// kPermissionDenied when the kernel refuses a write or a v1 hierarchy is not writable; kIo
// otherwise.
Result<std::vector<V1Hierarchy>> enableLimitControllers(
    const std::string& base, const std::string& dir,
    const std::vector<std::string>& controllers = {"memory", "cpu"},
    const ProcessCgroups& self = ProcessCgroups::own());

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
  // Its mirrors' directories in the cgroup v1 hierarchies, for SpawnRequest::v1_cgroup_fds.
  std::vector<int> v1Fds() const;
  // Every directory it has: path(), then its mirrors'.
  std::vector<std::string> paths() const;
  // How many directories above path() create() may remove when they are empty.
  int parents() const { return parents_; }

  // Makes its mirror in each of `v1` (enableLimitControllers()'s), at the same name below
  // that hierarchy's directory as this cgroup is below its base. Errors: as create().
  Result<void> mirrorIn(const std::vector<V1Hierarchy>& v1);
  // Creates the cgroup `name` below this one, mirrored where this one is. Errors: as create().
  Result<Cgroup> child(const std::string& name) const;

  // Moves process `pid` (of ours, or a child's child we were given) into it and its mirrors.
  // Errors: kIo.
  Result<void> adopt(pid_t pid) const;
  // Holds its processes to `limits` (after enableLimitControllers() for its parent), each in
  // the hierarchy that holds its controller. With a memory limit, the kernel's out-of-memory
  // killer takes the whole cgroup under cgroup v2 (memory.oom.group); cgroup v1 has no such
  // switch, and the owner kills the rest itself when oomNotifier() says so. Errors: kIo naming
  // the file that could not be written.
  Result<void> setLimits(const CgroupLimits& limits) const;
  // How many processes the kernel's out-of-memory killer killed in it (memory.events' oom_kill;
  // cgroup v1: memory.oom_control's); 0 without the memory controller. Errors: none but kIo for
  // an unreadable file.
  Result<int64_t> oomKills() const;
  // Where its memory is a cgroup v1 mirror: an eventfd (non-blocking) that becomes readable
  // when the kernel's out-of-memory killer acts in it (cgroup.event_control). Otherwise an
  // invalid descriptor: cgroup v2's memory.oom.group needs no one. Errors: kIo.
  Result<UniqueFd> oomNotifier() const;
  // Sets the CPU share of the cgroup above this one (in the hierarchy of the cpu controller)
  // to the sum of its children's, so that the parent's siblings (other jobs) contend with all
  // of them together, not with one cgroup's default. Several processes may make and weigh
  // children of one parent at once (a job's nodes): each sums again after it wrote, and writes
  // again until what it wrote is the sum, so the last one leaves the whole sum. Errors: kIo.
  Result<void> shareParent() const;
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
  // A directory of its own in a cgroup v1 hierarchy, for that hierarchy's controller.
  struct Mirror {
    std::string controller, path;
    UniqueFd dir;
  };
  const Mirror* mirrorOf(const char* controller) const;
  std::string path_;
  std::string relative_;  // path_ below its base: where its mirrors are below theirs
  UniqueFd dir_;
  std::vector<Mirror> mirrors_;
  int parents_ = 0;
  int kills_ = 0;
};

// Kills every process in the cgroup at `path` (cgroup.kill; on kernels without it, and in a
// cgroup v1 hierarchy, SIGKILL to each listed process until none is left) and waits until it
// is empty. Returns whether there
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
  // From now on the watchdog removes `cgroup` (and its mirrors) when this process is gone.
  // Errors: kIo when the watchdog is no longer there.
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
