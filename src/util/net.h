// Which of this host's IPv4 addresses the others reach it at: the address of a named interface,
// the address inside a network (CIDR), or the source address of the route toward a peer. Read
// from the kernel (getifaddrs, a connected UDP socket); never from a name lookup, so a hostname
// that resolves to 127.0.1.1 cannot mislead it. And a peer's address from its name. Thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "util/result.h"
#include "util/text.h"

namespace cohort {

struct HostAddress {
  std::string interface;  // "eth0"; "" when no interface carries the address
  std::string address;    // "10.77.0.11"
};

struct InterfaceAddress {
  std::string interface;
  uint32_t address;  // network order (in_addr_t)
};

// Every IPv4 address of this host's interfaces (getifaddrs), in the kernel's order.
std::vector<InterfaceAddress> ipv4Addresses();

// This host's name (gethostname), for people; never used to find an address.
std::string hostName();

// With `interface`: its first IPv4 address. With `cidr`: the first address of this host inside
// it. With neither: the address this host would send from to reach `toward` (an IPv4 address).
// Errors: kNotFound naming what was asked for and the addresses this host has.
Result<HostAddress> chooseAddress(const std::string& interface, const std::string& cidr,
                                  const std::string& toward);

// `host` as an IPv4 address: itself when it is one, else its forward lookup (for a peer's
// name, never this host's own address), tried again until it resolves or `limit` has passed (a
// pod's name is published once the pod runs). Errors: kUnavailable naming the host.
Result<std::string> resolveIpv4(const std::string& host, Millis limit);

}  // namespace cohort
