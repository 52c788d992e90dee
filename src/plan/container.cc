// environment: {image: REF}: every process of the job runs in the image's root file system.
// Each rank's argv becomes
//
//   cohort env exec --image REF --layer DIR... --bind PATH... --ro-bind PATH... --unset VAR...
//       -- ARGV
//
// which (env/image_exec.h) puts the process in a mount namespace of its own whose root is the
// image's layers (from podman's storage, with a writable layer in memory), binds the job's
// directories in at the same paths, and then executes ARGV in place: the rank stays the process
// the agent started (its pid, process group, cgroup, death signal, exit status and signals are
// the ones a rank without an image has), so supervision does not change. The network, the
// process table and the devices are the host's, as with `podman run --network host --pid host`.
//
// What is bound in: the job's work/ and output/ (read-write), files/ and logs/ (read-only), the
// job's workdir (read-write, or read-only when it lies in cohort's data root: a server's copy of
// uploaded code), and the sources of inputs staged as links (read-only). Nothing else of the
// machine is there; the image's variables (PATH first) come with the environment
// (PlanContext::environment), and the host's loader and Python variables that the job does not
// set itself are unset, so the image's programs do not load the host's libraries.
#include <algorithm>

#include "plan/wiring.h"
#include "util/text.h"

namespace cohort::plan {

namespace {

// Variables of the launcher's own environment that would make the image's programs load the
// host's libraries or modules.
constexpr const char* kHostOnly[] = {"LD_LIBRARY_PATH", "LD_PRELOAD",    "PYTHONPATH",
                                     "PYTHONHOME",      "PYTHONSTARTUP", "PYTHONUSERBASE",
                                     "VIRTUAL_ENV",     "CONDA_PREFIX"};

bool under(const std::string& path, const std::string& dir) {
  return path == dir || startsWith(path, dir + "/");
}

}  // namespace

Result<void> runInImage(Builder& b) {
  const Image& image = *b.ctx.image;
  if (b.ctx.isolate) {
    return fail(Code::kInvalidArgument,
                "environment.image: an image's ranks already see only the image and the job's "
                "directories; --isolate (a PID namespace and the account's identity around each "
                "rank) is not built for images yet: leave it out, or name a preset or saved "
                "environment");
  }
  if (b.ctx.uid >= 0) {
    return fail(Code::kInvalidArgument,
                "environment.image: ranks that run as another user (--run-as, a server's "
                "accounts) cannot run in an image yet");
  }
  if (b.ctx.workdir == "/") {
    return fail(Code::kInvalidArgument,
                "workdir: '/' would be bound over the image's own root: use the directory that "
                "holds the job's code");
  }
  const job::Layout layout(b.ctx.job_dir);
  std::vector<std::string> head = {b.ctx.cohort_bin.empty() ? "cohort" : b.ctx.cohort_bin, "env",
                                   "exec", "--image", image.ref};
  for (const std::string& layer : image.layers) {
    head.push_back("--layer");
    head.push_back(layer);
  }
  const bool code_in_data_root = !b.ctx.data_root.empty() && under(b.ctx.workdir, b.ctx.data_root);
  std::vector<std::pair<std::string, std::string>> common = {
      {code_in_data_root ? "--ro-bind" : "--bind", b.ctx.workdir},
      {"--bind", layout.workDir()},
      {"--bind", layout.outputDir()},
      {"--ro-bind", layout.filesDir()},
      {"--ro-bind", layout.logsDir()}};
  for (NodePlan& node : b.plan.nodes) {
    node.image = image;
    std::vector<std::pair<std::string, std::string>> binds = common;
    for (const StagedInput& in : node.inputs) {
      if (in.link) binds.emplace_back("--ro-bind", in.source);
    }
    std::vector<std::string> node_head = head;
    for (const auto& [flag, path] : binds) {
      node_head.push_back(flag);
      node_head.push_back(path);
    }
    for (RankPlan& r : node.ranks) {
      std::vector<std::string> argv = node_head;
      for (const char* var : kHostOnly) {
        if (!hasEnv(r.env, var)) {
          argv.emplace_back("--unset");
          argv.emplace_back(var);
        }
      }
      argv.emplace_back("--");
      argv.insert(argv.end(), r.argv.begin(), r.argv.end());
      r.argv = std::move(argv);
    }
  }
  return {};
}

}  // namespace cohort::plan
