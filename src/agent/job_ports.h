// JobPorts: how the server reaches a TCP port inside a job's network (a paused rank's debugger)
// without widening that network. The job's coordinator, which holds its nodes' network
// namespaces, listens on a Unix socket in a directory of its own user's alone
// (`<job>/ports/socket`, mode 0700); the server asks it for a node's port and gets back a
// socket already connected to 127.0.0.1:PORT inside that node's namespace (SCM_RIGHTS), or one
// line saying why not. Bytes then flow between the server and the port directly: the
// coordinator relays nothing, and no address outside the job ever reaches the port.
//
// The coordinator trusts the asker because only its own user can reach the socket, and the
// asker checks that the socket's peer is of its own user (SO_PEERCRED): the server (root) never
// takes a descriptor from a process of a job's account. Who may ask for which port is the
// server's decision (server/tunnels.h); this seam only does it.
//
// JobPortsEndpoint is used from the coordinator's loop thread; connectJobPort from any thread.
#pragma once

#include <string>
#include <vector>

#include "util/fd.h"
#include "util/result.h"
#include "util/text.h"

namespace cohort::agent {

class JobPortsEndpoint {
 public:
  // Listens at `job_dir`'s ports socket (the directory made 0700, a stale socket replaced).
  // `node_namespaces[i]` is node i's network namespace (not owned; -1: this process's own,
  // a job without a network of its own). Errors: kIo naming the path.
  static Result<JobPortsEndpoint> listen(const std::string& job_dir,
                                         std::vector<int> node_namespaces);
  int fd() const { return listener_.get(); }
  // Answers one asker (call when fd() is readable). Never blocks for long: an asker has 2 s to
  // say what it wants.
  void answer();

  JobPortsEndpoint(JobPortsEndpoint&&) = default;
  JobPortsEndpoint& operator=(JobPortsEndpoint&&) = default;
  ~JobPortsEndpoint();

 private:
  JobPortsEndpoint() = default;
  UniqueFd listener_;
  UniqueFd dir_;  // the socket is named through it (a job's path can pass sun_path's 108)
  std::vector<int> namespaces_;
};

// A socket connected to 127.0.0.1:`port` in node `node`'s network of the job whose directory
// is `job_dir`, from that job's coordinator. Errors: kUnavailable when the job has no
// coordinator listening (it has not started, or has ended) or the port refuses the connection
// (with the coordinator's words), kPermissionDenied when the socket's peer is not of this
// process's user, kIo otherwise.
Result<UniqueFd> connectJobPort(const std::string& job_dir, int node, int port,
                                Millis timeout = Millis(5000));

// The ports socket's directory and name under a job's directory.
inline constexpr const char* kJobPortsDir = "ports";
inline constexpr const char* kJobPortsSocket = "socket";

}  // namespace cohort::agent
