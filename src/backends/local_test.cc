// The local launcher starts each node's agent as a copy of the coordinator; a coordinator with
// another thread (which a copy would not have) starts `cohort exec` instead. The copies are what
// every `cohort run` of the integration tests starts; this is the other way.
#include "backends/local.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "util/fd.h"
#include "util/text.h"

namespace cohort::backends {
namespace {

// In a session the CPUs are a quota, which the CPU set does not show: COHORT_CPUS says it.
TEST(LocalCpus, AreTheCpuSetAtMostTheShareCohortCpusSays) {
  ::unsetenv("COHORT_CPUS");
  const int machine = localCpus();
  ASSERT_GT(machine, 0);
  ::setenv("COHORT_CPUS", "0.5", 1);
  EXPECT_EQ(localCpus(), 1);  // a share of one CPU is one CPU's worth of ranks
  ::setenv("COHORT_CPUS", "100000", 1);
  EXPECT_EQ(localCpus(), machine);
  for (const char* bad : {"", "two", "-1", "1x"}) {
    ::setenv("COHORT_CPUS", bad, 1);
    EXPECT_EQ(localCpus(), machine) << bad;
  }
  ::unsetenv("COHORT_CPUS");
}

TEST(LocalLauncher, ACoordinatorWithAnotherThreadStartsCohortExec) {
  const std::string dir =
      std::filesystem::temp_directory_path() / ("cohort-local-test-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  // Stands in for the cohort binary: says how it was started.
  const std::string exe = dir + "/cohort";
  std::ofstream(exe) << "#!/bin/sh\necho \"$@\" > " << dir << "/args-$5\n"
                     << "echo \"$COHORT_JOB_SECRET\" > " << dir << "/secret-$5\n";
  std::filesystem::permissions(exe, std::filesystem::perms::owner_all);
  std::atomic<bool> stop = false;
  std::thread other([&] {
    while (!stop) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  LocalLauncher launcher(exe);
  auto launched = launcher.launch(2, agent::Dial{"127.0.0.1", 4242, "5ec2e75ec2e7"});
  stop = true;
  other.join();
  ASSERT_TRUE(launched) << launched.error().message;
  launcher.reap(Millis(10000));
  for (const std::string node : {"0", "1"}) {
    EXPECT_EQ(readFile(dir + "/args-" + node).value_or(""),
              "exec --coordinator 127.0.0.1:4242 --node " + node + "\n");
    EXPECT_EQ(readFile(dir + "/secret-" + node).value_or(""), "5ec2e75ec2e7\n")
        << "in its environment, not on its command line";
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace cohort::backends
