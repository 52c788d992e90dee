#include "proc/spawn.h"

#include <gtest/gtest.h>
#include <poll.h>

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

TEST(FindProgram, RelativePathsResolveFromWorkdir) {
  EXPECT_EQ(*findProgram("sh", "/nonexistent:/bin", "/"), "/bin/sh");
  EXPECT_EQ(*findProgram("./sh", "", "/bin"), "/bin/./sh");
  EXPECT_FALSE(findProgram("./nope", "", "/bin"));
}

}  // namespace
}  // namespace cohort::proc
