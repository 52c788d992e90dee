// The routes of a session's JupyterLab (lab_proxy.h): its tickets, and the proxy that passes
// requests and WebSockets on to the lab through the job's coordinator. What may pass is
// decideLab's; this file does it.
#include <poll.h>
#include <sys/socket.h>

#include <cctype>
#include <chrono>

#include "agent/job_ports.h"
#include "job/session.h"
#include "server/server_impl.h"

namespace cohort::server {

namespace {

constexpr size_t kMaxLabAnswer = 64 << 20;          // a plain answer, read whole
constexpr auto kLabAnswerTime = std::chrono::seconds(60);  // a plain request's whole exchange

constexpr auto kLabHandshakeTime = std::chrono::seconds(30);  // a WebSocket's answer head

std::string lower(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

// Waits until `fd` is ready for `events` or `until` passes. False on the deadline or an error.
bool await(int fd, short events, std::chrono::steady_clock::time_point until) {
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
    if (n > 0) return true;
    if (n < 0 && errno != EINTR) return false;
  }
}

Result<void> sendAll(int fd, std::string_view bytes, std::chrono::steady_clock::time_point until) {
  size_t sent = 0;
  while (sent < bytes.size()) {
    if (!await(fd, POLLOUT, until)) return fail(Code::kUnavailable, "the lab does not take the request");
    const ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      sent += static_cast<size_t>(n);
    } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
      return fail(Code::kUnavailable, "the lab closed its connection");
    }
  }
  return {};
}

// Reads from `fd` into `into` until `done(into)`, the end, the deadline or `limit` bytes.
// True at the end or when done; false on the deadline, an error or the limit.
template <class Done>
bool readUntil(int fd, std::string& into, size_t limit, std::chrono::steady_clock::time_point until,
               Done done) {
  char chunk[64 << 10];
  while (!done(into)) {
    if (!await(fd, POLLIN, until)) return false;
    const ssize_t n = ::recv(fd, chunk, sizeof chunk, MSG_DONTWAIT);
    if (n == 0) return true;
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      return false;
    }
    into.append(chunk, static_cast<size_t>(n));
    if (into.size() > limit) return false;
  }
  return true;
}

}  // namespace

Result<void> Server::Impl::authenticateLab(const Request& req, Admitted& admitted) {
  if (startsWith(req.header("Authorization"), "Bearer ")) {
    COHORT_ASSIGN(admitted.caller, authenticate(req, &admitted.token_hash));
    return {};
  }
  const std::string job = req.matches.empty() ? "" : req.matches[0];
  std::optional<LabPasses::Pass> found;
  for (const auto& [name, value] : req.headers) {
    if (name != "cookie") continue;
    for (const std::string& secret : cookieValues(value, kLabCookie)) {
      auto pass = lab_passes.cookie(secret);
      if (pass && (!found || pass->job == job)) found = pass;
    }
  }
  if (!found) {
    return fail(Code::kUnauthenticated,
                "no token: send 'Authorization: Bearer <token>', or open the lab with cohort "
                "session open NAME (or the console), which signs this browser in");
  }
  auto caller = callerOfTokenHash(found->token_hash);
  if (!caller) {
    return fail(Code::kUnauthenticated,
                "the token that opened this lab is no longer valid: open it again (cohort "
                "session open NAME)");
  }
  admitted.caller = *caller;
  admitted.token_hash = found->token_hash;
  admitted.lab_cookie = true;
  admitted.cookie_job = found->job;
  return {};
}

void Server::Impl::labRoutes() {
  // What decideLab is asked for `req` to job `id`, with what the server knows of the job then.
  struct Looked {
    store::Job job;
    std::optional<SessionSettings> session;
    LabAsk ask;
  };
  auto look = [this](const Request& req, const Caller& caller, const std::string& id,
                     bool by_cookie, const std::string& cookie_job) -> Result<Looked> {
    Looked l;
    auto job = store->job(id);
    if (!job) {
      if (job.error().code == Code::kNotFound) return fail(Code::kNotFound, "no job '" + id + "'");
      return tl::unexpected<Error>(job.error());
    }
    l.job = std::move(*job);
    l.session = sessionOf(l.job);
    LabAsk& a = l.ask;
    a.credential = by_cookie ? LabCredential::kCookie : LabCredential::kBearer;
    a.caller = caller;
    a.cookie_job = cookie_job;
    a.job_id = l.job.id;
    a.job_account = l.job.account;
    a.job_final = store::isFinalState(l.job.state);
    a.job_started = !l.job.job_dir.empty();
    a.session = l.session.has_value();
    a.jupyter = l.session && l.session->jupyter && !l.session->jupyter_token.empty();
    a.method = req.method;
    a.upgrade = lower(req.header("Upgrade")) == "websocket";
    a.origin = req.header("Origin");
    a.host = req.header("Host");
    a.tls = !options.tls.cert_pem.empty();
    a.fetch_site = lower(req.header("Sec-Fetch-Site"));
    if (a.job_final) lab_passes.forgetJob(l.job.id);  // its cookies die with it
    return l;
  };

  // A ticket: a URL that signs a browser in to the session's lab, once, within a minute.
  route({"POST", "/v1/jobs/{id}/session/jupyter/ticket", Who::kAccount, BodyKind::kJson},
        [this, look](const Request& req, Response& res, const Caller& c) -> Result<void> {
          COHORT_ASSIGN(Looked l, look(req, c, req.matches[0], false, ""));
          l.ask.method = "GET";  // what the ticket is for: opening the lab
          COHORT_TRY(decideLab(l.ask));
          auto admitted = std::static_pointer_cast<Admitted>(req.context);
          COHORT_ASSIGN(std::string ticket,
                        lab_passes.issue({c.account, l.job.id, admitted ? admitted->token_hash : ""},
                                         nowUnixNanos()));
          const std::string base = job::jupyterBaseUrl(l.job.id);
          res.setHeader("Cache-Control", "no-store");
          writeJson(res, 201,
                    {{"url", base + "ticket/" + ticket},
                     {"lab", base + "lab"},
                     {"expires_in", formatDuration(Millis(LabPasses::kTicketLife / 1000000))}});
          return Result<void>();
        });
  route({"GET", "/v1/jobs/{id}/session/jupyter/ticket/{ticket}", Who::kAnyone, BodyKind::kNone},
        [this, look](const Request& req, Response& res, const Caller&) -> Result<void> {
          const std::string& id = req.matches[0];
          auto redeemed = lab_passes.redeem(req.matches[1], id, nowUnixNanos());
          if (!redeemed) {
            return fail(Code::kUnauthenticated,
                        "this lab link is not valid: it opens the lab once, within a minute of "
                        "being made (cohort session open NAME makes another)");
          }
          const auto& [cookie, pass] = *redeemed;
          auto caller = callerOfTokenHash(pass.token_hash);
          if (!caller) {
            return fail(Code::kUnauthenticated, "the token that made this link is no longer valid");
          }
          COHORT_ASSIGN(Looked l, look(req, *caller, id, true, pass.job));
          COHORT_TRY(decideLab(l.ask));
          res.status = 303;
          res.setHeader("Location", job::jupyterBaseUrl(id) + "lab");
          res.setHeader("Set-Cookie", labCookie(cookie, id, l.ask.tls));
          res.setHeader("Cache-Control", "no-store");
          res.setHeader("Referrer-Policy", "no-referrer");
          res.setContent("", "text/plain");
          return Result<void>();
        });

  // The proxy: each method a lab uses, every path under the session's base URL.
  auto proxy = [this, look](const Request& req, Response& res, const Caller& c) -> Result<void> {
    auto admitted = std::static_pointer_cast<Admitted>(req.context);
    const bool by_cookie = admitted && admitted->lab_cookie;
    COHORT_ASSIGN(Looked l, look(req, c, req.matches[0], by_cookie,
                                 by_cookie ? admitted->cookie_job : ""));
    COHORT_ASSIGN(TunnelTo to, decideLab(l.ask));
    const bool upgrade = l.ask.upgrade;
    // A WebSocket holds one of the account's tunnel slots while it is open, and ends with the
    // token; any connection keeps the session in use (sessions.h).
    std::shared_ptr<AccountLimits::Slot> slot;
    if (upgrade) {
      COHORT_ASSIGN(slot, takeTunnel(req, c));
    } else {
      COHORT_ASSIGN(slot, limits.take(AccountLimits::Kind::kLabRequest, c.account,
                                      admitted ? admitted->token_hash : std::string(),
                                      kLabRequestsAtOnce));
    }
    std::shared_ptr<void> active = sessions.opened(l.job.id);
    auto sock = agent::connectJobPort(l.job.job_dir, to.node, to.port);
    if (!sock) {
      return fail(Code::kUnavailable,
                  "session '" + l.job.id + "': JupyterLab does not answer yet (it starts within "
                  "seconds of the session running; cohort logs " + l.job.id + " shows why not): " +
                      sock.error().message);
    }
    const int fd = sock->get();
    const auto until = std::chrono::steady_clock::now() + (upgrade ? kLabHandshakeTime : kLabAnswerTime);
    COHORT_TRY(sendAll(fd, labRequest(req.method, req.target, req.headers, req.body, upgrade,
                                      l.session->jupyter_token, to.port),
                       until));
    std::string in;
    std::optional<Result<LabAnswerHead>> head;
    const bool read = readUntil(fd, in, upgrade ? kMaxLabHead : kMaxLabAnswer, until,
                                [&](const std::string& bytes) {
                                  if (!upgrade) return false;  // to the end
                                  head = parseLabAnswerHead(bytes);
                                  return head.has_value();
                                });
    if (!upgrade) head = parseLabAnswerHead(in);
    if (!read && !head) {
      return fail(in.size() > kMaxLabAnswer ? Code::kTooLarge : Code::kUnavailable,
                  in.size() > kMaxLabAnswer
                      ? "the lab's answer is over 64 MiB, the proxy's limit: copy large files "
                        "with cohort session ssh (scp, rsync)"
                      : "the lab did not answer in time");
    }
    if (!head) return fail(Code::kUnavailable, "the lab closed its connection without an answer");
    if (!*head) return tl::unexpected<Error>(head->error());
    const LabAnswerHead& h = **head;
    if (!upgrade && !read) {
      return fail(Code::kUnavailable, "the lab's answer did not end in time or is over 64 MiB");
    }
    if (!upgrade && h.status == 101) {
      return fail(Code::kUnavailable, "the lab switched protocols on a plain request");
    }
    res.status = h.status;
    for (const auto& [name, value] : h.headers) {
      if (passedBack(name, false)) res.setHeader(name, value);
    }
    std::string rest = in.substr(h.size);
    if (upgrade && h.status == 101) {
      auto open = std::make_shared<UniqueFd>(std::move(*sock));
      slot->onRevoke([open] { ::shutdown(open->get(), SHUT_RDWR); });
      res.tunnel = open;
      res.tunnel_early = std::move(rest);
      res.tunnel_ended = [slot, active] {};  // both are held until the WebSocket ends
      res.setHeader("Upgrade", "websocket");
      res.setHeader("Connection", "Upgrade");
      return Result<void>();
    }
    if (upgrade) {
      // Refused: what its answer said, as far as it came with its head.
      res.close = true;
    }
    res.body = std::move(rest);
    return Result<void>();
  };
  for (const char* method : {"GET", "POST", "PUT", "PATCH", "DELETE"}) {
    route({method, "/v1/jobs/{id}/session/jupyter/{path*}", Who::kLab, BodyKind::kProxied}, proxy);
  }
}

}  // namespace cohort::server
