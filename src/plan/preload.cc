// launcher: preload: every rank of the job is forked from a template process on its node that
// imported the job's `preload` modules once (agent/preload.h does the forking). A rank must be
// `python SCRIPT ARGS...` or `python -m MODULE ARGS...`: the template runs it as that
// interpreter would, in the forked process.
#include "plan/wiring.h"

namespace cohort::plan {

Result<void> wirePreload(Builder& b) {
  std::vector<std::string> modules = b.spec.preload;
  if (!b.spec.preload_given && b.spec.framework == spec::Framework::kPyTorch) modules = {"torch"};
  for (NodePlan& node : b.plan.nodes) {
    if (node.ranks.empty()) continue;
    const std::string python = node.ranks.front().argv.front();
    for (RankPlan& r : node.ranks) {
      const std::vector<std::string>& argv = r.argv;
      const bool script = argv.size() >= 2 && !argv[1].empty() && argv[1][0] != '-';
      const bool module = argv.size() >= 3 && argv[1] == "-m";
      if (!isPython(argv) || !(script || module) || argv[0] != python) {
        return fail(Code::kInvalidArgument,
                    "launcher: preload forks Python ranks: the command must be `python SCRIPT "
                    "ARGS...` or `python -m MODULE ARGS...` (no interpreter options), got '" +
                        join(argv, " ").substr(0, 120) + "'");
      }
      r.preload = true;
    }
    node.preload = Preload{python, modules};
  }
  return {};
}

}  // namespace cohort::plan
