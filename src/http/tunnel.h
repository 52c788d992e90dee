// The client's end of a tunnel through `cohort server` (server/tunnels.h): an HTTP/1.1 request
// with "Connection: Upgrade", whose 101 answer turns the connection into a byte stream to a port
// inside a job's network. libcurl makes the connection (TLS verified as perform() verifies it:
// client.h) and carries the bytes (curl_easy_send/recv); this file writes the request and reads
// the answer's head, which libcurl's CONNECT_ONLY mode leaves to its caller. A Tunnel belongs to
// one thread.
#pragma once

#include <memory>
#include <string>

#include "http/client.h"
#include "util/result.h"

namespace cohort::http {

class Tunnel {
 public:
  // Connects to `request.url` (GET, with `request.headers`, the token among them) and asks to
  // switch to `protocol`. A 101 gives `tunnel`; any other answer leaves it null and gives the
  // answer's status and body (its first 64 KiB) in `refusal`. Errors: kUnavailable when no
  // connection could be made or no answer came (within 30 s); kFailedPrecondition when
  // libcurl cannot be loaded.
  struct Opened {
    std::unique_ptr<Tunnel> tunnel;
    Response refusal;
  };
  static Result<Opened> open(const Request& request, const std::string& protocol);
  ~Tunnel();
  Tunnel(const Tunnel&) = delete;
  Tunnel& operator=(const Tunnel&) = delete;

  // Carries bytes between the tunnel and `in` (read) / `out` (written; the same descriptor for
  // a socket) until `in` ends and all of it was sent, or the tunnel ends and all of it was
  // written. Errors: kIo naming the side that failed.
  Result<void> relay(int in, int out);

 private:
  Tunnel() = default;
  void* handle_ = nullptr;  // CURL*
  int socket_ = -1;         // libcurl's
  std::string early_;       // bytes after the 101's head, read with it
};

}  // namespace cohort::http
