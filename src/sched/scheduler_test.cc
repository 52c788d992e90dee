#include "sched/scheduler.h"

#include <gtest/gtest.h>

#include <set>

namespace cohort::sched {
namespace {

using namespace std::chrono_literals;

constexpr int64_t kGi = int64_t{1} << 30;

// Whether `text` contains `part`; on failure shows both.
::testing::AssertionResult contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << text << "' does not contain '" << part << "'";
}

// 2024-05-03 13:00 UTC.
const TimePoint kT0 = TimePoint{std::chrono::sys_days{std::chrono::year{2024} / 5 / 3} + 13h};

Resources gpus(int64_t n, int64_t cpus = 8) {
  return Resources{.cpu_millis = cpus * 1000, .memory_bytes = 64 * kGi, .gpus = n};
}
Resources cpusOnly(int64_t cpus) {
  return Resources{.cpu_millis = cpus * 1000, .memory_bytes = 8 * kGi};
}

Node gpuNode(const std::string& name) {
  return Node{name, Resources{.cpu_millis = 64000, .memory_bytes = 512 * kGi, .gpus = 8}};
}
Node cpuNode(const std::string& name, int64_t cpus = 16) {
  return Node{name, Resources{.cpu_millis = cpus * 1000, .memory_bytes = 128 * kGi}};
}

Job job(const std::string& id, Resources per_node, int nodes = 1, int priority = 0,
        Millis submitted_after = 0ms, std::optional<Millis> max_runtime = std::nullopt,
        const std::string& account = "alice") {
  return Job{id, account, priority, kT0 - 1h + submitted_after,
             {RoleRequest{"worker", nodes, per_node}}, max_runtime};
}

Running running(const std::string& id, std::vector<NodeShare> shares,
                std::optional<TimePoint> expected_end = std::nullopt,
                const std::string& account = "alice") {
  return Running{id, account, std::move(shares), expected_end};
}

Decision pass(const ClusterState& state, const Clock& clock, const Options& options = {}) {
  auto decision = schedule(state, clock, options);
  EXPECT_TRUE(decision) << decision.error().message;
  return decision ? *decision : Decision{};
}

std::vector<std::string> started(const Decision& d) {
  std::vector<std::string> ids;
  for (const auto& p : d.start) ids.push_back(p.job_id);
  return ids;
}

// The nodes of a started single-role job; empty with a test failure when it did not start.
std::vector<int> nodesOf(const Decision& d, const std::string& id) {
  for (const auto& p : d.start) {
    if (p.job_id == id) return p.roles.at(0).nodes;
  }
  ADD_FAILURE() << "job '" << id << "' did not start";
  return {};
}

std::string reason(const Decision& d, const std::string& id) {
  auto it = d.waiting.find(id);
  return it == d.waiting.end() ? "<not waiting>" : it->second.reason;
}

// The job's wait kind; kResources with a test failure when it is not waiting.
WaitKind kind(const Decision& d, const std::string& id) {
  auto it = d.waiting.find(id);
  if (it != d.waiting.end()) return it->second.kind;
  ADD_FAILURE() << "job '" << id << "' is not waiting";
  return WaitKind::kResources;
}

// ---- Gangs ----

TEST(Gang, TwoNodeJobDoesNotStartOnOneFreeNode) {
  FakeClock clock(kT0);
  ClusterState state;
  state.nodes = {gpuNode("n0"), gpuNode("n1")};
  state.running = {running("busy", {{1, gpus(8)}})};
  state.queue = {job("pair", gpus(8), 2)};

  Decision d = pass(state, clock);
  EXPECT_TRUE(d.start.empty());
  EXPECT_TRUE(contains(reason(d, "pair"),
                       "waiting for 2 nodes with 8 GPUs, 8 CPUs and 64Gi memory each, 1 free"));
}

TEST(Gang, StartsOnDistinctNodesWhenAllFitAtOnce) {
  FakeClock clock(kT0);
  ClusterState state;
  state.nodes = {gpuNode("n0"), gpuNode("n1"), gpuNode("n2")};
  // Small enough that two would fit on one node: the gang still takes distinct nodes.
  state.queue = {job("pair", gpus(2), 2)};

  Decision d = pass(state, clock);
  ASSERT_EQ(started(d), std::vector<std::string>{"pair"});
  const auto& nodes = d.start[0].roles[0].nodes;
  ASSERT_EQ(nodes.size(), 2u);
  EXPECT_NE(nodes[0], nodes[1]);
  EXPECT_EQ(d.start[0].total, gpus(2) * 2);
  EXPECT_TRUE(d.waiting.empty());
}

TEST(Gang, RolesOfOneJobGetDistinctNodes) {
  FakeClock clock(kT0);
  ClusterState state;
  state.nodes = {gpuNode("n0"), gpuNode("n1"), gpuNode("n2")};
  Job tf{"tf", "alice", 0, kT0, {{"ps", 1, cpusOnly(4)}, {"worker", 2, gpus(4)}}, std::nullopt};
  state.queue = {tf};

  Decision d = pass(state, clock);
  ASSERT_EQ(started(d), std::vector<std::string>{"tf"});
  ASSERT_EQ(d.start[0].roles.size(), 2u);
  EXPECT_EQ(d.start[0].roles[0].role, "ps");
  EXPECT_EQ(d.start[0].roles[1].role, "worker");
  std::set<int> all;
  for (const auto& role : d.start[0].roles) all.insert(role.nodes.begin(), role.nodes.end());
  EXPECT_EQ(all.size(), 3u);
}

TEST(Gang, MultiRoleJobWaitsWhenNotEnoughDistinctNodesAreFree) {
  FakeClock clock(kT0);
  ClusterState state;
  state.nodes = {gpuNode("n0"), gpuNode("n1"), gpuNode("n2")};
  state.running = {running("busy", {{2, state.nodes[2].capacity}})};
  Job tf{"tf", "alice", 0, kT0, {{"ps", 1, cpusOnly(4)}, {"worker", 2, gpus(4)}}, std::nullopt};
  state.queue = {tf};

  Decision d = pass(state, clock);
  EXPECT_TRUE(d.start.empty());
  EXPECT_TRUE(contains(reason(d, "tf"), "needs 3 distinct nodes at once (ps: 1 and worker: 2)"));
}

TEST(Gang, LargestRoleIsPlacedFirstSoItGetsTheOnlyNodeThatFitsIt) {
  FakeClock clock(kT0);
  ClusterState state;
  // n0 has more memory, n1 more GPUs; only n0 fits 'big'. Placed first, 'small' would take n0
  // (the fewest GPUs left over) and the gang would not fit.
  state.nodes = {Node{"n0", Resources{.cpu_millis = 64000, .memory_bytes = 1024 * kGi, .gpus = 8}},
                 Node{"n1", Resources{.cpu_millis = 64000, .memory_bytes = 256 * kGi, .gpus = 16}}};
  Resources small{.cpu_millis = 8000, .memory_bytes = 8 * kGi, .gpus = 8};
  Resources big{.cpu_millis = 8000, .memory_bytes = 512 * kGi, .gpus = 8};
  state.queue = {Job{"j", "alice", 0, kT0, {{"small", 1, small}, {"big", 1, big}}, std::nullopt}};

  Decision d = pass(state, clock);
  ASSERT_EQ(started(d), std::vector<std::string>{"j"});
  EXPECT_EQ(d.start[0].roles[0].nodes, std::vector<int>{1});
  EXPECT_EQ(d.start[0].roles[1].nodes, std::vector<int>{0});
}

// ---- Order ----

TEST(Order, HigherPriorityStartsBeforeEarlierSubmission) {
  FakeClock clock(kT0);
  ClusterState state;
  state.nodes = {gpuNode("n0")};
  state.queue = {job("early-low", gpus(8), 1, /*priority=*/0, 0ms),
                 job("late-high", gpus(8), 1, /*priority=*/5, 30min)};

  Decision d = pass(state, clock);
  EXPECT_EQ(started(d), std::vector<std::string>{"late-high"});
  EXPECT_EQ(kind(d, "early-low"), WaitKind::kReserved);
  // "late-high" has no max_runtime: no start time can be promised.
  EXPECT_TRUE(contains(reason(d, "early-low"), "next to start, when job 'late-high' ends"));
  EXPECT_TRUE(contains(reason(d, "early-low"), "needs 8 GPUs on one node, at most 0 free"));
}

TEST(Order, FirstSubmittedFirstWithinAPriorityThenById) {
  FakeClock clock(kT0);
  ClusterState state;
  state.nodes = {gpuNode("n0")};
  state.queue = {job("c-later", gpus(4), 1, 1, 20min), job("b-same", gpus(4), 1, 1, 10min),
                 job("a-same", gpus(4), 1, 1, 10min)};

  Decision d = pass(state, clock);
  EXPECT_EQ(started(d), (std::vector<std::string>{"a-same", "b-same"}));
  EXPECT_EQ(kind(d, "c-later"), WaitKind::kReserved);
}

// ---- Backfill ----

// n0 is busy with 'long' until 15:00; 'big' needs both nodes, so it is reserved for 15:00.
ClusterState backfillCluster() {
  ClusterState state;
  state.nodes = {gpuNode("n0"), gpuNode("n1")};
  state.running = {running("long", {{0, gpus(8)}}, kT0 + 2h)};
  state.queue = {job("big", gpus(8), 2, 0, 0ms)};
  return state;
}

TEST(Backfill, HeadJobGetsAReservationWhenRunningJobsEnd) {
  FakeClock clock(kT0);
  Decision d = pass(backfillCluster(), clock);
  EXPECT_TRUE(d.start.empty());
  EXPECT_EQ(kind(d, "big"), WaitKind::kReserved);
  EXPECT_TRUE(contains(reason(d, "big"),
                       "reserved to start at 15:00 when job 'long' ends (in 2h00m)"));
  ASSERT_TRUE(d.reservation);
  EXPECT_EQ(d.reservation->job_id, "big");
  EXPECT_EQ(d.reservation->start, kT0 + 2h);
  EXPECT_EQ(d.reservation->waiting_for, std::vector<std::string>{"long"});
}

TEST(Backfill, ShortJobStartsAheadWhenItEndsBeforeTheReservation) {
  FakeClock clock(kT0);
  ClusterState state = backfillCluster();
  state.queue.push_back(job("short", gpus(4), 1, 0, 10min, 1h));

  Decision d = pass(state, clock);
  EXPECT_EQ(started(d), std::vector<std::string>{"short"});
  EXPECT_EQ(nodesOf(d, "short"), std::vector<int>{1});
  EXPECT_EQ(kind(d, "big"), WaitKind::kReserved);
}

TEST(Backfill, JobThatWouldDelayTheHeadDoesNotStart) {
  FakeClock clock(kT0);
  ClusterState state = backfillCluster();
  state.queue.push_back(job("too-long", gpus(4), 1, 0, 10min, 3h));
  state.queue.push_back(job("unbounded", gpus(4), 1, 0, 20min));

  Decision d = pass(state, clock);
  EXPECT_TRUE(d.start.empty());
  EXPECT_EQ(kind(d, "too-long"), WaitKind::kWouldDelay);
  EXPECT_EQ(reason(d, "too-long"),
            "fits now but would delay job 'big', reserved to start at 15:00 (in 2h00m); its "
            "max_runtime 3h00m ends later; 1 job ahead");
  EXPECT_EQ(reason(d, "unbounded"),
            "fits now but would delay job 'big', reserved to start at 15:00 (in 2h00m); with a "
            "max_runtime of at most 2h00m it could start now; 2 jobs ahead");
}

TEST(Backfill, JobMayUseWhatTheHeadDoesNotNeedAtItsReservation) {
  FakeClock clock(kT0);
  ClusterState state = backfillCluster();
  // At 15:00 'big' takes all GPUs but only 8 of the 64 CPUs on each node: a CPU job without a
  // max_runtime may use the other 56 now, but no more.
  state.queue.push_back(job("cpu", cpusOnly(32), 1, 0, 10min));
  state.queue.push_back(job("cpu-too-big", cpusOnly(60), 1, 0, 20min));

  Decision d = pass(state, clock);
  EXPECT_EQ(started(d), std::vector<std::string>{"cpu"});
  EXPECT_EQ(kind(d, "cpu-too-big"), WaitKind::kWouldDelay);
}

TEST(Backfill, ReservedJobStartsOnceTheClockReachesItsReservation) {
  FakeClock clock(kT0);
  ClusterState state = backfillCluster();
  state.queue.push_back(job("short", gpus(4), 1, 0, 10min, 1h));
  Decision first = pass(state, clock);
  ASSERT_EQ(started(first), std::vector<std::string>{"short"});

  // The server acts on the decision: 'short' runs until 14:00.
  state.running.push_back(runningFrom(state.queue[1], first.start[0], clock.now()));
  state.queue.pop_back();
  EXPECT_EQ(state.running.back().expected_end, kT0 + 1h);

  clock.advance(1h);  // 'short' ended.
  state.running.pop_back();
  Decision second = pass(state, clock);
  EXPECT_TRUE(second.start.empty());
  EXPECT_TRUE(contains(reason(second, "big"), "at 15:00 when job 'long' ends (in 1h00m)"));

  clock.advance(1h);  // 'long' ended.
  state.running.clear();
  Decision third = pass(state, clock);
  EXPECT_EQ(started(third), std::vector<std::string>{"big"});
}

TEST(Backfill, OverdueJobMakesTheReservationImmediate) {
  FakeClock clock(kT0);
  ClusterState state = backfillCluster();
  clock.advance(3h);  // 'long' is an hour past its expected end and still running.
  state.queue.push_back(job("short", gpus(4), 1, 0, 10min, 10min));

  Decision d = pass(state, clock);
  EXPECT_TRUE(contains(reason(d, "big"),
                       "reserved to start as soon as job 'long' ends (past its expected end)"));
  EXPECT_TRUE(d.start.empty());  // Nothing ends before "now".
}

TEST(Backfill, OpenReservationBlocksEveryResourceTheHeadCouldUse) {
  FakeClock clock(kT0);
  ClusterState state;
  state.nodes = {gpuNode("n0"), gpuNode("n1"), cpuNode("c0")};
  state.running = {running("forever", {{0, gpus(8)}})};  // no expected end
  state.queue = {job("big", gpus(8), 2, 0, 0ms), job("tiny", gpus(1), 1, 0, 10min, 10min),
                 job("cpu", cpusOnly(8), 1, 0, 20min)};

  Decision d = pass(state, clock);
  // 'big' could start the moment 'forever' ends, so even a 10-minute job must not take n1;
  // the CPU node can never host 'big', so it stays open.
  EXPECT_EQ(started(d), std::vector<std::string>{"cpu"});
  EXPECT_EQ(nodesOf(d, "cpu"), std::vector<int>{2});
  EXPECT_TRUE(contains(reason(d, "big"), "next to start, when job 'forever' ends (no "
                                         "max_runtime, so no start time can be given)"));
  ASSERT_TRUE(d.reservation);
  EXPECT_FALSE(d.reservation->start);
  EXPECT_EQ(kind(d, "tiny"), WaitKind::kWouldDelay);
  EXPECT_EQ(reason(d, "tiny"),
            "fits now but would delay job 'big', which starts next; 1 job ahead");
}

// ---- Quotas ----

TEST(Quota, GpuQuotaMakesTheJobWaitWithoutBlockingOthers) {
  FakeClock clock(kT0);
  ClusterState state;
  state.nodes = {gpuNode("n0"), gpuNode("n1")};
  state.running = {running("alice-run", {{0, gpus(8)}}, std::nullopt, "alice")};
  state.quotas["alice"] = Quota{.max_gpus = 8};
  state.queue = {job("alice-more", gpus(4), 1, 5, 0ms, std::nullopt, "alice"),
                 job("bob-job", gpus(8), 1, 0, 10min, std::nullopt, "bob")};

  Decision d = pass(state, clock);
  EXPECT_EQ(started(d), std::vector<std::string>{"bob-job"});
  EXPECT_EQ(kind(d, "alice-more"), WaitKind::kQuota);
  EXPECT_EQ(reason(d, "alice-more"), "account 'alice' quota: 8 GPUs in use of 8; the job needs 4");
  EXPECT_FALSE(d.reservation);  // a job over quota holds no reservation
}

TEST(Quota, CountsJobsStartedEarlierInThePass) {
  FakeClock clock(kT0);
  ClusterState state;
  state.nodes = {gpuNode("n0"), gpuNode("n1")};
  state.quotas["alice"] = Quota{.max_gpus = 8};
  state.queue = {job("a1", gpus(4), 1, 0, 0ms), job("a2", gpus(4), 1, 0, 1min),
                 job("a3", gpus(4), 1, 0, 2min)};

  Decision d = pass(state, clock);
  EXPECT_EQ(started(d), (std::vector<std::string>{"a1", "a2"}));
  EXPECT_TRUE(contains(reason(d, "a3"), "account 'alice' quota: 8 GPUs in use of 8"));
}

TEST(Quota, CpuQuotaCountsMillicores) {
  FakeClock clock(kT0);
  ClusterState state;
  state.nodes = {cpuNode("c0", 64)};
  state.running = {running("bob-run", {{0, cpusOnly(30)}}, std::nullopt, "bob")};
  state.quotas["bob"] = Quota{.max_cpu_millis = 32000};
  Resources two_and_a_half{.cpu_millis = 2500};
  state.queue = {job("bob-more", two_and_a_half, 1, 0, 0ms, std::nullopt, "bob"),
                 job("bob-fits", cpusOnly(2), 1, 0, 1min, std::nullopt, "bob")};

  Decision d = pass(state, clock);
  EXPECT_EQ(started(d), std::vector<std::string>{"bob-fits"});
  EXPECT_EQ(reason(d, "bob-more"), "account 'bob' quota: 30 CPUs in use of 32; the job needs 2.5");
}

TEST(Quota, JobLargerThanTheQuotaCanNeverStart) {
  FakeClock clock(kT0);
  ClusterState state;
  state.nodes = {gpuNode("n0"), gpuNode("n1")};
  state.quotas["alice"] = Quota{.max_gpus = 8};
  state.queue = {job("huge", gpus(8), 2)};

  Decision d = pass(state, clock);
  EXPECT_EQ(kind(d, "huge"), WaitKind::kNeverFits);
  EXPECT_EQ(reason(d, "huge"),
            "can never start: needs 16 GPUs in all; account 'alice' quota allows 8");
}

// ---- Reasons ----

TEST(Reasons, StateWhatIsShortAndHowManyJobsAreAhead) {
  FakeClock clock(kT0);
  ClusterState state;
  state.nodes = {gpuNode("n0")};
  state.running = {running("busy", {{0, gpus(6)}})};
  state.queue = {job("head", gpus(8), 1, 0, 0ms), job("a", gpus(4), 1, 0, 1min),
                 job("b", gpus(4), 1, 0, 2min), job("me", gpus(4), 1, 0, 3min)};

  Decision d = pass(state, clock);
  EXPECT_EQ(kind(d, "me"), WaitKind::kResources);
  EXPECT_EQ(reason(d, "me"), "needs 4 GPUs on one node, at most 2 free; 3 jobs ahead");
  EXPECT_EQ(reason(d, "a"), "needs 4 GPUs on one node, at most 2 free; 1 job ahead");
}

TEST(Reasons, CountFreeNodesForMultiNodeRoles) {
  FakeClock clock(kT0);
  ClusterState state;
  state.nodes = {cpuNode("c0"), cpuNode("c1")};
  state.running = {running("busy", {{0, cpusOnly(12)}})};
  state.queue = {job("pair", Resources{.cpu_millis = 8000}, 2)};

  Decision d = pass(state, clock);
  EXPECT_TRUE(contains(reason(d, "pair"), "waiting for 2 nodes with 8 CPUs each, 1 free"));
}

TEST(Reasons, ShowTimesInTheConfiguredOffsetAndDateWhenNotToday) {
  FakeClock clock(kT0);
  ClusterState state = backfillCluster();
  Decision local = pass(state, clock, Options{.utc_offset = 120min});
  EXPECT_TRUE(contains(reason(local, "big"), "reserved to start at 17:00 when"));

  state.running[0].expected_end = kT0 + 12h;
  Decision tomorrow = pass(state, clock);
  EXPECT_TRUE(contains(reason(tomorrow, "big"), "reserved to start at 2024-05-04 01:00 when"));
}

// ---- Packing ----

TEST(Packing, BestFitLeavesAWholeNodeFreeForALaterBigJob) {
  FakeClock clock(kT0);
  ClusterState state;
  state.nodes = {gpuNode("n0"), gpuNode("n1")};
  state.running = {running("half", {{1, gpus(4)}})};
  state.queue = {job("small", gpus(4), 1, 0, 0ms), job("big", gpus(8), 1, 0, 1min)};

  Decision d = pass(state, clock);
  EXPECT_EQ(started(d), (std::vector<std::string>{"small", "big"}));
  EXPECT_EQ(nodesOf(d, "small"), std::vector<int>{1});  // not the empty n0
  EXPECT_EQ(nodesOf(d, "big"), std::vector<int>{0});
}

TEST(Packing, CpuJobsGoWhereGpusAreAlreadyTaken) {
  FakeClock clock(kT0);
  ClusterState state;
  state.nodes = {gpuNode("n0"), gpuNode("n1")};
  state.running = {running("gpu", {{1, gpus(6)}})};
  state.queue = {job("cpu", cpusOnly(4))};

  Decision d = pass(state, clock);
  EXPECT_EQ(nodesOf(d, "cpu"), std::vector<int>{1});
}

// ---- Edges ----

TEST(Edges, EmptyClusterAndEmptyQueue) {
  FakeClock clock(kT0);
  Decision nothing = pass(ClusterState{}, clock);
  EXPECT_TRUE(nothing.start.empty());
  EXPECT_TRUE(nothing.waiting.empty());
  EXPECT_FALSE(nothing.reservation);

  ClusterState no_nodes;
  no_nodes.queue = {job("j", gpus(1))};
  Decision d = pass(no_nodes, clock);
  EXPECT_EQ(kind(d, "j"), WaitKind::kNeverFits);
  EXPECT_EQ(reason(d, "j"), "can never start: the cluster has no nodes");
}

TEST(Edges, JobLargerThanAnyNodeSaysSoAndBlocksNoOne) {
  FakeClock clock(kT0);
  ClusterState state;
  state.nodes = {gpuNode("n0"), gpuNode("n1")};
  state.queue = {job("huge", gpus(16), 1, 9, 0ms), job("three", gpus(8), 3, 9, 1min),
                 job("fine", gpus(8), 1, 0, 2min)};

  Decision d = pass(state, clock);
  EXPECT_EQ(started(d), std::vector<std::string>{"fine"});
  EXPECT_EQ(kind(d, "huge"), WaitKind::kNeverFits);
  EXPECT_EQ(reason(d, "huge"),
            "can never start: needs 16 GPUs on one node; the largest node has 8");
  EXPECT_EQ(reason(d, "three"),
            "can never start: needs 3 nodes with 8 GPUs, 8 CPUs and 64Gi memory each; only 2 "
            "nodes are that large");
  EXPECT_FALSE(d.reservation);
}

TEST(Edges, MalformedJobWaitsWithAReason) {
  FakeClock clock(kT0);
  ClusterState state;
  state.nodes = {gpuNode("n0")};
  state.queue = {job("none", gpus(1), 0)};
  Decision d = pass(state, clock);
  EXPECT_EQ(reason(d, "none"), "can never start: role 'worker' asks for no nodes");
}

TEST(Edges, InconsistentStateIsAnError) {
  FakeClock clock(kT0);
  ClusterState twice;
  twice.nodes = {gpuNode("n0")};
  twice.queue = {job("j", gpus(1)), job("j", gpus(2))};
  auto d = schedule(twice, clock);
  ASSERT_FALSE(d);
  EXPECT_EQ(d.error().code, Code::kInvalidArgument);
  EXPECT_EQ(d.error().message, "job 'j' is queued twice");

  ClusterState ghost;
  ghost.nodes = {gpuNode("n0")};
  ghost.running = {running("r", {{3, gpus(1)}})};
  d = schedule(ghost, clock);
  ASSERT_FALSE(d);
  EXPECT_EQ(d.error().message, "running job 'r' holds node 3, but the cluster has 1 node");
}

TEST(Describe, NamesOnlyWhatIsAskedFor) {
  EXPECT_EQ(describe(Resources{}), "nothing");
  EXPECT_EQ(describe(Resources{.cpu_millis = 1500}), "1.5 CPUs");
  EXPECT_EQ(describe(Resources{.cpu_millis = 1000, .gpus = 1}), "1 GPU and 1 CPU");
  EXPECT_EQ(describe(Resources{.cpu_millis = 250, .memory_bytes = 3 * kGi / 2, .gpus = 2}),
            "2 GPUs, 0.25 CPUs and 1.5Gi memory");
}

}  // namespace
}  // namespace cohort::sched
