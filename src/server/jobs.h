// JobService: the life of the server's jobs. `submit` validates a job and records it queued
// (durably) before it answers. One loop thread then does everything else: it runs the gang
// scheduler (src/sched) whenever something changed, starts each placed job through its backend
// (src/backends/backend.h; the local one spawns the job's coordinator in its own session, so that
// the coordinator and the job outlive a server restart), and releases what a job held when the
// backend says it ended. Each job's coordinator pushes the job's record here (`report`, from
// POST /v1/jobs/{id}/report): its numbered events, taken through the typed codec once each, its
// progress and its result; the service reads nothing a job wrote. On creation it reconciles
// every job the store knew, from the handle its backend gave it: still running (its coordinator
// reports again and resends what the store lacks) or ended while the server was down without
// having handed over its result (lost, saying why).
//
// The machine is one scheduling node: simulated nodes share it, so a job asks for the sum of its
// ranks' resources (each rank: its role's `resources`, default 1 CPU). With the ssh backend each
// host is a node and a job asks, per role, for its nodes on distinct hosts, each with what its
// processes take. Thread-safe: every public
// method may be called from any thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "backends/backend.h"
#include "backends/ssh_pool.h"
#include "backends/volcano_backend.h"
#include "job/events.h"
#include "sched/scheduler.h"
#include "server/access.h"
#include "server/metrics.h"
#include "spec/job_spec.h"
#include "store/job_store.h"
#include "util/result.h"

namespace cohort::server {

// Which Unix user runs each account's ranks. As root, the server gives every account an identity
// of its own: uid and gid `first + account number` (a range nothing else on the machine uses),
// so that no account's ranks can read, signal or trace another's. Without root there is only the
// server's own user; then one person must own every account (`single_user`), and a job of a
// second account is refused.
struct Identities {
  int64_t first = -1;  // -1: ranks run as the server's user
  int64_t count = 0;
  bool single_user = false;
};

// The uid and gid that run `account`'s ranks and build its environments; {-1, -1}: the
// server's own. Errors: kFailedPrecondition when the account's number is past `ids`' range;
// those of the store.
Result<std::pair<int, int>> accountIdentity(store::JobStore& store, const Identities& ids,
                                            const std::string& account);

struct JobServiceOptions {
  std::string data_root;      // jobs go to <data_root>/jobs/<id>
  std::string cohort_bin;     // the binary coordinators run
  sched::Resources capacity;  // the machine
  std::vector<int> gpu_ids;   // its GPUs (capacity.gpus of them)
  spec::Backend nodes = spec::Backend::kLocal;  // where jobs' nodes are: here, Slurm's, Volcano's
  backends::VolcanoSettings volcano;            // with nodes kVolcano
  std::shared_ptr<backends::SshHostPool> hosts;  // with nodes kSsh: the hosts jobs go to
  bool isolate = false;       // run ranks under bubblewrap (cohort run --isolate)
  Identities identities;
  std::string report_url;     // where coordinators report: this server, "http://host:port"
  std::string report_pin;     // with https: its public key's pin, written beside report_url
  int64_t max_upload_bytes = int64_t{1} << 30;  // a copy of an earlier job's code, at most
  // The processes and threads each rank may have at once (resources.pids: at most this, and
  // this where a job names none); 0: no limit.
  int64_t rank_pids = 0;
  bool store_in_s3 = false;   // the store is in S3: its inputs are copied, never linked
  // The only directories local inputs may be below (cohort server --input-root), absolute,
  // without a trailing '/'; none: no local inputs.
  std::vector<std::string> input_roots;
  // Each job's network (cohort run --job-network): isolated, nat or host; "": cohort run's default.
  std::string job_network;
  // Where a job of `caller` finds environment `name` (its coordinator's COHORT_ENVS), checked
  // that the caller may use it now (server/environments.h); unset: the server's own store.
  std::function<Result<std::string>(const Caller& caller, const std::string& name)> environments;
  Millis poll_interval{100};  // how often running jobs' coordinators are looked at
  // Called (from the service's threads, maybe holding its lock: it must not call back into
  // the service) after new events or a new state
  // of `job_id` are in the store, so that followers waiting for them can be woken.
  std::function<void(const std::string& job_id)> on_events;
};

class JobService {
 public:
  // Reconciles the jobs in `store` (see above) and starts the loop thread. `store` must outlive
  // the service. Errors: kIo from the store.
  static Result<std::unique_ptr<JobService>> create(store::JobStore& store,
                                                    JobServiceOptions options,
                                                    const sched::Clock& clock);
  // Stops the loop thread. Coordinators keep running: a restarted server finds them again.
  ~JobService();
  JobService(const JobService&) = delete;
  JobService& operator=(const JobService&) = delete;

  // What reconciling found at start, one line per job, for the server's log.
  const std::vector<std::string>& reconciled() const { return reconciled_; }

  // Validates `job_file` (the job file as JSON text), checks the caller's access to every
  // store:// input and output, and records the job queued. With `code` (an upload id of the
  // caller's, server/uploads.h), the job runs on that snapshot: it becomes the job's code/
  // directory and workdir, whatever the job file said. Errors: kInvalidArgument naming the
  // field, kNotFound (a store:// location the caller cannot see, an upload that is not there),
  // kPermissionDenied, kIo.
  Result<store::Job> submit(const Caller& caller, const std::string& job_file, int priority,
                            const std::string& code = "");

  // A queued job is stopped at once; a started one gets SIGTERM on its coordinator (which stops
  // the ranks gracefully) and shows `stopping`. A final job is returned as it is. `why`: the
  // job's reason when the server stops it on its own (a quota), rather than on request.
  Result<store::Job> stop(const std::string& id, const std::string& why = "");
  // Has a running job's coordinator write every rank's stack to its stacks-now.txt. Errors:
  // kFailedPrecondition when the job does not run; those of the store.
  Result<void> requestStacks(const std::string& id);

  // Removes a final job: its record, events and directory. kFailedPrecondition otherwise.
  Result<void> remove(const std::string& id);

  // A report of a job's coordinator (docs/server-api.md): `token` must be the job's report
  // token, `body` {"seq": N, "events": [...], "progress": {...}?, "result": {...}?}, where
  // events[i] is the coordinator's event N + i. Ingests the events the store lacks (each once:
  // a batch sent twice or after a gap changes nothing), applies the states they carry, keeps
  // the progress, and records the result once every event is in. Returns the events the store
  // has (1..events_seq) and whether the job's end is recorded. Errors: kUnauthenticated (not
  // the job's token; also for a job that does not exist), kInvalidArgument naming the field.
  struct ReportAnswer {
    int64_t events_seq = 0;
    bool result = false;
  };
  Result<ReportAnswer> report(const std::string& job_id, const std::string& token,
                              const std::string& body);
  // Whether the job's coordinator may still write (its log's last lines come after the job's
  // end is recorded): it was started, or found again at start, and has not ended. on_events
  // is called when it ends. Any thread.
  bool coordinatorRunning(const std::string& id) const;
  // The latest progress its coordinator reported (a JSON object), while the job runs.
  std::optional<std::string> progress(const std::string& job_id) const;

  // Why a queued job waits, as of the latest scheduling pass.
  std::optional<sched::Waiting> waiting(const std::string& id) const;
  size_t queueLength() const { return queue_length_.load(); }
  const Histogram& passLatency() const { return pass_latency_; }

 private:
  struct Supervised;  // a started job the loop follows
  JobService(store::JobStore& store, JobServiceOptions options, const sched::Clock& clock);

  // The job's data checked for `caller`; returns the spec with each store:// input and output
  // placed: named by its bucket's directory (server/access.h's placedUri), as the job's
  // coordinator takes it.
  Result<spec::JobSpec> checkData(const Caller& caller, const spec::JobSpec& spec,
                                  const std::string& job_id);
  // The uid and gid that run `account`'s ranks; {-1, -1}: the server's own.
  Result<std::pair<int, int>> identityOf(const std::string& account);
  // `uploaded`: the workdir is the job's own snapshot, which the server makes readable.
  Result<void> checkIdentity(const Caller& caller, const spec::JobSpec& spec, bool uploaded);
  // Whether a paused rank's debugger listens in a network of its job's own (the local backend,
  // with --job-network isolated or nat), where no other account's job reaches it.
  bool debuggerHasItsOwnNetwork() const;
  // Makes `spec` (with session:) the session it asks for: cohort's program, the login name.
  Result<void> asSession(const Caller& caller, spec::JobSpec& spec) const;
  // Whether jobs' nodes go to hosts the server schedules onto (the ssh backend).
  bool onHosts() const { return options_.nodes == spec::Backend::kSsh; }
  Result<std::string> copyOfCode(const Caller& caller, const std::string& job_id);
  // The job's environment: one the caller may use now (its COHORT_ENVS: "" for none), not an
  // image. Errors name the field.
  Result<std::string> environmentOf(const Caller& caller, const spec::JobSpec& spec);
  // A Python job's interpreter, asked what the job imports as its ranks will run it here (their
  // user, their sandbox, their environment): a module it lacks refuses the job, naming the
  // field, the interpreter and what to do (env/python_check.h).
  Result<void> checkRanksPython(const Caller& caller, const spec::JobSpec& spec);
  Result<void> reconcile();
  void loop();
  void schedulePass();
  Result<void> startJob(store::Job job, const sched::Placement& placement);
  // Applies the state and attempt that newly ingested events of `job_id` carry.
  void applyEvents(const std::string& job_id, const std::vector<job::Event>& events);
  // The coordinator is gone: records that it was lost when it did not report the job's end.
  void finish(Supervised& s, const std::string& lost_why);
  void wake();
  void supervise(std::unique_ptr<Supervised> s);  // follows a started job's coordinator
  void notify(const std::string& job_id) const;  // options_.on_events
  // Names this server in the job directory's report.url, for its coordinator.
  Result<void> writeReportUrl(const std::string& job_dir) const;
  void takeIncoming();  // moves incoming_ into queue_ (holding mu_)
  // GPUs no started job holds; the first `count` of them.
  std::vector<int> freeGpus(int64_t count) const;

  store::JobStore& store_;
  const JobServiceOptions options_;
  std::unique_ptr<backends::Backend> backend_;  // where jobs run
  const sched::Clock& clock_;
  std::vector<std::string> reconciled_;

  // Lock order: mu_, then incoming_mu_, waiting_mu_ or progress_mu_. The loop thread holds mu_ while it works,
  // so submissions and reads of `waiting` take only their own small locks.
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<bool> dirty_{true};  // something changed: run a scheduling pass
  bool quit_ = false;
  std::map<std::string, sched::Job> queue_;                        // queued jobs, by id
  std::map<std::string, sched::Running> running_;                  // started jobs' holdings, by id
  std::map<std::string, std::unique_ptr<Supervised>> supervised_;  // by id (loop thread)
  std::map<std::string, std::vector<int>> gpus_held_;              // started jobs' GPUs, by id
  // Why the server itself stopped a running job (stop()'s `why`), by id: its reason once it
  // has ended, rather than the signal its coordinator was sent. Rebuilt from the records of
  // stopping jobs after a restart.
  std::map<std::string, std::string> stopped_why_;
  std::mutex incoming_mu_;
  std::vector<sched::Job> incoming_;  // submitted, not yet in queue_
  mutable std::mutex waiting_mu_;
  std::map<std::string, sched::Waiting> waiting_;  // from the latest pass
  mutable std::mutex coordinators_mu_;
  std::set<std::string> coordinators_;  // the ids of supervised_, for coordinatorRunning
  mutable std::mutex progress_mu_;
  std::map<std::string, std::string> progress_;  // running jobs' latest, by id
  std::atomic<size_t> queue_length_{0};
  Histogram pass_latency_;
  std::thread thread_;
};

}  // namespace cohort::server
