// Server: `cohort server`'s HTTP/JSON API (docs/server-api.md) over the job store, the job
// service and the object store. Every request but the OpenAPI document and /metrics is
// authenticated by a bearer token (stored hashed); another account's job, log, output or store
// path answers 404. One process: the HTTP loop (server/http.h: it reads requests and writes
// answers and streams), worker threads that run the handlers, and the job service's loop thread.
// Followers of a job's events or log are streams woken through an EventHub (the job service's
// on_events, inotify on the log's directory): none holds a thread while it waits.
// `create` opens the store and reconciles; `run` blocks until `stop` (from any thread).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "sched/scheduler.h"
#include "server/http.h"
#include "server/jobs.h"
#include "server/quotas.h"
#include "storage/place.h"
#include "util/result.h"

namespace cohort::server {

struct ServerOptions {
  std::string data_root;  // database, jobs and (unless `store` says otherwise) store live here
  // Where the accounts' buckets are kept: in S3 (cohort server --store s3://B/P), checked when
  // the server starts; unset: <data_root>/store.
  std::optional<storage::StoreSite> store;
  std::string host = "127.0.0.1";
  int port = 8600;            // 0: any free port (see Server::port)
  std::string cohort_bin;     // what job coordinators run
  sched::Resources capacity;  // the machine's CPUs, memory and GPUs
  std::vector<int> gpu_ids;   // the GPUs' indices (capacity.gpus of them), handed out to jobs
  spec::Backend nodes = spec::Backend::kLocal;  // jobs' nodes: this machine's, Slurm's, Volcano's
  backends::VolcanoSettings volcano;            // with nodes kVolcano: namespace, advertise
  std::shared_ptr<backends::SshHostPool> hosts;  // with nodes kSsh: the hosts, asked already
  bool isolate = false;       // run every job's ranks under bubblewrap
  std::vector<std::string> input_roots;  // --input-root: where local inputs may be
  std::string job_network;  // --job-network: isolated | nat | host (each job's network)
  Identities identities;      // the Unix identities accounts' ranks run as (see jobs.h)
  int http_threads = 32;      // workers that run handlers; followers hold none
  Millis http_idle_timeout{60000};  // a client that keeps a connection waiting this long loses it
  int64_t max_upload_bytes = int64_t{1} << 30;  // a code upload's archive (POST /v1/uploads)
  int64_t max_tunnels = 8;  // tunnels one account holds open at once (server/tunnels.h)
  int64_t rank_pids = 4096;  // processes and threads per rank (JobServiceOptions::rank_pids)
  // Each account's quotas where its admin set none (server/quotas.h); followers: streams one
  // account may follow at once (jobs' events and logs).
  QuotaDefaults quotas;
  Millis quota_interval{2000};  // how often what each account holds in the data root is counted
  http::Limits http_limits;    // connections, header block, timeouts (idle_timeout: above)
  http::Tls tls;               // a certificate and key: the API speaks HTTPS
};

class Server {
 public:
  // Opens (or creates) <data_root>/server/cohort.db, reconciles the jobs it knows, binds the
  // port. On the first start of a data root it creates the account "admin" and its token.
  // Errors: kIo (database, port in use: the message says which), kFailedPrecondition.
  static Result<std::unique_ptr<Server>> create(const ServerOptions& options);
  ~Server();

  int port() const;
  // The admin token made by this start; empty when the data root already had accounts.
  const std::string& firstAdminToken() const;
  // What reconciling the known jobs found, one line each.
  const std::vector<std::string>& reconciled() const;

  // Every route served, as "METHOD /path/{param}", in the order they were registered (what
  // the OpenAPI document must describe).
  const std::vector<std::string>& routes() const;
  // Those of them any caller may call without a token (the route table says who may).
  const std::vector<std::string>& routesWithoutToken() const;

  // Serves until stop(). Errors: kIo when serving fails.
  Result<void> run();
  void stop();

  struct Impl;

 private:
  explicit Server(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The OpenAPI 3.0 document of the API, as served at /v1/openapi.json.
const std::string& openApiDocument();

}  // namespace cohort::server
