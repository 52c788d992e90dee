// One blocking HTTP request through libcurl (curl_lib.h, loaded at the first request): what
// cohort's own clients of `cohort server` send (the CLI's commands, the coordinator's reporter).
// No redirect is followed (a token is never carried elsewhere), no proxy is taken from the
// environment (the server is named directly), every request has a connection of its own.
// https:// is verified: against the system's certificate authorities, or `ca_file`'s, or the
// one public key `pin` names; never sent unverified.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "util/result.h"

namespace cohort::http {

struct Request {
  std::string method = "GET";
  std::string url;                   // "http(s)://host:port/target", the target encoded already
  std::string ca_file;               // https: trust these certificates (PEM) instead of the system's
  // https: trust only the server whose public key this is ("sha256//BASE64"), by any name
  // (a server that names itself by an address its certificate does not list, on loopback).
  std::string pin;
  std::vector<std::string> headers;  // "Name: value"
  std::string body;                  // sent when there is no `upload`
  // A body read piece by piece rather than held: `upload_size` bytes, each piece put by
  // `upload(buf, max)` into `buf`, which returns how many (1..max), or 0 to end the transfer.
  std::function<size_t(char* buf, size_t max)> upload;
  uint64_t upload_size = 0;
  // Where a 2xx answer's body goes as it comes; false ends the transfer (Response::stopped).
  // Null: it is collected in Response::body, up to `max_body` bytes (Response::too_large).
  std::function<bool(const char* data, size_t size)> on_body;
  uint64_t max_body = uint64_t{64} << 20;
  int connect_timeout_s = 5;
  int stall_timeout_s = 60;  // a transfer with no byte either way for this long fails; 0: none
};

struct Response {
  int status = 0;  // the answer's; 0 when none came
  // The answer's body when it is not given to on_body; a non-2xx answer's first 64 KiB when
  // it is.
  std::string body;
  uint64_t sent = 0;      // bytes of the body sent
  bool stopped = false;   // on_body ended the transfer
  bool connected = false;  // a connection was made
  bool too_large = false;  // the answer's body was longer than max_body (`error` says so too)
  // Why the transfer failed, in libcurl's words ("" when an answer came whole, or was stopped):
  // no connection (see `connected`), a timeout, a connection cut.
  std::string error;
  bool timed_out = false;  // the failure was a timeout (connecting, or a stall)
};

// Sets on libcurl handle `h` (a CURL*) how perform() reaches `request.url`: the schemes, the
// TLS verification (ca_file or pin), no proxy, no signals, the connect timeout, and where its
// error message goes (`error`, CURL_ERROR_SIZE bytes). What the tunnel (tunnel.h) shares.
void setConnection(void* h, const Request& request, char* error);

// Sends `request` and waits for the whole answer. Errors: kFailedPrecondition when libcurl cannot
// be loaded (the message follows "... needs "); what happened to the transfer is in Response.
Result<Response> perform(const Request& request);

// The certificate (PEM) an https:// server at `url` presents, fetched without trusting it, for
// a person to compare its fingerprint with the one the server printed (cohort login
// --fingerprint). Errors: kUnavailable naming why no TLS connection was made;
// kFailedPrecondition when libcurl cannot be loaded.
Result<std::string> serverCertificate(const std::string& url);

}  // namespace cohort::http
