#include "http/tunnel.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "http/curl_lib.h"
#include "util/text.h"

namespace cohort::http {

namespace {

constexpr size_t kMaxHead = 64 << 10;
constexpr int kAnswerTimeoutMs = 30000;

bool waitFor(int fd, short events, int timeout_ms) {
  pollfd p{fd, events, 0};
  int r;
  do {
    r = ::poll(&p, 1, timeout_ms);
  } while (r < 0 && errno == EINTR);
  return r == 1;
}

// Everything of `data` through libcurl (TLS or not). False when the connection failed.
bool sendAll(const CurlLib& curl, CURL* h, int sock, const char* data, size_t size) {
  while (size > 0) {
    size_t sent = 0;
    const CURLcode code = curl.easy_send(h, data, size, &sent);
    if (code == CURLE_AGAIN) {
      if (!waitFor(sock, POLLOUT, kAnswerTimeoutMs)) return false;
      continue;
    }
    if (code != CURLE_OK) return false;
    data += sent;
    size -= sent;
  }
  return true;
}

}  // namespace

Result<Tunnel::Opened> Tunnel::open(const Request& request, const std::string& protocol) {
  COHORT_ASSIGN(const CurlLib* curl, curlLib());
  const size_t scheme = request.url.find("://");
  const size_t path_at = scheme == std::string::npos ? std::string::npos
                                                     : request.url.find('/', scheme + 3);
  if (path_at == std::string::npos) {
    return fail(Code::kInvalidArgument, "not a URL with a path: '" + request.url + "'");
  }
  const std::string host = request.url.substr(scheme + 3, path_at - scheme - 3);
  const std::string target = request.url.substr(path_at);
  std::unique_ptr<Tunnel> t(new Tunnel());
  CURL* h = curl->easy_init();
  if (!h) return fail(Code::kFailedPrecondition, "libcurl, which could not make a handle");
  t->handle_ = h;
  char error[CURL_ERROR_SIZE] = {0};
  setConnection(h, request, error);
  curl->easy_setopt(h, CURLOPT_CONNECT_ONLY, 1L);  // the connection (and TLS); our request
  const CURLcode connected = curl->easy_perform(h);
  curl->easy_setopt(h, CURLOPT_ERRORBUFFER, nullptr);  // `error` is this call's
  if (connected != CURLE_OK) {
    return fail(Code::kUnavailable, std::string(error[0] ? error : curl->easy_strerror(connected)));
  }
  curl_socket_t sock = CURL_SOCKET_BAD;
  curl->easy_getinfo(h, CURLINFO_ACTIVESOCKET, &sock);
  if (sock == CURL_SOCKET_BAD) return fail(Code::kUnavailable, "no connection");
  t->socket_ = sock;

  std::string head = "GET " + target + " HTTP/1.1\r\nHost: " + host + "\r\n";
  for (const std::string& header : request.headers) head += header + "\r\n";
  head += "Connection: Upgrade\r\nUpgrade: " + protocol + "\r\n\r\n";
  if (!sendAll(*curl, h, sock, head.data(), head.size())) {
    return fail(Code::kUnavailable, "the connection closed while the request was sent");
  }
  // The answer's head, and what came after it.
  std::string in;
  size_t end = std::string::npos;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kAnswerTimeoutMs);
  char buf[16 << 10];
  while ((end = in.find("\r\n\r\n")) == std::string::npos) {
    if (in.size() > kMaxHead) return fail(Code::kUnavailable, "an answer's head over 64 KiB");
    size_t got = 0;
    const CURLcode code = curl->easy_recv(h, buf, sizeof buf, &got);
    if (code == CURLE_AGAIN) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0 || !waitFor(sock, POLLIN, static_cast<int>(left.count()))) {
        return fail(Code::kUnavailable, "no answer within 30s");
      }
      continue;
    }
    if (code != CURLE_OK || got == 0) {
      return fail(Code::kUnavailable, "the connection closed before an answer came");
    }
    in.append(buf, got);
  }
  Opened opened;
  // "HTTP/1.1 101 Switching Protocols"
  const size_t space = in.find(' ');
  auto status = space == std::string::npos ? Result<int>(0) : parseInt(in.substr(space + 1, 3));
  opened.refusal.status = status ? *status : 0;
  opened.refusal.connected = true;
  if (opened.refusal.status == 101) {
    t->early_ = in.substr(end + 4);
    opened.tunnel = std::move(t);
    return opened;
  }
  // A refusal: its body, as far as its Content-Length (or the connection) goes.
  std::string lowered = in.substr(0, end);
  for (char& c : lowered) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  size_t length = kMaxHead;
  if (size_t at = lowered.find("\r\ncontent-length:"); at != std::string::npos) {
    auto n = parseInt64(trim(lowered.substr(at + 17, lowered.find("\r\n", at + 2) - at - 17)));
    if (n && *n >= 0) length = std::min<size_t>(static_cast<size_t>(*n), kMaxHead);
  }
  std::string body = in.substr(end + 4);
  while (body.size() < length) {
    size_t got = 0;
    const CURLcode code = curl->easy_recv(h, buf, sizeof buf, &got);
    if (code == CURLE_AGAIN && waitFor(sock, POLLIN, 5000)) continue;
    if (code != CURLE_OK || got == 0) break;
    body.append(buf, got);
  }
  opened.refusal.body = body.substr(0, length);
  return opened;
}

Tunnel::~Tunnel() {
  if (!handle_) return;
  if (auto curl = curlLib()) (*curl)->easy_cleanup(static_cast<CURL*>(handle_));
}

Result<void> Tunnel::relay(int in, int out) {
  COHORT_ASSIGN(const CurlLib* curl, curlLib());
  CURL* h = static_cast<CURL*>(handle_);
  std::string to_tunnel, to_out = std::move(early_);
  size_t to_tunnel_at = 0, to_out_at = 0;
  bool in_ended = false, tunnel_ended = false;
  char buf[64 << 10];
  for (;;) {
    if (in_ended && to_tunnel_at == to_tunnel.size()) return {};
    if (tunnel_ended && to_out_at == to_out.size()) return {};
    pollfd p[3] = {{in, 0, 0}, {socket_, 0, 0}, {out, 0, 0}};
    if (!in_ended && to_tunnel_at == to_tunnel.size()) p[0].events = POLLIN;
    if (!tunnel_ended && to_out_at == to_out.size()) p[1].events |= POLLIN;
    if (to_tunnel_at < to_tunnel.size()) p[1].events |= POLLOUT;
    if (to_out_at < to_out.size()) p[2].events = POLLOUT;
    // `in` and `out` may be one descriptor: poll it once for both.
    nfds_t n = 3;
    if (in == out) {
      p[0].events |= p[2].events;
      n = 2;
    }
    if (::poll(p, n, -1) < 0) {
      if (errno == EINTR) continue;
      return failErrno("poll");
    }
    if (p[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      if (!in_ended && to_tunnel_at == to_tunnel.size()) {
        const ssize_t got = ::read(in, buf, sizeof buf);
        if (got > 0) {
          to_tunnel.assign(buf, static_cast<size_t>(got));
          to_tunnel_at = 0;
        } else if (got == 0 || (errno != EAGAIN && errno != EINTR)) {
          in_ended = true;
        }
      }
    }
    if (to_tunnel_at < to_tunnel.size()) {
      size_t sent = 0;
      const CURLcode code = curl->easy_send(h, to_tunnel.data() + to_tunnel_at,
                                            to_tunnel.size() - to_tunnel_at, &sent);
      if (code == CURLE_OK) {
        to_tunnel_at += sent;
      } else if (code != CURLE_AGAIN) {
        return fail(Code::kIo, "the tunnel: " + std::string(curl->easy_strerror(code)));
      }
    }
    if (!tunnel_ended && to_out_at == to_out.size()) {
      // Until libcurl has nothing more: TLS may hold what the socket no longer shows.
      to_out.clear();
      to_out_at = 0;
      for (;;) {
        size_t got = 0;
        const CURLcode code = curl->easy_recv(h, buf, sizeof buf, &got);
        if (code == CURLE_AGAIN) break;
        if (code != CURLE_OK || got == 0) {
          tunnel_ended = true;
          break;
        }
        to_out.append(buf, got);
        if (to_out.size() >= sizeof buf * 4) break;
      }
    }
    while (to_out_at < to_out.size()) {
      const ssize_t wrote = ::write(out, to_out.data() + to_out_at, to_out.size() - to_out_at);
      if (wrote > 0) {
        to_out_at += static_cast<size_t>(wrote);
        continue;
      }
      if (wrote < 0 && (errno == EAGAIN || errno == EINTR)) break;
      return failErrno("write to the debugger's connection");
    }
  }
}

}  // namespace cohort::http
