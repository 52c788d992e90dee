#include "server/lab_proxy.h"

#include <algorithm>
#include <cctype>
#include <iterator>

#include "job/session.h"
#include "server/tokens.h"
#include "util/text.h"

namespace cohort::server {

namespace {

std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool safeMethod(const std::string& method) {
  return method == "GET" || method == "HEAD" || method == "OPTIONS";
}

// Headers of the hop, never passed on either way; `upgrade`: a WebSocket's handshake passes
// its Upgrade and Connection.
bool ofTheHop(std::string_view name, bool upgrade) {
  if (upgrade && (name == "upgrade" || name == "connection")) return false;
  return name == "connection" || name == "keep-alive" || name == "transfer-encoding" ||
         name == "te" || name == "trailer" || name == "upgrade" || startsWith(name, "proxy-");
}

}  // namespace

Result<TunnelTo> decideLab(const LabAsk& ask) {
  const std::string job = "job '" + ask.job_id + "'";
  if (ask.caller.account != ask.job_account) return fail(Code::kNotFound, "no " + job);
  if (ask.credential == LabCredential::kCookie && ask.cookie_job != ask.job_id) {
    return fail(Code::kNotFound, "no " + job);
  }
  if (!ask.session) {
    return fail(Code::kNotFound, job + " is not a session (cohort session ls lists yours)");
  }
  if (!ask.jupyter) {
    return fail(Code::kNotFound, "session '" + ask.job_id +
                                     "' has no JupyterLab: start one with cohort session start "
                                     "--jupyter --env jupyter");
  }
  if (ask.job_final) return fail(Code::kFailedPrecondition, "session '" + ask.job_id + "' has ended");
  if (!ask.job_started) {
    return fail(Code::kFailedPrecondition, "session '" + ask.job_id + "' has not started yet");
  }
  const std::string own = std::string(ask.tls ? "https://" : "http://") + lower(ask.host);
  if (!ask.origin.empty() && lower(ask.origin) != own) {
    return fail(Code::kPermissionDenied, "a request from another origin (" + ask.origin.substr(0, 200) +
                                             ") is refused: open the lab from " + own);
  }
  if (ask.credential == LabCredential::kCookie) {
    if (ask.fetch_site == "cross-site") {
      return fail(Code::kPermissionDenied, "a request from another site is refused");
    }
    if ((ask.upgrade || !safeMethod(ask.method)) && ask.origin.empty()) {
      return fail(Code::kPermissionDenied,
                  "a request that changes something must say its Origin when it comes with the "
                  "lab's cookie (API clients send their token instead)");
    }
  }
  return TunnelTo{0, job::sessionPort("jupyter")};
}

Result<std::string> LabPasses::issue(const Pass& pass, int64_t now) {
  COHORT_ASSIGN(std::string secret, randomHex(32));
  std::lock_guard lock(mu_);
  // Expired tickets go; then the account's oldest while it holds too many.
  std::vector<std::pair<int64_t, std::string>> own;
  for (auto it = tickets_.begin(); it != tickets_.end();) {
    if (it->second.expires <= now) {
      it = tickets_.erase(it);
      continue;
    }
    if (it->second.pass.account == pass.account) own.emplace_back(it->second.expires, it->first);
    ++it;
  }
  std::sort(own.begin(), own.end());
  for (size_t i = 0; i + kTicketsPerAccount <= own.size(); ++i) tickets_.erase(own[i].second);
  tickets_[sha256Hex(secret)] = Ticket{pass, now + kTicketLife};
  return secret;
}

std::optional<std::pair<std::string, LabPasses::Pass>> LabPasses::redeem(const std::string& secret,
                                                                         const std::string& job,
                                                                         int64_t now) {
  auto made = randomHex(32);
  if (!made) return std::nullopt;
  std::lock_guard lock(mu_);
  auto it = tickets_.find(sha256Hex(secret));
  if (it == tickets_.end()) return std::nullopt;
  Ticket ticket = it->second;
  tickets_.erase(it);  // once, whatever follows
  if (ticket.expires <= now || ticket.pass.job != job) return std::nullopt;
  while (cookies_.size() >= kMaxCookies) {
    auto oldest = std::min_element(cookies_.begin(), cookies_.end(), [](const auto& a, const auto& b) {
      return a.second.first < b.second.first;
    });
    cookies_.erase(oldest);
  }
  cookies_[sha256Hex(*made)] = {next_++, ticket.pass};
  return std::pair<std::string, Pass>{*made, ticket.pass};
}

std::optional<LabPasses::Pass> LabPasses::cookie(const std::string& secret) const {
  std::lock_guard lock(mu_);
  auto it = cookies_.find(sha256Hex(secret));
  if (it == cookies_.end()) return std::nullopt;
  return it->second.second;
}

void LabPasses::forgetJob(const std::string& job) {
  std::lock_guard lock(mu_);
  for (auto it = tickets_.begin(); it != tickets_.end();) {
    it = it->second.pass.job == job ? tickets_.erase(it) : std::next(it);
  }
  for (auto it = cookies_.begin(); it != cookies_.end();) {
    it = it->second.second.job == job ? cookies_.erase(it) : std::next(it);
  }
}

std::string labCookie(const std::string& value, const std::string& job_id, bool tls) {
  return std::string(kLabCookie) + "=" + value + "; Path=" + job::jupyterBaseUrl(job_id) +
         "; HttpOnly; SameSite=Strict" + (tls ? "; Secure" : "");
}

std::vector<std::string> cookieValues(std::string_view header, std::string_view name) {
  std::vector<std::string> out;
  for (const std::string& part : split(std::string(header), ';')) {
    const std::string_view pair = trim(part);
    const size_t eq = pair.find('=');
    if (eq == std::string_view::npos || trim(pair.substr(0, eq)) != name) continue;
    out.emplace_back(trim(pair.substr(eq + 1)));
  }
  return out;
}

std::string labRequest(std::string_view method, std::string_view target,
                       const std::vector<std::pair<std::string, std::string>>& headers,
                       std::string_view body, bool upgrade, const std::string& lab_token,
                       int port) {
  std::string out = std::string(method) + " " + std::string(target) +
                    (upgrade ? " HTTP/1.1\r\n" : " HTTP/1.0\r\n");
  // What Connection names is of the hop too.
  std::vector<std::string> named;
  for (const auto& [name, value] : headers) {
    if (name != "connection") continue;
    for (const std::string& n : split(value, ',')) named.push_back(lower(trim(n)));
  }
  for (const auto& [name, value] : headers) {
    if (ofTheHop(name, upgrade) || name == "host" || name == "content-length" ||
        name == "authorization" || name == "origin" || name == "forwarded" ||
        startsWith(name, "x-forwarded-") || name == "cookie") {
      continue;
    }
    if (!upgrade && std::find(named.begin(), named.end(), name) != named.end()) continue;
    if (value.find_first_of("\r\n") != std::string::npos) continue;
    out += name + ": " + value + "\r\n";
  }
  // The client's other cookies (the lab's own _xsrf), never the lab cookie.
  std::string cookies;
  for (const auto& [name, value] : headers) {
    if (name != "cookie") continue;
    for (const std::string& part : split(value, ';')) {
      const std::string_view pair = trim(part);
      const size_t eq = pair.find('=');
      if (pair.empty() || (eq != std::string_view::npos && trim(pair.substr(0, eq)) == kLabCookie)) {
        continue;
      }
      if (pair.find_first_of("\r\n") != std::string_view::npos) continue;
      cookies += (cookies.empty() ? "" : "; ") + std::string(pair);
    }
  }
  if (!cookies.empty()) out += "Cookie: " + cookies + "\r\n";
  out += "Host: 127.0.0.1:" + std::to_string(port) + "\r\n";
  out += "Authorization: token " + lab_token + "\r\n";
  if (upgrade) {
    out += "\r\n";
    return out;
  }
  out += "Connection: close\r\n";
  if (!body.empty() || (method != "GET" && method != "HEAD" && method != "DELETE" && method != "OPTIONS")) {
    out += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  }
  out += "\r\n";
  out.append(body);
  return out;
}

std::optional<Result<LabAnswerHead>> parseLabAnswerHead(std::string_view bytes) {
  const size_t end = bytes.find("\r\n\r\n");
  if (end == std::string_view::npos) {
    if (bytes.size() > kMaxLabHead) {
      return Result<LabAnswerHead>(fail(Code::kUnavailable, "the lab's answer head is over 64 KiB"));
    }
    return std::nullopt;
  }
  if (end + 4 > kMaxLabHead) {
    return Result<LabAnswerHead>(fail(Code::kUnavailable, "the lab's answer head is over 64 KiB"));
  }
  auto bad = [] {
    return Result<LabAnswerHead>(fail(Code::kUnavailable, "the lab's answer is not HTTP"));
  };
  LabAnswerHead head;
  head.size = end + 4;
  std::string_view rest = bytes.substr(0, end);
  size_t eol = rest.find("\r\n");
  const std::string_view status_line = rest.substr(0, eol);
  // "HTTP/1.x NNN reason"
  if (status_line.size() < 12 || !startsWith(status_line, "HTTP/1.") || status_line[8] != ' ') {
    return bad();
  }
  int status = 0;
  for (size_t i = 9; i < 12; ++i) {
    if (!std::isdigit(static_cast<unsigned char>(status_line[i]))) return bad();
    status = status * 10 + (status_line[i] - '0');
  }
  // A final status, or 101 for a WebSocket: an interim one (100, 103) would be passed back as
  // the answer itself.
  if (status < 200 && status != 101) return bad();
  if (status > 599 || (status_line.size() > 12 && status_line[12] != ' ')) return bad();
  // A lone CR or LF, or a NUL, inside a line would end a header where the client reads it.
  if (rest.find_first_of(std::string_view("\0", 1)) != std::string_view::npos) return bad();
  for (size_t at = rest.find_first_of("\r\n"); at != std::string_view::npos;
       at = rest.find_first_of("\r\n", at + 2)) {
    if (rest.substr(at, 2) != "\r\n") return bad();
  }
  head.status = status;
  while (eol != std::string_view::npos) {
    rest = rest.substr(eol + 2);
    eol = rest.find("\r\n");
    const std::string_view line = rest.substr(0, eol);
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos || colon == 0) return bad();
    const std::string name = lower(line.substr(0, colon));
    if (name.find_first_of(" \t") != std::string::npos) return bad();
    head.headers.emplace_back(name, std::string(trim(line.substr(colon + 1))));
    if (head.headers.size() > 200) return bad();
  }
  return Result<LabAnswerHead>(std::move(head));
}

bool passedBack(std::string_view name, bool upgrade) {
  return !ofTheHop(name, upgrade) && name != "content-length" && name != "date" &&
         name != "server";
}

}  // namespace cohort::server
