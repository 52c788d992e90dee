// What the HTTP layer (http.h) checks of a request's head once libmicrohttpd has parsed it and
// before anything else happens: its method and target, the number of its headers, its framing
// (one way to know where the body ends: two Content-Lengths, one beside Transfer-Encoding, or a
// transfer coding other than chunked are refused, so that no proxy in front can read another
// request in the same bytes), and the percent-decoding of its path and query. Pure: no I/O, no
// recursion, linear in the head's size; the request fuzzer (request_fuzzer.cc) runs it over
// arbitrary bytes. Thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "server/http.h"

namespace cohort::server::http {

struct HeadRefusal {
  int status;  // 400, 431, 501
  std::string message;
};

struct HeadFraming {
  bool expects_body = false;       // a Content-Length over 0, or chunked
  std::optional<uint64_t> length;  // the Content-Length
};

// Checks `req` (method, target and headers set, names in lower case) and fills its path and
// params from the target and `raw_query` (the query's pairs as sent, not decoded). Returns how
// its body is framed, or why it is refused.
std::pair<HeadFraming, std::optional<HeadRefusal>> checkHead(
    Request& req, const std::vector<std::pair<std::string, std::string>>& raw_query,
    size_t max_headers);

// Digits only, no sign, at most 19 of them.
std::optional<uint64_t> parseLength(std::string_view text);

}  // namespace cohort::server::http
