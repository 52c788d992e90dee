// A job's own network: each of its simulated nodes gets a network namespace of its own, joined
// to the others by a veth pair into a bridge that lives in one more namespace, the job's hub.
// So a node has its own loopback and one address on a network only the job's nodes are on
// (10.88.0.0/16: node i is 10.88.0.0 + 2 + i, the hub's bridge 10.88.0.1), the same for every
// job since no two jobs' networks meet: the ranks of a job reach each other (MASTER_ADDR is node
// 0's address, a fixed port like 29500 is fine), and nothing of another job, another account or
// the machine reaches any of its ports, loopback included.
//
// Egress is the admin's choice: `kIsolated` (the default) gives the nodes no route out at all;
// `kNat` gives them a default route through the hub, which hands their packets to the machine
// over a veth pair of its own and masquerades them (nft), and the machine forwards them (it
// sets net.ipv4.ip_forward), so they reach what the machine reaches (docs/security.md).
//
// The namespaces are held by descriptors only (no name in /run/netns): the kernel removes them,
// their links with them, when the last process and descriptor of each is gone, so a coordinator
// that dies leaves nothing. Joining a node's namespace is proc::SpawnRequest::netns_fd. Needs
// root (CAP_SYS_ADMIN and CAP_NET_ADMIN). The configuration talks rtnetlink itself: one job's
// network costs milliseconds, not a program per link. Not thread-safe: one thread makes it.
#pragma once

#include <string>
#include <vector>

#include "util/fd.h"
#include "util/result.h"

namespace cohort::proc {

enum class Egress { kIsolated, kNat };

// "isolated" | "nat"; kInvalidArgument for anything else.
Result<Egress> parseEgress(const std::string& text);
const char* egressName(Egress egress);

class JobNetwork {
 public:
  // Makes the network of a job with `nodes` nodes (1..1024). `tag` (the job's id) names the
  // machine's side of a kNat network's link and its nft table ("cj" + 8 hex digits of a hash). Errors: kFailedPrecondition when
  // this process may not make namespaces (not root, or a kernel without them), kIo naming the
  // step that failed (nothing is left behind).
  static Result<JobNetwork> create(int nodes, Egress egress, const std::string& tag);

  // Whether this process can make a job network (root, and a kernel with network namespaces).
  static bool available();

  int nodes() const { return static_cast<int>(nodes_.size()); }
  // Node `node`'s namespace, for setns (the descriptor stays this object's).
  int nodeNamespace(int node) const { return nodes_.at(node).get(); }
  // Node `node`'s address, and the name of its interface in its namespace ("eth0").
  std::string address(int node) const;
  static constexpr const char* kInterface = "eth0";
  Egress egress() const { return egress_; }

  JobNetwork(JobNetwork&&) = default;
  JobNetwork& operator=(JobNetwork&&) = default;
  ~JobNetwork();

 private:
  JobNetwork() = default;
  Egress egress_ = Egress::kIsolated;
  UniqueFd hub_;
  std::vector<UniqueFd> nodes_;
  std::string uplink_;  // kNat: the machine's side of the hub's link, removed with us
};

}  // namespace cohort::proc
