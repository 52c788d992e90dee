#include "http/client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "util/fd.h"

namespace cohort::http {
namespace {

// A listening socket on 127.0.0.1 and its port.
struct Listener {
  UniqueFd fd;
  int port = 0;
};

Listener listenLocal() {
  Listener l;
  l.fd.reset(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  EXPECT_EQ(::bind(l.fd.get(), reinterpret_cast<sockaddr*>(&a), len), 0);
  EXPECT_EQ(::listen(l.fd.get(), 4), 0);
  EXPECT_EQ(::getsockname(l.fd.get(), reinterpret_cast<sockaddr*>(&a), &len), 0);
  l.port = ntohs(a.sin_port);
  return l;
}

// The next connection to `listener`; none when nobody came within 10 s (the test then fails
// rather than hangs).
UniqueFd acceptOne(int listener) {
  pollfd p{listener, POLLIN, 0};
  if (::poll(&p, 1, 10000) != 1) return UniqueFd();
  return UniqueFd(::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC));
}

// Answers one connection with `answer` once the request's headers are in, then closes it.
std::thread answerOnce(int listener, std::string answer, std::string* request = nullptr) {
  return std::thread([listener, answer = std::move(answer), request] {
    UniqueFd c = acceptOne(listener);
    if (!c.valid()) return;
    std::string got;
    char buf[4096];
    while (got.find("\r\n\r\n") == std::string::npos) {
      ssize_t n = ::read(c.get(), buf, sizeof buf);
      if (n <= 0) break;
      got.append(buf, static_cast<size_t>(n));
    }
    if (request) *request = got;
    (void)!::write(c.get(), answer.data(), answer.size());
  });
}

std::string url(int port, const std::string& path) {
  return "http://127.0.0.1:" + std::to_string(port) + path;
}

TEST(HttpClient, AWholeAnswerHasItsStatusAndBodyAndTheRequestItsHeaders) {
  Listener l = listenLocal();
  std::string request;
  std::thread server = answerOnce(
      l.fd.get(), "HTTP/1.1 201 Created\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello",
      &request);
  Request r;
  r.method = "POST";
  r.url = url(l.port, "/v1/jobs?x=1");
  r.headers = {"Authorization: Bearer t0k"};
  r.body = "{}";
  auto answer = perform(r);
  server.join();
  ASSERT_TRUE(answer) << answer.error().message;
  EXPECT_EQ(answer->status, 201);
  EXPECT_EQ(answer->body, "hello");
  EXPECT_TRUE(answer->error.empty()) << answer->error;
  EXPECT_TRUE(answer->connected);
  EXPECT_EQ(request.rfind("POST /v1/jobs?x=1 HTTP/1.1\r\n", 0), 0u) << request;
  EXPECT_NE(request.find("Authorization: Bearer t0k\r\n"), std::string::npos) << request;
  EXPECT_EQ(request.find("Expect:"), std::string::npos) << request;
}

TEST(HttpClient, NoListenerIsNoConnection) {
  Listener l = listenLocal();
  const int port = l.port;
  l.fd.reset();  // nothing listens there now
  auto answer = perform(Request{.url = url(port, "/")});
  ASSERT_TRUE(answer) << answer.error().message;
  EXPECT_FALSE(answer->connected);
  EXPECT_EQ(answer->status, 0);
  EXPECT_FALSE(answer->error.empty());
}

TEST(HttpClient, AnAnswerCutOffIsAFailureAfterTheConnection) {
  Listener l = listenLocal();
  std::thread server =
      answerOnce(l.fd.get(), "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly this");
  auto answer = perform(Request{.url = url(l.port, "/logs")});
  server.join();
  ASSERT_TRUE(answer) << answer.error().message;
  EXPECT_TRUE(answer->connected);
  EXPECT_EQ(answer->status, 200);
  EXPECT_FALSE(answer->error.empty());
}

// A server, or whatever listens at the address it was given, cannot make cohort hold an answer
// of any size.
TEST(HttpClient, ACollectedAnswerOverItsLimitIsRefusedAndNotKept) {
  Listener l = listenLocal();
  const std::string body(3000, 'x');
  std::thread server =
      answerOnce(l.fd.get(), "HTTP/1.1 200 OK\r\nContent-Length: 3000\r\n\r\n" + body);
  Request r{.url = url(l.port, "/v1/jobs")};
  r.max_body = 2048;
  auto answer = perform(r);
  server.join();
  ASSERT_TRUE(answer) << answer.error().message;
  EXPECT_TRUE(answer->too_large);
  EXPECT_EQ(answer->error, "an answer longer than 2.0 KiB, more than is taken");
  EXPECT_TRUE(answer->body.empty());

  server = answerOnce(l.fd.get(), "HTTP/1.1 200 OK\r\nContent-Length: 3000\r\n\r\n" + body);
  r.max_body = 3000;  // exactly the limit is taken
  answer = perform(r);
  server.join();
  ASSERT_TRUE(answer) << answer.error().message;
  EXPECT_FALSE(answer->too_large);
  EXPECT_EQ(answer->body, body);
}

TEST(HttpClient, TheBodyGoesToOnBodyWhichMayStopIt) {
  Listener l = listenLocal();
  std::thread server = answerOnce(
      l.fd.get(), "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n0123456789");
  std::string seen;
  Request r{.url = url(l.port, "/stream")};
  r.on_body = [&](const char* data, size_t size) {
    seen.append(data, size);
    return false;
  };
  auto answer = perform(r);
  server.join();
  ASSERT_TRUE(answer) << answer.error().message;
  EXPECT_TRUE(answer->stopped);
  EXPECT_TRUE(answer->error.empty()) << answer->error;
  EXPECT_FALSE(seen.empty());
  EXPECT_TRUE(answer->body.empty());
}

TEST(HttpClient, AnErrorAnswerIsKeptWhenTheBodyWouldBeStreamed) {
  Listener l = listenLocal();
  std::thread server = answerOnce(
      l.fd.get(), "HTTP/1.1 404 Not Found\r\nContent-Length: 7\r\n\r\nno such");
  bool called = false;
  Request r{.url = url(l.port, "/missing")};
  r.on_body = [&](const char*, size_t) { return called = true; };
  auto answer = perform(r);
  server.join();
  ASSERT_TRUE(answer) << answer.error().message;
  EXPECT_EQ(answer->status, 404);
  EXPECT_EQ(answer->body, "no such");
  EXPECT_FALSE(called);
}

TEST(HttpClient, AnUploadIsReadPieceByPieceAndCounted) {
  Listener l = listenLocal();
  std::thread server([fd = l.fd.get()] {
    UniqueFd c = acceptOne(fd);
    if (!c.valid()) return;
    std::string got;
    char buf[65536];
    // Headers, then the whole body of 200,000 bytes.
    for (;;) {
      auto end = got.find("\r\n\r\n");
      if (end != std::string::npos && got.size() >= end + 4 + 200000) break;
      ssize_t n = ::read(c.get(), buf, sizeof buf);
      if (n <= 0) return;
      got.append(buf, static_cast<size_t>(n));
    }
    const std::string answer = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}";
    (void)!::write(c.get(), answer.data(), answer.size());
  });
  Request r{.method = "PUT", .url = url(l.port, "/v1/uploads/x")};
  r.upload_size = 200000;
  uint64_t given = 0;
  r.upload = [&](char* buf, size_t max) {
    const size_t n = std::min<size_t>(max, 4096);
    std::fill(buf, buf + n, 'x');
    given += n;
    return n;
  };
  auto answer = perform(r);
  server.join();
  ASSERT_TRUE(answer) << answer.error().message;
  EXPECT_EQ(answer->status, 200);
  EXPECT_EQ(answer->sent, 200000u);
  EXPECT_EQ(given, 200000u);
}

TEST(HttpClient, AProxyInTheEnvironmentIsNotTaken) {
  Listener l = listenLocal();
  std::thread server =
      answerOnce(l.fd.get(), "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
  ::setenv("http_proxy", "http://127.0.0.1:1", 1);
  auto answer = perform(Request{.url = url(l.port, "/")});
  ::unsetenv("http_proxy");
  server.join();
  ASSERT_TRUE(answer) << answer.error().message;
  EXPECT_EQ(answer->status, 200);
  EXPECT_EQ(answer->body, "ok");
}

}  // namespace
}  // namespace cohort::http
