#include "plan/port_lease.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <set>
#include <vector>

namespace cohort::plan {
namespace {

std::string tempDir() {
  char tmpl[] = "/tmp/cohort-lease-XXXXXX";
  return ::mkdtemp(tmpl);
}

TEST(PortLease, LeasesAreDistinctWhileHeld) {
  std::string dir = tempDir();
  std::vector<PortLease> leases;
  std::set<int> ports;
  for (int i = 0; i < 50; ++i) {
    auto lease = PortLease::acquire("127.0.0.1", dir);
    ASSERT_TRUE(lease) << lease.error().message;
    EXPECT_TRUE(ports.insert(lease->port()).second) << "port " << lease->port() << " leased twice";
    leases.push_back(std::move(*lease));
  }
}

TEST(PortLease, LeasedPortCanBeBoundByTheRank) {
  auto lease = PortLease::acquire("127.0.0.1", tempDir());
  ASSERT_TRUE(lease);
  int sock = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(lease->port()));
  ::inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
  EXPECT_EQ(::bind(sock, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
  ::close(sock);
}

TEST(PortLease, RefusesBadAddress) {
  auto lease = PortLease::acquire("not-an-ip", tempDir());
  ASSERT_FALSE(lease);
  EXPECT_EQ(lease.error().code, Code::kInvalidArgument);
}

}  // namespace
}  // namespace cohort::plan
