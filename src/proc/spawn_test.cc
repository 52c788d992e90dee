#include "proc/spawn.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <vector>

namespace cohort::proc {
namespace {

TEST(Spawn, ExitCodeAndSignalAreReported) {
  SpawnRequest req;
  req.argv = {"/bin/sh", "-c", "exit 7"};
  req.env = {"PATH=/usr/bin:/bin"};
  auto child = spawn(req);
  ASSERT_TRUE(child) << child.error().message;
  auto status = reap(child->pidfd.get());
  ASSERT_TRUE(status);
  EXPECT_EQ(status->code, 7);
  EXPECT_EQ(status->shellCode(), 7);

  req.argv = {"/bin/sh", "-c", "kill -9 $$"};
  child = spawn(req);
  ASSERT_TRUE(child);
  status = reap(child->pidfd.get());
  EXPECT_EQ(status->signal, SIGKILL);
  EXPECT_EQ(status->shellCode(), 137);
  EXPECT_EQ(status->describe(), "killed by SIGKILL");
}

TEST(Spawn, MissingProgramIsAnErrorNotAnExitCode) {
  SpawnRequest req;
  req.argv = {"python4"};
  req.env = {"PATH=/usr/bin:/bin"};
  auto child = spawn(req);
  ASSERT_FALSE(child);
  EXPECT_EQ(child.error().code, Code::kNotFound);
  EXPECT_NE(child.error().message.find("'python4' not found on PATH"), std::string::npos);
}

TEST(Spawn, BadWorkdirNamesTheDirectory) {
  SpawnRequest req;
  req.argv = {"/bin/true"};
  req.cwd = "/no/such/dir";
  auto child = spawn(req);
  ASSERT_FALSE(child);
  EXPECT_NE(child.error().message.find("chdir '/no/such/dir'"), std::string::npos)
      << child.error().message;
}

TEST(Spawn, PidfdBecomesReadableAtExit) {
  SpawnRequest req;
  req.argv = {"/bin/sleep", "0.05"};
  auto child = spawn(req);
  ASSERT_TRUE(child);
  pollfd p{child->pidfd.get(), POLLIN, 0};
  EXPECT_EQ(::poll(&p, 1, 5000), 1);
  EXPECT_EQ(reap(child->pidfd.get())->code, 0);
}

// Everything `fd` delivers until its writers are gone.
std::string readAll(int fd) {
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

bool processGone(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  auto close = text.rfind(')');
  return !stat || close == std::string::npos || text.size() < close + 3 || text[close + 2] == 'Z';
}

// Many children started before any is finished: each runs its own argv, environment and
// directory (what they read of our memory stays theirs until they exec).
TEST(Start, ChildrenStartedTogetherEachRunWhatTheyWereGiven) {
  constexpr int kChildren = 48;
  std::vector<Child> children;
  std::vector<UniqueFd> outputs;
  for (int i = 0; i < kChildren; ++i) {
    int fds[2];
    ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
    outputs.emplace_back(fds[0]);
    UniqueFd write_end(fds[1]);
    SpawnRequest req;
    req.argv = {"/bin/sh", "-c", "echo $N $0 $(pwd); exit $N", "arg" + std::to_string(i)};
    req.env = {"PATH=/usr/bin:/bin", "N=" + std::to_string(i)};
    req.cwd = i % 2 ? "/" : "/tmp";
    req.stdout_fd = write_end.get();
    auto child = start(std::move(req));
    ASSERT_TRUE(child) << child.error().message;
    children.push_back(std::move(*child));
  }
  for (int i = 0; i < kChildren; ++i) {
    ASSERT_TRUE(finish(children[i]));
    EXPECT_FALSE(children[i].pending);
    EXPECT_EQ(readAll(outputs[i].get()),
              std::to_string(i) + " arg" + std::to_string(i) + " " + (i % 2 ? "/" : "/tmp") + "\n");
    EXPECT_EQ(reap(children[i].pidfd.get())->code, i);
  }
}

// A child that fails after start() has returned: finish() has spawn()'s error and reaps it.
// (Where start() waits for the exec, ASan builds, start() has the error itself.)
TEST(Start, AnExecThatFailsLaterIsFinishsError) {
  std::string dir = ::testing::TempDir() + "/start-" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/not-a-program") << "\x7f"
                                        << "garbage";
  std::filesystem::permissions(dir + "/not-a-program", std::filesystem::perms::owner_all);
  SpawnRequest req;
  req.argv = {dir + "/not-a-program"};
  auto child = start(req);
  Result<void> finished = child ? finish(*child) : Result<void>(tl::unexpected(child.error()));
  ASSERT_FALSE(finished);
  EXPECT_EQ(finished.error().message, "exec '" + dir + "/not-a-program': Exec format error");
  if (child) {
    EXPECT_FALSE(child->pidfd.valid());
    EXPECT_FALSE(child->pending);
    siginfo_t info{};
    EXPECT_LT(::waitid(P_PID, static_cast<id_t>(child->pid), &info, WEXITED | WNOHANG), 0);
    EXPECT_EQ(errno, ECHILD);  // reaped already
  }
  std::filesystem::remove_all(dir);
}

// What `req` (as uid and gid 12345, its stdout a pipe) printed, once it exited with 0.
std::string outputAs12345(SpawnRequest req) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return "<no pipe>";
  UniqueFd read_end(fds[0]), write_end(fds[1]);
  req.env = {"PATH=/usr/bin:/bin"};
  req.cwd = "/";
  req.stdout_fd = write_end.get();
  req.uid = 12345;
  req.gid = 12345;
  auto child = spawn(req);
  if (!child) return "<" + child.error().message + ">";
  write_end.reset();
  std::string out = readAll(read_end.get());
  auto status = reap(child->pidfd.get());
  return status && status->code == 0 ? out : "<failed> " + out;
}

TEST(Spawn, ChildRunsUnderTheRequestedIdentityWithNoSupplementaryGroups) {
  if (::geteuid() != 0) GTEST_SKIP() << "changing a child's identity needs root";
  SpawnRequest req;
  req.argv = {"/bin/sh", "-c", "id -u; id -g; grep '^Groups:' /proc/self/status"};
  const std::string out = outputAs12345(req);
  // The kernel prints "Groups:\t" then one "N " per supplementary group: none here.
  auto groups = out.find("Groups:");
  ASSERT_NE(groups, std::string::npos) << out;
  EXPECT_EQ(out.substr(0, groups), "12345\n12345\n");
  EXPECT_EQ(out.substr(groups + 7).find_first_not_of(" \t\n"), std::string::npos) << out;
}

// An account's process gains nothing by exec: no set-uid bit, no file capability works for it,
// and it holds no capability.
TEST(Spawn, ChildWithNoNewPrivilegesKeepsNoneAndGainsNone) {
  if (::geteuid() != 0) GTEST_SKIP() << "changing a child's identity needs root";
  SpawnRequest req;
  req.argv = {"/bin/sh", "-c", "grep -E '^(NoNewPrivs|CapEff|CapPrm|CapAmb):' /proc/self/status"};
  req.no_new_privs = true;
  const std::string out = outputAs12345(req);
  EXPECT_NE(out.find("NoNewPrivs:\t1"), std::string::npos) << out;
  for (const char* cap : {"CapEff:\t0000000000000000", "CapPrm:\t0000000000000000",
                          "CapAmb:\t0000000000000000"}) {
    EXPECT_NE(out.find(cap), std::string::npos) << cap << " in " << out;
  }
}

// A child joins the network namespace it is given before it drops its identity.
TEST(Spawn, ChildJoinsTheNetworkNamespaceItIsGiven) {
  if (::geteuid() != 0) GTEST_SKIP() << "joining a network namespace needs root";
  pid_t holder = ::fork();  // a process in a namespace of its own, to name it
  ASSERT_GE(holder, 0);
  if (holder == 0) {
    if (::unshare(CLONE_NEWNET) != 0) _exit(1);
    ::pause();
    _exit(0);
  }
  const std::string ns = "/proc/" + std::to_string(holder) + "/ns/net";
  std::string theirs;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (;;) {
    char buf[64] = {}, mine[64] = {};
    ssize_t n = ::readlink(ns.c_str(), buf, sizeof buf - 1);
    ssize_t m = ::readlink("/proc/self/ns/net", mine, sizeof mine - 1);
    theirs = n > 0 ? buf : "";
    if (n > 0 && m > 0 && std::string(buf) != std::string(mine)) break;
    ASSERT_LT(std::chrono::steady_clock::now(), until) << "the holder made no namespace";
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  UniqueFd fd(::open(ns.c_str(), O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(fd.valid());
  SpawnRequest req;
  req.argv = {"/usr/bin/readlink", "/proc/self/ns/net"};
  req.netns_fd = fd.get();
  const std::string out = outputAs12345(req);
  ::kill(holder, SIGKILL);
  ::waitpid(holder, nullptr, 0);
  EXPECT_EQ(out, theirs + "\n");
}

TEST(Spawn, ChildThatChangedIdentityStillDiesWithItsParent) {
  if (::geteuid() != 0) GTEST_SKIP() << "changing a child's identity needs root";
  int fds[2];
  ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
  UniqueFd read_end(fds[0]), write_end(fds[1]);
  // An intermediate process spawns the child (as uid 12345), reports its pid and exits: the
  // kernel clears a death signal on a change of identity, so spawn() must set it after.
  pid_t parent = ::fork();
  ASSERT_GE(parent, 0);
  if (parent == 0) {
    SpawnRequest req;
    req.argv = {"/bin/sleep", "60"};
    req.cwd = "/";
    req.uid = 12345;
    req.gid = 12345;
    auto child = spawn(req);
    pid_t pid = child ? child->pid : -1;
    ssize_t n = ::write(write_end.get(), &pid, sizeof pid);
    _exit(n == sizeof pid ? 0 : 1);
  }
  write_end.reset();
  pid_t pid = -1;
  ASSERT_EQ(::read(read_end.get(), &pid, sizeof pid), static_cast<ssize_t>(sizeof pid));
  ::waitpid(parent, nullptr, 0);
  ASSERT_GT(pid, 0) << "spawn failed in the intermediate process";
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!processGone(pid) && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  bool gone = processGone(pid);
  if (!gone) ::kill(pid, SIGKILL);
  EXPECT_TRUE(gone) << "the child outlived its parent: no death signal after setresuid";
}

// A copy of this process runs the body as a started program would run: its own process group,
// stdin from /dev/null, nothing blocked, none of our other descriptors.
TEST(ForkCall, TheCopyRunsTheBodyAsAStartedProgramWould) {
  if (threadCount() != 1) GTEST_SKIP() << "this test process has other threads";
  int ours = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(ours, 0);
  sigset_t term;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  ASSERT_EQ(::sigprocmask(SIG_BLOCK, &term, nullptr), 0);
  auto child = forkCall(SIGKILL, -1, [ours] {
    struct stat in{};
    sigset_t blocked;
    ::sigprocmask(SIG_SETMASK, nullptr, &blocked);
    int wrong = 0;
    if (::getpgid(0) != ::getpid()) wrong |= 1;
    if (::fstat(0, &in) != 0 || !S_ISCHR(in.st_mode)) wrong |= 2;
    if (::fcntl(ours, F_GETFD) != -1) wrong |= 4;
    if (sigismember(&blocked, SIGTERM)) wrong |= 8;
    return 40 + wrong;
  });
  ASSERT_EQ(::sigprocmask(SIG_UNBLOCK, &term, nullptr), 0);
  ::close(ours);
  ASSERT_TRUE(child) << child.error().message;
  auto status = reap(child->pidfd.get());
  ASSERT_TRUE(status);
  EXPECT_EQ(status->code, 40) << "1: its process group, 2: stdin, 4: our descriptor, 8: the mask";
}

TEST(ForkCall, KeepsTheDescriptorsItIsToldToKeepAndNoOther) {
  if (threadCount() != 1) GTEST_SKIP() << "this test process has other threads";
  int fds[5];
  for (int& fd : fds) fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  // below, kept, between, kept, above; given out of order
  ASSERT_TRUE(fds[0] > 2 && fds[0] < fds[1] && fds[1] < fds[2] && fds[2] < fds[3] &&
              fds[3] < fds[4]);
  auto child = forkCall(SIGKILL, -1,
                        [&] {
                          int wrong = 0;
                          for (int i = 0; i < 5; ++i) {
                            const bool open = ::fcntl(fds[i], F_GETFD) != -1;
                            if (open != (i == 1 || i == 3)) wrong |= 1 << i;
                          }
                          return wrong;
                        },
                        {fds[3], fds[1]});
  for (int fd : fds) ::close(fd);
  ASSERT_TRUE(child) << child.error().message;
  auto status = reap(child->pidfd.get());
  ASSERT_TRUE(status);
  EXPECT_EQ(status->code, 0) << "bit i: descriptor i (below, kept, between, kept, above) was "
                                "open where it should be closed, or the other way round";
}

TEST(ForkCall, AnExceptionEndsTheCopyAndNeverReachesTheCallersFrames) {
  if (threadCount() != 1) GTEST_SKIP() << "this test process has other threads";
  auto child = forkCall(SIGKILL, -1, []() -> int { throw std::runtime_error("no such thing"); });
  ASSERT_TRUE(child) << child.error().message;
  auto status = reap(child->pidfd.get());
  ASSERT_TRUE(status);
  EXPECT_EQ(status->code, 70);
}

TEST(ForkCall, AProcessWithAnotherThreadIsNotCopied) {
  std::atomic<bool> stop = false;
  std::thread other([&] {
    while (!stop) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  auto child = forkCall(SIGKILL, -1, [] { return 0; });
  stop = true;
  other.join();
  ASSERT_FALSE(child);
  EXPECT_EQ(child.error().code, Code::kFailedPrecondition);
  EXPECT_NE(child.error().message.find("2 threads"), std::string::npos) << child.error().message;
}

TEST(FindProgram, RelativePathsResolveFromWorkdir) {
  EXPECT_EQ(*findProgram("sh", "/nonexistent:/bin", "/"), "/bin/sh");
  EXPECT_EQ(*findProgram("./sh", "", "/bin"), "/bin/./sh");
  EXPECT_FALSE(findProgram("./nope", "", "/bin"));
}

}  // namespace
}  // namespace cohort::proc
