// Backend: where a server job runs. The job service hands a backend a job to start and keeps,
// in the job's row, the opaque handle the backend returns; with that handle alone (also after a
// restart of the server) the backend tells whether the job still runs, stops it, and gives back
// what it held (Mesos's launcher `recover`). The local backend runs each job's coordinator
// (`cohort run --job-id`) as a process of this machine in a session of its own, so that jobs
// outlive the server; the Slurm, Volcano and ssh backends plug in here. A backend whose nodes are
// hosts the server schedules onto (ssh) names them (nodes()); the job service then places each
// job's nodes on them with the gang scheduler and hands the backend the placement. Not thread-safe: the job
// service calls it from its loop thread (holding its lock).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "sched/scheduler.h"
#include "spec/job_spec.h"
#include "util/result.h"

namespace cohort::backends {

struct JobLaunch {
  std::string job_id;
  std::string job_dir;    // made by the service, with the job file in it
  std::string data_root;
  bool isolate = false;   // ranks run under bubblewrap
  int uid = -1, gid = -1; // the account's identity for the ranks; -1: the server's
  std::vector<int> gpus;  // the job's own GPUs (CUDA_VISIBLE_DEVICES of its coordinator)
  bool report = false;    // its coordinator reports to the server (job::Layout's report.url)
  std::string environments;  // where its coordinator looks environments up (COHORT_ENVS); "":
                             // the server's own
  std::vector<std::string> input_roots;  // local inputs only below these (--input-root)
  std::string job_network;  // its coordinator's --job-network (isolated, nat, host); "": its default
  std::vector<int> nodes;   // with nodes(): node i of the job runs on nodes()[nodes[i]]
};

// What a backend finds behind a handle.
struct Found {
  bool running = false;
  std::vector<int> gpus;  // what it holds, when running
  std::vector<int> nodes;  // with nodes(): where its nodes run (JobLaunch::nodes), when running
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;

  // Starts the job. Returns its handle. Errors: kIo when the coordinator cannot be started.
  virtual Result<std::string> submit(const JobLaunch& launch) = 0;
  // Whether the job behind `handle` still runs, and what it holds. Never an error: a handle it
  // cannot read is a job that does not run.
  virtual Found recover(const std::string& handle) = 0;
  // True while it runs; once it is seen ended, the backend has released it (reaped it).
  virtual bool running(const std::string& handle) = 0;
  // Asks the job to stop gracefully (its coordinator stops the ranks and records the end).
  virtual void cancel(const std::string& handle) = 0;
  // Asks the job's coordinator for every rank's stack now, written to the job directory's
  // stacks-now.txt (`cohort stacks`); the job goes on. False when it no longer runs.
  virtual bool requestStacks(const std::string& handle) = 0;
  // For a person: "coordinator pid 4242".
  virtual std::string describe(const std::string& handle) const = 0;
  // Once running() said the job ended: how its coordinator ended, for a person, when the
  // backend saw it ("it exited with code 2", "its container ended with exit code 127 (...)");
  // "" when it does not know.
  virtual std::string endWords(const std::string& handle) const {
    (void)handle;
    return "";
  }
  // The nodes the server schedules jobs onto, with what each has now (one that cannot be used
  // now has nothing); none: the server's own machine is the one node (its --cpus, --memory and
  // --gpus), and jobs' nodes are simulated there or are the cluster's.
  virtual std::vector<sched::Node> nodes() const { return {}; }
  // Whether nodes() changed since the last call (then queued jobs are looked at again).
  virtual bool nodesChanged() { return false; }
};

class SshHostPool;

// `cohort_bin` is the binary coordinators run. Coordinators run on this machine; their nodes are
// simulated here too (spec::Backend::kLocal), are those of a Slurm batch job (kSlurm: Slurm
// queues and gang-schedules, see slurm.h), or are `hosts` reached over SSH (kSsh: the
// coordinator runs as `cohort run --hosts` does, on the hosts of the job's placement); the
// backend's name is the nodes'.
std::unique_ptr<Backend> makeLocalBackend(std::string cohort_bin,
                                          spec::Backend nodes = spec::Backend::kLocal,
                                          std::shared_ptr<SshHostPool> hosts = nullptr);

}  // namespace cohort::backends
