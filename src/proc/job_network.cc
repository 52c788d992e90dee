#include "proc/job_network.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/if_link.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/veth.h>
#include <sched.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <net/if.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>

#include "proc/spawn.h"
#include "util/net.h"
#include "util/text.h"

namespace cohort::proc {

namespace {

constexpr uint32_t kSubnet = (10u << 24) | (88u << 16);  // 10.88.0.0/16, every job's own
constexpr int kPrefix = 16;
constexpr uint32_t kUplinks = (10u << 24) | (89u << 16);  // kNat: 10.89.0.0/16 in /30s
constexpr const char* kNft = "/usr/sbin/nft";
constexpr int kMaxNodes = 1024;

std::string dotted(uint32_t host_order) {
  in_addr a{htonl(host_order)};
  char buf[INET_ADDRSTRLEN];
  return ::inet_ntop(AF_INET, &a, buf, sizeof buf) ? buf : "?";
}

// An rtnetlink request under construction: a header, a fixed body, attributes (nested ones too).
class Message {
 public:
  Message(uint16_t type, uint16_t flags, const void* body, size_t size) {
    buf_.resize(NLMSG_HDRLEN);
    hdr()->nlmsg_type = type;
    hdr()->nlmsg_flags = static_cast<uint16_t>(NLM_F_REQUEST | NLM_F_ACK | flags);
    append(body, size);
  }
  void attr(uint16_t type, const void* data, size_t size) {
    rtattr a{static_cast<unsigned short>(RTA_LENGTH(size)), type};
    append(&a, sizeof a);
    append(data, size);
  }
  void attr(uint16_t type, const std::string& text) { attr(type, text.c_str(), text.size() + 1); }
  void attr32(uint16_t type, uint32_t value) { attr(type, &value, sizeof value); }
  // A nested attribute: begin() returns where it starts, end() sets its length.
  size_t begin(uint16_t type) {
    const size_t at = buf_.size();
    rtattr a{0, type};
    append(&a, sizeof a);
    return at;
  }
  void end(size_t at) {
    reinterpret_cast<rtattr*>(buf_.data() + at)->rta_len = static_cast<unsigned short>(buf_.size() - at);
  }
  void raw(const void* data, size_t size) { append(data, size); }
  nlmsghdr* hdr() { return reinterpret_cast<nlmsghdr*>(buf_.data()); }
  std::vector<char>& bytes() {
    hdr()->nlmsg_len = static_cast<uint32_t>(buf_.size());
    return buf_;
  }

 private:
  void append(const void* data, size_t size) {
    const size_t at = buf_.size();
    buf_.resize(at + NLMSG_ALIGN(size), 0);
    if (size) std::memcpy(buf_.data() + at, data, size);
  }
  std::vector<char> buf_;
};

// A route netlink socket of the namespace the calling thread is in when it is opened.
class Netlink {
 public:
  static Result<Netlink> open() {
    Netlink nl;
    nl.fd_.reset(::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE));
    if (!nl.fd_.valid()) return failErrno("netlink socket");
    sockaddr_nl local{};
    local.nl_family = AF_NETLINK;
    if (::bind(nl.fd_.get(), reinterpret_cast<sockaddr*>(&local), sizeof local) != 0) {
      return failErrno("bind netlink socket");
    }
    return nl;
  }

  // Sends `m` and waits for its acknowledgement. Errors: kIo naming `what`.
  Result<void> call(Message& m, const std::string& what) {
    std::vector<char>& bytes = m.bytes();
    m.hdr()->nlmsg_seq = ++seq_;
    sockaddr_nl kernel{};
    kernel.nl_family = AF_NETLINK;
    if (::sendto(fd_.get(), bytes.data(), bytes.size(), 0, reinterpret_cast<sockaddr*>(&kernel),
                 sizeof kernel) < 0) {
      return failErrno(what);
    }
    char buf[8192];
    for (;;) {
      ssize_t n = ::recv(fd_.get(), buf, sizeof buf, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return failErrno(what);
      int len = static_cast<int>(n);
      for (auto* h = reinterpret_cast<nlmsghdr*>(buf); NLMSG_OK(h, len); h = NLMSG_NEXT(h, len)) {
        if (h->nlmsg_seq != seq_ || h->nlmsg_type != NLMSG_ERROR) continue;
        const int err = -static_cast<nlmsgerr*>(NLMSG_DATA(h))->error;
        if (err == 0) return {};
        return failErrno(what, err);
      }
    }
  }

 private:
  UniqueFd fd_;
  uint32_t seq_ = 0;
};

// The calling thread in namespace `fd` until this goes, then back where it was.
class Inside {
 public:
  static Result<Inside> enter(int fd) {
    Inside in;
    in.back_.reset(::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC));
    if (!in.back_.valid()) return failErrno("open this thread's network namespace");
    if (fd >= 0 && ::setns(fd, CLONE_NEWNET) != 0) return failErrno("enter a network namespace");
    return in;
  }
  Inside(Inside&&) = default;
  ~Inside() {
    if (back_.valid() && ::setns(back_.get(), CLONE_NEWNET) != 0) {
      // The thread would go on in the job's network: nothing it did after could be trusted.
      std::fprintf(stderr, "cohort: cannot return to this process's network namespace\n");
      std::abort();
    }
  }

 private:
  Inside() = default;
  UniqueFd back_;
};

// A new network namespace, held by the descriptor returned.
Result<UniqueFd> newNamespace() {
  COHORT_ASSIGN(Inside in, Inside::enter(-1));
  if (::unshare(CLONE_NEWNET) != 0) {
    return fail(errno == EPERM ? Code::kFailedPrecondition : Code::kIo,
                std::string("make a network namespace: ") + std::strerror(errno));
  }
  UniqueFd fd(::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return failErrno("open the new network namespace");
  return fd;
}

ifinfomsg linkBody(int index = 0, unsigned up = 0) {
  ifinfomsg body{};
  body.ifi_family = AF_UNSPEC;
  body.ifi_index = index;
  body.ifi_flags = up;
  body.ifi_change = up;
  return body;
}

Result<void> setUp(Netlink& nl, const std::string& name) {
  ifinfomsg body = linkBody(0, IFF_UP);
  Message m(RTM_NEWLINK, 0, &body, sizeof body);
  m.attr(IFLA_IFNAME, name);
  return nl.call(m, "bring up " + name);
}

Result<void> addBridge(Netlink& nl, const std::string& name) {
  ifinfomsg body = linkBody();
  Message m(RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL, &body, sizeof body);
  m.attr(IFLA_IFNAME, name);
  const size_t info = m.begin(IFLA_LINKINFO);
  m.attr(IFLA_INFO_KIND, std::string("bridge"));
  m.end(info);
  return nl.call(m, "make bridge " + name);
}

// A veth pair: `name` here (in `master`'s bridge when > 0), `peer` in the namespace `peer_ns`.
Result<void> addVeth(Netlink& nl, const std::string& name, const std::string& peer, int peer_ns,
                     int master) {
  ifinfomsg body = linkBody();
  Message m(RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL, &body, sizeof body);
  m.attr(IFLA_IFNAME, name);
  if (master > 0) m.attr32(IFLA_MASTER, static_cast<uint32_t>(master));
  const size_t info = m.begin(IFLA_LINKINFO);
  m.attr(IFLA_INFO_KIND, std::string("veth"));
  const size_t data = m.begin(IFLA_INFO_DATA);
  const size_t peer_at = m.begin(VETH_INFO_PEER);
  ifinfomsg peer_body = linkBody();
  m.raw(&peer_body, sizeof peer_body);
  m.attr(IFLA_IFNAME, peer);
  m.attr32(IFLA_NET_NS_FD, static_cast<uint32_t>(peer_ns));
  m.end(peer_at);
  m.end(data);
  m.end(info);
  return nl.call(m, "make the link " + name);
}

Result<void> addAddress(Netlink& nl, const std::string& name, uint32_t address, int prefix) {
  const unsigned index = ::if_nametoindex(name.c_str());
  if (index == 0) return failErrno("find " + name);
  ifaddrmsg body{};
  body.ifa_family = AF_INET;
  body.ifa_prefixlen = static_cast<unsigned char>(prefix);
  body.ifa_index = index;
  Message m(RTM_NEWADDR, NLM_F_CREATE | NLM_F_EXCL, &body, sizeof body);
  const uint32_t net = htonl(address);
  m.attr(IFA_LOCAL, &net, sizeof net);
  m.attr(IFA_ADDRESS, &net, sizeof net);
  return nl.call(m, "give " + name + " the address " + dotted(address));
}

Result<void> addDefaultRoute(Netlink& nl, uint32_t gateway) {
  rtmsg body{};
  body.rtm_family = AF_INET;
  body.rtm_table = RT_TABLE_MAIN;
  body.rtm_protocol = RTPROT_BOOT;
  body.rtm_scope = RT_SCOPE_UNIVERSE;
  body.rtm_type = RTN_UNICAST;
  Message m(RTM_NEWROUTE, NLM_F_CREATE | NLM_F_EXCL, &body, sizeof body);
  const uint32_t gw = htonl(gateway);
  m.attr(RTA_GATEWAY, &gw, sizeof gw);
  return nl.call(m, "route through " + dotted(gateway));
}

// Writes `value` to a sysctl of the calling thread's network namespace.
Result<void> sysctl(const std::string& path, const std::string& value) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd.valid()) return failErrno("open " + path);
  return writeAll(fd.get(), value);
}

// Runs nft with `rules` on its stdin, in the namespace `ns` (-1: ours).
Result<void> nft(const std::string& rules, int ns) {
  if (::access(kNft, X_OK) != 0) {
    return fail(Code::kFailedPrecondition,
                std::string("--job-network nat needs nftables (") + kNft + "): apt-get install nftables");
  }
  UniqueFd in(::memfd_create("cohort-nft", MFD_CLOEXEC));
  if (!in.valid()) return failErrno("memfd_create");
  COHORT_TRY(writeAll(in.get(), rules));
  ::lseek(in.get(), 0, SEEK_SET);
  SpawnRequest req;
  req.argv = {kNft, "-f", "-"};
  req.env = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin"};
  req.stdin_fd = in.get();
  req.netns_fd = ns;
  req.new_process_group = false;
  COHORT_ASSIGN(Captured run, runCaptured(std::move(req), Millis(10000)));
  if (run.status.shellCode() != 0) {
    return fail(Code::kIo, "nft: " + std::string(trim(run.err.empty() ? run.out : run.err)));
  }
  return {};
}

// The machine's addresses in 10.89.0.0/16: the uplinks other jobs hold.
std::vector<uint32_t> uplinksInUse() {
  std::vector<uint32_t> used;
  for (const InterfaceAddress& a : ipv4Addresses()) {
    const uint32_t ip = ntohl(a.address);
    if ((ip & 0xffff0000u) == kUplinks) used.push_back(ip & ~3u);
  }
  return used;
}

}  // namespace

Result<Egress> parseEgress(const std::string& text) {
  if (text == "isolated") return Egress::kIsolated;
  if (text == "nat") return Egress::kNat;
  return fail(Code::kInvalidArgument, "expected isolated or nat, got '" + text + "'");
}

const char* egressName(Egress egress) { return egress == Egress::kNat ? "nat" : "isolated"; }

bool JobNetwork::available() {
  if (::geteuid() != 0) return false;
  static const bool works = [] { return newNamespace().has_value(); }();
  return works;
}

std::string JobNetwork::address(int node) const {
  return dotted(kSubnet + 2 + static_cast<uint32_t>(node));
}

JobNetwork::~JobNetwork() {
  // The namespaces go with their last descriptor and process; the uplink's end on the machine
  // goes with its peer in the hub. Its rule is removed here.
  if (!uplink_.empty()) {
    (void)nft("delete table ip " + uplink_ + "\n", -1);
  }
}

Result<JobNetwork> JobNetwork::create(int nodes, Egress egress, const std::string& tag) {
  if (nodes < 1 || nodes > kMaxNodes) {
    return fail(Code::kInvalidArgument, "a job network of " + std::to_string(nodes) + " nodes");
  }
  JobNetwork net;
  net.egress_ = egress;
  COHORT_ASSIGN(net.hub_, newNamespace());
  for (int i = 0; i < nodes; ++i) {
    COHORT_ASSIGN(UniqueFd ns, newNamespace());
    net.nodes_.push_back(std::move(ns));
  }
  const uint32_t gateway = kSubnet + 1;
  {
    COHORT_ASSIGN(Inside in, Inside::enter(net.hub_.get()));
    COHORT_ASSIGN(Netlink nl, Netlink::open());
    COHORT_TRY(addBridge(nl, "br0"));
    const int bridge = static_cast<int>(::if_nametoindex("br0"));
    if (bridge == 0) return failErrno("find br0");
    if (egress == Egress::kNat) COHORT_TRY(addAddress(nl, "br0", gateway, kPrefix));
    COHORT_TRY(setUp(nl, "br0"));
    for (int i = 0; i < nodes; ++i) {
      const std::string port = "n" + std::to_string(i);
      COHORT_TRY(addVeth(nl, port, kInterface, net.nodes_[i].get(), bridge));
      COHORT_TRY(setUp(nl, port));
    }
  }
  for (int i = 0; i < nodes; ++i) {
    COHORT_ASSIGN(Inside in, Inside::enter(net.nodes_[i].get()));
    COHORT_ASSIGN(Netlink nl, Netlink::open());
    COHORT_TRY(setUp(nl, "lo"));
    COHORT_TRY(addAddress(nl, kInterface, kSubnet + 2 + static_cast<uint32_t>(i), kPrefix));
    COHORT_TRY(setUp(nl, kInterface));
    if (egress == Egress::kNat) COHORT_TRY(addDefaultRoute(nl, gateway));
  }
  if (egress == Egress::kIsolated) return net;

  // kNat: the hub's uplink to the machine, a /30 of 10.89.0.0/16 no other job's holds (the
  // choice is made under a lock, so two jobs starting at once do not take the same one).
  UniqueFd lock(::open("/run/cohort-job-network.lock", O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (!lock.valid() || ::flock(lock.get(), LOCK_EX) != 0) return failErrno("lock the uplinks");
  const std::vector<uint32_t> used = uplinksInUse();
  uint32_t base = 0;
  const uint32_t start = static_cast<uint32_t>(std::hash<std::string>{}(tag) % 16384);
  for (uint32_t k = 0; k < 16384 && !base; ++k) {
    const uint32_t candidate = kUplinks + (((start + k) % 16384) << 2);
    if (std::find(used.begin(), used.end(), candidate) == used.end()) base = candidate;
  }
  if (!base) return fail(Code::kFailedPrecondition, "no free uplink in 10.89.0.0/16");
  char hex[16];
  std::snprintf(hex, sizeof hex, "%08x",
                static_cast<unsigned>(std::hash<std::string>{}(tag) & 0xffffffffu));
  const std::string name = std::string("cj") + hex;
  {
    COHORT_ASSIGN(Netlink nl, Netlink::open());
    COHORT_TRY(addVeth(nl, name, "up0", net.hub_.get(), 0));
    net.uplink_ = name;
    COHORT_TRY(addAddress(nl, name, base + 1, 30));
    COHORT_TRY(setUp(nl, name));
    COHORT_TRY(sysctl("/proc/sys/net/ipv4/ip_forward", "1"));
  }
  {
    COHORT_ASSIGN(Inside in, Inside::enter(net.hub_.get()));
    COHORT_ASSIGN(Netlink nl, Netlink::open());
    COHORT_TRY(addAddress(nl, "up0", base + 2, 30));
    COHORT_TRY(setUp(nl, "up0"));
    COHORT_TRY(addDefaultRoute(nl, base + 1));
    COHORT_TRY(sysctl("/proc/sys/net/ipv4/ip_forward", "1"));
  }
  // The hub hands the nodes' packets out as its own; the machine hands the hub's out as its
  // own, and forwards nothing back in that was not an answer.
  COHORT_TRY(nft("table ip nat {\n chain post {\n  type nat hook postrouting priority 100;\n"
                 "  oifname \"up0\" masquerade\n }\n}\n",
                 net.hub_.get()));
  COHORT_TRY(nft("table ip " + name + " {\n chain post {\n  type nat hook postrouting priority 100;\n"
                 "  ip saddr " + dotted(base + 2) + " oifname != \"" + name + "\" masquerade\n }\n"
                 " chain inbound {\n  type filter hook forward priority 0;\n"
                 "  oifname \"" + name + "\" ct state established,related accept\n"
                 "  oifname \"" + name + "\" drop\n }\n}\n",
                 -1));
  return net;
}

}  // namespace cohort::proc
