// Internal to the planner: the state shared by the core (roles x nodes x ranks, the COHORT_*
// contract) and the per-framework wiring files (pytorch.cc, mindspore.cc, tensorflow.cc, mpi.cc,
// modelarts.cc). Each wire* function edits the plan in place. Pure, like the planner.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "job/layout.h"
#include "plan/plan.h"

namespace cohort::plan {

struct Builder {
  const spec::JobSpec& spec;
  const PlanContext& ctx;
  Plan& plan;
  std::vector<std::string> hosts;  // per node

  // Port `i` of the leased ports, or "auto" in a dry plan.
  std::string port(size_t i) const {
    return i < ctx.ports.size() ? std::to_string(ctx.ports[i]) : "auto";
  }
  int numNodes() const { return static_cast<int>(plan.nodes.size()); }

  // Calls `fn` on every process of the plan.
  void forEachRank(const std::function<void(NodePlan&, RankPlan&)>& fn) {
    for (NodePlan& node : plan.nodes) {
      for (RankPlan& r : node.ranks) fn(node, r);
    }
  }

  // Replaces each node's ranks with one process made from the node's first rank by `make`
  // (torchrun, mp.spawn): the process keeps the node's identity, not one rank's.
  void onePerNode(const std::string& name,
                  const std::function<void(NodePlan&, RankPlan&)>& make);
};

// Gives `launcher`, one process that starts `ranks` and shares their cgroup, their requests
// together: the sum of their CPUs, and of their memory (not limited when one of them is not).
void takeRequestsOf(RankPlan& launcher, const std::vector<const RankPlan*>& ranks);

void setEnv(KeyValues& env, const std::string& key, const std::string& value);
void unsetEnv(KeyValues& env, const std::string& key);
bool hasEnv(const KeyValues& env, const std::string& key);

// PyTorch's rank contract (pytorch.cc), which DeepSpeed's launcher gives its ranks too: the
// variables torchrun sets for rank `r`, MASTER_ADDR and MASTER_PORT the job's own when it sets
// them. kTorchRankVars are those that describe one rank, which a per-node launcher must not
// carry to its children.
extern const char* const kTorchRankVars[9];
void setTorchRankVars(Builder& b, RankPlan& r);
// The job's own value of `key` (env:, --env, --master-port), else `fallback`: an explicit
// MASTER_ADDR or MASTER_PORT is where the ranks and a launcher's rendezvous meet, never replaced.
std::string jobOr(const Builder& b, const char* key, const std::string& fallback);

// True when argv[0] names a Python interpreter ("python3", "/usr/bin/python3.11").
bool isPython(const std::vector<std::string>& argv);

void wirePyTorch(Builder& b);
void wireMindSpore(Builder& b);
void wireTensorFlow(Builder& b);
void wireMpi(Builder& b);
void wireDeepSpeed(Builder& b);
void wireModelArts(Builder& b);
void isolate(Builder& b);
// Every process runs in PlanContext::image (container.cc). Errors: kInvalidArgument for what
// cannot run in an image (--isolate, another user's identity, workdir '/').
Result<void> runInImage(Builder& b);
void wireDebug(Builder& b);
Result<void> wirePreload(Builder& b);

}  // namespace cohort::plan
