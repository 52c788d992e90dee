#include "util/net.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "util/fd.h"
#include "util/text.h"

namespace cohort {

namespace {

using Entry = InterfaceAddress;

std::string text(in_addr_t address) {
  char buf[INET_ADDRSTRLEN];
  in_addr a{address};
  return ::inet_ntop(AF_INET, &a, buf, sizeof buf) ? buf : "?";
}

std::string known(const std::vector<Entry>& all) {
  std::vector<std::string> parts;
  for (const Entry& e : all) parts.push_back(e.interface + " " + text(e.address));
  return parts.empty() ? "none" : join(parts, ", ");
}

}  // namespace

std::vector<InterfaceAddress> ipv4Addresses() {
  std::vector<InterfaceAddress> out;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return out;
  for (ifaddrs* i = list; i; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET) continue;
    out.push_back({i->ifa_name, reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr});
  }
  ::freeifaddrs(list);
  return out;
}

std::string hostName() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "";
  return name;
}

Result<HostAddress> chooseAddress(const std::string& interface, const std::string& cidr,
                                  const std::string& toward) {
  const std::vector<Entry> all = ipv4Addresses();
  if (!interface.empty()) {
    for (const Entry& e : all) {
      if (e.interface == interface) return HostAddress{e.interface, text(e.address)};
    }
    return fail(Code::kNotFound, "network.interface: this host has no IPv4 address on '" +
                                     interface + "' (it has: " + known(all) + ")");
  }
  if (!cidr.empty()) {
    unsigned a, b, c, d, bits;
    if (std::sscanf(cidr.c_str(), "%u.%u.%u.%u/%u", &a, &b, &c, &d, &bits) != 5 || bits > 32) {
      return fail(Code::kInvalidArgument, "network.cidr: '" + cidr + "' is not a network");
    }
    const uint32_t net = (a << 24) | (b << 16) | (c << 8) | d;
    const uint32_t mask = bits == 0 ? 0 : ~uint32_t{0} << (32 - bits);
    for (const Entry& e : all) {
      if ((ntohl(e.address) & mask) == (net & mask)) return HostAddress{e.interface, text(e.address)};
    }
    return fail(Code::kNotFound, "network.cidr: this host has no address in " + cidr +
                                     " (it has: " + known(all) + ")");
  }
  // The kernel's choice of source address for a datagram toward the peer; nothing is sent.
  sockaddr_in peer{};
  peer.sin_family = AF_INET;
  peer.sin_port = htons(9);
  if (::inet_pton(AF_INET, toward.c_str(), &peer.sin_addr) != 1) {
    return fail(Code::kInvalidArgument, "'" + toward + "' is not an IPv4 address");
  }
  UniqueFd s(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!s.valid()) return failErrno("socket");
  if (::connect(s.get(), reinterpret_cast<sockaddr*>(&peer), sizeof peer) != 0) {
    return fail(Code::kNotFound, "no route from this host to " + toward + " (it has: " +
                                     known(all) + ")");
  }
  sockaddr_in self{};
  socklen_t len = sizeof self;
  if (::getsockname(s.get(), reinterpret_cast<sockaddr*>(&self), &len) != 0) {
    return failErrno("getsockname");
  }
  HostAddress found{"", text(self.sin_addr.s_addr)};
  for (const Entry& e : all) {
    if (e.address == self.sin_addr.s_addr) found.interface = e.interface;
  }
  return found;
}

Result<std::string> resolveIpv4(const std::string& host, Millis limit) {
  in_addr literal{};
  if (::inet_pton(AF_INET, host.c_str(), &literal) == 1) return host;
  const auto until = std::chrono::steady_clock::now() + limit;
  for (int delay_ms = 50;; delay_ms = std::min(delay_ms * 2, 2000)) {
    addrinfo hints{};
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &found);
    if (rc == 0 && found) {
      char buf[INET_ADDRSTRLEN];
      ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(found->ai_addr)->sin_addr, buf,
                  sizeof buf);
      ::freeaddrinfo(found);
      return std::string(buf);
    }
    if (found) ::freeaddrinfo(found);
    if (std::chrono::steady_clock::now() >= until) {
      return fail(Code::kUnavailable, "'" + host + "' does not resolve to an IPv4 address (" +
                                          ::gai_strerror(rc) + ")");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
  }
}

}  // namespace cohort
