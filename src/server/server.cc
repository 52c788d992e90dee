// Server: admission, authentication and routing (server_impl.h), and the server's start.
#include "server/server.h"

#include "job/session.h"
#include "server/server_impl.h"

namespace cohort::server {

http::Admission Server::Impl::admit(Request& req) {
  http::Admission a;
  auto refuse = [&](const Error& e) {
    a.answer = errorResponse(e);
    return a;
  };
  // A compressed body would have to be inflated whole, with no limit to refuse it by.
  const std::string encoding = req.header("Content-Encoding");
  if (!encoding.empty() && encoding != "identity") {
    return refuse(Error{Code::kInvalidArgument,
                        "send the request body uncompressed (Content-Encoding '" +
                            printable(encoding.substr(0, 64)) + "' is not accepted)"});
  }
  const std::string method = req.method == "HEAD" ? "GET" : req.method;
  auto admitted = std::make_shared<Admitted>();
  admitted->route = table.match(method, req.path, req.matches);
  req.context = admitted;
  if (!admitted->route) return a;  // no body; handle() answers 404
  const RoutePattern& spec = admitted->route->spec;
  if (spec.who == Who::kAccount || spec.who == Who::kAdmin) {
    auto caller = authenticate(req, &admitted->token_hash);
    if (!caller) return refuse(caller.error());
    admitted->caller = *caller;
    if (spec.who == Who::kAdmin && !caller->admin) {
      return refuse(Error{Code::kPermissionDenied,
                          spec.pattern == "/v1/metrics"
                              ? "only an admin account may read every job's metrics (GET "
                                "/metrics has the server's own, without a token)"
                              : "only an admin account may do this"});
    }
  } else if (spec.who == Who::kJob) {
    if (auto ok = checkReportToken(req); !ok) return refuse(ok.error());
  } else if (spec.who == Who::kLab) {
    if (auto ok = authenticateLab(req, *admitted); !ok) return refuse(ok.error());
  }
  const size_t length = static_cast<size_t>(
      std::strtoull(req.header("Content-Length").c_str(), nullptr, 10));
  switch (spec.body) {
    case BodyKind::kNone:
      a.body_limit = 0;
      break;
    case BodyKind::kJson:
      a.body_limit = kMaxJsonRead;
      if (length > kMaxJsonRead) {
        return refuse(Error{Code::kTooLarge, "the request body is over 4 MiB"});
      }
      break;
    case BodyKind::kProxied:
      a.body_limit = kMaxLabBody;
      if (length > kMaxLabBody) {
        return refuse(Error{Code::kTooLarge,
                            "the request body is over 32 MiB, the lab proxy's limit: copy large "
                            "files with cohort session ssh (scp, rsync)"});
      }
      break;
    case BodyKind::kStoreFile:
    case BodyKind::kCodeUpload: {
      const bool code = spec.body == BodyKind::kCodeUpload;
      const size_t limit = code ? static_cast<size_t>(options.max_upload_bytes) : kMaxUpload;
      if (length > limit) {
        return refuse(Error{
            Code::kTooLarge,
            code ? "the code upload (" + formatSize(static_cast<double>(length)) +
                       ") is over " + formatSize(static_cast<double>(limit)) +
                       ", this server's limit (cohort server --max-upload): leave files out "
                       "with .cohortignore, or put data in the store and name it in inputs"
                 : std::string("the request body is over 1 GiB")});
      }
      const std::string account = admitted->caller.account;
      std::function<size_t()> waiting;
      if (code) {
        waiting = [&] { return static_cast<size_t>(waitingUploads(options.data_root, account)); };
      }
      auto quotas = quotasOf(account);
      if (!quotas) return refuse(quotas.error());
      // Nothing more is received for an account that holds its quota in the data root.
      if (auto disk = checkDisk(account, {static_cast<int64_t>(length), 1}); !disk) {
        return refuse(disk.error());
      }
      auto slot = limits.take(AccountLimits::Kind::kUpload, account, admitted->token_hash,
                              quotas->uploads, waiting);
      if (!slot) return refuse(slot.error());
      admitted->upload = std::move(*slot);
      auto file = bodyFile();
      if (!file) return refuse(file.error());
      a.body_file = std::make_shared<UniqueFd>(std::move(*file));
      a.body_limit = limit;
      break;
    }
  }
  return a;
}

Result<UniqueFd> Server::Impl::bodyFile() {
  // The server's own directory (0700): a body is the server's until the account's process is
  // handed its descriptor, and the account's directories stay as the account's work made them.
  const std::string dir = options.data_root + "/server";
  UniqueFd fd(::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (fd.valid()) return fd;
  std::string name = dir + "/.body-XXXXXX";  // a file system without O_TMPFILE
  fd.reset(::mkostemp(name.data(), O_CLOEXEC));
  if (!fd.valid()) return failErrno("create a file in '" + dir + "'");
  ::unlink(name.c_str());
  return fd;
}

Result<void> Server::Impl::checkReportToken(const Request& req) {
  const std::string header = req.header("Authorization");
  if (header.rfind("Bearer ", 0) != 0 || header.size() <= 7) {
    return fail(Code::kUnauthenticated, "no token: send the job's report token");
  }
  const std::string id = req.matches.at(0);
  auto job = store->job(id);
  if (!job && job.error().code != Code::kNotFound) return tl::unexpected<Error>(job.error());
  if (!job || !sameHash(sha256Hex(header.substr(7)), job->report_hash)) {
    return fail(Code::kUnauthenticated, "not the report token of job '" + printable(id) + "'");
  }
  return {};
}

void Server::Impl::handle(Request& req, Response& res) {
  const std::string method = req.method == "HEAD" ? "GET" : req.method;
  if (method == "GET" && isConsolePath(req.path)) {
    consoleAnswer(res);
    return;
  }
  auto admitted = std::static_pointer_cast<Admitted>(req.context);
  if (!admitted) {
    http::Admission a = admit(req);
    if (a.answer) {
      res = std::move(*a.answer);
      return;
    }
    admitted = std::static_pointer_cast<Admitted>(req.context);
  }
  const auto* route = admitted->route;
  if (!route) {
    writeError(res, Error{Code::kNotFound, "no such endpoint: " + printable(req.method) + " " +
                                               printable(req.path.substr(0, 256)) +
                                               " (see /v1/openapi.json)"});
    return;
  }
  const auto t0 = std::chrono::steady_clock::now();
  Result<void> result = [&]() -> Result<void> {
    try {
      COHORT_TRY(route->handler(req, res, admitted->caller));
    } catch (const std::exception& e) {
      return fail(Code::kInternal, std::string("internal error: ") + e.what());
    }
    if (res.stream && res.status < 300 && isFollower(req)) {
      COHORT_ASSIGN(store::Quotas quotas, quotasOf(admitted->caller.account));
      COHORT_ASSIGN(auto slot,
                    limits.take(AccountLimits::Kind::kFollower, admitted->caller.account,
                                admitted->token_hash, quotas.followers));
      res.stream = std::make_shared<FollowerStream>(std::move(res.stream), std::move(slot));
    }
    return Result<void>();
  }();
  if (!result) {
    res = Response();
    writeError(res, result.error());
  }
  metrics.record(method, route->path.name(), res.status,
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

Result<std::shared_ptr<AccountLimits::Slot>> Server::Impl::takeTunnel(const Request& req,
                                                                      const Caller& caller) {
  auto admitted = std::static_pointer_cast<Admitted>(req.context);
  return limits.take(AccountLimits::Kind::kTunnel, caller.account,
                     admitted ? admitted->token_hash : std::string(), options.max_tunnels);
}

bool Server::Impl::isFollower(const Request& req) {
  return followParameter(req) || req.hasParam("wait") ||
         req.header("Accept").find("text/event-stream") != std::string::npos;
}

Result<Caller> Server::Impl::authenticate(const Request& req, std::string* token_hash) {
  std::string header = req.header("Authorization");
  if (header.rfind("Bearer ", 0) != 0 || header.size() <= 7) {
    return fail(Code::kUnauthenticated,
                "no token: send 'Authorization: Bearer <token>' (cohort login URL)");
  }
  std::string hash = sha256Hex(header.substr(7));
  if (token_hash) *token_hash = hash;
  return callerOfTokenHash(hash);
}

Result<Caller> Server::Impl::callerOfTokenHash(const std::string& hash) {
  uint64_t generation;
  {
    std::lock_guard lock(auth_mu);
    auto it = auth_cache.find(hash);
    if (it != auth_cache.end()) return it->second;
    generation = auth_generation;
  }
  auto token = store->tokenByHash(hash);
  if (!token) {
    if (token.error().code == Code::kNotFound) {
      return fail(Code::kUnauthenticated, "the token is not valid (revoked or mistyped)");
    }
    return tl::unexpected<Error>(token.error());
  }
  COHORT_ASSIGN(store::Account account, store->account(token->account));
  Caller caller{account.name, account.admin};
  std::lock_guard lock(auth_mu);
  // A token revoked while it was read from the store is not cached.
  if (generation == auth_generation) auth_cache[hash] = caller;
  return caller;
}

void Server::Impl::forgetTokens() {
  std::lock_guard lock(auth_mu);
  auth_cache.clear();
  ++auth_generation;
}

void Server::Impl::route(RoutePattern spec, Handler handler) {
  table.add(std::move(spec), std::move(handler));
}

Result<store::Job> Server::Impl::visibleJob(const Caller& caller, const std::string& id) {
  auto job = store->job(id);
  if (!job || (job->account != caller.account && !caller.admin)) {
    if (job || job.error().code == Code::kNotFound) {
      return fail(Code::kNotFound, "job '" + id + "' not found");
    }
    return tl::unexpected<Error>(job.error());
  }
  return job;
}

namespace {

// The rank under a launcher (torchrun, mpirun) that its report names as the one that failed
// (result.json's root_cause.launched), or null.
Json launchedJson(const Json& root_cause) {
  auto it = root_cause.find("launched");
  if (it == root_cause.end() || !it->is_object()) return nullptr;
  const Json& l = *it;
  auto rank = l.find("rank");
  auto name = l.find("name");
  auto what = l.find("what");
  if (rank == l.end() || !rank->is_number_integer() || name == l.end() || !name->is_string() ||
      what == l.end() || !what->is_string()) {
    return nullptr;
  }
  return {{"rank", *rank}, {"name", *name}, {"what", *what}};
}

}  // namespace

Json Server::Impl::jobJson(const store::Job& job) {
  const std::optional<SessionSettings> session = sessionOf(job);
  Json waiting = nullptr;
  if (job.state == "queued") {
    if (auto w = jobs->waiting(job.id)) {
      waiting = {{"kind", sched::waitKindName(w->kind)}, {"reason", w->reason}};
    } else {
      waiting = {{"kind", "resources"}, {"reason", "waiting for the next scheduling pass"}};
    }
  }
  Json root_cause = nullptr;
  if (!job.root_cause_json.empty()) {
    Json rc = Json::parse(job.root_cause_json, nullptr, false);
    if (rc.is_object()) {
      root_cause = {{"name", rc.value("name", "")},
                    {"role", rc.value("role", "")},
                    {"rank", rc.value("rank", 0)},
                    {"node", rc.value("node", 0)},
                    {"exit_code", rc.value("code", 0)},
                    {"signal", rc.value("signal", 0)},
                    {"tail", rc.value("tail", Json::array())},
                    {"hint", rc.value("hint", "")},
                    {"launched", launchedJson(rc)}};
    }
  }
  return {{"id", job.id},
          {"name", job.name},
          {"account", job.account},
          {"state", job.state},
          {"priority", job.priority},
          {"framework", job.framework},
          {"ranks", job.ranks},
          {"resources",
           {{"cpus", static_cast<double>(job.cpu_millis) / 1000},
            {"gpus", job.gpus},
            {"memory", job.memory_bytes}}},
          {"submitted", isoOrNull(job.submitted)},
          {"started", isoOrNull(job.started)},
          {"ended", isoOrNull(job.ended)},
          {"exit_code", job.exit_code ? Json(*job.exit_code) : Json(nullptr)},
          {"reason", job.reason},
          {"waiting", waiting},
          {"attempts", job.attempts},
          {"root_cause", root_cause},
          {"kind", session ? "session" : "job"},
          {"session", session ? Json{{"idle_timeout", formatDuration(session->idle_timeout)},
                                     {"user", session->user},
                                     {"connections", sessions.of(job.id).open},
                                     {"jupyter", session->jupyter ? Json(job::jupyterBaseUrl(job.id) + "lab")
                                                                  : Json(nullptr)}}
                              : Json(nullptr)}};
}

Result<std::string> Server::Impl::logPath(const store::Job& job, const std::string& rank) {
  if (rank.empty()) return job.job_dir.empty() ? std::string() : job::Layout(job.job_dir).consoleLog();
  auto r = parseInt(rank);
  if (!r) return fail(Code::kInvalidArgument, "rank: expected a number, got '" + printable(rank) + "'");
  if (r.value() < 0 || r.value() >= job.ranks) {
    return fail(Code::kNotFound, "job '" + job.id + "' has no rank " + rank);
  }
  if (job.job_dir.empty()) return std::string();  // not started: nothing yet
  const job::Layout layout(job.job_dir);
  auto text = readFile(layout.planFile());
  if (!text) return std::string();
  if (!checkJsonDepth(*text)) return fail(Code::kNotFound, "job '" + job.id + "' has no plan");
  Json plan = Json::parse(*text, nullptr, false);
  auto plain = [](const std::string& name) {
    if (name.empty() || name.size() > 64 || name == "." || name == "..") return false;
    for (char c : name) {
      bool ok = std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
      if (!ok) return false;
    }
    return true;
  };
  if (plan.is_object() && plan["nodes"].is_array()) {
    // "worker/3" logs to worker-3.log, also when a launcher that tees its ranks' output
    // (torchrun) started it; a launcher ("torchrun/node1") to torchrun-node1.log.
    auto logOf = [&](const Json& rp, const std::string& role) -> std::optional<std::string> {
      const std::string name = rp.value("name", "");
      std::string index = rp.contains("role_rank") ? std::to_string(rp.value("role_rank", -1)) : "";
      if (name.rfind(role + "/", 0) == 0 && plain(name.substr(role.size() + 1))) {
        index = name.substr(role.size() + 1);
      }
      if (!plain(role) || !plain(index) || index[0] == '-') return std::nullopt;
      return layout.logFile(role + "-" + index);
    };
    std::optional<std::string> launcher;
    for (const Json& node : plan["nodes"]) {
      if (!node.is_object() || !node.contains("ranks") || !node["ranks"].is_array()) continue;
      for (const Json& rp : node["ranks"]) {
        if (!rp.is_object()) continue;
        const std::string role = rp.value("role", "");
        if (rp.contains("teed") && rp["teed"].is_array()) {
          for (const Json& teed : rp["teed"]) {
            if (teed.is_object() && teed.value("rank", -1) == *r) {
              if (auto log = logOf(teed, role)) return *log;
            }
          }
        }
        if (rp.value("rank", -1) == *r && !launcher) launcher = logOf(rp, role);
      }
    }
    if (launcher) return *launcher;
  }
  return fail(Code::kNotFound, "job '" + job.id + "' has no process with rank " + rank);
}

Result<store::Quotas> Server::Impl::quotasOf(const std::string& account) {
  COHORT_ASSIGN(store::Account a, store->account(account));
  return effectiveQuotas(a, options.quotas);
}

Result<void> Server::Impl::checkDisk(const std::string& account, const DiskUse& adding) {
  COHORT_ASSIGN(store::Quotas quotas, quotasOf(account));
  return checkDiskQuota(account, quotas, usage.of(account), adding);
}

void Server::Impl::enforceDiskQuotas() {
  auto accounts = store->accounts();
  if (!accounts) return;
  // What each account holds: its buckets (in the store on disk), its uploads, its jobs'
  // directories (one that ended and whose coordinator is gone no longer changes) and its
  // environments.
  std::map<std::string, std::vector<DiskUsage::Root>> roots;
  std::map<std::string, std::vector<store::Job>> jobs_of;
  for (const store::Account& a : *accounts) {
    std::vector<DiskUsage::Root>& list = roots[a.name];
    if (!site.inS3()) {
      if (auto buckets = store->buckets(a.name)) {
        for (const store::Bucket& b : *buckets) list.push_back({site.dir + "/" + b.dir});
      }
    }
    list.push_back({job::uploadsDir(options.data_root) + "/" + a.name});
    list.push_back({options.data_root + "/account-envs/" + a.name});
    auto jobs_now = store->jobs({a.name, {}, std::numeric_limits<int>::max()});
    if (!jobs_now) continue;
    for (const store::Job& job : *jobs_now) {
      const std::string dir =
          job.job_dir.empty() ? job::Layout::of(options.data_root, job.id).dir() : job.job_dir;
      list.push_back({dir, store::isFinalState(job.state) && !jobs->coordinatorRunning(job.id)});
    }
    jobs_of[a.name] = std::move(*jobs_now);
  }
  const std::map<std::string, DiskUse> totals = usage.refresh(roots);
  for (const store::Account& a : *accounts) {
    const store::Quotas quotas = effectiveQuotas(a, options.quotas);
    auto within = checkDiskQuota(a.name, quotas, totals.at(a.name), {});
    if (within) continue;
    // The account's running jobs write what took it there: they stop, saying why. Its queued
    // jobs write nothing until they start, and another account's are not touched.
    for (const store::Job& job : jobs_of[a.name]) {
      if (store::isFinalState(job.state) || job.state == "queued" || job.state == "stopping") {
        continue;
      }
      (void)jobs->stop(job.id, within.error().message + " (the job was stopped)");
    }
  }
}

void Server::Impl::watchQuotas() {
  std::unique_lock lock(quota_mu);
  while (!quota_quit) {
    lock.unlock();
    enforceDiskQuotas();
    lock.lock();
    quota_cv.wait_for(lock, options.quota_interval, [&] { return quota_quit; });
  }
}

void Server::Impl::watchSessions() {
  std::unique_lock lock(quota_mu);
  while (!quota_quit) {
    lock.unlock();
    store::JobFilter running;
    running.states = {"running"};
    running.limit = 100000;
    if (auto list = store->jobs(running)) {
      for (const store::Job& job : *list) {
        const std::optional<SessionSettings> session = sessionOf(job);
        if (!session) continue;
        const SessionActivity::Seen seen = sessions.of(job.id);
        SessionIdleAsk ask;
        ask.now = nowUnixNanos();
        ask.started = job.started > 0 ? std::max(job.started, started_at) : 0;
        ask.last_closed = seen.last_closed;
        ask.open = seen.open;
        ask.idle_timeout = session->idle_timeout;
        if (auto why = idleReason(ask)) {
          (void)jobs->stop(job.id, *why);
          sessions.forget(job.id);
        }
      }
    }
    lock.lock();
    quota_cv.wait_for(lock, std::chrono::seconds(1), [&] { return quota_quit; });
  }
}

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Server::~Server() { stop(); }

Result<std::unique_ptr<Server>> Server::create(const ServerOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  const std::string dir = options.data_root + "/server";
  COHORT_TRY(makeDirs(dir));
  // The database, the tokens and the store are the server's alone, also for ranks that run
  // outside the sandbox (--no-isolate) as their account's user.
  if (options.store) {
    impl->site = *options.store;
  } else {
    impl->site.dir = options.data_root + "/store";
  }
  if (auto usable = storage::checkSite(impl->site); !usable) {
    return withContext(usable.error(), "the store " + impl->site.describe());
  }
  std::vector<std::string> own = {dir};
  if (!impl->site.inS3()) own.push_back(impl->site.dir);
  for (const std::string& path : own) {
    if (::chmod(path.c_str(), 0700) != 0) return failErrno("chmod '" + path + "'");
  }
  // One server per data root: two would both start and follow the same jobs. The lock is not
  // inherited by coordinators (close-on-exec), so a restarted server can take it while the
  // jobs of the previous one still run.
  const std::string lock_path = dir + "/server.lock";
  impl->lock = UniqueFd(::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  if (!impl->lock.valid()) return failErrno("open '" + lock_path + "'");
  if (::flock(impl->lock.get(), LOCK_EX | LOCK_NB) != 0) {
    auto holder = readFile(lock_path);
    std::string pid = holder ? holder->substr(0, holder->find('\n')) : std::string();
    return fail(Code::kFailedPrecondition,
                "another cohort server" + (pid.empty() ? std::string() : " (pid " + pid + ")") +
                    " uses the data root '" + options.data_root + "'");
  }
  (void)::ftruncate(impl->lock.get(), 0);
  (void)writeAll(impl->lock.get(), std::to_string(::getpid()) + "\n");
  COHORT_ASSIGN(impl->store, store::JobStore::open(dir + "/cohort.db"));
  JobServiceOptions jopts;
  jopts.data_root = options.data_root;
  jopts.cohort_bin = options.cohort_bin;
  jopts.capacity = options.capacity;
  jopts.gpu_ids = options.gpu_ids;
  jopts.nodes = options.nodes;
  jopts.volcano = options.volcano;
  jopts.hosts = options.hosts;
  jopts.isolate = options.isolate;
  jopts.input_roots = options.input_roots;
  jopts.job_network = options.job_network;
  jopts.identities = options.identities;
  jopts.max_upload_bytes = options.max_upload_bytes;
  jopts.rank_pids = options.rank_pids;
  jopts.store_in_s3 = impl->site.inS3();
  COHORT_ASSIGN(impl->hub, EventHub::create());
  jopts.on_events = [hub = impl->hub.get()](const std::string& id) { hub->notify(id); };
  EnvironmentServiceOptions eopts;
  eopts.data_root = options.data_root;
  eopts.site = env::storeDirs(options.data_root);
  eopts.cohort_bin = options.cohort_bin;
  eopts.sandbox = options.isolate;
  eopts.identities = options.identities;
  eopts.on_change = jopts.on_events;
  COHORT_ASSIGN(impl->environments, EnvironmentService::create(*impl->store, eopts));
  jopts.environments = [envs = impl->environments.get()](const Caller& c, const std::string& n) {
    return envs->searchPath(c, n);
  };

  Impl* self = impl.get();
  // Every follower holds a connection (a descriptor), not a thread: allow many.
  raiseFileLimit();
  impl->routes();
  for (const auto& r : impl->table.routes()) {
    impl->route_names.push_back(r.spec.method + " " + r.path.name());
    if (r.spec.who == Who::kAnyone) impl->open_routes.push_back(impl->route_names.back());
  }
  http::Options hopts;
  hopts.host = options.host;
  hopts.port = options.port;
  hopts.threads = options.http_threads;
  hopts.limits = options.http_limits;
  hopts.limits.idle_timeout = options.http_idle_timeout;
  hopts.limits.header_timeout = std::min(hopts.limits.header_timeout, options.http_idle_timeout);
  hopts.tls = options.tls;
  hopts.admit = [self](Request& req) { return self->admit(req); };
  hopts.handle = [self](Request& req, Response& res) { self->handle(req, res); };
  hopts.error = [](int status, std::string message) {
    Code code = status == 404               ? Code::kNotFound
                : status == 413 || status == 431 ? Code::kTooLarge
                : status >= 500             ? Code::kInternal
                                            : Code::kInvalidArgument;
    Response res = errorResponse(Error{code, std::move(message)});
    res.status = status;
    return res;
  };
  EventHub* hub = impl->hub.get();
  hopts.watch = {{hub->inotifyFd(), [hub] { hub->readInotify(); }},
                 {hub->timerFd(), [hub] { hub->readTimer(); }}};
  auto server = http::HttpServer::create(std::move(hopts));
  if (!server) {
    return fail(Code::kIo, "cannot listen on " + options.host + ":" + std::to_string(options.port) +
                               " (in use? pick another with --listen HOST:PORT)");
  }
  impl->http = std::move(*server);
  const int port = impl->http->port();
  impl->port = port;
  // Coordinators on this machine report here (requests wait in the backlog until run()).
  const bool any = options.host.empty() || options.host == "0.0.0.0" || options.host == "::";
  const std::string host = any ? std::string("127.0.0.1")
                           : options.host.find(':') != std::string::npos ? "[" + options.host + "]"
                                                                         : options.host;
  const bool tls = !options.tls.cert_pem.empty();
  jopts.report_url = (tls ? "https://" : "http://") + host + ":" + std::to_string(port);
  if (tls) {
    // Coordinators trust this server's key, whatever names its certificate lists.
    COHORT_ASSIGN(jopts.report_pin, publicKeyPin(options.tls.cert_pem));
  }
  COHORT_ASSIGN(impl->jobs, JobService::create(*impl->store, jopts, impl->clock));
  // The first start makes the admin account, once the server is sure to serve.
  COHORT_ASSIGN(std::vector<store::Account> accounts, impl->store->accounts());
  if (accounts.empty()) {
    store::Account admin{"admin", true, std::nullopt, std::nullopt, nowUnixNanos()};
    COHORT_TRY(impl->store->createAccount(admin));
    COHORT_ASSIGN(std::string token, newToken());
    COHORT_TRY(impl->store->addToken("admin", sha256Hex(token), "first admin token"));
    const std::string path = dir + "/admin.token";
    COHORT_TRY(writeFileAtomic(path, token + "\n", true, 0600));
    impl->first_admin_token = token;
  }
  // What each account holds is counted before the first request is served, then every
  // quota_interval.
  impl->enforceDiskQuotas();
  impl->quota_thread = std::thread([self] { self->watchQuotas(); });
  impl->started_at = nowUnixNanos();
  impl->session_thread = std::thread([self] { self->watchSessions(); });
  return std::unique_ptr<Server>(new Server(std::move(impl)));
}

int Server::port() const { return impl_->port; }
const std::vector<std::string>& Server::routes() const { return impl_->route_names; }
const std::vector<std::string>& Server::routesWithoutToken() const { return impl_->open_routes; }
const std::string& Server::firstAdminToken() const { return impl_->first_admin_token; }
const std::vector<std::string>& Server::reconciled() const { return impl_->jobs->reconciled(); }

Result<void> Server::run() {
  if (impl_->stopping) return {};
  return impl_->http->run();
}

void Server::stop() {
  impl_->stopping = true;
  if (impl_->http) impl_->http->stop();
  {
    std::lock_guard lock(impl_->quota_mu);
    impl_->quota_quit = true;
  }
  impl_->quota_cv.notify_all();
  if (impl_->quota_thread.joinable()) impl_->quota_thread.join();
  if (impl_->session_thread.joinable()) impl_->session_thread.join();
}

}  // namespace cohort::server
