// The coordinator's decision table: JobDecisions driven by events and a fake time, one test per
// rule. No process, socket or timer is involved: the agents' reports are events, and what the
// coordinator would do is the list of actions.
#include "agent/decisions.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <string>
#include <vector>

namespace cohort::agent {
namespace {

using namespace std::chrono_literals;

// `nodes` nodes of `per_node` ranks of role "worker" (all key), plus `ps` ranks of role "ps"
// (not key) on node 0.
plan::Plan makePlan(int nodes, int per_node, int ps = 0) {
  plan::Plan p;
  p.job_id = "j1";
  p.job_name = "test";
  p.grace_period_ms = 30000;
  int rank = 0;
  for (int n = 0; n < nodes; ++n) {
    plan::NodePlan node;
    node.node = n;
    auto add = [&](const std::string& role, int role_rank, bool key) {
      plan::RankPlan r;
      r.role = role;
      r.role_rank = role_rank;
      r.name = role + "/" + std::to_string(role_rank);
      r.rank = rank++;
      r.node = n;
      r.key = key;
      r.log_file = "logs/" + role + "-" + std::to_string(role_rank) + ".log";
      node.ranks.push_back(r);
    };
    if (n == 0) {
      for (int i = 0; i < ps; ++i) add("ps", i, false);
    }
    for (int i = 0; i < per_node; ++i) add("worker", n * per_node + i, true);
    p.nodes.push_back(node);
  }
  return p;
}

template <class A>
std::vector<A> all(const std::vector<JobAction>& actions) {
  std::vector<A> out;
  for (const JobAction& a : actions) {
    if (auto* x = std::get_if<A>(&a)) out.push_back(*x);
  }
  return out;
}

template <class A>
bool has(const std::vector<JobAction>& actions) {
  return !all<A>(actions).empty();
}

// The states written as events, in order.
std::vector<std::string> states(const std::vector<JobAction>& actions) {
  std::vector<std::string> out;
  for (const WriteEvent& w : all<WriteEvent>(actions)) {
    if (w.event.kind == job::EventKind::kState) out.push_back(w.event.state);
  }
  return out;
}

std::vector<std::string> said(const std::vector<JobAction>& actions) {
  std::vector<std::string> out;
  for (const Say& s : all<Say>(actions)) out.push_back(s.line);
  return out;
}

bool saidSomething(const std::vector<JobAction>& actions, const std::string& part) {
  for (const std::string& line : said(actions)) {
    if (line.find(part) != std::string::npos) return true;
  }
  return false;
}

// A job driven the way the coordinator's shell drives it: every input at a fake time, every
// action kept. The helpers play the agents.
class Job {
 public:
  explicit Job(const plan::Plan& plan, Millis connect_timeout = Millis(60000))
      : plan_(plan), decisions_(plan, connect_timeout) {}

  std::vector<JobAction> feed(const JobInput& input, Millis after = Millis(0)) {
    now_ += after;
    auto actions = decisions_.handle(input, now_);
    for (const JobAction& a : actions) {
      if (auto* f = std::get_if<Finish>(&a)) finish_ = f->outcome;
    }
    log_.insert(log_.end(), actions.begin(), actions.end());
    return actions;
  }

  int nodes() const { return static_cast<int>(plan_.nodes.size()); }
  int attempt() const { return attempt_; }

  void connectAll() {
    feed(JobBegins{});
    for (int n = 0; n < nodes(); ++n) feed(AgentConnected{n});
  }
  void stageAll() {
    for (int n = 0; n < nodes(); ++n) feed(NodeStaged{n, 0, 0, 0.0});
  }
  // Up to every rank of attempt 0 running.
  void runAll() {
    connectAll();
    stageAll();
    startAll();
  }
  void startAll() {
    for (int n = 0; n < nodes(); ++n) {
      feed(NodeStarted{n, attempt_, static_cast<int>(plan_.nodes[n].ranks.size())});
    }
  }
  std::vector<JobAction> exit(int rank, int code, int signal = 0, bool by_cohort = false,
                              int64_t time_ns = 0) {
    int node = 0;
    for (const plan::NodePlan& n : plan_.nodes) {
      for (const plan::RankPlan& r : n.ranks) {
        if (r.rank == rank) node = n.node;
      }
    }
    if (time_ns == 0) time_ns = ++clock_ns_;
    return feed(RankExited{node, attempt_, rank, code, signal,
                           by_cohort ? StoppedBy::kCoordinator : StoppedBy::kNobody, time_ns,
                           {"last line"}});
  }
  // A rank its node's agent stopped on its own (it lost its coordinator, say), with `signal`
  // or, when it caught the signal and exited, `code`.
  std::vector<JobAction> stoppedByItsAgent(int rank, int code, int signal) {
    return feed(RankExited{0, attempt_, rank, code, signal, StoppedBy::kAgent, ++clock_ns_,
                           {"last line"}, 0, "it lost its coordinator: no word in 5.0s"});
  }
  // The agents stop whatever still runs (SIGTERM, reported as cohort's doing) and go idle.
  std::vector<JobAction> stopRest(const std::vector<int>& running) {
    std::vector<JobAction> out;
    for (int rank : running) {
      auto a = exit(rank, 0, SIGTERM, true);
      out.insert(out.end(), a.begin(), a.end());
    }
    for (int n = 0; n < nodes(); ++n) {
      auto a = feed(NodeIdle{n, attempt_});
      out.insert(out.end(), a.begin(), a.end());
    }
    return out;
  }
  // The agents, told to exit, close their connections.
  std::vector<JobAction> agentsExit() {
    std::vector<JobAction> out;
    for (int n = 0; n < nodes(); ++n) {
      auto a = feed(AgentLost{n});
      out.insert(out.end(), a.begin(), a.end());
    }
    return out;
  }
  void nextAttempt() { ++attempt_; }

  const std::optional<JobOutcome>& outcome() const { return finish_; }
  const std::vector<JobAction>& log() const { return log_; }
  JobDecisions& decisions() { return decisions_; }

 private:
  plan::Plan plan_;
  JobDecisions decisions_;
  TimePoint now_{};
  int64_t clock_ns_ = 1000;
  int attempt_ = 0;
  std::optional<JobOutcome> finish_;
  std::vector<JobAction> log_;
};

// ---- the way to running ----------------------------------------------------------------------

TEST(JobDecisions, BeginningArmsTheConnectDeadlineAndLaunchesTheAgents) {
  Job job(makePlan(2, 1), Millis(5000));
  auto a = job.feed(JobBegins{});
  EXPECT_EQ(states(a), std::vector<std::string>{"starting"});
  auto timers = all<ArmTimer>(a);
  ASSERT_EQ(timers.size(), 1u);
  EXPECT_EQ(timers[0].timer, TimerKind::kConnect);
  EXPECT_EQ(timers[0].after, Millis(5000));
  EXPECT_TRUE(has<LaunchAgents>(a));
}

TEST(JobDecisions, PlansAndStagingGoOnlyWhenEveryAgentConnected) {
  Job job(makePlan(2, 1));
  job.feed(JobBegins{});
  auto first = job.feed(AgentConnected{0});
  EXPECT_FALSE(has<SendPlan>(first)) << "node 1's address is not known yet";
  EXPECT_FALSE(has<SendStage>(first));
  auto second = job.feed(AgentConnected{1});
  ASSERT_EQ(all<SendPlan>(second).size(), 2u);
  EXPECT_EQ(all<SendPlan>(second)[0].node, 0);
  EXPECT_EQ(all<SendPlan>(second)[1].node, 1);
  EXPECT_TRUE(has<SendStage>(second));
  EXPECT_EQ(states(second), std::vector<std::string>{"staging"});
  ASSERT_EQ(all<DisarmTimer>(second).size(), 1u);
  EXPECT_EQ(all<DisarmTimer>(second)[0].timer, TimerKind::kConnect);
}

TEST(JobDecisions, RanksStartOnlyWhenEveryNodeStaged) {
  plan::Plan plan = makePlan(2, 1);
  plan.max_runtime_ms = 300;
  Job job(plan);
  job.connectAll();
  auto first = job.feed(NodeStaged{0, 3, 1 << 20, 0.5});
  EXPECT_FALSE(has<SendStart>(first));
  ASSERT_EQ(all<WriteEvent>(first).size(), 1u);
  EXPECT_EQ(all<WriteEvent>(first)[0].event.kind, job::EventKind::kStaged);
  EXPECT_EQ(all<WriteEvent>(first)[0].event.files, 3);
  auto second = job.feed(NodeStaged{1, 0, 0, 0.1});
  ASSERT_EQ(all<SendStart>(second).size(), 1u);
  EXPECT_EQ(all<SendStart>(second)[0].attempt, 0);
  EXPECT_EQ(states(second), std::vector<std::string>{"running"});
  auto timers = all<ArmTimer>(second);
  ASSERT_EQ(timers.size(), 1u);
  EXPECT_EQ(timers[0].timer, TimerKind::kRuntime);
  EXPECT_EQ(timers[0].after, Millis(300));
}

TEST(JobDecisions, StagedLineOnlyForNodesWithInputs) {
  plan::Plan plan = makePlan(2, 1);
  plan.nodes[1].inputs.push_back({"/in", "/work/node1/in", false});
  Job job(plan);
  job.connectAll();
  EXPECT_TRUE(said(job.feed(NodeStaged{0, 0, 0, 0.0})).empty());
  EXPECT_EQ(said(job.feed(NodeStaged{1, 2, 3 << 20, 1.5})),
            std::vector<std::string>{"node 1 staged 2 file(s), 3.0 MiB in 1.50s"});
}

TEST(JobDecisions, StartedLineCountsEveryProcessAndTheTimeSinceStart) {
  Job job(makePlan(2, 2));
  job.connectAll();
  job.stageAll();
  EXPECT_TRUE(said(job.feed(NodeStarted{0, 0, 2}, 100ms)).empty());
  EXPECT_EQ(said(job.feed(NodeStarted{1, 0, 2}, 150ms)),
            std::vector<std::string>{"4 process(es) started on 2 node(s) in 0.250s"});
}

// ---- success and failure ---------------------------------------------------------------------

// How a key rank ended decides whether it counts toward the job's success. Only an exit of its
// own with code 0 does; each other way of ending is tried here with every other rank still
// running (no stop decided yet) and after a stop began.
struct WayToEnd {
  const char* what;
  int code;
  int signal;
  StoppedBy by;
};
constexpr WayToEnd kWaysToEnd[] = {
    {"exited 0 by itself", 0, 0, StoppedBy::kNobody},
    {"exited 1 by itself", 1, 0, StoppedBy::kNobody},
    {"was killed by a signal nobody in cohort sent", 0, SIGSEGV, StoppedBy::kNobody},
    {"exited 0 after the coordinator's stop", 0, 0, StoppedBy::kCoordinator},
    {"was killed by the coordinator's stop", 0, SIGTERM, StoppedBy::kCoordinator},
    {"exited 0 after its agent stopped it on its own", 0, 0, StoppedBy::kAgent},
    {"was killed by its agent on its own", 0, SIGTERM, StoppedBy::kAgent},
};

TEST(JobDecisions, OnlyAKeyRankThatExitedZeroByItselfCountsTowardSuccess) {
  for (const WayToEnd& way : kWaysToEnd) {
    SCOPED_TRACE(way.what);
    Job job(makePlan(1, 1));  // one key rank: its end decides at once
    job.runAll();
    auto a = job.feed(RankExited{0, 0, 0, way.code, way.signal, way.by, 10, {"last line"}, 0,
                                 "it lost its coordinator"});
    job.feed(NodeIdle{0, 0});
    ASSERT_TRUE(job.outcome());
    const bool by_itself_with_zero = way.by == StoppedBy::kNobody && way.code == 0 && !way.signal;
    EXPECT_EQ(job.outcome()->state == JobState::kSucceeded, by_itself_with_zero);
    EXPECT_NE(job.outcome()->exit_code == 0, !by_itself_with_zero);
  }
}

TEST(JobDecisions, AStopNoOneDecidedFailsTheJobAndSaysWhoStoppedTheRank) {
  Job job(makePlan(2, 1));
  job.runAll();
  auto a = job.stoppedByItsAgent(0, 0, SIGTERM);
  EXPECT_EQ(states(a), std::vector<std::string>{"stopping"});
  ASSERT_EQ(all<SendStop>(a).size(), 1u) << "the other node's ranks are stopped";
  EXPECT_TRUE(saidSomething(a, "worker/0 on node 0 was stopped by its node's agent on its own "
                               "(it lost its coordinator: no word in 5.0s)"));
  auto exits = all<WriteEvent>(a);
  ASSERT_FALSE(exits.empty());
  EXPECT_TRUE(exits[0].event.by_cohort);
  EXPECT_EQ(exits[0].event.reason,
            "stopped by its node's agent: it lost its coordinator: no word in 5.0s");
  // Even a rank that then exits 0 by itself cannot make it a success.
  job.exit(1, 0);
  job.feed(NodeIdle{0, 0});
  job.feed(NodeIdle{1, 0});
  ASSERT_TRUE(job.outcome());
  EXPECT_EQ(job.outcome()->state, JobState::kFailed);
  EXPECT_EQ(job.outcome()->exit_code, 1);
  EXPECT_NE(job.outcome()->reason.find("stopped by its node's agent on its own"),
            std::string::npos);
}

TEST(JobDecisions, AStopNoOneDecidedIsNeverRestarted) {
  plan::Plan plan = makePlan(1, 2);
  plan.max_restarts = 3;
  Job job(plan);
  job.runAll();
  job.stoppedByItsAgent(0, 0, SIGTERM);
  auto end = job.stopRest({1});
  EXPECT_FALSE(has<SendStart>(end)) << "an agent that lost its coordinator is leaving";
  ASSERT_TRUE(job.outcome());
  EXPECT_EQ(job.outcome()->state, JobState::kFailed);
  EXPECT_EQ(job.outcome()->attempts, 1);
}

TEST(JobDecisions, AfterAStopBeganNoWayOfEndingChangesTheVerdict) {
  for (const WayToEnd& way : kWaysToEnd) {
    SCOPED_TRACE(way.what);
    // A failure began the stop: the rest end any way at all, the job stays failed with its cause.
    Job failed(makePlan(1, 2));
    failed.runAll();
    failed.exit(0, 3);
    failed.feed(RankExited{0, 0, 1, way.code, way.signal, way.by, 1 << 30, {}});
    failed.feed(NodeIdle{0, 0});
    ASSERT_TRUE(failed.outcome());
    EXPECT_EQ(failed.outcome()->state, JobState::kFailed);
    EXPECT_EQ(failed.outcome()->exit_code, 3);
    ASSERT_TRUE(failed.outcome()->root_cause);
    EXPECT_EQ(failed.outcome()->root_cause->rank, 0);
    // A user's stop began it: the job is stopped, however its ranks end.
    Job stopped(makePlan(1, 1));
    stopped.runAll();
    stopped.feed(StopSignal{SIGINT});
    stopped.feed(RankExited{0, 0, 0, way.code, way.signal, way.by, 50, {}});
    stopped.feed(NodeIdle{0, 0});
    ASSERT_TRUE(stopped.outcome());
    EXPECT_EQ(stopped.outcome()->state, JobState::kStopped);
  }
}

TEST(JobDecisions, ALostNodeIsTheRootCauseWithItsRanksWhenNoRankFailedFirst) {
  Job job(makePlan(2, 2));
  job.runAll();
  job.feed(AgentLost{1, "n2 at 10.77.0.12: no word from it in 30s"});
  job.stopRest({0, 1});
  ASSERT_TRUE(job.outcome());
  ASSERT_TRUE(job.outcome()->lost_node);
  EXPECT_EQ(job.outcome()->lost_node->node, 1);
  EXPECT_EQ(job.outcome()->lost_node->why, "n2 at 10.77.0.12: no word from it in 30s");
  EXPECT_EQ(job.outcome()->lost_node->ranks, (std::vector<std::string>{"worker/2", "worker/3"}));
  const std::string block = formatLostNode(*job.outcome()->lost_node, {}, job.outcome()->exits);
  EXPECT_EQ(block.rfind("root cause: node 1's agent was lost (n2 at 10.77.0.12: no word from it "
                        "in 30s) (the first failure)\n  its rank(s): worker/2, worker/3\n",
                        0),
            0u)
      << block;
  EXPECT_NE(block.find("policy.heartbeat_timeout"), std::string::npos) << block;
  EXPECT_NE(block.find("2 rank(s) were stopped by cohort"), std::string::npos) << block;
  // A node lost after a rank failed is a consequence: the failed rank stays the root cause.
  Job failed(makePlan(2, 1));
  failed.runAll();
  failed.exit(0, 4);
  failed.feed(AgentLost{1, "its connection closed"});
  failed.feed(NodeIdle{0, 0});
  ASSERT_TRUE(failed.outcome());
  EXPECT_FALSE(failed.outcome()->lost_node);
  ASSERT_TRUE(failed.outcome()->root_cause);
  EXPECT_EQ(failed.outcome()->root_cause->rank, 0);
}

TEST(JobDecisions, RanksOfALostNodeNeverCountTowardSuccess) {
  Job job(makePlan(2, 1));
  job.runAll();
  job.exit(0, 0);  // node 0's key rank is done
  auto a = job.feed(AgentLost{1, "no word from it in 30s"});  // node 1's rank never reported
  job.feed(NodeIdle{0, 0});
  ASSERT_TRUE(job.outcome());
  EXPECT_EQ(job.outcome()->state, JobState::kFailed);
  EXPECT_NE(job.outcome()->reason.find("node 1's agent was lost"), std::string::npos);
}

TEST(JobDecisions, KeyRoleSuccessStopsOtherRoles) {
  Job job(makePlan(2, 1, /*ps=*/1));  // rank 0: ps (node 0); ranks 1, 2: workers
  job.runAll();
  EXPECT_FALSE(has<SendStop>(job.exit(1, 0)));
  auto last = job.exit(2, 0);
  EXPECT_EQ(states(last), std::vector<std::string>{"stopping"});
  ASSERT_EQ(all<SendStop>(last).size(), 1u);
  EXPECT_EQ(all<SendStop>(last)[0].grace_ms, 30000);
  EXPECT_EQ(all<SendStop>(last)[0].exit_code, std::optional<int>(0)) << "the stop ends the job";
  EXPECT_TRUE(said(last).empty()) << "success is not a failure to announce";
  auto end = job.stopRest({0});
  EXPECT_FALSE(has<SendExit>(end)) << "the agents were told to go with the stop";
  EXPECT_TRUE(has<Finish>(end));
  EXPECT_EQ(states(end), std::vector<std::string>{"succeeded"});
  ASSERT_TRUE(job.outcome());
  EXPECT_EQ(job.outcome()->state, JobState::kSucceeded);
  EXPECT_EQ(job.outcome()->exit_code, 0);
  EXPECT_EQ(job.outcome()->reason, "every rank of the key role(s) exited 0");
  EXPECT_FALSE(job.outcome()->root_cause);
  EXPECT_EQ(job.outcome()->exits.size(), 3u);
  ASSERT_EQ(all<WriteResult>(end).size(), 1u);
  EXPECT_EQ(all<WriteResult>(end)[0].outcome.state, JobState::kSucceeded);
}

TEST(JobDecisions, SuccessNeedsEveryKeyRank) {
  Job job(makePlan(2, 1));
  job.runAll();
  auto a = job.exit(0, 0);
  EXPECT_FALSE(has<SendStop>(a));
  EXPECT_TRUE(states(a).empty());
}

TEST(JobDecisions, FirstKeyRankFailureStopsEveryRank) {
  Job job(makePlan(2, 2));
  job.runAll();
  auto a = job.exit(3, 7);
  EXPECT_EQ(said(a), std::vector<std::string>{
                         "worker/3 on node 1 exited with code 7; stopping every rank: sent "
                         "SIGTERM to 3 rank(s), SIGKILL in 30.0s"});
  EXPECT_EQ(states(a), std::vector<std::string>{"stopping"});
  EXPECT_TRUE(has<SendStop>(a));
  job.stopRest({0, 1, 2});
  job.agentsExit();
  ASSERT_TRUE(job.outcome());
  EXPECT_EQ(job.outcome()->state, JobState::kFailed);
  EXPECT_EQ(job.outcome()->exit_code, 7);
  ASSERT_TRUE(job.outcome()->root_cause);
  EXPECT_EQ(job.outcome()->root_cause->rank, 3);
  EXPECT_EQ(job.outcome()->root_cause->node, 1);
  EXPECT_EQ(job.outcome()->root_cause->log_file, "logs/worker-3.log");
}

TEST(JobDecisions, UnexpectedSignalOfAnyRankFailsTheJobWithAShellStyleCode) {
  Job job(makePlan(1, 1, /*ps=*/1));  // rank 0: ps, not key
  job.runAll();
  auto a = job.exit(0, 0, SIGKILL);
  EXPECT_TRUE(saidSomething(a, "ps/0 on node 0 was killed by SIGKILL"));
  job.stopRest({1});
  job.agentsExit();
  ASSERT_TRUE(job.outcome());
  EXPECT_EQ(job.outcome()->exit_code, 128 + SIGKILL);
}

TEST(JobDecisions, ARankOverItsMemoryLimitIsTheCauseInWords) {
  Job job(makePlan(1, 2));
  job.runAll();
  auto a = job.feed(RankExited{0, 0, 1, 0, SIGKILL, StoppedBy::kNobody, 5, {}, 512 << 20});
  const std::string expected =
      "worker/1 on node 0 was killed by the kernel for using more than its memory limit of "
      "512 MiB (memory.max); raise resources.memory or use less";
  EXPECT_TRUE(saidSomething(a, expected)) << testing::PrintToString(said(a));
  auto events = all<WriteEvent>(a);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events[0].event.memory_limit, 512 << 20);
  job.stopRest({0});
  job.agentsExit();
  ASSERT_TRUE(job.outcome());
  EXPECT_EQ(job.outcome()->reason, expected);
  ASSERT_TRUE(job.outcome()->root_cause);
  EXPECT_EQ(job.outcome()->root_cause->memory_limit, 512 << 20);
  EXPECT_EQ(job.outcome()->exit_code, 128 + SIGKILL);
}

TEST(JobDecisions, LimitsNotEnforcedAreAWarningSaidOncePerJobWithAnEvent) {
  Job job(makePlan(2, 1));
  job.connectAll();
  auto first = job.feed(LimitsNotEnforced{0, "cgroup 'x' has no memory controller"});
  const std::string warning =
      "resource requests (resources.cpus, .memory, .pids) are not enforced here: the job runs, "
      "but a rank may use more CPU, memory and processes than it asked for, and one over its "
      "memory is not stopped at its limit (node 0: cgroup 'x' has no memory controller)";
  EXPECT_TRUE(saidSomething(first, "warning: " + warning));
  auto events = all<WriteEvent>(first);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].event.kind, job::EventKind::kLimits);
  EXPECT_EQ(events[0].event.node, 0);
  EXPECT_EQ(events[0].event.warning, warning);
  EXPECT_TRUE(events[0].event.error.empty()) << "a warning, not an error";
  // Another node, for the same reason or another: the job was told already.
  EXPECT_TRUE(job.feed(LimitsNotEnforced{1, "cgroup 'x' has no memory controller"}).empty());
  EXPECT_TRUE(job.feed(LimitsNotEnforced{1, "no cgroup for the ranks"}).empty());
}

// What the coordinator does today for a rank of a role outside `policy.success`: its non-zero
// exit that cohort did not cause is a failure like any other.
TEST(JobDecisions, NonKeyRankNonZeroExitFailsTheJob) {
  Job job(makePlan(1, 1, /*ps=*/1));
  job.runAll();
  EXPECT_TRUE(has<SendStop>(job.exit(0, 2)));
}

TEST(JobDecisions, NonKeyRankExitingZeroChangesNothing) {
  Job job(makePlan(1, 1, /*ps=*/1));
  job.runAll();
  auto a = job.exit(0, 0);
  EXPECT_FALSE(has<SendStop>(a));
  EXPECT_TRUE(states(a).empty());
}

TEST(JobDecisions, RootCauseIsTheFirstFailureInTimeNotTheFirstReported) {
  Job job(makePlan(1, 3));
  job.runAll();
  job.exit(1, 1, 0, false, /*time_ns=*/2000);  // reported first, happened later
  job.exit(0, 0, SIGTERM, true, /*time_ns=*/500);  // stopped by cohort: a consequence
  job.exit(2, 2, 0, false, /*time_ns=*/1500);  // the first failure
  job.stopRest({});
  job.agentsExit();
  ASSERT_TRUE(job.outcome());
  ASSERT_TRUE(job.outcome()->root_cause);
  EXPECT_EQ(job.outcome()->root_cause->rank, 2);
  EXPECT_EQ(job.outcome()->exit_code, 2);
}

// A rank cohort signalled while no stop was decided did not end by itself: the job fails (it
// used to count as a success when its exit code was 0).
TEST(JobDecisions, AnExitCohortCausedWithoutADecidedStopFailsTheJob) {
  Job job(makePlan(1, 2));
  job.runAll();
  auto a = job.exit(0, 0, SIGTERM, /*by_cohort=*/true);
  EXPECT_TRUE(has<SendStop>(a));
  EXPECT_TRUE(saidSomething(a, "worker/0 on node 0 was stopped by cohort although no stop was decided"));
  job.exit(1, 0);
  job.feed(NodeIdle{0, 0});
  ASSERT_TRUE(job.outcome());
  EXPECT_EQ(job.outcome()->state, JobState::kFailed);
}

// ---- restarts --------------------------------------------------------------------------------

TEST(JobDecisions, FailureWithinBudgetRestartsTheWholeGang) {
  plan::Plan plan = makePlan(2, 1);
  plan.max_restarts = 2;
  Job job(plan);
  job.runAll();
  job.exit(1, 3);
  auto a = job.stopRest({0});
  EXPECT_FALSE(has<SendExit>(a));
  EXPECT_EQ(said(a), std::vector<std::string>{
                         "attempt 1 failed (worker/1 on node 1 exited with code 3); restarting "
                         "(1 of 2 restarts)"});
  EXPECT_EQ(states(a), (std::vector<std::string>{"restarting", "running"}));
  ASSERT_EQ(all<SendStart>(a).size(), 1u);
  EXPECT_EQ(all<SendStart>(a)[0].attempt, 1);
  job.nextAttempt();
  job.startAll();
  job.exit(0, 0);
  job.exit(1, 0);
  job.stopRest({});
  job.agentsExit();
  ASSERT_TRUE(job.outcome());
  EXPECT_EQ(job.outcome()->state, JobState::kSucceeded);
  EXPECT_EQ(job.outcome()->attempts, 2);
  EXPECT_EQ(job.outcome()->exits.size(), 4u) << "every attempt's exits are kept";
}

TEST(JobDecisions, RestartBudgetRunsOutAndTheLastAttemptNamesTheCause) {
  plan::Plan plan = makePlan(2, 1);
  plan.max_restarts = 1;
  Job job(plan);
  job.runAll();
  job.exit(1, 5);
  job.stopRest({0});
  job.nextAttempt();
  job.startAll();
  job.exit(0, 6);
  EXPECT_EQ(all<SendStop>(job.log()).front().exit_code, std::nullopt) << "a restart follows";
  EXPECT_EQ(all<SendStop>(job.log()).back().exit_code, std::optional<int>(6)) << "none follows";
  auto a = job.stopRest({1});
  EXPECT_FALSE(has<SendStart>(a));
  EXPECT_FALSE(has<SendExit>(a));
  job.agentsExit();
  ASSERT_TRUE(job.outcome());
  EXPECT_EQ(job.outcome()->attempts, 2);
  ASSERT_TRUE(job.outcome()->root_cause);
  EXPECT_EQ(job.outcome()->root_cause->attempt, 1);
  EXPECT_EQ(job.outcome()->root_cause->rank, 0);
  EXPECT_EQ(job.outcome()->exit_code, 6);
}

TEST(JobDecisions, ReportsOfAnEarlierAttemptAreIgnored) {
  plan::Plan plan = makePlan(1, 2);
  plan.max_restarts = 1;
  Job job(plan);
  job.runAll();
  job.exit(0, 1);
  job.stopRest({1});
  // Attempt 1 runs; a late report of attempt 0 must not end it.
  EXPECT_TRUE(job.feed(RankExited{0, 0, 1, 9, 0, StoppedBy::kNobody, 99, {}}).empty());
  EXPECT_TRUE(job.feed(NodeIdle{0, 0}).empty());
}

TEST(JobDecisions, NoRestartAfterAUserStop) {
  plan::Plan plan = makePlan(2, 1);
  plan.max_restarts = 2;
  Job job(plan);
  job.runAll();
  auto a = job.feed(StopSignal{SIGINT});
  EXPECT_EQ(said(a), (std::vector<std::string>{
                         "SIGINT received: stopping the job (send it again to kill at once)",
                         "stopped by SIGINT; stopping every rank: sent SIGTERM to 2 rank(s), "
                         "SIGKILL in 30.0s"}));
  EXPECT_TRUE(has<SendStop>(a));
  job.exit(0, 1);  // a rank that dies of the stop with an error of its own
  auto b = job.stopRest({1});
  EXPECT_FALSE(has<SendStart>(b));
  job.agentsExit();
  ASSERT_TRUE(job.outcome());
  EXPECT_EQ(job.outcome()->state, JobState::kStopped);
  EXPECT_EQ(job.outcome()->exit_code, 128 + SIGINT);
  EXPECT_EQ(job.outcome()->reason, "stopped by SIGINT");
}

// An agent told by the final stop to go leaves as soon as its own ranks are gone, while other
// nodes still stop theirs: a goodbye, not a lost node.
TEST(JobDecisions, ANodeToldByTheFinalStopGoesOnItsOwnWhileOthersStillStop) {
  Job job(makePlan(3, 1));
  job.runAll();
  auto stop = job.exit(2, 1);
  ASSERT_EQ(all<SendStop>(stop).size(), 1u);
  EXPECT_EQ(all<SendStop>(stop)[0].exit_code, std::optional<int>(1));
  job.feed(NodeIdle{2, 0});
  auto gone = job.feed(AgentLost{2});
  EXPECT_TRUE(said(gone).empty()) << "it was told to go";
  EXPECT_FALSE(has<SendStop>(gone));
  job.exit(0, 0, SIGTERM, true);
  job.feed(NodeIdle{0, 0});
  EXPECT_FALSE(job.outcome());
  job.exit(1, 0, SIGTERM, true);
  auto end = job.feed(NodeIdle{1, 0});
  EXPECT_FALSE(has<SendExit>(end));
  EXPECT_TRUE(has<Finish>(end)) << "the agents that are left go by themselves; Finish waits";
  ASSERT_TRUE(job.outcome());
  EXPECT_EQ(job.outcome()->reason, "worker/2 on node 2 exited with code 1");
  EXPECT_EQ(job.outcome()->exit_code, 1);
}

// An agent that goes away while its ranks still run is lost, even when it was told to go: the
// job's reason stays the failure that stopped it.
TEST(JobDecisions, AnAgentToldToGoThatVanishesWhileItsRanksRunIsStillLost) {
  Job job(makePlan(2, 1));
  job.runAll();
  job.exit(1, 3);
  auto lost = job.feed(AgentLost{0});
  EXPECT_TRUE(has<SendStop>(lost)) << "the stop again, to whoever is left";
  job.feed(NodeIdle{1, 0});
  job.feed(AgentLost{1});
  ASSERT_TRUE(job.outcome());
  EXPECT_EQ(job.outcome()->exit_code, 3);
  EXPECT_EQ(job.outcome()->reason, "worker/1 on node 1 exited with code 3");
}

// Where the plan names each node's machine (hosts over SSH), the reason and a lost agent name it.
TEST(JobDecisions, ANodeIsNamedWithItsMachine) {
  plan::Plan plan = makePlan(2, 1);
  plan.machines = {"h1", "h2"};
  Job lost(plan);
  lost.runAll();
  bool named = false;
  for (const JobAction& a : lost.feed(AgentLost{1, "no word from it"})) {
    if (const auto* say = std::get_if<Say>(&a)) {
      named |= say->line.find("node 1 (h2)'s agent was lost") != std::string::npos;
    }
  }
  EXPECT_TRUE(named);
  Job exited(plan);
  exited.runAll();
  exited.exit(1, 3);
  exited.feed(AgentLost{0});
  exited.feed(NodeIdle{1, 0});
  exited.feed(AgentLost{1});
  ASSERT_TRUE(exited.outcome());
  EXPECT_EQ(exited.outcome()->reason, "worker/1 on node 1 (h2) exited with code 3");
}

// ---- stops -----------------------------------------------------------------------------------

TEST(JobDecisions, StopDuringStagingEndsStoppedWithoutStarting) {
  Job job(makePlan(2, 1));
  job.connectAll();
  auto a = job.feed(StopSignal{SIGTERM});
  ASSERT_EQ(all<SendStop>(a).size(), 1u);
  EXPECT_EQ(all<SendStop>(a)[0].exit_code, std::optional<int>(128 + SIGTERM))
      << "the agents go once staging is over: nothing has to be waited for";
  job.stageAll();  // staging cannot be interrupted; it ends after the stop
  job.agentsExit();
  EXPECT_FALSE(has<SendStart>(job.log()));
  ASSERT_TRUE(job.outcome());
  EXPECT_EQ(job.outcome()->state, JobState::kStopped);
  EXPECT_EQ(job.outcome()->exit_code, 128 + SIGTERM);
}

TEST(JobDecisions, StopBeforeEveryAgentConnectedEndsAtOnce) {
  Job job(makePlan(2, 1));
  job.feed(JobBegins{});
  job.feed(AgentConnected{0});
  auto a = job.feed(StopSignal{SIGHUP});
  EXPECT_TRUE(has<SendExit>(a));
  EXPECT_FALSE(has<SendStage>(job.log()));
  // The other agent comes too late: it is only told to go.
  auto late = job.feed(AgentConnected{1});
  ASSERT_EQ(all<SendExit>(late).size(), 1u);
  EXPECT_EQ(all<SendExit>(late)[0].node, std::optional<int>(1));
  EXPECT_FALSE(has<SendPlan>(late));
  job.agentsExit();
  ASSERT_TRUE(job.outcome());
  EXPECT_EQ(job.outcome()->state, JobState::kStopped);
  EXPECT_EQ(job.outcome()->exit_code, 128 + SIGHUP);
}

TEST(JobDecisions, SecondSignalKillsAtOnce) {
  Job job(makePlan(2, 1));
  job.runAll();
  auto first = job.feed(StopSignal{SIGINT});
  ASSERT_EQ(all<SendStop>(first).size(), 1u);
  EXPECT_EQ(all<SendStop>(first)[0].grace_ms, 30000);
  auto second = job.feed(StopSignal{SIGINT});
  EXPECT_EQ(said(second), std::vector<std::string>{"second signal: killing every rank now"});
  ASSERT_EQ(all<SendStop>(second).size(), 1u);
  EXPECT_EQ(all<SendStop>(second)[0].grace_ms, 0);
  job.stopRest({0, 1});
  job.agentsExit();
  ASSERT_TRUE(job.outcome());
  EXPECT_EQ(job.outcome()->exit_code, 128 + SIGINT);
}

TEST(JobDecisions, SignalsAfterTheEndAreIgnored) {
  Job job(makePlan(1, 1));
  job.runAll();
  job.exit(0, 0);
  job.stopRest({});
  EXPECT_TRUE(job.feed(StopSignal{SIGTERM}).empty());
  job.agentsExit();
  EXPECT_EQ(job.outcome()->state, JobState::kSucceeded);
}

// ---- what goes wrong around the ranks --------------------------------------------------------

TEST(JobDecisions, StagingFailureFailsWithoutStartingOrRestarting) {
  plan::Plan plan = makePlan(2, 1);
  plan.max_restarts = 3;
  Job job(plan);
  job.connectAll();
  job.feed(NodeStaged{0, 0, 0, 0.0});
  auto a = job.feed(StagingFailed{1, "copy 'a': No such file or directory"});
  auto events = all<WriteEvent>(a);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events[0].event.kind, job::EventKind::kStageFailed);
  EXPECT_EQ(said(a), std::vector<std::string>{
                         "staging on node 1 failed: copy 'a': No such file or directory"});
  EXPECT_TRUE(has<SendExit>(a));
  job.agentsExit();
  EXPECT_FALSE(has<SendStart>(job.log()));
  ASSERT_TRUE(job.outcome());
  EXPECT_EQ(job.outcome()->state, JobState::kFailed);
  EXPECT_EQ(job.outcome()->exit_code, 1);
}

TEST(JobDecisions, LostAgentFailsWithoutRestart) {
  plan::Plan plan = makePlan(2, 1);
  plan.max_restarts = 2;
  Job job(plan);
  job.runAll();
  auto a = job.feed(AgentLost{1});
  EXPECT_EQ(said(a), std::vector<std::string>{"node 1's agent was lost; stopping every rank: "
                                              "sent SIGTERM to 1 rank(s), SIGKILL in 30.0s"});
  ASSERT_EQ(all<SendStop>(a).size(), 1u);
  EXPECT_EQ(all<SendStop>(a)[0].exit_code, std::optional<int>(1)) << "no restart without a node";
  job.exit(0, 0, SIGTERM, true);
  auto b = job.feed(NodeIdle{0, 0});
  EXPECT_FALSE(has<SendStart>(b));
  EXPECT_TRUE(has<Finish>(b));
  ASSERT_TRUE(job.outcome());
  EXPECT_EQ(job.outcome()->state, JobState::kFailed);
  EXPECT_EQ(job.outcome()->exit_code, 1);
  EXPECT_EQ(job.outcome()->reason, "node 1's agent was lost");
}

TEST(JobDecisions, AnAgentLostToSilenceIsNamedWithWhy) {
  plan::Plan plan = makePlan(2, 1);
  Job job(plan);
  job.runAll();
  auto a = job.feed(AgentLost{1, "no word from it in 5s"});
  EXPECT_EQ(said(a), std::vector<std::string>{
                         "node 1's agent was lost (no word from it in 5s); stopping every rank: "
                         "sent SIGTERM to 1 rank(s), SIGKILL in 30.0s"});
  job.exit(0, 0, SIGTERM, true);
  job.feed(NodeIdle{0, 0});
  job.feed(AgentLost{0});
  ASSERT_TRUE(job.outcome());
  EXPECT_EQ(job.outcome()->state, JobState::kFailed);
  EXPECT_EQ(job.outcome()->reason, "node 1's agent was lost (no word from it in 5s)");
}

TEST(JobDecisions, MaxRuntimeEndsWith124) {
  plan::Plan plan = makePlan(2, 1);
  plan.max_runtime_ms = 300;
  plan.max_restarts = 2;
  Job job(plan);
  job.runAll();
  auto a = job.feed(MaxRuntimeOver{}, 300ms);
  EXPECT_EQ(said(a), std::vector<std::string>{"max_runtime 0.3s exceeded; stopping every rank: "
                                              "sent SIGTERM to 2 rank(s), SIGKILL in 30.0s"});
  EXPECT_TRUE(has<SendStop>(a));
  auto b = job.stopRest({0, 1});
  EXPECT_FALSE(has<SendStart>(b)) << "a job out of time is not restarted";
  job.agentsExit();
  ASSERT_TRUE(job.outcome());
  EXPECT_EQ(job.outcome()->state, JobState::kFailed);
  EXPECT_EQ(job.outcome()->exit_code, 124);
}

// policy.stop_signal: every stop that gives notice sends it (a user's stop, max_runtime, a
// failure elsewhere, a hang), and the "stopping" event says what the ranks got.
TEST(JobDecisions, EveryGracefulStopSendsThePlansStopSignalAndSaysSo) {
  plan::Plan plan = makePlan(2, 2);
  plan.stop_signal = SIGUSR1;
  plan.max_runtime_ms = 10000;
  plan.hang_timeout_ms = 5000;
  auto stopOf = [](const std::vector<JobAction>& a) {
    EXPECT_EQ(all<SendStop>(a).size(), 1u);
    return all<SendStop>(a).empty() ? SendStop{-1, -1} : all<SendStop>(a)[0];
  };
  auto stoppingReason = [](const std::vector<JobAction>& a) {
    for (const WriteEvent& w : all<WriteEvent>(a)) {
      if (w.event.kind == job::EventKind::kState && w.event.state == "stopping") {
        return w.event.reason;
      }
    }
    return std::string("(none)");
  };
  {
    Job job(plan);
    job.runAll();
    auto a = job.feed(MaxRuntimeOver{}, 10s);
    EXPECT_EQ(stopOf(a).signal, SIGUSR1);
    EXPECT_EQ(stopOf(a).grace_ms, 30000);
    EXPECT_EQ(stoppingReason(a),
              "max_runtime 10.0s exceeded; sent SIGUSR1 to 4 rank(s), SIGKILL in 30.0s");
    EXPECT_EQ(said(a), std::vector<std::string>{"max_runtime 10.0s exceeded; stopping every "
                                                "rank: sent SIGUSR1 to 4 rank(s), SIGKILL in "
                                                "30.0s"});
    job.stopRest({0, 1, 2, 3});
    job.agentsExit();
    ASSERT_TRUE(job.outcome());
    EXPECT_EQ(job.outcome()->reason, "max_runtime 10.0s exceeded") << "the reason stays short";
  }
  {
    Job job(plan);
    job.runAll();
    auto a = job.feed(StopSignal{SIGTERM});
    EXPECT_EQ(stopOf(a).signal, SIGUSR1) << "what the ranks get is the job's, not what came";
    EXPECT_EQ(stoppingReason(a), "stopped by SIGTERM; sent SIGUSR1 to 4 rank(s), SIGKILL in 30.0s");
    auto again = job.feed(StopSignal{SIGTERM});
    EXPECT_EQ(stopOf(again).grace_ms, 0);
    EXPECT_EQ(stopOf(again).signal, SIGKILL);
  }
  {
    Job job(plan);
    job.runAll();
    auto a = job.exit(2, 1);
    EXPECT_EQ(stopOf(a).signal, SIGUSR1);
    EXPECT_EQ(stoppingReason(a),
              "worker/2 on node 1 exited with code 1; sent SIGUSR1 to 3 rank(s), SIGKILL in 30.0s")
        << "the rank that failed is not sent anything";
  }
  {
    Job job(plan);
    job.runAll();
    job.feed(HangTimeOver{}, 5s);
    EXPECT_EQ(stopOf(job.feed(HangDiagnosed{"", ""})).signal, SIGUSR1);
  }
  {
    plan.grace_period_ms = 0;
    Job job(plan);
    job.runAll();
    EXPECT_EQ(stoppingReason(job.feed(MaxRuntimeOver{}, 10s)),
              "max_runtime 10.0s exceeded; sent SIGUSR1 to 4 rank(s), SIGKILL at once");
  }
}

// A cluster preempting (or cancelling) the job signals the agents, not the coordinator: the
// node says so, and every node's ranks get the notice; a stop is not restarted.
TEST(JobDecisions, ANodeSignalledFromOutsideStopsEveryNodeAndIsNotRestarted) {
  plan::Plan plan = makePlan(2, 1);
  plan.max_restarts = 3;
  plan.stop_signal = SIGUSR2;
  Job job(plan);
  job.runAll();
  auto a = job.feed(NodeSignalled{1, SIGTERM});
  ASSERT_EQ(all<SendStop>(a).size(), 1u);
  EXPECT_EQ(all<SendStop>(a)[0].signal, SIGUSR2);
  EXPECT_EQ(states(a), std::vector<std::string>{"stopping"});
  EXPECT_TRUE(saidSomething(a,
                            "node 1's agent got SIGTERM (its cluster preempts or cancels the "
                            "job, or its machine shuts down); stopping every rank: sent "
                            "SIGUSR2 to 2 rank(s)"))
      << said(a)[0];
  EXPECT_TRUE(job.feed(NodeSignalled{0, SIGTERM}).empty()) << "said once";
  auto b = job.stopRest({0, 1});
  EXPECT_FALSE(has<SendStart>(b));
  job.agentsExit();
  ASSERT_TRUE(job.outcome());
  EXPECT_EQ(job.outcome()->state, JobState::kStopped);
  EXPECT_EQ(job.outcome()->exit_code, 128 + SIGTERM);
}

// ---- hangs -----------------------------------------------------------------------------------

std::optional<Millis> hangTimer(const std::vector<JobAction>& actions) {
  std::optional<Millis> armed;
  for (const JobAction& a : actions) {
    if (auto* t = std::get_if<ArmTimer>(&a); t && t->timer == TimerKind::kHang) armed = t->after;
    if (auto* t = std::get_if<DisarmTimer>(&a); t && t->timer == TimerKind::kHang)
      armed = Millis(0);
  }
  return armed;
}

TEST(JobDecisions, AJobWithoutProgressForHangTimeoutHasItsStacksTakenThenEndsWith124) {
  plan::Plan plan = makePlan(2, 1);
  plan.hang_timeout_ms = 10000;
  Job job(plan);
  job.connectAll();
  job.stageAll();
  EXPECT_EQ(hangTimer(job.log()), Millis(10000)) << "armed when the attempt starts";
  job.startAll();
  EXPECT_EQ(hangTimer(job.feed(RanksProgressed{0, 0, {0}}, 3s)), Millis(10000)) << "re-armed";
  EXPECT_FALSE(hangTimer(job.feed(RanksProgressed{0, 0, {}}, 1s))) << "no progress, no change";
  EXPECT_FALSE(hangTimer(job.feed(RanksProgressed{0, 1, {0}}))) << "another attempt's";
  auto a = job.feed(HangTimeOver{}, 10s);
  ASSERT_EQ(all<CollectStacks>(a).size(), 1u);
  EXPECT_FALSE(has<SendStop>(a)) << "the stacks first, while every rank still hangs";
  EXPECT_FALSE(has<CollectStacks>(job.feed(HangTimeOver{}))) << "once";
  auto b = job.feed(HangDiagnosed{"worker/1 on node 1 is stopped", "stacks...\n"});
  EXPECT_EQ(said(b), std::vector<std::string>{"no rank made progress for hang_timeout 10.0s: "
                                              "worker/1 on node 1 is stopped; stopping every rank: "
                                              "sent SIGTERM to 2 rank(s), SIGKILL in 30.0s"});
  EXPECT_TRUE(has<SendStop>(b));
  job.stopRest({0, 1});
  job.agentsExit();
  ASSERT_TRUE(job.outcome());
  EXPECT_EQ(job.outcome()->state, JobState::kFailed);
  EXPECT_EQ(job.outcome()->exit_code, 124);
  EXPECT_EQ(job.outcome()->diagnosis, "stacks...\n");
}

// Until the attempt's first progress, startup_timeout is the limit; not "every rank once",
// since many scripts print on rank 0 only.
TEST(JobDecisions, StartupTimeoutHoldsUntilTheFirstProgressThenHangTimeout) {
  plan::Plan plan = makePlan(3, 1);
  plan.hang_timeout_ms = 10000;
  plan.startup_timeout_ms = 60000;
  Job job(plan);
  job.runAll();
  EXPECT_EQ(hangTimer(job.log()), Millis(60000));
  auto a = job.feed(HangTimeOver{}, 60s);
  ASSERT_EQ(all<CollectStacks>(a).size(), 1u);
  auto b = job.feed(HangDiagnosed{"worker/2 on node 2 is elsewhere", ""});
  EXPECT_TRUE(saidSomething(b, "no rank made progress within startup_timeout 1m00s of the start: "
                               "worker/2 on node 2 is elsewhere; stopping every rank"))
      << said(b)[0];

  Job started(plan);
  started.runAll();
  EXPECT_EQ(hangTimer(started.feed(RanksProgressed{0, 0, {0}}, 20s)), Millis(10000))
      << "rank 0 printed: hang_timeout from here, whether or not the others ever print";
  EXPECT_EQ(hangTimer(started.feed(RanksProgressed{0, 0, {0}}, 5s)), Millis(10000));
  EXPECT_FALSE(hangTimer(started.feed(RanksProgressed{0, 0, {7}}, 1s))) << "no such rank";
}

TEST(JobDecisions, AHangRestartsWithinTheBudgetAndAFailureMeanwhileWins) {
  plan::Plan plan = makePlan(2, 1);
  plan.hang_timeout_ms = 5000;
  plan.max_restarts = 1;
  Job job(plan);
  job.runAll();
  job.feed(HangTimeOver{}, 5s);
  job.feed(HangDiagnosed{"", ""});
  auto a = job.stopRest({0, 1});
  EXPECT_EQ(states(a), (std::vector<std::string>{"restarting", "running"}));
  EXPECT_EQ(hangTimer(a), Millis(5000)) << "the new attempt has its own timer";
  job.nextAttempt();
  job.startAll();
  job.feed(HangTimeOver{}, 5s);
  job.exit(1, 7);  // fails while its stacks are taken
  EXPECT_FALSE(saidSomething(job.feed(HangDiagnosed{"late", ""}), "late"))
      << "the failure already ends the attempt";
  job.stopRest({0});
  job.agentsExit();
  ASSERT_TRUE(job.outcome());
  EXPECT_EQ(job.outcome()->exit_code, 7) << "the rank's failure is the cause, not the hang";
  EXPECT_EQ(job.outcome()->diagnosis, "");
}

TEST(JobDecisions, ConnectDeadlineNamesTheNodesThatDidNotConnect) {
  Job job(makePlan(3, 1), Millis(2000));
  job.feed(JobBegins{});
  job.feed(AgentConnected{0});
  auto a = job.feed(ConnectDeadlineOver{}, 2s);
  EXPECT_TRUE(has<SendExit>(a));
  job.feed(AgentLost{0});
  ASSERT_TRUE(job.outcome());
  EXPECT_EQ(job.outcome()->exit_code, 1);
  EXPECT_EQ(job.outcome()->reason, "the agent(s) of node(s) 1, 2 did not connect within 2.0s");
}

TEST(JobDecisions, ConnectDeadlineAfterEveryAgentConnectedChangesNothing) {
  Job job(makePlan(2, 1));
  job.connectAll();
  EXPECT_TRUE(job.feed(ConnectDeadlineOver{}).empty());
}

TEST(JobDecisions, AgentThatCannotBeStartedFailsTheJob) {
  Job job(makePlan(2, 1));
  job.feed(JobBegins{});
  auto a = job.feed(AgentLaunchFailed{1, "fork: Resource temporarily unavailable"});
  EXPECT_TRUE(has<Finish>(a)) << "no agent is connected: nothing to wait for";
  EXPECT_FALSE(has<ReapAgents>(a)) << "Finish reaps them";
  ASSERT_TRUE(job.outcome());
  EXPECT_EQ(job.outcome()->exit_code, 1);
  EXPECT_EQ(job.outcome()->reason,
            "could not start node 1's agent: fork: Resource temporarily unavailable");
}

TEST(JobDecisions, TimeInAClustersQueueIsNotTimeToConnect) {
  Job job(makePlan(2, 1));
  job.feed(JobBegins{});
  auto queued = job.feed(LauncherQueued{"Slurm job 7 waits for free nodes"});
  ASSERT_EQ(all<DisarmTimer>(queued).size(), 1u);
  EXPECT_EQ(all<DisarmTimer>(queued)[0].timer, TimerKind::kConnect);
  EXPECT_EQ(states(queued), std::vector<std::string>{"starting"});
  auto allocated = job.feed(LauncherQueued{""});
  ASSERT_EQ(all<ArmTimer>(allocated).size(), 1u);
  EXPECT_EQ(all<ArmTimer>(allocated)[0].timer, TimerKind::kConnect);
  EXPECT_EQ(all<ArmTimer>(allocated)[0].after, all<ArmTimer>(job.log())[0].after)
      << "the whole connect timeout, from the allocation on";
  // A stop while queued ends the job at once: nothing runs yet.
  auto stop = job.feed(StopSignal{SIGINT});
  EXPECT_TRUE(has<Finish>(stop));
  ASSERT_TRUE(job.outcome());
  EXPECT_EQ(job.outcome()->state, JobState::kStopped);
}

TEST(JobDecisions, ABatchJobThatEndsBeforeItsAgentsDialledInFailsTheJob) {
  Job job(makePlan(2, 1));
  job.feed(JobBegins{});
  job.feed(AgentConnected{0});
  job.feed(AgentLaunchFailed{-1, "Slurm job 7 ended (FAILED) before every agent dialled in"});
  job.agentsExit();
  ASSERT_TRUE(job.outcome());
  EXPECT_EQ(job.outcome()->reason,
            "could not start the agents: Slurm job 7 ended (FAILED) before every agent dialled in");
}

// Once every node is idle and nothing is to be copied, the outcome is final: the record is
// written while the agents leave, and Finish (which reaps them) comes with it.
TEST(JobDecisions, WithNothingToCopyTheRecordIsWrittenWhileTheAgentsLeave) {
  Job job(makePlan(2, 1));
  job.runAll();
  job.exit(0, 0);
  job.exit(1, 0);
  auto a = job.stopRest({});
  EXPECT_FALSE(has<ArmTimer>(a)) << "no exit deadline: Finish gives the agents theirs";
  ASSERT_EQ(all<WriteResult>(a).size(), 1u);
  EXPECT_EQ(all<WriteResult>(a)[0].outcome.state, JobState::kSucceeded);
  EXPECT_EQ(states(a), std::vector<std::string>{"succeeded"});
  ASSERT_TRUE(has<Finish>(a));
  EXPECT_TRUE(job.agentsExit().empty()) << "their going changes nothing";
}

// Agents that must copy outputs have an exit deadline; those still there at its end are reaped.
TEST(JobDecisions, AgentsThatDoNotExitInTimeAreReaped) {
  plan::Plan plan = makePlan(2, 1);
  plan.outputs = {{"/job/output", "/store/m", false}};
  Job job(plan);
  job.runAll();
  job.exit(0, 0);
  job.exit(1, 0);
  auto a = job.stopRest({});
  ASSERT_EQ(all<ArmTimer>(a).size(), 1u);
  EXPECT_EQ(all<ArmTimer>(a)[0].timer, TimerKind::kExit);
  job.feed(AgentLost{0});  // node 1's agent stays
  EXPECT_FALSE(job.outcome());
  auto b = job.feed(ExitDeadlineOver{}, 10s);
  EXPECT_TRUE(has<ReapAgents>(b));
  EXPECT_TRUE(has<CopyOutput>(b)) << "once the agents are gone";
  EXPECT_FALSE(job.outcome());
  job.feed(OutputCopied{0, 1, 1});
  ASSERT_TRUE(job.outcome());
  EXPECT_EQ(job.outcome()->state, JobState::kSucceeded);
}

// ---- outputs ---------------------------------------------------------------------------------

TEST(JobDecisions, OutputsAreCopiedOneAfterAnotherOnceTheAgentsAreGone) {
  plan::Plan plan = makePlan(1, 1);
  plan.outputs = {{"/job/output/a", "/store/a", false}, {"/job/output/b", "/store/b", false}};
  Job job(plan);
  job.runAll();
  job.exit(0, 0);
  job.stopRest({});
  auto a = job.agentsExit();
  ASSERT_EQ(all<CopyOutput>(a).size(), 1u);
  EXPECT_EQ(all<CopyOutput>(a)[0].index, 0u);
  EXPECT_FALSE(job.outcome());
  auto b = job.feed(OutputCopied{0, 2, 1 << 20});
  EXPECT_EQ(said(b), std::vector<std::string>{"output /job/output/a -> /store/a (2 file(s), "
                                              "1.0 MiB)"});
  ASSERT_EQ(all<CopyOutput>(b).size(), 1u);
  EXPECT_EQ(all<CopyOutput>(b)[0].index, 1u);
  job.feed(OutputCopied{1, 1, 10});
  ASSERT_TRUE(job.outcome());
  EXPECT_EQ(job.outcome()->state, JobState::kSucceeded);
  ASSERT_EQ(job.outcome()->outputs.size(), 2u);
  EXPECT_EQ(job.outcome()->outputs[1].target, "/store/b");
}

TEST(JobDecisions, FailedJobCopiesOnlyTheAlwaysOutputs) {
  plan::Plan plan = makePlan(1, 1);
  plan.outputs = {{"/job/output/model", "/store/m", false}, {"/job/logs", "/store/l", true}};
  Job job(plan);
  job.runAll();
  job.exit(0, 1);
  job.stopRest({});
  auto a = job.agentsExit();
  ASSERT_EQ(all<CopyOutput>(a).size(), 1u);
  EXPECT_EQ(all<CopyOutput>(a)[0].index, 1u);
}

TEST(JobDecisions, OutputCopyFailureFailsASucceededJob) {
  plan::Plan plan = makePlan(1, 1);
  plan.outputs = {{"/job/output", "/store/m", false}};
  Job job(plan);
  job.runAll();
  job.exit(0, 0);
  job.stopRest({});
  job.agentsExit();
  auto a = job.feed(OutputCopyFailed{0, "No space left on device"});
  EXPECT_EQ(said(a), std::vector<std::string>{
                         "copying output '/job/output' failed: No space left on device"});
  ASSERT_TRUE(job.outcome());
  EXPECT_EQ(job.outcome()->state, JobState::kFailed);
  EXPECT_EQ(job.outcome()->exit_code, 1);
  EXPECT_EQ(job.outcome()->outputs[0].error, "No space left on device");
}

// A node without the coordinator's filesystem has the only copy of what its ranks saved.
TEST(JobDecisions, ANodeWithAJobDirectoryOfItsOwnCopiesItsOutputsBeforeItGoes) {
  plan::Plan plan = makePlan(3, 1);
  plan.outputs = {{"/job/output", "/store/m", false}};
  Job job(plan);
  job.connectAll();
  job.feed(NodeStaged{0, 0, 0, 0.0});
  job.feed(NodeStaged{1, 0, 0, 0.0, /*own_dir=*/true});
  job.feed(NodeStaged{2, 0, 0, 0.0, /*own_dir=*/true});
  job.startAll();
  job.exit(0, 0);
  job.exit(1, 0);
  auto stop = job.exit(2, 0);
  ASSERT_EQ(all<SendStop>(stop).size(), 1u);
  EXPECT_EQ(all<SendStop>(stop)[0].exit_code, std::nullopt) << "they have outputs to copy first";
  auto a = job.stopRest({});
  auto exits = all<SendExit>(a);
  ASSERT_EQ(exits.size(), 3u);
  for (const SendExit& e : exits) {
    ASSERT_TRUE(e.node);
    EXPECT_EQ(e.outputs, *e.node == 0 ? std::vector<size_t>{} : std::vector<size_t>{0}) << *e.node;
  }
  EXPECT_FALSE(has<ArmTimer>(a)) << "no exit deadline while nodes copy";
  job.feed(NodeOutputsCopied{1, {{"", "", 2, 100, ""}}});
  auto b = job.feed(NodeOutputsCopied{2, {{"", "", 3, 50, ""}}});
  ASSERT_EQ(all<ArmTimer>(b).size(), 1u);
  EXPECT_EQ(all<ArmTimer>(b)[0].timer, TimerKind::kExit);
  auto c = job.agentsExit();
  ASSERT_EQ(all<CopyOutput>(c).size(), 1u);  // node 0's, from the shared job directory
  auto d = job.feed(OutputCopied{0, 1, 10});
  EXPECT_TRUE(saidSomething(d, "output /job/output -> /store/m (6 file(s),")) << said(d)[0];
  ASSERT_TRUE(job.outcome());
  EXPECT_EQ(job.outcome()->state, JobState::kSucceeded);
  EXPECT_EQ(job.outcome()->outputs[0].files, 6);
  EXPECT_EQ(job.outcome()->outputs[0].bytes, 160);
}

TEST(JobDecisions, ANodesFailedCopyOrItsLossFailsTheJobAndNamesTheNode) {
  for (bool lost : {false, true}) {
    plan::Plan plan = makePlan(2, 1);
    plan.outputs = {{"/job/output", "/store/m", false}};
    Job job(plan);
    job.connectAll();
    job.feed(NodeStaged{0, 0, 0, 0.0});
    job.feed(NodeStaged{1, 0, 0, 0.0, true});
    job.startAll();
    job.exit(0, 0);
    job.exit(1, 0);
    job.stopRest({});
    if (lost) {
      job.feed(AgentLost{1});
    } else {
      job.feed(NodeOutputsCopied{1, {{"", "", 0, 0, "No space left on device"}}});
      job.feed(AgentLost{1});
    }
    job.feed(AgentLost{0});
    job.feed(OutputCopied{0, 1, 10});
    ASSERT_TRUE(job.outcome());
    EXPECT_EQ(job.outcome()->state, JobState::kFailed);
    EXPECT_EQ(job.outcome()->outputs[0].error,
              lost ? "node 1: its agent was lost before it copied its outputs"
                   : "node 1: No space left on device");
  }
}

// ---- the job's record ------------------------------------------------------------------------

TEST(JobDecisions, RecordWriteFailureNeverReportsSuccess) {
  Job job(makePlan(1, 1));
  job.runAll();
  job.exit(0, 0);
  auto end = job.stopRest({});
  ASSERT_EQ(all<WriteResult>(end).size(), 1u);
  ASSERT_EQ(job.outcome()->state, JobState::kSucceeded);
  // The shell could not write result.json: the answer is taken back.
  auto a = job.feed(RecordWriteFailed{RecordFile::kResult, "result.json",
                                      "No space left on device"});
  const std::string why = "could not write the job's record 'result.json': No space left on device";
  auto says = all<Say>(a);
  ASSERT_EQ(says.size(), 1u);
  EXPECT_EQ(says[0].line, why);
  EXPECT_TRUE(says[0].always) << "said even when progress lines are off";
  EXPECT_FALSE(has<WriteResult>(a)) << "the file that failed is not tried again";
  ASSERT_EQ(all<Finish>(a).size(), 1u);
  const JobOutcome o = all<Finish>(a)[0].outcome;
  EXPECT_EQ(o.state, JobState::kFailed);
  EXPECT_EQ(o.exit_code, 1);
  EXPECT_EQ(o.reason, why);
}

TEST(JobDecisions, FinalEventWriteFailureRewritesTheResultAsFailed) {
  Job job(makePlan(1, 1));
  job.runAll();
  job.exit(0, 0);
  job.stopRest({});
  job.agentsExit();
  auto a = job.feed(RecordWriteFailed{RecordFile::kEvents, "events.jsonl", "Disk quota exceeded"});
  ASSERT_EQ(all<WriteResult>(a).size(), 1u);
  EXPECT_EQ(all<WriteResult>(a)[0].outcome.state, JobState::kFailed);
  EXPECT_EQ(all<WriteResult>(a)[0].outcome.reason,
            "could not write the job's record 'events.jsonl': Disk quota exceeded");
  EXPECT_EQ(job.outcome()->exit_code, 1);
  // The same file failing again (the rewritten final event) is said once and changes nothing.
  EXPECT_TRUE(job.feed(RecordWriteFailed{RecordFile::kEvents, "events.jsonl", "x"}).empty());
}

TEST(JobDecisions, EventsWriteFailureWhileRunningStopsTheJobWithoutRestart) {
  plan::Plan plan = makePlan(2, 1);
  plan.max_restarts = 2;
  Job job(plan);
  job.runAll();
  auto a = job.feed(RecordWriteFailed{RecordFile::kEvents, "events.jsonl",
                                      "No space left on device"});
  auto says = all<Say>(a);
  ASSERT_EQ(says.size(), 1u);
  EXPECT_EQ(says[0].line, "could not write the job's record 'events.jsonl': No space left on "
                          "device; stopping every rank: sent SIGTERM to 2 rank(s), SIGKILL in "
                          "30.0s");
  EXPECT_TRUE(says[0].always);
  EXPECT_TRUE(has<SendStop>(a));
  auto b = job.stopRest({0, 1});
  EXPECT_FALSE(has<SendStart>(b));
  job.agentsExit();
  ASSERT_TRUE(job.outcome());
  EXPECT_EQ(job.outcome()->state, JobState::kFailed);
  EXPECT_EQ(job.outcome()->exit_code, 1);
}

TEST(JobDecisions, RecordWriteFailureWhileStoppingASucceededJobFailsIt) {
  Job job(makePlan(1, 1, /*ps=*/1));
  job.runAll();
  job.exit(1, 0);  // the key rank: success, the ps is being stopped
  auto a = job.feed(RecordWriteFailed{RecordFile::kEvents, "events.jsonl", "Input/output error"});
  EXPECT_TRUE(all<Say>(a)[0].always);
  job.stopRest({0});
  job.agentsExit();
  ASSERT_TRUE(job.outcome());
  EXPECT_EQ(job.outcome()->state, JobState::kFailed);
  EXPECT_EQ(job.outcome()->reason,
            "could not write the job's record 'events.jsonl': Input/output error");
}

TEST(JobDecisions, RecordWriteFailureOfAFailedJobKeepsItsRootCause) {
  Job job(makePlan(1, 2));
  job.runAll();
  job.exit(1, 4);
  job.stopRest({0});
  job.agentsExit();
  ASSERT_EQ(job.outcome()->exit_code, 4);
  auto a = job.feed(RecordWriteFailed{RecordFile::kResult, "result.json",
                                      "No space left on device"});
  EXPECT_EQ(said(a), std::vector<std::string>{
                         "could not write the job's record 'result.json': No space left on "
                         "device"});
  EXPECT_FALSE(has<Finish>(a)) << "the answer already given stands";
}

TEST(JobDecisions, NothingIsDecidedAfterTheEnd) {
  Job job(makePlan(1, 1));
  job.runAll();
  job.exit(0, 0);
  job.stopRest({});
  job.agentsExit();
  ASSERT_TRUE(job.decisions().finished());
  EXPECT_TRUE(job.feed(StopSignal{SIGINT}).empty());
  EXPECT_TRUE(job.feed(AgentConnected{0}).empty());
  EXPECT_TRUE(job.feed(MaxRuntimeOver{}).empty());
}

}  // namespace
}  // namespace cohort::agent

// ---- debug: a rank that waits for a debugger, or has one, holds the job's timeouts ----------

namespace cohort::agent {
namespace {

std::vector<JobAction> debugged(Job& job, int rank, const std::string& state,
                                const std::string& reason = "start", int64_t time_ns = 0) {
  return job.feed(RankDebugged{0, job.attempt(), rank, state, reason, "train.py:3", time_ns});
}

plan::Plan debugPlan(int ranks) {
  plan::Plan plan = makePlan(1, ranks);
  for (plan::RankPlan& r : plan.nodes[0].ranks) {
    r.env.emplace_back("COHORT_DEBUG_LISTEN", "127.0.0.1:" + std::to_string(41000 + r.rank));
  }
  return plan;
}

TEST(JobDecisionsDebug, AWaitingRankIsSaidWithWhereToAttachAndRecorded) {
  Job job(debugPlan(2));
  job.runAll();
  auto a = debugged(job, 1, "waiting");
  EXPECT_TRUE(saidSomething(a,
                            "worker/1 on node 0 is waiting for a debugger at 127.0.0.1:41001 "
                            "(train.py:3)"));
  EXPECT_TRUE(saidSomething(a, "max_runtime, hang detection and fail-fast hold"));
  bool recorded = false;
  for (const WriteEvent& w : all<WriteEvent>(a)) {
    if (w.event.kind != job::EventKind::kDebug) continue;
    recorded = true;
    EXPECT_EQ(w.event.state, "waiting");
    EXPECT_EQ(w.event.address, "127.0.0.1:41001");
    EXPECT_EQ(w.event.name, "worker/1");
  }
  EXPECT_TRUE(recorded);
}

TEST(JobDecisionsDebug, MaxRuntimeWaitsForTheDebuggerToDetachThenEndsTheJob) {
  plan::Plan plan = debugPlan(2);
  plan.max_runtime_ms = 1000;
  Job job(plan);
  job.runAll();
  debugged(job, 1, "attached");
  auto over = job.feed(MaxRuntimeOver{}, 2s);
  EXPECT_FALSE(has<SendStop>(over)) << "a rank at a breakpoint is not killed";
  EXPECT_TRUE(saidSomething(over, "max_runtime 1.0s reached while worker/1 is being debugged"));
  auto detached = debugged(job, 1, "running");
  EXPECT_TRUE(has<SendStop>(detached));
  EXPECT_TRUE(saidSomething(detached, "apply again"));
  job.stopRest({0, 1});
  job.agentsExit();
  ASSERT_TRUE(job.outcome());
  EXPECT_EQ(job.outcome()->exit_code, 124);
}

// A rank that says it is being debugged for ever (its own code writes that) holds max_runtime
// for debug.wait_limit more, then the job stops anyway.
TEST(JobDecisionsDebug, MaxRuntimeIsHeldForTheWaitLimitAtMost) {
  plan::Plan plan = debugPlan(2);
  plan.max_runtime_ms = 1000;
  plan.debug_wait_limit_ms = 60000;
  Job job(plan);
  job.runAll();
  debugged(job, 1, "attached");
  auto over = job.feed(MaxRuntimeOver{}, 2s);
  EXPECT_FALSE(has<SendStop>(over));
  EXPECT_TRUE(saidSomething(over, "or in 1m00s (debug.wait_limit)")) << said(over)[0];
  bool armed = false;
  for (const ArmTimer& t : all<ArmTimer>(over)) {
    armed |= t.timer == TimerKind::kRuntime && t.after == Millis(60000);
  }
  EXPECT_TRUE(armed);
  auto again = job.feed(MaxRuntimeOver{}, 62s);
  EXPECT_TRUE(has<SendStop>(again)) << "the rank's word does not hold the job past the limit";
  job.stopRest({0, 1});
  job.agentsExit();
  ASSERT_TRUE(job.outcome());
  EXPECT_EQ(job.outcome()->exit_code, 124);
  EXPECT_NE(job.outcome()->reason.find("debug.wait_limit 1m00s exceeded"), std::string::npos)
      << job.outcome()->reason;
}

TEST(JobDecisionsDebug, AFailureElsewhereIsHeldUntilNoRankIsDebuggedThenIsTheRootCause) {
  Job job(debugPlan(3));
  job.runAll();
  debugged(job, 1, "waiting");
  auto failed = job.exit(0, 3);
  EXPECT_FALSE(has<SendStop>(failed)) << "the paused rank is held, not killed";
  EXPECT_TRUE(saidSomething(failed, "held while worker/1 is being debugged"));
  debugged(job, 1, "attached");
  auto gone = debugged(job, 1, "running");
  EXPECT_TRUE(has<SendStop>(gone));
  job.stopRest({1, 2});
  job.agentsExit();
  ASSERT_TRUE(job.outcome());
  ASSERT_TRUE(job.outcome()->root_cause);
  EXPECT_EQ(job.outcome()->root_cause->rank, 0);
  EXPECT_EQ(job.outcome()->exit_code, 3);
  EXPECT_EQ(job.outcome()->root_cause->while_debugged, std::vector<std::string>{"worker/1"});
}

// The first failure is the root cause, and a collective that timed out while a peer was paused
// says so: the paused rank held it up, the failing rank is not at fault.
TEST(JobDecisionsDebug, APeerThatTimedOutWhileARankWasPausedIsToldWhy) {
  RankExit peer;
  peer.name = "worker/0";
  peer.code = 1;
  peer.tail = {
      "RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] "
      "Timed out waiting 1800000ms for recv operation to complete"};
  EXPECT_EQ(hintFor(peer).find("paused"), std::string::npos) << "no rank was paused";
  peer.while_debugged = {"worker/1"};
  EXPECT_NE(hintFor(peer).find("it failed while worker/1 was paused under a debugger"),
            std::string::npos)
      << hintFor(peer);
  EXPECT_NE(formatRootCause(peer, {peer}).find("raise init_process_group's timeout"),
            std::string::npos);
  peer.tail = {"ModuleNotFoundError: No module named 'x'"};
  EXPECT_EQ(hintFor(peer).find("paused"), std::string::npos) << "a failure of its own";
}

TEST(JobDecisionsDebug, APostMortemRankIsTheRootCauseNotThePeersItHeldUp) {
  Job job(debugPlan(3));
  job.runAll();
  debugged(job, 2, "waiting", "exception", 5000);
  // Its peers time out in their collective while it sits at its exception.
  job.exit(0, 1, 0, false, 9000);
  job.exit(1, 1, 0, false, 9100);
  auto ended = job.exit(2, 1, 0, false, 20000);  // released: it ends with its exception
  EXPECT_TRUE(has<SendStop>(ended));
  job.stopRest({});
  job.agentsExit();
  ASSERT_TRUE(job.outcome());
  ASSERT_TRUE(job.outcome()->root_cause);
  EXPECT_EQ(job.outcome()->root_cause->rank, 2);
}

TEST(JobDecisionsDebug, NoHangWhileARankIsDebuggedAndTheHangTimerStartsAgainAfter) {
  plan::Plan plan = debugPlan(2);
  plan.hang_timeout_ms = 1000;
  Job job(plan);
  job.runAll();
  debugged(job, 0, "waiting");
  auto hang = job.feed(HangTimeOver{}, 2s);
  EXPECT_FALSE(has<CollectStacks>(hang));
  EXPECT_TRUE(has<ArmTimer>(hang));
  auto over = debugged(job, 0, "running");
  bool rearmed = false;
  for (const ArmTimer& t : all<ArmTimer>(over)) rearmed = rearmed || t.timer == TimerKind::kHang;
  EXPECT_TRUE(rearmed);
  EXPECT_TRUE(has<CollectStacks>(job.feed(HangTimeOver{}, 2s)));
}

TEST(JobDecisionsDebug, AUserStopIsNotHeld) {
  Job job(debugPlan(2));
  job.runAll();
  debugged(job, 1, "attached");
  EXPECT_TRUE(has<SendStop>(job.feed(StopSignal{SIGINT})));
}

TEST(JobDecisionsDebug, ReportsOfAnotherAttemptOrUnknownRankChangeNothing) {
  Job job(debugPlan(2));
  job.runAll();
  EXPECT_TRUE(job.feed(RankDebugged{0, 7, 1, "waiting", "start", "", 0}).empty());
  EXPECT_TRUE(job.feed(RankDebugged{0, 0, 99, "waiting", "start", "", 0}).empty());
  EXPECT_TRUE(job.feed(RankDebugged{0, 0, 1, "sleeping", "start", "", 0}).empty());
  EXPECT_TRUE(has<SendStop>(job.exit(0, 1))) << "nothing is debugged: fail-fast as ever";
}

}  // namespace
}  // namespace cohort::agent
