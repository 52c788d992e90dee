#include "plan/port_lease.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <set>
#include <vector>

#include "util/temp_dir_for_tests.h"

namespace cohort::plan {
namespace {

TEST(PortLease, LeasesAreDistinctWhileHeld) {
  TempDir dir("cohort-lease");
  std::vector<PortLease> leases;
  std::set<int> ports;
  for (int i = 0; i < 50; ++i) {
    auto lease = PortLease::acquire("127.0.0.1", dir.path());
    ASSERT_TRUE(lease) << lease.error().message;
    EXPECT_TRUE(ports.insert(lease->port()).second) << "port " << lease->port() << " leased twice";
    leases.push_back(std::move(*lease));
  }
}

TEST(PortLease, LeasedPortCanBeBoundByTheRank) {
  TempDir dir("cohort-lease");
  auto lease = PortLease::acquire("127.0.0.1", dir.path());
  ASSERT_TRUE(lease);
  int sock = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(lease->port()));
  ::inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
  EXPECT_EQ(::bind(sock, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
  ::close(sock);
}

// The rank binds the port seconds after cohort leased it; a port from the ephemeral range could
// meanwhile be handed to any connect() on the machine (it was: another test's gloo took one).
TEST(PortLease, LeasedPortsLieOutsideTheKernelsEphemeralRange) {
  const PortRange ephemeral = ephemeralPorts();
  if (leasablePorts(ephemeral).empty()) GTEST_SKIP() << "this machine's ephemeral range is all";
  TempDir dir("cohort-lease");
  std::vector<PortLease> leases;
  for (int i = 0; i < 50; ++i) {
    auto lease = PortLease::acquire("127.0.0.1", dir.path());
    ASSERT_TRUE(lease) << lease.error().message;
    EXPECT_TRUE(lease->port() < ephemeral.lo || lease->port() > ephemeral.hi) << lease->port();
    EXPECT_GE(lease->port(), 10000);
    leases.push_back(std::move(*lease));
  }
}

TEST(PortLease, LeasablePortsAreTheRestAboveTenThousand) {
  auto ranges = leasablePorts({32768, 60999});
  ASSERT_EQ(ranges.size(), 2u);
  EXPECT_EQ(ranges[0].lo, 10000);
  EXPECT_EQ(ranges[0].hi, 32767);
  EXPECT_EQ(ranges[1].lo, 61000);
  EXPECT_EQ(ranges[1].hi, 65535);
  ranges = leasablePorts({1024, 65535});
  EXPECT_TRUE(ranges.empty()) << "nothing is left: the kernel's pick";
  ranges = leasablePorts({5000, 64000});
  ASSERT_EQ(ranges.size(), 1u);  // 64001-65535
  EXPECT_EQ(ranges[0].lo, 64001);
}

TEST(PortLease, AnExactPortSomethingListensOnIsRefused) {
  int sock = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  ::inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
  ASSERT_EQ(::bind(sock, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
  ASSERT_EQ(::listen(sock, 1), 0);
  socklen_t len = sizeof sa;
  ::getsockname(sock, reinterpret_cast<sockaddr*>(&sa), &len);
  TempDir dir("cohort-lease");
  auto exact = PortLease::acquireExact("127.0.0.1", ntohs(sa.sin_port), dir.path());
  ASSERT_FALSE(exact);
  EXPECT_EQ(exact.error().code, Code::kUnavailable);
  EXPECT_NE(exact.error().message.find("is in use"), std::string::npos) << exact.error().message;
  ::close(sock);
}

TEST(PortLease, RefusesBadAddress) {
  TempDir dir("cohort-lease");
  auto lease = PortLease::acquire("not-an-ip", dir.path());
  ASSERT_FALSE(lease);
  EXPECT_EQ(lease.error().code, Code::kInvalidArgument);
}

}  // namespace
}  // namespace cohort::plan
