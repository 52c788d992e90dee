// What the server's handlers share (src/server/api_*.cc, one file per resource): limits,
// JSON answers and errors in the API's shape, parameters, and the reading of a job's files
// without following links. Internal to src/server; thread-safe (no state).
#pragma once

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
#include <set>
#include <thread>
#include <type_traits>
#include <unordered_map>

#include "env/environments.h"
#include "job/debug.h"
#include "job/jsonl.h"
#include "job/layout.h"
#include "server/access.h"
#include "server/account_limits.h"
#include "server/console.h"
#include "server/environments.h"
#include "server/event_hub.h"
#include "server/http.h"
#include "server/jobs.h"
#include "server/metrics.h"
#include "server/routes.h"
#include "server/tls.h"
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

inline constexpr size_t kMaxJsonBody = 4 << 20;
inline constexpr size_t kMaxUpload = size_t{1} << 30;
// A JSON body up to this size is read (once its caller is known) and then refused (413) by its
// handler: clients that send their whole body before reading the answer (cpp-httplib's,
// Python's) only see an answer when the body was read. Bigger ones are refused unread, and such
// clients see the connection close.
inline constexpr size_t kMaxJsonRead = 8 << 20;
inline constexpr size_t kMaxTokenLabel = 256;
inline constexpr size_t kMaxLabBody = 32 << 20;  // a request to a session's lab (lab_proxy.h)
inline constexpr size_t kMaxStoreName = 255;   // bytes of one name in a store:// path
inline constexpr size_t kMaxStorePath = 1024;  // bytes of a whole store:// path
inline constexpr auto kMaxWait = std::chrono::minutes(5);
inline constexpr auto kSseKeepAlive = std::chrono::seconds(15);
inline constexpr auto kFinalGrace = std::chrono::seconds(2);

int httpStatus(Code code);

// JSON text; a string that is not valid UTF-8 (a path sent so) has its bad bytes replaced.
std::string dumpJson(const Json& body);

void writeError(Response& res, const Error& e);

Response errorResponse(const Error& e);

void writeJson(Response& res, int status, const Json& body);

// `text` for a message: bytes that are not printable ASCII as \xNN.
std::string printable(std::string_view text);

bool validUtf8(std::string_view s);

// A store:// path the server can hold: valid UTF-8, names of at most 255 bytes.
Result<void> checkStorePath(const std::string& bucket, const std::string& key);

Json isoOrNull(int64_t nanos);

// The first `max` bytes of the regular file at `path`, never through a link (a job's files are
// written by code the server does not trust), with its modification time in unix nanoseconds
// in `mtime`; nothing when it is not there or not a regular file.
std::optional<std::string> readJobFile(const std::string& path, size_t max,
                                       int64_t* mtime = nullptr);

// A log's query (a job's, a build's): `offset`, the bytes to skip (0 when absent), and
// `follow`, whether to stream what is appended.
Result<int64_t> offsetParameter(const Request& req);

bool followParameter(const Request& req);

// The request's JSON object body, refusing fields not in `known`.
Result<Json> jsonBody(const Request& req, const std::set<std::string>& known);

Result<int64_t> idParam(const std::string& text, const std::string& what);

// A relative path inside a directory: no "..", no absolute path, no empty parts.
Result<std::string> containedPath(const std::string& path);

// Files under `dir`, recursively, relative to it; symbolic links are not followed.
Json listFiles(const std::string& dir);

// Serves a regular file under `root`. The job's ranks own what is below `root` and may swap a
// directory for a link while this runs, so the kernel resolves the path (openat2 with
// RESOLVE_BENEATH): no link, `..` or race leads out of `root`.
Result<void> sendFile(Response& res, const std::string& root, const std::string& relative,
                      const std::string& what);

Json accountJson(const store::Account& a);

Json shareJson(const store::Share& s);

Json tokenJson(const store::Token& t);

using storage::validAccountName;

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

}  // namespace cohort::server
