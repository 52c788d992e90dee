// A test per rule of AgentDecisions (agent_decisions.h): who a stop is by, its notice and its
// SIGKILL, when the agent leaves, and with which exit code.
#include "agent/agent_decisions.h"

#include <gtest/gtest.h>

#include <csignal>

namespace cohort::agent {
namespace {

using Millis = std::chrono::milliseconds;
using Actions = std::vector<AgentAction>;

// An agent whose plan says SIGINT and a grace period of 7 s, with `running` ranks.
AgentDecisions agentWith(int running) {
  AgentDecisions d;
  d.configure(SIGINT, Millis(7000));
  d.on(AttemptBegins{});
  d.on(RanksStarted{running});
  return d;
}

// Pointers into `actions`, which the caller keeps.
template <typename T>
const T* only(const Actions&& actions) = delete;
template <typename T>
const T* first(const Actions&& actions) = delete;
template <typename T>
const T* only(const Actions& actions) {
  return actions.size() == 1 ? std::get_if<T>(&actions[0]) : nullptr;
}

template <typename T>
int count(const Actions& actions) {
  int n = 0;
  for (const AgentAction& a : actions) n += std::holds_alternative<T>(a) ? 1 : 0;
  return n;
}

template <typename T>
const T* first(const Actions& actions) {
  for (const AgentAction& a : actions) {
    if (const T* t = std::get_if<T>(&a)) return t;
  }
  return nullptr;
}

TEST(AgentDecisions, TheCoordinatorsStopIsTheCoordinatorsWithItsSignalAndGrace) {
  AgentDecisions d = agentWith(2);
  const Actions got = d.on(StopAsked{Millis(5000), SIGUSR1});
  const SignalRanks* s = only<SignalRanks>(got);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->signal, SIGUSR1);
  EXPECT_EQ(s->grace, Millis(5000));
  EXPECT_EQ(s->stopped_by, "coordinator");
  EXPECT_EQ(s->reason, "");
  EXPECT_TRUE(d.stopping());
  EXPECT_TRUE(d.graceArmed());
  EXPECT_EQ(d.sentSignal(), SIGUSR1);
}

TEST(AgentDecisions, AStopNeverGivesNoNotice) {
  for (int sig : {SIGKILL, SIGSTOP, 0, -3, 65}) {
    AgentDecisions d = agentWith(1);
    const Actions got = d.on(StopAsked{Millis(1000), sig});
    const SignalRanks* s = only<SignalRanks>(got);
    ASSERT_NE(s, nullptr) << sig;
    EXPECT_EQ(s->signal, SIGTERM) << sig;
  }
}

TEST(AgentDecisions, AGraceOfZeroIsSigkillAtOnceAndArmsNothing) {
  AgentDecisions d = agentWith(1);
  const Actions got = d.on(StopAsked{Millis(0), SIGTERM});
  const SignalRanks* s = only<SignalRanks>(got);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->signal, SIGKILL);
  EXPECT_EQ(s->grace, Millis(0));
  EXPECT_FALSE(d.graceArmed());
}

TEST(AgentDecisions, OnceStoppingOnlyTheSigkillIsLeftToSend) {
  AgentDecisions d = agentWith(1);
  d.on(StopAsked{Millis(5000), SIGTERM});
  EXPECT_TRUE(d.on(StopAsked{Millis(5000), SIGTERM}).empty()) << "one notice, never repeated";
  const Actions got = d.on(StopAsked{Millis(0), SIGTERM});
  const SignalRanks* s = only<SignalRanks>(got);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->signal, SIGKILL);
}

TEST(AgentDecisions, WithNothingRunningAStopSignalsNothingAndArmsNoTimer) {
  AgentDecisions d = agentWith(0);
  EXPECT_TRUE(d.on(StopAsked{Millis(5000), SIGTERM}).empty());
  EXPECT_FALSE(d.graceArmed()) << "a timer armed now would kill the next attempt's ranks";
}

TEST(AgentDecisions, TheGracePeriodEndsInSigkillOnlyWhileStopping) {
  AgentDecisions d = agentWith(2);
  EXPECT_TRUE(d.on(GraceOver{}).empty()) << "no stop: nothing to kill";
  d.on(StopAsked{Millis(5000), SIGTERM});
  const Actions got = d.on(GraceOver{});
  EXPECT_NE(only<KillRanks>(got), nullptr);
  EXPECT_FALSE(d.graceArmed());
}

TEST(AgentDecisions, ANewAttemptIsNotStoppedByTheLastOnesStop) {
  AgentDecisions d = agentWith(2);
  d.on(StopAsked{Millis(5000), SIGTERM});
  d.on(RankGone{});
  d.on(RankGone{});
  const Actions got = d.on(AttemptOver{});
  EXPECT_NE(first<DisarmGrace>(got), nullptr);
  const Actions got2 = d.on(AttemptBegins{});
  EXPECT_NE(only<DisarmGrace>(got2), nullptr);
  d.on(RanksStarted{2});
  EXPECT_FALSE(d.stopping());
  EXPECT_TRUE(d.on(GraceOver{}).empty()) << "the last attempt's SIGKILL must not hit this one";
  const Actions got3 = d.on(StopAsked{Millis(5000), SIGTERM});
  EXPECT_NE(only<SignalRanks>(got3), nullptr)
      << "this attempt's ranks get their own notice";
}

TEST(AgentDecisions, TheJobsExitWithNothingRunningLeavesAtOnceWithItsCode) {
  AgentDecisions d = agentWith(0);
  const Actions got = d.on(ExitAsked{3});
  EXPECT_NE(only<Leave>(got), nullptr);
  EXPECT_EQ(d.exitCode(), 3);
  AgentDecisions big = agentWith(0);
  big.on(ExitAsked{300});
  EXPECT_EQ(big.exitCode(), 255) << "an exit code is at most 255";
}

TEST(AgentDecisions, TheJobsExitStopsRunningRanksAndLeavesWhenTheLastIsGone) {
  AgentDecisions d = agentWith(2);
  const Actions got = d.on(ExitAsked{0});
  const SignalRanks* s = only<SignalRanks>(got);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->signal, SIGINT) << "the plan's stop signal";
  EXPECT_EQ(s->stopped_by, "coordinator");
  d.on(RankGone{});
  d.on(RankGone{});
  Actions over = d.on(AttemptOver{});
  EXPECT_EQ(count<Leave>(over), 1);
  EXPECT_EQ(d.exitCode(), 0);
}

TEST(AgentDecisions, AStopWithTheJobsExitLeavesWithItsCodeAfterTheRanks) {
  AgentDecisions d = agentWith(1);
  Actions a = d.on(StopAsked{Millis(2000), SIGTERM, true, 137});
  EXPECT_EQ(count<SignalRanks>(a), 1);
  EXPECT_EQ(count<Leave>(a), 0) << "a rank still runs";
  d.on(RankGone{});
  EXPECT_EQ(count<Leave>(d.on(AttemptOver{})), 1);
  EXPECT_EQ(d.exitCode(), 137);
}

TEST(AgentDecisions, ALostCoordinatorIsTheAgentsOwnStopWithItsReasonAndExitCodeOne) {
  AgentDecisions d = agentWith(2);
  d.on(ExitAsked{0});
  d.on(CoordinatorLost{"closed"});
  EXPECT_EQ(d.exitCode(), 1) << "even after the job's code came";
  AgentDecisions lost = agentWith(2);
  Actions a = lost.on(CoordinatorLost{"its connection to the coordinator closed"});
  ASSERT_EQ(a.size(), 2u);
  EXPECT_TRUE(std::holds_alternative<StopListening>(a[0]));
  const SignalRanks* s = std::get_if<SignalRanks>(&a[1]);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->stopped_by, "agent") << "never a stop the coordinator decided";
  EXPECT_EQ(s->reason, "it lost its coordinator: its connection to the coordinator closed");
  EXPECT_EQ(lost.exitCode(), 1);
  EXPECT_TRUE(lost.on(CoordinatorLost{"again"}).empty()) << "lost once";
}

TEST(AgentDecisions, AStopTheCoordinatorBeganStaysItsWhenTheCoordinatorIsLostLater) {
  AgentDecisions d = agentWith(1);
  d.on(StopAsked{Millis(5000), SIGTERM});
  Actions a = d.on(CoordinatorLost{"closed"});
  EXPECT_EQ(count<SignalRanks>(a), 0) << "the ranks have their notice; the SIGKILL comes on time";
  EXPECT_EQ(count<StopListening>(a), 1);
}

TEST(AgentDecisions, ASignalFromOutsideWithTheCoordinatorThereIsAPreemption) {
  AgentDecisions d = agentWith(2);
  Actions a = d.on(SignalCame{SIGTERM, true});
  ASSERT_EQ(a.size(), 2u);
  const TellSignalled* told = std::get_if<TellSignalled>(&a[0]);
  ASSERT_NE(told, nullptr);
  EXPECT_EQ(told->signal, SIGTERM);
  const SignalRanks* s = std::get_if<SignalRanks>(&a[1]);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->grace, Millis(7000)) << "the job's grace period";
  EXPECT_EQ(s->stopped_by, "agent");
  EXPECT_EQ(s->reason, "SIGTERM came from outside");
  // A second signal kills at once, and the coordinator is not told twice.
  Actions again = d.on(SignalCame{SIGTERM, true});
  const SignalRanks* kill = only<SignalRanks>(again);
  ASSERT_NE(kill, nullptr);
  EXPECT_EQ(kill->signal, SIGKILL);
}

TEST(AgentDecisions, ASignalFromOutsideDoesNotCutShortAStopTheCoordinatorBegan) {
  AgentDecisions d = agentWith(2);
  d.on(StopAsked{Millis(5000), SIGTERM});
  Actions a = d.on(SignalCame{SIGTERM, true});
  EXPECT_EQ(count<TellSignalled>(a), 0) << "the coordinator is stopping the job already";
  EXPECT_EQ(count<SignalRanks>(a), 0);
}

TEST(AgentDecisions, ASignalWithoutACoordinatorStopsTheRanksAndLeaves) {
  AgentDecisions d = agentWith(1);
  const Actions got = d.on(SignalCame{SIGHUP, false});
  const SignalRanks* s = only<SignalRanks>(got);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->grace, Millis(3000));
  EXPECT_EQ(s->stopped_by, "agent");
  EXPECT_EQ(s->reason, "SIGHUP came from outside");
  const Actions got2 = d.on(SignalCame{SIGHUP, false});
  const SignalRanks* kill = only<SignalRanks>(got2);
  ASSERT_NE(kill, nullptr) << "already stopping: the next one kills";
  EXPECT_EQ(kill->signal, SIGKILL);
  d.on(RankGone{});
  EXPECT_EQ(count<Leave>(d.on(AttemptOver{})), 1);
}

TEST(AgentDecisions, AChoreUnderWayIsWaitedForBeforeLeavingOrStopping) {
  // Staging, with nothing running: the exit waits for its end.
  AgentDecisions staging = agentWith(0);
  staging.on(ChoreBegins{});
  EXPECT_TRUE(staging.on(ExitAsked{0}).empty());
  const Actions got = staging.on(ChoreOver{});
  EXPECT_NE(only<Leave>(got), nullptr);
  // A stack dump while ranks run: the exit stops them once it is over, and the last rank's end
  // during the dump does not leave before it.
  AgentDecisions dumping = agentWith(1);
  dumping.on(ChoreBegins{});
  EXPECT_TRUE(dumping.on(ExitAsked{0}).empty());
  dumping.on(RankGone{});
  EXPECT_EQ(count<Leave>(dumping.on(AttemptOver{})), 0) << "one chore at a time";
  const Actions got2 = dumping.on(ChoreOver{});
  EXPECT_NE(only<Leave>(got2), nullptr);
}

TEST(AgentDecisions, TheAgentLeavesOnce) {
  AgentDecisions d = agentWith(0);
  const Actions got = d.on(ExitAsked{0});
  EXPECT_NE(only<Leave>(got), nullptr);
  d.on(ChoreBegins{});  // copying the outputs
  EXPECT_TRUE(d.on(ChoreOver{}).empty());
  EXPECT_TRUE(d.on(ExitAsked{0}).empty());
  EXPECT_TRUE(d.on(AttemptOver{}).size() == 1) << "only the timer is disarmed";
}

}  // namespace
}  // namespace cohort::agent
