// A small client of the Kubernetes API, for the volcano backend: where the cluster is and who
// cohort is to it (a kubeconfig's current context, or the service account of the pod cohort runs
// in), and the REST calls cohort makes (create, get, list, patch, delete, and streams: watches and
// a pod's log). It speaks HTTPS through libcurl, loaded when the first request needs it
// (http/curl_lib.h), so that a cohort that never talks to a cluster never loads it. What the
// API server sends is untrusted bytes: bodies and stream lines are bounded, parsed without
// exceptions, and anything malformed is an Error. Errors name what a person can act on: a 401
// names the kubeconfig's user, a 403 the verb, resource and namespace refused, a 404 of an API
// that is not there says which software is not installed, an unreachable server its URL.
// Configuration parsing is pure (files come through a reader the caller gives); a Client is
// thread-safe (each request uses a handle of its own).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "util/result.h"
#include "util/text.h"

namespace cohort::backends::kube {

// Where the API server is and how cohort proves who it is.
struct Config {
  std::string server;      // "https://10.0.0.1:6443"
  std::string ca_pem;      // the CA that signs the server's certificate; "": the system's CAs
  bool insecure = false;   // insecure-skip-tls-verify: the server's certificate is not checked
  std::string token;       // a bearer token
  std::string token_file;  // read again for every request when set (service-account tokens rotate)
  std::string cert_pem, key_pem;  // a client certificate and its key
  std::string namespace_name = "default";
  // For messages: where this came from ("kubeconfig '/home/a/.kube/config', context 'prod'"
  // or "the pod's service account") and the user it authenticates as.
  std::string origin;
  std::string user;
};

// Reads a file for the configuration parsers (a seam for tests). Errors: those of the reader.
using FileReader = std::function<Result<std::string>(const std::string& path)>;

// One kubeconfig file: its path (relative paths inside it are relative to its directory) and
// its text.
struct KubeconfigFile {
  std::string path;
  std::string text;
};

// The configuration of `context` ("": the current context) from kubeconfig files merged as
// kubectl merges $KUBECONFIG's list: the first file that names a cluster, user or context wins,
// and the first current-context set wins. Certificates and tokens are read from the files the
// kubeconfig names (paths relative to its own file), or taken from its *-data fields (base64).
// Errors: kInvalidArgument naming the file and field (no current context, a context, cluster or
// user that is not there, a user that authenticates with an exec or auth-provider plugin, base64
// that is not), kNotFound for a file it names that cannot be read.
Result<Config> parseKubeconfig(const std::vector<KubeconfigFile>& files, const std::string& context,
                               const FileReader& read);

// The configuration of a pod's service account: KUBERNETES_SERVICE_HOST and _PORT from `getenv`,
// token, CA and namespace from /var/run/secrets/kubernetes.io/serviceaccount/ through `read`.
// Errors: kNotFound when this is not a pod (no KUBERNETES_SERVICE_HOST), kNotFound naming the
// token file when it cannot be read.
Result<Config> inClusterConfig(const std::function<const char*(const char*)>& getenv,
                               const FileReader& read);

// The configuration cohort uses: $KUBECONFIG (a list of files separated by ':'), else
// ~/.kube/config, else the service account of the pod cohort runs in. Errors: kNotFound when
// there is none of them (saying where it looked), those of the parsers.
Result<Config> loadConfig(const std::string& context = "");

// An answer of the API server, whatever its status.
struct Response {
  long status = 0;
  std::string body;
};

// The largest body the client keeps (a list of a namespace's pods, a CRD); a longer one is an
// error, not a truncation.
inline constexpr size_t kMaxBodyBytes = 64u << 20;
// The longest line of a stream (a watch event, a log line) it hands on; longer log lines are
// cut here, a longer watch event is an error.
inline constexpr size_t kMaxLineBytes = 16u << 20;

class Client {
 public:
  // Errors: kFailedPrecondition when libcurl cannot be loaded.
  static Result<std::unique_ptr<Client>> create(Config config);

  const Config& config() const { return config_; }

  // One request (`path` begins with "/", query included). Returns the answer for any HTTP
  // status. Errors: kUnavailable naming the server's URL when it cannot be reached (TLS included),
  // kTooLarge for a body over kMaxBodyBytes, kIo for a token file that cannot be read.
  Result<Response> request(const std::string& method, const std::string& path,
                           const std::string& body = "",
                           const std::string& content_type = "application/json",
                           Millis timeout = Millis(30000)) const;

  // The JSON object a 2xx answer carries; any other answer as an Error (apiError) naming `what`
  // ("create Volcano Job 'x'"). Errors: those of request(), kIo for a body that is not a JSON
  // object.
  Result<nlohmann::json> call(const std::string& method, const std::string& path,
                              const std::string& what, const nlohmann::json& body = nullptr,
                              const std::string& content_type = "application/json") const;

  // A streamed GET (a watch, a followed log): `on_line` gets each line, without its newline, as
  // it arrives (a line over kMaxLineBytes is cut there), until the server ends the stream,
  // `on_line` returns false, `stop` becomes true, or `timeout` passes. Returns the HTTP status;
  // a status other than 2xx comes back with the body in `error_body` and no line handed on.
  // Errors: kUnavailable when the server cannot be reached or the stream breaks.
  Result<long> stream(const std::string& path,
                      const std::function<bool(std::string_view line)>& on_line,
                      const std::atomic<bool>* stop, Millis timeout,
                      std::string* error_body = nullptr) const;

 private:
  explicit Client(Config config) : config_(std::move(config)) {}
  Result<std::string> bearer() const;

  Config config_;
};

// An answer other than 2xx as an Error for a person: kUnauthenticated (401, naming the user and
// where the configuration came from), kPermissionDenied (403, with the server's words: verb,
// resource, namespace), kNotFound (404: the object, or the API itself when the server does not
// serve it: "Volcano is not installed"), kAlreadyExists (409), kInvalidArgument (400, 422: the
// server's words), kUnavailable (5xx, 429). `what` is the action: "create Volcano Job 'x' in
// namespace 'default'".
Error apiError(const Config& config, const std::string& what, const Response& response);

// A JSON object from text that crossed a trust boundary: bounded nesting, no exceptions.
// Errors: kIo naming `what`.
Result<nlohmann::json> parseObject(std::string_view text, const std::string& what);

}  // namespace cohort::backends::kube
