#include "server/server.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <mutex>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <thread>
#include <type_traits>
#include <unordered_map>

#include "env/environments.h"
#include "job/debug.h"
#include "job/jsonl.h"
#include "job/layout.h"
#include "server/access.h"
#include "server/console.h"
#include "server/environments.h"
#include "server/event_hub.h"
#include "server/http.h"
#include "server/jobs.h"
#include "server/metrics.h"
#include "server/tokens.h"
#include "server/uploads.h"
#include "storage/place.h"
#include "storage/uri.h"
#include "store/job_store.h"
#include "util/fd.h"
#include "util/json_limits.h"
#include "util/text.h"

namespace cohort::server {

using Json = nlohmann::json;
using http::Request;
using http::Response;

namespace {

constexpr size_t kMaxJsonBody = 4 << 20;
constexpr size_t kMaxUpload = size_t{1} << 30;
// A JSON body up to this size is read and then refused (413) by its handler: clients that send
// their whole body before reading the answer (cpp-httplib's, Python's) only see an answer when
// the body was read. Bigger ones are refused unread, and such clients see the connection close.
constexpr size_t kMaxJsonRead = 64 << 20;
constexpr size_t kMaxTokenLabel = 256;
constexpr size_t kMaxStoreName = 255;   // bytes of one name in a store:// path
constexpr size_t kMaxStorePath = 1024;  // bytes of a whole store:// path
constexpr auto kMaxWait = std::chrono::minutes(5);
constexpr auto kSseKeepAlive = std::chrono::seconds(15);
constexpr auto kFinalGrace = std::chrono::seconds(2);

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

// JSON text; a string that is not valid UTF-8 (a path sent so) has its bad bytes replaced.
std::string dumpJson(const Json& body) {
  return body.dump(-1, ' ', false, Json::error_handler_t::replace);
}

void writeError(Response& res, const Error& e) {
  res.status = httpStatus(e.code);
  Json body = {
      {"error",
       {{"code", e.code == Code::kIo ? "internal" : codeName(e.code)}, {"message", e.message}}}};
  res.setContent(dumpJson(body) + "\n", "application/json");
}

Response errorResponse(const Error& e) {
  Response res;
  writeError(res, e);
  return res;
}

void writeJson(Response& res, int status, const Json& body) {
  res.status = status;
  res.setContent(dumpJson(body) + "\n", "application/json");
}

// `text` for a message: bytes that are not printable ASCII as \xNN.
std::string printable(std::string_view text) {
  std::string out;
  for (unsigned char c : text) {
    if (c >= 0x20 && c < 0x7f) {
      out.push_back(static_cast<char>(c));
    } else {
      char hex[5];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    }
  }
  return out;
}

bool validUtf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    uint32_t cp = n == 1 ? c : c & (0x7f >> n);
    for (size_t k = 1; k < n; ++k) {
      unsigned char d = static_cast<unsigned char>(s[i + k]);
      if ((d >> 6) != 2) return false;
      cp = (cp << 6) | (d & 0x3f);
    }
    if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) ||
        cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) {
      return false;
    }
    i += n;
  }
  return true;
}

// A store:// path the server can hold: valid UTF-8, names of at most 255 bytes.
Result<void> checkStorePath(const std::string& bucket, const std::string& key) {
  const std::string uri = "store://" + bucket + "/" + key;
  if (!validUtf8(uri)) {
    return fail(Code::kInvalidArgument, printable(uri) + ": the path is not valid UTF-8");
  }
  if (uri.size() > kMaxStorePath) {
    return fail(Code::kInvalidArgument, uri.substr(0, 64) + "...: the path is over " +
                                            std::to_string(kMaxStorePath) + " bytes");
  }
  for (const std::string& part : split(key, '/')) {
    if (part.size() > kMaxStoreName) {
      return fail(Code::kInvalidArgument, uri + ": the name '" + part.substr(0, 32) +
                                              "...' is over " + std::to_string(kMaxStoreName) +
                                              " bytes (" + std::to_string(part.size()) + ")");
    }
  }
  return {};
}

Json isoOrNull(int64_t nanos) { return nanos ? Json(isoTime(nanos)) : Json(nullptr); }

// The request's JSON object body, refusing fields not in `known`.
// The first `max` bytes of the regular file at `path`, never through a link (a job's files are
// written by code the server does not trust), with its modification time in unix nanoseconds
// in `mtime`; nothing when it is not there or not a regular file.
std::optional<std::string> readJobFile(const std::string& path, size_t max,
                                       int64_t* mtime = nullptr) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
  struct stat st {};
  if (!fd.valid() || ::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
  if (mtime) *mtime = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  std::string text(std::min(static_cast<size_t>(st.st_size), max), '\0');
  const ssize_t n = ::pread(fd.get(), text.data(), text.size(), 0);
  text.resize(n > 0 ? static_cast<size_t>(n) : 0);
  return text;
}

// A log's query (a job's, a build's): `offset`, the bytes to skip (0 when absent), and
// `follow`, whether to stream what is appended.
Result<int64_t> offsetParameter(const Request& req) {
  if (!req.hasParam("offset")) return int64_t{0};
  auto n = parseInt64(req.param("offset"));
  if (!n || *n < 0) return fail(Code::kInvalidArgument, "offset: expected bytes >= 0");
  return *n;
}

bool followParameter(const Request& req) {
  const std::string follow = req.param("follow");
  return follow == "1" || follow == "true";
}

Result<Json> jsonBody(const Request& req, const std::set<std::string>& known) {
  if (req.body.size() > kMaxJsonBody) {
    return fail(Code::kTooLarge, "the request body is over 4 MiB");
  }
  // nlohmann's parser recurses once per level: a deep body would overflow the stack.
  COHORT_TRY(checkJsonDepth(req.body));
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

// Serves a regular file under `root`. The job's ranks own what is below `root` and may swap a
// directory for a link while this runs, so the kernel resolves the path (openat2 with
// RESOLVE_BENEATH): no link, `..` or race leads out of `root`.
Result<void> sendFile(Response& res, const std::string& root, const std::string& relative,
                      const std::string& what) {
  UniqueFd dir(::open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!dir.valid()) return fail(Code::kNotFound, what + " not found");
  open_how how{};
  how.flags = O_RDONLY | O_CLOEXEC | O_NONBLOCK;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
  int fd = static_cast<int>(::syscall(SYS_openat2, dir.get(), relative.c_str(), &how, sizeof how));
  if (fd < 0) return fail(Code::kNotFound, what + " not found");
  auto file = std::make_shared<UniqueFd>(fd);
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return fail(Code::kNotFound, what + " not found");
  res.status = 200;
  res.content_type = "application/octet-stream";
  res.file = file;
  res.file_size = static_cast<uint64_t>(st.st_size);
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

}  // namespace

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
  std::vector<std::string> route_names;
  UniqueFd lock;  // flock'd <data_root>/server/server.lock, held while the server lives

  std::mutex auth_mu;
  std::unordered_map<std::string, Caller> auth_cache;  // by token hash
  uint64_t auth_generation = 0;                        // bumped when a token is revoked

  using Handler = std::function<Result<void>(const Request&, Response&, const Caller&)>;
  struct Route {
    std::string method;
    std::regex pattern;
    std::function<void(const Request&, Response&)> run;
  };
  std::vector<Route> table;
  // Last: destroyed first, so that no handler or stream runs once the rest is gone.
  std::unique_ptr<http::HttpServer> http;

  // Routes `req` (on a worker thread).
  void handle(Request& req, Response& res) {
    const std::string method = req.method == "HEAD" ? "GET" : req.method;
    if (method == "GET" && isConsolePath(req.path)) {
      consoleAnswer(res);
      return;
    }
    std::smatch m;
    for (const Route& r : table) {
      if (r.method != method || !std::regex_match(req.path, m, r.pattern)) continue;
      req.matches.assign(m.begin(), m.end());
      r.run(req, res);
      return;
    }
    writeError(res, Error{Code::kNotFound, "no such endpoint: " + req.method + " " + req.path +
                                               " (see /v1/openapi.json)"});
  }

  // Before any of a request's body is read (on the loop thread).
  http::Admission admit(const Request& req) {
    http::Admission a;
    // A compressed body would have to be inflated whole, with no limit to refuse it by.
    const std::string encoding = req.header("Content-Encoding");
    if (!encoding.empty() && encoding != "identity") {
      a.answer = errorResponse(Error{Code::kInvalidArgument,
                                     "send the request body uncompressed (Content-Encoding '" +
                                         encoding + "' is not accepted)"});
      return a;
    }
    // Refuse big bodies before reading them: only store uploads may be large, and only from a
    // caller with a valid token. A chunked body has no length to go by, so its caller must
    // have a valid token before any of it is read.
    size_t length = std::strtoull(req.header("Content-Length").c_str(), nullptr, 10);
    const bool code = req.method == "POST" && req.path == "/v1/uploads";
    const bool upload = code || (req.method == "PUT" && req.path.rfind("/v1/store/", 0) == 0);
    const size_t limit = code     ? static_cast<size_t>(options.max_upload_bytes)
                         : upload ? kMaxUpload
                                  : kMaxJsonRead;
    if ((upload && length > kMaxJsonRead) || req.hasHeader("Transfer-Encoding")) {
      if (auto caller = authenticate(req); !caller) {
        a.answer = errorResponse(caller.error());
        return a;
      }
    }
    if (length > limit) {
      a.answer = errorResponse(Error{
          Code::kTooLarge,
          code ? "the code upload (" + formatSize(static_cast<double>(length)) + ") is over " +
                     formatSize(static_cast<double>(limit)) +
                     ", this server's limit (cohort server --max-upload): leave files out with "
                     ".cohortignore, or put data in the store and name it in inputs"
               : std::string("the request body is over ") + (upload ? "1 GiB" : "4 MiB")});
      return a;
    }
    a.body_limit = limit;
    return a;
  }

  Result<Caller> authenticate(const Request& req) {
    std::string header = req.header("Authorization");
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
                            {"([\\s\\S]+?)", "{name}"},
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
    table.push_back(Route{method, std::regex(pattern), wrapped});
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

  // The file a job's logs come from: the merged console, or a rank's log. The plan only says
  // which role and index the rank is; the path is built from those, never read from a file.
  // "" when the job has not started. Errors: kInvalidArgument (rank not a number), kNotFound.
  Result<std::string> logPath(const store::Job& job, const std::string& rank) {
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
      for (const Json& node : plan["nodes"]) {
        if (!node.is_object() || !node.contains("ranks") || !node["ranks"].is_array()) continue;
        for (const Json& rp : node["ranks"]) {
          if (!rp.is_object() || rp.value("rank", -1) != *r) continue;
          const std::string role = rp.value("role", "");
          const int role_rank = rp.value("role_rank", -1);
          // "worker/3" logs to worker-3.log; a launcher ("torchrun/node1") to torchrun-node1.log.
          const std::string name = rp.value("name", "");
          std::string index = std::to_string(role_rank);
          if (name.rfind(role + "/", 0) == 0 && plain(name.substr(role.size() + 1))) {
            index = name.substr(role.size() + 1);
          }
          if (!plain(role) || role_rank < 0 || !plain(index)) break;
          return layout.logFile(role + "-" + index);
        }
      }
    }
    return fail(Code::kNotFound, "job '" + job.id + "' has no process with rank " + rank);
  }

  void routes();
  void jobRoutes();
  void storeRoutes();
  void accountRoutes();
  void environmentRoutes();
};

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
    // One more read after the job ended catches its last lines.
    if (!job || store::isFinalState(job->state)) {
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
  route("POST", "/v1/jobs", true,
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
          COHORT_ASSIGN(store::Job job,
                        jobs->submit(c, file->is_string() ? file->get<std::string>() : file->dump(),
                                     priority, code));
          writeJson(res, 201, jobJson(job));
          return Result<void>();
        });
  route("POST", "/v1/uploads", true,
        [this](const Request& req, Response& res, const Caller& c) -> Result<void> {
          storage::ArchiveLimits limits;
          limits.max_bytes = options.max_upload_bytes;
          COHORT_ASSIGN(auto id, accountIdentity(*store, options.identities, c.account));
          COHORT_ASSIGN(Upload upload, receiveUpload(options.data_root, c.account,
                                                     {id.first, id.second}, req.body, limits));
          writeJson(res, 201,
                    {{"id", upload.id},
                     {"files", upload.stats.files},
                     {"dirs", upload.stats.dirs},
                     {"links", upload.stats.links},
                     {"bytes", upload.stats.bytes}});
          return Result<void>();
        });
  route("GET", "/v1/jobs", true,
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
  route("GET", R"(/v1/jobs/([^/]+))", true,
        [this](const Request& req, Response& res, const Caller& c) -> Result<void> {
          COHORT_ASSIGN(store::Job job, visibleJob(c, req.matches[1]));
          Json record = jobJson(job);
          Json spec = Json::parse(job.spec_json, nullptr, false);  // written by the server
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
  route("GET", R"(/v1/jobs/([^/]+)/events)", true,
        [this](const Request& req, Response& res, const Caller& c) -> Result<void> {
          COHORT_ASSIGN(store::Job job, visibleJob(c, req.matches[1]));
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
  route("GET", R"(/v1/jobs/([^/]+)/ranks)", true,
        [this](const Request& req, Response& res, const Caller& c) -> Result<void> {
          COHORT_ASSIGN(store::Job job, visibleJob(c, req.matches[1]));
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
  route("GET", R"(/v1/jobs/([^/]+)/metrics)", true,
        [this](const Request& req, Response& res, const Caller& c) -> Result<void> {
          COHORT_ASSIGN(store::Job job, visibleJob(c, req.matches[1]));
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
  route("POST", R"(/v1/jobs/([^/]+)/stacks)", true,
        [this](const Request& req, Response& res, const Caller& c) -> Result<void> {
          COHORT_ASSIGN(store::Job job, visibleJob(c, req.matches[1]));
          COHORT_TRY(jobs->requestStacks(job.id));
          writeJson(res, 202, {{"requested", true}});
          return Result<void>();
        });
  route("GET", R"(/v1/jobs/([^/]+)/stacks)", true,
        [this](const Request& req, Response& res, const Caller& c) -> Result<void> {
          COHORT_ASSIGN(store::Job job, visibleJob(c, req.matches[1]));
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
  route("GET", R"(/v1/jobs/([^/]+)/debug)", true,
        [this](const Request& req, Response& res, const Caller& c) -> Result<void> {
          COHORT_ASSIGN(store::Job job, visibleJob(c, req.matches[1]));
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
  route("GET", R"(/v1/jobs/([^/]+)/logs)", true,
        [this](const Request& req, Response& res, const Caller& c) -> Result<void> {
          COHORT_ASSIGN(store::Job job, visibleJob(c, req.matches[1]));
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
  route("POST", R"(/v1/jobs/([^/]+)/report)", false,
        [this](const Request& req, Response& res, const Caller&) -> Result<void> {
          const std::string header = req.header("Authorization");
          if (header.rfind("Bearer ", 0) != 0 || header.size() <= 7) {
            return fail(Code::kUnauthenticated, "no token: send the job's report token");
          }
          COHORT_ASSIGN(JobService::ReportAnswer answer,
                        jobs->report(req.matches[1], header.substr(7), req.body));
          writeJson(res, 200, {{"events_seq", answer.events_seq}, {"result", answer.result}});
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
    if (!validUtf8(uri)) {
      return fail(Code::kInvalidArgument, printable(uri) + ": the path is not valid UTF-8");
    }
    if (!storage::validBucketName(req.matches[1]))
      return fail(Code::kNotFound, uri + ": not found");
    COHORT_ASSIGN(storage::Location where, storage::parseLocation(uri));
    COHORT_TRY(checkStorePath(where.bucket, where.key));
    return std::pair{where.bucket, where.key};
  };
  route("GET", R"(/v1/store/([^/]+)/?(.*))", true,
        [this, location](const Request& req, Response& res, const Caller& c) -> Result<void> {
          COHORT_ASSIGN(auto where, location(req));
          const auto& [bucket, key] = where;
          COHORT_TRY(checkStoreAccess(*store, c, bucket, key, Access::kRead));
          COHORT_ASSIGN(auto objects, storage::openBucket(site, bucket));
          const std::string uri = "store://" + bucket + "/" + key;
          if (!key.empty() && req.param("list") != "1") {
            auto object = objects->open(key, options.data_root + "/server");
            if (object) {
              res.status = 200;
              res.content_type = "application/octet-stream";
              res.file_size = static_cast<uint64_t>(object->info.size);
              res.file = std::make_shared<UniqueFd>(std::move(object->fd));
              return Result<void>();
            }
            if (object.error().code != Code::kNotFound) return tl::unexpected(object.error());
          }
          // A directory: the objects under it.
          const std::string prefix = key.empty() ? "" : key + "/";
          COHORT_ASSIGN(std::vector<storage::ObjectInfo> listed, objects->list(prefix));
          if (listed.empty() && !key.empty()) return fail(Code::kNotFound, uri + ": not found");
          Json files = Json::array();
          for (const storage::ObjectInfo& o : listed) {
            files.push_back({{"path", o.key.substr(prefix.size())}, {"size", o.size}});
          }
          writeJson(res, 200, {{"files", files}});
          return Result<void>();
        });
  route(
      "PUT", R"(/v1/store/([^/]+)/?(.*))", true,
      [this, location](const Request& req, Response& res, const Caller& c) -> Result<void> {
        COHORT_ASSIGN(auto where, location(req));
        const auto& [bucket, key] = where;
        if (key.empty()) return fail(Code::kInvalidArgument, "a file upload needs a path");
        COHORT_TRY(checkStoreAccess(*store, c, bucket, key, Access::kWrite));
        COHORT_ASSIGN(auto objects, storage::openBucket(site, bucket));
        UniqueFd body(::memfd_create("cohort-store-put", MFD_CLOEXEC));
        if (!body.valid()) return failErrno("memfd_create");
        COHORT_TRY(writeAll(body.get(), req.body));
        COHORT_TRY(objects->put(key, body.get(), static_cast<int64_t>(req.body.size()), nullptr));
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
          if (label.size() > kMaxTokenLabel) {
            return fail(Code::kInvalidArgument, "label: at most " +
                                                    std::to_string(kMaxTokenLabel) +
                                                    " bytes, got " +
                                                    std::to_string(label.size()));
          }
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

// An environment's name is "{name}" in the routes' names (a lazy capture). It captures any
// path, a slash or ".." included, so that the service refuses a name that cannot be one (400,
// naming it) instead of "no such endpoint"; the log's route comes first.
void Server::Impl::environmentRoutes() {
  route("GET", R"(/v1/environments/([\s\S]+?)/log)", true,
        [this](const Request& req, Response& res, const Caller& c) -> Result<void> {
          COHORT_ASSIGN(EnvironmentService::Log log, environments->log(c, req.matches[1]));
          COHORT_ASSIGN(int64_t start, offsetParameter(req));
          res.status = 200;
          res.content_type = "text/plain; charset=utf-8";
          res.setHeader("Cache-Control", "no-cache");
          res.setHeader("X-Content-Type-Options", "nosniff");
          res.stream = buildLogStream(*environments, *hub, log, start, followParameter(req),
                                      [this] { return stopping.load(); });
          return Result<void>();
        });
  route("GET", "/v1/environments", true,
        [this](const Request&, Response& res, const Caller& c) -> Result<void> {
          COHORT_ASSIGN(Json list, environments->list(c));
          writeJson(res, 200, list);
          return Result<void>();
        });
  route("GET", R"(/v1/environments/([\s\S]+?))", true,
        [this](const Request& req, Response& res, const Caller& c) -> Result<void> {
          COHORT_ASSIGN(Json e, environments->show(c, req.matches[1]));
          writeJson(res, 200, e);
          return Result<void>();
        });
  route("PUT", R"(/v1/environments/([\s\S]+?))", true,
        [this](const Request& req, Response& res, const Caller& c) -> Result<void> {
          COHORT_ASSIGN(Json body, jsonBody(req, {"base", "requirements", "lock"}));
          EnvironmentDefinition d;
          COHORT_ASSIGN(d.base, field<std::string>(body, "base", ""));
          COHORT_ASSIGN(d.requirements, field<std::vector<std::string>>(body, "requirements", {}));
          COHORT_ASSIGN(d.lock, field<std::string>(body, "lock", ""));
          COHORT_ASSIGN(Json e, environments->push(c, req.matches[1], d));
          writeJson(res, 202, e);
          return Result<void>();
        });
  route("DELETE", R"(/v1/environments/([\s\S]+?))", true,
        [this](const Request& req, Response& res, const Caller& c) -> Result<void> {
          COHORT_TRY(environments->remove(c, req.matches[1]));
          res.status = 204;
          return Result<void>();
        });
}

void Server::Impl::routes() {
  route("GET", "/v1/openapi.json", false,
        [](const Request&, Response& res, const Caller&) -> Result<void> {
          res.setContent(openApiDocument(), "application/json");
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
        out += "# HELP cohort_http_connections Open HTTP connections.\n"
               "# TYPE cohort_http_connections gauge\n";
        out += "cohort_http_connections " + std::to_string(http ? http->connections() : 0) + "\n";
        out += "# HELP cohort_followers Streams following a job's events or log (no thread "
               "each).\n# TYPE cohort_followers gauge\n";
        out += "cohort_followers " + std::to_string(hub->subscribers()) + "\n";
        out += metrics.render();
        res.setContent(out, "text/plain; version=0.0.4");
        return Result<void>();
      });
  // Per-job gauges (docs/observing.md#prometheus): they name jobs and accounts, so an admin's
  // token only, and bounded: running jobs and those that ended in the last kRecentlyEnded.
  route(
      "GET", "/v1/metrics", true,
      [this](const Request&, Response& res, const Caller& c) -> Result<void> {
        if (!c.admin) {
          return fail(Code::kPermissionDenied,
                      "only an admin account may read every job's metrics (GET /metrics has "
                      "the server's own, without a token)");
        }
        constexpr size_t kMaxJobs = 1000;
        constexpr size_t kMaxSeries = 20000;
        constexpr int64_t kRecentlyEnded = int64_t{15} * 60 * 1000000000;
        std::vector<std::string> active;
        for (const std::string& s : store::kJobStates) {
          if (!store::isFinalState(s) && s != "queued") active.push_back(s);
        }
        COHORT_ASSIGN(std::vector<store::Job> listed, store->jobsInStates(active));
        store::JobFilter ended;
        for (const std::string& s : store::kJobStates) {
          if (store::isFinalState(s)) ended.states.push_back(s);
        }
        ended.limit = static_cast<int>(kMaxJobs);
        COHORT_ASSIGN(std::vector<store::Job> finished, store->jobs(ended));
        const int64_t since = nowUnixNanos() - kRecentlyEnded;
        for (store::Job& j : finished) {
          if (j.ended >= since) listed.push_back(std::move(j));
        }
        if (listed.size() > kMaxJobs) listed.resize(kMaxJobs);
        std::vector<JobSeries> series;
        for (const store::Job& j : listed) {
          JobSeries js{j.id, j.name, j.account, j.state, {}};
          const auto snapshot = store::isFinalState(j.state) ? std::nullopt : jobs->progress(j.id);
          Json p = snapshot ? Json::parse(*snapshot, nullptr, false) : Json();
          if (p.is_object() && p["ranks"].is_array()) {
            for (const Json& r : p["ranks"]) {
              if (!r.is_object()) continue;
              static const Json kNone;
              auto at = [&](const char* key) -> const Json& {
                auto it = r.find(key);
                return it == r.end() ? kNone : *it;
              };
              if (!at("rank").is_number_integer()) continue;
              JobSeries::Rank rank;
              const std::string name = at("name").is_string() ? at("name").get<std::string>() : "";
              rank.role = at("role").is_string() ? at("role").get<std::string>()
                                                 : name.substr(0, name.find('/'));
              rank.rank = at("rank").get<int>();
              rank.node = at("node").is_number_integer() ? at("node").get<int>() : 0;
              if (at("cpu_seconds").is_number()) rank.cpu_seconds = at("cpu_seconds").get<double>();
              if (at("rss_bytes").is_number_integer())
                rank.rss_bytes = at("rss_bytes").get<int64_t>();
              if (at("gpu_util").is_number()) rank.gpu_util = at("gpu_util").get<double>();
              if (at("gpu_memory_bytes").is_number_integer()) {
                rank.gpu_memory_bytes = at("gpu_memory_bytes").get<int64_t>();
              }
              js.ranks.push_back(std::move(rank));
            }
          }
          series.push_back(std::move(js));
        }
        res.setContent(renderJobMetrics(series, kMaxSeries), "text/plain; version=0.0.4");
        return Result<void>();
      });
  jobRoutes();
  storeRoutes();
  accountRoutes();
  environmentRoutes();
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
  jopts.isolate = options.isolate;
  jopts.input_roots = options.input_roots;
  jopts.job_network = options.job_network;
  jopts.identities = options.identities;
  jopts.max_upload_bytes = options.max_upload_bytes;
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
  http::Options hopts;
  hopts.host = options.host;
  hopts.port = options.port;
  hopts.threads = options.http_threads;
  hopts.limits.idle_timeout = options.http_idle_timeout;
  hopts.admit = [self](const Request& req) { return self->admit(req); };
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
  jopts.report_url = "http://" + host + ":" + std::to_string(port);
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
  return std::unique_ptr<Server>(new Server(std::move(impl)));
}

int Server::port() const { return impl_->port; }
const std::vector<std::string>& Server::routes() const { return impl_->route_names; }
const std::string& Server::firstAdminToken() const { return impl_->first_admin_token; }
const std::vector<std::string>& Server::reconciled() const { return impl_->jobs->reconciled(); }

Result<void> Server::run() {
  if (impl_->stopping) return {};
  return impl_->http->run();
}

void Server::stop() {
  impl_->stopping = true;
  if (impl_->http) impl_->http->stop();
}

}  // namespace cohort::server
