#include "env/tools.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <deque>

#include "util/fd.h"
#include "util/text.h"

extern char** environ;

namespace cohort::env {

namespace {

constexpr Millis kStepTimeout{3600000};  // one venv, pip or podman step: an hour at most

}  // namespace

std::vector<std::string> toolEnvironment() {
  std::vector<std::string> out;
  for (char** e = environ; *e; ++e) {
    if (!startsWith(*e, "VIRTUAL_ENV=") && !startsWith(*e, "PYTHONHOME=")) out.emplace_back(*e);
  }
  out.push_back("PIP_DISABLE_PIP_VERSION_CHECK=1");
  out.push_back("PIP_NO_INPUT=1");
  out.push_back("PYTHONNOUSERSITE=1");
  return out;
}

Result<std::string> runShowing(const std::vector<std::string>& argv, const Progress& progress) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) < 0) return failErrno("pipe2");
  UniqueFd read_end(fds[0]), write_end(fds[1]);
  proc::SpawnRequest req;
  req.argv = argv;
  req.env = toolEnvironment();
  req.stdout_fd = write_end.get();
  COHORT_ASSIGN(proc::Child child, proc::spawn(req));
  write_end.reset();
  std::deque<std::string> tail;
  std::string pending;
  char buf[8192];
  const auto until = std::chrono::steady_clock::now() + kStepTimeout;
  for (;;) {
    ssize_t n = ::read(read_end.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    pending.append(buf, static_cast<size_t>(n));
    for (size_t nl; (nl = pending.find('\n')) != std::string::npos; pending.erase(0, nl + 1)) {
      std::string line = pending.substr(0, nl);
      if (progress) progress(line);
      tail.push_back(std::move(line));
      if (tail.size() > 12) tail.pop_front();
    }
    if (std::chrono::steady_clock::now() > until) {
      ::kill(child.pid, SIGKILL);
      break;
    }
  }
  if (!pending.empty()) tail.push_back(pending);
  COHORT_ASSIGN(proc::ExitStatus status, proc::reap(child.pidfd.get()));
  std::string last;
  for (const std::string& line : tail) last += "\n  " + line;
  if (status.shellCode() != 0) {
    // The build failed (kUnavailable: what it needs could not be had), in the tool's words.
    return fail(Code::kUnavailable, argv[0] + " " + (argv.size() > 1 ? argv[1] : "") + " " +
                                        status.describe() + ":" + last);
  }
  return last;
}

Result<proc::Captured> runQuietly(const std::vector<std::string>& argv, Millis timeout) {
  proc::SpawnRequest req;
  req.argv = argv;
  req.env = toolEnvironment();
  req.merge_stderr = false;
  return proc::runCaptured(req, timeout);
}

}  // namespace cohort::env
