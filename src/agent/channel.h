// Channel: the control channel between a job's coordinator and its node agents. Messages are
// JSON objects, one per line, over TCP. A connection starts with a handshake in which each side
// proves it knows the per-job secret without sending it (handshakeProof); the coordinator drops
// connections that fail it, and an agent leaves a coordinator that does. A rank's output travels as
// it is, in log frames: a line "=<index> <length>" and then that many raw bytes (JSON would have
// to escape or encode them, at a fraction of the speed). Neither reads nor writes ever wait for
// the peer: reads are fed by the owner's event loop, and what the socket does not take at once
// waits in the channel, whole messages in order, until the owner's loop finds the socket
// writable (flush()). A peer that is slow, or stopped (SIGSTOP), therefore never stalls its
// side's loop, and a message is never cut short; the owner bounds what waits (pendingBytes()).
// Not thread-safe: one owner, the loop thread.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "util/fd.h"
#include "util/result.h"
#include "util/text.h"

namespace cohort::agent {

using Message = nlohmann::json;

// A field of a message, or `fallback` when it is missing or of another type. Messages come over
// the network (the first one before its sender is known): a loop thread must never see the
// exception nlohmann's value() throws for a field of the wrong type.
template <class T>
T field(const Message& m, const char* key, T fallback) {
  auto it = m.find(key);
  if (it == m.end()) return fallback;
  try {
    return it->template get<T>();
  } catch (const nlohmann::json::exception&) {
    return fallback;
  }
}

class Channel {
 public:
  // `max_bytes` bounds what is buffered without a complete message (small for a peer that has not
  // said who it is yet).
  explicit Channel(UniqueFd fd, size_t max_bytes = kMaxMessageBytes)
      : fd_(std::move(fd)), max_bytes_(max_bytes) {}
  static constexpr size_t kMaxMessageBytes = 64u << 20;

  int fd() const { return fd_.get(); }

  // Sends one message (invalid UTF-8 in its strings goes as U+FFFD): writes what the socket
  // takes now and keeps the rest for flush(). Errors: kUnavailable when the peer has gone.
  Result<void> send(const Message& message);
  // Sends one message already encoded as a line of JSON, without its newline (for a large one
  // that is put together from JSON text).
  Result<void> sendEncoded(std::string line);
  // Sends `bytes` of the output of the node's rank number `index`, in frames of at most
  // kMaxLogFrame. The peer's log sink gets them; without one it receives {"type": "log",
  // "index": index, "data": <the bytes, as JSON binary>} for each.
  Result<void> sendLog(size_t index, std::string_view bytes);
  static constexpr size_t kMaxLogFrame = 1u << 20;

  // Writes what waits, as far as the socket takes it now. The owner calls it when the socket is
  // writable; `onPending` (below) says when to watch for that. Errors: kUnavailable when the
  // peer has gone.
  Result<void> flush();
  // Bytes sent but not yet taken by the socket.
  size_t pendingBytes() const { return out_.size() - out_start_; }
  // Called with true when bytes start to wait and false once none do: the owner watches the
  // socket for EPOLLOUT in between and calls flush() then.
  void setOnPending(std::function<void(bool)> on_pending) { on_pending_ = std::move(on_pending); }
  // Waits until everything sent was taken by the socket, or `timeout` passes (an owner about to
  // end, whose last words must not be lost). Errors: kUnavailable, kDeadlineExceeded.
  Result<void> drain(Millis timeout);

  // Where received log frames go, as they are read (before the messages read with them are
  // returned), without a copy.
  using LogSink = std::function<void(size_t index, std::string_view bytes)>;
  void setLogSink(LogSink sink) { log_sink_ = std::move(sink); }

  // Reads what is available and returns the complete messages. An empty optional-like result
  // with `closed()` true means the peer closed the connection. Errors: kInvalidArgument for a
  // line that is not JSON or a log frame's header that is not one, kUnavailable for a read
  // error.
  Result<std::vector<Message>> receive();
  bool closed() const { return closed_; }
  // Bytes read from the peer so far: whether it said anything since the last look.
  uint64_t bytesReceived() const { return bytes_received_; }

 private:
  Result<void> queue(std::string_view data);

  UniqueFd fd_;
  std::string out_;  // sent, not yet written: from out_start_
  size_t out_start_ = 0;
  bool gone_ = false;  // a write found the peer gone
  bool watched_ = false;  // on_pending_ was last told true
  std::function<void(bool)> on_pending_;
  std::string buffer_;
  size_t max_bytes_;
  bool closed_ = false;
  uint64_t bytes_received_ = 0;
  LogSink log_sink_;
};

// Listens on `addr`, `port` (0: one the kernel picks). Returns the socket and the port.
Result<std::pair<UniqueFd, int>> listenTcp(const std::string& addr, int port = 0);

// Connects to `addr:port`, retrying until `timeout` passes (the coordinator may still be
// starting). Errors: kUnavailable.
Result<UniqueFd> connectTcp(const std::string& addr, int port, Millis timeout);

// A connected pair of local sockets, for a channel to a copy of this process (forkCall): no
// listener and no TCP between them. Both ends are non-blocking and close on exec.
Result<std::pair<UniqueFd, UniqueFd>> socketPair();

// A random 32-character hex secret (or nonce) from the kernel's generator.
Result<std::string> makeSecret();

// The handshake: the agent says hello with a fresh nonce A; the coordinator answers with its own
// nonce C and handshakeProof(secret, "coordinator", A, node); the agent checks it and answers
// handshakeProof(secret, "agent", C, node), which the coordinator checks. The secret never
// travels, a proof is good for one connection only, and neither side's proof can stand for the
// other's. HMAC-SHA256 in hex. (The channel is authenticated, not encrypted.)
std::string handshakeProof(const std::string& secret, const char* side, const std::string& nonce,
                           int node);

// Compares without leaking, through timing, how much of the secret matched.
bool secretsEqual(const std::string& a, const std::string& b);

}  // namespace cohort::agent
