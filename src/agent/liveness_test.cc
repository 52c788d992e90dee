#include "agent/liveness.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

namespace cohort::agent {
namespace {

using namespace std::chrono_literals;

TEST(Silence, CountsThePeersSilenceTickByTick) {
  const auto t0 = Silence::Clock::time_point{};
  Silence s(Millis(500), t0);
  EXPECT_EQ(s.tick(t0 + 500ms), Millis(500));
  EXPECT_EQ(s.tick(t0 + 1000ms), Millis(1000));
  s.heard(t0 + 1200ms);
  EXPECT_EQ(s.silent(), Millis(0));
  EXPECT_EQ(s.tick(t0 + 1700ms), Millis(500));
}

// This side was stopped (SIGSTOP) or starved for 7 s: its late tick counts two intervals, not
// 7 s, so the peer is not lost for our own absence.
TEST(Silence, OurOwnAbsenceIsNotThePeersSilence) {
  const auto t0 = Silence::Clock::time_point{};
  Silence s(Millis(500), t0);
  EXPECT_EQ(s.tick(t0 + 7000ms), Millis(1000));
  EXPECT_LT(s.silent(), Millis(5000));
  // A peer that is really silent is still found, at the pace of our ticks.
  Millis silent{0};
  auto now = t0 + 7000ms;
  for (int i = 0; i < 8; ++i) silent = s.tick(now += 500ms);
  EXPECT_EQ(silent, Millis(5000));
}

TEST(Liveness, AStoppedProcessIsSeenAsStopped) {
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::pause();
    ::_exit(0);
  }
  EXPECT_FALSE(processStopped(child));
  ASSERT_EQ(::kill(child, SIGSTOP), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, WUNTRACED), child);
  EXPECT_TRUE(processStopped(child));
  ::kill(child, SIGKILL);
  ::waitpid(child, &status, 0);
  EXPECT_FALSE(processStopped(child)) << "a process that is gone is not stopped";
}

TEST(Liveness, TheLoadNoteNamesTheLoadAndTheSettingToRaise) {
  const std::string note = loadNote();
  EXPECT_NE(note.find("load average is "), std::string::npos) << note;
  EXPECT_NE(note.find("policy.heartbeat_timeout"), std::string::npos) << note;
}

}  // namespace
}  // namespace cohort::agent
