// The ssh backend: a job's nodes are plain hosts that the user reaches with their own `ssh`
// (its config, keys and agent; `--ssh "ssh -p 2222"` to change the command). The coordinator
// runs where cohort was started; each host's node agent is started over SSH and dials it back,
// proving the job's secret, which goes to the host on ssh's stdin (never on a command line).
// Before that, every host is probed at once (reached at all, cohort's binary in its cache, the
// job's Python there); a host without this cohort gets it copied into its cache
// (~/.cache/cohort/bin/cohort-<sha256>), checked by hash; the workdir's snapshot goes with the
// agent unless the workdir is shared. A host's job directory is its own unless the
// coordinator's is visible there; its own is removed when the agent ends, however the job ends,
// after what its ranks wrote in output/ came back. The decisions are ssh_hosts.h; this is the I/O.
// Single-threaded: call from the coordinator's thread.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "agent/coordinator.h"
#include "backends/ssh_hosts.h"
#include "plan/plan.h"
#include "proc/spawn.h"
#include "spec/job_spec.h"
#include "util/fd.h"

namespace cohort::backends {

struct SshOptions {
  std::vector<SshHost> hosts;          // node i runs on hosts[i]
  std::vector<std::string> ssh = {"ssh"};  // the command and its options, before the host
  std::string cohort_exe;              // this cohort binary: what a host without it gets
  // The workdir's snapshot (storage/archive.h), sent to every host whose job directory is its
  // own; empty with --shared-workdir (then the ranks run in the workdir's own path there).
  std::string snapshot;
  // The job's Python, asked on every host for what the job imports (env/python_check.h): the
  // interpreter as the command names it and the arguments that make it answer; "" when the job
  // runs no Python. `explain` turns an answer that names missing modules into the error said
  // for that host; "" when nothing is missing.
  std::string python;
  std::vector<std::string> python_args;
  std::function<std::string(const std::string& answer)> explain;
  bool progress = true;
};

class SshLauncher : public agent::AgentLauncher {
 public:
  SshLauncher(plan::Plan plan, spec::Network network, SshOptions options)
      : plan_(std::move(plan)), network_(std::move(network)), options_(std::move(options)) {}

  // Probes every host at once, copies cohort to those without it, then starts each node's agent
  // over ssh toward the address that host reached us from (or the `network:` setting's).
  // Errors: kUnavailable naming every host that cannot run the job, and why.
  Result<void> launch(int nodes, const agent::Dial& dial) override;
  // An ssh that ended before its agent dialled in: the host named, with what ssh or the host
  // said.
  agent::LaunchStatus status() override;
  // Ends that host's ssh: its agent then finds the coordinator silent and stops its ranks.
  void abandon(int node) override;
  // Waits up to `deadline` for every ssh to end (the agents exit when told), kills what is left,
  // and puts what each host's ranks wrote in output/ into the job directory's output/.
  void reap(Millis deadline) override;

 private:
  struct Session {
    proc::Child child;
    UniqueFd out, err;  // what the host's script printed: its output/ snapshot, its messages
    std::optional<int> code;
  };
  std::string errorsOf(Session& s);
  void bringOutputsBack(int node, Session& s);

  plan::Plan plan_;
  spec::Network network_;
  SshOptions options_;
  std::vector<Session> sessions_;
  bool reaped_ = false;
};

// What each of `hosts` has (ssh_hosts.h's capacityScript), asked over `ssh` (the command's
// words) at once. An error per host that cannot be reached or does not answer: kUnavailable
// "host NAME: ..." with ssh's or the host's own words.
std::vector<Result<HostCapacity>> askCapacity(const std::vector<SshHost>& hosts,
                                              const std::vector<std::string>& ssh);

// The SHA-256 of the file at `path`, in hex. Errors: kIo.
Result<std::string> fileSha256(const std::string& path);

// fileSha256 of cohort's own binary `exe`, remembered in ~/.cache/cohort/self-sha256 by the
// file's path, inode, size and times: hashing it takes a second or more, on every job.
Result<std::string> binarySha256(const std::string& exe);

}  // namespace cohort::backends
