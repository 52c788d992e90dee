#include "server/server.h"

#include <fcntl.h>
#include <httplib.h>
#include <openssl/evp.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>
#include <type_traits>
#include <unordered_map>

#include "server/access.h"
#include "server/console.h"
#include "server/jobs.h"
#include "server/metrics.h"
#include "storage/uri.h"
#include "store/job_store.h"
#include "util/fd.h"
#include "util/text.h"

namespace cohort::server {

using Json = nlohmann::json;
using httplib::Request;
using httplib::Response;

namespace {

constexpr size_t kMaxJsonBody = 4 << 20;
constexpr size_t kMaxUpload = size_t{1} << 30;
// A JSON body up to this size is read and then refused (413) by its handler: clients that send
// their whole body before reading the answer (cpp-httplib's, Python's) only see an answer when
// the body was read. Bigger ones are refused unread, and such clients see the connection close.
constexpr size_t kMaxJsonRead = 64 << 20;

int httpStatus(Code code) {
  switch (code) {
    case Code::kInvalidArgument:
      return 400;
    case Code::kUnauthenticated:
      return 401;
    case Code::kPermissionDenied:
      return 403;
    case Code::kNotFound:
      return 404;
    case Code::kAlreadyExists:
    case Code::kFailedPrecondition:
      return 409;
    case Code::kTooLarge:
      return 413;
    case Code::kUnavailable:
      return 503;
    case Code::kDeadlineExceeded:
      return 504;
    case Code::kIo:
    case Code::kInternal:
      return 500;
  }
  return 500;
}

void writeError(Response& res, const Error& e) {
  res.status = httpStatus(e.code);
  Json body = {
      {"error",
       {{"code", e.code == Code::kIo ? "internal" : codeName(e.code)}, {"message", e.message}}}};
  res.set_content(body.dump() + "\n", "application/json");
}

void writeJson(Response& res, int status, const Json& body) {
  res.status = status;
  res.set_content(body.dump() + "\n", "application/json");
}

Json isoOrNull(int64_t nanos) { return nanos ? Json(isoTime(nanos)) : Json(nullptr); }

// The request's JSON object body, refusing fields not in `known`.
Result<Json> jsonBody(const Request& req, const std::set<std::string>& known) {
  if (req.body.size() > kMaxJsonBody) {
    return fail(Code::kTooLarge, "the request body is over 4 MiB");
  }
  Json body = Json::parse(req.body, nullptr, false);
  if (body.is_discarded()) return fail(Code::kInvalidArgument, "the body is not valid JSON");
  if (!body.is_object()) return fail(Code::kInvalidArgument, "the body must be a JSON object");
  for (const auto& [key, value] : body.items()) {
    if (!known.count(key)) {
      std::string list;
      for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
      return fail(Code::kInvalidArgument, "unknown field '" + key + "' (known: " + list + ")");
    }
  }
  return body;
}

template <class T>
Result<T> field(const Json& body, const std::string& name, T fallback) {
  if (!body.contains(name) || body[name].is_null()) return fallback;
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    // get<int>() would truncate 1.5 and wrap 1e30 or 2^63 around without a word.
    const Json& value = body[name];
    bool fits = value.is_number_unsigned()
                    ? value.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<T>::max())
                    : value.is_number_integer() &&
                          value.get<int64_t>() >= std::numeric_limits<T>::min() &&
                          value.get<int64_t>() <= std::numeric_limits<T>::max();
    if (!fits) {
      return fail(Code::kInvalidArgument, "field '" + name + "' must be a whole number from " +
                                              std::to_string(std::numeric_limits<T>::min()) +
                                              " to " +
                                              std::to_string(std::numeric_limits<T>::max()));
    }
  }
  try {
    return body[name].get<T>();
  } catch (const Json::exception&) {
    return fail(Code::kInvalidArgument, "field '" + name + "' has the wrong type");
  }
}

Result<int64_t> idParam(const std::string& text, const std::string& what) {
  auto n = parseInt64(text);
  if (!n) return fail(Code::kNotFound, what + " '" + text + "' not found");
  return *n;
}

// A relative path inside a directory: no "..", no absolute path, no empty parts.
Result<std::string> containedPath(const std::string& path) {
  if (path.empty()) return std::string();
  if (path[0] == '/' || path.find('\0') != std::string::npos) {
    return fail(Code::kInvalidArgument, "path '" + path + "' must be relative");
  }
  for (const std::string& part : split(path, '/')) {
    if (part == "..") {
      return fail(Code::kInvalidArgument, "path '" + path + "' must not contain '..'");
    }
  }
  return path;
}

// Files under `dir`, recursively, relative to it; symbolic links are not followed.
Json listFiles(const std::string& dir) {
  Json files = Json::array();
  std::error_code ec;
  std::filesystem::recursive_directory_iterator it(dir, ec), end;
  std::vector<std::pair<std::string, uintmax_t>> found;
  for (; !ec && it != end; it.increment(ec)) {
    if (!it->is_regular_file(ec) || it->is_symlink(ec)) continue;
    found.emplace_back(std::filesystem::relative(it->path(), dir, ec).string(), it->file_size(ec));
  }
  std::sort(found.begin(), found.end());
  for (const auto& [path, size] : found) files.push_back({{"path", path}, {"size", size}});
  return files;
}

// Serves a regular file under `root` (after resolving links, it must still be under `root`).
Result<void> sendFile(Response& res, const std::string& root, const std::string& relative,
                      const std::string& what) {
  std::error_code ec;
  auto real_root = std::filesystem::canonical(root, ec);
  if (ec) return fail(Code::kNotFound, what + " not found");
  auto real = std::filesystem::canonical(std::filesystem::path(root) / relative, ec);
  std::string r = real.string(), base = real_root.string() + "/";
  if (ec || r.rfind(base, 0) != 0 || !std::filesystem::is_regular_file(real, ec)) {
    return fail(Code::kNotFound, what + " not found");
  }
  int fd = ::open(r.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return failErrno("open " + what);
  auto file = std::make_shared<UniqueFd>(fd);
  struct stat st {};
  ::fstat(fd, &st);
  res.set_content_provider(static_cast<size_t>(st.st_size), "application/octet-stream",
                           [file](size_t offset, size_t length, httplib::DataSink& sink) {
                             char buf[1 << 16];
                             ssize_t n = ::pread(file->get(), buf, std::min(length, sizeof buf),
                                                 static_cast<off_t>(offset));
                             if (n <= 0) return false;
                             return sink.write(buf, static_cast<size_t>(n));
                           });
  return {};
}

Json accountJson(const store::Account& a) {
  return {{"name", a.name},
          {"admin", a.admin},
          {"max_gpus", a.max_gpus ? Json(*a.max_gpus) : Json(nullptr)},
          {"max_cpus",
           a.max_cpu_millis ? Json(static_cast<double>(*a.max_cpu_millis) / 1000) : Json(nullptr)},
          {"created", isoOrNull(a.created)}};
}

Json shareJson(const store::Share& s) {
  return {{"id", s.id},         {"prefix", "store://" + s.bucket + "/" + s.prefix},
          {"owner", s.owner},   {"with", s.grantee},
          {"access", s.access}, {"created", isoOrNull(s.created)}};
}

Json tokenJson(const store::Token& t) {
  return {
      {"id", t.id}, {"account", t.account}, {"label", t.label}, {"created", isoOrNull(t.created)}};
}

bool validAccountName(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
    if (!ok) return false;
  }
  return name[0] != '-' && name[0] != '_';
}

// The SHA-256 of `text` in lowercase hex (tokens are stored so).
std::string sha256Hex(const std::string& text) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_Digest(text.data(), text.size(), digest, &length, EVP_sha256(), nullptr);
  return hexEncode(digest, length);
}

// A new bearer token: "cohort_" and 32 random bytes in hex.
Result<std::string> newToken() {
  COHORT_ASSIGN(std::string random, randomHex(32));
  return "cohort_" + random;
}

}  // namespace

struct Server::Impl {
  ServerOptions options;
  std::unique_ptr<store::JobStore> store;
  sched::SystemClock clock;
  std::unique_ptr<JobService> jobs;
  httplib::Server http;
  HttpMetrics metrics;
  int port = 0;
  std::string first_admin_token;
  std::atomic<bool> stopping{false};
  std::vector<std::string> route_names;
  UniqueFd lock;  // flock'd <data_root>/server/server.lock, held while the server lives

  std::mutex auth_mu;
  std::unordered_map<std::string, Caller> auth_cache;  // by token hash
  uint64_t auth_generation = 0;                        // bumped when a token is revoked

  using Handler = std::function<Result<void>(const Request&, Response&, const Caller&)>;

  Result<Caller> authenticate(const Request& req) {
    std::string header = req.get_header_value("Authorization");
    if (header.rfind("Bearer ", 0) != 0 || header.size() <= 7) {
      return fail(Code::kUnauthenticated,
                  "no token: send 'Authorization: Bearer <token>' (cohort login URL)");
    }
    std::string hash = sha256Hex(header.substr(7));
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

  void forgetTokens() {
    std::lock_guard lock(auth_mu);
    auth_cache.clear();
    ++auth_generation;
  }

  void route(const std::string& method, const std::string& pattern, bool authenticated,
             Handler handler) {
    // Metrics name the route by its pattern, with the captures shown as {id} and {path}.
    std::string name = pattern;
    for (auto [from, to] : {std::pair<std::string, std::string>{"(\\d+)", "{id}"},
                            {"([^/]+)/?(.*)", "{bucket}/{path}"},
                            {"([^/]+)", "{id}"},
                            {"(.+)", "{path}"}}) {
      for (size_t at; (at = name.find(from)) != std::string::npos;)
        name.replace(at, from.size(), to);
    }
    route_names.push_back(method + " " + name);
    auto wrapped = [this, method, name, authenticated, handler](const Request& req, Response& res) {
      auto t0 = std::chrono::steady_clock::now();
      Result<void> result = [&]() -> Result<void> {
        Caller caller;
        if (authenticated) {
          COHORT_ASSIGN(caller, authenticate(req));
        }
        try {
          return handler(req, res, caller);
        } catch (const std::exception& e) {
          return fail(Code::kInternal, std::string("internal error: ") + e.what());
        }
      }();
      if (!result) writeError(res, result.error());
      metrics.record(method, name, res.status,
                     std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    };
    if (method == "GET") http.Get(pattern, wrapped);
    if (method == "POST") http.Post(pattern, wrapped);
    if (method == "PUT") http.Put(pattern, wrapped);
    if (method == "DELETE") http.Delete(pattern, wrapped);
  }

  Result<store::Job> visibleJob(const Caller& caller, const std::string& id) {
    auto job = store->job(id);
    if (!job || (job->account != caller.account && !caller.admin)) {
      if (job || job.error().code == Code::kNotFound) {
        return fail(Code::kNotFound, "job '" + id + "' not found");
      }
      return tl::unexpected<Error>(job.error());
    }
    return job;
  }

  Json jobJson(const store::Job& job) {
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
                      {"hint", rc.value("hint", "")}};
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
            {"root_cause", root_cause}};
  }

  // The file a job's logs come from: a rank's log (from the job's plan) or the merged console.
  Result<std::string> logFile(const store::Job& job, const std::string& rank) {
    if (rank.empty()) return job.job_dir.empty() ? std::string() : job.job_dir + "/console.log";
    auto r = parseInt(rank);
    if (!r) return fail(Code::kInvalidArgument, "rank: expected a number, got '" + rank + "'");
    if (r.value() < 0 || r.value() >= job.ranks) {
      return fail(Code::kNotFound, "job '" + job.id + "' has no rank " + rank);
    }
    if (job.job_dir.empty()) return std::string();  // not started: nothing yet
    auto text = readFile(job.job_dir + "/plan.json");
    if (!text) return std::string();
    Json plan = Json::parse(*text, nullptr, false);
    if (plan.is_object()) {
      for (const Json& node : plan.value("nodes", Json::array())) {
        for (const Json& rp : node.value("ranks", Json::array())) {
          if (rp.value("rank", -1) == *r) return rp.value("log_file", std::string());
        }
      }
    }
    return fail(Code::kNotFound, "job '" + job.id + "' has no process with rank " + rank);
  }

  void routes();
  void jobRoutes();
  void storeRoutes();
  void accountRoutes();
};

void Server::Impl::jobRoutes() {
  route("POST", "/v1/jobs", true,
        [this](const Request& req, Response& res, const Caller& c) -> Result<void> {
          COHORT_ASSIGN(Json body, jsonBody(req, {"job", "priority"}));
          if (!body.contains("job") || !body["job"].is_object()) {
            return fail(Code::kInvalidArgument,
                        "field 'job' (the job file as a JSON object) is missing");
          }
          COHORT_ASSIGN(int priority, field<int>(body, "priority", 0));
          COHORT_ASSIGN(store::Job job, jobs->submit(c, body["job"].dump(), priority));
          writeJson(res, 201, jobJson(job));
          return Result<void>();
        });
  route("GET", "/v1/jobs", true,
        [this](const Request& req, Response& res, const Caller& c) -> Result<void> {
          store::JobFilter filter;
          if (!c.admin) filter.account = c.account;
          for (size_t i = 0; i < req.get_param_value_count("state"); ++i) {
            for (const std::string& s : split(req.get_param_value("state", i), ',')) {
              if (s.empty()) continue;
              if (std::find(store::kJobStates.begin(), store::kJobStates.end(), s) ==
                  store::kJobStates.end()) {
                return fail(Code::kInvalidArgument, "state: no job state '" + s + "' (states: " +
                                                        join(store::kJobStates, ", ") + ")");
              }
              filter.states.push_back(s);
            }
          }
          if (req.has_param("limit")) {
            auto n = parseInt(req.get_param_value("limit"));
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
  route("GET", R"(/v1/jobs/([^/]+))", true,
        [this](const Request& req, Response& res, const Caller& c) -> Result<void> {
          COHORT_ASSIGN(store::Job job, visibleJob(c, req.matches[1]));
          writeJson(res, 200, jobJson(job));
          return Result<void>();
        });
  route("GET", R"(/v1/jobs/([^/]+)/events)", true,
        [this](const Request& req, Response& res, const Caller& c) -> Result<void> {
          COHORT_ASSIGN(store::Job job, visibleJob(c, req.matches[1]));
          COHORT_ASSIGN(std::vector<store::Event> events, store->events(job.id));
          // In time order: the coordinator and the server both write a job's events.
          std::stable_sort(events.begin(), events.end(),
                           [](const auto& a, const auto& b) { return a.time < b.time; });
          Json out = Json::array();
          out.push_back({{"time", isoTime(job.submitted)},
                         {"event", "submitted"},
                         {"account", job.account},
                         {"priority", job.priority}});
          for (const store::Event& e : events) {
            Json j = Json::parse(e.json, nullptr, false);
            if (!j.is_object()) continue;
            j.erase("t");
            if (!j.contains("time")) j["time"] = isoTime(e.time);
            out.push_back(j);
          }
          writeJson(res, 200, {{"events", out}});
          return Result<void>();
        });
  route("GET", R"(/v1/jobs/([^/]+)/ranks)", true,
        [this](const Request& req, Response& res, const Caller& c) -> Result<void> {
          COHORT_ASSIGN(store::Job job, visibleJob(c, req.matches[1]));
          Json ranks = Json::array();
          auto text = job.job_dir.empty() ? Result<std::string>(std::string())
                                          : readFile(job.job_dir + "/plan.json");
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
                ranks.push_back(r);
              }
            }
          }
          writeJson(res, 200, {{"ranks", ranks}});
          return Result<void>();
        });
  route("GET", R"(/v1/jobs/([^/]+)/logs)", true,
        [this](const Request& req, Response& res, const Caller& c) -> Result<void> {
          COHORT_ASSIGN(store::Job job, visibleJob(c, req.matches[1]));
          const std::string rank = req.get_param_value("rank");
          COHORT_ASSIGN(std::string path, logFile(job, rank));  // checks the rank now
          int64_t start = 0;
          if (req.has_param("offset")) {
            auto n = parseInt64(req.get_param_value("offset"));
            if (!n || *n < 0) return fail(Code::kInvalidArgument, "offset: expected bytes >= 0");
            start = *n;
          }
          const std::string follow = req.get_param_value("follow");
          const bool following = follow == "1" || follow == "true";
          struct Stream {
            std::string path;
            int64_t pos = 0;
            bool ended = false;  // the job was final at the previous look
          };
          auto stream = std::make_shared<Stream>(Stream{path, start, false});
          res.status = 200;
          const std::string id = job.id;
          res.set_chunked_content_provider(
              "text/plain; charset=utf-8",
              [this, stream, id, rank, following](size_t, httplib::DataSink& sink) {
                for (;;) {
                  if (stopping) return false;
                  if (stream->path.empty()) {
                    auto job = store->job(id);
                    if (!job) return false;
                    if (!job->job_dir.empty()) {
                      auto p = logFile(*job, rank);
                      stream->path = p ? *p : std::string();
                    }
                  }
                  if (!stream->path.empty()) {
                    UniqueFd fd(::open(stream->path.c_str(), O_RDONLY | O_CLOEXEC));
                    if (fd.valid()) {
                      char buf[1 << 16];
                      ssize_t n = ::pread(fd.get(), buf, sizeof buf, stream->pos);
                      if (n > 0) {
                        stream->pos += n;
                        return sink.write(buf, static_cast<size_t>(n));
                      }
                    }
                  }
                  // Everything written so far was sent.
                  if (!following || stream->ended) {
                    sink.done();
                    return true;
                  }
                  auto job = store->job(id);
                  // One more read after the job ended catches its last lines.
                  if (!job || store::isFinalState(job->state)) stream->ended = true;
                  if (stream->ended) continue;
                  // Nothing new: a client that hung up is noticed now, not at the next line.
                  if (!sink.is_writable()) return false;
                  std::this_thread::sleep_for(std::chrono::milliseconds(100));
                }
              });
          return Result<void>();
        });
  route("POST", R"(/v1/jobs/([^/]+)/stop)", true,
        [this](const Request& req, Response& res, const Caller& c) -> Result<void> {
          COHORT_ASSIGN(store::Job job, visibleJob(c, req.matches[1]));
          COHORT_ASSIGN(store::Job stopped, jobs->stop(job.id));
          writeJson(res, 202, jobJson(stopped));
          return Result<void>();
        });
  route("DELETE", R"(/v1/jobs/([^/]+))", true,
        [this](const Request& req, Response& res, const Caller& c) -> Result<void> {
          COHORT_ASSIGN(store::Job job, visibleJob(c, req.matches[1]));
          COHORT_TRY(jobs->remove(job.id));
          res.status = 204;
          return Result<void>();
        });
  route("GET", R"(/v1/jobs/([^/]+)/outputs)", true,
        [this](const Request& req, Response& res, const Caller& c) -> Result<void> {
          COHORT_ASSIGN(store::Job job, visibleJob(c, req.matches[1]));
          Json files = job.job_dir.empty() ? Json::array() : listFiles(job.job_dir + "/output");
          writeJson(res, 200, {{"files", files}});
          return Result<void>();
        });
  route("GET", R"(/v1/jobs/([^/]+)/outputs/(.+))", true,
        [this](const Request& req, Response& res, const Caller& c) -> Result<void> {
          COHORT_ASSIGN(store::Job job, visibleJob(c, req.matches[1]));
          COHORT_ASSIGN(std::string path, containedPath(req.matches[2]));
          if (job.job_dir.empty()) return fail(Code::kNotFound, "output '" + path + "' not found");
          return sendFile(res, job.job_dir + "/output", path, "output '" + path + "'");
        });
}

void Server::Impl::storeRoutes() {
  // The bucket and the normalised key, as in share prefixes: "a//b/./c/" is "a/b/c".
  auto location = [](const Request& req) -> Result<std::pair<std::string, std::string>> {
    const std::string uri =
        "store://" + std::string(req.matches[1]) + "/" + std::string(req.matches[2]);
    if (!storage::validBucketName(req.matches[1]))
      return fail(Code::kNotFound, uri + ": not found");
    COHORT_ASSIGN(storage::Location where, storage::parseLocation(uri));
    return std::pair{where.bucket, where.key};
  };
  route("GET", R"(/v1/store/([^/]+)/?(.*))", true,
        [this, location](const Request& req, Response& res, const Caller& c) -> Result<void> {
          COHORT_ASSIGN(auto where, location(req));
          const auto& [bucket, key] = where;
          COHORT_TRY(checkStoreAccess(*store, c, bucket, key, Access::kRead));
          const std::string root = options.data_root + "/store/" + bucket;
          std::string path = key.empty() ? root : root + "/" + key;
          struct stat st {};
          if (::lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
            writeJson(res, 200, {{"files", listFiles(path)}});
            return Result<void>();
          }
          if (req.get_param_value("list") == "1") {
            return fail(Code::kNotFound, "store://" + bucket + "/" + key + ": not found");
          }
          return sendFile(res, root, key, "store://" + bucket + "/" + key);
        });
  route(
      "PUT", R"(/v1/store/([^/]+)/?(.*))", true,
      [this, location](const Request& req, Response& res, const Caller& c) -> Result<void> {
        COHORT_ASSIGN(auto where, location(req));
        const auto& [bucket, key] = where;
        if (key.empty()) return fail(Code::kInvalidArgument, "a file upload needs a path");
        COHORT_TRY(checkStoreAccess(*store, c, bucket, key, Access::kWrite));
        const std::string path = options.data_root + "/store/" + bucket + "/" + key;
        struct stat st {};
        if (::lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
          return fail(Code::kFailedPrecondition,
                      "store://" + bucket + "/" + key + " is a directory");
        }
        // A file where a directory of the path should be: say which, not a server error.
        for (size_t slash = key.find('/'); slash != std::string::npos;
             slash = key.find('/', slash + 1)) {
          const std::string parent = key.substr(0, slash);
          std::string dir = options.data_root + "/store/" + bucket + "/" + parent;
          if (::lstat(dir.c_str(), &st) == 0 && !S_ISDIR(st.st_mode)) {
            return fail(Code::kFailedPrecondition, "store://" + bucket + "/" + parent +
                                                       " is a file, so nothing can go under it");
          }
        }
        COHORT_TRY(makeDirs(path.substr(0, path.rfind('/'))));
        COHORT_TRY(writeFileAtomic(path, req.body));
        writeJson(res, 201, {{"uri", "store://" + bucket + "/" + key}, {"size", req.body.size()}});
        return Result<void>();
      });
  route(
      "GET", "/v1/buckets", true,
      [this](const Request&, Response& res, const Caller& c) -> Result<void> {
        COHORT_ASSIGN(std::vector<store::Bucket> list, store->buckets(c.account));
        Json out = Json::array();
        for (const auto& b : list) {
          out.push_back({{"name", b.name}, {"owner", b.owner}, {"created", isoOrNull(b.created)}});
        }
        writeJson(res, 200, {{"buckets", out}});
        return Result<void>();
      });
  route("POST", "/v1/shares", true,
        [this](const Request& req, Response& res, const Caller& c) -> Result<void> {
          COHORT_ASSIGN(Json body, jsonBody(req, {"prefix", "with", "access"}));
          COHORT_ASSIGN(std::string prefix, field<std::string>(body, "prefix", ""));
          COHORT_ASSIGN(std::string with, field<std::string>(body, "with", ""));
          COHORT_ASSIGN(std::string access, field<std::string>(body, "access", "read"));
          auto where = storage::parseLocation(prefix);
          if (!where) return withContext(where.error(), "prefix");
          if (where->kind != storage::Location::Kind::kStore) {
            return fail(Code::kInvalidArgument,
                        "prefix: expected store://bucket/prefix, got '" + prefix + "'");
          }
          if (access != "read" && access != "write") {
            return fail(Code::kInvalidArgument, "access: 'read' or 'write', got '" + access + "'");
          }
          COHORT_ASSIGN(std::optional<std::string> owner, store->bucketOwner(where->bucket));
          if (!owner || (*owner != c.account && !c.admin)) {
            return fail(Code::kNotFound, "bucket '" + where->bucket + "' not found among yours");
          }
          auto grantee = store->account(with);
          if (!grantee) return fail(Code::kNotFound, "with: account '" + with + "' not found");
          if (with == *owner) {
            return fail(Code::kInvalidArgument, "with: '" + with + "' owns the bucket already");
          }
          store::Share share{0, where->bucket, where->key, *owner, with, access, nowUnixNanos()};
          COHORT_ASSIGN(share.id, store->addShare(share));
          writeJson(res, 201, shareJson(share));
          return Result<void>();
        });
  route("GET", "/v1/shares", true,
        [this](const Request&, Response& res, const Caller& c) -> Result<void> {
          COHORT_ASSIGN(std::vector<store::Share> list, store->shares(c.account));
          Json out = Json::array();
          for (const auto& s : list) out.push_back(shareJson(s));
          writeJson(res, 200, {{"shares", out}});
          return Result<void>();
        });
  route("DELETE", R"(/v1/shares/(\d+))", true,
        [this](const Request& req, Response& res, const Caller& c) -> Result<void> {
          COHORT_ASSIGN(int64_t id, idParam(req.matches[1], "share"));
          auto share = store->share(id);
          if (!share || (share->owner != c.account && share->grantee != c.account && !c.admin)) {
            return fail(Code::kNotFound, "share " + std::to_string(id) + " not found");
          }
          if (share->owner != c.account && !c.admin) {
            return fail(Code::kPermissionDenied, "share " + std::to_string(id) +
                                                     " can be revoked only by its owner, '" +
                                                     share->owner + "'");
          }
          COHORT_TRY(store->deleteShare(id));
          res.status = 204;
          return Result<void>();
        });
}

void Server::Impl::accountRoutes() {
  route("GET", "/v1/whoami", true,
        [](const Request&, Response& res, const Caller& c) -> Result<void> {
          writeJson(res, 200, {{"account", c.account}, {"admin", c.admin}});
          return Result<void>();
        });
  auto adminOnly = [](const Caller& c) -> Result<void> {
    if (c.admin) return {};
    return fail(Code::kPermissionDenied, "only an admin account may do this");
  };
  route("POST", "/v1/accounts", true,
        [this, adminOnly](const Request& req, Response& res, const Caller& c) -> Result<void> {
          COHORT_TRY(adminOnly(c));
          COHORT_ASSIGN(Json body, jsonBody(req, {"name", "admin", "max_gpus", "max_cpus"}));
          store::Account a;
          COHORT_ASSIGN(a.name, field<std::string>(body, "name", ""));
          if (!validAccountName(a.name)) {
            return fail(Code::kInvalidArgument,
                        "name: 1-64 of a-z, 0-9, '-' and '_', starting with a letter or digit; "
                        "got '" +
                            a.name + "'");
          }
          COHORT_ASSIGN(a.admin, field<bool>(body, "admin", false));
          // Absent or null: no limit.
          if (body.contains("max_gpus") && !body["max_gpus"].is_null()) {
            COHORT_ASSIGN(int64_t gpus, field<int64_t>(body, "max_gpus", 0));
            if (gpus < 0) return fail(Code::kInvalidArgument, "max_gpus: expected >= 0");
            a.max_gpus = gpus;
          }
          if (body.contains("max_cpus") && !body["max_cpus"].is_null()) {
            COHORT_ASSIGN(double cpus, field<double>(body, "max_cpus", 0));
            if (cpus < 0) return fail(Code::kInvalidArgument, "max_cpus: expected >= 0");
            a.max_cpu_millis = static_cast<int64_t>(cpus * 1000);
          }
          a.created = nowUnixNanos();
          COHORT_TRY(store->createAccount(a));
          COHORT_ASSIGN(std::string token, newToken());
          COHORT_TRY(store->addToken(a.name, sha256Hex(token), "created with the account"));
          writeJson(res, 201, {{"account", accountJson(a)}, {"token", token}});
          return Result<void>();
        });
  route("GET", "/v1/accounts", true,
        [this, adminOnly](const Request&, Response& res, const Caller& c) -> Result<void> {
          COHORT_TRY(adminOnly(c));
          COHORT_ASSIGN(std::vector<store::Account> list, store->accounts());
          Json out = Json::array();
          for (const auto& a : list) out.push_back(accountJson(a));
          writeJson(res, 200, {{"accounts", out}});
          return Result<void>();
        });
  route("GET", "/v1/tokens", true,
        [this](const Request&, Response& res, const Caller& c) -> Result<void> {
          COHORT_ASSIGN(std::vector<store::Token> list,
                        store->tokens(c.admin ? std::nullopt : std::optional(c.account)));
          Json out = Json::array();
          for (const auto& t : list) out.push_back(tokenJson(t));
          writeJson(res, 200, {{"tokens", out}});
          return Result<void>();
        });
  route("POST", "/v1/tokens", true,
        [this](const Request& req, Response& res, const Caller& c) -> Result<void> {
          COHORT_ASSIGN(Json body, jsonBody(req, {"label", "account"}));
          COHORT_ASSIGN(std::string label, field<std::string>(body, "label", ""));
          COHORT_ASSIGN(std::string account, field<std::string>(body, "account", c.account));
          if (account != c.account && !c.admin) {
            return fail(Code::kPermissionDenied,
                        "only an admin may make tokens for another account");
          }
          if (!store->account(account)) {
            return fail(Code::kNotFound, "account '" + account + "' not found");
          }
          COHORT_ASSIGN(std::string token, newToken());
          COHORT_ASSIGN(int64_t id, store->addToken(account, sha256Hex(token), label));
          COHORT_ASSIGN(store::Token t, store->token(id));
          Json out = tokenJson(t);
          out["token"] = token;
          writeJson(res, 201, out);
          return Result<void>();
        });
  route("DELETE", R"(/v1/tokens/(\d+))", true,
        [this](const Request& req, Response& res, const Caller& c) -> Result<void> {
          COHORT_ASSIGN(int64_t id, idParam(req.matches[1], "token"));
          auto token = store->token(id);
          if (!token || (token->account != c.account && !c.admin)) {
            return fail(Code::kNotFound, "token " + std::to_string(id) + " not found");
          }
          COHORT_TRY(store->deleteToken(id));
          forgetTokens();
          res.status = 204;
          return Result<void>();
        });
}

void Server::Impl::routes() {
  route("GET", "/v1/openapi.json", false,
        [](const Request&, Response& res, const Caller&) -> Result<void> {
          res.set_content(openApiDocument(), "application/json");
          return Result<void>();
        });
  route(
      "GET", "/metrics", false,
      [this](const Request&, Response& res, const Caller&) -> Result<void> {
        std::string out = "# HELP cohort_jobs Jobs by state.\n# TYPE cohort_jobs gauge\n";
        std::map<std::string, int64_t> counts;
        for (const std::string& s : store::kJobStates) counts[s] = 0;
        COHORT_ASSIGN(auto by_state, store->countJobsByState());
        for (const auto& [state, n] : by_state) counts[state] = n;
        for (const auto& [state, n] : counts) {
          out += "cohort_jobs{state=\"" + state + "\"} " + std::to_string(n) + "\n";
        }
        out +=
            "# HELP cohort_queue_length Jobs waiting to start.\n# TYPE cohort_queue_length gauge\n";
        out += "cohort_queue_length " + std::to_string(jobs->queueLength()) + "\n";
        out +=
            "# HELP cohort_schedule_seconds Time of one scheduling pass.\n"
            "# TYPE cohort_schedule_seconds histogram\n";
        out += jobs->passLatency().render("cohort_schedule_seconds", "");
        out += metrics.render();
        res.set_content(out, "text/plain; version=0.0.4");
        return Result<void>();
      });
  jobRoutes();
  storeRoutes();
  accountRoutes();
}

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Server::~Server() { stop(); }

Result<std::unique_ptr<Server>> Server::create(const ServerOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  const std::string dir = options.data_root + "/server";
  COHORT_TRY(makeDirs(dir));
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
  jopts.isolate = options.isolate;
  COHORT_ASSIGN(impl->jobs, JobService::create(*impl->store, jopts, impl->clock));

  httplib::Server& http = impl->http;
  const int threads = options.http_threads;
  http.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  http.set_keep_alive_max_count(100000);
  // Headers and body leave in two writes: without this, each response waits for the client's
  // delayed ACK (about 40 ms).
  http.set_tcp_nodelay(true);
  // cpp-httplib sets SO_REUSEPORT, which lets a second server bind the same port and take half
  // of the connections. SO_REUSEADDR alone still allows a quick restart.
  http.set_socket_options([](int sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  http.set_payload_max_length(kMaxUpload);
  Impl* self = impl.get();
  http.set_pre_routing_handler([self](const Request& req, Response& res) {
    // A followed log must reach the client line by line. cpp-httplib compresses text for a
    // client that accepts gzip or br (every browser does), and its compressor holds the lines
    // until the job ends, so such a request is answered uncompressed. (The request object is
    // cpp-httplib's own non-const one, handed to us as const.)
    if (req.has_param("follow") && req.path.ends_with("/logs")) {
      const_cast<Request&>(req).headers.erase("Accept-Encoding");
    }
    // cpp-httplib inflates a compressed body whole, with no limit to refuse it by.
    const std::string encoding = req.get_header_value("Content-Encoding");
    if (!encoding.empty() && encoding != "identity") {
      writeError(res, Error{Code::kInvalidArgument,
                            "send the request body uncompressed (Content-Encoding '" + encoding +
                                "' is not accepted)"});
      res.set_header("Connection", "close");
      return httplib::Server::HandlerResponse::Handled;
    }
    // Refuse big bodies before reading them: only store uploads may be large, and only from a
    // caller with a valid token. A chunked body has no length to go by, so its caller must
    // have a valid token before any of it is read.
    size_t length = std::strtoull(req.get_header_value("Content-Length").c_str(), nullptr, 10);
    bool upload = req.method == "PUT" && req.path.rfind("/v1/store/", 0) == 0;
    if ((upload && length > kMaxJsonRead) || req.has_header("Transfer-Encoding")) {
      if (auto caller = self->authenticate(req); !caller) {
        writeError(res, caller.error());
        res.set_header("Connection", "close");
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    if (length > (upload ? kMaxUpload : kMaxJsonRead)) {
      writeError(res, Error{Code::kTooLarge, std::string("the request body is over ") +
                                                 (upload ? "1 GiB" : "4 MiB")});
      res.set_header("Connection", "close");
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  http.set_error_handler([](const Request& req, Response& res) {
    if (!res.body.empty()) return;
    std::string message =
        res.status == 404
            ? "no such endpoint: " + req.method + " " + req.path + " (see /v1/openapi.json)"
        : res.status == 413 ? std::string("the request body is too large")
        : res.status == 400 ? std::string(
                                  "the request could not be read (a POST or PUT needs "
                                  "a body or Content-Length: 0)")
                            : std::string("the request could not be served");
    Code code = res.status == 404   ? Code::kNotFound
                : res.status == 413 ? Code::kTooLarge
                : res.status == 400 ? Code::kInvalidArgument
                                    : Code::kInternal;
    int status = res.status;
    writeError(res, Error{code, message});
    res.status = status;
  });
  impl->routes();
  serveConsole(http);  // the web page at / and /console, not an API route
  int port = options.port == 0
                 ? http.bind_to_any_port(options.host)
                 : (http.bind_to_port(options.host, options.port) ? options.port : -1);
  if (port <= 0) {
    return fail(Code::kIo, "cannot listen on " + options.host + ":" + std::to_string(options.port) +
                               " (in use? pick another with --listen HOST:PORT)");
  }
  impl->port = port;
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
  return std::unique_ptr<Server>(new Server(std::move(impl)));
}

int Server::port() const { return impl_->port; }
const std::vector<std::string>& Server::routes() const { return impl_->route_names; }
const std::string& Server::firstAdminToken() const { return impl_->first_admin_token; }
const std::vector<std::string>& Server::reconciled() const { return impl_->jobs->reconciled(); }

Result<void> Server::run() {
  if (!impl_->http.listen_after_bind()) {
    if (impl_->stopping) return {};
    return fail(Code::kIo, "the HTTP server stopped unexpectedly");
  }
  return {};
}

void Server::stop() {
  impl_->stopping = true;
  impl_->http.stop();
}

}  // namespace cohort::server
