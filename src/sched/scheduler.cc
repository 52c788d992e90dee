#include "sched/scheduler.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <functional>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <utility>

namespace cohort::sched {

Resources& Resources::operator+=(const Resources& other) {
  cpu_millis += other.cpu_millis;
  memory_bytes += other.memory_bytes;
  gpus += other.gpus;
  return *this;
}

Resources& Resources::operator-=(const Resources& other) {
  cpu_millis -= other.cpu_millis;
  memory_bytes -= other.memory_bytes;
  gpus -= other.gpus;
  return *this;
}

Resources Resources::operator*(int64_t n) const {
  return Resources{cpu_millis * n, memory_bytes * n, gpus * n};
}

bool Resources::fitsIn(const Resources& free) const {
  return cpu_millis <= free.cpu_millis && memory_bytes <= free.memory_bytes && gpus <= free.gpus;
}

const char* waitKindName(WaitKind kind) {
  switch (kind) {
    case WaitKind::kResources: return "resources";
    case WaitKind::kReserved: return "reserved";
    case WaitKind::kWouldDelay: return "would_delay";
    case WaitKind::kQuota: return "quota";
    case WaitKind::kNeverFits: return "never_fits";
  }
  return "unknown";
}

namespace {

// ---- Words and numbers for people ------------------------------------------------------------

std::string count(int64_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

// 8000 -> "8", 1500 -> "1.5", 250 -> "0.25".
std::string cpuNumber(int64_t millis) {
  if (millis % 1000 == 0) return std::to_string(millis / 1000);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", static_cast<double>(millis) / 1000);
  std::string s = buf;
  while (s.back() == '0') s.pop_back();
  return s;
}

std::string cpus(int64_t millis) {
  return cpuNumber(millis) + (millis == 1000 ? " CPU" : " CPUs");
}

// 512 GiB -> "512Gi", 1.5 GiB -> "1.5Gi", 100 -> "100B".
std::string bytes(int64_t n) {
  static const struct {
    int64_t scale;
    const char* unit;
  } kUnits[] = {{int64_t{1} << 40, "Ti"}, {int64_t{1} << 30, "Gi"}, {int64_t{1} << 20, "Mi"},
                {int64_t{1} << 10, "Ki"}};
  for (const auto& u : kUnits) {
    if (n >= u.scale || -n >= u.scale) {
      char buf[32];
      if (n % u.scale == 0) {
        std::snprintf(buf, sizeof buf, "%" PRId64 "%s", n / u.scale, u.unit);
      } else {
        std::snprintf(buf, sizeof buf, "%.1f%s", static_cast<double>(n) / u.scale, u.unit);
      }
      return buf;
    }
  }
  return std::to_string(n) + "B";
}

enum class Dim { kGpus, kCpus, kMemory };
constexpr Dim kDims[] = {Dim::kGpus, Dim::kCpus, Dim::kMemory};

int64_t get(const Resources& r, Dim d) {
  switch (d) {
    case Dim::kGpus: return r.gpus;
    case Dim::kCpus: return r.cpu_millis;
    case Dim::kMemory: return r.memory_bytes;
  }
  return 0;
}

// "4 GPUs", "8 CPUs", "64Gi memory".
std::string amount(Dim d, int64_t v) {
  switch (d) {
    case Dim::kGpus: return count(v, "GPU", "GPUs");
    case Dim::kCpus: return cpus(v);
    case Dim::kMemory: return bytes(v) + " memory";
  }
  return "";
}

// The bare number: "8" GPUs, "64" CPUs, "512Gi".
std::string number(Dim d, int64_t v) {
  switch (d) {
    case Dim::kGpus: return std::to_string(v);
    case Dim::kCpus: return cpuNumber(v);
    case Dim::kMemory: return bytes(v);
  }
  return "";
}

// "a", "a and b", "a, b and c".
std::string listWords(const std::vector<std::string>& words) {
  std::string out;
  for (size_t i = 0; i < words.size(); ++i) {
    if (i > 0) out += (i + 1 == words.size()) ? " and " : ", ";
    out += words[i];
  }
  return out;
}

// "job 'x'", "jobs 'x' and 'y'", "jobs 'a', 'b', 'c' and 2 more".
std::string jobList(const std::vector<std::string>& ids) {
  constexpr size_t kShown = 3;
  std::vector<std::string> words;
  for (size_t i = 0; i < ids.size() && i < kShown; ++i) words.push_back("'" + ids[i] + "'");
  if (ids.size() > kShown) words.push_back(std::to_string(ids.size() - kShown) + " more");
  return (ids.size() == 1 ? "job " : "jobs ") + listWords(words);
}

std::string ends(const std::vector<std::string>& ids) {
  return jobList(ids) + (ids.size() == 1 ? " ends" : " end");
}

// "14:02" when `t` is on the same day as `now`, else "2024-05-03 14:02".
std::string timeOfDay(TimePoint t, TimePoint now, std::chrono::minutes offset) {
  using namespace std::chrono;
  auto local = t + offset;
  auto day = floor<days>(local);
  hh_mm_ss hms{floor<minutes>(local - day)};
  char buf[48];
  if (day == floor<days>(now + offset)) {
    std::snprintf(buf, sizeof buf, "%02d:%02d", static_cast<int>(hms.hours().count()),
                  static_cast<int>(hms.minutes().count()));
  } else {
    year_month_day ymd{day};
    std::snprintf(buf, sizeof buf, "%04d-%02u-%02u %02d:%02d", static_cast<int>(ymd.year()),
                  static_cast<unsigned>(ymd.month()), static_cast<unsigned>(ymd.day()),
                  static_cast<int>(hms.hours().count()), static_cast<int>(hms.minutes().count()));
  }
  return buf;
}

std::string jobsAhead(int ahead) {
  return ahead > 0 ? "; " + count(ahead, "job", "jobs") + " ahead" : "";
}

// ---- Free capacity ---------------------------------------------------------------------------

struct ResourcesHash {
  size_t operator()(const Resources& r) const {
    size_t h = std::hash<int64_t>{}(r.cpu_millis);
    h = h * 1000003u ^ std::hash<int64_t>{}(r.memory_bytes);
    return h * 1000003u ^ std::hash<int64_t>{}(r.gpus);
  }
};

Resources minOf(const Resources& a, const Resources& b) {
  return {std::min(a.cpu_millis, b.cpu_millis), std::min(a.memory_bytes, b.memory_bytes),
          std::min(a.gpus, b.gpus)};
}

Resources maxOf(const Resources& a, const Resources& b) {
  return {std::max(a.cpu_millis, b.cpu_millis), std::max(a.memory_bytes, b.memory_bytes),
          std::max(a.gpus, b.gpus)};
}

// What is free on each node, from one point of view (now, at a reservation, or what backfill
// may use), with the answers a pass asks over and over kept until the next change: the most
// free on any node per resource (a request above it fits nowhere, no scan needed) and how many
// nodes fit a given per-node request.
class FreeView {
 public:
  explicit FreeView(std::vector<Resources> free) : free_(std::move(free)) {}

  int size() const { return static_cast<int>(free_.size()); }
  const Resources& at(int node) const { return free_[node]; }
  const std::vector<Resources>& all() const { return free_; }

  void set(int node, const Resources& free) {
    free_[node] = free;
    changed();
  }
  void add(int node, const Resources& r) {
    free_[node] += r;
    changed();
  }

  // Per resource, the most free on any one node.
  const Resources& largest() {
    summarize();
    return largest_;
  }

  // How many nodes have `per_node` free.
  int countFitting(const Resources& per_node) {
    if (free_.empty()) return 0;
    summarize();
    if (!per_node.fitsIn(largest_)) return 0;
    if (per_node.fitsIn(smallest_)) return size();
    auto [it, inserted] = counts_.try_emplace(per_node, 0);
    if (inserted) {
      int n = 0;
      for (const auto& f : free_) n += per_node.fitsIn(f) ? 1 : 0;
      it->second = n;
    }
    return it->second;
  }

 private:
  void changed() {
    summary_valid_ = false;
    counts_.clear();
  }

  void summarize() {
    if (summary_valid_ || free_.empty()) return;
    largest_ = smallest_ = free_[0];
    for (const auto& f : free_) {
      largest_ = maxOf(largest_, f);
      smallest_ = minOf(smallest_, f);
    }
    summary_valid_ = true;
  }

  std::vector<Resources> free_;
  Resources largest_;   // per resource, the most free on one node
  Resources smallest_;  // per resource, the least free on one node: what fits everywhere
  bool summary_valid_ = false;
  std::unordered_map<Resources, int, ResourcesHash> counts_;
};

// Node indices per role, in the job's role order.
using GangNodes = std::vector<std::vector<int>>;

// Roles placed largest per-node request first (GPUs, then CPUs, then memory, then more nodes):
// the hardest role picks first, the small ones take what is left.
std::vector<int> roleOrder(const Job& job) {
  std::vector<int> order(job.roles.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  auto key = [&](int i) {
    const auto& r = job.roles[i];
    return std::make_tuple(r.per_node.gpus, r.per_node.cpu_millis, r.per_node.memory_bytes,
                           r.nodes);
  };
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return key(a) > key(b); });
  return order;
}

// Reused buffers for placements, so that a pass allocates little per job.
struct Scratch {
  std::vector<uint32_t> used;  // == stamp: taken by the gang being placed
  uint32_t stamp = 0;
  std::vector<std::pair<std::tuple<int64_t, int64_t, int64_t, int>, int>> candidates;
};

// Best-fit placement of every role of `job` on `view`, all nodes distinct. Returns false when
// some role cannot get its nodes. Greedy, largest role first (see roleOrder).
bool placeGang(FreeView& view, const Job& job, const std::vector<int>& order, Scratch& scratch,
               GangNodes& out) {
  for (const auto& role : job.roles) {
    if (view.countFitting(role.per_node) < role.nodes) return false;
  }
  out.assign(job.roles.size(), {});
  if (scratch.used.size() != static_cast<size_t>(view.size())) {
    scratch.used.assign(view.size(), 0);
    scratch.stamp = 0;
  }
  if (++scratch.stamp == 0) {
    std::fill(scratch.used.begin(), scratch.used.end(), 0);
    scratch.stamp = 1;
  }
  for (int r : order) {
    const RoleRequest& role = job.roles[r];
    auto& cands = scratch.candidates;
    cands.clear();
    for (int n = 0; n < view.size(); ++n) {
      if (scratch.used[n] == scratch.stamp || !role.per_node.fitsIn(view.at(n))) continue;
      Resources left = view.at(n) - role.per_node;
      cands.push_back({{left.gpus, left.cpu_millis, left.memory_bytes, n}, n});
    }
    auto want = static_cast<size_t>(role.nodes);
    if (cands.size() < want) return false;
    std::partial_sort(cands.begin(), cands.begin() + static_cast<std::ptrdiff_t>(want),
                      cands.end());
    for (size_t i = 0; i < want; ++i) {
      out[r].push_back(cands[i].second);
      scratch.used[cands[i].second] = scratch.stamp;
    }
  }
  return true;
}

// Whether `job`'s gang fits on `view`: exact and cheap (cached counts) for one role; several
// roles need a trial placement because their nodes must be distinct.
bool gangFits(FreeView& view, const Job& job, const std::vector<int>& order, Scratch& scratch,
              GangNodes& trial) {
  if (job.roles.size() == 1) return view.countFitting(job.roles[0].per_node) >= job.roles[0].nodes;
  // Enough nodes that fit every role's request: any choice of distinct nodes works.
  Resources any_role;
  int total = 0;
  for (const auto& role : job.roles) {
    any_role = maxOf(any_role, role.per_node);
    total += role.nodes;
  }
  if (view.countFitting(any_role) >= total) return true;
  return placeGang(view, job, order, scratch, trial);
}

// What is short now, for the user: "needs 4 GPUs on one node, at most 2 free" or "waiting for 2
// nodes with 8 CPUs each, 1 free".
// "needs 5 distinct nodes at once (ps: 1, worker: 4)".
std::string distinctNodesNeeded(const Job& job) {
  int total = 0;
  std::vector<std::string> parts;
  for (const auto& role : job.roles) {
    total += role.nodes;
    parts.push_back(role.role + ": " + std::to_string(role.nodes));
  }
  return "needs " + std::to_string(total) + " distinct nodes at once (" + listWords(parts) + ")";
}

std::string shortage(FreeView& view, const Job& job) {
  const bool many_roles = job.roles.size() > 1;
  for (const auto& role : job.roles) {
    int fitting = view.countFitting(role.per_node);
    if (fitting >= role.nodes) continue;
    std::string prefix = many_roles ? "role '" + role.role + "' " : "";
    if (role.nodes > 1) {
      return prefix + "waiting for " + std::to_string(role.nodes) + " nodes with " +
             describe(role.per_node) + " each, " + std::to_string(fitting) + " free";
    }
    const Resources& largest = view.largest();
    for (Dim d : kDims) {
      if (get(role.per_node, d) > get(largest, d)) {
        return prefix + "needs " + amount(d, get(role.per_node, d)) + " on one node, at most " +
               number(d, get(largest, d)) + " free";
      }
    }
    return prefix + "needs " + describe(role.per_node) +
           " on one node, no node has all of it free";
  }
  // Every role fits on its own; together they need more distinct nodes than are free.
  return distinctNodesNeeded(job) + ", not that many free together";
}

// Why a job can never start on this cluster, or nullopt when it could once enough ends.
std::optional<std::string> neverFits(FreeView& capacity, const Job& job,
                                     const std::vector<int>& order, Scratch& scratch) {
  if (job.roles.empty()) return "the job asks for no roles";
  for (const auto& role : job.roles) {
    if (role.nodes < 1) return "role '" + role.role + "' asks for no nodes";
    if (role.per_node.cpu_millis < 0 || role.per_node.memory_bytes < 0 || role.per_node.gpus < 0) {
      return "role '" + role.role + "' asks for a negative amount";
    }
  }
  if (capacity.size() == 0) return "the cluster has no nodes";
  const bool many_roles = job.roles.size() > 1;
  for (const auto& role : job.roles) {
    int fitting = capacity.countFitting(role.per_node);
    if (fitting >= role.nodes) continue;
    std::string prefix = many_roles ? "role '" + role.role + "' " : "";
    if (fitting == 0) {
      const Resources& largest = capacity.largest();
      for (Dim d : kDims) {
        if (get(role.per_node, d) > get(largest, d)) {
          return prefix + "needs " + amount(d, get(role.per_node, d)) +
                 " on one node; the largest node has " + number(d, get(largest, d));
        }
      }
      return prefix + "needs " + describe(role.per_node) + " on one node; no node has all of it";
    }
    return prefix + "needs " + std::to_string(role.nodes) + " nodes with " +
           describe(role.per_node) + " each; only " + count(fitting, "node is", "nodes are") +
           " that large";
  }
  GangNodes ignored;
  if (!gangFits(capacity, job, order, scratch, ignored)) {
    return distinctNodesNeeded(job) + "; the cluster cannot hold them all";
  }
  return std::nullopt;
}

Resources jobTotal(const Job& job) {
  Resources total;
  for (const auto& role : job.roles) total += role.per_node * role.nodes;
  return total;
}

// Resources a job releases at a time (nullopt: no expected end).
struct Release {
  std::optional<TimePoint> at;
  std::string job_id;
  std::vector<NodeShare> shares;
};

std::vector<RolePlacement> rolePlacements(const Job& job, const GangNodes& nodes) {
  std::vector<RolePlacement> out;
  out.reserve(job.roles.size());
  for (size_t r = 0; r < job.roles.size(); ++r) {
    out.push_back({job.roles[r].role, nodes[r], job.roles[r].per_node});
  }
  return out;
}

// ---- One pass --------------------------------------------------------------------------------

class Pass {
 public:
  Pass(const ClusterState& state, TimePoint now, const Options& options)
      : state_(state), now_(now), options_(options), capacity_(capacities(state)),
        free_(capacities(state)) {}

  Result<Decision> run();

 private:
  static std::vector<Resources> capacities(const ClusterState& state) {
    std::vector<Resources> out;
    out.reserve(state.nodes.size());
    for (const auto& node : state.nodes) out.push_back(node.capacity);
    return out;
  }

  Result<void> load();
  std::vector<int> queueOrder() const;
  std::optional<std::string> quotaProblem(const Job& job, bool& never) const;
  void start(const Job& job, const GangNodes& nodes, bool ends_before_reservation);
  void reserve(const Job& job, const std::vector<int>& order);
  Resources backfillFree(int node) const;
  std::string headWords() const;
  void wait(const Job& job, WaitKind kind, std::string reason) {
    waiting_.push_back({&job.id, Waiting{kind, std::move(reason)}});
  }

  const ClusterState& state_;
  const TimePoint now_;
  const Options& options_;
  FreeView capacity_;
  FreeView free_;  // free now, after the starts so far in this pass
  std::unordered_map<std::string_view, Resources> in_use_;  // by account
  std::vector<Release> releases_;                           // running and started in this pass
  Scratch scratch_;
  Decision decision_;
  // Waiting jobs, gathered first and put into decision_.waiting in id order at the end: far
  // cheaper than 10,000 insertions in random order.
  std::vector<std::pair<const std::string*, Waiting>> waiting_;

  // The head's reservation, once there is one.
  enum class Head { kNone, kTimed, kOpen } head_ = Head::kNone;
  const Job* head_job_ = nullptr;
  TimePoint reserved_at_;
  std::vector<Resources> spare_;     // kTimed: free at the reservation beyond what the head takes
  std::vector<Resources> held_;      // kOpen: per node, what the head may need there
  std::optional<FreeView> backfill_;  // what a job that outlives the reservation may use now
};

Result<void> Pass::load() {
  for (size_t n = 0; n < state_.nodes.size(); ++n) {
    const Resources& c = state_.nodes[n].capacity;
    if (c.cpu_millis < 0 || c.memory_bytes < 0 || c.gpus < 0) {
      return fail(Code::kInvalidArgument,
                  "node '" + state_.nodes[n].name + "' has a negative capacity");
    }
  }
  std::unordered_set<std::string_view> ids;
  for (const auto& job : state_.queue) {
    if (!ids.insert(job.id).second) {
      return fail(Code::kInvalidArgument, "job '" + job.id + "' is queued twice");
    }
  }
  for (const auto& running : state_.running) {
    if (!ids.insert(running.job_id).second) {
      return fail(Code::kInvalidArgument,
                  "job '" + running.job_id + "' is running twice or both queued and running");
    }
    Resources total;
    for (const auto& share : running.shares) {
      if (share.node < 0 || share.node >= free_.size()) {
        return fail(Code::kInvalidArgument,
                    "running job '" + running.job_id + "' holds node " +
                        std::to_string(share.node) + ", but the cluster has " +
                        count(free_.size(), "node", "nodes"));
      }
      free_.add(share.node, Resources{} - share.resources);
      total += share.resources;
    }
    in_use_[running.account] += total;
    releases_.push_back({running.expected_end, running.job_id, running.shares});
  }
  return {};
}

std::vector<int> Pass::queueOrder() const {
  struct Key {
    int priority;
    TimePoint submitted;
    int index;
  };
  std::vector<Key> keys;
  keys.reserve(state_.queue.size());
  for (size_t i = 0; i < state_.queue.size(); ++i) {
    keys.push_back({state_.queue[i].priority, state_.queue[i].submitted, static_cast<int>(i)});
  }
  std::sort(keys.begin(), keys.end(), [&](const Key& x, const Key& y) {
    if (x.priority != y.priority) return x.priority > y.priority;
    if (x.submitted != y.submitted) return x.submitted < y.submitted;
    return state_.queue[x.index].id < state_.queue[y.index].id;
  });
  std::vector<int> order;
  order.reserve(keys.size());
  for (const Key& k : keys) order.push_back(k.index);
  return order;
}

// The quota the job's start would exceed, or nullopt. `never` is set when the job alone is
// larger than the quota.
std::optional<std::string> Pass::quotaProblem(const Job& job, bool& never) const {
  never = false;
  auto quota = state_.quotas.find(job.account);
  if (quota == state_.quotas.end()) return std::nullopt;
  Resources want = jobTotal(job);
  Resources used;
  if (auto it = in_use_.find(job.account); it != in_use_.end()) used = it->second;
  auto who = [&] { return "account '" + job.account + "' quota"; };
  if (quota->second.max_gpus) {
    int64_t max = *quota->second.max_gpus;
    if (want.gpus > max) {
      never = true;
      return "needs " + count(want.gpus, "GPU", "GPUs") + " in all; " + who() + " allows " +
             std::to_string(max);
    }
    if (used.gpus + want.gpus > max) {
      return who() + ": " + std::to_string(used.gpus) + " GPUs in use of " + std::to_string(max) +
             "; the job needs " + std::to_string(want.gpus);
    }
  }
  if (quota->second.max_cpu_millis) {
    int64_t max = *quota->second.max_cpu_millis;
    if (want.cpu_millis > max) {
      never = true;
      return "needs " + cpus(want.cpu_millis) + " in all; " + who() + " allows " + cpuNumber(max);
    }
    if (used.cpu_millis + want.cpu_millis > max) {
      return who() + ": " + cpuNumber(used.cpu_millis) + " CPUs in use of " + cpuNumber(max) +
             "; the job needs " + cpuNumber(want.cpu_millis);
    }
  }
  return std::nullopt;
}

// What a job that may outlive the reservation can use on `node` now.
Resources Pass::backfillFree(int node) const {
  if (head_ == Head::kTimed) return minOf(free_.at(node), spare_[node]);
  return maxOf(Resources{}, free_.at(node) - held_[node]);
}

void Pass::start(const Job& job, const GangNodes& nodes, bool ends_before_reservation) {
  Placement placement{job.id, rolePlacements(job, nodes), jobTotal(job)};
  Release release{std::nullopt, job.id, {}};
  if (job.max_runtime) release.at = now_ + *job.max_runtime;
  for (const auto& role : placement.roles) {
    for (int n : role.nodes) {
      free_.set(n, free_.at(n) - role.per_node);
      release.shares.push_back({n, role.per_node});
      if (head_ == Head::kTimed && !ends_before_reservation) spare_[n] -= role.per_node;
      if (backfill_) backfill_->set(n, backfillFree(n));
    }
  }
  in_use_[job.account] += placement.total;
  releases_.push_back(std::move(release));
  decision_.start.push_back(std::move(placement));
}

// Makes `job` the head: finds when and where its gang fits as jobs end (known ends in time
// order, then those without an expected end), and what backfill may use from now on.
void Pass::reserve(const Job& job, const std::vector<int>& order) {
  head_job_ = &job;
  // Jobs past their expected end still run: they count as ending now.
  std::vector<std::pair<TimePoint, const Release*>> timed;
  std::vector<const Release*> open;
  for (const auto& r : releases_) {
    if (r.at) {
      timed.push_back({std::max(*r.at, now_), &r});
    } else {
      open.push_back(&r);
    }
  }
  std::stable_sort(timed.begin(), timed.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });

  FreeView future(free_.all());
  GangNodes nodes;
  Reservation reservation{job.id, std::nullopt, {}, {}};
  bool fits = false;
  for (size_t i = 0; i < timed.size() && !fits;) {
    TimePoint at = timed[i].first;
    reservation.waiting_for.clear();
    for (; i < timed.size() && timed[i].first == at; ++i) {
      for (const auto& share : timed[i].second->shares) future.add(share.node, share.resources);
      reservation.waiting_for.push_back(timed[i].second->job_id);
    }
    if (placeGang(future, job, order, scratch_, nodes)) {
      fits = true;
      reservation.start = at;
    }
  }
  if (fits) {
    head_ = Head::kTimed;
    reserved_at_ = *reservation.start;
    spare_ = future.all();
    for (size_t r = 0; r < nodes.size(); ++r) {
      for (int n : nodes[r]) spare_[n] -= job.roles[r].per_node;
    }
  } else {
    // Open: the head waits for jobs without an expected end. Release them one by one (in the
    // order given) to name the ones it waits for and the nodes it would likely take.
    head_ = Head::kOpen;
    reservation.waiting_for.clear();
    for (const Release* r : open) {
      for (const auto& share : r->shares) future.add(share.node, share.resources);
      reservation.waiting_for.push_back(r->job_id);
      if (placeGang(future, job, order, scratch_, nodes)) {
        fits = true;
        break;
      }
    }
    if (!fits) nodes.assign(job.roles.size(), {});
    held_.assign(free_.size(), Resources{});
    for (int n = 0; n < free_.size(); ++n) {
      for (const auto& role : job.roles) {
        if (role.per_node.fitsIn(capacity_.at(n))) held_[n] = maxOf(held_[n], role.per_node);
      }
    }
  }
  reservation.roles = rolePlacements(job, nodes);
  decision_.reservation = std::move(reservation);
  std::vector<Resources> backfill;
  backfill.reserve(free_.size());
  for (int n = 0; n < free_.size(); ++n) backfill.push_back(backfillFree(n));
  backfill_.emplace(std::move(backfill));

  std::string reason;
  if (head_ == Head::kTimed) {
    const auto& waiting_for = decision_.reservation->waiting_for;
    if (reserved_at_ > now_) {
      reason = "reserved to start at " + timeOfDay(reserved_at_, now_, options_.utc_offset) +
               " when " + ends(waiting_for) + " (in " + formatDuration(reserved_at_ - now_) + ")";
    } else {
      reason = "reserved to start as soon as " + ends(waiting_for) +
               (waiting_for.size() == 1 ? " (past its expected end)"
                                        : " (past their expected end)");
    }
  } else if (!decision_.reservation->waiting_for.empty()) {
    reason = "next to start, when " + ends(decision_.reservation->waiting_for) +
             " (no max_runtime, so no start time can be given)";
  } else {
    reason = "next to start";
  }
  wait(job, WaitKind::kReserved, reason + "; " + shortage(free_, job));
}

// "job 'big', reserved to start at 14:02 (in 1h12m)" or "job 'big', next to start".
std::string Pass::headWords() const {
  std::string out = "job '" + head_job_->id + "'";
  if (head_ == Head::kTimed) {
    out += ", reserved to start at " + timeOfDay(reserved_at_, now_, options_.utc_offset);
    if (reserved_at_ > now_) out += " (in " + formatDuration(reserved_at_ - now_) + ")";
  } else {
    out += ", which starts next";
  }
  return out;
}

Result<Decision> Pass::run() {
  COHORT_TRY(load());
  int ahead = 0;  // jobs earlier in the queue waiting for resources
  GangNodes nodes;
  for (int index : queueOrder()) {
    const Job& job = state_.queue[index];
    std::vector<int> order = roleOrder(job);
    if (auto never = neverFits(capacity_, job, order, scratch_)) {
      wait(job, WaitKind::kNeverFits, "can never start: " + *never);
      continue;
    }
    bool quota_never = false;
    if (auto over = quotaProblem(job, quota_never)) {
      if (quota_never) {
        wait(job, WaitKind::kNeverFits, "can never start: " + *over);
      } else {
        wait(job, WaitKind::kQuota, *over);
      }
      continue;
    }
    if (head_ == Head::kNone) {
      if (placeGang(free_, job, order, scratch_, nodes)) {
        start(job, nodes, false);
      } else {
        reserve(job, order);
        ++ahead;
      }
      continue;
    }
    if (!gangFits(free_, job, order, scratch_, nodes)) {
      wait(job, WaitKind::kResources, shortage(free_, job) + jobsAhead(ahead));
      ++ahead;
      continue;
    }
    const bool ends_before = head_ == Head::kTimed && job.max_runtime &&
                             now_ + *job.max_runtime <= reserved_at_;
    if (ends_before && placeGang(free_, job, order, scratch_, nodes)) {
      start(job, nodes, true);
      continue;
    }
    if (placeGang(*backfill_, job, order, scratch_, nodes)) {
      start(job, nodes, false);
      continue;
    }
    std::string reason = "fits now but would delay " + headWords();
    if (head_ == Head::kTimed && reserved_at_ > now_) {
      if (job.max_runtime) {
        reason += "; its max_runtime " + formatDuration(*job.max_runtime) + " ends later";
      } else {
        reason += "; with a max_runtime of at most " + formatDuration(reserved_at_ - now_) +
                  " it could start now";
      }
    }
    wait(job, WaitKind::kWouldDelay, reason + jobsAhead(ahead));
    ++ahead;
  }
  std::sort(waiting_.begin(), waiting_.end(),
            [](const auto& a, const auto& b) { return *a.first < *b.first; });
  for (auto& [id, waiting] : waiting_) {
    decision_.waiting.emplace_hint(decision_.waiting.end(), *id, std::move(waiting));
  }
  return std::move(decision_);
}

}  // namespace

std::string describe(const Resources& r) {
  std::vector<std::string> parts;
  for (Dim d : kDims) {
    if (get(r, d) != 0) parts.push_back(amount(d, get(r, d)));
  }
  return parts.empty() ? "nothing" : listWords(parts);
}

Result<Decision> schedule(const ClusterState& state, const Clock& clock, const Options& options) {
  Pass pass(state, clock.now(), options);
  return pass.run();
}

Running runningFrom(const Job& job, const Placement& placement, TimePoint started) {
  Running running{job.id, job.account, {}, std::nullopt};
  if (job.max_runtime) running.expected_end = started + *job.max_runtime;
  for (const auto& role : placement.roles) {
    for (int n : role.nodes) running.shares.push_back({n, role.per_node});
  }
  return running;
}

}  // namespace cohort::sched
