// An environment on a node that may not see it: the node's agent, while it stages the job's
// inputs and before any rank starts, looks for each layer of the job's environment (bottom
// first) at the path the planner saw it at. A layer there whose env.json carries the plan's
// content hash is used as it is: a file system every node shares, or this node's own copy from
// an earlier job. Otherwise the node builds its own copy at that same path (so the ranks' PATH
// and VIRTUAL_ENV in the plan hold) from what the plan carries: a preset from its definition, a
// saved environment from its lock file, as the ranks' user (and in the sandbox when the ranks
// are sandboxed: env/confined_build.h). Builds of one content hash on one node are serialised
// (a lock file beside the store), so two jobs that start at once build it once, and the second
// job on a node finds it built. Blocking: the agent runs it on its staging thread.
#pragma once

#include <string>
#include <vector>

#include "env/confined_build.h"
#include "plan/plan.h"
#include "util/result.h"

namespace cohort::env {

struct NodeCopy {
  int found = 0;  // layers that were there
  int built = 0;  // layers built here now
};

// Finds or builds every layer of `layers` (bottom first) on this node. A saved layer is built
// by `cohort_bin` under `how`; a preset by this process. Errors: kUnavailable with pip's words
// when a build fails; kFailedPrecondition when a layer built here does not have the plan's
// content hash; kIo when its directory cannot be made.
Result<NodeCopy> copyToNode(const std::vector<plan::EnvironmentLayer>& layers,
                            const std::string& cohort_bin, const Confinement& how,
                            const Progress& progress);

}  // namespace cohort::env
