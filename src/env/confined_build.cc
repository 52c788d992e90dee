#include "env/confined_build.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <deque>
#include <filesystem>

#include "account/as_account.h"
#include "env/tools.h"
#include "proc/spawn.h"
#include "util/fd.h"

namespace cohort::env {

namespace {

constexpr const char* kBwrap = "/usr/bin/bwrap";
constexpr size_t kTailLines = 20;

// The build's directory, empty, the build's user's; the lock file it takes and the pins it
// installs, beside it, this process's and readable. Nothing here follows a link, and what an
// earlier build left (the build's user's, which that user may have changed since) is emptied
// by that user (account/as_account.h), not walked by this process.
Result<void> prepare(const ConfinedBuild& build, const Confinement& how, const std::string& dir,
                     const std::string& pins) {
  const std::string& store = build.stores.front();
  struct stat st {};
  if (::lstat(store.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return fail(Code::kIo, "'" + store + "' is not a directory");
  }
  const account::Identity builder{how.uid, how.gid};
  if (::lstat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && account::needsWorker(builder)) {
    COHORT_TRY(account::runAs(builder, account::Remove{{dir}, true}, {}));
    if (::rmdir(dir.c_str()) != 0) return failErrno("remove '" + dir + "'");
  } else {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);  // this process's own, or a link or file: not followed
    if (ec) return fail(Code::kIo, "remove '" + dir + "': " + ec.message());
  }
  if (::mkdir(dir.c_str(), 0755) != 0) return failErrno("create '" + dir + "'");
  if (how.uid >= 0 && ::lchown(dir.c_str(), how.uid, how.gid) != 0) {
    return failErrno("give '" + dir + "' to uid " + std::to_string(how.uid));
  }
  const std::string lock = store + "/." + build.name + ".lock";
  UniqueFd fd(::open(lock.c_str(), O_RDONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644));
  if (!fd.valid()) return failErrno("create '" + lock + "'");
  if (!build.lock.empty()) COHORT_TRY(writeFileAtomic(pins, build.lock, false, 0644));
  return {};
}

}  // namespace

bool buildMayKeep(std::string_view entry) {
  const std::string_view name = entry.substr(0, entry.find('='));
  static constexpr std::string_view kKept[] = {
      "PATH",        "LANG",          "LANGUAGE",      "TZ",          "http_proxy",
      "https_proxy", "no_proxy",      "HTTP_PROXY",    "HTTPS_PROXY", "NO_PROXY",
      "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"};
  for (std::string_view kept : kKept) {
    if (name == kept) return true;
  }
  return startsWith(name, "PIP_") || startsWith(name, "LC_");
}

namespace {

// What the build runs with: an allowlist of this process's environment (buildMayKeep: the
// tools' path, the locale, and how pip reaches its index), nothing else of the server's, with
// where to look environments up.
std::vector<std::string> buildEnvironment(const ConfinedBuild& build) {
  std::vector<std::string> env;
  for (const std::string& kv : toolEnvironment()) {
    if (buildMayKeep(kv)) env.push_back(kv);
  }
  env.push_back("COHORT_ENVS=" + join(build.stores, ":"));
  env.push_back("HOME=/tmp");
  env.push_back("PIP_NO_CACHE_DIR=1");
  return env;
}

}  // namespace

std::vector<std::string> sandboxArgv(const Confinement& how, const std::vector<std::string>& stores,
                                     const std::string& writable,
                                     const std::vector<std::string>& command) {
  std::vector<std::string> argv = {kBwrap,    "--ro-bind", "/",       "/",       "--dev",
                                   "/dev",    "--proc",    "/proc",   "--tmpfs", "/tmp",
                                   "--tmpfs", "/var/tmp",  "--tmpfs", "/run"};
  for (const std::string& dir : how.hide) argv.insert(argv.end(), {"--tmpfs", dir});
  // The program the build runs (cohort itself, wherever it was installed: under /tmp for a
  // build tree there), the stores (read-only) and the build's own directory, put back where
  // they were hidden.
  if (!command.empty() && command.front().rfind('/', 0) == 0) {
    argv.insert(argv.end(), {"--ro-bind", command.front(), command.front()});
  }
  for (const std::string& store : stores) {
    argv.insert(argv.end(), {"--ro-bind-try", store, store});
  }
  if (!writable.empty()) argv.insert(argv.end(), {"--bind", writable, writable});
  argv.insert(argv.end(), {"--unshare-pid", "--unshare-ipc", "--die-with-parent"});
  if (how.uid < 0 && ::geteuid() == 0) argv.insert(argv.end(), {"--cap-drop", "ALL"});
  argv.emplace_back("--");
  argv.insert(argv.end(), command.begin(), command.end());
  return argv;
}

Result<void> buildConfined(const std::string& cohort_bin, const ConfinedBuild& build,
                           const Confinement& how, Millis timeout, const Progress& progress,
                           const std::function<bool()>& cancelled) {
  if (build.stores.empty()) return fail(Code::kInternal, "a build with no environment store");
  COHORT_TRY(checkSavedName(build.name));
  if (how.sandbox && ::access(kBwrap, X_OK) != 0) {
    return fail(Code::kFailedPrecondition, "a sandboxed build needs bubblewrap (" +
                                               std::string(kBwrap) +
                                               "): apt-get install bubblewrap");
  }
  const std::string& store = build.stores.front();
  const std::string dir = store + "/" + build.name;
  const std::string pins = store + "/." + build.name + ".pins.txt";
  struct Cleanup {
    std::string pins;
    ~Cleanup() { ::unlink(pins.c_str()); }
  } cleanup{pins};
  COHORT_TRY(prepare(build, how, dir, pins));

  std::vector<std::string> command = {cohort_bin, "env",    "create",
                                      build.name, "--from", build.from};
  for (const std::string& r : build.requirements) command.insert(command.end(), {"--pip", r});
  if (!build.lock.empty()) command.insert(command.end(), {"--lock", pins});
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) < 0) return failErrno("pipe2");
  UniqueFd read_end(fds[0]), write_end(fds[1]);
  proc::SpawnRequest req;
  req.argv = how.sandbox ? sandboxArgv(how, build.stores, dir, command) : command;
  req.env = buildEnvironment(build);
  req.cwd = "/";
  req.uid = how.uid;
  req.gid = how.gid;
  req.no_new_privs = true;  // pip runs the packages' code: it gains nothing by exec
  req.stdout_fd = write_end.get();
  COHORT_ASSIGN(proc::Child child, proc::spawn(req));
  write_end.reset();

  std::deque<std::string> tail;
  std::string pending;
  auto line = [&](std::string text) {
    if (progress) progress(text);
    tail.push_back(std::move(text));
    if (tail.size() > kTailLines) tail.pop_front();
  };
  const auto until = std::chrono::steady_clock::now() + timeout;
  bool timed_out = false, stopped = false;
  for (;;) {
    if (cancelled && cancelled()) {
      stopped = true;
      break;
    }
    const auto left =
        std::chrono::duration_cast<Millis>(until - std::chrono::steady_clock::now()).count();
    if (left <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{read_end.get(), POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 200))) < 0 && errno != EINTR) {
      break;
    }
    if (!(p.revents & (POLLIN | POLLHUP | POLLERR))) continue;
    char buf[8192];
    ssize_t n = ::read(read_end.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    pending.append(buf, static_cast<size_t>(n));
    for (size_t nl; (nl = pending.find('\n')) != std::string::npos; pending.erase(0, nl + 1)) {
      line(pending.substr(0, nl));
    }
  }
  if (timed_out || stopped) ::kill(-child.pid, SIGKILL);
  if (!pending.empty()) line(pending);
  COHORT_ASSIGN(proc::ExitStatus status, proc::reap(child.pidfd.get()));
  if (status.shellCode() == 0 && !timed_out && !stopped) return {};
  // Nothing usable is left under the name: the directory goes (this process's to remove).
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  if (timed_out) {
    return fail(Code::kDeadlineExceeded, "environment " + build.name + ": the build ran over " +
                                             formatDuration(timeout) + " and was stopped");
  }
  if (stopped) return fail(Code::kUnavailable, "environment " + build.name + ": build stopped");
  std::string last;
  for (const std::string& t : tail) last += "\n  " + t;
  return fail(Code::kUnavailable,
              "environment " + build.name + ": the build " + status.describe() + ":" + last);
}

}  // namespace cohort::env
