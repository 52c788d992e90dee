// PyTorch: the variables torchrun gives its workers (launcher direct), or one torchrun per node
// with a static rendezvous that keeps cohort's node order (launcher torchrun), or one process
// per node that forks its ranks with mp.spawn and gets --init_method/--rank/--world_size
// (launcher spawn, the managed service's preset-image convention).
#include "plan/wiring.h"

namespace cohort::plan {

namespace {

// For multi-role jobs LOCAL_WORLD_SIZE is the rank's own role's.
void fixLocalWorld(Builder& b, RankPlan& r) {
  for (const spec::Role& role : b.spec.roles) {
    if (role.name == r.role) setEnv(r.env, "LOCAL_WORLD_SIZE", std::to_string(role.procs_per_node));
  }
}

// A rank's stderr into its stdout, then its command: `sh -c 'exec 2>&1; exec "$@"' sh CMD...`.
const char* const kJoinStderr[] = {"/bin/sh", "-c", "exec 2>&1; exec \"$@\"", "sh"};

// torchrun (`python3 -m torch.distributed.run`), except that a node whose ranks failed does not
// wait in torchrun's exit barrier. torchrun waits there for every other node's torchrun to end
// too, up to 300 s that no flag or variable changes (torch 1.13 to 2.x), so a failed node's
// torchrun, and with it the failure, reached cohort only when the other nodes' ranks had ended
// by themselves. Skipped, it exits with its report at once and cohort stops the other nodes,
// as in direct mode. On success the barrier stays: node 0's torchrun serves the store the other
// nodes' ranks meet at (static rendezvous) and must outlive them. A torch without these names
// runs unchanged.
const char* const kTorchrunFailFast =
    "import runpy\n"
    "try:\n"
    "    from torch.distributed.elastic.agent.server import api\n"
    "    barrier = api.SimpleElasticAgent._exit_barrier\n"
    "    def _exit_barrier(agent):\n"
    "        if agent._worker_group.state != api.WorkerState.FAILED: barrier(agent)\n"
    "    api.SimpleElasticAgent._exit_barrier = _exit_barrier\n"
    "except (ImportError, AttributeError):\n"
    "    pass\n"
    "runpy.run_module('torch.distributed.run', run_name='__main__', alter_sys=True)\n";

}  // namespace

const char* const kTorchRankVars[] = {"RANK",            "LOCAL_RANK",       "WORLD_SIZE",
                                      "GROUP_RANK",      "GROUP_WORLD_SIZE", "ROLE_RANK",
                                      "ROLE_WORLD_SIZE", "ROLE_NAME",        "LOCAL_WORLD_SIZE"};

std::string jobOr(const Builder& b, const char* key, const std::string& fallback) {
  for (const auto& [k, v] : b.spec.env) {
    if (k == key) return v;
  }
  return fallback;
}

void setTorchRankVars(Builder& b, RankPlan& r) {
  KeyValues& env = r.env;
  setEnv(env, "MASTER_ADDR", jobOr(b, "MASTER_ADDR", b.ctx.master_addr));
  setEnv(env, "MASTER_PORT", jobOr(b, "MASTER_PORT", b.port(0)));
  setEnv(env, "RANK", std::to_string(r.rank));
  setEnv(env, "WORLD_SIZE", std::to_string(b.plan.world_size));
  setEnv(env, "LOCAL_RANK", std::to_string(r.local_rank));
  setEnv(env, "LOCAL_WORLD_SIZE", std::to_string(b.spec.roles[0].procs_per_node));
  setEnv(env, "GROUP_RANK", std::to_string(r.node));
  setEnv(env, "GROUP_WORLD_SIZE", std::to_string(b.numNodes()));
  setEnv(env, "ROLE_NAME", r.role);
  setEnv(env, "ROLE_RANK", std::to_string(r.role_rank));
  setEnv(env, "ROLE_WORLD_SIZE", std::to_string(r.role_world_size));
  setEnv(env, "TORCHELASTIC_RESTART_COUNT", "0");
  setEnv(env, "TORCHELASTIC_MAX_RESTARTS", std::to_string(b.plan.max_restarts));
  setEnv(env, "TORCHELASTIC_RUN_ID", b.plan.job_id);
}

void wirePyTorch(Builder& b) {
  b.forEachRank([&](NodePlan&, RankPlan& r) {
    setTorchRankVars(b, r);
    fixLocalWorld(b, r);
  });
  const int procs = b.spec.roles[0].procs_per_node;
  const std::string endpoint =
      jobOr(b, "MASTER_ADDR", b.ctx.master_addr) + ":" + jobOr(b, "MASTER_PORT", b.port(0));
  if (b.spec.launcher == spec::Launcher::kTorchrun) {
    b.onePerNode("torchrun", [&](NodePlan& node, RankPlan& r) {
      for (const char* key : kTorchRankVars) unsetEnv(r.env, key);
      const std::vector<std::string>& cmd = r.argv;
      std::vector<std::string> argv = {isPython(cmd) ? cmd[0] : "python3", "-c",
                                       kTorchrunFailFast};
      // Underscored flags: the spelling every torchrun release accepts.
      for (const std::string& flag :
           {"--nnodes=" + std::to_string(b.numNodes()),
            "--node_rank=" + std::to_string(node.node),
            "--nproc_per_node=" + std::to_string(procs),
            // The static rendezvous numbers the nodes by --node_rank, as cohort does: c10d's
            // numbers them in the order they join, and global ranks then land on other nodes
            // than the job's record (rank table, console, root cause) says.
            std::string("--rdzv_backend=static"), "--rdzv_endpoint=" + endpoint,
            "--rdzv_id=" + b.plan.job_id,
            std::string("--max_restarts=0"),  // cohort restarts the whole gang itself
            std::string("--monitor_interval=0.1"),
            // torchrun's own tee: each rank's output goes to its file under the log directory
            // and, every line prefixed "[default<local rank>]:", to torchrun's output, which
            // cohort splits back into the ranks' logs, console prefixes and metrics (`teed`).
            // Stdout only: torch 1.13 on Python 3.11 cannot parse 0 or 3 (its default, and
            // both streams), so each rank's stderr joins its stdout before torchrun's redirect.
            std::string("--redirects=1"), std::string("--tee=1"),
            "--log_dir=" + node.work_dir + "/torchrun", std::string("--no_python")}) {
        argv.push_back(flag);
      }
      argv.insert(argv.end(), std::begin(kJoinStderr), std::end(kJoinStderr));
      if (isPython(cmd)) {
        // What torchrun runs for a script or -m itself: the interpreter, unbuffered.
        argv.insert(argv.end(), {cmd[0], "-u"});
        argv.insert(argv.end(), cmd.begin() + 1, cmd.end());
      } else {
        argv.insert(argv.end(), cmd.begin(), cmd.end());
      }
      r.tee_prefix = "default";  // torchrun's role name; cohort refuses --role
      for (const RankPlan& rank : node.ranks) {
        r.teed.push_back({rank.name, rank.rank, rank.log_file, rank.console});
      }
      // torchrun writes the teed lines to its stdout, a pipe: unbuffered, each line is one
      // write and reaches cohort as it is written. The ranks run `python -u` anyway.
      if (!hasEnv(b.spec.env, "PYTHONUNBUFFERED")) setEnv(r.env, "PYTHONUNBUFFERED", "1");
      r.argv = std::move(argv);
    });
  } else if (b.spec.launcher == spec::Launcher::kSpawn) {
    b.onePerNode("spawn", [&](NodePlan& node, RankPlan& r) {
      for (const char* key : kTorchRankVars) unsetEnv(r.env, key);
      setEnv(r.env, "LOCAL_WORLD_SIZE", std::to_string(procs));  // how many to spawn
      for (const std::string& arg :
           {std::string("--init_method"), "tcp://" + endpoint, std::string("--rank"),
            std::to_string(node.node), std::string("--world_size"),
            std::to_string(b.numNodes())}) {
        r.argv.push_back(arg);
      }
    });
  }
}

}  // namespace cohort::plan
