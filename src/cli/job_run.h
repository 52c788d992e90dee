// What the commands that coordinate a job share (`cohort run` on this machine or for Slurm, and
// `cohort coordinate` in a Volcano Job's pod): making the job's directory and writing its plan,
// making the plan again with the hosts the agents report when they run elsewhere, and telling a
// person how the job ended. Single-threaded: called by the command before and after the
// coordinator runs.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "agent/coordinator.h"
#include "cli/job_options.h"
#include "plan/plan.h"
#include "plan/port_lease.h"
#include "proc/job_network.h"

namespace cohort::cli {

// The job's own directory, which must be new (jobs never share directories) unless `cohort
// server` made it for this job (`made_by_server`: --job-id) and put the job file and console log
// there. Ranks that run as an identity of their own (`uid` >= 0) own work/ and output/ and
// nothing else. Errors: kIo naming the directory.
Result<void> makeJobDirs(const std::string& job_dir, bool made_by_server, int uid, int gid);

// The job's own network (proc/job_network.h), when it gets one (--job-network; by default with
// --isolate as root on this machine, unless it is debugged: a debugger reaches its ranks on
// this machine's loopback): each node's address goes into job.context (MASTER_ADDR is node
// 0's, the interface eth0), and the master ports are fixed ones there (29500 and up), leased on
// no machine's loopback. Errors: kInvalidArgument for a --job-network that cannot be had
// (without --isolate, not root, another backend, with debug:), kIo when it cannot be made.
Result<std::optional<proc::JobNetwork>> makeJobNetwork(PreparedJob& job,
                                                      const JobOptions& options);

// The job's master ports (a free port each, leased on this machine) and, with debug:, a port for
// each rank's debugger (debug.port + rank when the job names one), into job.context; held until
// the leases in `leases` go (when cohort exits). Errors: kFailedPrecondition when a port cannot
// be had (the job cannot start).
Result<void> leasePorts(PreparedJob& job, std::vector<plan::PortLease>& leases);

// The plan and the files made from it into the job directory; they can be made again: no fsync
// on the way to the start. Errors: kIo, the message beginning with the file's name
// ("plan.json: ..."), as CoordinatorOptions::write_plan says.
Result<void> writePlan(const plan::Plan& plan);

// For agents that run on other hosts: the plan made again from `job` once every agent has said
// where its node is (hosts in node order; MASTER_ADDR is node 0's), and written. `job` must
// outlive the coordinator.
agent::Placement placeOnHosts(const PreparedJob& job);

// How the job ended, on stderr, as `cohort run` says it: success (unless !progress), or the
// state, reason and exit code, the diagnosis, the root cause and where the logs are.
void printOutcome(const plan::Plan& plan, const agent::JobOutcome& outcome, bool progress);

}  // namespace cohort::cli
