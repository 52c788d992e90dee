// --isolate: every process of the job runs under bubblewrap, in namespaces of its own:
// - a mount namespace where cohort's data root (every job's directory, the store, the server's
//   database and tokens) is hidden behind an empty tmpfs, and only this job's work/ and output/
//   (read-write), its files/ and logs/ (read-only), and the store paths its inputs link to
//   (read-only) are put back, and the rest of it is read-only; the job's record (plan, events,
//   result) is not there at all;
// - a PID namespace with its own /proc: no other process of the machine can be seen, signalled
//   or traced, and when the sandbox's first process dies (it dies with the agent), the kernel
//   kills everything in it, setsid descendants included;
// - a user namespace when the rank runs as an ordinary user (the agent sets the rank's uid
//   before bubblewrap starts); run as root, bubblewrap drops every capability.
// The rest of the machine stays as it is (devices, network, /tmp), so GPUs and rendezvous over
// the network work unchanged.
//
// Signals: cohort stops a rank by signalling its process group, which holds the outer
// bubblewrap as well as the rank inside. bubblewrap would die of SIGTERM and take the rank with
// it before it could save anything, so it is started with the stop signals ignored
// (`env --ignore-signal`), and the rank's own defaults are restored inside
// (`env --default-signal`); the job's policy.stop_signal is one of them when it is another
// (SIGUSR1's default would end bubblewrap as well). A rank killed by a signal inside exits with
// 128 + the signal.
#include <algorithm>

#include "plan/wiring.h"
#include "util/text.h"

namespace cohort::plan {

void isolate(Builder& b) {
  const std::string& root = b.ctx.data_root;
  const job::Layout layout(b.ctx.job_dir);
  std::string stops = "TERM,INT,HUP";
  const std::string stop = spec::stopSignalName(b.plan.stop_signal).substr(3);
  const std::vector<std::string> defaults = split(stops, ',');
  if (std::find(defaults.begin(), defaults.end(), stop) == defaults.end()) stops += "," + stop;
  std::vector<std::string> common = {
      "env",      "--ignore-signal=" + stops,     "bwrap",         "--dev-bind", "/", "/",
      "--tmpfs",  root,                           "--ro-bind",     layout.filesDir(),
      layout.filesDir(), "--ro-bind",             layout.logsDir(), layout.logsDir(),
      "--bind",   layout.workDir(),               layout.workDir(), "--bind",
      layout.outputDir(), layout.outputDir()};
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
    // What is left of the data root is the empty tmpfs with the mount points: read-only, so that
    // a write to the job's record fails instead of landing in the tmpfs.
    node_args.emplace_back("--remount-ro");
    node_args.emplace_back(root);
    for (const char* arg : {"--unshare-pid", "--proc", "/proc", "--die-with-parent"}) {
      node_args.emplace_back(arg);
    }
    for (RankPlan& r : node.ranks) {
      std::vector<std::string> argv = node_args;
      if (r.uid < 0 && b.ctx.as_root) {
        argv.emplace_back("--cap-drop");
        argv.emplace_back("ALL");
      }
      for (const std::string& arg :
           {std::string("--"), std::string("env"), "--default-signal=" + stops}) {
        argv.push_back(arg);
      }
      argv.insert(argv.end(), r.argv.begin(), r.argv.end());
      r.argv = std::move(argv);
    }
  }
}

}  // namespace cohort::plan
