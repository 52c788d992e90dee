#include "agent/job_ports.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "util/packet.h"

namespace cohort::agent {

namespace {

constexpr size_t kMaxMessage = 512;

// `/proc/self/fd/N/socket`: the socket's name through the directory's descriptor, short
// whatever the job directory's path.
Result<sockaddr_un> socketAddress(int dir_fd) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::string path =
      "/proc/self/fd/" + std::to_string(dir_fd) + "/" + std::string(kJobPortsSocket);
  if (path.size() >= sizeof addr.sun_path) return fail(Code::kInternal, "socket path too long");
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  return addr;
}

// Waits for `fd` to be ready for `events` within `timeout`; false on timeout or error.
bool waitReady(int fd, short events, Millis timeout) {
  pollfd p{fd, events, 0};
  int r;
  do {
    r = ::poll(&p, 1, static_cast<int>(timeout.count()));
  } while (r < 0 && errno == EINTR);
  return r == 1;
}

// A TCP socket made in network namespace `netns` (-1: this thread's own) and connected to
// 127.0.0.1:`port` there; a socket belongs to the namespace it was made in, so the thread goes
// back to its own namespace at once.
Result<UniqueFd> connectInNamespace(int netns, int port) {
  UniqueFd sock;
  if (netns >= 0) {
    UniqueFd own(::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC));
    if (!own.valid()) return failErrno("open this thread's network namespace");
    if (::setns(netns, CLONE_NEWNET) != 0) return failErrno("enter the node's network namespace");
    sock = UniqueFd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    const int saved = errno;
    if (::setns(own.get(), CLONE_NEWNET) != 0) {
      // A coordinator left in a job's namespace would report to nowhere: a bug or a broken kernel.
      std::perror("cohort: cannot return to the coordinator's network namespace");
      std::abort();
    }
    errno = saved;
  } else {
    sock = UniqueFd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  }
  if (!sock.valid()) return failErrno("socket");
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(port));
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(sock.get(), reinterpret_cast<sockaddr*>(&to), sizeof to) != 0) {
    if (errno != EINPROGRESS) return failErrno("connect to 127.0.0.1:" + std::to_string(port));
    if (!waitReady(sock.get(), POLLOUT, Millis(2000))) {
      return fail(Code::kUnavailable, "connect to 127.0.0.1:" + std::to_string(port) + ": timed out");
    }
    int err = 0;
    socklen_t len = sizeof err;
    ::getsockopt(sock.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) {
      errno = err;
      return failErrno("connect to 127.0.0.1:" + std::to_string(port));
    }
  }
  const int flags = ::fcntl(sock.get(), F_GETFL);
  ::fcntl(sock.get(), F_SETFL, flags & ~O_NONBLOCK);
  return sock;
}

}  // namespace

Result<JobPortsEndpoint> JobPortsEndpoint::listen(const std::string& job_dir,
                                                  std::vector<int> node_namespaces) {
  const std::string dir = job_dir + "/" + kJobPortsDir;
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return failErrno("mkdir '" + dir + "'");
  JobPortsEndpoint e;
  e.dir_ = UniqueFd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!e.dir_.valid()) return failErrno("open '" + dir + "'");
  // Only this process's user may reach the socket: the directory is its, 0700, not a link.
  struct stat st {};
  if (::fstat(e.dir_.get(), &st) != 0 || st.st_uid != ::geteuid() ||
      ::fchmod(e.dir_.get(), 0700) != 0) {
    return fail(Code::kIo, "'" + dir + "' is not this user's directory");
  }
  ::unlinkat(e.dir_.get(), kJobPortsSocket, 0);  // a coordinator's before this one
  COHORT_ASSIGN(sockaddr_un addr, socketAddress(e.dir_.get()));
  e.listener_ = UniqueFd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!e.listener_.valid()) return failErrno("socket");
  if (::bind(e.listener_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(e.listener_.get(), 16) != 0) {
    return failErrno("listen on '" + dir + "/" + kJobPortsSocket + "'");
  }
  e.namespaces_ = std::move(node_namespaces);
  return e;
}

JobPortsEndpoint::~JobPortsEndpoint() {
  if (dir_.valid() && listener_.valid()) ::unlinkat(dir_.get(), kJobPortsSocket, 0);
}

void JobPortsEndpoint::answer() {
  UniqueFd asker(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
  if (!asker.valid()) return;
  ucred peer{};
  socklen_t len = sizeof peer;
  if (::getsockopt(asker.get(), SOL_SOCKET, SO_PEERCRED, &peer, &len) != 0 ||
      peer.uid != ::geteuid()) {
    return;
  }
  auto reply = [&](const std::string& text, int fd) { (void)sendPacket(asker.get(), text, fd); };
  if (!waitReady(asker.get(), POLLIN, Millis(2000))) return;
  char buf[kMaxMessage];
  const ssize_t n = ::recv(asker.get(), buf, sizeof buf - 1, 0);
  if (n <= 0) return;
  buf[n] = '\0';
  int node = -1, port = -1;
  if (std::sscanf(buf, "connect %d %d", &node, &port) != 2 || port < 1 || port > 65535) {
    return reply("error: expected 'connect NODE PORT'", -1);
  }
  if (node < 0 || static_cast<size_t>(node) >= namespaces_.size()) {
    return reply("error: the job has no node " + std::to_string(node), -1);
  }
  auto sock = connectInNamespace(namespaces_[node], port);
  if (!sock) return reply("error: node " + std::to_string(node) + ": " + sock.error().message, -1);
  reply("ok", sock->get());
}

Result<UniqueFd> connectJobPort(const std::string& job_dir, int node, int port, Millis timeout) {
  const std::string dir = job_dir + "/" + kJobPortsDir;
  UniqueFd dir_fd(::open(dir.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!dir_fd.valid()) {
    return fail(Code::kUnavailable, "the job's coordinator is not running (no '" + dir + "')");
  }
  COHORT_ASSIGN(sockaddr_un addr, socketAddress(dir_fd.get()));
  UniqueFd sock(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!sock.valid()) return failErrno("socket");
  if (::connect(sock.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    return fail(Code::kUnavailable, "the job's coordinator is not running (" +
                                        std::string(std::strerror(errno)) + ")");
  }
  ucred peer{};
  socklen_t len = sizeof peer;
  if (::getsockopt(sock.get(), SOL_SOCKET, SO_PEERCRED, &peer, &len) != 0 ||
      peer.uid != ::geteuid()) {
    return fail(Code::kPermissionDenied, "'" + dir + "/" + kJobPortsSocket +
                                             "' is not held by a process of this user");
  }
  const std::string ask = "connect " + std::to_string(node) + " " + std::to_string(port);
  COHORT_TRY(sendPacket(sock.get(), ask));
  if (!waitReady(sock.get(), POLLIN, timeout)) {
    return fail(Code::kUnavailable, "the job's coordinator did not answer");
  }
  UniqueFd got;
  auto answer = receivePacket(sock.get(), kMaxMessage, &got);
  if (!answer) return fail(Code::kUnavailable, "the job's coordinator did not answer");
  const std::string& said = *answer;
  if (said == "ok" && got.valid()) return got;
  return fail(Code::kUnavailable, said.rfind("error: ", 0) == 0 ? said.substr(7) : said);
}

}  // namespace cohort::agent
