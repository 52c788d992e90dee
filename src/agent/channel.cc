#include "agent/channel.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "util/json_limits.h"
#include "util/sha256.h"

namespace cohort::agent {

Result<void> Channel::send(const Message& message) {
  // Strings from ranks (their last lines) may be any bytes: invalid UTF-8 is sent as U+FFFD
  // rather than thrown out of dump().
  std::string line = message.dump(-1, ' ', false, Message::error_handler_t::replace);
  line += '\n';
  return queue(line);
}

Result<void> Channel::sendEncoded(std::string line) {
  line += '\n';
  return queue(line);
}

Result<void> Channel::sendLog(size_t index, std::string_view bytes) {
  if (bytes.size() > kMaxLogFrame) {
    COHORT_TRY(sendLog(index, bytes.substr(0, kMaxLogFrame)));
    return sendLog(index, bytes.substr(kMaxLogFrame));
  }
  std::string frame = "=" + std::to_string(index) + " " + std::to_string(bytes.size()) + "\n";
  frame.append(bytes);
  return queue(frame);
}

Result<void> Channel::queue(std::string_view data) {
  if (gone_) return fail(Code::kUnavailable, "control channel: the peer has gone");
  const bool waiting = pendingBytes() > 0;
  out_.append(data);
  if (!waiting) return flush();  // else it follows what waits, when the socket takes it
  return {};
}

Result<void> Channel::flush() {
  Result<void> result;
  while (out_start_ < out_.size()) {
    const ssize_t n = ::send(fd_.get(), out_.data() + out_start_, out_.size() - out_start_,
                             MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) break;
      result = failErrno("control channel send");
      gone_ = true;
      out_.clear();
      out_start_ = 0;
      break;
    }
    out_start_ += static_cast<size_t>(n);
  }
  const bool pending = pendingBytes() > 0;
  if (!pending) {
    out_.clear();
    out_start_ = 0;
  } else if (out_start_ > (1u << 20) && out_start_ > out_.size() / 2) {
    out_.erase(0, out_start_);  // what was written goes, now and then, not at every write
    out_start_ = 0;
  }
  if (pending != watched_) {
    watched_ = pending;
    if (on_pending_) on_pending_(pending);
  }
  return result;
}

Result<void> Channel::drain(Millis timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (pendingBytes() > 0) {
    COHORT_TRY(flush());
    if (pendingBytes() == 0) break;
    const auto left = std::chrono::duration_cast<Millis>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      return fail(Code::kDeadlineExceeded,
                  "control channel: " + std::to_string(pendingBytes()) + " byte(s) not taken in " +
                      formatDuration(timeout));
    }
    pollfd p{fd_.get(), POLLOUT, 0};
    (void)::poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
  }
  return {};
}

Result<std::vector<Message>> Channel::receive() {
  std::vector<Message> out;
  char buf[65536];
  // A peer that writes as fast as it is read would keep the loop here: what is left is read the
  // next time (the owner's loop is level-triggered).
  constexpr size_t kReadBatch = 4u << 20;
  while (buffer_.size() < kReadBatch) {
    ssize_t n = ::recv(fd_.get(), buf, sizeof buf, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) break;
      closed_ = true;
      break;
    }
    if (n == 0) {
      closed_ = true;
      break;
    }
    buffer_.append(buf, static_cast<size_t>(n));
    bytes_received_ += static_cast<uint64_t>(n);
    if (buffer_.size() > max_bytes_) return fail(Code::kInvalidArgument, "message too large");
  }
  size_t start = 0;
  while (start < buffer_.size()) {
    const size_t nl = buffer_.find('\n', start);
    if (buffer_[start] == '=') {
      // A log frame: "=<index> <length>\n", then the bytes.
      if (nl == std::string::npos) {
        if (buffer_.size() - start > 64) {
          return fail(Code::kInvalidArgument, "control channel: a bad log frame");
        }
        break;
      }
      std::string_view header(buffer_.data() + start + 1, nl - start - 1);
      const size_t space = header.find(' ');
      auto index = parseInt64(header.substr(0, space));
      auto length = space == std::string_view::npos ? Result<int64_t>(-1)
                                                    : parseInt64(header.substr(space + 1));
      if (!index || !length || *index < 0 || *length < 0 ||
          static_cast<size_t>(*length) > kMaxLogFrame) {
        return fail(Code::kInvalidArgument, "control channel: a bad log frame");
      }
      const size_t end = nl + 1 + static_cast<size_t>(*length);
      if (end > buffer_.size()) break;  // the rest of the bytes is still on its way
      const char* data = buffer_.data() + nl + 1;
      if (log_sink_) {
        log_sink_(static_cast<size_t>(*index), std::string_view(data, static_cast<size_t>(*length)));
      } else {
        const auto* bytes = reinterpret_cast<const uint8_t*>(data);
        out.push_back({{"type", "log"},
                       {"index", *index},
                       {"data", Message::binary_t(std::vector<uint8_t>(bytes, bytes + *length))}});
      }
      start = end;
      continue;
    }
    if (nl == std::string::npos) break;
    std::string_view line(buffer_.data() + start, nl - start);
    // The parse recurses once per level: refuse deep nesting unparsed (a plan nests 5 levels).
    if (!checkJsonDepth(line, 16)) {
      return fail(Code::kInvalidArgument, "control channel: a message is nested too deep");
    }
    auto message = Message::parse(line.begin(), line.end(), nullptr, false);
    if (message.is_discarded() || !message.is_object()) {
      return fail(Code::kInvalidArgument, "control channel: a message is not a JSON object");
    }
    out.push_back(std::move(message));
    start = nl + 1;
  }
  buffer_.erase(0, start);
  return out;
}

Result<std::pair<UniqueFd, int>> listenTcp(const std::string& addr, int port) {
  UniqueFd sock(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!sock.valid()) return failErrno("socket");
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  if (port != 0) {
    int one = 1;  // a coordinator started again in the same pod finds its port in TIME_WAIT
    ::setsockopt(sock.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  }
  if (::inet_pton(AF_INET, addr.c_str(), &sa.sin_addr) != 1) {
    return fail(Code::kInvalidArgument, "'" + addr + "' is not an IPv4 address");
  }
  if (::bind(sock.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) < 0) {
    return failErrno("bind control channel on " + addr + (port ? ":" + std::to_string(port) : ""));
  }
  if (::listen(sock.get(), 1024) < 0) return failErrno("listen");
  socklen_t len = sizeof sa;
  ::getsockname(sock.get(), reinterpret_cast<sockaddr*>(&sa), &len);
  return std::make_pair(std::move(sock), static_cast<int>(ntohs(sa.sin_port)));
}

Result<UniqueFd> connectTcp(const std::string& addr, int port, Millis timeout) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  if (::inet_pton(AF_INET, addr.c_str(), &sa.sin_addr) != 1) {
    return fail(Code::kInvalidArgument, "'" + addr + "' is not an IPv4 address");
  }
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (int delay_ms = 5;; delay_ms = std::min(delay_ms * 2, 500)) {
    UniqueFd sock(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!sock.valid()) return failErrno("socket");
    if (::connect(sock.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0) {
      int one = 1;
      ::setsockopt(sock.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      // Ranks' output streams through here: fewer, larger writes.
      int buffer = 4 << 20;
      ::setsockopt(sock.get(), SOL_SOCKET, SO_SNDBUF, &buffer, sizeof buffer);
      COHORT_TRY(setNonBlocking(sock.get()));
      return sock;
    }
    int err = errno;
    if (std::chrono::steady_clock::now() >= deadline) {
      return failErrno("connect to the coordinator at " + addr + ":" + std::to_string(port), err);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
  }
}

Result<std::pair<UniqueFd, UniqueFd>> socketPair() {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, fds) < 0) {
    return failErrno("socketpair");
  }
  std::pair<UniqueFd, UniqueFd> ends{UniqueFd(fds[0]), UniqueFd(fds[1])};
  // As for TCP: ranks' output streams through here.
  int buffer = 4 << 20;
  ::setsockopt(fds[1], SOL_SOCKET, SO_SNDBUF, &buffer, sizeof buffer);
  return ends;
}

Result<std::string> makeSecret() { return randomHex(16); }

std::string handshakeProof(const std::string& secret, const char* side, const std::string& nonce,
                           int node) {
  const std::string data = std::string(side) + ":" + nonce + ":" + std::to_string(node);
  const Sha256Digest mac = hmacSha256(secret, data);
  return hexEncode(mac.data(), mac.size());
}

bool secretsEqual(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace cohort::agent
