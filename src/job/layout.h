// Layout: where everything of a job lives in its directory, `<data-root>/jobs/<id>`. The only
// place in cohort that knows these names; every other module asks here.
//
//   job.json plan.json events.jsonl result.json console.log   the job's record: written by
//                                    cohort's own processes (server, coordinator), never by ranks
//   mark       a random word the coordinator writes when it starts: an agent that finds it
//              through its own path shares the coordinator's job directory
//   report.url report.token   where the server that runs the job is now (it rewrites the file
//                 when it restarts on another address) and the credential the coordinator pushes
//                 the record with (0600, the server's; the coordinator reads it once, removes it)
//   files/     what cohort generates for the ranks to read: rank tables, hostfile, <role>.host,
//              and python/, cohort's Python module (on every rank's PYTHONPATH)
//   logs/      one log per process, written by the coordinator from what the agents ship
//   work/      the ranks' scratch space; work/node<i> holds node i's staged inputs and each of
//              its ranks' .cohort-heartbeat-<rank> (cohort.heartbeat()) and, in a job with
//              debug:, .cohort-debug-<rank> (what the rank says about its debugger)
//   output/    what the ranks save ($COHORT_OUTPUT_DIR), copied out when the job ends
//   code/      the snapshot of the submitter's workdir that `cohort submit` uploaded (the job's
//              workdir then), written by the server before the job is queued; ranks read it
//
// Code uploaded and not yet claimed by a job waits in <data-root>/uploads/<account>/<id>/.
//
// Ranks may write only under work/ and output/; the sandbox binds files/ and logs/ read-only
// and the record not at all. Pure string functions, thread-safe.
#pragma once

#include <string>

namespace cohort::job {

// <data_root>/jobs
std::string jobsDir(const std::string& data_root);
// <data_root>/uploads: code snapshots waiting for the job that will run them
std::string uploadsDir(const std::string& data_root);

class Layout {
 public:
  explicit Layout(std::string dir) : dir_(std::move(dir)) {}
  static Layout of(const std::string& data_root, const std::string& job_id) {
    return Layout(jobsDir(data_root) + "/" + job_id);
  }

  const std::string& dir() const { return dir_; }
  std::string specFile() const { return dir_ + "/job.json"; }
  std::string planFile() const { return dir_ + "/plan.json"; }
  std::string eventsFile() const { return dir_ + "/events.jsonl"; }
  std::string resultFile() const { return dir_ + "/result.json"; }
  std::string consoleLog() const { return dir_ + "/console.log"; }
  std::string markFile() const { return dir_ + "/mark"; }
  std::string stacksFile() const { return dir_ + "/stacks.txt"; }  // a hang's stacks, appended
  // `cohort stacks`: the coordinator's pid (it takes SIGUSR1), and the stacks it then writes.
  std::string coordinatorPidFile() const { return dir_ + "/coordinator.pid"; }
  std::string stacksNowFile() const { return dir_ + "/stacks-now.txt"; }
  // Training metrics (agent/metrics.h) and the agents' resource samples, one JSON line each.
  std::string metricsFile() const { return dir_ + "/metrics.jsonl"; }
  std::string resourcesFile() const { return dir_ + "/resources.jsonl"; }
  std::string reportUrlFile() const { return dir_ + "/report.url"; }
  std::string reportTokenFile() const { return dir_ + "/report.token"; }
  std::string filesDir() const { return dir_ + "/files"; }
  std::string rankTableFile() const { return filesDir() + "/rank_table.json"; }
  std::string pythonHelpersDir() const { return filesDir() + "/python"; }
  std::string logsDir() const { return dir_ + "/logs"; }
  // logs/<base>.log, where `base` is "<role>-<index>" (or "torchrun-node1", "scheduler-0").
  std::string logFile(const std::string& base) const { return logsDir() + "/" + base + ".log"; }
  std::string workDir() const { return dir_ + "/work"; }
  std::string nodeWorkDir(int node) const { return workDir() + "/node" + std::to_string(node); }
  // What cohort.heartbeat() touches for global rank `rank` ($COHORT_HEARTBEAT_FILE): a rank's
  // file, in its node's work directory, whose time of change its agent watches.
  std::string heartbeatFile(int node, int rank) const {
    return nodeWorkDir(node) + "/.cohort-heartbeat-" + std::to_string(rank);
  }
  // debug: the program that runs a rank under the debugger (cohort writes it), and what each
  // rank writes there about its debugger (waiting, attached), which its agent reads.
  std::string debugBootstrapFile() const { return filesDir() + "/debug/cohort_debug.py"; }
  std::string debugStatusFile(int node, int rank) const {
    return nodeWorkDir(node) + "/.cohort-debug-" + std::to_string(rank);
  }
  std::string outputDir() const { return dir_ + "/output"; }
  std::string codeDir() const { return dir_ + "/code"; }
  // The slurm backend's batch script, and what its agents print (%j: Slurm's job id).
  std::string batchScript() const { return dir_ + "/slurm.sbatch"; }
  std::string batchOutput() const { return dir_ + "/slurm-%j.out"; }

 private:
  std::string dir_;
};

}  // namespace cohort::job
