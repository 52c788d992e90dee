// Tunnels: who may open which tunnel into a job's network, decided apart from doing it. A
// tunnel carries one TCP connection from a client of the API (cohort debug --attach, an IDE
// behind it; cohort session ssh, ssh behind it) to a port inside the job's network: a paused
// rank's debugger, or a service of a session (job/session.h), through the server's HTTP edge (an HTTP
// Upgrade: http.h) and the job's coordinator (agent/job_ports.h), so that the port is never
// reachable from anywhere else. This file is the decision: pure, typed, a test per rule
// (tunnels_test.cc). The route that opens one (api_jobs.cc) gathers what it needs, asks
// decideTunnel, and does what it says; how many one account holds at once is AccountLimits'
// (counting and taking in one step). Thread-safe (no state).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "job/debug.h"
#include "server/access.h"
#include "util/result.h"

namespace cohort::server {

// What is asked, and what the server knows at that moment.
struct TunnelAsk {
  Caller caller;
  std::string job_id;
  std::string job_account;  // the job's owner
  bool job_final = false;   // the job has ended (or never started: no coordinator)
  bool job_started = false;  // it has a coordinator
  int rank = -1;             // the paused rank asked for; or
  std::string service;       // the session's service asked for ("ssh"): then `rank` is unused
  bool session = false;      // the job is a session
  std::vector<job::DebugTarget> paused;  // the job's ranks that wait for a debugger or have one
};

// The Upgrade header's protocol of a tunnel.
inline constexpr const char* kTunnelProtocol = "cohort-tunnel";

// Where to connect: node `node`'s port `port` of the job's network.
struct TunnelTo {
  int node = 0;
  int port = 0;
};

// The tunnel `ask` may have, or why not:
// - the caller is neither the job's account nor an admin: kNotFound, the words of a job that
//   does not exist (another account's job never shows that it exists);
// - the job has ended, or has not started: kFailedPrecondition;
// - a service asked of a job that is not a session, or one a session has not: kNotFound;
//   else node 0's port of that service;
// - `rank` does not wait for a debugger nor has one: kNotFound, saying how to list those that do;
// - the rank dials its IDE (debug.connect) rather than listening, or listens anywhere but its
//   node's loopback: kFailedPrecondition.
Result<TunnelTo> decideTunnel(const TunnelAsk& ask);

}  // namespace cohort::server
