// Http: the server's HTTP/1.1 layer. One loop thread (epoll) accepts connections, reads and
// parses requests (request line, headers, Content-Length and chunked bodies) within limits, and
// hands each complete request to a fixed pool of worker threads; the answer goes back to the
// loop, which writes it without blocking. Connections stay open (keep-alive) until the client
// closes one or a request was malformed (400, then close).
//
// A handler may answer with a stream instead of a body: the headers leave at once, then chunks
// whenever the StreamSource has more. A waiting stream holds no thread: its source calls
// StreamWaker::wake (from any thread; it writes the loop's eventfd) when it may have more, and
// the loop then asks it again on a worker. The stream ends when the source says so or the client
// hangs up, and its source is then destroyed.
//
// Thread-safety: create/run/stop as documented; handlers and StreamSource::pull run on worker
// threads (never two pulls of one stream at once); the admission check, StreamSource::start and
// the extra watched descriptors' callbacks run on the loop thread and must not block for long.
// Nothing throws across the loop: a handler or a source that throws answers 500 / ends.
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
  std::string body;
  std::vector<std::string> matches;  // set by the router: [0] the path, then the captures

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
  struct Queue;
  StreamWaker() = default;
  StreamWaker(std::shared_ptr<Queue> queue, uint64_t connection)
      : queue_(std::move(queue)), connection_(connection) {}
  void wake() const;

 private:
  std::shared_ptr<Queue> queue_;
  uint64_t connection_ = 0;
};

// The body of a streamed answer.
class StreamSource {
 public:
  enum class State {
    kMore,  // more is ready: ask again (once the client took what was sent)
    kWait,  // nothing now: ask again after a wake()
    kEnd,   // the stream is over
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

  void setContent(std::string content, std::string type) {
    body = std::move(content);
    content_type = std::move(type);
  }
  void setHeader(std::string name, std::string value) {
    headers.emplace_back(std::move(name), std::move(value));
  }
};

struct Limits {
  size_t header_bytes = 64 << 10;  // request line and headers
  size_t header_count = 100;
  // A connection that waits on its client (for a request, the rest of one, or to read the
  // answer) with nothing moving for this long is closed. Not a follower waiting for its job,
  // and not a request a worker is answering.
  Millis idle_timeout{60000};
};

// What the admission check decides once a request's headers are in, before its body is read.
struct Admission {
  std::optional<Response> answer;  // set: answered now; the body is not read, the connection
                                   // closes
  size_t body_limit = 0;           // the most body bytes to read (more: 413)
};

struct Options {
  std::string host = "127.0.0.1";
  int port = 0;  // 0: any free port
  int threads = 8;
  Limits limits;
  std::function<Admission(const Request&)> admit;             // loop thread; may be empty
  std::function<void(Request&, Response&)> handle;            // worker threads
  std::function<Response(int status, std::string message)> error;  // answers the layer makes
  // More descriptors the loop watches for input (not owned), with what to call then.
  std::vector<std::pair<int, std::function<void()>>> watch;
};

class HttpServer {
 public:
  // Binds and listens (SO_REUSEADDR, never SO_REUSEPORT) and starts the worker threads.
  // Errors: kIo naming the address when it cannot listen.
  static Result<std::unique_ptr<HttpServer>> create(Options options);
  ~HttpServer();  // stops, closes every connection, joins the workers
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const;
  // Open connections (any thread; for metrics).
  size_t connections() const;
  // Runs the loop on the calling thread until stop(). Errors: kIo when epoll fails.
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
