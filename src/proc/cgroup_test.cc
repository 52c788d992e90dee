#include "proc/cgroup.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <thread>

#include "proc/spawn.h"

namespace cohort::proc {
namespace {

bool waitUntil(const std::function<bool()>& condition, std::chrono::milliseconds deadline) {
  auto until = std::chrono::steady_clock::now() + deadline;
  while (!condition()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

bool exists(const std::string& path) {
  struct stat st{};
  return ::stat(path.c_str(), &st) == 0;
}

std::vector<pid_t> members(const std::string& cgroup) {
  std::vector<pid_t> pids;
  std::ifstream in(cgroup + "/cgroup.procs");
  for (long pid; in >> pid;) pids.push_back(static_cast<pid_t>(pid));
  return pids;
}

// Gone, or a zombie nobody reaped yet.
bool processGone(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  auto close = text.rfind(')');
  return !stat || close == std::string::npos || text.size() < close + 3 || text[close + 2] == 'Z';
}

// A name no other test process uses, under the test's own cgroup.
std::string uniqueName() { return "cohort-test-" + std::to_string(::getpid()); }

#define SKIP_WITHOUT_CGROUP(base)                                                          \
  auto base = ownWritableCgroup();                                                         \
  if (!base) GTEST_SKIP() << "no writable cgroup v2 here: " << base.error().message

TEST(Cgroup, EveryProcessOfAChildIsKilledAtOnceAndTheTreeRemoved) {
  SKIP_WITHOUT_CGROUP(base);
  auto cgroup = Cgroup::create(*base, uniqueName() + "/job/node0");
  ASSERT_TRUE(cgroup) << cgroup.error().message;
  std::string path = cgroup->path();
  SpawnRequest req;
  // A child with a grandchild that leaves its session: only the cgroup still holds both.
  req.argv = {"/bin/sh", "-c", "setsid sleep 60 & exec sleep 60"};
  req.env = {"PATH=/usr/bin:/bin"};
  req.cgroup_fd = cgroup->fd();
  auto child = spawn(req);
  ASSERT_TRUE(child) << child.error().message;
  ASSERT_TRUE(waitUntil([&] { return members(path).size() == 2; }, std::chrono::seconds(10)));
  std::ifstream own("/proc/" + std::to_string(child->pid) + "/cgroup");
  std::string line;
  while (std::getline(own, line) && line.rfind("0::", 0) != 0) {
  }
  EXPECT_NE(line.find("/" + uniqueName() + "/job/node0"), std::string::npos) << line;

  ASSERT_TRUE(cgroup->killAll(Millis(10000)));
  EXPECT_TRUE(members(path).empty());
  EXPECT_EQ(reap(child->pidfd.get())->signal, SIGKILL);
  ASSERT_TRUE(cgroup->remove());
  EXPECT_FALSE(exists(path));
  EXPECT_FALSE(exists(*base + "/" + uniqueName())) << "the empty parents stay behind";
}

// The child starts in the cgroup (clone3's CLONE_INTO_CGROUP where the kernel has it): a failure
// between its start there and exec is still told as the stage that failed.
TEST(Cgroup, AChildThatFailsBeforeExecInItsCgroupSaysWhyAndLeavesItEmpty) {
  SKIP_WITHOUT_CGROUP(base);
  auto cgroup = Cgroup::create(*base, uniqueName() + "/fails");
  ASSERT_TRUE(cgroup) << cgroup.error().message;
  SpawnRequest req;
  req.argv = {"/bin/true"};
  req.env = {"PATH=/usr/bin:/bin"};
  req.cwd = "/nonexistent-dir-for-cohort-test";
  req.cgroup_fd = cgroup->fd();
  auto child = spawn(req);
  ASSERT_FALSE(child);
  EXPECT_NE(child.error().message.find("chdir '/nonexistent-dir-for-cohort-test'"),
            std::string::npos)
      << child.error().message;
  EXPECT_TRUE(members(cgroup->path()).empty());
  req.cwd = "/";
  auto ok = spawn(req);
  ASSERT_TRUE(ok) << ok.error().message;
  EXPECT_EQ(reap(ok->pidfd.get())->code, 0);
  ASSERT_TRUE(cgroup->remove());
}

TEST(Cgroup, AnExistingCgroupIsNotTakenOver) {
  SKIP_WITHOUT_CGROUP(base);
  auto first = Cgroup::create(*base, uniqueName() + "/node0");
  ASSERT_TRUE(first) << first.error().message;
  auto second = Cgroup::create(*base, uniqueName() + "/node0");
  ASSERT_FALSE(second);
  EXPECT_EQ(second.error().code, Code::kAlreadyExists);
  auto sibling = Cgroup::create(*base, uniqueName() + "/node1");
  ASSERT_TRUE(sibling) << sibling.error().message;
  ASSERT_TRUE(first->remove());
  EXPECT_TRUE(exists(*base + "/" + uniqueName())) << "a parent with another cgroup was removed";
}

TEST(Cgroup, NamesThatLeaveTheParentAreRefused) {
  auto cgroup = Cgroup::create("/nonexistent", "cohort/../../etc");
  ASSERT_FALSE(cgroup);
  EXPECT_EQ(cgroup.error().code, Code::kInvalidArgument);
}

TEST(CgroupWatchdog, KillsAndRemovesTheCgroupWhenItsCreatorIsKilled) {
  SKIP_WITHOUT_CGROUP(base);
  int fds[2];
  ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
  UniqueFd read_end(fds[0]), write_end(fds[1]);
  const std::string name = uniqueName() + "/watched";
  // The creator: starts a watchdog, makes the cgroup, starts a process in it that would
  // outlive it (no death signal, its own session), reports, and waits to be killed.
  pid_t creator = ::fork();
  ASSERT_GE(creator, 0);
  if (creator == 0) {
    auto watchdog = CgroupWatchdog::start();
    auto cgroup = watchdog ? Cgroup::create(*base, name) : Result<Cgroup>(fail(Code::kIo, ""));
    pid_t pid = -1;
    if (cgroup && watchdog->watch(*cgroup)) {
      SpawnRequest req;
      req.argv = {"/bin/sh", "-c", "exec setsid sleep 60"};
      req.env = {"PATH=/usr/bin:/bin"};
      req.death_signal = 0;
      req.cgroup_fd = cgroup->fd();
      auto child = spawn(req);
      if (child) pid = child->pid;
    }
    pid_t report[2] = {pid, watchdog ? watchdog->pid() : -1};
    if (::write(write_end.get(), report, sizeof report) != sizeof report) _exit(1);
    for (;;) ::pause();
  }
  write_end.reset();
  pid_t report[2] = {-1, -1};
  ASSERT_EQ(::read(read_end.get(), report, sizeof report), static_cast<ssize_t>(sizeof report));
  const std::string path = *base + "/" + name;
  if (report[0] <= 0) {
    ::kill(creator, SIGKILL);
    ::waitpid(creator, nullptr, 0);
    FAIL() << "the creator could not start its process in a cgroup";
  }
  EXPECT_TRUE(exists(path));
  EXPECT_FALSE(members(path).empty());
  ASSERT_EQ(::kill(creator, SIGKILL), 0);
  ::waitpid(creator, nullptr, 0);
  EXPECT_TRUE(waitUntil([&] { return !exists(path); }, std::chrono::seconds(10)))
      << "the watchdog left '" << path << "' (and what runs in it)";
  EXPECT_FALSE(exists(*base + "/" + uniqueName()));
  EXPECT_TRUE(waitUntil([&] { return processGone(report[1]); }, std::chrono::seconds(10)))
      << "the watchdog did not exit";
}

// Several processes share one watchdog (the agents of `cohort run`): the one killed has its
// cgroup removed while the others go on; one that removes its own and retires leaves nothing for
// it to do; once every holder of the pipe is gone, the watchdog exits.
TEST(CgroupWatchdog, SharedByManyItCleansUpAfterEachAsItGoesAndEndsAfterThem) {
  SKIP_WITHOUT_CGROUP(base);
  auto watchdog = CgroupWatchdog::start();
  ASSERT_TRUE(watchdog) << watchdog.error().message;
  int report[2], go[2];
  ASSERT_EQ(::pipe2(report, O_CLOEXEC), 0);
  ASSERT_EQ(::pipe2(go, O_CLOEXEC), 0);
  const std::string dir = uniqueName();
  // Each creator adopts the watchdog, makes its cgroup with a process in it, tells the watchdog,
  // reports the cgroup's path, and waits: "a" to be killed, "b" for a word to clean up itself.
  auto creator = [&](const std::string& name) {
    pid_t pid = ::fork();
    if (pid != 0) return pid;
    ::close(report[0]);
    ::close(go[1]);
    CgroupWatchdog mine = CgroupWatchdog::adopt(UniqueFd(::dup(watchdog->fd())));
    auto cgroup = Cgroup::create(*base, dir + "/" + name);
    if (!cgroup) _exit(1);
    SpawnRequest req;
    req.argv = {"/bin/sh", "-c", "exec setsid sleep 60"};
    req.env = {"PATH=/usr/bin:/bin"};
    req.death_signal = 0;
    req.cgroup_fd = cgroup->fd();
    if (!spawn(req) || !mine.watch(*cgroup)) _exit(2);
    const std::string line = cgroup->path() + "\n";
    if (::write(report[1], line.data(), line.size()) < 0) _exit(3);
    char c;
    if (::read(go[0], &c, 1) != 1) _exit(4);
    if (!cgroup->remove()) _exit(5);
    mine.retire();
    _exit(0);
  };
  const pid_t a = creator("a");
  const pid_t b = creator("b");
  struct Ender {  // whatever an assertion leaves running
    std::vector<pid_t> pids;
    ~Ender() {
      for (pid_t pid : pids) {
        if (::kill(pid, SIGKILL) == 0) ::waitpid(pid, nullptr, 0);
      }
    }
  } ender{{a, b, watchdog->pid()}};
  watchdog->detach();
  ::close(report[1]);
  ::close(go[0]);
  std::string paths;
  char buf[512];
  while (std::count(paths.begin(), paths.end(), '\n') < 2) {
    ssize_t n = ::read(report[0], buf, sizeof buf);
    if (n <= 0) break;
    paths.append(buf, static_cast<size_t>(n));
  }
  ::close(report[0]);
  const std::string path_a = *base + "/" + dir + "/a";
  const std::string path_b = *base + "/" + dir + "/b";
  ASSERT_NE(paths.find(path_a + "\n"), std::string::npos) << paths;
  ASSERT_NE(paths.find(path_b + "\n"), std::string::npos) << paths;
  EXPECT_FALSE(members(path_a).empty());

  ASSERT_EQ(::kill(a, SIGKILL), 0);
  ::waitpid(a, nullptr, 0);
  std::erase(ender.pids, a);
  EXPECT_TRUE(waitUntil([&] { return !exists(path_a); }, std::chrono::seconds(10)))
      << "the watchdog left '" << path_a << "'";
  EXPECT_TRUE(exists(path_b)) << "the watchdog removed the cgroup of a creator still there";
  EXPECT_FALSE(members(path_b).empty());
  EXPECT_FALSE(processGone(watchdog->pid())) << "it ended while a creator was still there";

  ASSERT_EQ(::write(go[1], "x", 1), 1);
  ::close(go[1]);
  int status = 0;
  ASSERT_EQ(::waitpid(b, &status, 0), b);
  std::erase(ender.pids, b);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_FALSE(exists(path_b));
  const pid_t watchdog_pid = watchdog->pid();
  watchdog->reap(Millis(10000));
  ender.pids.clear();
  EXPECT_TRUE(processGone(watchdog_pid));
  EXPECT_EQ(::waitpid(watchdog_pid, nullptr, WNOHANG), -1) << "not reaped";
  EXPECT_FALSE(exists(*base + "/" + dir));
}

// Whatever writes into its pipe (a process of the agents' user can open it through /proc)
// cannot make it hold more than a line: 64 MiB without a newline leave it small, and it still
// ends when the pipe closes.
TEST(CgroupWatchdog, BytesThatAreNoLineAreNotHeld) {
  auto watchdog = CgroupWatchdog::start();
  ASSERT_TRUE(watchdog) << watchdog.error().message;
  const pid_t pid = watchdog->pid();
  // Measured as growth: a forked copy of this process starts with our resident pages (many,
  // under a sanitizer).
  auto rss_kib = [pid] {
    std::ifstream status("/proc/" + std::to_string(pid) + "/status");
    for (std::string line; std::getline(status, line);) {
      if (line.rfind("VmRSS:", 0) == 0) return std::atol(line.c_str() + 6);
    }
    return -1L;
  };
  ASSERT_TRUE(writeAll(watchdog->fd(), "x\n"));  // it has read once, and is at its loop
  const long before = rss_kib();
  const std::string junk(1 << 20, 'x');
  for (int i = 0; i < 64; ++i) ASSERT_TRUE(writeAll(watchdog->fd(), junk));
  ASSERT_TRUE(writeAll(watchdog->fd(), "\n"));
  const long after = rss_kib();
  ASSERT_GT(before, 0);
  EXPECT_LT(after - before, 16 * 1024) << "KiB: it held what it was sent";
  watchdog->detach();
  watchdog->reap(Millis(10000));
  EXPECT_TRUE(processGone(pid));
}

// Retired (every cgroup it watched removed by its creator), the watchdog is gone and reaped at
// once; retiring one that already went is harmless.
TEST(CgroupWatchdog, ARetiredWatchdogIsGoneAndReapedAtOnce) {
  auto watchdog = CgroupWatchdog::start();
  ASSERT_TRUE(watchdog) << watchdog.error().message;
  const pid_t pid = watchdog->pid();
  ASSERT_GT(pid, 0);
  ASSERT_EQ(::kill(pid, 0), 0);
  watchdog->retire();
  EXPECT_EQ(watchdog->pid(), -1);
  errno = 0;
  EXPECT_EQ(::waitpid(pid, nullptr, WNOHANG), -1) << "not reaped";
  EXPECT_EQ(errno, ECHILD);
  EXPECT_TRUE(processGone(pid));
  watchdog->retire();

  // One that died and was reaped by someone else (a subreaper's wait for any child).
  auto other = CgroupWatchdog::start();
  ASSERT_TRUE(other) << other.error().message;
  ASSERT_EQ(::kill(other->pid(), SIGKILL), 0);
  ASSERT_EQ(::waitpid(other->pid(), nullptr, 0), other->pid());
  other->retire();
  EXPECT_EQ(other->pid(), -1);
}

// A directory that plays a cgroup v2 tree: the files cohort writes, as plain files.
class FakeCgroupTree : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/cohort-cgroup-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    root_ = tmpl;
  }
  void TearDown() override {
    std::string command = "rm -rf '" + root_ + "'";
    ASSERT_EQ(std::system(command.c_str()), 0);
  }
  void file(const std::string& path, const std::string& text) {
    std::ofstream(root_ + "/" + path) << text;
  }
  std::string read(const std::string& path) const {
    std::ifstream in(root_ + "/" + path);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }
  std::string root_;
};

TEST_F(FakeCgroupTree, ControllersAreEnabledFromTheBaseDownToTheNode) {
  file("cgroup.controllers", "cpuset cpu io memory pids\n");
  ASSERT_EQ(::mkdir((root_ + "/cohort").c_str(), 0755), 0);
  ASSERT_EQ(::mkdir((root_ + "/cohort/job").c_str(), 0755), 0);
  for (const char* dir : {"", "/cohort", "/cohort/job"})
    file(std::string(dir) + "/cgroup.subtree_control", "");
  auto v1 = enableLimitControllers(root_, root_ + "/cohort/job", {"memory", "cpu"}, {});
  ASSERT_TRUE(v1) << v1.error().message;
  EXPECT_TRUE(v1->empty()) << "cgroup v2 has both";
  // Each directory was written "+memory", then "+cpu" (a plain file keeps the last).
  for (const char* dir : {"", "/cohort", "/cohort/job"}) {
    EXPECT_EQ(read(std::string(dir) + "/cgroup.subtree_control"), "+cpu") << dir;
  }
  EXPECT_FALSE(enableLimitControllers(root_ + "/cohort", root_, {"memory"}, {}));
}

TEST_F(FakeCgroupTree, AMissingControllerIsNamedWithWhatTheCgroupOffers) {
  file("cgroup.controllers", "hugetlb\n");
  auto enabled = enableLimitControllers(root_, root_, {"memory", "cpu"}, {});
  ASSERT_FALSE(enabled);
  EXPECT_EQ(enabled.error().code, Code::kFailedPrecondition);
  EXPECT_EQ(enabled.error().message,
            "cgroup '" + root_ +
                "' has no memory and cpu controller (it offers hugetlb), and no cgroup v1 "
                "hierarchy holds it either: the controller was not delegated");
  file("cgroup.controllers", "memory\n");
  enabled = enableLimitControllers(root_, root_, {"memory", "cpu"}, {});
  ASSERT_FALSE(enabled);
  EXPECT_NE(enabled.error().message.find("has no cpu controller"), std::string::npos);
}

// A machine that binds memory and pids to cgroup v1 hierarchies (and cpu to cgroup v2): the
// limits are written where each controller is, in a mirror of the cgroup of the same name below
// this process's own cgroup in that hierarchy.
TEST_F(FakeCgroupTree, AControllerThatCgroupV2LacksIsFoundInItsV1Hierarchy) {
  for (const char* dir : {"/v2", "/v2/cohort", "/v1mem", "/v1mem/agent", "/v1pids", "/v1cpu"}) {
    ASSERT_EQ(::mkdir((root_ + dir).c_str(), 0755), 0) << dir;
  }
  for (const char* dir : {"/v2", "/v2/cohort", "/v1mem/agent", "/v1pids"}) {
    file(std::string(dir) + "/cgroup.procs", "");
  }
  file("v2/cgroup.controllers", "cpu io\n");
  file("v2/cgroup.subtree_control", "");
  file("v2/cohort/cgroup.subtree_control", "");
  ProcessCgroups self;
  // The hierarchies as /proc/self/mountinfo and /proc/self/cgroup show them: memory mounted at
  // its root (the agent's cgroup below), pids mounted showing only the agent's cgroup, and a
  // hierarchy for cpu that is not cpu's (net_cls), which is ignored.
  self.mountinfo = "31 23 0:28 / " + root_ + "/v1mem rw,relatime - cgroup cgroup rw,memory\n" +
                   "32 23 0:29 /agent " + root_ + "/v1pids rw - cgroup cgroup rw,pids\n" +
                   "33 23 0:30 / " + root_ + "/v1cpu rw - cgroup cgroup rw,net_cls\n" +
                   "34 23 0:31 / " + root_ + "/v2 rw - cgroup2 cgroup2 rw\n";
  self.cgroup = "4:memory:/agent\n8:pids:/agent\n3:net_cls:/\n0::/\n";
  auto v1 = enableLimitControllers(root_ + "/v2", root_ + "/v2/cohort", {"memory", "cpu", "pids"},
                                   self);
  ASSERT_TRUE(v1) << v1.error().message;
  ASSERT_EQ(v1->size(), 2u);
  EXPECT_EQ((*v1)[0].controller, "memory");
  EXPECT_EQ((*v1)[0].dir, root_ + "/v1mem/agent");
  EXPECT_EQ((*v1)[1].controller, "pids");
  EXPECT_EQ((*v1)[1].dir, root_ + "/v1pids");
  EXPECT_EQ(read("v2/cohort/cgroup.subtree_control"), "+cpu") << "only cpu is cgroup v2's";

  auto node = Cgroup::create(root_ + "/v2", "cohort/job/node0");
  ASSERT_TRUE(node) << node.error().message;
  ASSERT_TRUE(node->mirrorIn(*v1));
  EXPECT_EQ(node->paths(), (std::vector<std::string>{root_ + "/v2/cohort/job/node0",
                                                     root_ + "/v1mem/agent/cohort/job/node0",
                                                     root_ + "/v1pids/cohort/job/node0"}));
  auto rank = node->child("rank3");
  ASSERT_TRUE(rank) << rank.error().message;
  EXPECT_EQ(rank->v1Fds().size(), 2u);
  for (const char* name : {"v1mem/agent/cohort/job/node0/rank3/memory.memsw.limit_in_bytes",
                           "v1mem/agent/cohort/job/node0/rank3/memory.limit_in_bytes",
                           "v1pids/cohort/job/node0/rank3/pids.max",
                           "v2/cohort/job/node0/rank3/cpu.max",
                           "v2/cohort/job/node0/rank3/cpu.weight"}) {
    file(name, "");
  }
  ASSERT_TRUE(rank->setLimits({256 << 20, 0.5, 0.5, 64}));
  EXPECT_EQ(read("v1mem/agent/cohort/job/node0/rank3/memory.limit_in_bytes"), "268435456");
  EXPECT_EQ(read("v1mem/agent/cohort/job/node0/rank3/memory.memsw.limit_in_bytes"), "268435456");
  EXPECT_EQ(read("v1pids/cohort/job/node0/rank3/pids.max"), "64");
  EXPECT_EQ(read("v2/cohort/job/node0/rank3/cpu.max"), "50000 100000");
  EXPECT_EQ(read("v2/cohort/job/node0/rank3/cpu.weight"), "50");
  EXPECT_FALSE(exists(root_ + "/v2/cohort/job/node0/rank3/memory.max")) << "memory is v1's";
  file("v1mem/agent/cohort/job/node0/rank3/memory.oom_control",
       "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n");
  EXPECT_EQ(*rank->oomKills(), 3);
}

// The CPU share of a job's cgroup is its nodes' together, whichever node wrote last.
TEST_F(FakeCgroupTree, AParentsCpuShareIsItsChildrensTogether) {
  file("cgroup.controllers", "cpu\n");
  auto one = Cgroup::create(root_, "job/node0");
  auto two = Cgroup::create(root_, "job/node1");
  ASSERT_TRUE(one && two);
  file("job/cpu.weight", "100");
  file("job/node0/cpu.weight", "");
  file("job/node1/cpu.weight", "");
  ASSERT_TRUE(one->setLimits({.cpu_share = 4}));
  ASSERT_TRUE(one->shareParent());
  EXPECT_EQ(read("job/cpu.weight"), "400");
  ASSERT_TRUE(two->setLimits({.cpu_share = 0.5}));
  ASSERT_TRUE(one->shareParent());
  EXPECT_EQ(read("job/cpu.weight"), "450");
}

TEST_F(FakeCgroupTree, LimitsAreWrittenAndOomKillsRead) {
  auto cgroup = Cgroup::create(root_, "rank3");
  ASSERT_TRUE(cgroup) << cgroup.error().message;
  EXPECT_EQ(*cgroup->oomKills(), 0) << "no memory controller: nothing was killed";
  for (const char* name : {"memory.max", "memory.swap.max", "memory.oom.group", "cpu.max"}) {
    file(std::string("rank3/") + name, "");
  }
  ASSERT_TRUE(cgroup->setLimits({512 << 20, 1.5}));
  EXPECT_EQ(read("rank3/memory.max"), "536870912");
  EXPECT_EQ(read("rank3/memory.swap.max"), "0");
  EXPECT_EQ(read("rank3/memory.oom.group"), "1");
  EXPECT_EQ(read("rank3/cpu.max"), "150000 100000");
  ASSERT_TRUE(cgroup->setLimits({0, 0.001}));
  EXPECT_EQ(read("rank3/cpu.max"), "1000 100000") << "the kernel's smallest quota";
  EXPECT_EQ(read("rank3/memory.max"), "536870912") << "0 leaves the memory alone";
  file("rank3/memory.events", "low 0\nhigh 0\nmax 12\noom 2\noom_kill 2\noom_group_kill 1\n");
  EXPECT_EQ(*cgroup->oomKills(), 2);
  ::unlink((root_ + "/rank3/cpu.max").c_str());
  auto failed = cgroup->setLimits({0, 2});
  ASSERT_FALSE(failed);
  EXPECT_NE(failed.error().message.find("cpu.max"), std::string::npos) << failed.error().message;
}

TEST(Cgroup, ARanksCgroupBelowTheNodesIsKilledAndRemovedWithIt) {
  SKIP_WITHOUT_CGROUP(base);
  auto node = Cgroup::create(*base, uniqueName() + "/node0");
  ASSERT_TRUE(node) << node.error().message;
  auto rank = Cgroup::create(node->path(), "rank0");
  ASSERT_TRUE(rank) << rank.error().message;
  const std::string rank_path = rank->path();
  SpawnRequest req;
  req.argv = {"/bin/sh", "-c", "setsid sleep 60 & exec sleep 60"};
  req.env = {"PATH=/usr/bin:/bin"};
  req.cgroup_fd = rank->fd();
  auto child = spawn(req);
  ASSERT_TRUE(child) << child.error().message;
  ASSERT_TRUE(waitUntil([&] { return cgroupProcesses(node->path()).size() == 2; },
                        std::chrono::seconds(10)));
  EXPECT_TRUE(members(node->path()).empty()) << "the processes are the rank's, below the node";
  ASSERT_TRUE(node->killAll(Millis(10000)));
  EXPECT_EQ(reap(child->pidfd.get())->signal, SIGKILL);
  ASSERT_TRUE(node->remove()) << "the rank's cgroup keeps the node's";
  EXPECT_FALSE(exists(rank_path));
  EXPECT_FALSE(exists(*base + "/" + uniqueName()));
}

// Real limits: where this machine gives the controllers to cgroups below the test's own, in
// cgroup v2 (COHORT_CGROUP_ROOT names an empty delegated one) or in cgroup v1 hierarchies (as
// root), else skipped with the reason.
struct Limited {
  Cgroup node, rank;
};
Result<Limited> limitedRank(const std::string& name, const CgroupLimits& limits) {
  COHORT_ASSIGN(std::string base, cgroupBase());
  COHORT_ASSIGN(Cgroup node, Cgroup::create(base, uniqueName() + "/" + name));
  COHORT_ASSIGN(std::vector<V1Hierarchy> v1,
                enableLimitControllers(base, node.path(), {"memory", "cpu", "pids"}));
  COHORT_TRY(node.mirrorIn(v1));
  COHORT_ASSIGN(Cgroup rank, node.child("rank0"));
  COHORT_TRY(rank.setLimits(limits));
  return Limited{std::move(node), std::move(rank)};
}

#define SKIP_WITHOUT_LIMITS(var, name, limits)                                      \
  auto var = limitedRank(name, limits);                                             \
  if (!var) GTEST_SKIP() << "limits cannot be enforced here: " << var.error().message

TEST(Cgroup, AProcessOverItsMemoryLimitIsKilledByTheKernelAndCounted) {
  SKIP_WITHOUT_LIMITS(limited, "memory", (CgroupLimits{32 << 20, 1, 1, 64}));
  SpawnRequest req;
  req.argv = {"/usr/bin/python3", "-c",
              "b = []\nfor _ in range(64): b.append(bytearray(8 << 20))\n"};
  req.env = {"PATH=/usr/bin:/bin"};
  req.cgroup_fd = limited->rank.fd();
  req.v1_cgroup_fds = limited->rank.v1Fds();
  auto child = spawn(req);
  ASSERT_TRUE(child) << child.error().message;
  auto status = reap(child->pidfd.get());
  ASSERT_TRUE(status);
  EXPECT_EQ(status->signal, SIGKILL);
  EXPECT_GE(*limited->rank.oomKills(), 1);
}

// A fork bomb: fork() fails once the rank holds its pids limit (processes and threads), and
// what it started goes with its cgroup.
TEST(Cgroup, AForkBombStopsAtItsPidsLimit) {
  SKIP_WITHOUT_LIMITS(limited, "pids", (CgroupLimits{0, 0, 0, 16}));
  SpawnRequest req;
  // Exits with how many children it could fork, or 255 when fork failed otherwise.
  req.argv = {"/usr/bin/python3", "-c",
              "import errno, os, sys, time\n"
              "n = 0\n"
              "try:\n"
              "    for _ in range(1000):\n"
              "        if os.fork() == 0:\n"
              "            time.sleep(60)\n"
              "            os._exit(0)\n"
              "        n += 1\n"
              "except OSError as e:\n"
              "    sys.exit(n if e.errno == errno.EAGAIN else 255)\n"
              "sys.exit(254)\n"};
  req.env = {"PATH=/usr/bin:/bin"};
  req.cgroup_fd = limited->rank.fd();
  req.v1_cgroup_fds = limited->rank.v1Fds();
  auto child = spawn(req);
  ASSERT_TRUE(child) << child.error().message;
  auto status = reap(child->pidfd.get());
  ASSERT_TRUE(status);
  EXPECT_GT(status->code, 0);
  EXPECT_LT(status->code, 16) << "forked past its limit";
  EXPECT_EQ(static_cast<int>(cgroupProcesses(limited->rank.path()).size()), status->code)
      << "its children are still in its cgroup";
  ASSERT_TRUE(limited->node.killAll(Millis(10000)));
  EXPECT_TRUE(cgroupProcesses(limited->node.path()).empty());
  for (const std::string& path : limited->rank.paths()) {
    EXPECT_TRUE(cgroupProcesses(path).empty()) << path;
  }
  const std::vector<std::string> paths = limited->node.paths();
  ASSERT_TRUE(limited->rank.remove());
  ASSERT_TRUE(limited->node.remove());
  for (const std::string& path : paths) EXPECT_FALSE(exists(path)) << path;
}

// A cgroup v1 mirror has no cgroup.kill: what is in it is killed one by one until none is left.
TEST(Cgroup, WhatACgroupV1MirrorHoldsIsKilledWithoutCgroupKill) {
  SKIP_WITHOUT_LIMITS(limited, "v1kill", (CgroupLimits{0, 0, 0, 64}));
  const std::vector<int> v1 = limited->rank.v1Fds();
  if (v1.empty()) GTEST_SKIP() << "cgroup v2 holds every controller here";
  SpawnRequest req;
  req.argv = {"/bin/sh", "-c", "setsid sleep 60 & exec sleep 60"};
  req.env = {"PATH=/usr/bin:/bin"};
  req.v1_cgroup_fds = v1;  // only there
  auto child = spawn(req);
  ASSERT_TRUE(child) << child.error().message;
  const std::string mirror = limited->rank.paths()[1];
  ASSERT_TRUE(waitUntil([&] { return members(mirror).size() == 2; }, std::chrono::seconds(10)));
  auto killed = killCgroup(mirror, Millis(10000));
  ASSERT_TRUE(killed) << killed.error().message;
  EXPECT_TRUE(*killed);
  EXPECT_EQ(reap(child->pidfd.get())->signal, SIGKILL);
  EXPECT_TRUE(members(mirror).empty());
}

// An agent killed with -9: its watchdog removes its cgroups in the cgroup v1 hierarchies too,
// with what runs in them.
TEST(CgroupWatchdog, RemovesTheMirrorsInCgroupV1HierarchiesToo) {
  auto base = cgroupBase();
  if (!base) GTEST_SKIP() << "no writable cgroup v2 here: " << base.error().message;
  auto v1 = enableLimitControllers(*base, *base, {"memory", "cpu", "pids"});
  if (!v1 || v1->empty()) GTEST_SKIP() << "no cgroup v1 hierarchy to use here";
  int fds[2];
  ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
  UniqueFd read_end(fds[0]), write_end(fds[1]);
  const std::string name = uniqueName() + "/watched-v1";
  pid_t creator = ::fork();
  ASSERT_GE(creator, 0);
  if (creator == 0) {
    auto watchdog = CgroupWatchdog::start();
    auto cgroup = watchdog ? Cgroup::create(*base, name) : Result<Cgroup>(fail(Code::kIo, ""));
    pid_t pid = -1;
    if (cgroup && cgroup->mirrorIn(*v1) && watchdog->watch(*cgroup)) {
      SpawnRequest req;
      req.argv = {"/bin/sh", "-c", "exec setsid sleep 60"};
      req.env = {"PATH=/usr/bin:/bin"};
      req.death_signal = 0;
      req.cgroup_fd = cgroup->fd();
      req.v1_cgroup_fds = cgroup->v1Fds();
      auto child = spawn(req);
      if (child) pid = child->pid;
    }
    if (::write(write_end.get(), &pid, sizeof pid) != sizeof pid) _exit(1);
    for (;;) ::pause();
  }
  write_end.reset();
  pid_t pid = -1;
  ASSERT_EQ(::read(read_end.get(), &pid, sizeof pid), static_cast<ssize_t>(sizeof pid));
  std::vector<std::string> mirrors;
  for (const V1Hierarchy& h : *v1) mirrors.push_back(h.dir + "/" + name);
  if (pid <= 0) {
    ::kill(creator, SIGKILL);
    ::waitpid(creator, nullptr, 0);
    FAIL() << "the creator could not start its process in its cgroups";
  }
  // What the process became (setsid forks when it leads its process group): one sleep, the
  // same in every mirror. Until it has exec'd, the mirrors may still hold setsid.
  std::vector<pid_t> held;
  auto settled = [&] {
    held = members(mirrors.front());
    if (held.size() != 1) return false;
    std::string comm;
    std::ifstream(("/proc/" + std::to_string(held[0]) + "/comm").c_str()) >> comm;
    if (comm != "sleep") return false;
    for (const std::string& mirror : mirrors) {
      if (members(mirror) != held) return false;
    }
    return true;
  };
  ASSERT_TRUE(waitUntil(settled, std::chrono::seconds(10))) << mirrors.front();
  ASSERT_EQ(::kill(creator, SIGKILL), 0);
  ::waitpid(creator, nullptr, 0);
  for (const std::string& mirror : mirrors) {
    EXPECT_TRUE(waitUntil([&] { return !exists(mirror); }, std::chrono::seconds(10)))
        << "the watchdog left '" << mirror << "'";
  }
  for (pid_t gone : held) {
    EXPECT_TRUE(waitUntil([&] { return processGone(gone); }, std::chrono::seconds(10)));
  }
}

}  // namespace
}  // namespace cohort::proc
