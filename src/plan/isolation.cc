// --isolate: every process of the job runs under bubblewrap in a private mount namespace where
// cohort's data root (every job's directory and the store) is hidden behind an empty tmpfs, and
// only this job's own directory, plus the store paths its inputs link to (read-only), are put
// back. The rest of the machine stays as it is (devices, network, /tmp), so GPUs and rendezvous
// over the network work unchanged. bubblewrap starts a sandbox in a few milliseconds and needs no
// daemon; it is run without a PID namespace or a new session so that cohort's signals to the
// rank's process group still reach the rank.
#include "plan/wiring.h"
#include "util/text.h"

namespace cohort::plan {

void isolate(Builder& b) {
  const std::string& root = b.ctx.data_root;
  std::vector<std::string> common = {"bwrap", "--dev-bind", "/", "/", "--tmpfs", root,
                                     "--bind", b.ctx.job_dir, b.ctx.job_dir};
  if (startsWith(b.ctx.workdir, root + "/")) {
    for (const char* arg : {"--ro-bind", b.ctx.workdir.c_str(), b.ctx.workdir.c_str()}) {
      common.emplace_back(arg);
    }
  }
  for (NodePlan& node : b.plan.nodes) {
    std::vector<std::string> node_args = common;
    for (const StagedInput& in : node.inputs) {
      if (in.link && startsWith(in.source, root + "/")) {
        for (const std::string& arg : {std::string("--ro-bind"), in.source, in.source}) {
          node_args.push_back(arg);
        }
      }
    }
    node_args.emplace_back("--die-with-parent");
    node_args.emplace_back("--");
    for (RankPlan& r : node.ranks) {
      std::vector<std::string> argv = node_args;
      argv.insert(argv.end(), r.argv.begin(), r.argv.end());
      r.argv = std::move(argv);
    }
  }
}

}  // namespace cohort::plan
