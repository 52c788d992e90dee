// Staging: before any rank of a job starts, every node's agent puts the job's inputs into the
// node's work directory: a verified parallel copy (storage::copyTree), or a symbolic link to the
// source for inputs with mode `link`. The coordinator starts the ranks only when every node has
// staged, so no rank waits in a rendezvous for another node's slow copy.
// stageInputs blocks; the agent runs it on a thread of its own.
#pragma once

#include <cstdint>

#include "plan/plan.h"
#include "util/result.h"

namespace cohort::agent {

struct StagingResult {
  int64_t files = 0;  // files copied or skipped as identical, plus links made
  int64_t bytes = 0;  // bytes copied
  double seconds = 0;
};

// Creates the node's work directory and stages its inputs. Errors name the input and the file:
// "input 'store://datasets/digits': copy 'a.bin': No space left on device".
Result<StagingResult> stageInputs(const plan::NodePlan& node);

}  // namespace cohort::agent
