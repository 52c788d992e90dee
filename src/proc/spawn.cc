#include "proc/spawn.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "util/text.h"

#ifndef P_PIDFD
#define P_PIDFD 3
#endif

namespace cohort::proc {

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

  const pid_t parent = ::getpid();
  sigset_t empty;
  sigemptyset(&empty);
  // vfork: the child shares our memory until it execs, so no page tables are copied (this is
  // most of the cost of starting a rank). The child below only calls async-signal-safe
  // functions on data prepared before, and writes nothing but its own locals.
  pid_t pid = ::vfork();
  if (pid < 0) return failErrno("fork for '" + req.argv[0] + "'");
  if (pid == 0) {
    // Child: async-signal-safe calls only.
    auto die = [&](int stage) {
      int code[2] = {stage, errno};
      ssize_t n = ::write(err_pipe[1], code, sizeof code);
      (void)n;
      _exit(127);
    };
    if (req.death_signal && ::prctl(PR_SET_PDEATHSIG, req.death_signal) < 0) die(1);
    if (::getppid() != parent) _exit(127);
    if (req.new_process_group && ::setpgid(0, 0) < 0) die(2);
    for (int s = 1; s < NSIG; ++s) ::signal(s, SIG_DFL);
    ::sigprocmask(SIG_SETMASK, &empty, nullptr);
    if (!req.cwd.empty() && ::chdir(req.cwd.c_str()) < 0) die(3);
    int in = req.stdin_fd >= 0 ? req.stdin_fd : dev_null.get();
    if (in >= 0 && ::dup2(in, 0) < 0) die(4);
    if (req.stdout_fd >= 0) {
      if (::dup2(req.stdout_fd, 1) < 0) die(4);
      if (req.merge_stderr && ::dup2(req.stdout_fd, 2) < 0) die(4);
    }
    ::execve(program.c_str(), argv.data(), envp.data());
    die(5);
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
    static const char* kStage[] = {"", "prctl", "setpgid", "chdir", "dup2", "exec"};
    std::string what = code[0] == 3 ? "chdir '" + req.cwd + "'"
                                    : std::string(kStage[code[0] < 6 ? code[0] : 0]) + " '" +
                                          req.argv[0] + "'";
    return failErrno(what, code[1]);
  }
  if (!child.pidfd.valid()) return failErrno("pidfd_open");
  return child;
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
