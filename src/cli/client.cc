#include "cli/client.h"

#include <dirent.h>
#include <fcntl.h>
#include <netdb.h>
#include <pwd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "backends/local.h"
#include "http/client.h"
#include "job/layout.h"
#include "util/fd.h"
#include "util/text.h"

namespace cohort::cli {

namespace {

using Json = nlohmann::json;

constexpr int kReadTimeoutSeconds = 60;
std::string envOr(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

std::string homeDir() {
  std::string home = envOr("HOME");
  if (!home.empty()) return home;
  if (const passwd* pw = ::getpwuid(::getuid()); pw && pw->pw_dir) return pw->pw_dir;
  return "/tmp";
}

std::string parentDir(const std::string& path) {
  auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

struct Endpoint {
  bool tls = false;  // https://
  std::string host;
  int port = 80;
  std::string base_path;  // "" or "/prefix", without a trailing "/"
};

Result<Endpoint> parseEndpoint(const std::string& normalized) {
  Endpoint e;
  e.tls = startsWith(normalized, "https://");
  if (e.tls) e.port = 443;
  std::string rest = normalized.substr(normalized.find("://") + 3);
  auto slash = rest.find('/');
  if (slash != std::string::npos) {
    e.base_path = rest.substr(slash);
    rest = rest.substr(0, slash);
  }
  std::string port_text;
  if (!rest.empty() && rest[0] == '[') {  // [::1]:8600
    auto close = rest.find(']');
    if (close == std::string::npos) {
      return fail(Code::kInvalidArgument, "server '" + normalized + "': unclosed '['");
    }
    e.host = rest.substr(1, close - 1);
    if (close + 1 < rest.size()) {
      if (rest[close + 1] != ':') {
        return fail(Code::kInvalidArgument, "server '" + normalized + "': bad address");
      }
      port_text = rest.substr(close + 2);
    }
  } else if (auto colon = rest.rfind(':'); colon != std::string::npos) {
    e.host = rest.substr(0, colon);
    port_text = rest.substr(colon + 1);
  } else {
    e.host = rest;
  }
  if (e.host.empty()) {
    return fail(Code::kInvalidArgument, "server '" + normalized + "': no host name");
  }
  if (!port_text.empty()) {
    auto port = parseInt(port_text);
    if (!port || *port < 1 || *port > 65535) {
      return fail(Code::kInvalidArgument,
                  "server '" + normalized + "': bad port '" + port_text + "'");
    }
    e.port = *port;
  }
  return e;
}

// Why no connection could be made, in the operating system's words where it can be found again:
// libcurl says "Couldn't connect to server". Resolves the name and tries one connect.
std::string connectFailureReason(const Endpoint& e, const http::Response& answer) {
  if (answer.timed_out) return "connection timed out";
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  int rc = ::getaddrinfo(e.host.c_str(), std::to_string(e.port).c_str(), &hints, &found);
  if (rc != 0) return "host '" + e.host + "': " + ::gai_strerror(rc);
  std::string reason = answer.error;
  for (addrinfo* a = found; a; a = a->ai_next) {
    UniqueFd fd(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
    if (!fd.valid()) continue;
    timeval timeout{5, 0};
    ::setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof timeout);
    if (::connect(fd.get(), a->ai_addr, a->ai_addrlen) == 0) {
      reason = "the connection was closed";  // it came up between the two tries
      break;
    }
    reason =
        errno == EINPROGRESS || errno == EAGAIN ? "connection timed out" : std::strerror(errno);
  }
  ::freeaddrinfo(found);
  return reason;
}

// The Error for an HTTP error answer.
Error errorFromAnswer(int status, const std::string& body, const std::string& target) {
  std::string code_name, message;
  Json parsed = Json::parse(body, nullptr, false);
  if (parsed.is_object() && parsed.contains("error") && parsed["error"].is_object()) {
    const Json& e = parsed["error"];
    if (e.contains("code") && e["code"].is_string()) code_name = e["code"].get<std::string>();
    if (e.contains("message") && e["message"].is_string()) {
      message = e["message"].get<std::string>();
    }
  }
  if (message.empty()) {
    std::string first = body.substr(0, body.find('\n'));
    if (first.size() > 200) first.resize(200);
    message = target + ": HTTP " + std::to_string(status) + (first.empty() ? "" : ": " + first);
  }
  Code code = Code::kInternal;
  switch (status) {
    case 400:
      code = Code::kInvalidArgument;
      break;
    case 401:
      code = Code::kUnauthenticated;
      if (message.find("cohort login") == std::string::npos) {
        message += " (log in with cohort login URL, pass --token or set COHORT_TOKEN)";
      }
      break;
    case 403:
      code = Code::kPermissionDenied;
      break;
    case 413:
      code = Code::kTooLarge;
      break;
    case 429:
      code = Code::kResourceExhausted;
      break;
    case 404:
      code = Code::kNotFound;
      break;
    case 409:
      code = code_name == "already_exists" ? Code::kAlreadyExists : Code::kFailedPrecondition;
      break;
    case 502:
    case 503:
    case 504:
      code = Code::kUnavailable;
      break;
    default:
      break;
  }
  return Error{code, message};
}

std::string withQuery(const std::string& path, const QueryParams& query) {
  std::string target = path;
  char sep = '?';
  for (const auto& [key, value] : query) {
    target += sep + urlEncode(key) + "=" + urlEncode(value);
    sep = '&';
  }
  return target;
}

// A request to the server: the token, if any, goes with it.
http::Request request(const std::string& method, const Endpoint& e, const std::string& target,
                      const std::string& token, const std::string& ca = "") {
  http::Request r;
  r.method = method;
  const bool v6 = e.host.find(':') != std::string::npos;
  r.url = std::string(e.tls ? "https://" : "http://") + (v6 ? "[" + e.host + "]" : e.host) + ":" +
          std::to_string(e.port) + target;
  r.ca_file = ca;
  r.headers.push_back("User-Agent: cohort/" COHORT_VERSION);
  if (!token.empty()) r.headers.push_back("Authorization: Bearer " + token);
  r.stall_timeout_s = kReadTimeoutSeconds;
  return r;
}

// The error for a request that got no whole answer (`answer.error` is set).
Error transferError(const std::string& server, const Endpoint& e, const http::Response& answer,
                    const std::string& what) {
  if (answer.too_large) {
    return Error{Code::kTooLarge,
                 "the server at " + server + " answered " + what + ": " + answer.error};
  }
  auto says = [&](const char* word) { return answer.error.find(word) != std::string::npos; };
  if (answer.status == 0 && (says("SSL") || says("certificate") || says("TLS"))) {
    return Error{Code::kUnavailable,
                 "the server at " + server + " could not be trusted: " + answer.error +
                     (e.tls ? " (a private certificate authority's certificates: --ca FILE or "
                              "COHORT_CA; a self-signed server: cohort login " + server +
                              " --fingerprint <what the server printed>)"
                            : "")};
  }
  if (answer.connected) {
    return Error{Code::kUnavailable, "the server at " + server + " cut off its answer to " + what +
                                         ": " + answer.error};
  }
  return Error{Code::kUnavailable, "cannot reach the server at " + server + ": " +
                                       connectFailureReason(e, answer) +
                                       " (is cohort server running?)"};
}

// Sends `r`; "talking to the server needs libcurl ..." when it cannot be loaded.
Result<http::Response> send(const http::Request& r) {
  auto answer = http::perform(r);
  if (!answer) {
    return fail(answer.error().code, "talking to the server needs " + answer.error().message);
  }
  return answer;
}

}  // namespace

std::string clientConfigPath() {
  std::string base = envOr("XDG_CONFIG_HOME");
  if (base.empty() || base[0] != '/') base = homeDir() + "/.config";
  return base + "/cohort/config.json";
}

Result<ClientConfig> readClientConfig(const std::string& path) {
  ClientConfig config;
  auto text = readFile(path);
  if (!text) {
    if (text.error().code == Code::kNotFound) return config;
    return tl::unexpected<Error>(text.error());
  }
  Json parsed = Json::parse(*text, nullptr, false);
  if (parsed.is_discarded() || !parsed.is_object()) {
    return fail(Code::kInvalidArgument, "config file '" + path + "': not a JSON object");
  }
  for (auto [key, field] :
       {std::pair<const char*, std::string*>{"server", &config.server}, {"token", &config.token},
        {"ca", &config.ca}}) {
    if (!parsed.contains(key) || parsed[key].is_null()) continue;
    if (!parsed[key].is_string()) {
      return fail(Code::kInvalidArgument,
                  "config file '" + path + "': '" + key + "' is not a string");
    }
    *field = parsed[key].get<std::string>();
  }
  return config;
}

Result<void> writeClientConfig(const std::string& path, const ClientConfig& config) {
  const std::string dir = parentDir(path);
  COHORT_TRY(makeDirs(parentDir(dir)));
  if (::mkdir(dir.c_str(), 0700) < 0 && errno != EEXIST) return failErrno("create '" + dir + "'");
  Json doc = {{"server", config.server}, {"token", config.token}};
  if (!config.ca.empty()) doc["ca"] = config.ca;
  std::string text = doc.dump(2) + "\n";
  return writeFileAtomic(path, text, true, 0600);
}

Result<std::string> normalizeServerUrl(const std::string& url) {
  std::string s = url;
  while (!s.empty() && (s.back() == '/' || s.back() == ' ')) s.pop_back();
  while (!s.empty() && s.front() == ' ') s.erase(0, 1);
  if (s.empty()) return fail(Code::kInvalidArgument, "server URL is empty");
  if (s.find("://") == std::string::npos) s = "http://" + s;
  if (!startsWith(s, "http://") && !startsWith(s, "https://")) {
    return fail(Code::kInvalidArgument,
                "server '" + url + "': expected an http:// or https:// URL");
  }
  COHORT_TRY(parseEndpoint(s));
  return s;
}

Result<ServerSettings> resolveServerSettings(const std::string& flag_server,
                                             const std::string& flag_token,
                                             const std::string& flag_ca) {
  const std::string path = clientConfigPath();
  COHORT_ASSIGN(ClientConfig config, readClientConfig(path));
  std::string server = !flag_server.empty()              ? flag_server
                       : !envOr("COHORT_SERVER").empty() ? envOr("COHORT_SERVER")
                                                         : config.server;
  if (server.empty()) {
    return fail(Code::kInvalidArgument,
                "no server: pass --server URL, set COHORT_SERVER or run cohort login URL");
  }
  ServerSettings settings;
  COHORT_ASSIGN(settings.server, normalizeServerUrl(server));
  settings.token = !flag_token.empty() ? flag_token : envOr("COHORT_TOKEN");
  if (settings.token.empty() && !config.token.empty() && !config.server.empty()) {
    auto config_server = normalizeServerUrl(config.server);
    if (config_server && *config_server == settings.server) settings.token = config.token;
  }
  settings.ca = !flag_ca.empty() ? flag_ca : envOr("COHORT_CA");
  if (settings.ca.empty() && !config.ca.empty() && !config.server.empty()) {
    auto config_server = normalizeServerUrl(config.server);
    if (config_server && *config_server == settings.server) settings.ca = config.ca;
  }
  if (!settings.ca.empty() && ::access(settings.ca.c_str(), R_OK) != 0) {
    return fail(Code::kInvalidArgument, "the certificates to trust, '" + settings.ca +
                                            "' (--ca, COHORT_CA or cohort login): " +
                                            std::strerror(errno));
  }
  return settings;
}

namespace {

// A server's answer: its JSON (null for an empty body), or the error it names.
Result<Json> jsonAnswer(const http::Response& res, const std::string& method,
                        const std::string& path) {
  if (res.status < 200 || res.status >= 300) {
    return tl::unexpected<Error>(errorFromAnswer(res.status, res.body, method + " " + path));
  }
  if (res.body.empty()) return Json(nullptr);
  Json answer = Json::parse(res.body, nullptr, false);
  if (answer.is_discarded()) {
    return fail(Code::kInternal, method + " " + path + ": the server's answer is not JSON");
  }
  return answer;
}

}  // namespace

Result<Json> ApiClient::call(const std::string& method, const std::string& path, const Json& body,
                             const QueryParams& query) {
  if (method != "GET" && method != "POST" && method != "PUT" && method != "DELETE") {
    return fail(Code::kInternal, "unsupported HTTP method '" + method + "'");
  }
  COHORT_ASSIGN(Endpoint endpoint, parseEndpoint(settings_.server));
  http::Request r =
      request(method, endpoint, endpoint.base_path + withQuery(path, query), settings_.token,
              settings_.ca);
  r.headers.push_back("Accept: application/json");
  if (!body.is_null()) {
    r.body = body.dump();
    r.headers.push_back("Content-Type: application/json");
  }
  COHORT_ASSIGN(http::Response answer, send(r));
  if (!answer.error.empty()) {
    return tl::unexpected<Error>(
        transferError(settings_.server, endpoint, answer, method + " " + path));
  }
  return jsonAnswer(answer, method, path);
}

Result<Json> ApiClient::sendFile(const std::string& method, const std::string& path, int fd,
                                 uint64_t size, const std::string& content_type,
                                 const std::function<void(uint64_t)>& progress) {
  if (method != "POST" && method != "PUT") {
    return fail(Code::kInternal, "unsupported HTTP method '" + method + "'");
  }
  COHORT_ASSIGN(Endpoint endpoint, parseEndpoint(settings_.server));
  http::Request r =
      request(method, endpoint, endpoint.base_path + path, settings_.token, settings_.ca);
  r.headers.push_back("Accept: application/json");
  r.headers.push_back("Content-Type: " + content_type);
  uint64_t offset = 0;
  std::string read_error;
  r.upload_size = size;
  r.upload = [&](char* buf, size_t max) -> size_t {
    ssize_t n = ::pread(fd, buf, max, static_cast<off_t>(offset));
    if (n <= 0) {
      read_error = n < 0 ? std::strerror(errno) : "the file got shorter";
      return 0;
    }
    offset += static_cast<uint64_t>(n);
    if (progress) progress(offset);
    return static_cast<size_t>(n);
  };
  COHORT_ASSIGN(http::Response answer, send(r));
  if (!read_error.empty()) {
    return fail(Code::kIo, method + " " + path + ": reading what to send: " + read_error);
  }
  if (!answer.error.empty() && answer.status == 0) {
    if (answer.connected && answer.sent < size) {
      return fail(Code::kUnavailable,
                  "the server at " + settings_.server + " closed the connection after " +
                      formatSize(static_cast<double>(answer.sent)) + " of " +
                      formatSize(static_cast<double>(size)) +
                      " were sent: the upload may be over its limit (cohort server "
                      "--max-upload), or the server stopped");
    }
    return tl::unexpected<Error>(
        transferError(settings_.server, endpoint, answer, method + " " + path));
  }
  // An answer that came before the whole body was sent (a refusal) is the server's word.
  return jsonAnswer(answer, method, path);
}

bool isLocalServer(const std::string& server) {
  auto endpoint = parseEndpoint(server);
  if (!endpoint) return false;
  const std::string& host = endpoint->host;
  return host == "localhost" || host == "::1" || host == "[::1]" || startsWith(host, "127.");
}

Result<int> ApiClient::stream(const std::string& path, const QueryParams& query,
                              const std::function<bool(const char*, size_t)>& sink,
                              bool no_read_timeout) {
  COHORT_ASSIGN(Endpoint endpoint, parseEndpoint(settings_.server));
  http::Request r =
      request("GET", endpoint, endpoint.base_path + withQuery(path, query), settings_.token,
              settings_.ca);
  if (no_read_timeout) r.stall_timeout_s = 0;
  r.on_body = sink;
  COHORT_ASSIGN(http::Response answer, send(r));
  if (answer.stopped) return answer.status;
  if (!answer.error.empty()) {
    return tl::unexpected<Error>(transferError(settings_.server, endpoint, answer, "GET " + path));
  }
  if (answer.status < 200 || answer.status >= 300) {
    return tl::unexpected<Error>(errorFromAnswer(answer.status, answer.body, "GET " + path));
  }
  return answer.status;
}

const std::vector<FlagSpec>& serverFlags() {
  static const std::vector<FlagSpec> kFlags = {
      {"--server", "", "URL",
       "the cohort server (default $COHORT_SERVER, else the one saved by cohort login)"},
      {"--token", "", "TOKEN",
       "the token to send (default $COHORT_TOKEN, else the one saved with that server)"},
      {"--ca", "", "FILE",
       "for an https:// server: trust the certificates in FILE (a private certificate "
       "authority's) instead of the system's (default $COHORT_CA, else what cohort login saved "
       "with that server)"},
  };
  return kFlags;
}

std::vector<FlagSpec> withServerFlags(std::vector<FlagSpec> specs) {
  specs.insert(specs.end(), serverFlags().begin(), serverFlags().end());
  return specs;
}

Result<ServerSettings> resolveServerSettings(const Args& args) {
  return resolveServerSettings(args.get("--server"), args.get("--token"), args.get("--ca"));
}

Result<JobLocation> locateJob(const std::string& id, const std::string& data_root,
                              const Args& server_flags) {
  if (id.empty() || id.find('/') != std::string::npos || id[0] == '.') {
    return fail(Code::kInvalidArgument, "'" + id + "' is not a job id");
  }
  const job::Layout layout = job::Layout::of(data_root, id);
  if (::access(layout.dir().c_str(), F_OK) == 0) return JobLocation{layout.dir(), {}};
  // Not a job of this machine: one of the server this machine is logged in to, if any.
  auto settings = resolveServerSettings(server_flags);
  if (!settings) {
    return fail(Code::kInvalidArgument, "no job '" + id + "' in " + job::jobsDir(data_root) +
                                            ", and no server to ask (" + settings.error().message +
                                            ")");
  }
  return JobLocation{"", std::move(*settings)};
}

std::optional<int> runningCoordinator(const std::string& job_dir) {
  const job::Layout layout(job_dir);
  if (::access(layout.resultFile().c_str(), F_OK) == 0) return std::nullopt;
  auto text = readFile(layout.coordinatorPidFile());
  auto pid = text ? parseInt(trim(*text)) : Result<int>(0);
  if (!pid || *pid <= 1) return std::nullopt;
  char exe[4096];
  const ssize_t n = ::readlink(("/proc/" + std::to_string(*pid) + "/exe").c_str(), exe, sizeof exe);
  if (n <= 0 || std::string(exe, static_cast<size_t>(n)) != backends::selfExecutable()) {
    return std::nullopt;
  }
  return *pid;
}

std::vector<std::string> runningJobs(const std::string& data_root) {
  std::vector<std::pair<int64_t, std::string>> found;
  const std::string jobs = job::jobsDir(data_root);
  DIR* dir = ::opendir(jobs.c_str());
  if (!dir) return {};
  while (const dirent* entry = ::readdir(dir)) {
    const std::string id = entry->d_name;
    if (id.empty() || id[0] == '.') continue;
    const std::string job_dir = jobs + "/" + id;
    if (!runningCoordinator(job_dir)) continue;
    struct stat st {};
    if (::stat(job_dir.c_str(), &st) != 0) continue;
    found.emplace_back(static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec,
                       id);
  }
  ::closedir(dir);
  std::sort(found.begin(), found.end());
  std::vector<std::string> ids;
  for (auto& [when, id] : found) ids.push_back(std::move(id));
  return ids;
}

}  // namespace cohort::cli
