// A real S3 server for tests: versitygw (its posix backend serves a directory: each directory
// under it is a bucket, each object a plain file), which checks every request's signature.
// scripts/test installs it into build/go-bin with `go install`; a test that finds none skips
// and says so. Started on a loopback port the kernel picked, stopped (SIGTERM) with the object.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace cohort::testing {

constexpr const char* kS3Key = "cohort-test-key";
constexpr const char* kS3Secret = "cohort-test-secret-0123456789";

// A TCP connection to `host`:`port` (an IPv4 address), or -1.
inline int dialLoopback(int port, const std::string& host = "127.0.0.1") {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, host.c_str(), &a.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

inline int freeLoopbackPort() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t n = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &n);
  ::close(fd);
  return ntohs(a.sin_port);
}

class Versitygw {
 public:
  // The binary: $COHORT_VERSITYGW, else go-bin/versitygw in the first of `build_dirs` that has
  // it; "" when none does.
  static std::string find(const std::vector<std::string>& build_dirs) {
    if (const char* set = std::getenv("COHORT_VERSITYGW"); set && *set) return set;
    for (const std::string& dir : build_dirs) {
      std::string gw = dir + "/go-bin/versitygw";
      if (::access(gw.c_str(), X_OK) == 0) return gw;
    }
    return "";
  }

  // Serves `served` (each directory under it a bucket) with kS3Key / kS3Secret on `host` (an
  // address of this machine), its output in `log`. up() says whether it listens.
  Versitygw(const std::string& binary, const std::string& served, const std::string& log,
            const std::string& host = "127.0.0.1")
      : host_(host) {
    port_ = freeLoopbackPort();
    pid_ = ::fork();
    if (pid_ == 0) {
      ::setenv("ROOT_ACCESS_KEY_ID", kS3Key, 1);
      ::setenv("ROOT_SECRET_ACCESS_KEY", kS3Secret, 1);
      int out = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(out, 1);
      ::dup2(out, 2);
      const std::string listen = host_ + ":" + std::to_string(port_);
      ::execl(binary.c_str(), binary.c_str(), "--port", listen.c_str(), "posix", served.c_str(),
              static_cast<char*>(nullptr));
      _exit(127);
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::chrono::steady_clock::now() < deadline) {
      int fd = dialLoopback(port_, host_);
      if (fd >= 0) {
        ::close(fd);
        up_ = true;
        break;
      }
      if (::waitpid(pid_, nullptr, WNOHANG) == pid_) {
        pid_ = -1;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  ~Versitygw() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  Versitygw(const Versitygw&) = delete;
  Versitygw& operator=(const Versitygw&) = delete;

  bool up() const { return up_; }
  int port() const { return port_; }
  std::string endpoint() const { return "http://" + host_ + ":" + std::to_string(port_); }

 private:
  std::string host_;
  pid_t pid_ = -1;
  int port_ = 0;
  bool up_ = false;
};

}  // namespace cohort::testing
