// Times one scheduling pass of `cohort server` on a large, busy queue: 10,000 queued jobs of
// mixed sizes, priorities and accounts over 100 nodes (64 CPUs, 512 GiB, 8 GPUs each) of which
// about two thirds are held by running jobs. Prints the median of 20 passes and what the pass
// decided. Deterministic: a seeded RNG builds the state and a FakeClock gives the time.
// Run: build/sched_bench [jobs] [nodes]   (a release build: -O2, e.g. RelWithDebInfo)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "sched/scheduler.h"

namespace {

using namespace std::chrono_literals;
using cohort::Millis;
using namespace cohort::sched;

constexpr int64_t kGi = int64_t{1} << 30;
constexpr int kPasses = 20;

ClusterState buildState(int jobs, int nodes, TimePoint now) {
  std::mt19937_64 rng(20240503);
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };

  ClusterState state;
  for (int n = 0; n < nodes; ++n) {
    state.nodes.push_back(
        Node{"node" + std::to_string(n), Resources{64000, 512 * kGi, 8}});
  }
  for (int a = 0; a < 20; ++a) {
    if (a % 4 == 0) {
      state.quotas["account" + std::to_string(a)] = Quota{.max_gpus = 32, .max_cpu_millis = 256000};
    }
  }

  // Running jobs: fill about two thirds of the GPUs, one node each, random ends.
  std::vector<Resources> free(nodes, Resources{64000, 512 * kGi, 8});
  for (int i = 0; state.running.size() < static_cast<size_t>(nodes) * 2; ++i) {
    Resources r{int64_t{uniform(1, 16)} * 1000, int64_t{uniform(8, 128)} * kGi, uniform(1, 4)};
    int node = uniform(0, nodes - 1);
    if (!r.fitsIn(free[node])) continue;
    free[node] -= r;
    std::optional<TimePoint> end;
    if (uniform(0, 9) > 0) end = now + Millis(int64_t{uniform(1, 600)} * 60000);
    state.running.push_back(Running{"run" + std::to_string(i),
                                    "account" + std::to_string(uniform(0, 19)),
                                    {NodeShare{node, r}}, end});
  }

  // Queued jobs: mostly small GPU jobs, some CPU-only, some whole-node and multi-node gangs.
  for (int i = 0; i < jobs; ++i) {
    Job job;
    job.id = "job" + std::to_string(i);
    job.account = "account" + std::to_string(uniform(0, 19));
    job.priority = uniform(0, 3);
    job.submitted = now - Millis(int64_t{uniform(0, 86400)} * 1000);
    if (uniform(0, 9) < 7) job.max_runtime = Millis(int64_t{uniform(5, 720)} * 60000);
    int kind = uniform(0, 99);
    if (kind < 55) {
      job.roles = {{"worker", 1, Resources{int64_t{uniform(2, 16)} * 1000,
                                           int64_t{uniform(8, 64)} * kGi, uniform(1, 2)}}};
    } else if (kind < 75) {
      job.roles = {{"worker", uniform(1, 2),
                    Resources{int64_t{uniform(1, 32)} * 1000, int64_t{uniform(4, 64)} * kGi, 0}}};
    } else if (kind < 92) {
      job.roles = {{"worker", 1, Resources{32000, 256 * kGi, uniform(4, 8)}}};
    } else if (kind < 98) {
      job.roles = {{"worker", uniform(2, 16), Resources{48000, 384 * kGi, 8}}};
    } else {
      job.roles = {{"ps", uniform(1, 2), Resources{8000, 32 * kGi, 0}},
                   {"worker", uniform(2, 4), Resources{32000, 256 * kGi, 8}}};
    }
    state.queue.push_back(std::move(job));
  }
  return state;
}

}  // namespace

int main(int argc, char** argv) {
  int jobs = argc > 1 ? std::atoi(argv[1]) : 10000;
  int nodes = argc > 2 ? std::atoi(argv[2]) : 100;
  FakeClock clock(TimePoint{std::chrono::sys_days{std::chrono::year{2024} / 5 / 3} + 13h});
  ClusterState state = buildState(jobs, nodes, clock.now());

  std::vector<double> millis;
  Decision decision;
  for (int pass = 0; pass < kPasses; ++pass) {
    auto begin = std::chrono::steady_clock::now();
    auto result = schedule(state, clock);
    auto end = std::chrono::steady_clock::now();
    if (!result) {
      std::fprintf(stderr, "sched_bench: %s\n", result.error().message.c_str());
      return 1;
    }
    millis.push_back(std::chrono::duration<double, std::milli>(end - begin).count());
    decision = std::move(*result);
  }
  std::sort(millis.begin(), millis.end());

  std::map<std::string, int> kinds;
  for (const auto& [id, waiting] : decision.waiting) ++kinds[waitKindName(waiting.kind)];
  std::printf("sched_bench: %d queued jobs, %d nodes, %zu running\n", jobs, nodes,
              state.running.size());
  std::printf("one pass: median %.2f ms (min %.2f, max %.2f) over %d passes\n",
              millis[millis.size() / 2], millis.front(), millis.back(), kPasses);
  std::printf("started %zu jobs; waiting:", decision.start.size());
  for (const auto& [kind, n] : kinds) std::printf(" %s=%d", kind.c_str(), n);
  std::printf("\n");
  if (decision.reservation) {
    std::printf("head: %s: %s\n", decision.reservation->job_id.c_str(),
                decision.waiting[decision.reservation->job_id].reason.c_str());
  }
  return 0;
}
