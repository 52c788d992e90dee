#include <algorithm>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "plan/plan.h"
#include "plan/python_helpers.h"
#include "plan/wiring.h"
#include "util/text.h"

namespace cohort::plan {

void setEnv(KeyValues& env, const std::string& key, const std::string& value) {
  for (auto& kv : env) {
    if (kv.first == key) {
      kv.second = value;
      return;
    }
  }
  env.emplace_back(key, value);
}

void unsetEnv(KeyValues& env, const std::string& key) {
  env.erase(std::remove_if(env.begin(), env.end(), [&](const auto& kv) { return kv.first == key; }),
            env.end());
}

bool hasEnv(const KeyValues& env, const std::string& key) {
  return std::any_of(env.begin(), env.end(), [&](const auto& kv) { return kv.first == key; });
}

bool isPython(const std::vector<std::string>& argv) {
  if (argv.empty()) return false;
  std::string base = argv[0].substr(argv[0].rfind('/') + 1);
  return startsWith(base, "python");
}

void takeRequestsOf(RankPlan& launcher, const std::vector<const RankPlan*>& ranks) {
  launcher.cpus = 0;
  launcher.memory_bytes = 0;
  launcher.pids = 0;
  bool unlimited_memory = false, unlimited_cpus = false, unlimited_pids = false;
  for (const RankPlan* r : ranks) {
    launcher.cpus += r->cpus;
    launcher.memory_bytes += r->memory_bytes;
    launcher.pids += r->pids;
    unlimited_memory = unlimited_memory || r->memory_bytes == 0;
    unlimited_cpus = unlimited_cpus || r->cpus == 0;
    unlimited_pids = unlimited_pids || r->pids == 0;
  }
  if (unlimited_memory) launcher.memory_bytes = 0;
  if (unlimited_cpus) launcher.cpus = 0;
  if (unlimited_pids) launcher.pids = 0;
}

void Builder::onePerNode(const std::string& name,
                         const std::function<void(NodePlan&, RankPlan&)>& make) {
  for (NodePlan& node : plan.nodes) {
    RankPlan launcher = node.ranks.front();
    launcher.name = name + "/node" + std::to_string(node.node);
    launcher.rank = node.node;
    launcher.role_rank = node.node;
    launcher.local_rank = 0;
    launcher.log_file =
        job::Layout(ctx.job_dir).logFile(name + "-node" + std::to_string(node.node));
    launcher.console = std::any_of(node.ranks.begin(), node.ranks.end(),
                                   [](const RankPlan& r) { return r.console; });
    // The launcher gives its ranks their identities; it has only the node's, and all of the
    // node's devices.
    for (const char* key : {"COHORT_RANK", "COHORT_LOCAL_RANK", "COHORT_ROLE_RANK"}) {
      unsetEnv(launcher.env, key);
    }
    // One file for the node's ranks under it: any of them touching it is the launcher's sign
    // of life.
    setEnv(launcher.env, "COHORT_HEARTBEAT_FILE",
           job::Layout(ctx.job_dir).heartbeatFile(node.node, launcher.rank));
    std::vector<std::string> devices;
    for (const RankPlan& r : node.ranks) {
      for (const auto& [k, v] : r.env) {
        if (k == "CUDA_VISIBLE_DEVICES") devices.push_back(v);
      }
    }
    if (!devices.empty()) setEnv(launcher.env, "CUDA_VISIBLE_DEVICES", join(devices, ","));
    std::vector<const RankPlan*> started;
    for (const RankPlan& r : node.ranks) started.push_back(&r);
    takeRequestsOf(launcher, started);
    make(node, launcher);
    node.ranks = {std::move(launcher)};
  }
}

int portsNeeded(const spec::JobSpec& spec) {
  int ports = 1;
  if (spec.framework == spec::Framework::kTensorFlow) ports += spec::totalProcs(spec);
  return ports;
}

namespace {

std::string rankTable(const Plan& plan) {
  nlohmann::ordered_json ranks = nlohmann::ordered_json::array();
  for (const NodePlan& node : plan.nodes) {
    for (const RankPlan& r : node.ranks) {
      ranks.push_back(nlohmann::ordered_json{{"rank", r.rank},
                                             {"role", r.role},
                                             {"role_rank", r.role_rank},
                                             {"node", r.node},
                                             {"host", node.host},
                                             {"local_rank", r.local_rank}});
    }
  }
  nlohmann::ordered_json table = {{"version", 1},
                                  {"job_id", plan.job_id},
                                  {"world_size", plan.world_size},
                                  {"num_nodes", plan.nodes.size()},
                                  {"ranks", ranks}};
  return table.dump(2) + "\n";
}

// Where `path` is in the store on disk, if it is there.
InStore inStore(const PlanContext& ctx, const std::string& path) {
  const std::string top = ctx.store_dir + "/";
  if (ctx.store_dir.empty() || !startsWith(path, top) || path.size() == top.size()) return {};
  const std::string rest = path.substr(top.size());
  const size_t slash = rest.find('/');
  InStore in;
  in.bucket_dir = top + rest.substr(0, slash);
  if (slash != std::string::npos) in.key = rest.substr(slash + 1);
  while (!in.key.empty() && in.key.back() == '/') in.key.pop_back();
  return in;
}

// The input root a local input of a job that has them must be below, compared part by part as
// written (".." and "." refused: the path is opened below the root without following a link, so
// that what is written is what is read). "" for an input of the store, an URI, or a job without
// input roots.
Result<std::string> inputRoot(const PlanContext& ctx, const spec::Input& in, size_t index) {
  const std::string& path = in.source_path;
  if (ctx.input_roots.empty() || path.empty() || path[0] != '/' || !inStore(ctx, path).empty()) {
    return std::string();
  }
  bool plain = true;
  for (const std::string& part : split(path, '/')) plain = plain && part != "." && part != "..";
  for (const std::string& root : ctx.input_roots) {
    if (plain && (path == root || startsWith(path, root == "/" ? root : root + "/"))) return root;
  }
  return fail(Code::kInvalidArgument,
              "inputs[" + std::to_string(index) + "].source: '" + in.source +
                  "' is not below a directory this server takes inputs from (" +
                  join(ctx.input_roots, ", ") + ")");
}

// One device per rank: on simulated nodes the machine's devices are spread over every rank of
// the job; on real nodes each node's ranks use that node's devices by local rank.
void assignDevices(Builder& b) {
  if (b.ctx.gpus.empty()) return;
  int index = 0;
  b.forEachRank([&](NodePlan&, RankPlan& r) {
    int slot = b.ctx.nodes_share_machine ? index++ : r.local_rank;
    int gpu = b.ctx.gpus[static_cast<size_t>(slot) % b.ctx.gpus.size()];
    setEnv(r.env, "CUDA_VISIBLE_DEVICES", std::to_string(gpu));
  });
}

}  // namespace

Result<Plan> makePlan(const spec::JobSpec& spec, const PlanContext& ctx) {
  COHORT_TRY(spec::validate(spec));
  // A MASTER_PORT of the job's own is honoured (pytorch.cc): it must be one.
  for (const auto& [k, v] : spec.env) {
    auto port = parseInt(v);
    if (k == "MASTER_PORT" && (!port || *port < 1 || *port > 65535)) {
      return fail(Code::kInvalidArgument,
                  spec::fieldLabel(spec, "env.MASTER_PORT") + "'" + v +
                      "' is not a port (1 to 65535); leave MASTER_PORT out and cohort leases one "
                      "for the job");
    }
  }
  // The machine's side of the plan goes into its JSON too (the job's variables, plan.json).
  for (const auto& [what, path] :
       {std::pair{"the job directory", &ctx.job_dir}, std::pair{"the work directory", &ctx.workdir},
        std::pair{"the data root", &ctx.data_root},
        std::pair{"the cohort binary's path", &ctx.cohort_bin}}) {
    if (!validUtf8(*path)) {
      return fail(Code::kInvalidArgument,
                  std::string(what) + " '" + *path +
                      "' is not UTF-8 text, which a job's plan must be: use a directory whose "
                      "name is (--data-root, --workdir, or run cohort from another directory)");
    }
  }
  for (const spec::Role& role : spec.roles) {
    if (role.procs_per_node == spec::kAutoProcs) {
      return fail(Code::kInvalidArgument,
                  "roles." + role.name + ".procs_per_node: 'auto' was not resolved");
    }
  }
  Plan plan;
  plan.job_id = ctx.job_id;
  plan.job_name = spec.name;
  plan.job_dir = ctx.job_dir;
  plan.workdir = ctx.workdir;
  plan.framework = spec::frameworkName(spec.framework);
  plan.world_size = spec::totalProcs(spec);
  plan.max_restarts = spec.policy.max_restarts;
  plan.grace_period_ms = spec.policy.grace_period.count();
  plan.heartbeat_timeout_ms = spec.policy.heartbeat_timeout.count();
  plan.max_runtime_ms = spec.policy.max_runtime ? spec.policy.max_runtime->count() : 0;
  plan.hang_timeout_ms = spec.policy.hang_timeout ? spec.policy.hang_timeout->count() : 0;
  plan.startup_timeout_ms = spec.policy.startup_timeout ? spec.policy.startup_timeout->count() : 0;
  plan.stop_signal = spec.policy.stop_signal;

  plan.machines = ctx.machines;
  Builder b{spec, ctx, plan, {}};
  const int num_nodes = spec::totalNodes(spec);
  const std::vector<std::string> key_roles = spec::keyRoles(spec);
  const job::Layout layout(ctx.job_dir);
  const std::string rank_table_path = layout.rankTableFile();
  for (int n = 0; n < num_nodes; ++n) {
    b.hosts.push_back(n < static_cast<int>(ctx.hosts.size()) ? ctx.hosts[n] : ctx.master_addr);
  }
  std::vector<std::string> argv = spec.command;
  for (const auto& [key, value] : spec.hyperparameters) argv.push_back("--" + key + "=" + value);
  for (const spec::Output& out : spec.outputs) {
    std::string source = ctx.job_dir + "/" + out.source;
    while (source.size() > 1 && source.back() == '/') source.pop_back();
    plan.outputs.push_back({source, out.target_path, out.always, inStore(ctx, out.target_path)});
  }
  std::vector<std::string> beneath;
  for (size_t i = 0; i < spec.inputs.size(); ++i) {
    COHORT_ASSIGN(std::string root, inputRoot(ctx, spec.inputs[i], i));
    beneath.push_back(std::move(root));
  }

  int node_index = 0;
  int rank = 0;
  for (const spec::Role& role : spec.roles) {
    const int role_world = role.nodes * role.procs_per_node;
    const bool key = std::find(key_roles.begin(), key_roles.end(), role.name) != key_roles.end();
    for (int n = 0; n < role.nodes; ++n, ++node_index) {
      NodePlan node{node_index, b.hosts[node_index], layout.nodeWorkDir(node_index), {}, {}};
      std::vector<std::string> node_argv = argv;
      for (size_t i = 0; i < spec.inputs.size(); ++i) {
        const spec::Input& in = spec.inputs[i];
        std::string target = node.work_dir + "/" + in.target;
        while (target.back() == '/') target.pop_back();
        node.inputs.push_back({in.source_path, target, in.mode == spec::Input::Mode::kLink,
                               beneath[i], inStore(ctx, in.source_path)});
        if (!in.arg.empty()) node_argv.push_back("--" + in.arg + "=" + target);
      }
      for (int local = 0; local < role.procs_per_node; ++local, ++rank) {
        RankPlan r;
        r.role = role.name;
        r.role_rank = n * role.procs_per_node + local;
        r.name = role.name + "/" + std::to_string(r.role_rank);
        r.role_world_size = role_world;
        r.rank = rank;
        r.local_rank = local;
        r.node = node_index;
        r.argv = node_argv;
        r.key = key;
        r.console = ctx.console_ranks.empty() || ctx.console_ranks.count(rank) > 0;
        r.log_file = layout.logFile(role.name + "-" + std::to_string(r.role_rank));
        r.cpus = role.resources.cpus_given ? role.resources.cpus : 0;  // 0: not limited
        r.memory_bytes = role.resources.memory_bytes;
        r.pids = role.resources.pids;

        KeyValues& env = r.env;
        for (const auto& kv : spec.env) setEnv(env, kv.first, kv.second);
        for (const auto& kv : ctx.environment) setEnv(env, kv.first, kv.second);
        if (role.procs_per_node > 1 && !hasEnv(spec.env, "OMP_NUM_THREADS")) {
          setEnv(env, "OMP_NUM_THREADS", "1");  // as torchrun does, so N ranks do not fight
        }
        setEnv(env, "COHORT_JOB_ID", plan.job_id);
        setEnv(env, "COHORT_JOB_NAME", plan.job_name);
        setEnv(env, "COHORT_ROLE", role.name);
        setEnv(env, "COHORT_ROLE_RANK", std::to_string(r.role_rank));
        setEnv(env, "COHORT_ROLE_WORLD_SIZE", std::to_string(role_world));
        setEnv(env, "COHORT_RANK", std::to_string(rank));
        setEnv(env, "COHORT_WORLD_SIZE", std::to_string(plan.world_size));
        setEnv(env, "COHORT_LOCAL_RANK", std::to_string(local));
        setEnv(env, "COHORT_LOCAL_WORLD_SIZE", std::to_string(role.procs_per_node));
        setEnv(env, "COHORT_NODE_RANK", std::to_string(node_index));
        setEnv(env, "COHORT_NUM_NODES", std::to_string(num_nodes));
        setEnv(env, "COHORT_MASTER_ADDR", ctx.master_addr);
        setEnv(env, "COHORT_MASTER_PORT", b.port(0));
        setEnv(env, "COHORT_HOSTS", join(b.hosts, ","));
        setEnv(env, "COHORT_RANK_TABLE_FILE", rank_table_path);
        setEnv(env, "COHORT_OUTPUT_DIR", layout.outputDir());
        setEnv(env, "COHORT_WORK_DIR", node.work_dir);
        setEnv(env, "COHORT_LOG_DIR", layout.logsDir());
        setEnv(env, "COHORT_RESTART_COUNT", "0");
        // A graceful stop's notice (docs/observing.md): the signal, and where cohort.heartbeat()
        // says the rank is alive without printing.
        setEnv(env, "COHORT_STOP_SIGNAL", spec::stopSignalName(plan.stop_signal));
        setEnv(env, "COHORT_HEARTBEAT_FILE", layout.heartbeatFile(node_index, rank));
        // So that the Python helpers' cohort.copy() finds the binary and the store.
        if (!ctx.cohort_bin.empty()) setEnv(env, "COHORT_BIN", ctx.cohort_bin);
        if (!ctx.data_root.empty()) setEnv(env, "COHORT_DATA_ROOT", ctx.data_root);
        // The collectives' own sockets (gloo, NCCL) take the node's interface, not the one the
        // hostname resolves to (often 127.0.1.1), unless the job says otherwise.
        if (static_cast<size_t>(node_index) < ctx.interfaces.size() &&
            !ctx.interfaces[node_index].empty()) {
          for (const char* var : {"GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"}) {
            if (!hasEnv(spec.env, var)) setEnv(env, var, ctx.interfaces[node_index]);
          }
        }
        node.ranks.push_back(std::move(r));
      }
      plan.nodes.push_back(std::move(node));
    }
  }
  // The generic rank table describes the training ranks, before any launcher takes their place.
  plan.files.push_back({rank_table_path, rankTable(plan)});
  if (spec.compat_modelarts) wireModelArts(b);
  assignDevices(b);
  switch (spec.framework) {
    case spec::Framework::kPyTorch: wirePyTorch(b); break;
    case spec::Framework::kMindSpore: wireMindSpore(b); break;
    case spec::Framework::kTensorFlow: wireTensorFlow(b); break;
    case spec::Framework::kMpi: wireMpi(b); break;
    case spec::Framework::kDeepSpeed: wireDeepSpeed(b); break;
    case spec::Framework::kGeneric: break;
  }
  for (NodePlan& node : plan.nodes) {
    node.environment = ctx.environment_layers;
    for (RankPlan& r : node.ranks) {
      r.uid = ctx.uid;
      r.gid = ctx.gid;
      // A user of its own has no home of its own: its node's work directory is one it may write.
      if (ctx.uid >= 0 && !hasEnv(spec.env, "HOME")) setEnv(r.env, "HOME", node.work_dir);
      // A session's keys, for its program (cli/session_host.cc) alone: not in the job's env:.
      if (spec.session) {
        setEnv(r.env, "COHORT_SESSION_USER", spec.session->user);
        setEnv(r.env, "COHORT_SESSION_AUTHORIZED_KEY", spec.session->authorized_key);
        setEnv(r.env, "COHORT_SESSION_HOST_KEY", spec.session->host_key);
        if (spec.session->jupyter) {
          setEnv(r.env, "COHORT_SESSION_JUPYTER_TOKEN", spec.session->jupyter_token);
          setEnv(r.env, "COHORT_SESSION_ENVIRONMENT", spec.environment);
        }
        // Its allocation, which a run started in it fits (cohort run, cohort.run; sessions.md):
        // the CPUs the scheduler holds for the rank, its memory limit, the devices it was given.
        for (const spec::Role& role : spec.roles) {
          if (role.name != r.role) continue;
          char cpus[32];
          std::snprintf(cpus, sizeof cpus, "%g", role.resources.cpus);
          setEnv(r.env, "COHORT_CPUS", cpus);
          if (r.memory_bytes > 0) setEnv(r.env, "COHORT_MEMORY", std::to_string(r.memory_bytes));
        }
        int gpus = 0;
        for (const auto& [k, v] : r.env) {
          if (k == "CUDA_VISIBLE_DEVICES") gpus = static_cast<int>(split(v, ',').size());
        }
        setEnv(r.env, "COHORT_GPUS", std::to_string(gpus));
      }
    }
  }
  if (spec.launcher == spec::Launcher::kPreload) {
    if (ctx.isolate) {
      return fail(Code::kInvalidArgument,
                  "launcher: preload forks every rank of a node from one process, which a "
                  "sandbox per rank cannot hold: use launcher: direct in the sandbox, or preload "
                  "without it (cohort run without --isolate, cohort server --no-isolate)");
    }
    if (ctx.image) {
      return fail(Code::kInvalidArgument,
                  "launcher: preload forks every rank of a node from one process on the host, "
                  "not in the image: use launcher: direct (or torchrun) with an image");
    }
    COHORT_TRY(wirePreload(b));
  }
  wireDebug(b);  // after preload: it checks the job's own command, not the bootstrap's
  // cohort's Python module for every process, launchers included (their ranks inherit it).
  for (NodePlan& node : plan.nodes) {
    for (RankPlan& r : node.ranks) {
      std::string before = ctx.inherited_python_path;
      for (const auto& [k, v] : r.env) {
        if (k == "PYTHONPATH") before = v;
      }
      setEnv(r.env, "PYTHONPATH", pythonPathWithHelpers(before, ctx.job_dir));
    }
  }
  if (ctx.image) {
    COHORT_TRY(runInImage(b));
  } else if (ctx.isolate) {
    isolate(b);
  }
  return plan;
}

bool forwardStdin(Plan& plan) {
  RankPlan* first = nullptr;
  for (NodePlan& node : plan.nodes) {
    for (RankPlan& r : node.ranks) {
      if (r.terminal) return false;
      if (r.rank == 0 && !first) first = &r;
    }
  }
  if (!first || first->preload) return false;
  first->stdin_forwarded = true;
  return true;
}

}  // namespace cohort::plan
