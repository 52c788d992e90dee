// Http: the server's HTTP/1.1 layer, over libmicrohttpd (server/mhd_lib.h; why that library:
// docs/architecture.md, "The server's edge"). libmicrohttpd owns the sockets: it accepts
// (within a global and a per-address cap), speaks TLS when given a certificate, reads a
// request's header block within a bounded buffer, and writes answers, on two polling threads.
// This layer adds what the service needs around it:
//
// - Nothing but the headers before the caller is known. Once a request's header block is in,
//   the connection is suspended and `admit` runs on a worker thread: it authenticates and says
//   how much body to accept, and where to put it (memory, or a file for an upload). Only then
//   is any body byte read. A request with no body is admitted and handled in the same step.
// - A deadline for the header block (Limits::header_timeout, from the connection's start or its
//   previous answer), which each byte does not reset, so a client that sends a byte a second
//   (slowloris) is closed like a silent one; an idle timeout for everything else a client keeps
//   waiting (half a body, an answer it does not read).
// - Handlers on a fixed pool of worker threads; the polling thread never waits for one.
// - Streams: a handler may answer with a StreamSource instead of a body. Its headers leave at
//   once, then chunks whenever the source has more. A stream waiting for its source is a
//   suspended connection, not a thread: the source calls StreamWaker::wake (any thread) when it
//   may have more, and a worker then asks it. A client that hangs up while its stream waits
//   ends the stream at once (the layer watches such connections for the hang-up).
// - Tunnels: a handler may answer with a connected socket (Response::tunnel) instead of a body.
//   The answer is then 101 Switching Protocols, and the layer relays bytes both ways between
//   the client's connection (after TLS, when the server speaks it) and that socket until both
//   sides have closed theirs (a half-close is passed on), on a thread of the tunnel's own, so
//   that a tunnel holds no worker; the server's stop ends every tunnel.
// - Conflicting framing refused before anything else: two Content-Length headers, a
//   Content-Length beside Transfer-Encoding, a transfer coding other than chunked.
//
// Thread-safety: create/run/stop as documented; `admit`, `handle` and StreamSource::pull run on
// worker threads (never two pulls of one stream at once); StreamSource::start runs on the
// polling thread and must not block. Nothing throws across the layer: a handler or a source
// that throws answers 500 / ends its stream.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "util/fd.h"
#include "util/result.h"
#include "util/text.h"

namespace cohort::server::http {

struct Request {
  std::string method;
  std::string target;  // as sent: path and query
  std::string path;    // percent-decoded
  std::string version;  // "HTTP/1.1"
  std::vector<std::pair<std::string, std::string>> headers;  // names in lower case
  std::vector<std::pair<std::string, std::string>> params;   // the query, decoded
  std::string body;  // the body, unless admission sent it to `body_file`
  std::shared_ptr<UniqueFd> body_file;  // set by admission: the body was written here
  uint64_t body_size = 0;               // bytes of the body read (into `body` or the file)
  std::vector<std::string> matches;     // set by the router: the path's captures
  std::shared_ptr<void> context;        // what admission decided, for the handler

  // The first header or parameter of that name ("" when none); names of headers ignore case.
  std::string header(std::string_view name) const;
  bool hasHeader(std::string_view name) const;
  std::string param(std::string_view name, size_t index = 0) const;
  bool hasParam(std::string_view name) const;
  size_t paramCount(std::string_view name) const;
};

// Wakes a stream that waits for its source. Copyable; any thread; a waker of a stream that
// has ended (or of a stopped server) does nothing.
class StreamWaker {
 public:
  struct Target {
    virtual ~Target() = default;
    virtual void wake() = 0;
  };
  StreamWaker() = default;
  explicit StreamWaker(std::weak_ptr<Target> target) : target_(std::move(target)) {}
  void wake() const {
    if (auto t = target_.lock()) t->wake();
  }

 private:
  std::weak_ptr<Target> target_;
};

// The body of a streamed answer.
class StreamSource {
 public:
  enum class State {
    kMore,  // more is ready: ask again (once the client took what was sent)
    kWait,  // nothing now: ask again after a wake()
    kEnd,   // the stream is over
    kAbort,  // the stream is cut off: the connection closes without the stream's end
  };
  virtual ~StreamSource() = default;
  // On the loop thread, once, before the first pull: where to send wake-ups.
  virtual void start(StreamWaker waker) = 0;
  // On a worker thread: appends what is ready to `out` and says what comes next.
  virtual State pull(std::string& out) = 0;
};

struct Response {
  int status = 200;
  std::string content_type;
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
  std::shared_ptr<StreamSource> stream;  // set: the body is streamed (chunked) from it
  std::shared_ptr<UniqueFd> file;        // set: the body is `file_size` bytes of this file
  uint64_t file_size = 0;
  bool close = false;  // close the connection after this answer
  // Set: the answer is 101 with these headers, and the connection then carries bytes to and
  // from this socket (see the top of this file); `tunnel_ended` is called once it is over (on
  // the tunnel's thread), or when the 101 could not be sent. `tunnel_early`: bytes the socket
  // already sent (read with its own answer's head), which reach the client first.
  std::shared_ptr<UniqueFd> tunnel;
  std::function<void()> tunnel_ended;
  std::string tunnel_early;

  void setContent(std::string content, std::string type) {
    body = std::move(content);
    content_type = std::move(type);
  }
  void setHeader(std::string name, std::string value) {
    headers.emplace_back(std::move(name), std::move(value));
  }
};

struct Limits {
  size_t header_bytes = 64 << 10;  // request line and headers (more: 431)
  size_t header_count = 100;
  // A request's header block must be complete this long after the connection opened or its
  // previous answer left, however slowly its bytes come; else the connection is closed.
  Millis header_timeout{10000};
  // A connection that waits on its client (the rest of a body, or to read the answer) with
  // nothing moving for this long is closed. Not a follower waiting for its job, and not a
  // request a worker is answering. Whole seconds.
  Millis idle_timeout{60000};
  size_t max_connections = 16384;   // open at once, in all
  size_t max_per_address = 1024;    // open at once from one client address
};

// TLS: a certificate chain and its private key, PEM. Empty: plain HTTP.
struct Tls {
  std::string cert_pem;
  std::string key_pem;
};

// What the admission check decides once a request's headers are in, before its body is read.
struct Admission {
  std::optional<Response> answer;  // set: answered now; the body is not read (the connection
                                   // closes when one was coming)
  size_t body_limit = 0;           // the most body bytes to read (more: 413)
  std::shared_ptr<UniqueFd> body_file;  // set: the body is written to this file, not kept
};

struct Options {
  std::string host = "127.0.0.1";
  int port = 0;  // 0: any free port
  int threads = 8;          // workers: admission, handlers, streams' pulls
  int polling_threads = 2;  // libmicrohttpd's: sockets, parsing, TLS, sending
  Limits limits;
  Tls tls;
  // Worker threads. `admit` sees the request's headers (no body yet); empty: no body is
  // accepted. `handle` sees the whole request.
  std::function<Admission(Request&)> admit;
  std::function<void(Request&, Response&)> handle;
  std::function<Response(int status, std::string message)> error;  // answers the layer makes
  // More descriptors run() watches for input (not owned), with what to call then.
  std::vector<std::pair<int, std::function<void()>>> watch;
};

class HttpServer {
 public:
  // Loads libmicrohttpd, binds and listens (SO_REUSEADDR, never SO_REUSEPORT), and starts
  // the polling and worker threads. Errors: kIo naming the address when it cannot listen;
  // kFailedPrecondition when libmicrohttpd cannot be loaded or refuses the TLS key pair.
  static Result<std::unique_ptr<HttpServer>> create(Options options);
  ~HttpServer();  // stops, closes every connection, joins the workers
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const;
  // Open connections (any thread; for metrics).
  size_t connections() const;
  // Runs the layer's watch loop on the calling thread until stop(): header deadlines,
  // hang-ups of waiting streams, Options::watch. Errors: kIo when epoll fails.
  Result<void> run();
  // Any thread, async-signal-safe.
  void stop();

  struct Impl;

 private:
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// "%41b+c" -> "Ab c" when `plus_is_space`; nullopt when a '%' is not followed by two hex digits.
std::optional<std::string> percentDecode(std::string_view text, bool plus_is_space);

}  // namespace cohort::server::http
