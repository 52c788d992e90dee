// Port leasing: a TCP port on this machine that no other cohort job holds and nothing listens
// on, kept until the lease is dropped. Two jobs started at once never get the same port: a lock
// file under the lease directory (flock, released automatically when the process dies) makes it
// ours among cohort processes. The port comes from outside the kernel's ephemeral range: the
// rank binds it seconds later (after importing torch), and in between any connect() or bind to
// port 0 on the machine (another job's gloo, NCCL, a browser) could be handed a port from that
// range, and the rank's bind would fail with "Address already in use".
#pragma once

#include <string>
#include <vector>

#include "util/fd.h"
#include "util/result.h"

namespace cohort::plan {

class PortLease {
 public:
  // Leases a free port on `addr`. `lock_dir` holds the lock files (created if missing).
  // Errors: kIo when no socket can be bound or the directory cannot be written.
  static Result<PortLease> acquire(const std::string& addr, const std::string& lock_dir);
  // Leases `port` itself (debug.port: a port the IDE's configuration names). Errors:
  // kUnavailable when something listens on it or another cohort job holds it, kIo as above.
  static Result<PortLease> acquireExact(const std::string& addr, int port,
                                        const std::string& lock_dir);

  int port() const { return port_; }

 private:
  int port_ = 0;
  UniqueFd lock_;
};

// A range of ports, both ends included.
struct PortRange {
  int lo = 0;
  int hi = 0;
};

// The kernel's ephemeral range (net.ipv4.ip_local_port_range).
PortRange ephemeralPorts();
// The ports acquire() picks from: 10000-65535 less `ephemeral`; empty when fewer than 1000 are
// left, and then acquire() takes the kernel's pick.
std::vector<PortRange> leasablePorts(PortRange ephemeral);

// The default lock directory: $XDG_RUNTIME_DIR/cohort-ports or /tmp/cohort-ports-<uid>.
std::string defaultLeaseDir();

}  // namespace cohort::plan
