// The scheduling policy of `cohort server`: given the cluster's nodes, the queued jobs, the jobs
// already running and each account's quota, one pass decides which queued jobs start now, on
// which nodes, and tells every job left waiting why, with numbers a user can act on. `schedule`
// is a pure function: no threads, no I/O, the time comes from the injected Clock (read once per
// pass). The caller (the server) owns the state, turns each Placement into a started job and a
// Running entry (see `runningFrom`), and calls `schedule` again whenever something changes.
// Thread-safe: passes share nothing.
//
// The policy, precisely:
//  1. Order. Queued jobs are taken by priority (higher first), then submit time (earlier first),
//     then id, so the order is total and every pass is deterministic.
//  2. Gangs. A job asks, per role, for a number of nodes and what it needs on each node (CPUs in
//     millicores, memory bytes, GPUs). It starts only when every node of every role fits at
//     once; all nodes of one job are distinct nodes. Nothing is ever partly started.
//  3. Packing. Each role's nodes are chosen best-fit: among the nodes where the request fits,
//     the ones with the least left over (fewest free GPUs left, then CPUs, then memory, then the
//     lowest index). Small jobs thus fill up nodes already in use and whole nodes stay free for
//     large jobs. Roles are placed one after the other, the largest per-node request first; on
//     very uneven nodes this greedy choice can miss a placement that exists.
//  4. Jobs that can never start (a request larger than any node, more such nodes than the
//     cluster has, or more than the account's quota in all) wait with a reason saying so and
//     never hold up anyone (kind kNeverFits).
//  5. Quotas. A job whose start would take its account over its GPU or CPU quota (counting the
//     account's running jobs and those started earlier in this pass) waits (kind kQuota), holds
//     no reservation and blocks no one: the walk goes on to the next job.
//  6. EASY backfill. The first job in order that fits its quota but not the free resources is
//     the head. It gets a reservation: the earliest time its gang fits if running jobs end at
//     their expected end times (jobs started in this pass end at now + max_runtime), on the
//     nodes it would then take. A later job may start now only when it fits now and cannot delay
//     that reservation: either it has a max_runtime and ends by the reserved time, or it leaves
//     on every node it uses what the head needs there at the reserved time. Only the head holds
//     a reservation; other waiting jobs just wait their turn (kind kResources).
//  7. Open reservations. When the head would not fit even after every job with an expected end
//     has ended, its start depends on a job without an expected end (no max_runtime), so no time
//     can be promised. The head then blocks every resource it could ever use: a later job may
//     start only if, on every node it uses, what stays free is still enough for the largest
//     per-node request of any head role that fits on that node. Ending early does not help,
//     since the head might start at any moment; nodes the head can never use stay open.
//
// Cost: ordering is O(J log J) for J queued jobs. Whether a request fits is answered from the
// most and least free on any node (no scan) or from a count cached per request shape until the
// next start, so an O(N) scan of the N nodes happens only per start, per new request shape and
// per distinct end time tried for the head's reservation. bench/sched_bench.cc measures a pass.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "sched/clock.h"
#include "util/result.h"
#include "util/text.h"

namespace cohort::sched {

// An amount of the three resources the scheduler counts. CPUs are millicores (1500 = 1.5 CPUs)
// so that fractional CPU requests add up exactly.
struct Resources {
  int64_t cpu_millis = 0;
  int64_t memory_bytes = 0;
  int64_t gpus = 0;

  Resources& operator+=(const Resources& other);
  Resources& operator-=(const Resources& other);
  friend Resources operator+(Resources a, const Resources& b) { return a += b; }
  friend Resources operator-(Resources a, const Resources& b) { return a -= b; }
  Resources operator*(int64_t n) const;
  friend bool operator==(const Resources&, const Resources&) = default;

  // Whether this request fits in `free`, every resource at once.
  bool fitsIn(const Resources& free) const;
};

// "8 GPUs, 32 CPUs and 64Gi memory"; only the non-zero parts ("nothing" when all are zero).
std::string describe(const Resources& r);

struct Node {
  std::string name;  // for messages only; placements name nodes by index
  Resources capacity;
};

// One role of a gang: `nodes` distinct nodes, each with at least `per_node` free.
struct RoleRequest {
  std::string role;
  int nodes = 1;
  Resources per_node;
};

struct Job {
  std::string id;
  std::string account;
  int priority = 0;  // higher runs first
  TimePoint submitted;
  std::vector<RoleRequest> roles;      // at least one
  std::optional<Millis> max_runtime;  // known runtime bound: allows backfill before a reservation
};

// What a running job holds on one node.
struct NodeShare {
  int node = 0;  // index into ClusterState::nodes
  Resources resources;
};

struct Running {
  std::string job_id;
  std::string account;
  std::vector<NodeShare> shares;
  std::optional<TimePoint> expected_end;  // start + max_runtime; none: runs until it ends
};

// Per-account limits on what its running jobs hold together. Absent: unlimited.
struct Quota {
  std::optional<int64_t> max_gpus;
  std::optional<int64_t> max_cpu_millis;
};

struct ClusterState {
  std::vector<Node> nodes;
  std::vector<Job> queue;  // in any order; `schedule` orders it
  std::vector<Running> running;
  std::map<std::string, Quota> quotas;  // by account
};

struct RolePlacement {
  std::string role;
  std::vector<int> nodes;  // distinct indices into ClusterState::nodes, best fit first
  Resources per_node;      // taken on each of those nodes
};

struct Placement {
  std::string job_id;
  std::vector<RolePlacement> roles;  // in the job's role order
  Resources total;                   // everything the job takes
};

enum class WaitKind {
  kResources,   // not enough free resources now; other jobs are ahead
  kReserved,    // the head of the queue: holds the reservation (see `Reservation`)
  kWouldDelay,  // fits now, but starting would delay the head's reservation
  kQuota,       // starting would exceed its account's quota
  kNeverFits,   // can never start on this cluster or under this quota, whatever ends
};
const char* waitKindName(WaitKind kind);

struct Waiting {
  WaitKind kind = WaitKind::kResources;
  // For the user, with numbers: "needs 4 GPUs on one node, at most 2 free; 3 jobs ahead".
  std::string reason;
};

// The head job's claim on the future. `start` is absent for an open reservation: the head
// waits for jobs that have no expected end (policy point 7).
struct Reservation {
  std::string job_id;
  std::optional<TimePoint> start;
  std::vector<std::string> waiting_for;  // running jobs whose end lets the head start
  std::vector<RolePlacement> roles;      // where it would start (for an open one: the likely nodes)
};

struct Decision {
  std::vector<Placement> start;            // in queue order
  std::map<std::string, Waiting> waiting;  // every queued job not started, by job id
  std::optional<Reservation> reservation;
};

struct Options {
  // Shown times of day are UTC plus this offset (the server passes its local offset): the
  // scheduler itself does not read the time zone database.
  std::chrono::minutes utc_offset{0};
};

// One scheduling pass over `state` at `clock.now()`. Returns the jobs to start now and why
// every other queued job waits. Errors (kInvalidArgument) only for a state the server should
// never build: duplicate job ids, a running share on a node index that does not exist, or a
// negative capacity. A malformed job (no roles, fewer than one node, a negative request) is
// not an error for the whole pass: it waits as kNeverFits with the reason.
Result<Decision> schedule(const ClusterState& state, const Clock& clock,
                          const Options& options = {});

// The Running entry for a job that starts at `started` with `placement`: what the caller adds
// to ClusterState::running (and removes from the queue) after acting on a Decision.
Running runningFrom(const Job& job, const Placement& placement, TimePoint started);

}  // namespace cohort::sched
