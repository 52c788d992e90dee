// Port leasing: a TCP port on this machine that no other cohort job holds and nothing listens
// on, kept until the lease is dropped. Two jobs started at once never get the same port: the
// kernel picks a free port (bind to port 0) and a lock file under the lease directory (flock,
// released automatically when the process dies) makes it ours among cohort processes.
#pragma once

#include <string>

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

// The default lock directory: $XDG_RUNTIME_DIR/cohort-ports or /tmp/cohort-ports-<uid>.
std::string defaultLeaseDir();

}  // namespace cohort::plan
