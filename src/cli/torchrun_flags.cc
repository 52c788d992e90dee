#include "cli/torchrun_flags.h"

#include <algorithm>

namespace cohort::cli {

namespace {

using Kind = TorchrunFlag::Kind;

// Both spellings of a torchrun flag: "nproc-per-node" -> --nproc-per-node, --nproc_per_node.
std::vector<std::string> spellings(const std::string& dashed) {
  std::string underscored = dashed;
  std::replace(underscored.begin(), underscored.end(), '-', '_');
  if (underscored == dashed) return {"--" + dashed};
  return {"--" + dashed, "--" + underscored};
}

TorchrunFlag same(const std::string& name, bool value, const std::string& cohort) {
  return {spellings(name), Kind::kSame, value, cohort, ""};
}
// torchrun's short name for a flag too: -m for --module.
TorchrunFlag withShort(TorchrunFlag flag, const std::string& short_name) {
  flag.names.push_back(short_name);
  return flag;
}
TorchrunFlag nothing(const std::string& name, bool value, const std::string& why) {
  return {spellings(name), Kind::kNothing, value, "", why};
}
TorchrunFlag refused(const std::string& name, bool value, const std::string& why) {
  return {spellings(name), Kind::kRefused, value, "", why};
}

const std::string kRendezvous =
    "cohort's coordinator is every job's rendezvous, on a port it leases for the job";

}  // namespace

const std::vector<TorchrunFlag>& torchrunFlags() {
  static const std::vector<TorchrunFlag> kFlags = {
      same("nnodes", true, "--nodes"),
      same("nproc-per-node", true, "--nproc-per-node"),
      same("max-restarts", true, "--max-restarts"),
      same("master-port", true, "--env MASTER_PORT="),
      withShort(same("module", false, "--module"), "-m"),
      same("no-python", false, "--no-python"),
      same("run-path", false, "--run-path"),
      nothing("standalone", false, kRendezvous + ": a job of one node needs nothing more"),
      nothing("rdzv-backend", true, kRendezvous),
      nothing("rdzv-id", true, kRendezvous + ", under the job's id"),
      nothing("rdzv-conf", true, kRendezvous),
      nothing("monitor-interval", true,
              "cohort sees a rank's exit the moment it happens (a pidfd), without polling"),
      nothing("start-method", true, "cohort starts every rank as a process of its own"),
      nothing("log-dir", true,
              "every rank's whole output is in the job directory's logs/ (cohort logs JOB)"),
      withShort(nothing("tee", true,
                        "cohort keeps every rank's output in its log and shows it on the "
                        "terminal, prefixed [role/rank node]"),
                "-t"),
      withShort(nothing("redirects", true,
                        "cohort keeps every rank's output in its log and shows it on the "
                        "terminal, prefixed [role/rank node]"),
                "-r"),
      nothing("logs-specs", true,
              "every rank's whole output is in the job directory's logs/ (cohort logs JOB)"),
      refused("rdzv-endpoint", true,
              kRendezvous +
                  ": cohort run starts every node itself (here, or on a cluster with --backend "
                  "slurm or volcano); to fix the port the ranks meet on, --env MASTER_PORT=N"),
      refused("master-addr", true,
              "the ranks' MASTER_ADDR is node 0's address, which cohort knows; --env "
              "MASTER_ADDR=... names another one"),
      refused("node-rank", true,
              "cohort run starts every node of the job itself, each with its node rank"),
      refused("local-ranks-filter", true,
              "--log-ranks RANKS shows only these ranks' output (global ranks: 0,2-3)"),
      refused("role", true, "a job's roles are named in its job file (roles:)"),
      refused("local-addr", true,
              "each node says the address it reaches the coordinator from; network: {interface: "
              "NAME} or {cidr: NET} in the job file picks another"),
  };
  return kFlags;
}

const TorchrunFlag* findTorchrunFlag(const std::string& flag) {
  for (const TorchrunFlag& f : torchrunFlags()) {
    if (std::find(f.names.begin(), f.names.end(), flag) != f.names.end()) return &f;
  }
  return nullptr;
}

}  // namespace cohort::cli
