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

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>

#include "util/text.h"

#ifndef P_PIDFD
#define P_PIDFD 3
#endif

namespace cohort::proc {

// What a child needs between fork and exec, all of it made before the fork. Outside the
// anonymous namespace: PendingExec, a class the header names, holds one.
struct ChildSetup {
  const SpawnRequest* req = nullptr;
  const char* program = nullptr;
  char** argv = nullptr;
  char** envp = nullptr;
  int cgroup_procs = -1;  // the cgroup to join by writing to it, when the fork did not place us
  const int* v1_procs = nullptr;  // the cgroup v1 ones' cgroup.procs, to join the same way
  size_t v1_count = 0;
  int err_fd = -1;        // where a failure before exec is told: {stage, errno}
  int stdin_fd = -1;
  pid_t parent = -1;
};

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
  kStageSetns,
  kStageNoNewPrivs,
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

// A system call that leaves errno alone. A child started by start() runs beside its parent in
// the parent's memory, thread-local errno included, so it must not write errno.
long sys(long n, long a = 0, long b = 0, long c = 0, long d = 0, long e = 0) {
#if defined(__x86_64__)
  long ret;
  register long r10 asm("r10") = d;
  register long r8 asm("r8") = e;
  asm volatile("syscall"
               : "=a"(ret)
               : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8)
               : "rcx", "r11", "memory");
  return ret;
#else
  // Elsewhere children share the parent's memory only while it waits (vfork).
  long ret = ::syscall(n, a, b, c, d, e);
  return ret < 0 ? -errno : ret;
#endif
}

// The child's side, from fork to exec. It shares the parent's memory (vfork, or clone3 with
// CLONE_VM), maybe while the parent runs on: raw system calls only, on data prepared before,
// writing nothing but locals on its own stack.
[[noreturn]] void runChild(const ChildSetup& c) {
  const SpawnRequest& req = *c.req;
  auto die = [&](int stage, long err) {
    int code[2] = {stage, static_cast<int>(-err)};
    sys(SYS_write, c.err_fd, reinterpret_cast<long>(code), sizeof code);
    sys(SYS_exit_group, 127);
    __builtin_unreachable();
  };
  // dup2 as dup3 does it (arm64 has no dup2); dup2 of a descriptor onto itself changes nothing.
  auto dup2 = [](int from, int to) { return from == to ? 0 : sys(SYS_dup3, from, to, 0); };
  const bool change_identity = req.uid >= 0 || req.gid >= 0;
  const long uid = req.uid, gid = req.gid;
  long r;
  if (req.new_process_group && (r = sys(SYS_setpgid, 0, 0)) < 0) die(kStageSetpgid, r);
  if (c.cgroup_procs >= 0 &&
      (r = sys(SYS_write, c.cgroup_procs, reinterpret_cast<long>("0"), 1)) != 1) {
    die(kStageCgroup, r < 0 ? r : -EIO);
  }
  for (size_t i = 0; i < c.v1_count; ++i) {
    if ((r = sys(SYS_write, c.v1_procs[i], reinterpret_cast<long>("0"), 1)) != 1) {
      die(kStageCgroup, r < 0 ? r : -EIO);
    }
  }
  // The network namespace first: joining one takes the privilege the identity below gives up.
  if (req.netns_fd >= 0 && (r = sys(SYS_setns, req.netns_fd, CLONE_NEWNET)) < 0) {
    die(kStageSetns, r);
  }
  // Raw system calls: glibc's wrappers would make every thread of the parent change identity
  // too, by signalling them, which a child that shares the parent's memory must never do.
  if (change_identity && (r = sys(kSysSetgroups, 0, 0)) < 0) die(kStageSetgroups, r);
  if (gid >= 0 && (r = sys(kSysSetresgid, gid, gid, gid)) < 0) die(kStageSetresgid, r);
  if (uid >= 0 && (r = sys(kSysSetresuid, uid, uid, uid)) < 0) die(kStageSetresuid, r);
  // After the identity: changing it clears the death signal.
  if (req.death_signal && (r = sys(SYS_prctl, PR_SET_PDEATHSIG, req.death_signal)) < 0) {
    die(kStagePrctl, r);
  }
  if (req.no_new_privs && (r = sys(SYS_prctl, PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)) < 0) {
    die(kStageNoNewPrivs, r);
  }
  if (sys(SYS_getppid) != c.parent) sys(SYS_exit_group, 127);
  // Every handler back to the default (SIGKILL and SIGSTOP refuse, harmlessly), nothing blocked:
  // the kernel's sigaction and a mask of 64 bits.
  struct {
    unsigned long handler = 0, flags = 0, restorer = 0, mask = 0;
  } dfl;
  for (int s = 1; s <= 64; ++s) sys(SYS_rt_sigaction, s, reinterpret_cast<long>(&dfl), 0, 8);
  const unsigned long none = 0;
  sys(SYS_rt_sigprocmask, SIG_SETMASK, reinterpret_cast<long>(&none), 0, 8);
  if (!req.cwd.empty() && (r = sys(SYS_chdir, reinterpret_cast<long>(req.cwd.c_str()))) < 0) {
    die(kStageChdir, r);
  }
  if (c.stdin_fd >= 0 && (r = dup2(c.stdin_fd, 0)) < 0) die(kStageDup2, r);
  if (req.stdout_fd >= 0) {
    if ((r = dup2(req.stdout_fd, 1)) < 0) die(kStageDup2, r);
    if (req.merge_stderr && req.stderr_fd < 0 && (r = dup2(req.stdout_fd, 2)) < 0) {
      die(kStageDup2, r);
    }
  }
  if (req.stderr_fd >= 0 && (r = dup2(req.stderr_fd, 2)) < 0) die(kStageDup2, r);
  if (req.fd3 == 3 && (r = sys(SYS_fcntl, 3, F_SETFD, 0)) < 0) die(kStageDup2, r);
  if (req.fd3 >= 0 && req.fd3 != 3 && (r = dup2(req.fd3, 3)) < 0) die(kStageDup2, r);
  r = sys(SYS_execve, reinterpret_cast<long>(c.program), reinterpret_cast<long>(c.argv),
          reinterpret_cast<long>(c.envp));
  die(kStageExec, r);
  __builtin_unreachable();
}

// vfork: the child shares our memory until it execs while we wait, so no page tables are
// copied (this is most of the cost of starting a process). A function of its own, so that no
// caller's variable lives across the vfork.
[[gnu::noinline]] pid_t vforkChild(const ChildSetup& setup) {
  pid_t pid = ::vfork();
  if (pid == 0) runChild(setup);
  return pid;
}

constexpr size_t kStack = 256 * 1024;

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

int childOnItsStack(void* setup) { runChild(*static_cast<const ChildSetup*>(setup)); }

// Starts the child on `stack` (kStack bytes) with clone3, sharing our memory until it execs,
// and straight in the cgroup `cgroup_fd` when that is >= 0 (CLONE_INTO_CGROUP, Linux 5.7).
// The child runs beside us: `setup`, what it points to and the stack must outlive its exec.
// Returns its pid, or -1 where the kernel cannot (the caller then vforks, and the child joins
// the cgroup itself).
pid_t cloneOnStack(const ChildSetup& setup, void* stack, int cgroup_fd) {
  clone_args args{};
  args.flags = CLONE_VM | (cgroup_fd >= 0 ? CLONE_INTO_CGROUP : 0);
  args.exit_signal = SIGCHLD;
  args.stack = reinterpret_cast<uint64_t>(stack);
  args.stack_size = kStack;
  args.cgroup = cgroup_fd >= 0 ? static_cast<uint64_t>(cgroup_fd) : 0;
  long pid =
      cohort_clone3_run(&args, sizeof args, childOnItsStack, const_cast<ChildSetup*>(&setup));
  return pid > 0 ? static_cast<pid_t>(pid) : -1;
}
constexpr bool kCanCloneOnStack = true;
#else
pid_t cloneOnStack(const ChildSetup&, void*, int) { return -1; }
constexpr bool kCanCloneOnStack = false;
#endif

// The error spawn() returns for a child that told `code` before exec.
tl::unexpected<Error> childError(const SpawnRequest& req, const int code[2]) {
  const std::string program_name = "'" + req.argv[0] + "'";
  const std::string reason = std::strerror(code[1]);
  switch (code[0]) {
    case kStageChdir:
      return failErrno("chdir '" + req.cwd + "'", code[1]);
    case kStageCgroup:
      return fail(Code::kFailedPrecondition, "join the cgroup for " + program_name + ": " + reason);
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
    case kStageSetns:
      return fail(Code::kPermissionDenied,
                  "join the node's network namespace for " + program_name + ": " + reason);
    case kStageNoNewPrivs:
      return failErrno("prctl(PR_SET_NO_NEW_PRIVS) " + program_name, code[1]);
    case kStageSetpgid:
      return failErrno("setpgid " + program_name, code[1]);
    case kStageDup2:
      return failErrno("dup2 " + program_name, code[1]);
    default:
      return failErrno("exec " + program_name, code[1]);
  }
}

}  // namespace

// What a child started by start() reads until its exec, and where it tells a failure.
struct PendingExec {
  SpawnRequest req;
  std::string program;
  std::vector<char*> argv, envp;
  UniqueFd dev_null, cgroup_procs;
  std::vector<UniqueFd> v1_procs;
  std::vector<int> v1_procs_fds;
  UniqueFd err_read;  // end of file once the child has exec'd (or died); {stage, errno} if not
  ChildSetup setup;
  void* stack = nullptr;

  ~PendingExec() {
    if (stack) ::munmap(stack, kStack);
  }
};

namespace {

// Whether the child of `p` has exec'd or died, so that its memory can go; never waits.
bool execOver(const PendingExec& p) {
  pollfd fd = {p.err_read.get(), POLLIN, 0};
  return ::poll(&fd, 1, 0) == 1 && (fd.revents & POLLHUP) && !(fd.revents & POLLIN);
}

}  // namespace

Child::Child() = default;
Child::Child(Child&&) noexcept = default;
Child& Child::operator=(Child&&) noexcept = default;
Child::~Child() {
  // A child that may still run on our memory keeps it: leaked rather than freed under it.
  if (pending && !execOver(*pending)) (void)pending.release();
}

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

Result<Child> start(SpawnRequest request) {
  if (request.argv.empty()) return fail(Code::kInvalidArgument, "spawn: empty argv");
  std::string path_var = "/usr/local/bin:/usr/bin:/bin";
  for (const auto& kv : request.env) {
    if (startsWith(kv, "PATH=")) path_var = kv.substr(5);
  }
  char cwd_buf[4096];
  std::string cwd =
      request.cwd.empty() ? (::getcwd(cwd_buf, sizeof cwd_buf) ? cwd_buf : ".") : request.cwd;
  auto p = std::make_unique<PendingExec>();
  COHORT_ASSIGN(p->program, findProgram(request.argv[0], path_var, cwd));
  p->req = std::move(request);
  const SpawnRequest& req = p->req;
  for (const auto& a : req.argv) p->argv.push_back(const_cast<char*>(a.c_str()));
  p->argv.push_back(nullptr);
  for (const auto& e : req.env) p->envp.push_back(const_cast<char*>(e.c_str()));
  p->envp.push_back(nullptr);

  int err_pipe[2];
  if (::pipe2(err_pipe, O_CLOEXEC) < 0) return failErrno("pipe2");
  p->err_read.reset(err_pipe[0]);
  UniqueFd err_write(err_pipe[1]);
  if (req.stdin_fd < 0) p->dev_null.reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));

  ChildSetup& setup = p->setup;
  setup.req = &req;
  setup.program = p->program.c_str();
  setup.argv = p->argv.data();
  setup.envp = p->envp.data();
  setup.err_fd = err_write.get();
  setup.stdin_fd = req.stdin_fd >= 0 ? req.stdin_fd : p->dev_null.get();
  setup.parent = ::getpid();
  for (int dir : req.v1_cgroup_fds) {
    p->v1_procs.emplace_back(::openat(dir, "cgroup.procs", O_WRONLY | O_CLOEXEC));
    if (!p->v1_procs.back().valid()) {
      return fail(Code::kFailedPrecondition, "open a cgroup v1 'cgroup.procs' for '" +
                                                 req.argv[0] + "': " + std::strerror(errno));
    }
    p->v1_procs_fds.push_back(p->v1_procs.back().get());
  }
  setup.v1_procs = p->v1_procs_fds.data();
  setup.v1_count = p->v1_procs_fds.size();
  // On a stack of its own, so that we need not wait for its exec, and straight into the cgroup
  // (clone3's CLONE_INTO_CGROUP): joining it between fork and exec instead takes the cgroup
  // tree's write lock for every rank.
  pid_t pid = -1;
  if (kCanCloneOnStack) {
    p->stack = ::mmap(nullptr, kStack, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (p->stack == MAP_FAILED) p->stack = nullptr;
    if (p->stack) pid = cloneOnStack(setup, p->stack, req.cgroup_fd);
  }
  const bool waited = pid < 0;
  if (waited) {
    if (req.cgroup_fd >= 0) {
      // The child joins the cgroup itself, writing to this.
      p->cgroup_procs.reset(::openat(req.cgroup_fd, "cgroup.procs", O_WRONLY | O_CLOEXEC));
      if (!p->cgroup_procs.valid()) {
        return fail(Code::kFailedPrecondition, "open the cgroup's 'cgroup.procs' for '" +
                                                   req.argv[0] + "': " + std::strerror(errno));
      }
      setup.cgroup_procs = p->cgroup_procs.get();
    }
    pid = vforkChild(setup);
    if (pid < 0) return failErrno("fork for '" + req.argv[0] + "'");
  }
  err_write.reset();
  Child child;
  child.pid = pid;
  child.pidfd.reset(openPidfd(pid));
  child.pending = std::move(p);
  if (waited) COHORT_TRY(finish(child));
  return child;
}

Result<void> finish(Child& child) {
  if (!child.pending) return {};
  PendingExec& p = *child.pending;
  int code[2] = {0, 0};
  ssize_t n;
  do {
    n = ::read(p.err_read.get(), code, sizeof code);
  } while (n < 0 && errno == EINTR);
  if (n == sizeof code) {
    // The child failed before exec and is leaving: reap it, then its stack can go.
    siginfo_t info{};
    ::waitid(P_PID, static_cast<id_t>(child.pid), &info, WEXITED);
    auto error = childError(p.req, code);
    child.pidfd.reset();
    child.pending.reset();
    return error;
  }
  if (n != 0) {
    // Whether it exec'd is unknown: its memory is kept for good.
    (void)child.pending.release();
    return failErrno("read the exec status of '" + p.req.argv[0] + "'");
  }
  child.pending.reset();  // it has exec'd, or died: our memory is ours again
  if (!child.pidfd.valid()) return failErrno("pidfd_open");
  return {};
}

Result<Child> forkCall(int death_signal, int stdin_fd, const std::function<int()>& body,
                       std::vector<int> keep_fds) {
  std::sort(keep_fds.begin(), keep_fds.end());
  if (const int threads = threadCount(); threads != 1) {
    return fail(Code::kFailedPrecondition,
                "cannot fork a copy of a process with " + std::to_string(threads) + " threads");
  }
  std::fflush(nullptr);  // or the copy would write what we buffered once more
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) return failErrno("fork");
  if (pid == 0) {
    ::setpgid(0, 0);
    if (::prctl(PR_SET_PDEATHSIG, death_signal) < 0 || ::getppid() != parent) ::_exit(127);
    struct sigaction dfl{};
    dfl.sa_handler = SIG_DFL;
    for (int sig = 1; sig < NSIG; ++sig) ::sigaction(sig, &dfl, nullptr);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    const int in = stdin_fd >= 0 ? stdin_fd : ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (in < 0 || (in != 0 && ::dup2(in, 0) < 0)) ::_exit(127);
    unsigned from = 3;  // the lowest descriptor not yet closed or kept
    for (int fd : keep_fds) {
      if (fd < 0 || static_cast<unsigned>(fd) < from) continue;
      if (static_cast<unsigned>(fd) > from) ::close_range(from, static_cast<unsigned>(fd) - 1, 0);
      from = static_cast<unsigned>(fd) + 1;
    }
    ::close_range(from, ~0U, 0);
    // Nothing may unwind out of the body: above it are the caller's frames, which are ours.
    int code = 70;
    try {
      code = body();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "cohort: %s\n", e.what());
    } catch (...) {
      std::fprintf(stderr, "cohort: an unknown exception\n");
    }
    std::fflush(nullptr);
    ::_exit(code);
  }
  Child child;
  child.pid = pid;
  child.pidfd.reset(openPidfd(pid));
  if (!child.pidfd.valid()) {
    const int err = errno;
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    return failErrno("pidfd_open", err);
  }
  return child;
}

std::vector<std::string> statFields(pid_t pid) {
  auto stat = readFile("/proc/" + (pid ? std::to_string(pid) : std::string("self")) + "/stat");
  if (!stat) return {};
  const size_t paren = stat->rfind(')');
  if (paren == std::string::npos || paren + 2 >= stat->size()) return {};
  return split(stat->substr(paren + 2), ' ');
}

int threadCount() {
  const std::vector<std::string> fields = statFields(0);
  return fields.size() > 17 ? std::atoi(fields[17].c_str()) : 0;  // num_threads, field 20
}

Result<Child> spawn(const SpawnRequest& req) {
  COHORT_ASSIGN(Child child, start(req));
  COHORT_TRY(finish(child));
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
