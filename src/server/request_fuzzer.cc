// libFuzzer entry for what the server does with a request's bytes before any handler runs:
// the head's checks (request_head.h: method, target, framing, percent-decoding of the path and
// the query) and routing against every route the server serves (the OpenAPI document's paths,
// which a test holds equal to the route table). The input is a request head as a client sends
// it ("METHOD /path?query HTTP/1.1\r\nName: value\r\n..."), split here the simple way
// libmicrohttpd's parser would hand it over; libmicrohttpd itself is fuzzed by its authors.
// A crash, a sanitizer report, an escaping exception or a hang is a finding.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "server/request_head.h"
#include "server/routes.h"

namespace cohort::server {
extern const char kOpenApiJson[];
extern const std::size_t kOpenApiJsonSize;
}  // namespace cohort::server

namespace {

using cohort::server::RouteTable;

// Every operation of the document as a route: "{x}" segments, and the rest captures the table
// uses for the paths that take slashes.
const RouteTable<int>& table() {
  static const RouteTable<int> routes = [] {
    RouteTable<int> t;
    auto doc = nlohmann::json::parse(std::string(cohort::server::kOpenApiJson,
                                                 cohort::server::kOpenApiJsonSize));
    int n = 0;
    for (const auto& [path, item] : doc["paths"].items()) {
      std::string pattern = path;
      for (auto [from, to] : {std::pair<std::string, std::string>{"{path}", "{path*}"},
                              {"{name}/log", "{name+}/log"}}) {
        if (auto at = pattern.find(from); at != std::string::npos) pattern.replace(at, from.size(), to);
      }
      if (pattern.size() >= 7 && pattern.compare(pattern.size() - 7, 7, "/{name}") == 0) {
        pattern.replace(pattern.size() - 7, 7, "/{name+}");
      }
      for (const auto& [method, op] : item.items()) {
        if (method == "parameters") continue;
        std::string upper = method;
        for (char& c : upper) c = static_cast<char>(c - 32 * (c >= 'a' && c <= 'z'));
        t.add({upper, pattern}, n++);
      }
    }
    return t;
  }();
  return routes;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  cohort::server::http::Request req;
  const size_t eol = text.find('\n');
  std::string_view line = text.substr(0, eol);
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  req.method = std::string(line.substr(0, sp1));
  std::string target(sp1 == std::string_view::npos ? std::string_view()
                                                   : line.substr(sp1 + 1, sp2 - sp1 - 1));
  std::vector<std::pair<std::string, std::string>> query;
  if (auto q = target.find('?'); q != std::string::npos) {
    std::string_view rest = std::string_view(target).substr(q + 1);
    while (!rest.empty()) {
      const size_t amp = rest.find('&');
      std::string_view pair = rest.substr(0, amp);
      const size_t eq = pair.find('=');
      query.emplace_back(std::string(pair.substr(0, eq)),
                         eq == std::string_view::npos ? "" : std::string(pair.substr(eq + 1)));
      rest = amp == std::string_view::npos ? std::string_view() : rest.substr(amp + 1);
    }
    target.resize(q);
  }
  req.target = target;
  for (size_t at = eol; at != std::string_view::npos && at < text.size();) {
    const size_t next = text.find('\n', at + 1);
    std::string_view header = text.substr(at + 1, next == std::string_view::npos ? next : next - at - 1);
    const size_t colon = header.find(':');
    if (colon != std::string_view::npos) {
      std::string name(header.substr(0, colon));
      for (char& c : name) c = static_cast<char>(c + 32 * (c >= 'A' && c <= 'Z'));
      std::string_view value = header.substr(colon + 1);
      while (!value.empty() && (value.front() == ' ' || value.back() == '\r')) {
        value.front() == ' ' ? value.remove_prefix(1) : value.remove_suffix(1);
      }
      req.headers.emplace_back(std::move(name), std::string(value));
    }
    at = next;
  }
  auto [framing, refusal] = cohort::server::http::checkHead(req, query, 100);
  if (refusal) {
    if (refusal->status != 400 && refusal->status != 431 && refusal->status != 501) __builtin_trap();
    return 0;
  }
  if (framing.expects_body && framing.length && *framing.length == 0) __builtin_trap();
  std::vector<std::string> captures;
  bool known = false;
  if (const auto* route = table().match(req.method, req.path, captures, &known)) {
    if (captures.empty() && route->spec.pattern.find('{') != std::string::npos) __builtin_trap();
  }
  return 0;
}
