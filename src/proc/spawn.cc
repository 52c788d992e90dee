#include "proc/spawn.h"

#include <fcntl.h>
#include <linux/sched.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "util/text.h"

#ifndef P_PIDFD
#define P_PIDFD 3
#endif

namespace cohort::proc {

namespace {

// Where a child failed before exec; it sends the stage and errno through a pipe.
enum Stage {
  kStagePrctl = 1,
  kStageSetpgid,
  kStageChdir,
  kStageDup2,
  kStageExec,
  kStageCgroup,
  kStageSetgroups,
  kStageSetresgid,
  kStageSetresuid,
};

// The 32-bit-id calls where an architecture has both.
#ifdef SYS_setresuid32
constexpr long kSysSetgroups = SYS_setgroups32;
constexpr long kSysSetresgid = SYS_setresgid32;
constexpr long kSysSetresuid = SYS_setresuid32;
#else
constexpr long kSysSetgroups = SYS_setgroups;
constexpr long kSysSetresgid = SYS_setresgid;
constexpr long kSysSetresuid = SYS_setresuid;
#endif

// What a child needs between fork and exec, all of it made before the fork.
struct ChildSetup {
  const SpawnRequest* req = nullptr;
  const char* program = nullptr;
  char** argv = nullptr;
  char** envp = nullptr;
  int cgroup_procs = -1;  // the cgroup to join by writing to it, when the fork did not place us
  int err_fd = -1;        // where a failure before exec is told: {stage, errno}
  int stdin_fd = -1;
  pid_t parent = -1;
  sigset_t empty;
};

// The child's side, from fork to exec. It shares the parent's memory (vfork, or clone3 with
// CLONE_VM): async-signal-safe calls only, on data prepared before, writing nothing but locals.
[[noreturn]] void runChild(const ChildSetup& c) {
  const SpawnRequest& req = *c.req;
  auto die = [&](int stage) {
    int code[2] = {stage, errno};
    ssize_t n = ::write(c.err_fd, code, sizeof code);
    (void)n;
    _exit(127);
  };
  const bool change_identity = req.uid >= 0 || req.gid >= 0;
  const long uid = req.uid, gid = req.gid;
  if (req.new_process_group && ::setpgid(0, 0) < 0) die(kStageSetpgid);
  if (c.cgroup_procs >= 0 && ::write(c.cgroup_procs, "0", 1) != 1) die(kStageCgroup);
  // Raw system calls: glibc's wrappers would make every thread of the parent change identity
  // too, by signalling them, which a child that shares the parent's memory must never do.
  if (change_identity && ::syscall(kSysSetgroups, 0, nullptr) < 0) die(kStageSetgroups);
  if (gid >= 0 && ::syscall(kSysSetresgid, gid, gid, gid) < 0) die(kStageSetresgid);
  if (uid >= 0 && ::syscall(kSysSetresuid, uid, uid, uid) < 0) die(kStageSetresuid);
  // After the identity: changing it clears the death signal.
  if (req.death_signal && ::prctl(PR_SET_PDEATHSIG, req.death_signal) < 0) die(kStagePrctl);
  if (::getppid() != c.parent) _exit(127);
  for (int s = 1; s < NSIG; ++s) ::signal(s, SIG_DFL);
  ::sigprocmask(SIG_SETMASK, &c.empty, nullptr);
  if (!req.cwd.empty() && ::chdir(req.cwd.c_str()) < 0) die(kStageChdir);
  if (c.stdin_fd >= 0 && ::dup2(c.stdin_fd, 0) < 0) die(kStageDup2);
  if (req.stdout_fd >= 0) {
    if (::dup2(req.stdout_fd, 1) < 0) die(kStageDup2);
    if (req.merge_stderr && req.stderr_fd < 0 && ::dup2(req.stdout_fd, 2) < 0) die(kStageDup2);
  }
  if (req.stderr_fd >= 0 && ::dup2(req.stderr_fd, 2) < 0) die(kStageDup2);
  if (req.fd3 == 3 && ::fcntl(3, F_SETFD, 0) < 0) die(kStageDup2);
  if (req.fd3 >= 0 && req.fd3 != 3 && ::dup2(req.fd3, 3) < 0) die(kStageDup2);
  ::execve(c.program, c.argv, c.envp);
  die(kStageExec);
  __builtin_unreachable();
}

#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
// ASan cannot follow a child onto a stack it did not make: its builds take the vfork way.
// clone3(args, size) whose child runs fn(arg) on the stack that `args` gives it and exits with
// what fn returns; the parent gets clone3's answer (a pid, or -errno). The child resumes on a
// stack of its own, which no C function can do: hence these instructions.
extern "C" long cohort_clone3_run(clone_args* args, size_t size, int (*fn)(void*), void* arg);
asm(R"(
  .text
  .globl cohort_clone3_run
  .type cohort_clone3_run, @function
cohort_clone3_run:
  push %r12
  push %r13
  mov %rdx, %r12
  mov %rcx, %r13
  mov $435, %eax
  syscall
  test %rax, %rax
  jz 1f
  pop %r13
  pop %r12
  ret
1:
  xor %ebp, %ebp
  mov %r13, %rdi
  call *%r12
  mov %eax, %edi
  mov $60, %eax
  syscall
  hlt
  .size cohort_clone3_run, .-cohort_clone3_run
  .section .note.GNU-stack,"",@progbits
  .text
)");

// The child, placed in the cgroup by the kernel as it is made.
int childInCgroup(void* setup) { runChild(*static_cast<const ChildSetup*>(setup)); }

// Starts the child straight in the cgroup `cgroup_fd` (clone3, CLONE_INTO_CGROUP, Linux 5.7),
// sharing our memory until it execs, as vfork does. Returns its pid, or -1 where the kernel
// cannot (the caller then forks, and the child joins the cgroup itself).
pid_t spawnIntoCgroup(const ChildSetup& setup, int cgroup_fd) {
  constexpr size_t kStack = 256 * 1024;
  void* stack = ::mmap(nullptr, kStack, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  if (stack == MAP_FAILED) return -1;
  clone_args args{};
  args.flags = CLONE_VM | CLONE_VFORK | CLONE_INTO_CGROUP;
  args.exit_signal = SIGCHLD;
  args.stack = reinterpret_cast<uint64_t>(stack);
  args.stack_size = kStack;
  args.cgroup = static_cast<uint64_t>(cgroup_fd);
  long pid = cohort_clone3_run(&args, sizeof args, childInCgroup, const_cast<ChildSetup*>(&setup));
  ::munmap(stack, kStack);  // the child has exec'd or exited: CLONE_VFORK waited for that
  return pid > 0 ? static_cast<pid_t>(pid) : -1;
}
#else
pid_t spawnIntoCgroup(const ChildSetup&, int) { return -1; }
#endif

}  // namespace

int openPidfd(pid_t pid) { return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)); }

std::string ExitStatus::describe() const {
  if (signal) {
    const char* name = sigabbrev_np(signal);
    return std::string("killed by SIG") + (name ? name : std::to_string(signal).c_str());
  }
  return "exited with code " + std::to_string(code);
}

Result<std::string> findProgram(const std::string& program, const std::string& path,
                                const std::string& cwd) {
  auto executable = [](const std::string& p) {
    struct stat st{};
    return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(p.c_str(), X_OK) == 0;
  };
  if (program.empty()) return fail(Code::kInvalidArgument, "empty program name");
  if (program.find('/') != std::string::npos) {
    std::string full = program[0] == '/' ? program : cwd + "/" + program;
    if (executable(full)) return full;
    struct stat st{};
    if (::stat(full.c_str(), &st) == 0) {
      return fail(Code::kNotFound, "'" + program + "' is not an executable file");
    }
    return fail(Code::kNotFound, "'" + program + "': No such file or directory");
  }
  for (const std::string& dir : split(path, ':')) {
    std::string full = (dir.empty() ? cwd : dir[0] == '/' ? dir : cwd + "/" + dir) + "/" + program;
    if (executable(full)) return full;
  }
  return fail(Code::kNotFound, "'" + program + "' not found on PATH");
}

Result<Child> spawn(const SpawnRequest& req) {
  if (req.argv.empty()) return fail(Code::kInvalidArgument, "spawn: empty argv");
  std::string path_var = "/usr/local/bin:/usr/bin:/bin";
  for (const auto& kv : req.env) {
    if (startsWith(kv, "PATH=")) path_var = kv.substr(5);
  }
  char cwd_buf[4096];
  std::string cwd = req.cwd.empty() ? (::getcwd(cwd_buf, sizeof cwd_buf) ? cwd_buf : ".") : req.cwd;
  COHORT_ASSIGN(std::string program, findProgram(req.argv[0], path_var, cwd));

  std::vector<char*> argv;
  for (const auto& a : req.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (const auto& e : req.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  int err_pipe[2];
  if (::pipe2(err_pipe, O_CLOEXEC) < 0) return failErrno("pipe2");
  UniqueFd err_read(err_pipe[0]);
  UniqueFd err_write(err_pipe[1]);
  UniqueFd dev_null;
  if (req.stdin_fd < 0) dev_null.reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));

  ChildSetup setup;
  setup.req = &req;
  setup.program = program.c_str();
  setup.argv = argv.data();
  setup.envp = envp.data();
  setup.err_fd = err_write.get();
  setup.stdin_fd = req.stdin_fd >= 0 ? req.stdin_fd : dev_null.get();
  setup.parent = ::getpid();
  sigemptyset(&setup.empty);
  // Straight into the cgroup where the kernel can (clone3's CLONE_INTO_CGROUP): joining it
  // between fork and exec instead takes the cgroup tree's write lock for every rank.
  pid_t pid = req.cgroup_fd >= 0 ? spawnIntoCgroup(setup, req.cgroup_fd) : -1;
  UniqueFd cgroup_procs;
  if (pid < 0 && req.cgroup_fd >= 0) {
    // Else the child joins it itself, writing to this.
    cgroup_procs.reset(::openat(req.cgroup_fd, "cgroup.procs", O_WRONLY | O_CLOEXEC));
    if (!cgroup_procs.valid()) {
      return fail(Code::kFailedPrecondition, "open the cgroup's 'cgroup.procs' for '" +
                                                 req.argv[0] + "': " + std::strerror(errno));
    }
    setup.cgroup_procs = cgroup_procs.get();
  }
  if (pid < 0) {
    // vfork: the child shares our memory until it execs, so no page tables are copied (this is
    // most of the cost of starting a rank). The child below only calls async-signal-safe
    // functions on data prepared before, and writes nothing but its own locals.
    pid = ::vfork();
    if (pid < 0) return failErrno("fork for '" + req.argv[0] + "'");
    if (pid == 0) runChild(setup);
  }
  err_write.reset();
  Child child;
  child.pid = pid;
  child.pidfd.reset(openPidfd(pid));
  int code[2] = {0, 0};
  ssize_t n;
  do {
    n = ::read(err_read.get(), code, sizeof code);
  } while (n < 0 && errno == EINTR);
  if (n == sizeof code) {
    // The child failed before exec; reap it now.
    siginfo_t info{};
    ::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED);
    const std::string program_name = "'" + req.argv[0] + "'";
    const std::string reason = std::strerror(code[1]);
    switch (code[0]) {
      case kStageChdir:
        return failErrno("chdir '" + req.cwd + "'", code[1]);
      case kStageCgroup:
        return fail(Code::kFailedPrecondition, "join the cgroup for " + program_name + ": " +
                                                   reason);
      case kStageSetgroups:
        return fail(Code::kPermissionDenied,
                    "clear the supplementary groups for " + program_name + ": " + reason);
      case kStageSetresgid:
        return fail(Code::kPermissionDenied,
                    "set gid " + std::to_string(req.gid) + " for " + program_name + ": " + reason);
      case kStageSetresuid:
        return fail(Code::kPermissionDenied,
                    "set uid " + std::to_string(req.uid) + " for " + program_name + ": " + reason);
      case kStagePrctl:
        return failErrno("prctl " + program_name, code[1]);
      case kStageSetpgid:
        return failErrno("setpgid " + program_name, code[1]);
      case kStageDup2:
        return failErrno("dup2 " + program_name, code[1]);
      default:
        return failErrno("exec " + program_name, code[1]);
    }
  }
  if (!child.pidfd.valid()) return failErrno("pidfd_open");
  return child;
}

Result<Captured> runCaptured(SpawnRequest request, Millis timeout) {
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) < 0) return failErrno("pipe2");
  UniqueFd out_read(out[0]), out_write(out[1]);
  if (::pipe2(err, O_CLOEXEC) < 0) return failErrno("pipe2");
  UniqueFd err_read(err[0]), err_write(err[1]);
  request.stdout_fd = out_write.get();
  request.stderr_fd = err_write.get();
  COHORT_ASSIGN(Child child, spawn(request));
  out_write.reset();
  err_write.reset();
  Captured captured;
  const auto until = std::chrono::steady_clock::now() + timeout;
  bool timed_out = false;
  while (out_read.valid() || err_read.valid()) {
    pollfd p[2] = {{out_read.get(), POLLIN, 0}, {err_read.get(), POLLIN, 0}};
    const auto left = std::chrono::duration_cast<Millis>(until - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    if (::poll(p, 2, static_cast<int>(left.count())) < 0 && errno != EINTR) break;
    for (int i = 0; i < 2; ++i) {
      if (p[i].fd < 0 || !(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buf[4096];
      ssize_t n = ::read(p[i].fd, buf, sizeof buf);
      if (n > 0) {
        (i == 0 ? captured.out : captured.err).append(buf, static_cast<size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        (i == 0 ? out_read : err_read).reset();
      }
    }
  }
  if (timed_out) ::kill(child.pid, SIGKILL);
  COHORT_ASSIGN(captured.status, reap(child.pidfd.get()));
  if (timed_out) {
    return fail(Code::kDeadlineExceeded, request.argv[0] + " did not answer within " +
                                             formatDuration(timeout));
  }
  return captured;
}

Result<ExitStatus> reap(int pidfd) {
  siginfo_t info{};
  if (::waitid(static_cast<idtype_t>(P_PIDFD), static_cast<id_t>(pidfd), &info, WEXITED) < 0) {
    return failErrno("waitid");
  }
  ExitStatus status;
  if (info.si_code == CLD_EXITED) {
    status.code = info.si_status;
  } else {
    status.signal = info.si_status;
  }
  return status;
}

}  // namespace cohort::proc
