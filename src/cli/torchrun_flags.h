// torchrun's flags on `cohort run` and `cohort plan`, so that a torchrun command line runs with
// the word `torchrun` swapped for `cohort run`: each flag of torchrun, in both its spellings
// (--nproc-per-node and --nproc_per_node), is one of cohort's own, or means nothing here and is
// accepted with a note that says why, or is refused with the reason and what to use instead.
// The one list of them: the job's flags (job_options.h), their help and the table in
// docs/frameworks.md come from it. Pure; any thread.
#pragma once

#include <string>
#include <vector>

namespace cohort::cli {

struct TorchrunFlag {
  enum class Kind {
    kSame,     // cohort's flag `cohort` does what it does
    kNothing,  // accepted (its value too), with `why` said once on stderr
    kRefused,  // refused with `why`
  };
  std::vector<std::string> names;  // "--max-restarts", "--max_restarts"
  Kind kind;
  bool takes_value;
  std::string cohort;  // kSame: the flag it is
  std::string why;
};

const std::vector<TorchrunFlag>& torchrunFlags();

// The entry that names `flag` (either spelling), or null.
const TorchrunFlag* findTorchrunFlag(const std::string& flag);

}  // namespace cohort::cli
