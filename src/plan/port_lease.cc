#include "plan/port_lease.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <random>

namespace cohort::plan {

std::string defaultLeaseDir() {
  const char* runtime = std::getenv("XDG_RUNTIME_DIR");
  if (runtime && *runtime) return std::string(runtime) + "/cohort-ports";
  return "/tmp/cohort-ports-" + std::to_string(::getuid());
}

namespace {

Result<sockaddr_in> leaseAddress(const std::string& addr, const std::string& lock_dir) {
  if (::mkdir(lock_dir.c_str(), 0700) < 0 && errno != EEXIST) {
    return failErrno("create port lease directory '" + lock_dir + "'");
  }
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  if (::inet_pton(AF_INET, addr.c_str(), &sa.sin_addr) != 1) {
    return fail(Code::kInvalidArgument, "master address '" + addr + "' is not an IPv4 address");
  }
  return sa;
}

}  // namespace

Result<PortLease> PortLease::acquireExact(const std::string& addr, int port,
                                          const std::string& lock_dir) {
  COHORT_ASSIGN(sockaddr_in sa, leaseAddress(addr, lock_dir));
  const std::string where = "port " + std::to_string(port) + " on " + addr;
  UniqueFd sock(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!sock.valid()) return failErrno("socket");
  sa.sin_port = htons(static_cast<uint16_t>(port));
  if (::bind(sock.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) < 0) {
    if (errno == EADDRINUSE) return fail(Code::kUnavailable, where + " is in use");
    return failErrno("bind " + where);
  }
  const std::string path = lock_dir + "/" + std::to_string(port);
  UniqueFd lock(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (!lock.valid()) return failErrno("open '" + path + "'");
  if (::flock(lock.get(), LOCK_EX | LOCK_NB) < 0) {
    return fail(Code::kUnavailable, where + " is leased by another cohort job");
  }
  PortLease lease;
  lease.port_ = port;
  lease.lock_ = std::move(lock);
  return lease;
}

PortRange ephemeralPorts() {
  PortRange range{32768, 60999};  // Linux's default
  std::ifstream in("/proc/sys/net/ipv4/ip_local_port_range");
  int lo = 0, hi = 0;
  if (in >> lo >> hi && lo > 0 && lo <= hi && hi <= 65535) range = {lo, hi};
  return range;
}

std::vector<PortRange> leasablePorts(PortRange ephemeral) {
  constexpr int kLowest = 10000;  // below: the well-known services (5432, 6379, 8080, 8888, ...)
  std::vector<PortRange> out;
  if (ephemeral.lo - 1 >= kLowest) out.push_back({kLowest, ephemeral.lo - 1});
  if (ephemeral.hi + 1 <= 65535) out.push_back({std::max(kLowest, ephemeral.hi + 1), 65535});
  int size = 0;
  for (const PortRange& r : out) size += r.hi - r.lo + 1;
  if (size < 1000) return {};  // the kernel hands out (almost) every port: let it pick
  return out;
}

Result<PortLease> PortLease::acquire(const std::string& addr, const std::string& lock_dir) {
  COHORT_ASSIGN(sockaddr_in sa, leaseAddress(addr, lock_dir));
  const std::vector<PortRange> ranges = leasablePorts(ephemeralPorts());
  int size = 0;
  for (const PortRange& r : ranges) size += r.hi - r.lo + 1;
  static std::mt19937 random{std::random_device{}()};
  for (int attempt = 0; attempt < 256; ++attempt) {
    UniqueFd sock(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!sock.valid()) return failErrno("socket");
    int port = 0;  // the kernel's pick when no range is left outside its own
    if (size > 0) {
      int i = static_cast<int>(random() % static_cast<unsigned>(size));
      for (const PortRange& r : ranges) {
        if (i <= r.hi - r.lo) {
          port = r.lo + i;
          break;
        }
        i -= r.hi - r.lo + 1;
      }
    }
    sa.sin_port = htons(static_cast<uint16_t>(port));
    if (::bind(sock.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) < 0) {
      if (errno == EADDRINUSE && port != 0) continue;  // something listens there: try another
      return failErrno("bind a free port on " + addr);
    }
    socklen_t len = sizeof sa;
    ::getsockname(sock.get(), reinterpret_cast<sockaddr*>(&sa), &len);
    port = ntohs(sa.sin_port);
    std::string path = lock_dir + "/" + std::to_string(port);
    UniqueFd lock(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
    if (!lock.valid()) return failErrno("open '" + path + "'");
    if (::flock(lock.get(), LOCK_EX | LOCK_NB) < 0) continue;  // another job holds it
    PortLease lease;
    lease.port_ = port;
    lease.lock_ = std::move(lock);
    return lease;
  }
  return fail(Code::kUnavailable, "no free port on " + addr + " after 256 tries");
}

}  // namespace cohort::plan
