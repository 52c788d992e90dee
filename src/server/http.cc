#include "server/http.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <set>
#include <unordered_map>

#include "server/mhd_lib.h"
#include "server/request_head.h"

namespace cohort::server::http {

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

constexpr uint64_t kStopId = 1;
constexpr uint64_t kWatchBase = 16;          // kWatchBase + i: Options::watch[i]
constexpr uint64_t kFirstStream = 1 << 20;   // a stream's hang-up watch
constexpr size_t kStreamHighWater = 256 << 10;  // pull no more while this much waits to leave
constexpr size_t kStreamBlock = 32 << 10;       // what libmicrohttpd asks a stream for at once
constexpr auto kDeadlineCheck = std::chrono::milliseconds(50);
constexpr size_t kLateHeadersPerCheck = 128;  // ~2,500 a second

}  // namespace


// The types below are outside the anonymous namespace: HttpServer::Impl, a class the header
// names, holds them.

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


// A connection, from libmicrohttpd's accept to its close: its descriptor and, while it owes
// the server a header block, when that must be complete.
struct ConnectionState {
  int fd = -1;
  bool upgraded = false;  // a tunnel: no header block is owed any more
  std::optional<std::chrono::steady_clock::time_point> header_deadline;
};

struct Exchange;
class StreamDriver;

struct HttpServer::Impl {
  const MhdLib* mhd = nullptr;
  Options options;
  UniqueFd listener;
  int port = 0;
  MHD_Daemon* daemon = nullptr;
  UniqueFd epoll;  // run()'s: the stop eventfd, Options::watch, hang-ups of waiting streams
  UniqueFd event;
  std::atomic<bool> stopping{false};
  std::unique_ptr<WorkerPool> workers;

  std::mutex mu;  // guards what follows
  std::unordered_map<MHD_Connection*, ConnectionState*> connections;
  std::unordered_map<uint64_t, std::weak_ptr<StreamDriver>> streams;  // by watch id
  uint64_t next_stream = kFirstStream;
  std::atomic<size_t> open_connections{0};
  std::atomic<int> suspended{0};  // connections this layer holds suspended
  std::mutex tunnels_mu;
  std::condition_variable tunnels_cv;
  int tunnels = 0;  // relays running; each ends once `event` (the stop) is readable

  // libmicrohttpd's callbacks (its polling thread).
  static MHD_Result onRequest(void* cls, MHD_Connection* c, const char* url, const char* method,
                              const char* version, const char* data, size_t* size, void** ctx);
  static void onCompleted(void* cls, MHD_Connection* c, void** ctx,
                          MHD_RequestTerminationCode why);
  static void onConnection(void* cls, MHD_Connection* c, void** socket_context,
                           MHD_ConnectionNotificationCode code);
  static size_t keepEscapes(void* cls, MHD_Connection* c, char* s);
  static void onUpgraded(void* cls, MHD_Connection* c, void* ctx, const char* extra_in,
                         size_t extra_in_size, MHD_socket sock, MHD_UpgradeResponseHandle* urh);
  static void log(void* cls, const char* format, va_list args);

  MHD_Result begin(MHD_Connection* c, const char* url, const char* method, const char* version,
                   void** ctx);
  MHD_Result queue(Exchange& x);
  Admission admitOnWorker(Exchange& x);
  void handleOnWorker(Exchange& x);
  void suspend(MHD_Connection* c) {
    ++suspended;
    mhd->suspend_connection(c);
  }
  void resume(MHD_Connection* c) {
    --suspended;
    mhd->resume_connection(c);
  }
  void setHeaderDeadline(MHD_Connection* c, bool owed);
  void closeLateHeaders();
  void watchHangUp(const std::shared_ptr<StreamDriver>& driver, int fd);
  void unwatchHangUp(uint64_t id, int fd);
  void endStreams();
};

// One request, from its header block to its answer (libmicrohttpd's per-request context).
// While the connection is suspended a worker owns it; libmicrohttpd again once it is resumed.
struct Exchange {
  enum class Stage { kAdmitting, kBody, kHandling, kAnswer };
  MHD_Connection* connection = nullptr;
  Stage stage = Stage::kAdmitting;
  Request request;
  bool expects_body = false;     // a Content-Length over 0, or chunked
  std::optional<uint64_t> length;  // the Content-Length
  bool resumed_for_body = false;  // the next call is libmicrohttpd's repeat of the first
  bool admit_at_end = false;      // no body: admitted with the whole request
  size_t body_limit = 0;
  Response response;
  // A tunnel's socket from its 101's queueing until the upgrade takes it; `tunnel_ended` is
  // called here when it never does (the client went before the 101 left).
  std::shared_ptr<UniqueFd> tunnel;
  std::function<void()> tunnel_ended;
  std::string tunnel_early;
  ~Exchange() {
    if (tunnel_ended) tunnel_ended();
  }
};

// A streamed answer: what its source produced and what libmicrohttpd has not taken yet, and
// whether the connection waits (suspended) for more. Shared by the answer (libmicrohttpd's
// reader), the pulls in flight and the source's wakers.
class StreamDriver : public StreamWaker::Target,
                     public std::enable_shared_from_this<StreamDriver> {
 public:
  StreamDriver(HttpServer::Impl& server, MHD_Connection* connection,
               std::shared_ptr<StreamSource> source)
      : server_(server), connection_(connection), source_(std::move(source)) {}

  // libmicrohttpd's reader (polling thread): what is ready, the end, or nothing yet (and then
  // the connection is suspended until there is).
  ssize_t read(char* out, size_t max) {
    std::lock_guard lock(mu_);
    if (dead_) return MHD_CONTENT_READER_END_WITH_ERROR;
    const size_t ready = buffer_.size() - offset_;
    if (ready > 0) {
      const size_t n = std::min(ready, max);
      std::memcpy(out, buffer_.data() + offset_, n);
      offset_ += n;
      if (offset_ == buffer_.size()) {
        buffer_.clear();
        offset_ = 0;
      }
      pullLocked();
      return static_cast<ssize_t>(n);
    }
    if (ended_) return MHD_CONTENT_READER_END_OF_STREAM;
    pullLocked();
    suspended_ = true;
    server_.suspend(connection_);
    return 0;
  }

  void wake() override {
    std::lock_guard lock(mu_);
    want_ = true;
    pullLocked();
  }

  // Ends the stream now (the client hung up, the server stops, the caller lost its right).
  void kill() {
    std::lock_guard lock(mu_);
    dead_ = true;
    resumeLocked();
  }

  // libmicrohttpd is done with the answer: the connection may be gone.
  void closed() {
    std::shared_ptr<StreamSource> source;
    {
      std::lock_guard lock(mu_);
      gone_ = true;
      source = std::move(source_);
    }
    // The source (and its subscriptions) goes now, or when a pull in flight returns.
  }

  HttpServer::Impl& server() { return server_; }
  uint64_t watch_id = 0;
  int fd = -1;

 private:
  void pullLocked() {
    if (pulling_ || ended_ || dead_ || gone_ || !want_ || !source_) return;
    if (buffer_.size() - offset_ >= kStreamHighWater) return;
    pulling_ = true;
    want_ = false;
    server_.workers->post([self = shared_from_this(), source = source_] {
      std::string data;
      StreamSource::State state = StreamSource::State::kEnd;
      try {
        state = source->pull(data);
      } catch (...) {
        state = StreamSource::State::kEnd;
      }
      self->pulled(std::move(data), state);
    });
  }

  void pulled(std::string data, StreamSource::State state) {
    std::lock_guard lock(mu_);
    pulling_ = false;
    if (gone_) return;
    buffer_ += data;
    if (state == StreamSource::State::kEnd) ended_ = true;
    if (state == StreamSource::State::kAbort) dead_ = true;
    if (state == StreamSource::State::kMore) want_ = true;
    if (buffer_.size() > offset_ || ended_ || dead_) {
      resumeLocked();
    } else {
      pullLocked();  // asked again at once: more was promised, or a wake came meanwhile
    }
  }

  void resumeLocked() {
    if (!suspended_ || gone_) return;
    suspended_ = false;
    server_.resume(connection_);
  }

  HttpServer::Impl& server_;
  MHD_Connection* const connection_;
  std::shared_ptr<StreamSource> source_;
  std::mutex mu_;
  std::string buffer_;
  size_t offset_ = 0;
  bool pulling_ = false;
  bool want_ = true;  // ask the source (its first pull, a wake, or it said kMore)
  bool ended_ = false;
  bool dead_ = false;
  bool suspended_ = false;
  bool gone_ = false;
};

namespace {

ssize_t readStream(void* cls, uint64_t, char* buf, size_t max) {
  return (*static_cast<std::shared_ptr<StreamDriver>*>(cls))->read(buf, max);
}

// A tunnel's bytes both ways between `a` (the client's side) and `b` (the socket a handler
// connected), `early` (what the client sent before the 101) and `early_b` (what `b` sent
// before) first, until both directions have
// ended (an end of one is passed on as a half-close) or either side fails, or `stop` is
// readable. At most kTunnelBuffer bytes wait in each direction: a side that does not read
// holds up only the other.
constexpr size_t kTunnelBuffer = 256 << 10;
void relayTunnel(int a, int b, std::string early, std::string early_b, int stop) {
  for (int fd : {a, b}) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  struct Way {
    int from, to;
    std::string buf;
    size_t sent = 0;
    bool eof = false;   // `from` said it sends no more
    bool done = false;  // ...and all of it reached `to`, which was told
  };
  Way ways[2] = {{a, b, std::move(early)}, {b, a, std::move(early_b)}};
  char chunk[64 << 10];
  for (;;) {
    pollfd p[3] = {{a, 0, 0}, {b, 0, 0}, {stop, POLLIN, 0}};
    auto slot = [&](int fd) -> pollfd& { return fd == a ? p[0] : p[1]; };
    for (Way& w : ways) {
      if (!w.eof && w.buf.size() - w.sent < kTunnelBuffer) slot(w.from).events |= POLLIN;
      if (w.sent < w.buf.size()) slot(w.to).events |= POLLOUT;
    }
    if (::poll(p, 3, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (p[2].revents) return;
    for (Way& w : ways) {
      const short in = slot(w.from).revents;
      if (!w.eof && (in & (POLLIN | POLLHUP | POLLERR))) {
        const ssize_t n = ::read(w.from, chunk, sizeof chunk);
        if (n > 0) {
          if (w.sent == w.buf.size()) w.buf.clear(), w.sent = 0;
          w.buf.append(chunk, static_cast<size_t>(n));
        } else if (n == 0) {
          w.eof = true;
        } else if (errno != EAGAIN && errno != EINTR) {
          return;
        }
      }
      if (w.sent < w.buf.size()) {
        const ssize_t n = ::send(w.to, w.buf.data() + w.sent, w.buf.size() - w.sent,
                                 MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
          w.sent += static_cast<size_t>(n);
        } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
          return;
        }
      }
      if (w.eof && !w.done && w.sent == w.buf.size()) {
        ::shutdown(w.to, SHUT_WR);
        w.done = true;
      }
    }
    if (ways[0].done && ways[1].done) return;
    // A side that hung up with nothing more to read: what goes to it can go nowhere.
    for (Way& w : ways) {
      if (w.eof && (slot(w.from).revents & (POLLERR | POLLNVAL))) return;
    }
  }
}


}  // namespace

void HttpServer::Impl::setHeaderDeadline(MHD_Connection* c, bool owed) {
  std::lock_guard lock(mu);
  auto it = connections.find(c);
  if (it == connections.end() || it->second->upgraded) return;
  if (owed) {
    it->second->header_deadline = std::chrono::steady_clock::now() + options.limits.header_timeout;
  } else {
    it->second->header_deadline.reset();
  }
}

// A client that has not finished a header block in time: its connection is shut down (not
// closed: libmicrohttpd owns the descriptor, sees the end and closes it; the lock keeps it
// from being closed and reused meanwhile, since libmicrohttpd tells onConnection first).
//
// At most kLateHeadersPerCheck a check: ten thousand connections opened at once by one client
// are cut off over a few seconds rather than in one burst that would stall everyone else's
// requests behind their closing (and their client's connecting again).
void HttpServer::Impl::closeLateHeaders() {
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard lock(mu);
  size_t cut = 0;
  for (auto& [c, state] : connections) {
    if (state->header_deadline && *state->header_deadline <= now) {
      state->header_deadline.reset();
      ::shutdown(state->fd, SHUT_RDWR);
      if (++cut == kLateHeadersPerCheck) break;
    }
  }
}

void HttpServer::Impl::watchHangUp(const std::shared_ptr<StreamDriver>& driver, int fd) {
  std::lock_guard lock(mu);
  driver->watch_id = next_stream++;
  driver->fd = fd;
  streams[driver->watch_id] = driver;
  epoll_event ev{};
  ev.events = EPOLLRDHUP | EPOLLONESHOT;
  ev.data.u64 = driver->watch_id;
  ::epoll_ctl(epoll.get(), EPOLL_CTL_ADD, fd, &ev);
}

void HttpServer::Impl::unwatchHangUp(uint64_t id, int fd) {
  std::lock_guard lock(mu);
  if (streams.erase(id) > 0) ::epoll_ctl(epoll.get(), EPOLL_CTL_DEL, fd, nullptr);
}

void HttpServer::Impl::endStreams() {
  std::vector<std::shared_ptr<StreamDriver>> all;
  {
    std::lock_guard lock(mu);
    for (auto& [id, weak] : streams) {
      if (auto d = weak.lock()) all.push_back(std::move(d));
    }
  }
  for (auto& d : all) d->kill();
}

void HttpServer::Impl::onConnection(void* cls, MHD_Connection* c, void** socket_context,
                                    MHD_ConnectionNotificationCode code) {
  auto* s = static_cast<Impl*>(cls);
  if (code == MHD_CONNECTION_NOTIFY_STARTED) {
    auto* state = new ConnectionState();
    const MHD_ConnectionInfo* info =
        s->mhd->get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    state->fd = info ? info->connect_fd : -1;
    state->header_deadline =
        std::chrono::steady_clock::now() + s->options.limits.header_timeout;
    *socket_context = state;
    std::lock_guard lock(s->mu);
    s->connections[c] = state;
    s->open_connections = s->connections.size();
    return;
  }
  auto* state = static_cast<ConnectionState*>(*socket_context);
  {
    std::lock_guard lock(s->mu);
    s->connections.erase(c);
    s->open_connections = s->connections.size();
  }
  delete state;
  *socket_context = nullptr;
}

void HttpServer::Impl::onCompleted(void* cls, MHD_Connection* c, void** ctx,
                                   MHD_RequestTerminationCode) {
  auto* s = static_cast<Impl*>(cls);
  delete static_cast<Exchange*>(*ctx);
  *ctx = nullptr;
  s->setHeaderDeadline(c, true);  // the next request's header block is owed from now
}

// A 101 has left: the tunnel's relay takes the connection on a thread of its own (this is
// libmicrohttpd's polling thread, which must not wait).
void HttpServer::Impl::onUpgraded(void* cls, MHD_Connection* c, void* ctx, const char* extra_in,
                                  size_t extra_in_size, MHD_socket sock,
                                  MHD_UpgradeResponseHandle* urh) {
  auto* s = static_cast<Impl*>(cls);
  auto* x = static_cast<Exchange*>(ctx);
  {
    std::lock_guard lock(s->mu);
    auto it = s->connections.find(c);
    if (it != s->connections.end()) {
      it->second->upgraded = true;
      it->second->header_deadline.reset();
    }
  }
  std::shared_ptr<UniqueFd> tunnel = x ? std::move(x->tunnel) : nullptr;
  std::function<void()> ended = x ? std::move(x->tunnel_ended) : nullptr;
  std::string early_b = x ? std::move(x->tunnel_early) : std::string();
  if (x) x->tunnel_ended = nullptr;
  std::string early(extra_in ? extra_in : "", extra_in ? extra_in_size : 0);
  {
    std::lock_guard lock(s->tunnels_mu);
    ++s->tunnels;
  }
  std::thread([s, sock, urh, tunnel, ended = std::move(ended), early = std::move(early),
               early_b = std::move(early_b)]() mutable {
    if (tunnel && tunnel->valid()) {
      relayTunnel(sock, tunnel->get(), std::move(early), std::move(early_b), s->event.get());
    }
    s->mhd->upgrade_action(urh, MHD_UPGRADE_ACTION_CLOSE);
    if (tunnel) tunnel->reset();
    if (ended) ended();
    std::lock_guard lock(s->tunnels_mu);
    --s->tunnels;
    s->tunnels_cv.notify_all();
  }).detach();
}

size_t HttpServer::Impl::keepEscapes(void*, MHD_Connection*, char* s) { return std::strlen(s); }

// libmicrohttpd's messages (a client that broke TLS, the connection cap reached), at most a
// few a second: a flood of bad clients must not become a flood of log lines.
void HttpServer::Impl::log(void*, const char* format, va_list args) {
  static std::mutex mu;
  static std::chrono::steady_clock::time_point window;
  static int shown = 0, dropped = 0;
  std::lock_guard lock(mu);
  const auto now = std::chrono::steady_clock::now();
  if (now - window > std::chrono::seconds(10)) {
    if (dropped > 0) std::fprintf(stderr, "cohort server: http: %d more messages not shown\n", dropped);
    window = now;
    shown = dropped = 0;
  }
  if (++shown > 20) {
    ++dropped;
    return;
  }
  char line[512];
  std::vsnprintf(line, sizeof line, format, args);
  std::string text = line;
  while (!text.empty() && (text.back() == '\n' || text.back() == '.')) text.pop_back();
  std::fprintf(stderr, "cohort server: http: %s\n", text.c_str());
}

namespace {

// libmicrohttpd's header and query iterators: every pair as sent (names of headers in lower
// case; the query not decoded yet: keepEscapes leaves it as it came).
MHD_Result collectHeader(void* cls, MHD_ValueKind, const char* key, const char* value) {
  static_cast<std::vector<std::pair<std::string, std::string>>*>(cls)->emplace_back(
      lower(key ? key : ""), value ? value : "");
  return MHD_YES;
}

MHD_Result collectArgument(void* cls, MHD_ValueKind, const char* key, const char* value) {
  static_cast<std::vector<std::pair<std::string, std::string>>*>(cls)->emplace_back(
      key ? key : "", value ? value : "");
  return MHD_YES;
}

}  // namespace

// A request's header block is in: check its framing, then hand it to a worker for admission.
MHD_Result HttpServer::Impl::begin(MHD_Connection* c, const char* url, const char* method,
                                   const char* version, void** ctx) {
  auto* x = new Exchange();
  *ctx = x;
  x->connection = c;
  setHeaderDeadline(c, false);
  Request& req = x->request;
  req.method = method ? method : "";
  req.target = url ? url : "";
  req.version = version ? version : "";
  auto refuse = [&](int status, const std::string& message) {
    x->response = options.error ? options.error(status, message) : Response{};
    x->response.status = status;
    if (x->response.content_type.empty()) x->response.setContent(message + "\n", "text/plain");
    x->response.close = true;
    x->stage = Exchange::Stage::kAnswer;
    return queue(*x);
  };
  if (stopping) return refuse(503, "the server is stopping");
  mhd->get_connection_values(c, MHD_HEADER_KIND, collectHeader, &req.headers);
  std::vector<std::pair<std::string, std::string>> query;
  mhd->get_connection_values(c, MHD_GET_ARGUMENT_KIND, collectArgument, &query);
  auto [framing, refusal] = checkHead(req, query, options.limits.header_count);
  if (refusal) return refuse(refusal->status, refusal->message);
  x->expects_body = framing.expects_body;
  x->length = framing.length;

  if (!x->expects_body) {
    // Admitted and handled at once when libmicrohttpd has the whole request (an answer queued
    // before then would make it close the connection).
    x->admit_at_end = true;
    x->stage = Exchange::Stage::kBody;
    return MHD_YES;
  }
  x->stage = Exchange::Stage::kAdmitting;
  suspend(c);
  workers->post([this, x] {
    Admission admission = admitOnWorker(*x);
    if (admission.answer) {
      x->response = std::move(*admission.answer);
      x->response.close = true;  // its body is not read
      x->stage = Exchange::Stage::kAnswer;
    } else {
      x->body_limit = admission.body_limit;
      x->request.body_file = std::move(admission.body_file);
      x->resumed_for_body = true;
      x->stage = Exchange::Stage::kBody;
    }
    resume(x->connection);
  });
  return MHD_YES;
}

Admission HttpServer::Impl::admitOnWorker(Exchange& x) {
  Admission admission;
  try {
    if (options.admit) admission = options.admit(x.request);
  } catch (const std::exception& e) {
    admission.answer = options.error(500, std::string("internal error: ") + e.what());
    admission.answer->status = 500;
  }
  if (!admission.answer && x.expects_body && x.length && *x.length > admission.body_limit) {
    admission.answer = options.error(413, "the request body is too large");
    admission.answer->status = 413;
  }
  return admission;
}

void HttpServer::Impl::handleOnWorker(Exchange& x) {
  try {
    options.handle(x.request, x.response);
  } catch (const std::exception& e) {
    x.response = options.error(500, std::string("internal error: ") + e.what());
    x.response.status = 500;
  }
  x.request.body_file.reset();
  x.request.body = std::string();
}

MHD_Result HttpServer::Impl::onRequest(void* cls, MHD_Connection* c, const char* url,
                                       const char* method, const char* version,
                                       const char* data, size_t* size, void** ctx) {
  auto* s = static_cast<Impl*>(cls);
  auto* x = static_cast<Exchange*>(*ctx);
  if (!x) return s->begin(c, url, method, version, ctx);
  switch (x->stage) {
    case Exchange::Stage::kAnswer:
      return s->queue(*x);
    case Exchange::Stage::kBody: {
      if (*size > 0) {
        Request& req = x->request;
        if (req.body_size + *size > x->body_limit) return MHD_NO;  // chunked, over: close
        if (req.body_file) {
          if (!writeAll(req.body_file->get(), std::string_view(data, *size))) return MHD_NO;
        } else {
          req.body.append(data, *size);
        }
        req.body_size += *size;
        *size = 0;
        return MHD_YES;
      }
      if (x->resumed_for_body) {  // libmicrohttpd repeats the first call after the resume
        x->resumed_for_body = false;
        return MHD_YES;
      }
      // The whole request is in: the handler's turn (after admission, for one without a body).
      x->stage = Exchange::Stage::kHandling;
      s->suspend(c);
      s->workers->post([s, x] {
        std::optional<Admission> admission;
        if (x->admit_at_end) admission = s->admitOnWorker(*x);
        if (admission && admission->answer) {
          x->response = std::move(*admission->answer);
        } else {
          s->handleOnWorker(*x);
        }
        x->stage = Exchange::Stage::kAnswer;
        s->resume(x->connection);
      });
      return MHD_YES;
    }
    case Exchange::Stage::kAdmitting:
    case Exchange::Stage::kHandling:
      return MHD_YES;  // suspended: not called
  }
  return MHD_NO;
}

// Hands `x`'s answer to libmicrohttpd.
MHD_Result HttpServer::Impl::queue(Exchange& x) {
  Response& r = x.response;
  MHD_Response* answer = nullptr;
  std::shared_ptr<StreamDriver> driver;
  if (r.tunnel) {
    x.tunnel = std::move(r.tunnel);
    x.tunnel_ended = std::move(r.tunnel_ended);
    x.tunnel_early = std::move(r.tunnel_early);
    answer = mhd->create_response_for_upgrade(&Impl::onUpgraded, this);
    r.status = 101;
    r.content_type.clear();
  } else if (r.stream) {
    driver = std::make_shared<StreamDriver>(*this, x.connection, r.stream);
    auto* keep = new std::shared_ptr<StreamDriver>(driver);
    answer = mhd->create_response_from_callback(
        MHD_SIZE_UNKNOWN, kStreamBlock, readStream, keep, [](void* cls) {
          auto* held = static_cast<std::shared_ptr<StreamDriver>*>(cls);
          (*held)->closed();
          (*held)->server().unwatchHangUp((*held)->watch_id, (*held)->fd);
          delete held;
        });
    if (!answer) delete keep;
  } else if (r.file) {
    const int fd = ::fcntl(r.file->get(), F_DUPFD_CLOEXEC, 0);  // libmicrohttpd closes its own
    if (fd >= 0) answer = mhd->create_response_from_fd_at_offset64(r.file_size, fd, 0);
    if (!answer && fd >= 0) ::close(fd);
  } else {
    answer = mhd->create_response_from_buffer(r.body.size(), r.body.data(),
                                              MHD_RESPMEM_MUST_COPY);
  }
  if (!answer) return MHD_NO;
  if (!r.content_type.empty()) mhd->add_response_header(answer, "Content-Type", r.content_type.c_str());
  for (const auto& [k, v] : r.headers) mhd->add_response_header(answer, k.c_str(), v.c_str());
  if (r.close) mhd->add_response_header(answer, "Connection", "close");
  const MHD_Result queued = mhd->queue_response(x.connection, static_cast<unsigned>(r.status), answer);
  mhd->destroy_response(answer);
  if (queued == MHD_YES && driver) {
    const MHD_ConnectionInfo* info =
        mhd->get_connection_info(x.connection, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (info) watchHangUp(driver, info->connect_fd);
    try {
      r.stream->start(StreamWaker(driver));
    } catch (...) {
      driver->kill();
    }
  }
  r = Response();
  return queued;
}

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpServer::~HttpServer() {
  Impl& s = *impl_;
  stop();
  if (s.daemon) {
    // libmicrohttpd may not stop while a connection is suspended: new requests are refused
    // (stopping), streams end, and the handlers in flight finish and resume theirs.
    const MHD_socket listening = s.mhd->quiesce_daemon(s.daemon);  // now ours to close
    if (listening != MHD_INVALID_SOCKET) ::close(listening);
    {
      // Every tunnel's relay sees the stop (`event`) and ends.
      std::unique_lock lock(s.tunnels_mu);
      s.tunnels_cv.wait_for(lock, std::chrono::seconds(5), [&] { return s.tunnels == 0; });
    }
    for (int i = 0; i < 500 && s.suspended > 0; ++i) {
      s.endStreams();
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    s.mhd->stop_daemon(s.daemon);
    s.daemon = nullptr;
  }
  s.workers.reset();  // joins: pulls still in flight find their streams gone
}

Result<std::unique_ptr<HttpServer>> HttpServer::create(Options options) {
  COHORT_ASSIGN(const MhdLib* mhd, mhdLib());
  auto impl = std::make_unique<Impl>();
  impl->mhd = mhd;
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
  bool ipv6 = false;
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
    ipv6 = a->ai_family == AF_INET6;
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
  auto add = [&](int fd, uint64_t id) -> Result<void> {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = id;
    if (::epoll_ctl(impl->epoll.get(), EPOLL_CTL_ADD, fd, &ev) != 0) return failErrno("epoll_ctl");
    return {};
  };
  COHORT_TRY(add(impl->event.get(), kStopId));
  for (size_t i = 0; i < o.watch.size(); ++i) COHORT_TRY(add(o.watch[i].first, kWatchBase + i));
  impl->workers = std::make_unique<WorkerPool>(o.threads);

  const bool tls = !o.tls.cert_pem.empty();
  if (tls && mhd->is_feature_supported(MHD_FEATURE_TLS) != MHD_YES) {
    return cohort::fail(Code::kFailedPrecondition,
                        "the libmicrohttpd found was built without TLS (GnuTLS)");
  }
  unsigned int flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME |
                       MHD_ALLOW_UPGRADE | MHD_USE_ERROR_LOG;
  if (tls) flags |= MHD_USE_TLS;
  if (ipv6) flags |= MHD_USE_IPv6;
  const auto idle_s = static_cast<unsigned int>(
      std::max<int64_t>(1, (o.limits.idle_timeout.count() + 999) / 1000));
  Impl* self = impl.get();
  const MHD_socket listen_fd = impl->listener.get();
  const size_t memory = o.limits.header_bytes + (64 << 10);  // the header block, then answers
  // A function pointer travels in an option's integer.
  auto fn = [](auto f) { return reinterpret_cast<intptr_t>(f); };
  std::vector<MHD_OptionItem> items = {
      {MHD_OPTION_EXTERNAL_LOGGER, fn(&Impl::log), self},  // first, to have every message
      {MHD_OPTION_LISTEN_SOCKET, listen_fd, nullptr},
      {MHD_OPTION_NOTIFY_COMPLETED, fn(&Impl::onCompleted), self},
      {MHD_OPTION_NOTIFY_CONNECTION, fn(&Impl::onConnection), self},
      {MHD_OPTION_UNESCAPE_CALLBACK, fn(&Impl::keepEscapes), self},
      {MHD_OPTION_CONNECTION_TIMEOUT, idle_s, nullptr},
      {MHD_OPTION_CONNECTION_LIMIT, static_cast<intptr_t>(o.limits.max_connections), nullptr},
      {MHD_OPTION_PER_IP_CONNECTION_LIMIT, static_cast<intptr_t>(o.limits.max_per_address),
       nullptr},
      {MHD_OPTION_CONNECTION_MEMORY_LIMIT, static_cast<intptr_t>(memory), nullptr},
      {MHD_OPTION_THREAD_POOL_SIZE, std::max(1, o.polling_threads), nullptr},
  };
  if (tls) {
    items.push_back({MHD_OPTION_HTTPS_MEM_CERT, 0, const_cast<char*>(o.tls.cert_pem.c_str())});
    items.push_back({MHD_OPTION_HTTPS_MEM_KEY, 0, const_cast<char*>(o.tls.key_pem.c_str())});
    items.push_back({MHD_OPTION_HTTPS_PRIORITIES, 0,
                     const_cast<char*>("NORMAL:-VERS-TLS1.0:-VERS-TLS1.1:-VERS-SSL3.0")});
  }
  items.push_back({MHD_OPTION_END, 0, nullptr});
  impl->daemon = mhd->start_daemon(flags, 0, nullptr, nullptr, &Impl::onRequest, self,
                                   MHD_OPTION_ARRAY, items.data(), MHD_OPTION_END);
  if (!impl->daemon) {
    return cohort::fail(Code::kFailedPrecondition,
                        tls ? "libmicrohttpd did not start: is the TLS certificate and key pair "
                              "valid PEM, and the key the certificate's?"
                            : "libmicrohttpd did not start on " + where);
  }
  (void)impl->listener.release();  // libmicrohttpd closes it when it stops
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
  const int tick = static_cast<int>(kDeadlineCheck.count());
  auto next_check = std::chrono::steady_clock::now();
  while (!s.stopping) {
    int n = ::epoll_wait(s.epoll.get(), events, 256, tick);
    if (n < 0) {
      if (errno == EINTR) continue;
      return failErrno("epoll_wait");
    }
    if (std::chrono::steady_clock::now() >= next_check) {
      next_check = std::chrono::steady_clock::now() + kDeadlineCheck;
      s.closeLateHeaders();
    }
    for (int i = 0; i < n && !s.stopping; ++i) {
      const uint64_t id = events[i].data.u64;
      if (id == kStopId) break;
      if (id < kFirstStream) {
        size_t w = static_cast<size_t>(id - kWatchBase);
        if (w < s.options.watch.size()) s.options.watch[w].second();
        continue;
      }
      std::shared_ptr<StreamDriver> driver;
      {
        std::lock_guard lock(s.mu);
        auto it = s.streams.find(id);
        if (it != s.streams.end()) driver = it->second.lock();
      }
      if (driver) driver->kill();  // its client hung up
    }
  }
  return {};
}

}  // namespace cohort::server::http
