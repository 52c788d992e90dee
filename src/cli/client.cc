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
#include <exception>

#include "backends/local.h"
#include "job/layout.h"
#include "util/fd.h"
#include "util/httplib.h"
#include "util/text.h"

namespace cohort::cli {

namespace {

using Json = nlohmann::json;

constexpr time_t kConnectTimeoutSeconds = 5;
constexpr time_t kReadTimeoutSeconds = 60;
// "No read timeout": httplib waits in poll() with the timeout in milliseconds as an int, so the
// longest wait it can express is about 24 days; 20 days is as good as none for a log follower.
constexpr time_t kEndlessReadTimeoutSeconds = 20 * 24 * 3600;
constexpr size_t kMaxErrorBody = 64 * 1024;

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
  std::string host;
  int port = 80;
  std::string base_path;  // "" or "/prefix", without a trailing "/"
};

Result<Endpoint> parseEndpoint(const std::string& normalized) {
  Endpoint e;
  std::string rest = normalized.substr(std::strlen("http://"));
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

// The reason a connection could not be made, in the operating system's words where it can be
// found again: httplib only says "Connection". Resolves the name and tries one connect.
std::string connectFailureReason(const Endpoint& e, httplib::Error error) {
  if (error == httplib::Error::ConnectionTimeout) return "connection timed out";
  if (error != httplib::Error::Connection) return httplib::to_string(error);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  int rc = ::getaddrinfo(e.host.c_str(), std::to_string(e.port).c_str(), &hints, &found);
  if (rc != 0) return "host '" + e.host + "': " + ::gai_strerror(rc);
  std::string reason = "could not connect";
  for (addrinfo* a = found; a; a = a->ai_next) {
    UniqueFd fd(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
    if (!fd.valid()) continue;
    timeval timeout{kConnectTimeoutSeconds, 0};
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

// A configured httplib client for one request.
struct Connection {
  Endpoint endpoint;
  httplib::Client client;
  httplib::Headers headers;

  Connection(Endpoint e, const std::string& token, time_t read_timeout)
      : endpoint(std::move(e)), client(endpoint.host, endpoint.port) {
    client.set_connection_timeout(kConnectTimeoutSeconds, 0);
    client.set_read_timeout(read_timeout, 0);
    client.set_write_timeout(kReadTimeoutSeconds, 0);
    client.set_keep_alive(false);
    client.set_follow_location(false);  // never carry the token elsewhere
    client.set_url_encode(false);       // paths and queries are encoded here
    if (!token.empty()) headers.emplace("Authorization", "Bearer " + token);
  }
};

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
       {std::pair<const char*, std::string*>{"server", &config.server}, {"token", &config.token}}) {
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
  std::string text = doc.dump(2) + "\n";
  return writeFileAtomic(path, text, true, 0600);
}

Result<std::string> normalizeServerUrl(const std::string& url) {
  std::string s = url;
  while (!s.empty() && (s.back() == '/' || s.back() == ' ')) s.pop_back();
  while (!s.empty() && s.front() == ' ') s.erase(0, 1);
  if (s.empty()) return fail(Code::kInvalidArgument, "server URL is empty");
  if (s.find("://") == std::string::npos) s = "http://" + s;
  if (!startsWith(s, "http://")) {
    return fail(Code::kInvalidArgument,
                "server '" + url +
                    "': only http:// is supported (put a TLS proxy in front for "
                    "https)");
  }
  COHORT_TRY(parseEndpoint(s));
  return s;
}

Result<ServerSettings> resolveServerSettings(const std::string& flag_server,
                                             const std::string& flag_token) {
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
  return settings;
}

namespace {

// A server's answer: its JSON (null for an empty body), or the error it names.
Result<Json> jsonAnswer(const httplib::Response& res, const std::string& method,
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
  COHORT_ASSIGN(Endpoint endpoint, parseEndpoint(settings_.server));
  const std::string target = endpoint.base_path + withQuery(path, query);
  try {
    Connection c(endpoint, settings_.token, kReadTimeoutSeconds);
    c.headers.emplace("Accept", "application/json");
    std::string text = body.is_null() ? "" : body.dump();
    httplib::Result res(nullptr, httplib::Error::Unknown);
    if (method == "GET") {
      res = c.client.Get(target, c.headers);
    } else if (method == "POST") {
      res = c.client.Post(target, c.headers, text, "application/json");
    } else if (method == "PUT") {
      res = c.client.Put(target, c.headers, text, "application/json");
    } else if (method == "DELETE") {
      res = body.is_null() ? c.client.Delete(target, c.headers)
                           : c.client.Delete(target, c.headers, text, "application/json");
    } else {
      return fail(Code::kInternal, "unsupported HTTP method '" + method + "'");
    }
    if (!res) {
      if (res.error() == httplib::Error::Read) {
        return fail(Code::kUnavailable, "the server at " + settings_.server +
                                            " cut off its answer to " + method + " " + path);
      }
      return fail(Code::kUnavailable, "cannot reach the server at " + settings_.server + ": " +
                                          connectFailureReason(endpoint, res.error()) +
                                          " (is cohort server running?)");
    }
    return jsonAnswer(*res, method, path);
  } catch (const std::exception& e) {
    return fail(Code::kInternal, method + " " + path + ": " + e.what());
  }
}

Result<Json> ApiClient::sendFile(const std::string& method, const std::string& path, int fd,
                                 uint64_t size, const std::string& content_type,
                                 const std::function<void(uint64_t)>& progress) {
  COHORT_ASSIGN(Endpoint endpoint, parseEndpoint(settings_.server));
  const std::string target = endpoint.base_path + path;
  try {
    Connection c(endpoint, settings_.token, kReadTimeoutSeconds);
    c.headers.emplace("Accept", "application/json");
    std::vector<char> buf(size_t{1} << 20);
    uint64_t sent = 0;
    std::string read_error;
    auto provide = [&](size_t offset, size_t length, httplib::DataSink& sink) {
      ssize_t n = ::pread(fd, buf.data(), std::min(length, buf.size()), static_cast<off_t>(offset));
      if (n <= 0) {
        read_error = n < 0 ? std::strerror(errno) : "the file got shorter";
        return false;
      }
      if (!sink.write(buf.data(), static_cast<size_t>(n))) return false;
      sent = offset + static_cast<uint64_t>(n);
      if (progress) progress(sent);
      return true;
    };
    if (method != "POST" && method != "PUT") {
      return fail(Code::kInternal, "unsupported HTTP method '" + method + "'");
    }
    auto res =
        method == "POST"
            ? c.client.Post(target, c.headers, static_cast<size_t>(size), provide, content_type)
            : c.client.Put(target, c.headers, static_cast<size_t>(size), provide, content_type);
    if (!read_error.empty()) {
      return fail(Code::kIo, method + " " + path + ": reading what to send: " + read_error);
    }
    if (!res) {
      if (sent > 0 && sent < size) {
        return fail(Code::kUnavailable,
                    "the server at " + settings_.server + " closed the connection after " +
                        formatSize(static_cast<double>(sent)) + " of " +
                        formatSize(static_cast<double>(size)) +
                        " were sent: the upload may be over its limit (cohort server "
                        "--max-upload), or the server stopped");
      }
      return fail(Code::kUnavailable, "cannot reach the server at " + settings_.server + ": " +
                                          connectFailureReason(endpoint, res.error()) +
                                          " (is cohort server running?)");
    }
    return jsonAnswer(*res, method, path);
  } catch (const std::exception& e) {
    return fail(Code::kInternal, method + " " + path + ": " + e.what());
  }
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
  const std::string target = endpoint.base_path + withQuery(path, query);
  try {
    Connection c(endpoint, settings_.token,
                 no_read_timeout ? kEndlessReadTimeoutSeconds : kReadTimeoutSeconds);
    int status = 0;
    bool stopped = false;
    std::string error_body;
    auto res = c.client.Get(
        target, c.headers, httplib::ResponseHandler([&](const httplib::Response& r) {
          status = r.status;
          return true;
        }),
        httplib::ContentReceiver([&](const char* data, size_t size) {
          if (status < 200 || status >= 300) {
            error_body.append(
                data, std::min(size, kMaxErrorBody - std::min(kMaxErrorBody, error_body.size())));
            return true;
          }
          if (!sink(data, size)) {
            stopped = true;
            return false;
          }
          return true;
        }));
    if (stopped) return status;
    if (!res) {
      if (status != 0) {
        return fail(Code::kUnavailable, "the server at " + settings_.server +
                                            " cut off its answer to GET " + path + ": " +
                                            httplib::to_string(res.error()));
      }
      return fail(Code::kUnavailable, "cannot reach the server at " + settings_.server + ": " +
                                          connectFailureReason(endpoint, res.error()) +
                                          " (is cohort server running?)");
    }
    if (res->status < 200 || res->status >= 300) {
      return tl::unexpected<Error>(errorFromAnswer(res->status, error_body, "GET " + path));
    }
    return res->status;
  } catch (const std::exception& e) {
    return fail(Code::kInternal, "GET " + path + ": " + e.what());
  }
}

Result<JobLocation> locateJob(const std::string& id, const std::string& data_root,
                              const std::string& flag_server, const std::string& flag_token) {
  if (id.empty() || id.find('/') != std::string::npos || id[0] == '.') {
    return fail(Code::kInvalidArgument, "'" + id + "' is not a job id");
  }
  const job::Layout layout = job::Layout::of(data_root, id);
  if (::access(layout.dir().c_str(), F_OK) == 0) return JobLocation{layout.dir(), {}};
  // Not a job of this machine: one of the server this machine is logged in to, if any.
  auto settings = resolveServerSettings(flag_server, flag_token);
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
