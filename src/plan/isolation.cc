// --isolate: every process of the job runs under bubblewrap, in namespaces of its own:
// - a mount namespace where cohort's data root (every job's directory, the store, the server's
//   database and tokens) is hidden behind an empty tmpfs, and only this job's work/ and output/
//   (read-write), its files/ and logs/ (read-only), the store paths its inputs link to and its
//   environment's directories (read-only) are put back, and the rest of it is read-only; the
//   job's record (plan, events, result) is not there at all;
// - a PID namespace with its own /proc: no other process of the machine can be seen, signalled
//   or traced, and when the sandbox's first process dies (it dies with the agent), the kernel
//   kills everything in it, setsid descendants included;
// - a user namespace when the rank runs as an ordinary user (the agent sets the rank's uid
//   before bubblewrap starts); run as root, bubblewrap drops every capability.
// - a /tmp, /var/tmp, /run/lock and /dev/shm of the job's own on each node, shared by its ranks
//   there and by no other job: the machine's are writable by everyone, and another account's
//   job would read what this one leaves in them, or plant links for it to follow. The agent
//   makes them before the ranks start and removes them when it leaves (NodePlan::scratch_dirs).
//   As root, /tmp and /dev/shm are memory of the node's own (NodePlan::tmpfs_dirs: a tmpfs no
//   larger than the node's ranks' memory, charged to the rank that writes it); otherwise
//   /dev/shm's is a directory on the machine's /dev/shm, so that it stays memory. A workdir, program or virtual
//   environment of the job's in the machine's /tmp is put back (putBack).
// - a /dev of its own (bubblewrap's: null, zero, random, a tty, its own pts), where of the
//   machine's GPUs only the node's own (those its ranks' CUDA_VISIBLE_DEVICES name) are put back
//   with the driver's shared control files: another job's GPU cannot be opened. Inside, as in a
//   container, the node's GPUs are numbered from 0 in the order of their device files, and each
//   rank's CUDA_VISIBLE_DEVICES says so. The devices cohort does not hand out per job (NPUs,
//   RDMA, AMD's: PlanContext::shared_devices) are put back as the machine has them.
// - cohort's own programs (bubblewrap, env) by their absolute paths, started with an
//   environment of cohort's (kSandboxLauncherEnvironment): nothing of the job's reaches them (a
//   PATH or LD_PRELOAD in its `env:` would run the job's code outside the sandbox). The rank's
//   environment is handed to bubblewrap on descriptor kSandboxArgsFd (`--args`: `--clearenv`,
//   then a `--setenv` per variable), never on a command line, where every user's `ps` would
//   read it; bubblewrap applies it to what it runs inside.
// - the machine's cgroup file systems, read-only: a rank stays in the cgroups that hold it to
//   its limits (proc/cgroup.h), even one that runs as root.
// The machine's network is the ranks' unless the agent puts each node in a namespace of its
// own (proc/job_network.h).
//
// Signals: cohort stops a rank by signalling its process group, which holds the outer
// bubblewrap as well as the rank inside. bubblewrap would die of SIGTERM and take the rank with
// it before it could save anything, so it is started with the stop signals ignored
// (`env --ignore-signal`), and the rank's own defaults are restored inside
// (`env --default-signal`); the job's policy.stop_signal is one of them when it is another
// (SIGUSR1's default would end bubblewrap as well). A rank killed by a signal inside exits with
// 128 + the signal.
#include <algorithm>
#include <set>

#include "plan/wiring.h"
#include "util/text.h"

namespace cohort::plan {

namespace {

// Where the sandbox mounts a job's own directory over the machine's (NodePlan::scratch_dirs).
constexpr const char* kScratchAt[] = {"/tmp", "/var/tmp", "/run/lock", "/dev/shm"};

// What a rank runs from one of the machine's directories that the job's own hide (its workdir,
// its program, its virtual environment in /tmp) is put back: the entry of that directory it is
// in, with its neighbours. Never the directory itself, nor the data root (bound in parts).
std::vector<std::string> putBack(const RankPlan& r, const std::string& workdir,
                                 const std::string& root) {
  std::vector<std::string> paths = {workdir};
  if (!r.argv.empty()) paths.push_back(r.argv[0]);
  for (const auto& [key, value] : r.env) {
    if (key == "VIRTUAL_ENV") paths.push_back(value);
  }
  std::vector<std::string> args;
  for (const std::string& path : paths) {
    if (path == root || startsWith(path, root + "/")) continue;
    for (const char* dir : kScratchAt) {
      const std::string below = std::string(dir) + "/";
      if (!startsWith(path, below)) continue;
      const std::string entry = path.substr(0, path.find('/', below.size()));
      const std::string name = entry.substr(below.size());
      if (name.empty() || name == "." || name == ".." ||
          std::find(args.begin(), args.end(), entry) != args.end()) {
        continue;
      }
      for (const std::string& arg : {std::string("--bind-try"), entry, entry}) args.push_back(arg);
    }
  }
  return args;
}

// The device files of the machine's GPU `index` and those every GPU process needs: the
// driver's control files are shared by all GPUs (NVIDIA's).
constexpr const char* kSharedDeviceFiles[] = {"/dev/nvidiactl", "/dev/nvidia-uvm",
                                              "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset"};

// The node's own GPUs: those of the job's (`given`, what cohort handed it) that its ranks'
// CUDA_VISIBLE_DEVICES name, in the order of their device files. A GPU the job's own `env:`
// names that it was not given is not one of them. Each rank's CUDA_VISIBLE_DEVICES becomes its
// GPUs' places in that order, as the ranks see them in the sandbox, where the node's GPUs are the
// only ones. Returns the device files to put back (none without GPUs).
std::vector<std::string> ownDevices(NodePlan& node, const std::vector<int>& given) {
  std::set<int> gpus;
  for (const RankPlan& r : node.ranks) {
    for (const auto& [key, value] : r.env) {
      if (key != "CUDA_VISIBLE_DEVICES") continue;
      for (const std::string& id : split(value, ',')) {
        auto n = parseInt(id);
        if (n && std::find(given.begin(), given.end(), *n) != given.end()) {
          gpus.insert(static_cast<int>(*n));
        }
      }
    }
  }
  const std::vector<int> order(gpus.begin(), gpus.end());
  for (RankPlan& r : node.ranks) {
    for (auto& [key, value] : r.env) {
      if (key != "CUDA_VISIBLE_DEVICES") continue;
      std::vector<std::string> inside;
      for (const std::string& id : split(value, ',')) {
        auto n = parseInt(id);
        if (!n) continue;
        auto at = std::find(order.begin(), order.end(), static_cast<int>(*n));
        if (at != order.end()) inside.push_back(std::to_string(at - order.begin()));
      }
      value = join(inside, ",");
    }
  }
  if (order.empty()) return {};
  std::vector<std::string> files(std::begin(kSharedDeviceFiles), std::end(kSharedDeviceFiles));
  for (int gpu : order) files.push_back("/dev/nvidia" + std::to_string(gpu));
  return files;
}

}  // namespace

void isolate(Builder& b) {
  const std::string& root = b.ctx.data_root;
  const job::Layout layout(b.ctx.job_dir);
  std::string stops = "TERM,INT,HUP";
  const std::string stop = spec::stopSignalName(b.plan.stop_signal).substr(3);
  const std::vector<std::string> defaults = split(stops, ',');
  if (std::find(defaults.begin(), defaults.end(), stop) == defaults.end()) stops += "," + stop;
  const std::vector<std::string> sandbox = {kSandboxEnv,
                                            "--ignore-signal=" + stops,
                                            kSandboxBwrap,
                                            "--args",
                                            std::to_string(kSandboxArgsFd),
                                            "--dev-bind",
                                            "/",
                                            "/",
                                            "--dev",
                                            "/dev"};
  // The cgroup file systems read-only: a rank that runs as root (its capabilities dropped)
  // could otherwise write itself into another cgroup, out of its limits.
  std::vector<std::string> common = {"--ro-bind-try", "/sys/fs/cgroup", "/sys/fs/cgroup",
                                     "--tmpfs", root};
  const std::pair<const char*, std::string> binds[] = {{"--ro-bind", layout.filesDir()},
                                                       {"--ro-bind", layout.logsDir()},
                                                       {"--bind", layout.workDir()},
                                                       {"--bind", layout.outputDir()}};
  for (const auto& [how, dir] : binds) common.insert(common.end(), {how, dir, dir});
  if (startsWith(b.ctx.workdir, root + "/")) {
    for (const char* arg : {"--ro-bind", b.ctx.workdir.c_str(), b.ctx.workdir.c_str()}) {
      common.emplace_back(arg);
    }
  }
  for (NodePlan& node : b.plan.nodes) {
    // The job's own /tmp and the rest come first: the data root may be below one of them (a
    // data root in /tmp), and its mounts must then land in the job's /tmp, not under it.
    std::vector<std::string> scratch_args;
    const std::string scratch = node.work_dir + "/.scratch";
    // As root, the agent mounts memory of the node's own on its /tmp and /dev/shm, limited to
    // the ranks' memory; otherwise /dev/shm's is a directory on the machine's /dev/shm.
    const std::string shm = b.ctx.as_root ? scratch + "/shm"
                                          : "/dev/shm/cohort-" + b.plan.job_id + "-node" +
                                                std::to_string(node.node);
    node.scratch_dirs = {scratch + "/tmp", scratch + "/var-tmp", scratch + "/run-lock", shm};
    if (b.ctx.as_root) {
      node.tmpfs_dirs = {scratch + "/tmp", shm};
      node.tmpfs_bytes = 0;
      for (const RankPlan& r : node.ranks) {
        if (r.memory_bytes <= 0) {
          node.tmpfs_bytes = 0;
          break;
        }
        node.tmpfs_bytes += r.memory_bytes;
      }
    }
    for (size_t i = 0; i < node.scratch_dirs.size(); ++i) {
      for (const std::string& arg :
           {std::string("--bind"), node.scratch_dirs[i], std::string(kScratchAt[i])}) {
        scratch_args.push_back(arg);
      }
    }
    std::vector<std::string> node_args = common;
    std::vector<std::string> devices = ownDevices(node, b.ctx.gpus);
    devices.insert(devices.end(), b.ctx.shared_devices.begin(), b.ctx.shared_devices.end());
    for (const std::string& device : devices) {
      for (const std::string& arg : {std::string("--dev-bind-try"), device, device}) {
        node_args.push_back(arg);
      }
    }
    for (const StagedInput& in : node.inputs) {
      if (in.link && startsWith(in.source, root + "/")) {
        for (const std::string& arg : {std::string("--ro-bind"), in.source, in.source}) {
          node_args.push_back(arg);
        }
      }
    }
    // The job's environment, kept under the data root (a server's presets and its accounts'
    // environments), read-only: each layer's directory and no other environment.
    for (const EnvironmentLayer& layer : node.environment) {
      const std::string dir = layer.store + "/" + layer.name;
      if (!startsWith(dir, root + "/")) continue;
      for (const std::string& arg : {std::string("--ro-bind"), dir, dir}) node_args.push_back(arg);
    }
    // What is left of the data root is the empty tmpfs with the mount points: read-only, so that
    // a write to the job's record fails instead of landing in the tmpfs.
    node_args.emplace_back("--remount-ro");
    node_args.emplace_back(root);
    for (const char* arg : {"--unshare-pid", "--proc", "/proc", "--die-with-parent"}) {
      node_args.emplace_back(arg);
    }
    for (RankPlan& r : node.ranks) {
      std::vector<std::string> argv = sandbox;
      argv.insert(argv.end(), scratch_args.begin(), scratch_args.end());
      const std::vector<std::string> back = putBack(r, b.ctx.workdir, root);
      argv.insert(argv.end(), back.begin(), back.end());
      argv.insert(argv.end(), node_args.begin(), node_args.end());
      if (r.uid < 0 && b.ctx.as_root) {
        argv.emplace_back("--cap-drop");
        argv.emplace_back("ALL");
      }
      for (const std::string& arg :
           {std::string("--"), std::string(kSandboxEnv), "--default-signal=" + stops}) {
        argv.push_back(arg);
      }
      argv.insert(argv.end(), r.argv.begin(), r.argv.end());
      r.argv = std::move(argv);
      r.sandboxed = true;
    }
  }
}

}  // namespace cohort::plan
