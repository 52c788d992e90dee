#include "backends/kube.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <map>

#include "backends/volcano.h"
#include "http/curl_lib.h"
#include "util/fd.h"
#include "util/json_limits.h"
#include "util/text.h"

#ifndef COHORT_VERSION
#define COHORT_VERSION "0.1.0"
#endif

namespace cohort::backends::kube {

using Json = nlohmann::json;

namespace {

constexpr const char* kServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount";
// Kubernetes objects nest deeper than the job files' 64 levels (a pod's template inside a task
// inside a Job), never this deep.
constexpr int kMaxObjectDepth = 128;

std::string dirOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string inDir(const std::string& path, const std::string& dir) {
  return path.empty() || path[0] == '/' ? path : dir + "/" + path;
}

// A named entry of a kubeconfig list ("clusters", "users", "contexts"): its object, and the
// file it came from.
struct Named {
  Json value;
  std::string file;
};

// The string at `key` of `object`; "" when absent. Errors: kInvalidArgument when it is there and
// not a string.
Result<std::string> stringField(const Json& object, const std::string& key,
                                const std::string& where) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return std::string();
  if (!it->is_string()) {
    return fail(Code::kInvalidArgument, where + "." + key + ": expected a string");
  }
  return it->get<std::string>();
}

// `data` (base64) when given, else the file at `path`. Errors name the field.
Result<std::string> dataOrFile(const Json& object, const std::string& field, const std::string& dir,
                               const std::string& where, const FileReader& read) {
  COHORT_ASSIGN(std::string data, stringField(object, field + "-data", where));
  if (!data.empty()) {
    auto decoded = base64Decode(data);
    if (!decoded) return withContext(decoded.error(), where + "." + field + "-data");
    return *decoded;
  }
  COHORT_ASSIGN(std::string path, stringField(object, field, where));
  if (path.empty()) return std::string();
  auto text = read(inDir(path, dir));
  if (!text) {
    return fail(Code::kNotFound, where + "." + field + ": cannot read '" + inDir(path, dir) +
                                     "': " + text.error().message);
  }
  return *text;
}

std::string namesOf(const std::map<std::string, Named>& entries) {
  std::vector<std::string> names;
  for (const auto& [name, entry] : entries) names.push_back("'" + name + "'");
  return names.empty() ? "none" : join(names, ", ");
}

struct Transfer {
  Response* response = nullptr;
  size_t limit = kMaxBodyBytes;
  bool too_large = false;
  // Streams: lines go to on_line while the status is 2xx.
  const std::function<bool(std::string_view)>* on_line = nullptr;
  std::string partial;
  bool stopped_by_reader = false;
  const std::atomic<bool>* stop = nullptr;
};

size_t onHeader(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  std::string_view line(data, size * n);
  if (line.rfind("HTTP/", 0) == 0) {
    const size_t sp = line.find(' ');
    if (sp != std::string_view::npos) {
      t->response->status = std::atol(std::string(line.substr(sp + 1, 3)).c_str());
    }
  }
  return size * n;
}

size_t onBody(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t bytes = size * n;
  const bool streaming = t->on_line && t->response->status / 100 == 2;
  if (!streaming) {
    if (t->response->body.size() + bytes > t->limit) {
      t->too_large = true;
      return 0;
    }
    t->response->body.append(data, bytes);
    return bytes;
  }
  std::string_view chunk(data, bytes);
  while (!chunk.empty()) {
    const size_t nl = chunk.find('\n');
    const std::string_view piece = chunk.substr(0, nl);
    if (t->partial.size() < kMaxLineBytes) {
      t->partial.append(piece.substr(0, kMaxLineBytes - t->partial.size()));
    }
    if (nl == std::string_view::npos) break;
    chunk.remove_prefix(nl + 1);
    std::string line = std::move(t->partial);
    t->partial.clear();
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!(*t->on_line)(line)) {
      t->stopped_by_reader = true;
      return 0;
    }
  }
  return bytes;
}

int onProgress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  auto* t = static_cast<Transfer*>(user);
  return t->stop && t->stop->load() ? 1 : 0;
}

// The group and version of an API path: "/apis/batch.volcano.sh/v1alpha1/..." ->
// "batch.volcano.sh/v1alpha1"; "/api/v1/..." -> "v1".
std::string apiOf(const std::string& path) {
  const std::vector<std::string> parts = split(path.substr(0, path.find('?')), '/');
  if (parts.size() > 2 && parts[1] == "api") return parts[2];
  if (parts.size() > 3 && parts[1] == "apis") return parts[2] + "/" + parts[3];
  return "";
}

// Whether a 404 is about an object (a Status naming it: a Job, a namespace) rather than about
// the API itself, which the server answers with "404 page not found".
bool namesAnObject(const Response& response) {
  Json status =
      Json::parse(response.body.size() <= (1u << 20) ? response.body : "", nullptr, false);
  if (!status.is_object() || status.value("kind", "") != "Status") return false;
  auto details = status.find("details");
  return details != status.end() && details->is_object() && details->contains("name");
}

}  // namespace

Result<Json> parseObject(std::string_view text, const std::string& what) {
  if (auto deep = checkJsonDepth(text, kMaxObjectDepth); !deep) {
    return fail(Code::kIo, what + ": " + deep.error().message);
  }
  Json j = Json::parse(text, nullptr, false);
  if (!j.is_object()) {
    std::string start(text.substr(0, 120));
    for (char& c : start) {
      if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) c = '?';
    }
    return fail(Code::kIo, what + ": the answer is not a JSON object ('" + start + "')");
  }
  return j;
}

Result<Config> parseKubeconfig(const std::vector<KubeconfigFile>& files, const std::string& context,
                               const FileReader& read) {
  std::map<std::string, Named> clusters, users, contexts;
  std::string current;
  std::vector<std::string> paths;
  for (const KubeconfigFile& file : files) {
    paths.push_back("'" + file.path + "'");
    auto doc = parseYamlDocument(file.text);
    if (!doc) {
      return fail(Code::kInvalidArgument, "kubeconfig '" + file.path + "': " + doc.error().message);
    }
    if (doc->is_null()) continue;  // an empty file
    if (!doc->is_object()) {
      return fail(
          Code::kInvalidArgument,
          "kubeconfig '" + file.path + "': expected a mapping (apiVersion: v1, kind: Config)");
    }
    for (auto [key, into] :
         {std::pair<const char*, std::map<std::string, Named>*>{"clusters", &clusters},
          {"users", &users},
          {"contexts", &contexts}}) {
      auto list = doc->find(key);
      if (list == doc->end() || list->is_null()) continue;
      if (!list->is_array()) {
        return fail(Code::kInvalidArgument,
                    "kubeconfig '" + file.path + "': " + key + ": expected a list");
      }
      for (const Json& entry : *list) {
        if (!entry.is_object() || !entry.contains("name") || !entry["name"].is_string()) {
          return fail(Code::kInvalidArgument,
                      "kubeconfig '" + file.path + "': " + key + ": an entry without a name");
        }
        const std::string singular = std::string(key).substr(0, std::string(key).size() - 1);
        Json value = entry.value(singular, Json::object());
        if (!value.is_object()) value = Json::object();
        into->emplace(entry["name"].get<std::string>(), Named{value, file.path});
      }
    }
    if (current.empty()) {
      COHORT_ASSIGN(current,
                    stringField(*doc, "current-context", "kubeconfig '" + file.path + "'"));
    }
  }
  const std::string where_all = join(paths, ", ");
  const std::string name = context.empty() ? current : context;
  if (name.empty()) {
    return fail(Code::kInvalidArgument,
                "kubeconfig " + where_all +
                    ": no current-context: choose one with kubectl config use-context NAME "
                    "(contexts: " +
                    namesOf(contexts) + ")");
  }
  auto ctx = contexts.find(name);
  if (ctx == contexts.end()) {
    return fail(Code::kInvalidArgument, "kubeconfig " + where_all + ": context '" + name +
                                            "' is not there (contexts: " + namesOf(contexts) +
                                            "): choose one with kubectl config use-context NAME");
  }
  const std::string ctx_where = "kubeconfig '" + ctx->second.file + "': context '" + name + "'";
  COHORT_ASSIGN(std::string cluster_name, stringField(ctx->second.value, "cluster", ctx_where));
  COHORT_ASSIGN(std::string user_name, stringField(ctx->second.value, "user", ctx_where));
  COHORT_ASSIGN(std::string ns, stringField(ctx->second.value, "namespace", ctx_where));
  auto cluster = clusters.find(cluster_name);
  if (cluster == clusters.end()) {
    return fail(Code::kInvalidArgument,
                ctx_where + " names cluster '" + cluster_name +
                    "', which is not there (clusters: " + namesOf(clusters) + ")");
  }

  Config config;
  config.origin = ctx_where;
  config.user = user_name;
  config.namespace_name = ns.empty() ? "default" : ns;
  const std::string cluster_where =
      "kubeconfig '" + cluster->second.file + "': cluster '" + cluster_name + "'";
  const Json& c = cluster->second.value;
  COHORT_ASSIGN(config.server, stringField(c, "server", cluster_where));
  while (!config.server.empty() && config.server.back() == '/') config.server.pop_back();
  if (config.server.empty()) {
    return fail(Code::kInvalidArgument, cluster_where + ": no server (https://HOST:PORT)");
  }
  if (!startsWith(config.server, "https://") && !startsWith(config.server, "http://")) {
    return fail(Code::kInvalidArgument,
                cluster_where + ".server: expected https://HOST:PORT, got '" + config.server + "'");
  }
  if (auto skip = c.find("insecure-skip-tls-verify"); skip != c.end() && skip->is_boolean()) {
    config.insecure = skip->get<bool>();
  }
  COHORT_ASSIGN(config.ca_pem, dataOrFile(c, "certificate-authority", dirOf(cluster->second.file),
                                          cluster_where, read));

  if (user_name.empty()) return config;  // no credentials: anonymous
  auto user = users.find(user_name);
  if (user == users.end()) {
    return fail(Code::kInvalidArgument, ctx_where + " names user '" + user_name +
                                            "', which is not there (users: " + namesOf(users) +
                                            ")");
  }
  const std::string user_where = "kubeconfig '" + user->second.file + "': user '" + user_name + "'";
  const Json& u = user->second.value;
  for (const char* plugin : {"exec", "auth-provider"}) {
    if (u.contains(plugin) && !u[plugin].is_null()) {
      return fail(Code::kInvalidArgument,
                  user_where + " authenticates with an " + plugin +
                      " plugin, which cohort does not run: give cohort a kubeconfig whose user "
                      "has a token, a token file or a client certificate (for example a "
                      "service account's token)");
    }
  }
  if (u.contains("username") || u.contains("password")) {
    return fail(Code::kInvalidArgument,
                user_where +
                    " has a username and password (basic authentication, which "
                    "Kubernetes removed): use a token or a client certificate");
  }
  COHORT_ASSIGN(config.token, stringField(u, "token", user_where));
  COHORT_ASSIGN(std::string token_file, stringField(u, "tokenFile", user_where));
  if (config.token.empty() && !token_file.empty()) {
    config.token_file = inDir(token_file, dirOf(user->second.file));
    auto token = read(config.token_file);
    if (!token) {
      return fail(Code::kNotFound, user_where + ".tokenFile: cannot read '" + config.token_file +
                                       "': " + token.error().message);
    }
  }
  const std::string dir = dirOf(user->second.file);
  COHORT_ASSIGN(config.cert_pem, dataOrFile(u, "client-certificate", dir, user_where, read));
  COHORT_ASSIGN(config.key_pem, dataOrFile(u, "client-key", dir, user_where, read));
  if (config.cert_pem.empty() != config.key_pem.empty()) {
    return fail(Code::kInvalidArgument, user_where +
                                            ": a client certificate needs its key, and a "
                                            "key its certificate: give both");
  }
  return config;
}

Result<Config> inClusterConfig(const std::function<const char*(const char*)>& getenv,
                               const FileReader& read) {
  const char* host = getenv("KUBERNETES_SERVICE_HOST");
  const char* port = getenv("KUBERNETES_SERVICE_PORT");
  if (!host || !*host) {
    return fail(Code::kNotFound, "not in a pod (KUBERNETES_SERVICE_HOST is not set)");
  }
  Config config;
  const std::string h = host;
  config.server = "https://" + (h.find(':') != std::string::npos ? "[" + h + "]" : h) + ":" +
                  (port && *port ? port : "443");
  config.origin = "the pod's service account";
  config.token_file = std::string(kServiceAccountDir) + "/token";
  auto token = read(config.token_file);
  if (!token) {
    return fail(Code::kNotFound, "the pod's service account: cannot read '" + config.token_file +
                                     "': " + token.error().message +
                                     " (is automountServiceAccountToken off?)");
  }
  if (auto ca = read(std::string(kServiceAccountDir) + "/ca.crt"); ca) config.ca_pem = *ca;
  if (auto ns = read(std::string(kServiceAccountDir) + "/namespace"); ns && !trim(*ns).empty()) {
    config.namespace_name = std::string(trim(*ns));
  }
  config.user = "the pod's service account";
  return config;
}

Result<Config> loadConfig(const std::string& context) {
  const FileReader read = [](const std::string& path) { return readFile(path); };
  const char* env = std::getenv("KUBECONFIG");
  std::vector<KubeconfigFile> files;
  std::string looked;
  if (env && *env) {
    for (const std::string& path : split(env, ':')) {
      if (path.empty()) continue;
      auto text = readFile(path);
      if (!text) {
        if (text.error().code == Code::kNotFound) continue;  // as kubectl: skipped
        return fail(Code::kNotFound,
                    "KUBECONFIG: cannot read '" + path + "': " + text.error().message);
      }
      files.push_back({path, *text});
    }
    if (files.empty()) {
      return fail(Code::kNotFound, "KUBECONFIG names no file that exists ('" + std::string(env) +
                                       "'): point it at the cluster's kubeconfig");
    }
    return parseKubeconfig(files, context, read);
  }
  const char* home = std::getenv("HOME");
  const std::string path = std::string(home && *home ? home : "/root") + "/.kube/config";
  if (auto text = readFile(path); text) return parseKubeconfig({{path, *text}}, context, read);
  auto in_pod = inClusterConfig([](const char* name) { return std::getenv(name); }, read);
  const char* service = std::getenv("KUBERNETES_SERVICE_HOST");
  if (in_pod || (service && *service)) return in_pod;
  return fail(Code::kNotFound,
              "no Kubernetes configuration: KUBECONFIG is not set, " + path +
                  " does not exist, and cohort does not run in a pod: point KUBECONFIG at the "
                  "cluster's kubeconfig (the file kubectl uses)");
}

Result<std::unique_ptr<Client>> Client::create(Config config) {
  auto curl = http::curlLib();
  if (!curl) {
    return fail(Code::kFailedPrecondition,
                "talking to the Kubernetes API needs " + curl.error().message);
  }
  return std::unique_ptr<Client>(new Client(std::move(config)));
}

Result<std::string> Client::bearer() const {
  if (config_.token_file.empty()) return config_.token;
  auto token = readFile(config_.token_file);
  if (!token) {
    return fail(Code::kIo, "cannot read the token file '" + config_.token_file + "' (" +
                               config_.origin + "): " + token.error().message);
  }
  return std::string(trim(*token));
}

namespace {

// A request's URL, headers (freed by the caller) and body, which outlive its transfer.
struct Prepared {
  curl_slist* headers = nullptr;
  std::string url, token, method, body;
  char error[CURL_ERROR_SIZE] = {0};
};

// One transfer; `t` says where the body goes. Returns curl's code; the status is in t.response.
CURLcode perform(const http::CurlLib& curl, const Config& config, Prepared& p, Transfer& t,
                 Millis timeout) {
  CURL* h = curl.easy_init();
  if (!h) return CURLE_OUT_OF_MEMORY;
  curl.easy_setopt(h, CURLOPT_URL, p.url.c_str());
  curl.easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl.easy_setopt(h, CURLOPT_CUSTOMREQUEST, p.method.c_str());
  if (p.method == "HEAD") curl.easy_setopt(h, CURLOPT_NOBODY, 1L);
  if (!p.body.empty() || p.method == "POST" || p.method == "PUT" || p.method == "PATCH") {
    curl.easy_setopt(h, CURLOPT_POSTFIELDS, p.body.data());
    curl.easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(p.body.size()));
  }
  curl.easy_setopt(h, CURLOPT_HTTPHEADER, p.headers);
  curl.easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, 10000L);
  curl.easy_setopt(h, CURLOPT_TIMEOUT_MS, static_cast<long>(timeout.count()));
  curl.easy_setopt(h, CURLOPT_ERRORBUFFER, p.error);
  curl.easy_setopt(h, CURLOPT_HEADERFUNCTION, onHeader);
  curl.easy_setopt(h, CURLOPT_HEADERDATA, &t);
  curl.easy_setopt(h, CURLOPT_WRITEFUNCTION, onBody);
  curl.easy_setopt(h, CURLOPT_WRITEDATA, &t);
  curl.easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
  curl.easy_setopt(h, CURLOPT_XFERINFOFUNCTION, onProgress);
  curl.easy_setopt(h, CURLOPT_XFERINFODATA, &t);
  curl.easy_setopt(h, CURLOPT_PROTOCOLS_STR, "https,http");
  curl_blob ca{}, cert{}, key{};
  if (config.insecure) {
    curl.easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 0L);
    curl.easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 0L);
  } else if (!config.ca_pem.empty()) {
    ca = {const_cast<char*>(config.ca_pem.data()), config.ca_pem.size(), CURL_BLOB_COPY};
    curl.easy_setopt(h, CURLOPT_CAINFO_BLOB, &ca);
  }
  if (!config.cert_pem.empty()) {
    cert = {const_cast<char*>(config.cert_pem.data()), config.cert_pem.size(), CURL_BLOB_COPY};
    key = {const_cast<char*>(config.key_pem.data()), config.key_pem.size(), CURL_BLOB_COPY};
    curl.easy_setopt(h, CURLOPT_SSLCERT_BLOB, &cert);
    curl.easy_setopt(h, CURLOPT_SSLCERTTYPE, "PEM");
    curl.easy_setopt(h, CURLOPT_SSLKEY_BLOB, &key);
    curl.easy_setopt(h, CURLOPT_SSLKEYTYPE, "PEM");
  }
  const CURLcode code = curl.easy_perform(h);
  curl.easy_cleanup(h);
  return code;
}

Prepared prepare(const http::CurlLib& curl, const Config& config, const std::string& token,
                 const std::string& method, const std::string& path, const std::string& body,
                 const std::string& content_type) {
  Prepared p;
  p.url = config.server + path;
  p.method = method;
  p.body = body;
  p.headers = curl.slist_append(p.headers, "Accept: application/json, */*");
  p.headers = curl.slist_append(p.headers, "User-Agent: cohort/" COHORT_VERSION);
  if (!body.empty()) {
    p.headers = curl.slist_append(p.headers, ("Content-Type: " + content_type).c_str());
  }
  if (!token.empty()) {
    p.headers = curl.slist_append(p.headers, ("Authorization: Bearer " + token).c_str());
  }
  return p;
}

std::string curlWords(const http::CurlLib& curl, CURLcode code, const Prepared& p) {
  return p.error[0] ? std::string(p.error) : std::string(curl.easy_strerror(code));
}

}  // namespace

Result<Response> Client::request(const std::string& method, const std::string& path,
                                 const std::string& body, const std::string& content_type,
                                 Millis timeout) const {
  COHORT_ASSIGN(const http::CurlLib* curl, http::curlLib());
  COHORT_ASSIGN(std::string token, bearer());
  Prepared p = prepare(*curl, config_, token, method, path, body, content_type);
  Response response;
  Transfer t;
  t.response = &response;
  const CURLcode code = perform(*curl, config_, p, t, timeout);
  curl->slist_free_all(p.headers);
  if (t.too_large) {
    return fail(Code::kTooLarge, "the Kubernetes API server at " + config_.server + " answered " +
                                     method + " " + path.substr(0, 200) + " with more than " +
                                     std::to_string(kMaxBodyBytes >> 20) + " MiB");
  }
  if (code != CURLE_OK) {
    return fail(Code::kUnavailable, "cannot reach the Kubernetes API server at " + config_.server +
                                        " (" + config_.origin + "): " + curlWords(*curl, code, p));
  }
  return response;
}

Result<Json> Client::call(const std::string& method, const std::string& path,
                          const std::string& what, const Json& body,
                          const std::string& content_type) const {
  const std::string text =
      body.is_null() ? "" : body.dump(-1, ' ', false, Json::error_handler_t::replace);
  COHORT_ASSIGN(Response response, request(method, path, text, content_type));
  if (response.status / 100 != 2) {
    Error e = apiError(config_, what, response);
    if (e.code == Code::kNotFound && !namesAnObject(response)) {
      // Not the object: the API itself is not served.
      const std::string api = apiOf(path);
      const bool volcano = api.find("volcano.sh/") != std::string::npos;
      e.message = what + ": " +
                  (volcano ? "Volcano is not installed on this cluster (the API server at " +
                                 config_.server + " serves no " + api +
                                 " API): install Volcano (https://volcano.sh), or use the "
                                 "context of a cluster that runs it"
                           : "the API server at " + config_.server + " serves no " + api + " API");
    }
    return tl::unexpected<Error>(e);
  }
  if (response.body.empty()) return Json::object();
  return parseObject(response.body, what);
}

Result<long> Client::stream(const std::string& path,
                            const std::function<bool(std::string_view line)>& on_line,
                            const std::atomic<bool>* stop, Millis timeout,
                            std::string* error_body) const {
  COHORT_ASSIGN(const http::CurlLib* curl, http::curlLib());
  COHORT_ASSIGN(std::string token, bearer());
  Prepared p = prepare(*curl, config_, token, "GET", path, "", "");
  Response response;
  Transfer t;
  t.response = &response;
  t.on_line = &on_line;
  t.stop = stop;
  t.limit = 1u << 20;  // an error's body
  const CURLcode code = perform(*curl, config_, p, t, timeout);
  curl->slist_free_all(p.headers);
  if (response.status / 100 == 2 && !t.partial.empty() && !t.stopped_by_reader) {
    on_line(t.partial);  // a last line without its newline
  }
  if (error_body) *error_body = std::move(response.body);
  const bool ended_by_us = t.stopped_by_reader || (stop && stop->load());
  const bool timed_out = code == CURLE_OPERATION_TIMEDOUT && response.status / 100 == 2;
  if (code != CURLE_OK && !ended_by_us && !timed_out) {
    return fail(Code::kUnavailable,
                "the Kubernetes API server at " + config_.server + " (" + config_.origin +
                    "): GET " + path.substr(0, path.find('?')) + ": " + curlWords(*curl, code, p));
  }
  return response.status;
}

Error apiError(const Config& config, const std::string& what, const Response& response) {
  std::string said;
  Json status =
      Json::parse(response.body.size() <= (1u << 20) ? response.body : "", nullptr, false);
  if (status.is_object() && status.value("kind", "") == "Status") {
    said = status.value("message", "");
  }
  if (said.empty()) {
    said = std::string(trim(response.body.substr(0, 300)));
    if (said.empty()) said = "HTTP " + std::to_string(response.status);
  }
  for (char& c : said) {
    if (static_cast<unsigned char>(c) < 0x20) c = ' ';
  }
  const long s = response.status;
  if (s == 401) {
    return {Code::kUnauthenticated,
            what + ": the Kubernetes API server at " + config.server +
                " does not accept the credentials of " +
                (config.user.empty() ? std::string("no user") : "user '" + config.user + "'") +
                " (" + config.origin + "): " + said +
                "; renew its token or certificate, or choose another context"};
  }
  if (s == 403) {
    return {Code::kPermissionDenied,
            what + ": the cluster forbids it: " + said + " (" + config.origin +
                "); ask the cluster's administrator for a Role that allows it"};
  }
  if (s == 404) return {Code::kNotFound, what + ": " + said};
  if (s == 409) return {Code::kAlreadyExists, what + ": " + said};
  if (s == 400 || s == 422) {
    return {Code::kInvalidArgument, what + ": the API server refuses it: " + said};
  }
  if (s == 429 || s >= 500) {
    return {Code::kUnavailable, what + ": the API server at " + config.server + " answered " +
                                    std::to_string(s) + ": " + said};
  }
  return {Code::kIo, what + ": the API server at " + config.server + " answered " +
                         std::to_string(s) + ": " + said};
}

}  // namespace cohort::backends::kube
