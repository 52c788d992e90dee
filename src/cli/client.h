// The client side of `cohort server`'s HTTP API (docs/server-api.md): where the server is and
// which token to send (flags, else COHORT_SERVER/COHORT_TOKEN, else the config file that
// `cohort login` writes), and ApiClient, a small blocking HTTP/JSON client (http/client.h;
// https:// is verified against the system's certificate authorities, or the `--ca` file,
// COHORT_CA or the one `cohort login` saved). Every failure is an Error, never an exception: a server that cannot be
// reached is kUnavailable, an HTTP error answer carries the server's message with a code chosen
// from the HTTP status (see ApiClient). An ApiClient opens a connection per request and holds no
// state between calls; use it from one thread at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cli/args.h"
#include "util/result.h"

namespace cohort::cli {

// What `cohort login` saves: {"server": URL, "token": T, "ca": FILE}.
struct ClientConfig {
  std::string server;
  std::string token;
  std::string ca;  // certificates (PEM) to trust for the server's https://; "": the system's
};

// $XDG_CONFIG_HOME/cohort/config.json, or ~/.config/cohort/config.json.
std::string clientConfigPath();

// Reads the config file at `path`; a missing file is an empty config. Errors: kInvalidArgument
// naming the file when it is not a JSON object with string fields; kIo when it cannot be read.
Result<ClientConfig> readClientConfig(const std::string& path);

// Writes the config file (mode 0600, its directory 0700 when created) through a temporary file
// and rename. Errors: kIo naming the path.
Result<void> writeClientConfig(const std::string& path, const ClientConfig& config);

// "host:8600", "http://host:8600/" -> "http://host:8600" (https:// kept). Errors:
// kInvalidArgument for another scheme, an empty host or a bad port.
Result<std::string> normalizeServerUrl(const std::string& url);

// The server and token to use: each from the flag, else the environment (COHORT_SERVER,
// COHORT_TOKEN), else the config file. The config file's token is sent only to the config
// file's server, never to one named by a flag or the environment. `source` says where the server
// came from, for messages. Errors: kInvalidArgument "no server: ..." when none is set anywhere,
// and those of readClientConfig and normalizeServerUrl.
// The certificates to trust likewise: `flag_ca`, else COHORT_CA, else the config file's (for its
// own server only).
struct ServerSettings {
  std::string server;  // normalised: "http://host:port" or "https://host:port"
  std::string token;   // "" when none: requests go without Authorization
  std::string ca;      // a PEM file of certificates to trust; "": the system's
};
Result<ServerSettings> resolveServerSettings(const std::string& flag_server,
                                             const std::string& flag_token,
                                             const std::string& flag_ca = "");

// The flags of every command that may speak to a server, one list: --server, --token and --ca;
// `specs` with them added; and the settings their values in `args` give (as above).
const std::vector<FlagSpec>& serverFlags();
std::vector<FlagSpec> withServerFlags(std::vector<FlagSpec> specs);
Result<ServerSettings> resolveServerSettings(const Args& args);

// Where the job a command names is (cohort stacks, cohort debug): its directory under
// `data_root` (<data_root>/jobs/<id>) when this machine has it, else the server this machine
// is logged in to (flags, environment, config file, as above). Errors: kInvalidArgument for an
// id that is not one, and "no job 'x' in DIR, and no server to ask (why)" when neither has it.
struct JobLocation {
  std::string dir;          // the job's directory here; "" for a job of the server
  ServerSettings settings;  // when dir is ""
};
Result<JobLocation> locateJob(const std::string& id, const std::string& data_root,
                              const Args& server_flags);

// The pid of the coordinator running the job whose directory is `job_dir` on this machine
// (`cohort run`): the pid in its coordinator.pid while that is still this cohort binary, not a
// process that took the number later. Nothing when the job has not started or has ended.
std::optional<int> runningCoordinator(const std::string& job_dir);

// The ids of the jobs under `data_root` that a coordinator of this machine runs now, oldest
// first.
std::vector<std::string> runningJobs(const std::string& data_root);

using QueryParams = std::vector<std::pair<std::string, std::string>>;

// Whether the (normalised) server URL names this machine by a loopback address (localhost,
// 127.x.x.x, [::1]): such a server shares this machine's disk.
bool isLocalServer(const std::string& server);

// Blocking requests to one server. Requests connect within 5 s; an answer that stalls for 60 s
// fails (kUnavailable), except streams opened with `no_read_timeout`.
//
// Errors of every request: kUnavailable "cannot reach the server at URL: <reason> (is cohort
// server running?)" when no connection could be made, or "...: the answer was cut off" when it
// broke; for an HTTP error answer, the server's message ({"error": {"code", "message"}}, else the
// body's first line) with a code from the status: 400 and 413 kInvalidArgument, 401
// kInvalidArgument (with a hint to log in), 403 kFailedPrecondition, 404 kNotFound, 409
// kAlreadyExists or kFailedPrecondition (from the server's code), 502-504 kUnavailable, any other
// kInternal. An answer that should be JSON and is not: kInternal.
class ApiClient {
 public:
  explicit ApiClient(ServerSettings settings) : settings_(std::move(settings)) {}

  const std::string& server() const { return settings_.server; }

  // Sends `method` ("GET", "POST", "PUT", "DELETE") to `path` (already encoded, e.g.
  // "/v1/jobs/x/stop"), with `body` as JSON when it is not null. Returns the decoded JSON answer
  // (null for an empty one, such as 204).
  Result<nlohmann::json> call(const std::string& method, const std::string& path,
                              const nlohmann::json& body = nullptr, const QueryParams& query = {});

  // Sends (`method` "POST" or "PUT") `size` bytes of the file `fd` (from its start) to `path`
  // as `content_type`, without holding them in memory; `progress(sent)` is called as they
  // leave. Returns the decoded JSON answer. A connection the server closed before the body was
  // sent (an upload over its limit is refused unread) is kUnavailable saying so.
  Result<nlohmann::json> sendFile(const std::string& method, const std::string& path, int fd,
                                  uint64_t size, const std::string& content_type,
                                  const std::function<void(uint64_t sent)>& progress);

  // GETs `path` and hands the body of a successful answer to `sink` as it arrives (a chunked,
  // endless answer included); `sink` returns false to stop reading, which is not an error.
  // Returns the status of the answer.
  Result<int> stream(const std::string& path, const QueryParams& query,
                     const std::function<bool(const char* data, size_t size)>& sink,
                     bool no_read_timeout);

 private:
  ServerSettings settings_;
};

}  // namespace cohort::cli
