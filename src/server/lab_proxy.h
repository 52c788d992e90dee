// The JupyterLab proxy (docs/sessions.md): the server serves a session's JupyterLab at
// job::jupyterBaseUrl(ID) (`/v1/jobs/ID/session/jupyter/...`), passing each request on to the
// lab that rank 0 of the session runs on its node's loopback, through the job's coordinator
// (agent/job_ports.h) as a tunnel does, with the lab's token added: plain HTTP requests, and
// WebSocket upgrades (the kernels' channels, terminals), whose bytes the HTTP layer then relays
// both ways (http.h's tunnels).
//
// Who may reach a lab: its account's bearer token (API clients), or, for a browser, which
// cannot send one, a cookie: a ticket (POST .../jupyter/ticket, with the token) is a URL that
// is good once, for a minute; opening it sets an HttpOnly, SameSite=Strict cookie scoped to
// that session's proxy path and redirects to the lab. A cookie is only as good as the token
// that asked for its ticket: it dies with the token's revocation and with the session.
//
// This file is what is decided, apart from the doing (api_lab.cc): decideLab (who reaches
// which lab), LabPasses (tickets and cookies: state, thread-safe), and the pure pieces of
// speaking HTTP to the lab (what is passed on each way, and reading the lab's answer head).
// A test per rule in lab_proxy_test.cc.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "server/access.h"
#include "server/tunnels.h"
#include "util/result.h"

namespace cohort::server {

// How the caller of a lab's path showed who it is.
enum class LabCredential {
  kBearer,  // Authorization: Bearer <token>
  kCookie,  // the lab cookie a ticket set
};

// What is asked of the proxy, and what the server knows at that moment.
struct LabAsk {
  LabCredential credential = LabCredential::kBearer;
  Caller caller;           // the account of the token (or of the token behind the cookie)
  std::string cookie_job;  // kCookie: the job the cookie was set for
  std::string job_id;
  std::string job_account;
  bool job_final = false;
  bool job_started = false;
  bool session = false;  // the job is a session
  bool jupyter = false;  // ...that serves JupyterLab
  std::string method;    // GET, POST, ...
  bool upgrade = false;  // a WebSocket upgrade
  std::string origin;    // the Origin header, "" when none
  std::string host;      // the Host header
  bool tls = false;      // the server speaks HTTPS
  std::string fetch_site;  // the Sec-Fetch-Site header, "" when none
};

// Where the lab is (node 0's JupyterLab port), or why not:
// - the caller is not the job's account: kNotFound, the words of a job that does not exist.
//   Admins too: the proxy adds the lab's token, so whoever passes runs code as the account
//   (an admin's ssh tunnel, by contrast, still needs the account's own key);
// - a cookie set for another job: kNotFound, the same words;
// - the job is not a session, or a session without JupyterLab: kNotFound, saying how to start
//   one with it; the job has ended or not started: kFailedPrecondition;
// - an Origin that is not the server's own (scheme and Host): kPermissionDenied, whatever the
//   credential; with the cookie, a WebSocket upgrade or an unsafe method (anything but GET,
//   HEAD, OPTIONS) without an Origin, or any request a browser says is cross-site
//   (Sec-Fetch-Site), is refused the same way: another site's page cannot ride the cookie.
Result<TunnelTo> decideLab(const LabAsk& ask);

// A session's lab passes: tickets (good once, for kTicketLife) and the cookies they became.
// Secrets are kept as their SHA-256 only. In memory: a server's restart forgets them (open the
// lab again). Thread-safe.
class LabPasses {
 public:
  struct Pass {
    std::string account;
    std::string job;
    std::string token_hash;  // the token that asked for the ticket
  };
  static constexpr int64_t kTicketLife = 60LL * 1000 * 1000 * 1000;  // nanos
  static constexpr size_t kTicketsPerAccount = 32;  // the oldest goes when one more is asked
  static constexpr size_t kMaxCookies = 4096;       // the oldest goes when one more is set

  // A new ticket for `pass` at `now` (unix nanos): its secret. Errors: randomness's.
  Result<std::string> issue(const Pass& pass, int64_t now);
  // Trades ticket `secret` for a cookie of the same pass, once, within its life and only for
  // the job it was issued for: the cookie's secret and its pass; nullopt otherwise.
  std::optional<std::pair<std::string, Pass>> redeem(const std::string& secret,
                                                     const std::string& job, int64_t now);
  // The pass of cookie `secret`, or nullopt.
  std::optional<Pass> cookie(const std::string& secret) const;
  // Forgets every ticket and cookie of `job` (its session ended).
  void forgetJob(const std::string& job);

 private:
  struct Ticket {
    Pass pass;
    int64_t expires = 0;
  };
  mutable std::mutex mu_;
  std::map<std::string, Ticket> tickets_;  // by the secret's hash
  std::map<std::string, std::pair<uint64_t, Pass>> cookies_;  // by hash: (order set, pass)
  uint64_t next_ = 0;
};

// A plain request holds one of the server's workers until the lab's answer is in: an account
// holds at most this many at once (AccountLimits::Kind::kLabRequest; a browser opens 6
// connections to a server), so that a lab that answers slowly, whatever runs in it, cannot
// keep the other accounts' requests waiting for a worker.
inline constexpr int64_t kLabRequestsAtOnce = 8;

// The lab cookie's name, and its attributes for job `job_id` (Path is the job's proxy path).
inline constexpr const char* kLabCookie = "cohort_lab";
std::string labCookie(const std::string& value, const std::string& job_id, bool tls);

// Every value of cookie `name` in a Cookie header ("a=1; b=2").
std::vector<std::string> cookieValues(std::string_view header, std::string_view name);

// What the lab is sent for a request: its request line (`method`, `target`, HTTP/1.0 for a
// plain request, whose answer then ends with the connection and is never chunked; HTTP/1.1 for
// an upgrade), the client's headers but those of the hop (Connection and what it names,
// Keep-Alive, Transfer-Encoding, TE, Upgrade but a WebSocket's, Proxy-*), the client's
// credentials (Authorization, the lab cookie) and where it came from (Origin: checked
// already, Forwarded, X-Forwarded-*); Host the lab's own; the lab's token; then `body`.
std::string labRequest(std::string_view method, std::string_view target,
                       const std::vector<std::pair<std::string, std::string>>& headers,
                       std::string_view body, bool upgrade, const std::string& lab_token,
                       int port);

// The head of the lab's answer, once its blank line is in `bytes`.
struct LabAnswerHead {
  int status = 0;
  std::vector<std::pair<std::string, std::string>> headers;  // names in lower case
  size_t size = 0;  // bytes of the head, blank line included
};
// nullopt while the head is incomplete; an error when it is not an HTTP/1.x status line with a
// final status (200-599) or 101, and headers, within kMaxLabHead bytes, each line ended by CRLF
// with no other CR, LF or NUL in it. Linear, no recursion.
inline constexpr size_t kMaxLabHead = 64 << 10;
std::optional<Result<LabAnswerHead>> parseLabAnswerHead(std::string_view bytes);

// Whether the lab's answer header `name` (lower case) goes back to the client: not those of
// the hop (as labRequest), nor Content-Length (the server sets its own).
bool passedBack(std::string_view name, bool upgrade);

}  // namespace cohort::server
