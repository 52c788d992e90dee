// A node's data path. Staging: before any rank of a job starts, every node's agent puts the
// job's inputs into the node's work directory: a verified parallel copy (storage::copyTree), or a
// symbolic link to the source for inputs with mode `link`. The coordinator starts the ranks only
// when every node has staged, so no rank waits in a rendezvous for another node's slow copy.
// After the ranks, outputs are copied where the job file says: by the coordinator from the job
// directory it shares with the nodes, and by each node whose job directory is its own (no shared
// filesystem) from that one.
// Everything here blocks; the agent runs it on a thread of its own.
#pragma once

#include <cstdint>

#include "account/as_account.h"
#include "plan/plan.h"
#include "util/result.h"

namespace cohort::agent {

struct StagingResult {
  int64_t files = 0;  // files copied or skipped as identical, plus links made
  int64_t bytes = 0;  // bytes copied
  double seconds = 0;
};

// The identity the node's ranks run as: everything done with their files is done as it
// (account/as_account.h).
account::Identity ranksIdentity(const plan::NodePlan& node);

// Creates the node's work directory and its scratch directories, and stages its inputs, all of
// it as the ranks' user (a process of the account's own when that is not the agent's user).
// Errors name the input and the file: "input 'store://datasets/digits': copy 'a.bin': No space
// left on device".
Result<StagingResult> stageInputs(const plan::NodePlan& node);

// Removes the node's scratch directories (a sandboxed job's own /tmp, /dev/shm, ...) with all
// the ranks left in them, links removed, never followed, as the ranks' user. Call once no rank
// runs. Errors: kIo naming the directory.
Result<void> removeScratchDirs(const plan::NodePlan& node);

// True when `job_dir` holds the mark the coordinator wrote there (job::Layout::markFile()): this
// node sees the coordinator's job directory, not one of its own.
bool sharesJobDir(const std::string& job_dir, const std::string& mark);

// On a node whose job directory is its own: makes what the coordinator made in its own (files/,
// logs/, output/ for the ranks' user), before staging.
Result<void> prepareOwnJobDir(const std::string& job_dir, const plan::NodePlan& node);

// Writes a file cohort generated for the ranks (a rank table, the hostfile) into the job
// directory's files/; any other path is refused.
Result<void> writeJobFile(const std::string& job_dir, const std::string& path,
                          const std::string& content);

struct Copied {
  int64_t files = 0;  // copied or skipped as identical
  int64_t bytes = 0;  // bytes copied
};

// Copies one output to its target as `as` (the ranks' user). The ranks wrote its source: no
// link in it is followed (docs/security.md).
Result<Copied> copyOutput(const plan::OutputPlan& output, const account::Identity& as);

}  // namespace cohort::agent
