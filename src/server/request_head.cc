#include "server/request_head.h"

#include <cctype>

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

std::string lowerAscii(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

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

std::optional<uint64_t> parseLength(std::string_view text) {
  if (text.empty() || text.size() > 19) return std::nullopt;
  uint64_t n = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    n = n * 10 + static_cast<uint64_t>(c - '0');
  }
  return n;
}

std::pair<HeadFraming, std::optional<HeadRefusal>> checkHead(
    Request& req, const std::vector<std::pair<std::string, std::string>>& raw_query,
    size_t max_headers) {
  HeadFraming framing;
  auto refuse = [&](int status, std::string message) {
    return std::make_pair(framing, std::optional<HeadRefusal>(HeadRefusal{status, std::move(message)}));
  };
  if (req.method.empty()) return refuse(400, "the request method is malformed");
  for (char ch : req.method) {
    if (ch < 'A' || ch > 'Z') return refuse(400, "the request method is malformed");
  }
  if (req.target.empty() || req.target[0] != '/') {
    return refuse(400, "the request line is malformed (expected 'METHOD /path HTTP/1.1')");
  }
  if (req.headers.size() > max_headers) {
    return refuse(431, "the request has over " + std::to_string(max_headers) + " headers");
  }
  int content_lengths = 0;
  for (const auto& [name, value] : req.headers) content_lengths += name == "content-length";
  if (content_lengths > 1) return refuse(400, "the request has more than one Content-Length header");
  const bool has_te = req.hasHeader("transfer-encoding");
  const std::string te = lowerAscii(req.header("transfer-encoding"));
  if (has_te && te != "chunked") {
    return refuse(501, "Transfer-Encoding '" + te.substr(0, 64) +
                           "' is not supported (send chunked or a length)");
  }
  if (has_te && content_lengths > 0) {
    return refuse(400, "the request has both Content-Length and Transfer-Encoding");
  }
  if (content_lengths > 0) {
    framing.length = parseLength(req.header("content-length"));
    if (!framing.length) return refuse(400, "the request's Content-Length is malformed");
  }
  framing.expects_body = has_te || (framing.length && *framing.length > 0);
  auto path = percentDecode(req.target, false);
  if (!path) return refuse(400, "the request path is not valid percent-encoding");
  req.path = std::move(*path);
  for (const auto& [key, value] : raw_query) {
    auto k = percentDecode(key, true);
    auto v = percentDecode(value, true);
    if (!k || !v) return refuse(400, "the request's query is not valid percent-encoding");
    if (!k->empty()) req.params.emplace_back(std::move(*k), std::move(*v));
  }
  return {framing, std::nullopt};
}

}  // namespace cohort::server::http
