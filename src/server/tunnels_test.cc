// The tunnel decision (tunnels.h), one test per rule.
#include "server/tunnels.h"

#include <gtest/gtest.h>

#include "job/session.h"

namespace cohort::server {
namespace {

job::DebugTarget paused(int rank, int node, const std::string& address) {
  job::DebugTarget t;
  t.name = "worker/" + std::to_string(rank);
  t.rank = rank;
  t.node = node;
  t.state = "waiting";
  t.address = address;
  return t;
}

TunnelAsk aliceAsks(int rank) {
  TunnelAsk ask;
  ask.caller = {"alice", false};
  ask.job_id = "j1";
  ask.job_account = "alice";
  ask.job_started = true;
  ask.rank = rank;
  ask.paused = {paused(1, 0, "127.0.0.1:41000"), paused(3, 1, "127.0.0.1:41003")};
  return ask;
}

TEST(Tunnels, TheJobsAccountReachesItsPausedRanksNode) {
  auto to = decideTunnel(aliceAsks(3));
  ASSERT_TRUE(to) << to.error().message;
  EXPECT_EQ(to->node, 1);
  EXPECT_EQ(to->port, 41003);
}

TEST(Tunnels, AnotherAccountIsToldTheJobDoesNotExist) {
  TunnelAsk ask = aliceAsks(1);
  ask.caller = {"bob", false};
  auto to = decideTunnel(ask);
  ASSERT_FALSE(to);
  EXPECT_EQ(to.error().code, Code::kNotFound);
  EXPECT_EQ(to.error().message, "no job 'j1'");
}

TEST(Tunnels, AnAdminReachesAnyAccountsPausedRank) {
  TunnelAsk ask = aliceAsks(1);
  ask.caller = {"root", true};
  auto to = decideTunnel(ask);
  ASSERT_TRUE(to) << to.error().message;
  EXPECT_EQ(to->port, 41000);
}

TEST(Tunnels, AnEndedJobHasNoTunnel) {
  TunnelAsk ask = aliceAsks(1);
  ask.job_final = true;
  auto to = decideTunnel(ask);
  ASSERT_FALSE(to);
  EXPECT_EQ(to.error().code, Code::kFailedPrecondition);
}

TEST(Tunnels, AJobThatHasNotStartedHasNoTunnel) {
  TunnelAsk ask = aliceAsks(1);
  ask.job_started = false;
  auto to = decideTunnel(ask);
  ASSERT_FALSE(to);
  EXPECT_EQ(to.error().code, Code::kFailedPrecondition);
}

TEST(Tunnels, ARankThatIsNotPausedIsNotReached) {
  auto to = decideTunnel(aliceAsks(2));
  ASSERT_FALSE(to);
  EXPECT_EQ(to.error().code, Code::kNotFound);
  EXPECT_NE(to.error().message.find("cohort debug j1"), std::string::npos) << to.error().message;
}

TEST(Tunnels, ARankThatDialsItsIdeOrListensElsewhereIsNotReached) {
  for (const std::string address : {"ide-host:12345", "10.88.0.2:5678", "127.0.0.1:0",
                                    "127.0.0.1:x", "127.0.0.1:70000"}) {
    TunnelAsk ask = aliceAsks(1);
    ask.paused = {paused(1, 0, address)};
    auto to = decideTunnel(ask);
    ASSERT_FALSE(to) << address;
    EXPECT_EQ(to.error().code, Code::kFailedPrecondition) << address;
  }
}

TunnelAsk aliceAsksHerSession(const std::string& service) {
  TunnelAsk ask = aliceAsks(-1);
  ask.paused.clear();
  ask.session = true;
  ask.service = service;
  return ask;
}

TEST(Tunnels, ASessionsAccountReachesItsSshServerOnNodeZero) {
  auto to = decideTunnel(aliceAsksHerSession("ssh"));
  ASSERT_TRUE(to) << to.error().message;
  EXPECT_EQ(to->node, 0);
  EXPECT_EQ(to->port, job::sessionPort("ssh"));
}

TEST(Tunnels, AnotherAccountsSessionDoesNotExistForIt) {
  TunnelAsk ask = aliceAsksHerSession("ssh");
  ask.caller = {"bob", false};
  auto to = decideTunnel(ask);
  ASSERT_FALSE(to);
  EXPECT_EQ(to.error().code, Code::kNotFound);
  EXPECT_EQ(to.error().message, "no job 'j1'");
}

TEST(Tunnels, AnEndedSessionHasNoTunnel) {
  TunnelAsk ask = aliceAsksHerSession("ssh");
  ask.job_final = true;
  auto to = decideTunnel(ask);
  ASSERT_FALSE(to);
  EXPECT_EQ(to.error().code, Code::kFailedPrecondition);
}

TEST(Tunnels, AServiceOfAJobThatIsNotASessionOrAnUnknownServiceIsNotReached) {
  TunnelAsk job = aliceAsksHerSession("ssh");
  job.session = false;
  auto to = decideTunnel(job);
  ASSERT_FALSE(to);
  EXPECT_EQ(to.error().code, Code::kNotFound);
  auto unknown = decideTunnel(aliceAsksHerSession("telnet"));
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.error().code, Code::kNotFound);
  EXPECT_NE(unknown.error().message.find("ssh"), std::string::npos) << unknown.error().message;
}

}  // namespace
}  // namespace cohort::server
