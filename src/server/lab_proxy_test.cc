#include "server/lab_proxy.h"

#include <gtest/gtest.h>

#include "job/session.h"
#include "server/account_limits.h"
#include "util/text.h"

namespace cohort::server {
namespace {

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Alice's running session with JupyterLab, asked by Alice's token, a plain GET.
LabAsk ask() {
  LabAsk a;
  a.caller = {"alice", false};
  a.job_id = "j1";
  a.job_account = "alice";
  a.job_started = true;
  a.session = true;
  a.jupyter = true;
  a.method = "GET";
  a.host = "server:8470";
  return a;
}

LabAsk byCookie() {
  LabAsk a = ask();
  a.credential = LabCredential::kCookie;
  a.cookie_job = "j1";
  return a;
}

TEST(DecideLab, TheOwnersTokenReachesTheLabOnNodeZero) {
  auto to = decideLab(ask());
  ASSERT_TRUE(to) << to.error().message;
  EXPECT_EQ(to->node, 0);
  EXPECT_EQ(to->port, job::sessionPort("jupyter"));
}

TEST(DecideLab, AnotherAccountAndAnAdminFindNoSuchJob) {
  LabAsk other = ask();
  other.caller = {"bob", false};
  LabAsk admin = ask();
  admin.caller = {"root", true};
  for (const LabAsk& a : {other, admin}) {
    auto to = decideLab(a);
    ASSERT_FALSE(to);
    EXPECT_EQ(to.error().code, Code::kNotFound);
    EXPECT_EQ(to.error().message, "no job 'j1'");
  }
}

TEST(DecideLab, ACookieOfAnotherJobFindsNoSuchJob) {
  LabAsk a = byCookie();
  a.cookie_job = "j2";
  auto to = decideLab(a);
  ASSERT_FALSE(to);
  EXPECT_EQ(to.error().message, "no job 'j1'");
}

TEST(DecideLab, AJobThatIsNoSessionOrASessionWithoutLabHasNone) {
  LabAsk plain = ask();
  plain.session = false;
  plain.jupyter = false;
  EXPECT_EQ(decideLab(plain).error().code, Code::kNotFound);
  LabAsk no_lab = ask();
  no_lab.jupyter = false;
  auto to = decideLab(no_lab);
  ASSERT_FALSE(to);
  EXPECT_EQ(to.error().code, Code::kNotFound);
  EXPECT_NE(to.error().message.find("--jupyter"), std::string::npos) << to.error().message;
}

TEST(DecideLab, AnEndedOrUnstartedSessionHasNoLab) {
  LabAsk ended = ask();
  ended.job_final = true;
  EXPECT_EQ(decideLab(ended).error().code, Code::kFailedPrecondition);
  LabAsk queued = ask();
  queued.job_started = false;
  EXPECT_EQ(decideLab(queued).error().code, Code::kFailedPrecondition);
}

TEST(DecideLab, AForeignOriginIsRefusedWhateverTheCredential) {
  for (LabAsk a : {ask(), byCookie()}) {
    a.origin = "http://evil.example";
    EXPECT_EQ(decideLab(a).error().code, Code::kPermissionDenied);
    a.origin = "https://server:8470";  // the scheme counts
    EXPECT_EQ(decideLab(a).error().code, Code::kPermissionDenied);
    a.origin = "http://SERVER:8470";
    EXPECT_TRUE(decideLab(a));
    a.tls = true;
    a.origin = "https://server:8470";
    EXPECT_TRUE(decideLab(a));
  }
}

TEST(DecideLab, TheCookieNeedsAnOriginForAWebSocketOrAnUnsafeMethod) {
  LabAsk ws = byCookie();
  ws.upgrade = true;
  EXPECT_EQ(decideLab(ws).error().code, Code::kPermissionDenied);
  ws.origin = "http://server:8470";
  EXPECT_TRUE(decideLab(ws));
  for (const char* method : {"POST", "PUT", "PATCH", "DELETE"}) {
    LabAsk a = byCookie();
    a.method = method;
    EXPECT_EQ(decideLab(a).error().code, Code::kPermissionDenied) << method;
    a.origin = "http://server:8470";
    EXPECT_TRUE(decideLab(a)) << method;
  }
  LabAsk get = byCookie();  // a page load sends none
  EXPECT_TRUE(decideLab(get));
  // A token needs none: no browser sends it on its own.
  LabAsk api = ask();
  api.method = "POST";
  api.upgrade = true;
  EXPECT_TRUE(decideLab(api));
}

TEST(DecideLab, TheCookieOnACrossSiteRequestIsRefused) {
  LabAsk a = byCookie();
  a.fetch_site = "cross-site";
  EXPECT_EQ(decideLab(a).error().code, Code::kPermissionDenied);
  a.fetch_site = "same-origin";
  EXPECT_TRUE(decideLab(a));
}

TEST(LabPasses, ATicketIsGoodOnceWithinItsLifeForItsJobAlone) {
  LabPasses passes;
  const LabPasses::Pass pass{"alice", "j1", "h1"};
  auto t = passes.issue(pass, 1000);
  ASSERT_TRUE(t);
  EXPECT_FALSE(passes.redeem(*t, "j2", 2000));  // another job's path: and it is spent
  EXPECT_FALSE(passes.redeem(*t, "j1", 2000));
  auto t2 = passes.issue(pass, 1000);
  EXPECT_FALSE(passes.redeem(*t2, "j1", 1000 + LabPasses::kTicketLife));  // too late
  auto t3 = passes.issue(pass, 1000);
  auto cookie = passes.redeem(*t3, "j1", 2000);
  ASSERT_TRUE(cookie);
  EXPECT_EQ(cookie->second.account, "alice");
  EXPECT_EQ(cookie->second.token_hash, "h1");
  EXPECT_FALSE(passes.redeem(*t3, "j1", 3000));  // replayed
  EXPECT_FALSE(passes.redeem("forged", "j1", 3000));
  auto found = passes.cookie(cookie->first);
  ASSERT_TRUE(found);
  EXPECT_EQ(found->job, "j1");
  EXPECT_FALSE(passes.cookie(*t3));  // a ticket is no cookie
  passes.forgetJob("j1");
  EXPECT_FALSE(passes.cookie(cookie->first));
}

TEST(LabPasses, AnAccountHoldsABoundedNumberOfTickets) {
  LabPasses passes;
  std::vector<std::string> tickets;
  for (size_t i = 0; i < LabPasses::kTicketsPerAccount + 5; ++i) {
    tickets.push_back(*passes.issue({"alice", "j1", "h"}, 1000 + static_cast<int64_t>(i)));
  }
  auto bob = passes.issue({"bob", "j2", "h"}, 1000);
  EXPECT_FALSE(passes.redeem(tickets.front(), "j1", 2000));  // the oldest went
  EXPECT_TRUE(passes.redeem(tickets.back(), "j1", 2000));
  EXPECT_TRUE(passes.redeem(*bob, "j2", 2000));  // another account's are its own
}

TEST(LabRequests, AnAccountWaitsOnAtMostItsShareOfTheServersWorkers) {
  AccountLimits limits;
  std::vector<std::shared_ptr<AccountLimits::Slot>> held;
  for (int64_t i = 0; i < kLabRequestsAtOnce; ++i) {
    auto slot = limits.take(AccountLimits::Kind::kLabRequest, "alice", "h", kLabRequestsAtOnce);
    ASSERT_TRUE(slot);
    held.push_back(*slot);
  }
  auto more = limits.take(AccountLimits::Kind::kLabRequest, "alice", "h", kLabRequestsAtOnce);
  ASSERT_FALSE(more);
  EXPECT_EQ(more.error().code, Code::kResourceExhausted);
  EXPECT_TRUE(contains(more.error().message, "JupyterLab")) << more.error().message;
  EXPECT_TRUE(limits.take(AccountLimits::Kind::kLabRequest, "bob", "h2", kLabRequestsAtOnce));
  EXPECT_TRUE(limits.take(AccountLimits::Kind::kTunnel, "alice", "h", 8));  // a count of its own
  held.pop_back();
  EXPECT_TRUE(limits.take(AccountLimits::Kind::kLabRequest, "alice", "h", kLabRequestsAtOnce));
}

TEST(LabCookie, IsHttpOnlyStrictAndScopedToItsSessionsPath) {
  EXPECT_EQ(labCookie("v", "j1", false),
            "cohort_lab=v; Path=/v1/jobs/j1/session/jupyter/; HttpOnly; SameSite=Strict");
  EXPECT_TRUE(contains(labCookie("v", "j1", true), "; Secure"));
  EXPECT_EQ(cookieValues("a=1; cohort_lab=x ;cohort_lab=y; b", "cohort_lab"),
            (std::vector<std::string>{"x", "y"}));
}

TEST(LabRequest, PassesTheRequestWithTheLabsTokenAndNoneOfTheClientsCredentials) {
  const std::string sent = labRequest(
      "PUT", "/v1/jobs/j1/session/jupyter/api/contents/a.ipynb?x=1",
      {{"host", "server:8470"},
       {"authorization", "Bearer account-token"},
       {"cookie", "cohort_lab=secret; _xsrf=abc"},
       {"origin", "http://server:8470"},
       {"x-forwarded-for", "1.2.3.4"},
       {"connection", "keep-alive, x-hop"},
       {"x-hop", "1"},
       {"transfer-encoding", "chunked"},
       {"content-type", "application/json"},
       {"content-length", "999"},
       {"x-evil", "a\r\nInjected: 1"}},
      "{}", false, "labtoken", 8888);
  EXPECT_TRUE(startsWith(sent, "PUT /v1/jobs/j1/session/jupyter/api/contents/a.ipynb?x=1 HTTP/1.0\r\n"))
      << sent;
  EXPECT_TRUE(contains(sent, "\r\nHost: 127.0.0.1:8888\r\n")) << sent;
  EXPECT_TRUE(contains(sent, "\r\nAuthorization: token labtoken\r\n")) << sent;
  EXPECT_TRUE(contains(sent, "\r\nCookie: _xsrf=abc\r\n")) << sent;
  EXPECT_TRUE(contains(sent, "\r\ncontent-type: application/json\r\n")) << sent;
  EXPECT_TRUE(contains(sent, "\r\nContent-Length: 2\r\n\r\n{}")) << sent;
  for (const char* gone : {"account-token", "secret", "origin", "1.2.3.4", "x-hop", "chunked",
                           "999", "Injected", "keep-alive"}) {
    EXPECT_FALSE(contains(sent, gone)) << gone << " in " << sent;
  }
}

TEST(LabRequest, AWebSocketsHandshakePassesItsUpgrade) {
  const std::string sent = labRequest(
      "GET", "/v1/jobs/j1/session/jupyter/api/kernels/k/channels",
      {{"connection", "Upgrade"}, {"upgrade", "websocket"}, {"sec-websocket-key", "k=="},
       {"sec-websocket-version", "13"}, {"authorization", "Bearer t"}},
      "", true, "labtoken", 8888);
  EXPECT_TRUE(contains(sent, " HTTP/1.1\r\n")) << sent;
  EXPECT_TRUE(contains(sent, "\r\nupgrade: websocket\r\n")) << sent;
  EXPECT_TRUE(contains(sent, "\r\nconnection: Upgrade\r\n")) << sent;
  EXPECT_TRUE(contains(sent, "\r\nsec-websocket-key: k==\r\n")) << sent;
  EXPECT_FALSE(contains(sent, "Bearer")) << sent;
  EXPECT_TRUE(contains(sent, "\r\n\r\n"));
}

TEST(LabAnswerHead, ReadsStatusAndHeadersOnceTheHeadIsIn) {
  EXPECT_FALSE(parseLabAnswerHead("HTTP/1.1 200 OK\r\nA: b\r\n"));
  auto head = parseLabAnswerHead("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                                 "Sec-WebSocket-Accept:  x= \r\n\r\nframe");
  ASSERT_TRUE(head && *head);
  EXPECT_EQ((*head)->status, 101);
  EXPECT_EQ((*head)->headers,
            (std::vector<std::pair<std::string, std::string>>{{"upgrade", "websocket"},
                                                              {"sec-websocket-accept", "x="}}));
  EXPECT_EQ((*head)->size, std::string_view("HTTP/1.1 101 Switching Protocols\r\nUpgrade: "
                                            "websocket\r\nSec-WebSocket-Accept:  x= \r\n\r\n")
                               .size());
  auto bare = parseLabAnswerHead("HTTP/1.0 404\r\n\r\n");
  ASSERT_TRUE(bare && *bare);
  EXPECT_EQ((*bare)->status, 404);
}

TEST(LabAnswerHead, RefusesWhatIsNotHttpAndAnEndlessHead) {
  for (const char* bad : {"SSH-2.0-OpenSSH\r\n\r\n", "HTTP/1.1 2x0 OK\r\n\r\n",
                          "HTTP/1.1 200 OK\r\nno colon\r\n\r\n", "HTTP/1.1 200 OK\r\n: v\r\n\r\n",
                          "HTTP/1.1 099 x\r\n\r\n", "HTTP/1.1 100 Continue\r\n\r\n",
                          "HTTP/1.1 103 Early Hints\r\n\r\n", "HTTP/1.1 600 x\r\n\r\n",
                          "HTTP/1.1 200 OK\r\nA: b\nSet-Cookie: x=y\r\n\r\n",
                          "HTTP/1.1 200 OK\r\nA: b\rSet-Cookie: x=y\r\n\r\n"}) {
    auto head = parseLabAnswerHead(bad);
    ASSERT_TRUE(head) << bad;
    EXPECT_FALSE(*head) << bad;
  }
  auto nul = parseLabAnswerHead(std::string("HTTP/1.1 200 OK\r\nA: b\0c\r\n\r\n", 27));
  ASSERT_TRUE(nul);
  EXPECT_FALSE(*nul);
  auto endless = parseLabAnswerHead(std::string(kMaxLabHead + 1, 'a'));
  ASSERT_TRUE(endless);
  EXPECT_FALSE(*endless);
  // Arbitrary bytes never crash it.
  std::string noise;
  for (int i = 0; i < 4000; ++i) {
    noise += static_cast<char>((i * 7919) % 256);
    if (i % 97 == 0) noise += "\r\n";
    (void)parseLabAnswerHead(noise);
  }
}

TEST(LabAnswer, HeadersOfTheHopDoNotComeBack) {
  EXPECT_TRUE(passedBack("content-type", false));
  EXPECT_TRUE(passedBack("set-cookie", false));
  for (const char* hop : {"connection", "transfer-encoding", "keep-alive", "content-length",
                          "upgrade", "proxy-authenticate"}) {
    EXPECT_FALSE(passedBack(hop, false)) << hop;
  }
}

}  // namespace
}  // namespace cohort::server
