// Spawning and reaping processes the way the supervisor needs: argv and environment built before
// fork, only async-signal-safe calls in the child, a pidfd for every child, exec failures
// reported to the parent as an Error (not as a mysterious exit code 127).
// Call spawn() only from the long-lived loop thread: PR_SET_PDEATHSIG follows the thread.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "util/fd.h"
#include "util/result.h"
#include "util/text.h"

namespace cohort::proc {

struct SpawnRequest {
  std::vector<std::string> argv;
  std::vector<std::string> env;  // "KEY=VALUE", the whole environment
  std::string cwd;               // empty: inherit
  int stdin_fd = -1;             // -1: /dev/null
  int stdout_fd = -1;            // -1: inherit; otherwise also used for stderr
  bool merge_stderr = true;      // send stderr to stdout_fd too
  int stderr_fd = -1;            // >= 0: stderr goes here (merge_stderr is then ignored)
  bool new_process_group = true;
  int death_signal = SIGKILL;    // sent to the child when the spawning thread dies
  // The Unix identity the child runs as (-1: unchanged); setting either also clears the
  // supplementary groups. Needs the privilege to change identity (root).
  int uid = -1;
  int gid = -1;
  // No exec of the child's may give it more privilege than it has (PR_SET_NO_NEW_PRIVS: set-uid
  // and file capabilities do nothing), set after the identity.
  bool no_new_privs = false;
  // A network namespace the child joins before it takes its identity (needs the privilege to,
  // root); -1: ours.
  int netns_fd = -1;
  int cgroup_fd = -1;  // a cgroup v2 directory the child joins before exec; -1: ours
  // Directories of cgroup v1 hierarchies (where the controllers of its limits are: proc/
  // cgroup.h) that the child joins too, before exec and before it takes its identity.
  std::vector<int> v1_cgroup_fds;
  int fd3 = -1;        // >= 0: given to the child as its descriptor 3
};

struct PendingExec;

struct Child {
  pid_t pid = -1;
  UniqueFd pidfd;  // readable when the child has exited
  // Set by start() until finish(): what the child reads of our memory before its exec.
  std::unique_ptr<PendingExec> pending;

  Child();
  Child(Child&&) noexcept;
  Child& operator=(Child&&) noexcept;
  ~Child();
};

// Starts the process. In the child, before exec: its own process group, the cgroup, the network
// namespace, then the identity (supplementary groups, gid, uid, with raw system calls: a child
// sharing our memory must not run glibc's setuid family, which signals every thread of the
// parent), then the death signal (a change of identity clears it), no new privileges, the signal
// mask, the directory and the descriptors.
// Errors: kNotFound when the program is not found on PATH (of `env`) or in `cwd`;
// kFailedPrecondition when the child cannot join `cgroup_fd` or one of `v1_cgroup_fds`; kPermissionDenied when the
// identity cannot be taken (naming the uid or gid); kIo for other exec or fork failures, naming
// the program.
Result<Child> spawn(const SpawnRequest& request);

// spawn() without waiting for the child's exec, where the kernel lets the child run beside us
// on a stack of its own (clone3 on x86-64, not under ASan; elsewhere it waits, as spawn()):
// starting many children then overlaps each one's exec with the next one's start. The child
// may fail after start() has returned: call finish() before relying on it. start()'s own errors
// are spawn()'s that need no child (a program not found, the cgroup's file, no fork).
Result<Child> start(SpawnRequest request);

// Waits until a child from start() has exec'd (at once when it has, or when it was not
// started that way) and frees what it read. Errors: those of spawn() for a child that failed
// before its exec; that child is reaped and its pidfd closed.
Result<void> finish(Child& child);

// Runs `body` in a copy of this process (fork without exec), which exits with what `body`
// returns, stdio flushed (70, the exception said on stderr, when it throws: it never unwinds
// into the caller's frames). The copy is set up as spawn() sets up a program: a process group of
// its own, `death_signal` when this thread dies, every signal handler back to the default and
// nothing blocked, stdin from `stdin_fd` (-1: /dev/null), stdout and stderr ours, and none of
// our other descriptors but those in `keep_fds`. It saves the program's start (its dynamic
// loading, milliseconds), but only a process with one thread may do it: the copy has no other
// thread, and would keep the locks they held. Errors: kFailedPrecondition when this process has
// another thread; kIo when the fork fails.
Result<Child> forkCall(int death_signal, int stdin_fd, const std::function<int()>& body,
                       std::vector<int> keep_fds = {});

// The fields of /proc/<pid>/stat after "(comm) " (comm may hold spaces and parentheses):
// [0] the state, [1] the ppid, [2] the process group, ... (proc(5), from field 3). Empty when
// it cannot be read; pid 0 is this process.
std::vector<std::string> statFields(pid_t pid);

// How many threads this process has (/proc/self/stat); 0 when it cannot tell.
int threadCount();

// How a process ended.
struct ExitStatus {
  int code = 0;    // exit code when it exited
  int signal = 0;  // the signal that killed it, else 0
  // 0 on success, the exit code, or 128 + signal (the shell's convention).
  int shellCode() const { return signal ? 128 + signal : code; }
  std::string describe() const;  // "exited with code 3", "killed by SIGKILL"
};

// Reaps a child whose pidfd became readable. Errors: kIo.
Result<ExitStatus> reap(int pidfd);

// Finds `program` as execvp would: a path with '/' is taken relative to `cwd`, a bare name is
// looked up in `path`. Returns the absolute path, or kNotFound.
Result<std::string> findProgram(const std::string& program, const std::string& path,
                                const std::string& cwd);

int openPidfd(pid_t pid);

// A command run to its end with what it printed: for the cluster tools cohort drives (sbatch,
// squeue, scancel).
struct Captured {
  ExitStatus status;
  std::string out, err;
};

// Runs `request` (its stdout and stderr are replaced by pipes) and waits for it. Past `timeout`
// the command is killed and the error is kDeadlineExceeded. Errors: those of spawn().
Result<Captured> runCaptured(SpawnRequest request, Millis timeout);

}  // namespace cohort::proc
