// The node agent (`cohort exec`): one per node of a job. It dials the job's coordinator, receives
// its node's part of the plan, and on "start" spawns its ranks (each under the Unix identity its
// plan names), ships their output to the coordinator (which keeps the logs and echoes it to the
// console), watches them (one event loop over pidfds, a signalfd, timerfds, the ranks' pipes and
// the control channel), reports every exit with its time and last log lines, and every 2 s says
// how each rank is doing (last output, last cohort.heartbeat(), CPU time, memory). On "stop" it
// sends the job's stop signal (SIGTERM by default) to every rank's process group and SIGKILL after
// the grace period. Where the machine allows, the node's ranks run in a cgroup of their own, killed
// whole when an attempt ends and, by a watchdog process, when the agent dies (even by kill -9);
// elsewhere it is a child subreaper: processes that escape with setsid come back to it and are
// killed when the attempt ends. Either way no process of the job survives the job. If the
// coordinator disappears, or the agent gets SIGTERM, it stops its ranks and exits (telling a
// coordinator that is still there, which stops every other node's ranks too: a preemption).
// What it decides about stopping its ranks and leaving is agent/agent_decisions.h; this is the
// shell that does it. Single-threaded except for the console writer.
#pragma once

#include <string>

namespace cohort::agent {

struct AgentOptions {
  std::string coordinator_addr = "127.0.0.1";
  int coordinator_port = 0;
  int node = 0;
  std::string secret;
  // A socket already connected to the coordinator, used instead of dialling (an agent forked by
  // the coordinator's process); -1: dial.
  int coordinator_fd = -1;
  // The write end of a cgroup watchdog's pipe that the coordinator started for its forked agents
  // (proc::CgroupWatchdog::adopt), and where it found that cohort makes cgroups
  // (proc::cgroupBase()); -1: the agent finds that and starts its own.
  int watchdog_fd = -1;
  std::string cgroup_base;
  // How this node's address is chosen (spec::Network); it is sent with hello.
  std::string interface, cidr;
  // The node's own network namespace (proc/job_network.h) its ranks join; -1: the agent's.
  int netns_fd = -1;
};

// Runs the node agent as the process's whole work: until the coordinator says "exit" or is gone,
// then ends the process with the agent's exit code (the job's, which the coordinator sends with
// "exit"; 1 when it lost the coordinator). Returns only when the agent could not run (the
// coordinator could not be reached, a setup failure), with 1, having said why on stderr
// ("cohort exec: node 3: ...").
int agentMain(const AgentOptions& options);

}  // namespace cohort::agent
