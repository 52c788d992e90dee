// The jobs' routes: submit, read, follow (events and logs, streamed), stop, delete, outputs,
// and the coordinators' reports.
#include "server/server_impl.h"

#include <sys/socket.h>

#include "agent/job_ports.h"
#include "server/tunnels.h"

namespace cohort::server {

namespace {

// An event as the API shows it: the stored object with its "seq" and "time"; null when the
// stored text is not an object.
Json eventJson(const store::Event& e) {
  if (!checkJsonDepth(e.json)) return nullptr;
  Json j = Json::parse(e.json, nullptr, false);
  if (!j.is_object()) return nullptr;
  j.erase("t");
  if (!j.contains("time")) j["time"] = isoTime(e.time);
  j["seq"] = e.seq;
  return j;
}

// The job's "submitted" event, which the store does not hold: seq 0, before every other.
Json submittedJson(const store::Job& job) {
  return {{"time", isoTime(job.submitted)},
          {"event", "submitted"},
          {"account", job.account},
          {"priority", job.priority},
          {"seq", 0}};
}

bool isFinalStateEvent(const Json& j) {
  return j.value("event", "") == "state" && store::isFinalState(j.value("state", ""));
}

// The events of `job` after `after` (seq order), and whether they include its final state.
struct EventsAfter {
  std::vector<Json> events;
  int64_t last = 0;
  bool final_event = false;  // the job's final state event is among them (and is the last)
};

Result<EventsAfter> eventsAfter(store::JobStore& store, const store::Job& job, int64_t after) {
  COHORT_ASSIGN(std::vector<store::Event> stored, store.events(job.id));
  EventsAfter out;
  out.last = std::max<int64_t>(after, 0);
  if (after < 0) out.events.push_back(submittedJson(job));
  for (const store::Event& e : stored) {
    if (e.seq <= after) {
      continue;
    }
    out.last = e.seq;
    Json j = eventJson(e);
    if (j.is_null()) continue;
    const bool final_event = isFinalStateEvent(j);
    out.events.push_back(std::move(j));
    if (final_event) {
      out.final_event = true;
      break;
    }
  }
  return out;
}

}  // namespace

// A followed log: what the file holds from `pos` on, then whatever is appended, until the job
// is final and the last of it was sent. Woken by the log's directory (inotify) and the job's
// events; holds no thread while it waits.
class LogStream : public http::StreamSource {
 public:
  LogStream(Server::Impl& server, std::string job_id, std::string rank, std::string path,
            UniqueFd fd, int64_t pos, bool following)
      : server_(server),
        job_id_(std::move(job_id)),
        rank_(std::move(rank)),
        path_(std::move(path)),
        fd_(std::move(fd)),
        pos_(pos),
        following_(following) {}

  void start(http::StreamWaker waker) override {
    if (following_) sub_ = server_.hub->subscribe(job_id_, [waker] { waker.wake(); });
  }

  State pull(std::string& out) override {
    if (server_.stopping) return State::kEnd;
    if (path_.empty()) {
      auto job = server_.store->job(job_id_);
      if (!job) return State::kEnd;
      if (!job->job_dir.empty()) {
        auto p = server_.logPath(*job, rank_);
        if (!p) return State::kEnd;
        path_ = *p;
      }
    }
    if (!path_.empty()) {
      // Watch before reading: a line written after the read wakes the stream.
      const std::string dir = path_.substr(0, path_.rfind('/'));
      if (sub_ && watched_ != dir) {
        watched_ = sub_->watch(dir, job::jobsDir(server_.options.data_root));
      }
      if (!fd_.valid()) {
        auto fd = openLog(path_);
        if (!fd) return State::kEnd;  // not a regular file: refused
        fd_ = std::move(*fd);
      }
    }
    if (fd_.valid() && readNextChunk(fd_.get(), pos_, out)) return State::kMore;
    if (!following_ || ended_) return State::kEnd;
    auto job = server_.store->job(job_id_);
    // The job's last lines (its end, the root cause, a hang's stacks) are written after its end
    // is recorded: the log is complete once its coordinator is gone too. One more read then.
    if (!job || (store::isFinalState(job->state) && !server_.jobs->coordinatorRunning(job_id_))) {
      ended_ = true;
      return State::kMore;
    }
    return State::kWait;
  }

  // Opens a log for reading: never through a symbolic link, and only a regular file. An
  // invalid descriptor when there is no such file yet. Errors: kNotFound for anything else.
  static Result<UniqueFd> openLog(const std::string& path) {
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
    if (!fd.valid()) {
      if (errno == ENOENT) return UniqueFd();
      return fail(Code::kNotFound, "the log is not a regular file");
    }
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
      return fail(Code::kNotFound, "the log is not a regular file");
    }
    return fd;
  }

 private:
  Server::Impl& server_;
  const std::string job_id_, rank_;
  std::string path_;
  UniqueFd fd_;
  int64_t pos_;
  const bool following_;
  bool ended_ = false;
  std::string watched_;
  std::unique_ptr<EventHub::Subscription> sub_;
};

// A job's events as they are stored: Server-Sent Events (each "id: <seq>" and "data: <json>")
// until the job's final state event; or one long-poll answer ({"events": [...], ...}) as soon as
// there is an event after `after_`, the job ended, or the wait is over.
class EventStream : public http::StreamSource {
 public:
  EventStream(Server::Impl& server, store::Job job, int64_t after, bool sse,
              std::chrono::milliseconds wait)
      : server_(server), job_(std::move(job)), after_(after), sse_(sse), wait_(wait) {}

  void start(http::StreamWaker waker) override {
    sub_ = server_.hub->subscribe(job_.id, [waker] { waker.wake(); });
    deadline_ = std::chrono::steady_clock::now() + wait_;
    sub_->wakeAfter(sse_ ? std::chrono::milliseconds(kSseKeepAlive) : wait_);
    next_ping_ = std::chrono::steady_clock::now() + kSseKeepAlive;
  }

  State pull(std::string& out) override {
    if (server_.stopping) return State::kEnd;
    auto job = server_.store->job(job_.id);
    if (!job) return State::kEnd;
    auto got = eventsAfter(*server_.store, *job, after_);
    if (!got) return State::kEnd;
    after_ = got->last;
    const bool final_job = store::isFinalState(job->state);
    const auto now = std::chrono::steady_clock::now();
    // A final job's last event may be a moment behind its record: wait for it a little.
    bool ended = got->final_event;
    if (final_job && !ended) {
      if (final_seen_ && now >= final_deadline_) {
        ended = true;
      } else if (!final_seen_) {
        final_seen_ = true;
        final_deadline_ = now + kFinalGrace;
        sub_->wakeAfter(std::chrono::milliseconds(kFinalGrace) + std::chrono::milliseconds(10));
      }
    }
    if (!sse_) {
      if (got->events.empty() && !ended && now < deadline_) {
        // One byte of the body at once (JSON may start with blanks): a client, or a browser
        // that counts a fetch as pending until its body starts, sees the answer has begun.
        if (!primed_) out = " ";
        primed_ = true;
        return State::kWait;
      }
      Json list = Json::array();
      for (Json& e : got->events) list.push_back(std::move(e));
      out = dumpJson({{"events", list}, {"last_seq", after_}, {"ended", ended}}) + "\n";
      return State::kEnd;
    }
    for (const Json& e : got->events) {
      out += "id: " + std::to_string(e.value("seq", int64_t{0})) + "\ndata: " + dumpJson(e) +
             "\n\n";
    }
    if (ended) return State::kEnd;
    // A comment at once when there is no event yet, so that the body has begun.
    if (out.empty() && !primed_) out = ": waiting for the next event\n\n";
    primed_ = true;
    if (out.empty() && now >= next_ping_) out = ": keep-alive\n\n";
    if (now >= next_ping_) {
      next_ping_ = now + kSseKeepAlive;
      sub_->wakeAfter(std::chrono::milliseconds(kSseKeepAlive));
    }
    return State::kWait;
  }

 private:
  Server::Impl& server_;
  const store::Job job_;
  int64_t after_;
  const bool sse_;
  const std::chrono::milliseconds wait_;
  std::chrono::steady_clock::time_point deadline_, next_ping_, final_deadline_;
  bool final_seen_ = false;
  bool primed_ = false;
  std::unique_ptr<EventHub::Subscription> sub_;
};

void Server::Impl::jobRoutes() {
  route({"POST", "/v1/jobs", Who::kAccount, BodyKind::kJson},
        [this](const Request& req, Response& res, const Caller& c) -> Result<void> {
          COHORT_ASSIGN(Json body, jsonBody(req, {"job", "priority", "code"}));
          // The job file as a JSON object, or its text (YAML or JSON), as job.yaml is read.
          const Json* file = body.contains("job") ? &body["job"] : nullptr;
          if (!file || !(file->is_object() || file->is_string())) {
            return fail(Code::kInvalidArgument,
                        "field 'job' (the job file: a JSON object, or its YAML text as a string) "
                        "is missing");
          }
          COHORT_ASSIGN(int priority, field<int>(body, "priority", 0));
          COHORT_ASSIGN(std::string code, field<std::string>(body, "code", ""));
          COHORT_ASSIGN(store::Quotas quotas, quotasOf(c.account));
          if (quotas.max_priority && priority > *quotas.max_priority) {
            return tl::unexpected(overQuota(c.account, "max_priority", priority, 0,
                                            *quotas.max_priority,
                                            "submit it with a lower --priority"));
          }
          COHORT_TRY(checkDisk(c.account));
          // Counting the account's queued jobs and queuing one more are one step.
          std::lock_guard lock(submit_mu);
          if (quotas.queued_jobs) {
            COHORT_ASSIGN(int64_t queued, store->countJobs(c.account, {"queued"}));
            if (queued >= *quotas.queued_jobs) {
              return tl::unexpected(overQuota(c.account, "queued_jobs", queued, 1,
                                              *quotas.queued_jobs,
                                              "wait for some to start, or stop some"));
            }
          }
          COHORT_ASSIGN(store::Job job,
                        jobs->submit(c, file->is_string() ? file->get<std::string>() : file->dump(),
                                     priority, code));
          writeJson(res, 201, jobJson(job));
          return Result<void>();
        });
  route({"POST", "/v1/uploads", Who::kAccount, BodyKind::kCodeUpload},
        [this](const Request& req, Response& res, const Caller& c) -> Result<void> {
          storage::ArchiveLimits limits;
          limits.max_bytes = options.max_upload_bytes;
          if (!req.body_file) return fail(Code::kInternal, "the upload's body was not kept");
          // What the account may still put in the data root bounds what is extracted.
          COHORT_ASSIGN(store::Quotas quotas, quotasOf(c.account));
          const DiskUse use = usage.of(c.account);
          const bool by_bytes = quotas.bytes && *quotas.bytes - use.bytes < limits.max_bytes;
          const bool by_inodes =
              quotas.inodes && *quotas.inodes - use.inodes < limits.max_entries;
          if (by_bytes) limits.max_bytes = std::max<int64_t>(0, *quotas.bytes - use.bytes);
          if (by_inodes) limits.max_entries = std::max<int64_t>(0, *quotas.inodes - use.inodes);
          COHORT_ASSIGN(auto id, accountIdentity(*store, options.identities, c.account));
          auto received = receiveUploadFile(options.data_root, c.account, {id.first, id.second},
                                            req.body_file->get(), limits);
          if (!received && received.error().code == Code::kTooLarge && (by_bytes || by_inodes)) {
            const bool bytes =
                by_bytes && received.error().message.find("entries") == std::string::npos;
            return tl::unexpected(overQuota(
                c.account, bytes ? "bytes" : "inodes", bytes ? use.bytes : use.inodes, -1,
                bytes ? *quotas.bytes : *quotas.inodes,
                "upload less (leave files out with .cohortignore), or remove jobs (cohort rm) "
                "or store files it no longer needs"));
          }
          COHORT_ASSIGN(Upload upload, std::move(received));
          usage.add(c.account, {upload.stats.bytes, upload.stats.files + upload.stats.dirs +
                                                        upload.stats.links + 1});
          writeJson(res, 201,
                    {{"id", upload.id},
                     {"files", upload.stats.files},
                     {"dirs", upload.stats.dirs},
                     {"links", upload.stats.links},
                     {"bytes", upload.stats.bytes}});
          return Result<void>();
        });
  route({"GET", "/v1/jobs", Who::kAccount, BodyKind::kNone},
        [this](const Request& req, Response& res, const Caller& c) -> Result<void> {
          store::JobFilter filter;
          if (!c.admin) filter.account = c.account;
          for (size_t i = 0; i < req.paramCount("state"); ++i) {
            for (const std::string& s : split(req.param("state", i), ',')) {
              if (s.empty()) continue;
              if (std::find(store::kJobStates.begin(), store::kJobStates.end(), s) ==
                  store::kJobStates.end()) {
                return fail(Code::kInvalidArgument, "state: no job state '" + s + "' (states: " +
                                                        join(store::kJobStates, ", ") + ")");
              }
              filter.states.push_back(s);
            }
          }
          if (req.hasParam("limit")) {
            auto n = parseInt(req.param("limit"));
            if (!n || *n < 1)
              return fail(Code::kInvalidArgument, "limit: expected a positive number");
            filter.limit = *n;
          }
          COHORT_ASSIGN(std::vector<store::Job> list, store->jobs(filter));
          Json out = Json::array();
          for (const store::Job& job : list) out.push_back(jobJson(job));
          writeJson(res, 200, {{"jobs", out}});
          return Result<void>();
        });
  route({"GET", "/v1/jobs/{id}", Who::kAccount, BodyKind::kNone},
        [this](const Request& req, Response& res, const Caller& c) -> Result<void> {
          COHORT_ASSIGN(store::Job job, visibleJob(c, req.matches[0]));
          Json record = jobJson(job);
          Json spec = Json::parse(job.spec_json, nullptr, false);  // written by the server
          // A session's host key stays in its job: its account has the copy it made.
          if (spec.is_object() && spec.contains("session") && spec["session"].is_object()) {
            spec["session"].erase("host_key");
            spec["session"].erase("jupyter_token");
          }
          if (spec.is_object()) record["spec"] = std::move(spec);
          // Each node's startup phases of the last attempt, from the coordinator's result.
          auto result = job.job_dir.empty()
                            ? std::nullopt
                            : readJobFile(job::Layout(job.job_dir).resultFile(), 1 << 20);
          Json parsed = result && checkJsonDepth(*result) ? Json::parse(*result, nullptr, false)
                                                          : Json();
          const Json* startup = parsed.is_object() && parsed.contains("startup")
                                    ? &parsed["startup"]
                                    : nullptr;
          record["startup"] = startup && startup->is_array() ? *startup : Json(nullptr);
          writeJson(res, 200, record);
          return Result<void>();
        });
  route({"GET", "/v1/jobs/{id}/events", Who::kAccount, BodyKind::kNone},
        [this](const Request& req, Response& res, const Caller& c) -> Result<void> {
          COHORT_ASSIGN(store::Job job, visibleJob(c, req.matches[0]));
          const bool sse = req.header("Accept").find("text/event-stream") != std::string::npos;
          int64_t after = -1;  // the "submitted" event is seq 0
          if (req.hasParam("after")) {
            auto n = parseInt64(req.param("after"));
            if (!n || *n < 0) return fail(Code::kInvalidArgument, "after: expected a seq >= 0");
            after = *n;
          }
          if (sse && req.hasHeader("Last-Event-ID")) {
            auto n = parseInt64(req.header("Last-Event-ID"));
            if (!n || *n < 0) {
              return fail(Code::kInvalidArgument, "Last-Event-ID: expected a seq >= 0");
            }
            after = *n;
          }
          std::chrono::milliseconds wait{0};
          if (req.hasParam("wait")) {
            auto d = parseDuration(req.param("wait"));
            if (!d || d->count() < 0 || *d > kMaxWait) {
              return fail(Code::kInvalidArgument,
                          "wait: expected a duration up to 5m (like 30s), got '" +
                              printable(req.param("wait")) + "'");
            }
            wait = *d;
          }
          if (!sse && !req.hasParam("after") && !req.hasParam("wait")) {
            // Every event so far, in time order: the coordinator and the server both write them.
            COHORT_ASSIGN(std::vector<store::Event> events, store->events(job.id));
            std::stable_sort(events.begin(), events.end(),
                             [](const auto& a, const auto& b) { return a.time < b.time; });
            Json out = Json::array();
            out.push_back(submittedJson(job));
            for (const store::Event& e : events) {
              Json j = eventJson(e);
              if (!j.is_null()) out.push_back(std::move(j));
            }
            writeJson(res, 200, {{"events", out}});
            return Result<void>();
          }
          if (!sse) {
            COHORT_ASSIGN(EventsAfter got, eventsAfter(*store, job, after));
            const bool ended =
                got.final_event || (store::isFinalState(job.state) && got.events.empty());
            if (!got.events.empty() || ended || wait.count() == 0) {
              Json list = Json::array();
              for (Json& e : got.events) list.push_back(std::move(e));
              writeJson(res, 200, {{"events", list}, {"last_seq", got.last}, {"ended", ended}});
              return Result<void>();
            }
          }
          res.status = 200;
          res.content_type = sse ? "text/event-stream" : "application/json";
          res.setHeader("Cache-Control", "no-cache");
          res.stream = std::make_shared<EventStream>(*this, job, after, sse, wait);
          return Result<void>();
        });
  route({"GET", "/v1/jobs/{id}/ranks", Who::kAccount, BodyKind::kNone},
        [this](const Request& req, Response& res, const Caller& c) -> Result<void> {
          COHORT_ASSIGN(store::Job job, visibleJob(c, req.matches[0]));
          Json ranks = Json::array();
          auto text = job.job_dir.empty() ? Result<std::string>(std::string())
                                          : readFile(job::Layout(job.job_dir).planFile());
          Json plan = text && !text->empty() ? Json::parse(*text, nullptr, false) : Json();
          if (plan.is_object()) {
            // The latest attempt's exits, by process name.
            COHORT_ASSIGN(std::vector<store::Event> events, store->events(job.id));
            int attempt = 0;
            std::map<std::string, Json> exits;
            for (const store::Event& e : events) {
              Json j = Json::parse(e.json, nullptr, false);
              if (!j.is_object()) continue;
              if (j.value("event", "") == "state" && j.value("state", "") == "running") {
                attempt = j.value("attempt", 0);
                exits.clear();
              }
              if (j.value("event", "") == "rank_exit" && j.value("attempt", 0) == attempt) {
                exits[j.value("name", "")] = j;
              }
            }
            bool running = job.state == "running" || job.state == "stopping";
            // What each rank is doing, from its node agent's latest word.
            std::map<int64_t, Json> progress;
            if (auto snapshot = running ? jobs->progress(job.id) : std::nullopt) {
              Json p = Json::parse(*snapshot, nullptr, false);
              if (p.is_object() && p.value("attempt", -1) == attempt && p["ranks"].is_array()) {
                for (const Json& r : p["ranks"]) {
                  if (r.is_object() && r["rank"].is_number_integer()) {
                    progress[r["rank"].get<int64_t>()] = r;
                  }
                }
              }
            }
            for (const Json& node : plan.value("nodes", Json::array())) {
              for (const Json& rp : node.value("ranks", Json::array())) {
                std::string name = rp.value("name", "");
                Json r = {{"name", name},
                          {"role", rp.value("role", "")},
                          {"role_rank", rp.value("role_rank", 0)},
                          {"rank", rp.value("rank", 0)},
                          {"node", rp.value("node", 0)},
                          {"state", "pending"},
                          {"exit_code", nullptr},
                          {"signal", 0},
                          {"by_cohort", false}};
                if (auto it = exits.find(name); it != exits.end()) {
                  r["state"] = "exited";
                  r["exit_code"] = it->second.value("code", 0);
                  r["signal"] = it->second.value("signal", 0);
                  r["by_cohort"] = it->second.value("by_cohort", false);
                } else if (running) {
                  r["state"] = "running";
                } else if (store::isFinalState(job.state)) {
                  r["state"] = "exited";
                }
                if (auto it = progress.find(rp.value("rank", -1)); it != progress.end()) {
                  const Json& p = it->second;
                  const int64_t last = p.value("last_output", int64_t{0});
                  r["last_output"] = last > 0 ? Json(isoTime(last)) : Json(nullptr);
                  if (p.contains("cpu_seconds")) r["cpu_seconds"] = p.value("cpu_seconds", 0.0);
                  if (p.contains("rss_bytes")) r["rss_bytes"] = p.value("rss_bytes", int64_t{0});
                  if (p.contains("gpu_memory_bytes")) {
                    r["gpu_util"] = p.value("gpu_util", 0.0);
                    r["gpu_memory_bytes"] = p.value("gpu_memory_bytes", int64_t{0});
                  }
                }
                ranks.push_back(r);
              }
            }
          }
          writeJson(res, 200, {{"ranks", ranks}});
          return Result<void>();
        });
  // Its training metrics and resource samples (agent/metrics.h, docs/observing.md): the latest
  // `limit` of each (default 1000, at most 10000) written after `after` (unix nanos).
  route({"GET", "/v1/jobs/{id}/metrics", Who::kAccount, BodyKind::kNone},
        [this](const Request& req, Response& res, const Caller& c) -> Result<void> {
          COHORT_ASSIGN(store::Job job, visibleJob(c, req.matches[0]));
          int64_t after = 0;
          if (req.hasParam("after")) {
            auto n = parseInt64(req.param("after"));
            if (!n || *n < 0)
              return fail(Code::kInvalidArgument, "after: expected unix nanoseconds >= 0");
            after = *n;
          }
          int64_t limit = 1000;
          if (req.hasParam("limit")) {
            auto n = parseInt64(req.param("limit"));
            if (!n || *n < 1 || *n > 10000) {
              return fail(Code::kInvalidArgument, "limit: expected 1 to 10000");
            }
            limit = *n;
          }
          // Ordered: a metric record's keys stay in the order the rank logged them.
          auto latest = [&](const std::string& path) {
            nlohmann::ordered_json out = nlohmann::ordered_json::array();
            if (job.job_dir.empty()) return out;
            std::vector<nlohmann::ordered_json> lines = job::tailJsonLines(path, 8u << 20);
            std::vector<nlohmann::ordered_json*> kept;
            for (auto& line : lines) {
              const auto t = line.find("t");
              if (t != line.end() && t->is_number_integer() && t->get<int64_t>() > after) {
                kept.push_back(&line);
              }
            }
            const size_t from = kept.size() > static_cast<size_t>(limit) ? kept.size() - limit : 0;
            for (size_t i = from; i < kept.size(); ++i) out.push_back(std::move(*kept[i]));
            return out;
          };
          const job::Layout layout(job.job_dir);
          nlohmann::ordered_json body = {{"metrics", latest(layout.metricsFile())},
                                         {"resources", latest(layout.resourcesFile())}};
          res.status = 200;
          res.setContent(body.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) +
                             "\n",
                         "application/json");
          return Result<void>();
        });
  // Every rank's stack (docs/observing.md): POST asks the running job's coordinator for them now;
  // GET answers the latest it wrote (`stacks`, with its `time`) and those of a hang (`hang`).
  route({"POST", "/v1/jobs/{id}/stacks", Who::kAccount, BodyKind::kJson},
        [this](const Request& req, Response& res, const Caller& c) -> Result<void> {
          COHORT_ASSIGN(store::Job job, visibleJob(c, req.matches[0]));
          COHORT_TRY(jobs->requestStacks(job.id));
          writeJson(res, 202, {{"requested", true}});
          return Result<void>();
        });
  route({"GET", "/v1/jobs/{id}/stacks", Who::kAccount, BodyKind::kNone},
        [this](const Request& req, Response& res, const Caller& c) -> Result<void> {
          COHORT_ASSIGN(store::Job job, visibleJob(c, req.matches[0]));
          Json body = {{"stacks", nullptr}, {"time", 0}, {"hang", nullptr}};
          if (!job.job_dir.empty()) {
            const job::Layout layout(job.job_dir);
            int64_t mtime = 0;
            if (auto now = readJobFile(layout.stacksNowFile(), 4 << 20, &mtime)) {
              body["stacks"] = *now;
              body["time"] = mtime;
            }
            if (auto hang = readJobFile(layout.stacksFile(), 4 << 20)) body["hang"] = *hang;
          }
          writeJson(res, 200, body);
          return Result<void>();
        });
  // debug: the ranks that wait for a debugger or have one (docs/debugging.md), from the job's
  // events, which its coordinator pushed; the workdir from its plan, for path mappings.
  route({"GET", "/v1/jobs/{id}/debug", Who::kAccount, BodyKind::kNone},
        [this](const Request& req, Response& res, const Caller& c) -> Result<void> {
          COHORT_ASSIGN(store::Job job, visibleJob(c, req.matches[0]));
          COHORT_ASSIGN(std::vector<store::Event> stored, store->events(job.id));
          std::vector<job::Event> events;
          for (const store::Event& e : stored) {
            if (auto decoded = job::decodeEvent(e.json)) events.push_back(std::move(*decoded));
          }
          Json body = Json::parse(job::debugTargetsJson(job::debugTargets(events)), nullptr, false);
          body["workdir"] = "";
          if (!job.job_dir.empty()) {
            auto plan = readJobFile(job::Layout(job.job_dir).planFile(), 64 << 20);
            if (plan && checkJsonDepth(*plan)) {
              Json parsed = Json::parse(*plan, nullptr, false);
              if (parsed.is_object() && parsed["workdir"].is_string()) {
                body["workdir"] = parsed["workdir"];
              }
            }
          }
          writeJson(res, 200, body);
          return Result<void>();
        });
  // A tunnel into a job's network: an HTTP Upgrade ("Upgrade: cohort-tunnel") whose connection
  // then carries bytes to a port in a node's network of the job, through the job's coordinator
  // (agent/job_ports.h): a paused rank's debugger, or a session's service. Who may open which
  // is decideTunnel's; each open one holds a tunnel slot of the caller's account, and ends with
  // its token. `rank` or `service` says which.
  auto tunnel = [this](const Request& req, Response& res, const Caller& c, int rank,
                       const std::string& service) -> Result<void> {
    std::string upgrade = req.header("Upgrade");
    for (char& ch : upgrade) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    if (upgrade != kTunnelProtocol) {
      return fail(Code::kInvalidArgument,
                  "a tunnel is an HTTP Upgrade: send 'Connection: Upgrade' and 'Upgrade: " +
                      std::string(kTunnelProtocol) + "' (" +
                      (service.empty() ? "cohort debug JOB --attach" : "cohort session ssh") +
                      " does)");
    }
    COHORT_ASSIGN(store::Job job, visibleJob(c, req.matches[0]));
    TunnelAsk ask;
    ask.caller = c;
    ask.job_id = job.id;
    ask.job_account = job.account;
    ask.job_final = store::isFinalState(job.state);
    ask.job_started = !job.job_dir.empty();
    ask.rank = rank;
    ask.service = service;
    ask.session = sessionOf(job).has_value();
    if (service.empty()) {
      COHORT_ASSIGN(std::vector<store::Event> stored, store->events(job.id));
      std::vector<job::Event> events;
      for (const store::Event& e : stored) {
        if (auto decoded = job::decodeEvent(e.json)) events.push_back(std::move(*decoded));
      }
      ask.paused = job::debugTargets(events);
    }
    COHORT_ASSIGN(TunnelTo to, decideTunnel(ask));
    // The slot before the connection: a debugpy that sees a client come and go lets its
    // rank run on.
    COHORT_ASSIGN(auto slot, takeTunnel(req, c));
    COHORT_ASSIGN(UniqueFd sock, agent::connectJobPort(job.job_dir, to.node, to.port));
    auto open = std::make_shared<UniqueFd>(std::move(sock));
    slot->onRevoke([open] { ::shutdown(open->get(), SHUT_RDWR); });
    // A session is in use while a connection into it is open (sessions.h).
    std::shared_ptr<void> active = ask.session ? sessions.opened(job.id) : nullptr;
    res.tunnel = open;
    res.tunnel_ended = [slot, active] {};  // both are held until the tunnel ends
    res.setHeader("Upgrade", kTunnelProtocol);
    res.setHeader("Connection", "Upgrade");
    return Result<void>();
  };
  route({"GET", "/v1/jobs/{id}/debug/{rank}/tunnel", Who::kAccount, BodyKind::kNone},
        [tunnel](const Request& req, Response& res, const Caller& c) -> Result<void> {
          auto rank = parseInt(req.matches[1]);
          if (!rank || *rank < 0) {
            return fail(Code::kInvalidArgument, "rank: expected a rank number, got '" +
                                                    printable(req.matches[1]) + "'");
          }
          return tunnel(req, res, c, static_cast<int>(*rank), "");
        });
  route({"GET", "/v1/jobs/{id}/session/{service}/tunnel", Who::kAccount, BodyKind::kNone},
        [tunnel](const Request& req, Response& res, const Caller& c) -> Result<void> {
          const std::string& service = req.matches[1];
          if (service.empty() || service.size() > 32) {
            return fail(Code::kInvalidArgument, "service: expected a session's service (ssh)");
          }
          return tunnel(req, res, c, -1, service);
        });
  route({"GET", "/v1/jobs/{id}/logs", Who::kAccount, BodyKind::kNone},
        [this](const Request& req, Response& res, const Caller& c) -> Result<void> {
          COHORT_ASSIGN(store::Job job, visibleJob(c, req.matches[0]));
          const std::string rank = req.param("rank");
          COHORT_ASSIGN(std::string path, logPath(job, rank));  // checks the rank now
          COHORT_ASSIGN(int64_t start, offsetParameter(req));
          const bool following = followParameter(req);
          UniqueFd fd;
          if (!path.empty()) {
            auto opened = LogStream::openLog(path);
            if (!opened) {
              return fail(Code::kNotFound, "job '" + job.id + "': the log of " +
                                               (rank.empty() ? "the job" : "rank " + rank) +
                                               " is not a regular file");
            }
            fd = std::move(*opened);
          }
          res.status = 200;
          res.content_type = "text/plain; charset=utf-8";
          res.setHeader("Cache-Control", "no-cache");
          res.setHeader("X-Content-Type-Options", "nosniff");
          res.stream = std::make_shared<LogStream>(*this, job.id, rank, path, std::move(fd), start,
                                                   following);
          return Result<void>();
        });
  // A coordinator's report: its job's own token, not an account's (JobService::report).
  route({"POST", "/v1/jobs/{id}/report", Who::kJob, BodyKind::kJson},
        [this](const Request& req, Response& res, const Caller&) -> Result<void> {
          const std::string header = req.header("Authorization");
          if (header.rfind("Bearer ", 0) != 0 || header.size() <= 7) {
            return fail(Code::kUnauthenticated, "no token: send the job's report token");
          }
          COHORT_ASSIGN(JobService::ReportAnswer answer,
                        jobs->report(req.matches[0], header.substr(7), req.body));
          writeJson(res, 200, {{"events_seq", answer.events_seq}, {"result", answer.result}});
          return Result<void>();
        });
  route({"POST", "/v1/jobs/{id}/stop", Who::kAccount, BodyKind::kJson},
        [this](const Request& req, Response& res, const Caller& c) -> Result<void> {
          COHORT_ASSIGN(store::Job job, visibleJob(c, req.matches[0]));
          COHORT_ASSIGN(store::Job stopped, jobs->stop(job.id));
          writeJson(res, 202, jobJson(stopped));
          return Result<void>();
        });
  route({"DELETE", "/v1/jobs/{id}", Who::kAccount, BodyKind::kNone},
        [this](const Request& req, Response& res, const Caller& c) -> Result<void> {
          COHORT_ASSIGN(store::Job job, visibleJob(c, req.matches[0]));
          COHORT_TRY(jobs->remove(job.id));
          res.status = 204;
          return Result<void>();
        });
  route({"GET", "/v1/jobs/{id}/outputs", Who::kAccount, BodyKind::kNone},
        [this](const Request& req, Response& res, const Caller& c) -> Result<void> {
          COHORT_ASSIGN(store::Job job, visibleJob(c, req.matches[0]));
          Json files = job.job_dir.empty() ? Json::array() : listFiles(job.job_dir + "/output");
          writeJson(res, 200, {{"files", files}});
          return Result<void>();
        });
  route({"GET", "/v1/jobs/{id}/outputs/{path+}", Who::kAccount, BodyKind::kNone},
        [this](const Request& req, Response& res, const Caller& c) -> Result<void> {
          COHORT_ASSIGN(store::Job job, visibleJob(c, req.matches[0]));
          COHORT_ASSIGN(std::string path, containedPath(req.matches[1]));
          if (job.job_dir.empty()) return fail(Code::kNotFound, "output '" + path + "' not found");
          return sendFile(res, job.job_dir + "/output", path, "output '" + path + "'");
        });
}

}  // namespace cohort::server
