// The local backend: every simulated node's agent is a process forked on this machine, a copy
// of the coordinator named "cohort node N" that runs the agent (`cohort exec` where the
// coordinator has other threads), in its own process group, told to stop (SIGTERM) if the
// coordinator dies. Used by `cohort run`. Single-threaded: call from the coordinator's thread.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "agent/coordinator.h"
#include "proc/cgroup.h"
#include "proc/job_network.h"
#include "proc/spawn.h"
#include "spec/job_spec.h"

namespace cohort::backends {

class LocalLauncher : public agent::AgentLauncher {
 public:
  // `cohort_exe` is the cohort binary the agents run. `share_stdin`: a rank reads cohort's
  // stdin (a rank on the terminal under --pdb, or rank 0's forwarded stdin): the agents get it
  // too; otherwise theirs is /dev/null.
  explicit LocalLauncher(std::string cohort_exe, bool share_stdin = false)
      : exe_(std::move(cohort_exe)), share_stdin_(share_stdin) {}

  // Each node's ranks join the node's namespace of `network` (proc/job_network.h), which must
  // outlive the agents.
  void useNetwork(const proc::JobNetwork* network) { network_ = network; }

  Result<void> launch(int nodes, const agent::Dial& dial) override;
  void abandon(int node) override;
  void reap(Millis deadline) override;

 private:
  std::string exe_;
  bool share_stdin_ = false;
  const proc::JobNetwork* network_ = nullptr;
  std::vector<proc::Child> agents_;
  // One for every forked agent's cgroups, started before them; an agent of `cohort exec` starts
  // its own.
  std::optional<proc::CgroupWatchdog> watchdog_;
};

// Where a job's program is found: (program, PATH, workdir) -> its path, or kNotFound. The
// default looks on this machine (proc::findProgram); an image's ranks look in the image.
using ProgramFinder = std::function<Result<std::string>(
    const std::string& program, const std::string& path, const std::string& workdir)>;

// Refuses now what would fail when the job starts on this machine: a workdir that is not a
// directory, a program not found (by `find`, on this machine when none is given), a Python
// script missing. Returns the absolute workdir. Errors: kInvalidArgument naming the field
// (workdir, command).
Result<std::string> checkCommand(const spec::JobSpec& spec, const ProgramFinder& find = nullptr);

// The path of the running executable (/proc/self/exe).
std::string selfExecutable();

// The GPUs ranks may use on this machine: CUDA_VISIBLE_DEVICES when the user set it, else what
// `nvidia-smi` lists; empty without GPUs.
std::vector<int> localGpus();

// The CPUs ranks may use on this machine: this process's CPU set, and at most the CPUs that
// COHORT_CPUS says it was given (a session's share: a quota, not a set; rounded up); 0 if
// unknown.
int localCpus();

// The device files of this machine that every sandboxed job gets, since cohort does not hand
// them out per job: Ascend NPUs (/dev/davinci*, their manager files), RDMA (/dev/infiniband),
// AMD GPUs (/dev/kfd, /dev/dri). NVIDIA GPUs are not among them: each job gets its own.
std::vector<std::string> sharedDevices();

// Ascend NIC addresses by device index, from /etc/hccn.conf (address_<i>=<ip>); empty elsewhere.
std::vector<std::string> localAscendAddresses();

}  // namespace cohort::backends
