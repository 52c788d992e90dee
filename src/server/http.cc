#include "server/http.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>

namespace cohort::server::http {

namespace {

bool equalsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

const char* reason(int status) {
  switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 201: return "Created";
    case 202: return "Accepted";
    case 204: return "No Content";
    case 206: return "Partial Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 409: return "Conflict";
    case 411: return "Length Required";
    case 413: return "Payload Too Large";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    default: return "Status";
  }
}

// Digits only, no sign, no overflow.
std::optional<uint64_t> parseLength(std::string_view text) {
  if (text.empty() || text.size() > 19) return std::nullopt;
  uint64_t n = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    n = n * 10 + static_cast<uint64_t>(c - '0');
  }
  return n;
}

constexpr uint64_t kListenId = 1;
constexpr uint64_t kEventId = 2;
constexpr uint64_t kWatchBase = 16;       // kWatchBase + i: Options::watch[i]
constexpr uint64_t kFirstConnection = 1 << 20;
constexpr size_t kReadChunk = 64 << 10;
constexpr size_t kStreamHighWater = 256 << 10;  // pull no more while this much waits to leave
constexpr size_t kMaxPendingInput = 1 << 20;    // bytes a client may send ahead of its answer

}  // namespace

std::optional<std::string> percentDecode(std::string_view text, bool plus_is_space) {
  std::string out;
  out.reserve(text.size());
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '%') {
      if (i + 2 >= text.size()) return std::nullopt;
      int hi = hex(text[i + 1]), lo = hex(text[i + 2]);
      if (hi < 0 || lo < 0) return std::nullopt;
      out.push_back(static_cast<char>(hi * 16 + lo));
      i += 2;
    } else if (c == '+' && plus_is_space) {
      out.push_back(' ');
    } else {
      out.push_back(c);
    }
  }
  return out;
}

std::string Request::header(std::string_view name) const {
  for (const auto& [k, v] : headers) {
    if (equalsIgnoreCase(k, name)) return v;
  }
  return {};
}

bool Request::hasHeader(std::string_view name) const {
  for (const auto& [k, v] : headers) {
    if (equalsIgnoreCase(k, name)) return true;
  }
  return false;
}

std::string Request::param(std::string_view name, size_t index) const {
  for (const auto& [k, v] : params) {
    if (k == name && index-- == 0) return v;
  }
  return {};
}

bool Request::hasParam(std::string_view name) const { return paramCount(name) > 0; }

size_t Request::paramCount(std::string_view name) const {
  size_t n = 0;
  for (const auto& [k, v] : params) n += k == name;
  return n;
}

// What workers and wakers hand to the loop, behind one mutex and the loop's eventfd.
struct StreamWaker::Queue {
  std::mutex mu;
  int event_fd = -1;  // owned by the server; -1 once it stopped
  struct Done {
    uint64_t connection = 0;
    std::optional<Response> response;  // a handler's answer
    bool pulled = false;               // a stream's pull: `data` and `state`
    std::string data;
    StreamSource::State state = StreamSource::State::kWait;
  };
  std::vector<Done> done;
  std::vector<uint64_t> wakes;

  void signal() {
    if (event_fd < 0) return;
    uint64_t one = 1;
    ssize_t n = ::write(event_fd, &one, sizeof one);
    (void)n;
  }
  void post(Done d) {
    std::lock_guard lock(mu);
    done.push_back(std::move(d));
    signal();
  }
};

void StreamWaker::wake() const {
  if (!queue_) return;
  std::lock_guard lock(queue_->mu);
  queue_->wakes.push_back(connection_);
  queue_->signal();
}

namespace {

// A fixed pool of threads running tasks in order.
class WorkerPool {
 public:
  explicit WorkerPool(int threads) {
    for (int i = 0; i < std::max(1, threads); ++i) threads_.emplace_back([this] { work(); });
  }
  ~WorkerPool() {
    {
      std::lock_guard lock(mu_);
      quit_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }
  void post(std::function<void()> task) {
    {
      std::lock_guard lock(mu_);
      tasks_.push_back(std::move(task));
    }
    cv_.notify_one();
  }

 private:
  void work() {
    for (;;) {
      std::function<void()> task;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [this] { return quit_ || !tasks_.empty(); });
        if (tasks_.empty()) return;
        task = std::move(tasks_.front());
        tasks_.pop_front();
      }
      task();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  bool quit_ = false;
  std::vector<std::thread> threads_;
};

enum class Phase {
  kHeaders,    // reading a request's head
  kBody,       // reading a Content-Length body
  kChunked,    // reading a chunked body
  kHandling,   // a worker has the request
  kWriting,    // the answer is leaving
  kStreaming,  // a streamed answer: headers sent, chunks follow
};

struct Connection {
  uint64_t id = 0;
  UniqueFd fd;
  Phase phase = Phase::kHeaders;
  std::string in;  // received, not yet parsed
  Request request;
  size_t body_limit = 0;
  uint64_t body_left = 0;  // kBody: bytes still to come
  bool keep_alive = true;
  bool head = false;          // a HEAD request: no body in the answer
  bool peer_closed = false;   // the client shut its side
  std::string out;            // to send
  size_t out_pos = 0;
  bool want_write = false;    // EPOLLOUT is on
  std::shared_ptr<UniqueFd> file;
  uint64_t file_offset = 0, file_left = 0;
  std::shared_ptr<StreamSource> stream;
  bool pulling = false;  // a worker is in stream->pull
  bool woken = false;    // a wake came: pull again
  bool more = false;     // the last pull said kMore
  bool stream_ended = false;
  std::chrono::steady_clock::time_point active = std::chrono::steady_clock::now();  // bytes moved

  size_t pending() const { return out.size() - out_pos; }
  // Whether it waits on its client rather than on the server (Limits::idle_timeout).
  bool waitsOnClient() const {
    return phase == Phase::kHeaders || phase == Phase::kBody || phase == Phase::kChunked ||
           (phase == Phase::kWriting && pending() > 0);
  }
};

}  // namespace

struct HttpServer::Impl {
  Options options;
  UniqueFd listener;
  UniqueFd epoll;
  UniqueFd event;  // eventfd: completions, wake-ups, stop
  int port = 0;
  std::atomic<bool> stopping{false};
  std::shared_ptr<StreamWaker::Queue> queue = std::make_shared<StreamWaker::Queue>();
  std::unique_ptr<WorkerPool> workers;
  std::unordered_map<uint64_t, std::unique_ptr<Connection>> connections;
  uint64_t next_id = kFirstConnection;
  std::atomic<size_t> open_connections{0};

  void accept();
  void readable(Connection& c);
  void close(uint64_t id);
  // Parses what `c.in` holds and moves the connection on; false when it was closed.
  bool advance(Connection& c);
  void fail(Connection& c, int status, const std::string& message);
  void dispatch(Connection& c);
  void answer(Connection& c, Response response);
  void pull(Connection& c);
  // Writes what it can; false when the connection was closed.
  bool flush(Connection& c);
  void setWrite(Connection& c, bool on);
  void drain();
  // Closes the connections that waited on their clients for longer than the idle timeout.
  void closeIdle();
  std::chrono::steady_clock::time_point next_idle_check = std::chrono::steady_clock::now();
};

void HttpServer::Impl::closeIdle() {
  const auto now = std::chrono::steady_clock::now();
  if (now < next_idle_check) return;
  next_idle_check = now + std::min(Millis(1000), options.limits.idle_timeout);
  std::vector<uint64_t> idle;
  for (const auto& [id, c] : connections) {
    if (c->waitsOnClient() && now - c->active > options.limits.idle_timeout) idle.push_back(id);
  }
  for (uint64_t id : idle) close(id);
}

void HttpServer::Impl::setWrite(Connection& c, bool on) {
  if (c.want_write == on) return;
  c.want_write = on;
  epoll_event ev{};
  ev.events = (c.peer_closed ? 0u : EPOLLIN | EPOLLRDHUP) | (on ? EPOLLOUT : 0u);
  ev.data.u64 = c.id;
  ::epoll_ctl(epoll.get(), EPOLL_CTL_MOD, c.fd.get(), &ev);
}

void HttpServer::Impl::accept() {
  for (;;) {
    int fd = ::accept4(listener.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR) continue;
      if (errno == EMFILE || errno == ENFILE) {
        std::fprintf(stderr, "cohort server: cannot accept a connection: %s\n",
                     std::strerror(errno));
      }
      return;
    }
    int yes = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof yes);
    auto c = std::make_unique<Connection>();
    c->id = next_id++;
    c->fd.reset(fd);
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.u64 = c->id;
    if (::epoll_ctl(epoll.get(), EPOLL_CTL_ADD, fd, &ev) != 0) continue;  // c closes fd
    connections.emplace(c->id, std::move(c));
    open_connections = connections.size();
  }
}

void HttpServer::Impl::close(uint64_t id) {
  auto it = connections.find(id);
  if (it == connections.end()) return;
  ::epoll_ctl(epoll.get(), EPOLL_CTL_DEL, it->second->fd.get(), nullptr);
  // A pull in flight keeps the source alive until it returns; its answer is then dropped.
  connections.erase(it);
  open_connections = connections.size();
}

void HttpServer::Impl::readable(Connection& c) {
  char buf[kReadChunk];
  for (;;) {
    ssize_t n = ::recv(c.fd.get(), buf, sizeof buf, 0);
    if (n > 0) {
      c.active = std::chrono::steady_clock::now();
      c.in.append(buf, static_cast<size_t>(n));
      bool reading = c.phase == Phase::kHeaders || c.phase == Phase::kBody ||
                     c.phase == Phase::kChunked;
      if (!reading && c.in.size() > kMaxPendingInput) {
        close(c.id);
        return;
      }
      if (static_cast<size_t>(n) < sizeof buf) break;
      continue;
    }
    if (n == 0) {
      c.peer_closed = true;
      break;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) break;
    close(c.id);
    return;
  }
  if (c.peer_closed) {
    // A follower that hung up ends its stream; an answer being made or sent still leaves (the
    // client may have shut only its sending side).
    if (c.phase == Phase::kStreaming || c.phase == Phase::kHeaders || c.phase == Phase::kBody ||
        c.phase == Phase::kChunked) {
      if (c.phase == Phase::kHeaders && !c.in.empty()) {
        // A whole request may have come with the hang-up: answer it, then close.
        c.keep_alive = false;
      } else {
        close(c.id);
        return;
      }
    }
    // No more input events: stop watching for them (level-triggered EOF would spin).
    epoll_event ev{};
    ev.events = c.want_write ? EPOLLOUT : 0u;
    ev.data.u64 = c.id;
    ::epoll_ctl(epoll.get(), EPOLL_CTL_MOD, c.fd.get(), &ev);
  }
  advance(c);
}

void HttpServer::Impl::fail(Connection& c, int status, const std::string& message) {
  Response r = options.error ? options.error(status, message) : Response{};
  r.status = status;
  if (r.content_type.empty()) r.setContent(message + "\n", "text/plain");
  r.close = true;
  c.phase = Phase::kHandling;
  c.head = false;
  answer(c, std::move(r));
}

bool HttpServer::Impl::advance(Connection& c) {
  const uint64_t id = c.id;
  if (c.phase == Phase::kHeaders) {
    size_t end = c.in.find("\r\n\r\n");
    if (end == std::string::npos) {
      if (c.in.size() > options.limits.header_bytes) {
        fail(c, 431, "the request's headers are over " +
                         std::to_string(options.limits.header_bytes / 1024) + " KiB");
      } else if (c.peer_closed) {
        close(id);
        return false;
      }
      return connections.count(id) > 0;
    }
    if (end > options.limits.header_bytes) {
      fail(c, 431, "the request's headers are over " +
                       std::to_string(options.limits.header_bytes / 1024) + " KiB");
      return connections.count(id) > 0;
    }
    std::string_view head(c.in.data(), end);
    Request req;
    size_t line_end = head.find("\r\n");
    std::string_view line = head.substr(0, line_end);
    size_t sp1 = line.find(' ');
    size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
    if (sp1 == std::string_view::npos || sp2 == std::string_view::npos || sp1 == 0 ||
        line.find(' ', sp2 + 1) != std::string_view::npos) {
      fail(c, 400, "the request line is malformed");
      return connections.count(id) > 0;
    }
    req.method = std::string(line.substr(0, sp1));
    req.target = std::string(line.substr(sp1 + 1, sp2 - sp1 - 1));
    req.version = std::string(line.substr(sp2 + 1));
    if ((req.version != "HTTP/1.1" && req.version != "HTTP/1.0") || req.target.empty() ||
        req.target[0] != '/') {
      fail(c, 400, "the request line is malformed (expected 'METHOD /path HTTP/1.1')");
      return connections.count(id) > 0;
    }
    for (char ch : req.method) {
      if (ch < 'A' || ch > 'Z') {
        fail(c, 400, "the request method is malformed");
        return connections.count(id) > 0;
      }
    }
    size_t pos = line_end == std::string_view::npos ? head.size() : line_end + 2;
    while (pos < head.size()) {
      size_t eol = head.find("\r\n", pos);
      if (eol == std::string_view::npos) eol = head.size();
      std::string_view h = head.substr(pos, eol - pos);
      pos = eol + 2;
      size_t colon = h.find(':');
      if (colon == std::string_view::npos || colon == 0 || h[0] == ' ' || h[0] == '\t' ||
          h.substr(0, colon).find_first_of(" \t") != std::string_view::npos) {
        fail(c, 400, "a request header is malformed");
        return connections.count(id) > 0;
      }
      if (req.headers.size() >= options.limits.header_count) {
        fail(c, 431, "the request has over " + std::to_string(options.limits.header_count) +
                         " headers");
        return connections.count(id) > 0;
      }
      req.headers.emplace_back(lower(h.substr(0, colon)), std::string(trim(h.substr(colon + 1))));
    }
    c.in.erase(0, end + 4);
    // The target: the path percent-decoded, the query as parameters.
    size_t q = req.target.find('?');
    auto path = percentDecode(std::string_view(req.target).substr(0, q), false);
    if (!path) {
      fail(c, 400, "the request path is not valid percent-encoding");
      return connections.count(id) > 0;
    }
    req.path = std::move(*path);
    if (q != std::string::npos) {
      for (std::string_view rest = std::string_view(req.target).substr(q + 1); !rest.empty();) {
        size_t amp = rest.find('&');
        std::string_view pair = rest.substr(0, amp);
        rest = amp == std::string_view::npos ? std::string_view() : rest.substr(amp + 1);
        if (pair.empty()) continue;
        size_t eq = pair.find('=');
        auto key = percentDecode(pair.substr(0, eq), true);
        auto value = percentDecode(
            eq == std::string_view::npos ? std::string_view() : pair.substr(eq + 1), true);
        if (!key || !value) {
          fail(c, 400, "the request's query is not valid percent-encoding");
          return connections.count(id) > 0;
        }
        req.params.emplace_back(std::move(*key), std::move(*value));
      }
    }
    const std::string connection = lower(req.header("connection"));
    c.keep_alive = !c.peer_closed && (req.version == "HTTP/1.1"
                                          ? connection.find("close") == std::string::npos
                                          : connection.find("keep-alive") != std::string::npos);
    c.head = req.method == "HEAD";
    const std::string te = lower(req.header("transfer-encoding"));
    const bool has_length = req.hasHeader("content-length");
    std::optional<uint64_t> length = has_length ? parseLength(req.header("content-length"))
                                                : std::optional<uint64_t>(0);
    if (!te.empty() && te != "chunked") {
      fail(c, 501, "Transfer-Encoding '" + te + "' is not supported (send chunked or a length)");
      return connections.count(id) > 0;
    }
    if (!length || (!te.empty() && has_length)) {
      fail(c, 400, "the request's Content-Length is malformed");
      return connections.count(id) > 0;
    }
    c.request = std::move(req);
    Admission admission;
    admission.body_limit = 0;
    if (options.admit) {
      try {
        admission = options.admit(c.request);
      } catch (const std::exception& e) {
        fail(c, 500, std::string("internal error: ") + e.what());
        return connections.count(id) > 0;
      }
    }
    if (admission.answer) {
      Response r = std::move(*admission.answer);
      r.close = true;
      c.phase = Phase::kHandling;
      answer(c, std::move(r));
      return connections.count(id) > 0;
    }
    c.body_limit = admission.body_limit;
    const bool chunked = !te.empty();
    if (!chunked && *length > c.body_limit) {
      fail(c, 413, "the request body is too large");
      return connections.count(id) > 0;
    }
    if ((chunked || *length > 0) &&
        equalsIgnoreCase(c.request.header("expect"), "100-continue")) {
      c.out += "HTTP/1.1 100 Continue\r\n\r\n";
      if (!flush(c)) return false;
    }
    if (chunked) {
      c.phase = Phase::kChunked;
    } else {
      c.phase = Phase::kBody;
      c.body_left = *length;
    }
  }
  if (c.phase == Phase::kBody) {
    size_t take = static_cast<size_t>(std::min<uint64_t>(c.body_left, c.in.size()));
    if (take == c.in.size() && c.request.body.empty()) {
      c.request.body = std::move(c.in);
      c.in.clear();
    } else {
      c.request.body.append(c.in, 0, take);
      c.in.erase(0, take);
    }
    c.body_left -= take;
    if (c.body_left > 0) {
      if (c.peer_closed) close(id);
      return connections.count(id) > 0;
    }
    dispatch(c);
    return true;
  }
  if (c.phase == Phase::kChunked) {
    size_t pos = 0;
    for (;;) {
      size_t eol = c.in.find("\r\n", pos);
      if (eol == std::string::npos) {
        if (c.in.size() - pos > 4096) {
          fail(c, 400, "a chunk of the request body is malformed");
          return connections.count(id) > 0;
        }
        break;
      }
      std::string_view size_line(c.in.data() + pos, eol - pos);
      size_line = size_line.substr(0, size_line.find(';'));
      size_line = trim(size_line);
      uint64_t size = 0;
      bool ok = !size_line.empty() && size_line.size() <= 15;
      for (char ch : size_line) {
        int v = (ch >= '0' && ch <= '9')   ? ch - '0'
                : (ch >= 'a' && ch <= 'f') ? ch - 'a' + 10
                : (ch >= 'A' && ch <= 'F') ? ch - 'A' + 10
                                           : -1;
        if (v < 0) ok = false;
        size = size * 16 + static_cast<uint64_t>(std::max(v, 0));
      }
      if (!ok) {
        fail(c, 400, "a chunk of the request body is malformed");
        return connections.count(id) > 0;
      }
      if (size == 0) {
        // Trailers, then an empty line.
        size_t end = c.in.find("\r\n\r\n", eol);
        if (c.in.compare(eol, 4, "\r\n\r\n") != 0 && end == std::string::npos) break;
        if (end == std::string::npos) end = eol;
        c.in.erase(0, end + 4);
        dispatch(c);
        return true;
      }
      if (c.request.body.size() + size > c.body_limit) {
        fail(c, 413, "the request body is too large");
        return connections.count(id) > 0;
      }
      if (c.in.size() < eol + 2 + size + 2) break;
      if (c.in.compare(eol + 2 + size, 2, "\r\n") != 0) {
        fail(c, 400, "a chunk of the request body is malformed");
        return connections.count(id) > 0;
      }
      c.request.body.append(c.in, eol + 2, size);
      pos = eol + 2 + size + 2;
    }
    c.in.erase(0, pos);
    if (c.peer_closed) close(id);
    return connections.count(id) > 0;
  }
  return true;
}

void HttpServer::Impl::dispatch(Connection& c) {
  c.phase = Phase::kHandling;
  auto request = std::make_shared<Request>(std::move(c.request));
  c.request = Request();
  workers->post([this, request, id = c.id, q = queue] {
    Response response;
    try {
      options.handle(*request, response);
    } catch (const std::exception& e) {
      response = options.error ? options.error(500, std::string("internal error: ") + e.what())
                               : Response{};
      response.status = 500;
    } catch (...) {
      response = options.error ? options.error(500, "internal error") : Response{};
      response.status = 500;
    }
    StreamWaker::Queue::Done done;
    done.connection = id;
    done.response = std::move(response);
    q->post(std::move(done));
  });
}

void HttpServer::Impl::answer(Connection& c, Response r) {
  if (r.close) c.keep_alive = false;
  std::string& o = c.out;
  o += "HTTP/1.1 " + std::to_string(r.status) + " " + reason(r.status) + "\r\n";
  if (!r.content_type.empty()) o += "Content-Type: " + r.content_type + "\r\n";
  for (const auto& [k, v] : r.headers) o += k + ": " + v + "\r\n";
  const bool no_body = r.status == 204 || r.status == 304 || r.status < 200;
  if (r.stream) {
    o += "Transfer-Encoding: chunked\r\n";
  } else if (!no_body) {
    o += "Content-Length: " + std::to_string(r.file ? r.file_size : r.body.size()) + "\r\n";
  }
  o += c.keep_alive ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
  if (!c.head && !no_body) {
    if (r.file) {
      c.file = std::move(r.file);
      c.file_offset = 0;
      c.file_left = r.file_size;
    } else if (!r.stream) {
      o += r.body;
    }
  }
  if (r.stream && !c.head) {
    c.phase = Phase::kStreaming;
    c.stream = std::move(r.stream);
    c.stream_ended = false;
    c.pulling = false;
    c.more = false;
    c.woken = true;  // the first pull
    try {
      c.stream->start(StreamWaker(queue, c.id));
    } catch (const std::exception&) {
      c.stream_ended = true;
    }
  } else {
    c.phase = Phase::kWriting;
  }
  flush(c);
}

void HttpServer::Impl::pull(Connection& c) {
  if (c.pulling || c.stream_ended || !c.stream || c.pending() >= kStreamHighWater) return;
  if (!c.woken && !c.more) return;
  c.woken = false;
  c.more = false;
  c.pulling = true;
  workers->post([source = c.stream, id = c.id, q = queue] {
    StreamWaker::Queue::Done done;
    done.connection = id;
    done.pulled = true;
    try {
      done.state = source->pull(done.data);
    } catch (...) {
      done.state = StreamSource::State::kEnd;
    }
    q->post(std::move(done));
  });
}

bool HttpServer::Impl::flush(Connection& c) {
  const uint64_t id = c.id;
  for (;;) {
    while (c.pending() > 0) {
      ssize_t n = ::send(c.fd.get(), c.out.data() + c.out_pos, c.pending(),
                         MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        c.out_pos += static_cast<size_t>(n);
        c.active = std::chrono::steady_clock::now();
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        setWrite(c, true);
        if (c.phase == Phase::kStreaming) pull(c);
        return true;
      }
      close(id);
      return false;
    }
    c.out.clear();
    c.out_pos = 0;
    if (c.file && c.file_left > 0) {
      size_t want = static_cast<size_t>(std::min<uint64_t>(c.file_left, 256 << 10));
      c.out.resize(want);
      ssize_t n = ::pread(c.file->get(), c.out.data(), want, static_cast<off_t>(c.file_offset));
      if (n <= 0) {  // the file shrank: the answer cannot be completed
        close(id);
        return false;
      }
      c.out.resize(static_cast<size_t>(n));
      c.file_offset += static_cast<uint64_t>(n);
      c.file_left -= static_cast<uint64_t>(n);
      continue;
    }
    break;
  }
  setWrite(c, false);
  if (c.phase == Phase::kStreaming) {
    if (!c.stream_ended) {
      pull(c);
      return true;
    }
    c.stream.reset();
  }
  if (c.phase == Phase::kWriting || c.phase == Phase::kStreaming) {
    c.file.reset();
    if (!c.keep_alive) {
      close(id);
      return false;
    }
    c.phase = Phase::kHeaders;
    if (!c.in.empty() || c.peer_closed) return advance(c);
  }
  return true;
}


void HttpServer::Impl::drain() {
  uint64_t count;
  ssize_t r = ::read(event.get(), &count, sizeof count);
  (void)r;
  std::vector<StreamWaker::Queue::Done> done;
  std::vector<uint64_t> wakes;
  {
    std::lock_guard lock(queue->mu);
    done.swap(queue->done);
    wakes.swap(queue->wakes);
  }
  for (auto& d : done) {
    auto it = connections.find(d.connection);
    if (it == connections.end()) continue;
    Connection& c = *it->second;
    if (d.response) {
      if (c.phase != Phase::kHandling) continue;
      answer(c, std::move(*d.response));
      continue;
    }
    if (!d.pulled || c.phase != Phase::kStreaming) continue;
    c.pulling = false;
    if (!d.data.empty() && !c.stream_ended) {
      char size[32];
      std::snprintf(size, sizeof size, "%zx\r\n", d.data.size());
      c.out += size;
      c.out += d.data;
      c.out += "\r\n";
    }
    if (d.state == StreamSource::State::kEnd && !c.stream_ended) {
      c.stream_ended = true;
      c.out += "0\r\n\r\n";
    }
    c.more = d.state == StreamSource::State::kMore;
    flush(c);
  }
  for (uint64_t id : wakes) {
    auto it = connections.find(id);
    if (it == connections.end() || it->second->phase != Phase::kStreaming) continue;
    it->second->woken = true;
    pull(*it->second);
  }
}

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpServer::~HttpServer() {
  stop();
  {
    std::lock_guard lock(impl_->queue->mu);
    impl_->queue->event_fd = -1;  // wakers outliving the server write nowhere
  }
  impl_->connections.clear();
  impl_->workers.reset();  // joins: tasks in flight finish, their answers are dropped
  std::vector<StreamWaker::Queue::Done> left;
  {
    std::lock_guard lock(impl_->queue->mu);
    left.swap(impl_->queue->done);
  }
}

Result<std::unique_ptr<HttpServer>> HttpServer::create(Options options) {
  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  const Options& o = impl->options;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string where = o.host + ":" + std::to_string(o.port);
  if (::getaddrinfo(o.host.c_str(), std::to_string(o.port).c_str(), &hints, &found) != 0) {
    return cohort::fail(Code::kIo, "cannot listen on " + where + ": unknown address");
  }
  int err = 0;
  for (addrinfo* a = found; a && !impl->listener.valid(); a = a->ai_next) {
    UniqueFd fd(::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                         a->ai_protocol));
    if (!fd.valid()) {
      err = errno;
      continue;
    }
    int yes = 1;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    if (::bind(fd.get(), a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd.get(), 4096) != 0) {
      err = errno;
      continue;
    }
    impl->listener = std::move(fd);
  }
  ::freeaddrinfo(found);
  if (!impl->listener.valid()) {
    return cohort::fail(Code::kIo, "cannot listen on " + where + ": " + std::strerror(err));
  }
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  ::getsockname(impl->listener.get(), reinterpret_cast<sockaddr*>(&addr), &len);
  impl->port = ntohs(addr.ss_family == AF_INET6
                         ? reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port
                         : reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  impl->epoll.reset(::epoll_create1(EPOLL_CLOEXEC));
  impl->event.reset(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!impl->epoll.valid() || !impl->event.valid()) return failErrno("epoll/eventfd");
  impl->queue->event_fd = impl->event.get();
  auto add = [&](int fd, uint64_t id) -> Result<void> {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = id;
    if (::epoll_ctl(impl->epoll.get(), EPOLL_CTL_ADD, fd, &ev) != 0) return failErrno("epoll_ctl");
    return {};
  };
  COHORT_TRY(add(impl->listener.get(), kListenId));
  COHORT_TRY(add(impl->event.get(), kEventId));
  for (size_t i = 0; i < o.watch.size(); ++i) COHORT_TRY(add(o.watch[i].first, kWatchBase + i));
  impl->workers = std::make_unique<WorkerPool>(o.threads);
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

int HttpServer::port() const { return impl_->port; }
size_t HttpServer::connections() const { return impl_->open_connections.load(); }

void HttpServer::stop() {
  impl_->stopping = true;
  uint64_t one = 1;
  ssize_t n = ::write(impl_->event.get(), &one, sizeof one);
  (void)n;
}

Result<void> HttpServer::run() {
  Impl& s = *impl_;
  epoll_event events[256];
  while (!s.stopping) {
    int n = ::epoll_wait(s.epoll.get(), events, 256, 1000);  // at least a look a second for idlers
    if (n < 0) {
      if (errno == EINTR) continue;
      return failErrno("epoll_wait");
    }
    s.closeIdle();
    for (int i = 0; i < n && !s.stopping; ++i) {
      const uint64_t id = events[i].data.u64;
      if (id == kListenId) {
        s.accept();
      } else if (id == kEventId) {
        s.drain();
      } else if (id < kFirstConnection) {
        size_t w = static_cast<size_t>(id - kWatchBase);
        if (w < s.options.watch.size()) s.options.watch[w].second();
      } else {
        auto it = s.connections.find(id);
        if (it == s.connections.end()) continue;
        Connection& c = *it->second;
        const uint32_t ev = events[i].events;
        if (ev & (EPOLLERR | EPOLLHUP)) {
          s.close(id);
          continue;
        }
        if (ev & EPOLLOUT) {
          if (!s.flush(c)) continue;
        }
        if (ev & (EPOLLIN | EPOLLRDHUP)) s.readable(c);
      }
    }
  }
  s.connections.clear();
  return {};
}

}  // namespace cohort::server::http
