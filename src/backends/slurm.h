// The slurm backend: a job's nodes are the nodes of one Slurm batch job. Its batch script runs
// one `cohort exec` agent per node with srun; each dials the job's coordinator, which runs where
// cohort was started (a login node, or the machine of `cohort server`), over the cluster's
// network, and proves it knows the job's secret (it comes in the batch job's environment, never
// on a command line or in the script). Slurm allocates and gang-schedules; cohort wires the
// ranks, supervises them, stops them all at the first failure and names the root cause. The
// sbatch, squeue and scancel commands on PATH, with the user's SLURM_CONF, are the interface:
// what a user can do by hand, cohort does the same way (docs/slurm.md). Not thread-safe.
#pragma once

#include <string>

#include "agent/coordinator.h"
#include "spec/job_spec.h"
#include "util/net.h"

namespace cohort::backends {

// The batch script for `plan`: resources from the spec's roles (each node sized for the largest
// role), time from max_runtime, the `slurm:` section's options, one task per node running
// `cohort_exe exec` toward `coordinator` ("ADDR:PORT"). What `cohort plan --backend slurm`
// prints. Errors: kInvalidArgument for a path that cannot go into a batch script as it is.
Result<std::string> slurmBatchScript(const spec::JobSpec& spec, const plan::Plan& plan,
                                     const std::string& cohort_exe,
                                     const std::string& coordinator);

// The address the cluster's nodes reach a coordinator on this host at: by the job's network
// choice when this host has it, else the route toward the Slurm controller (scontrol show config).
// Errors: kUnavailable with Slurm's own words when its controller cannot be asked.
Result<HostAddress> slurmCoordinatorAddress(const spec::Network& network);

// Slurm's reason for a pending job in cohort's words: "Resources" -> "waiting for free nodes
// (Resources)".
std::string pendingReason(const std::string& slurm_reason);

class SlurmLauncher : public agent::AgentLauncher {
 public:
  SlurmLauncher(spec::JobSpec spec, plan::Plan plan, std::string cohort_exe, bool progress)
      : spec_(std::move(spec)), plan_(std::move(plan)), exe_(std::move(cohort_exe)),
        progress_(progress) {}

  // Writes <job dir>/slurm.sbatch and submits it. Errors: kUnavailable (sbatch missing or
  // refusing: its own words).
  Result<void> launch(int nodes, const agent::Dial& dial) override;
  // squeue's view of the batch job: pending (and why), running, or ended.
  agent::LaunchStatus status() override;
  // A node given up on (its agent could not be heard): reap() cancels the whole batch job at
  // once rather than wait for it to end by itself, which that node's agent cannot tell it to.
  void abandon(int node) override;
  // Waits up to `deadline` for the batch job to end by itself (the agents exit when told), then
  // cancels it (scancel) and waits until Slurm has ended it on every node. With a node given up
  // on, cancels at once and does not wait for Slurm: the job's verdict is known, and Slurm may
  // take minutes to give up on a node it cannot reach (the job stays COMPLETING meanwhile).
  void reap(Millis deadline) override;

 private:
  std::string squeueState();  // "PENDING|Resources"; "" when Slurm no longer knows the job

  spec::JobSpec spec_;
  plan::Plan plan_;
  std::string exe_;
  bool progress_;
  std::string job_;  // Slurm's job id, once submitted
  bool reaped_ = false;
  bool abandoned_ = false;  // a node was given up on
};

}  // namespace cohort::backends
