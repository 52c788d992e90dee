// A job's own network: its nodes reach each other on their addresses, and nothing outside the
// job reaches them (the machine, another job's network), loopback included. Needs root.
#include "proc/job_network.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include "util/net.h"

namespace cohort::proc {
namespace {

// A TCP socket of the namespace `ns` (-1: ours): made there, used from here.
UniqueFd socketIn(int ns) {
  UniqueFd back(::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC));
  if (ns >= 0 && ::setns(ns, CLONE_NEWNET) != 0) return UniqueFd();
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (ns >= 0 && ::setns(back.get(), CLONE_NEWNET) != 0) std::abort();
  return fd;
}

sockaddr_in at(const std::string& ip, int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, ip.c_str(), &a.sin_addr);
  return a;
}

UniqueFd listenIn(int ns, const std::string& ip, int port) {
  UniqueFd fd = socketIn(ns);
  sockaddr_in a = at(ip, port);
  int one = 1;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::listen(fd.get(), 4) != 0) {
    return UniqueFd();
  }
  return fd;
}

// Whether a connection from namespace `ns` to ip:port reaches `listener` (accepted there)
// within `wait_ms` (long enough for a loaded machine to resolve the address; only a connection
// that is not to come waits it out). Whether connect() itself succeeds says nothing: a network
// may accept any connection on the way out (a proxy); what matters is that none arrives.
bool reaches(int ns, const std::string& ip, int port, int listener, int wait_ms = 5000) {
  UniqueFd fd = socketIn(ns);
  if (!fd.valid()) return false;
  ::fcntl(fd.get(), F_SETFL, O_NONBLOCK);
  sockaddr_in a = at(ip, port);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 && errno != EINPROGRESS) {
    return false;
  }
  pollfd p{listener, POLLIN, 0};
  if (::poll(&p, 1, wait_ms) != 1) return false;
  UniqueFd accepted(::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC));
  return accepted.valid();
}

// What is not to arrive is waited for a second.
bool reachesAtAll(int ns, const std::string& ip, int port, int listener) {
  return reaches(ns, ip, port, listener, 1000);
}

TEST(JobNetwork, ItsNodesReachEachOtherAndNothingOutsideReachesThem) {
  if (!JobNetwork::available()) GTEST_SKIP() << "making network namespaces needs root";
  auto net = JobNetwork::create(2, Egress::kIsolated, "test-a");
  ASSERT_TRUE(net) << net.error().message;
  EXPECT_EQ(net->address(0), "10.88.0.2");
  EXPECT_EQ(net->address(1), "10.88.0.3");
  // A master port on node 1's address, and on its loopback a port that is free on the
  // machine's.
  UniqueFd probe = listenIn(-1, "127.0.0.1", 0);
  sockaddr_in bound{};
  socklen_t len = sizeof bound;
  ASSERT_EQ(::getsockname(probe.get(), reinterpret_cast<sockaddr*>(&bound), &len), 0);
  const int free_port = ntohs(bound.sin_port);
  probe.reset();
  UniqueFd master = listenIn(net->nodeNamespace(1), "0.0.0.0", 29500);
  UniqueFd local = listenIn(net->nodeNamespace(1), "127.0.0.1", free_port);
  ASSERT_TRUE(master.valid() && local.valid());
  const int m = master.get(), l = local.get();
  EXPECT_TRUE(reaches(net->nodeNamespace(0), net->address(1), 29500, m)) << "node 0 to node 1";
  EXPECT_TRUE(reaches(net->nodeNamespace(1), "127.0.0.1", free_port, l)) << "its own loopback";
  EXPECT_FALSE(reachesAtAll(net->nodeNamespace(0), "127.0.0.1", free_port, l))
      << "node 0's loopback is its own";
  // The machine reaches neither its address nor its loopback.
  EXPECT_FALSE(reachesAtAll(-1, net->address(1), 29500, m));
  EXPECT_FALSE(reachesAtAll(-1, "127.0.0.1", free_port, l)) << "the machine's loopback is not node 1's";
  // Another job has the same addresses, on a network of its own.
  auto other = JobNetwork::create(1, Egress::kIsolated, "test-b");
  ASSERT_TRUE(other) << other.error().message;
  EXPECT_FALSE(reachesAtAll(other->nodeNamespace(0), net->address(1), 29500, m));
  EXPECT_FALSE(reachesAtAll(other->nodeNamespace(0), "127.0.0.1", free_port, l));
  // And with no way out, node 0 has no route beyond its network.
  UniqueFd out = socketIn(net->nodeNamespace(0));
  sockaddr_in far = at("192.0.2.1", 80);
  EXPECT_NE(::connect(out.get(), reinterpret_cast<sockaddr*>(&far), sizeof far), 0);
  EXPECT_EQ(errno, ENETUNREACH);
}

// With a way out (nat), a node reaches what the machine reaches (here: the machine itself, on
// one of its own addresses), as the hub's address; the nodes still reach each other.
TEST(JobNetwork, WithNatItsNodesGetOutThroughTheMachine) {
  if (!JobNetwork::available()) GTEST_SKIP() << "making network namespaces needs root";
  if (::access("/usr/sbin/nft", X_OK) != 0) GTEST_SKIP() << "needs nftables (scripts/test installs it)";
  std::string machine;
  for (const InterfaceAddress& a : ipv4Addresses()) {
    char text[INET_ADDRSTRLEN];
    in_addr in{a.address};
    const std::string ip = ::inet_ntop(AF_INET, &in, text, sizeof text) ? text : "";
    if (ip.rfind("127.", 0) != 0 && ip.rfind("10.88.", 0) != 0 && ip.rfind("10.89.", 0) != 0) {
      machine = ip;
      break;
    }
  }
  if (machine.empty()) GTEST_SKIP() << "this machine has no address but loopback";
  // A nat network turns on the machine's forwarding: the test leaves it as it found it.
  struct Forwarding {
    std::string was = readFile("/proc/sys/net/ipv4/ip_forward").value_or("0\n");
    ~Forwarding() {
      UniqueFd fd(::open("/proc/sys/net/ipv4/ip_forward", O_WRONLY | O_CLOEXEC));
      if (fd.valid()) (void)writeAll(fd.get(), was);
    }
  } forwarding;
  auto net = JobNetwork::create(2, Egress::kNat, "test-nat");
  ASSERT_TRUE(net) << net.error().message;
  UniqueFd outside = listenIn(-1, "0.0.0.0", 0);
  sockaddr_in bound{};
  socklen_t len = sizeof bound;
  ASSERT_EQ(::getsockname(outside.get(), reinterpret_cast<sockaddr*>(&bound), &len), 0);
  EXPECT_TRUE(reaches(net->nodeNamespace(1), machine, ntohs(bound.sin_port), outside.get()));
  UniqueFd master = listenIn(net->nodeNamespace(0), "0.0.0.0", 29500);
  EXPECT_TRUE(reaches(net->nodeNamespace(1), net->address(0), 29500, master.get()));
  EXPECT_FALSE(reachesAtAll(-1, net->address(0), 29500, master.get())) << "nothing comes in";
  auto isolated = JobNetwork::create(1, Egress::kIsolated, "test-closed");
  ASSERT_TRUE(isolated) << isolated.error().message;
  EXPECT_FALSE(reachesAtAll(isolated->nodeNamespace(0), machine, ntohs(bound.sin_port), outside.get()));
}

TEST(JobNetwork, OnlyRootMakesOneAndItsSizeIsBounded) {
  if (::geteuid() != 0) {
    auto net = JobNetwork::create(1, Egress::kIsolated, "x");
    ASSERT_FALSE(net);
    EXPECT_EQ(net.error().code, Code::kFailedPrecondition) << net.error().message;
    return;
  }
  EXPECT_FALSE(JobNetwork::create(0, Egress::kIsolated, "x"));
  EXPECT_FALSE(JobNetwork::create(1025, Egress::kIsolated, "x"));
  EXPECT_TRUE(parseEgress("nat"));
  EXPECT_FALSE(parseEgress("open"));
}

}  // namespace
}  // namespace cohort::proc
