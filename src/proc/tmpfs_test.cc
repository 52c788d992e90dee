#include "proc/tmpfs.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <thread>

#include "proc/spawn.h"

namespace cohort::proc {
namespace {

bool exists(const std::string& path) {
  struct stat st{};
  return ::lstat(path.c_str(), &st) == 0;
}

// The mounts are the calling thread's: what it starts sees them (and their size), the rest of
// the process and the machine see the empty directory; unmounted, the contents are gone.
TEST(Tmpfs, ItIsSeenByWhatTheThreadStartsAndNowhereElseAndHoldsItsSize) {
  if (::geteuid() != 0) GTEST_SKIP() << "mounting needs root";
  char tmpl[] = "/tmp/cohort-tmpfs-test-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  const std::string shm = dir + "/shm";
  ASSERT_EQ(::mkdir(shm.c_str(), 0700), 0);
  std::string failure;
  int big = -1, small = -1;
  bool seen_inside = false;
  std::thread thread([&] {
    if (auto mounted = mountTmpfs({shm}, 1 << 20, 4242, 4243); !mounted) {
      failure = mounted.error().message;
      return;
    }
    auto run = [&](const std::string& script) {
      SpawnRequest req;
      req.argv = {"/bin/sh", "-c", script};
      req.env = {"PATH=/usr/bin:/bin"};
      auto child = spawn(req);
      if (!child) return -1;
      auto status = reap(child->pidfd.get());
      return status ? status->code : -1;
    };
    // 2 MiB does not fit in 1 MiB; 512 KiB does. The root is the ranks' (4242), mode 0700.
    small = run("dd if=/dev/zero of='" + shm + "/small' bs=64k count=8 2>/dev/null && "
                "test \"$(stat -c %u:%g:%a '" + shm + "')\" = 4242:4243:700");
    big = run("dd if=/dev/zero of='" + shm + "/big' bs=64k count=32 2>/dev/null");
    struct stat st{};
    seen_inside = ::stat((shm + "/small").c_str(), &st) == 0;
    unmountTmpfs({shm});
  });
  thread.join();
  ASSERT_TRUE(failure.empty()) << failure;
  EXPECT_NE(big, 0) << "wrote past the size";
  EXPECT_EQ(small, 0);
  EXPECT_TRUE(seen_inside);
  EXPECT_FALSE(exists(shm + "/small")) << "the machine saw the thread's mount";
  ASSERT_EQ(::rmdir(shm.c_str()), 0) << "unmounted, the directory can go";
  ASSERT_EQ(::rmdir(dir.c_str()), 0);
}

// A link put where the directory was is not followed: the mount goes nowhere else.
TEST(Tmpfs, ALinkInPlaceOfTheDirectoryIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "mounting needs root";
  char tmpl[] = "/tmp/cohort-tmpfs-test-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  ASSERT_EQ(::mkdir((dir + "/elsewhere").c_str(), 0700), 0);
  ASSERT_EQ(::symlink((dir + "/elsewhere").c_str(), (dir + "/shm").c_str()), 0);
  std::string failure;
  std::thread thread([&] {
    auto mounted = mountTmpfs({dir + "/shm"}, 1 << 20, -1, -1);
    if (!mounted) failure = mounted.error().message;
    unmountTmpfs({dir + "/shm", dir + "/elsewhere"});
  });
  thread.join();
  EXPECT_NE(failure.find("without following links"), std::string::npos) << failure;
  ASSERT_EQ(std::system(("rm -rf '" + dir + "'").c_str()), 0);
}

}  // namespace
}  // namespace cohort::proc
