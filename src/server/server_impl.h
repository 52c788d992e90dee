// Server::Impl: the state of one `cohort server` that its parts share: the store, the job
// and environment services, the event hub, the route table, authentication and per-account
// limits. server.cc admits, authenticates and routes; api_*.cc hold the handlers, one file per
// resource (jobs, store, accounts, environments, operations). Internal to src/server.
#pragma once

#include <condition_variable>
#include <thread>

#include "server/api.h"
#include "server/lab_proxy.h"
#include "server/sessions.h"

namespace cohort::server {

// A follower's stream, holding one of its account's follower slots while it is open, and cut
// off as soon as the token it was opened with is revoked.
class FollowerStream : public http::StreamSource {
 public:
  FollowerStream(std::shared_ptr<http::StreamSource> inner,
                 std::shared_ptr<AccountLimits::Slot> slot)
      : inner_(std::move(inner)), slot_(std::move(slot)) {}
  void start(http::StreamWaker waker) override {
    slot_->onRevoke([waker] { waker.wake(); });
    inner_->start(std::move(waker));
  }
  State pull(std::string& out) override {
    if (slot_->revoked()) return State::kAbort;
    return inner_->pull(out);
  }

 private:
  std::shared_ptr<http::StreamSource> inner_;
  std::shared_ptr<AccountLimits::Slot> slot_;
};

struct Server::Impl {
  ServerOptions options;
  storage::StoreSite site;  // where the accounts' buckets are: options.store, or on disk
  std::unique_ptr<store::JobStore> store;
  sched::SystemClock clock;
  std::unique_ptr<EventHub> hub;  // before `jobs`, which notifies it
  std::unique_ptr<EnvironmentService> environments;  // before `jobs`, which asks it
  std::unique_ptr<JobService> jobs;
  HttpMetrics metrics;
  int port = 0;
  std::string first_admin_token;
  std::atomic<bool> stopping{false};
  std::vector<std::string> route_names;  // "METHOD /path/{param}", as the table has them
  std::vector<std::string> open_routes;  // those Who::kAnyone may call
  UniqueFd lock;  // flock'd <data_root>/server/server.lock, held while the server lives

  AccountLimits limits;  // followers and uploads each account holds
  DiskUsage usage;       // what each account holds in the data root, counted every quota_interval
  std::mutex submit_mu;  // held from counting an account's queued jobs to queuing one more
  std::mutex quota_mu;   // quota_quit, for the thread that counts and enforces
  std::condition_variable quota_cv;
  bool quota_quit = false;
  std::thread quota_thread;
  std::thread session_thread;  // watchSessions, ended with quota_quit
  int64_t started_at = 0;      // unix nanos: sessions' idle time counts from here at the latest
  SessionActivity sessions;    // connections open into each session (before `http`)
  LabPasses lab_passes;        // sessions' lab tickets and cookies
  std::mutex auth_mu;
  std::unordered_map<std::string, Caller> auth_cache;  // by token hash
  uint64_t auth_generation = 0;                        // bumped when a token is revoked

  using Handler = std::function<Result<void>(const Request&, Response&, const Caller&)>;
  RouteTable<Handler> table;
  // Last: destroyed first, so that no handler or stream runs once the rest is gone.
  std::unique_ptr<http::HttpServer> http;

  // What admission decided for a request, for its handler.
  struct Admitted {
    const RouteTable<Handler>::Route* route = nullptr;
    Caller caller;
    std::string token_hash;  // the caller's token's
    std::shared_ptr<AccountLimits::Slot> upload;  // an upload's slot, held while it is received
    bool lab_cookie = false;  // Who::kLab: the caller came with the lab cookie...
    std::string cookie_job;   // ...set for this job
  };

  // Before any of a request's body is read (on a worker thread): its route, then its caller as
  // the route says, then what body it may send and where that goes. Only then is the body read.
  http::Admission admit(Request& req);

  // A file for an upload's body, in the server's own directory, with no name: it is gone when
  // its descriptor is closed, whatever happens to the request.
  Result<UniqueFd> bodyFile();

  // A coordinator's report names its job's own token: checked before the report is read.
  Result<void> checkReportToken(const Request& req);

  // Routes `req` (on a worker thread, after admit): its handler, with the caller admission
  // found. A stream that follows a job or a build takes a follower slot of the caller's.
  void handle(Request& req, Response& res);

  // Whether the answer to `req` waits for what is to come (a follower), rather than sending
  // what there is: logs with follow=1, events as a stream or a long poll.
  static bool isFollower(const Request& req);

  // The account of the request's bearer token; its hash in `token_hash`.
  Result<Caller> authenticate(const Request& req, std::string* token_hash = nullptr);
  // The account of the token whose hash is `hash`. Errors: kUnauthenticated (revoked).
  Result<Caller> callerOfTokenHash(const std::string& hash);
  // Who::kLab: the bearer token, else the lab cookie a ticket set (lab_proxy.h), into `admitted`.
  Result<void> authenticateLab(const Request& req, Admitted& admitted);

  void forgetTokens();

  void route(RoutePattern spec, Handler handler);

  Result<store::Job> visibleJob(const Caller& caller, const std::string& id);

  // One of the caller's account's tunnel slots (cohort server --max-tunnels), taken with the
  // request's token, so that revoking it ends the tunnel. Errors: kResourceExhausted.
  Result<std::shared_ptr<AccountLimits::Slot>> takeTunnel(const Request& req, const Caller& caller);

  Json jobJson(const store::Job& job);

  // The file a job's logs come from: the merged console, or a rank's log. The plan only says
  // which role and index the rank is; the path is built from those, never read from a file.
  // "" when the job has not started. Errors: kInvalidArgument (rank not a number), kNotFound.
  Result<std::string> logPath(const store::Job& job, const std::string& rank);

  // `account`'s quotas in force (its own, else the server's defaults). Errors: the store's.
  Result<store::Quotas> quotasOf(const std::string& account);
  // Whether `adding` more in the data root keeps `account` within its bytes and inodes quotas,
  // as last counted. Errors: overQuota's.
  Result<void> checkDisk(const std::string& account, const DiskUse& adding = {});
  // Counts what every account holds in the data root, and stops the running jobs of each that
  // is over its bytes or inodes quota (their writes took it there), saying why.
  void enforceDiskQuotas();
  // Each quota of `account` in force, what it uses of it, and whether it is the default.
  Json quotasJson(const store::Account& account);
  // Every quota_interval until stop(): enforceDiskQuotas.
  void watchQuotas();
  // Every second until stop(): stops each running session idle for its idle_timeout.
  void watchSessions();

  void routes();
  void jobRoutes();
  void labRoutes();  // api_lab.cc
  void storeRoutes();
  void accountRoutes();
  void environmentRoutes();
};

}  // namespace cohort::server
