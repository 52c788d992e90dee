// The session rules (sessions.h), one test per rule.
#include "server/sessions.h"

#include <gtest/gtest.h>

#include "spec/job_spec.h"

namespace cohort::server {
namespace {

constexpr int64_t kSecond = 1000000000;

SessionIdleAsk idleFor(int64_t seconds) {
  SessionIdleAsk ask;
  ask.started = 100 * kSecond;
  ask.now = ask.started + seconds * kSecond;
  ask.idle_timeout = Millis(60000);
  return ask;
}

TEST(Sessions, ASessionNobodyConnectedToEndsAtItsIdleTimeoutFromItsStart) {
  EXPECT_FALSE(idleReason(idleFor(59)));
  auto why = idleReason(idleFor(60));
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("session.idle_timeout"), std::string::npos) << *why;
}

TEST(Sessions, AnOpenConnectionKeepsASessionWhateverItsAge) {
  SessionIdleAsk ask = idleFor(3600);
  ask.open = 1;
  EXPECT_FALSE(idleReason(ask));
}

TEST(Sessions, IdleTimeIsCountedFromTheLastConnectionsClose) {
  SessionIdleAsk ask = idleFor(100);
  ask.last_closed = ask.now - 30 * kSecond;
  EXPECT_FALSE(idleReason(ask));
  ask.last_closed = ask.now - 61 * kSecond;
  EXPECT_TRUE(idleReason(ask));
}

TEST(Sessions, ASessionThatHasNotStartedIsNotIdle) {
  SessionIdleAsk ask = idleFor(1000);
  ask.started = 0;
  EXPECT_FALSE(idleReason(ask));
}

TEST(Sessions, ConnectionsAreCountedUntilTheirGuardGoes) {
  SessionActivity activity;
  auto first = activity.opened("s1");
  auto second = activity.opened("s1");
  EXPECT_EQ(activity.of("s1").open, 2);
  EXPECT_EQ(activity.of("s2").open, 0);
  first.reset();
  second.reset();
  EXPECT_EQ(activity.of("s1").open, 0);
  EXPECT_GT(activity.of("s1").last_closed, 0);
}

TEST(Sessions, OnlyAJobWithSessionIsOne) {
  spec::JobSpec spec;
  spec.name = "s";
  spec.framework = spec::Framework::kGeneric;
  spec.command = {"/bin/true"};
  spec.workdir = "/";
  spec.roles = {spec::Role{}};
  spec.roles[0].name = "worker";
  store::Job job;
  job.spec_json = spec::toJobFile(spec);
  EXPECT_FALSE(sessionOf(job));
  spec.session = spec::Session{};
  spec.session->idle_timeout = Millis(90000);
  spec.session->user = "alice";
  job.spec_json = spec::toJobFile(spec);
  auto session = sessionOf(job);
  ASSERT_TRUE(session);
  EXPECT_EQ(session->idle_timeout, Millis(90000));
  EXPECT_EQ(session->user, "alice");
}

}  // namespace
}  // namespace cohort::server
