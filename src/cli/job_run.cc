#include "cli/job_run.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>

#include "agent/root_cause.h"
#include "job/layout.h"
#include "plan/python_helpers.h"
#include "util/fd.h"
#include "util/text.h"

namespace cohort::cli {

Result<void> makeJobDirs(const std::string& job_dir, bool made_by_server, int uid, int gid) {
  const job::Layout layout(job_dir);
  COHORT_TRY(makeDirs(job_dir.substr(0, job_dir.rfind('/'))));
  if (::mkdir(job_dir.c_str(), 0755) < 0 && !(made_by_server && errno == EEXIST)) {
    return failErrno("create '" + job_dir + "'");
  }
  for (const std::string& dir : {layout.filesDir(), layout.logsDir()}) {
    if (::mkdir(dir.c_str(), 0755) < 0) return failErrno("create '" + dir + "'");
  }
  for (const std::string& dir : {layout.workDir(), layout.outputDir()}) {
    if (::mkdir(dir.c_str(), 0755) < 0) return failErrno("create '" + dir + "'");
    if (uid >= 0 && ::chown(dir.c_str(), uid, gid) < 0) return failErrno("chown '" + dir + "'");
  }
  return {};
}

Result<std::optional<proc::JobNetwork>> makeJobNetwork(PreparedJob& job,
                                                      const JobOptions& options) {
  const std::string& mode = options.job_network;
  if (mode == "host") return std::optional<proc::JobNetwork>();
  const bool asked = !mode.empty();
  const auto refuse = [&](const std::string& why) -> Result<std::optional<proc::JobNetwork>> {
    if (!asked) return std::optional<proc::JobNetwork>();
    return fail(Code::kInvalidArgument, "--job-network " + mode + ": " + why);
  };
  proc::Egress egress = proc::Egress::kIsolated;
  if (asked) {
    auto parsed = proc::parseEgress(mode);
    if (!parsed) return fail(Code::kInvalidArgument, "--job-network: expected isolated, nat or host, got '" + mode + "'");
    egress = *parsed;
  }
  if (!job.context.isolate) return refuse("a job's own network is part of the sandbox: add --isolate");
  if (job.spec.backend != spec::Backend::kLocal) {
    return refuse("only the nodes simulated on this machine get a network of their own");
  }
  // A server's job (--report) is attached through the server, which asks this coordinator for
  // a connection inside the node's namespace (agent/job_ports.h); on this machine, nothing
  // would reach the debugger.
  if (job.spec.debug.enabled && !options.report) {
    return refuse("a debugged rank's debugger is reached on this machine's loopback, which the "
                  "job's own network keeps from it: use --job-network host");
  }
  if (!proc::JobNetwork::available()) {
    return refuse("only root can make network namespaces");
  }
  const int nodes = spec::totalNodes(job.spec);
  auto made = proc::JobNetwork::create(nodes, egress, job.context.job_id);
  if (!made) return withContext(made.error(), "the job's network");
  plan::PlanContext& ctx = job.context;
  ctx.hosts.clear();
  ctx.interfaces.clear();
  for (int n = 0; n < nodes; ++n) {
    ctx.hosts.push_back(made->address(n));
    ctx.interfaces.push_back(proc::JobNetwork::kInterface);
  }
  ctx.master_addr = made->address(0);
  // Fixed ports, as on a cluster: no other job is on this network.
  ctx.ports.clear();
  for (int i = 0; i < plan::portsNeeded(job.spec); ++i) ctx.ports.push_back(29500 + i);
  return std::optional<proc::JobNetwork>(std::move(*made));
}

Result<void> leasePorts(PreparedJob& job, std::vector<plan::PortLease>& leases) {
  // A job with a network of its own has its ports there already.
  const int own = static_cast<int>(job.context.ports.size());
  for (int i = own; i < plan::portsNeeded(job.spec); ++i) {
    COHORT_ASSIGN(plan::PortLease lease,
                  plan::PortLease::acquire(job.context.master_addr, plan::defaultLeaseDir()));
    job.context.ports.push_back(lease.port());
    leases.push_back(std::move(lease));
  }
  const spec::Debug& d = job.spec.debug;
  for (int r = 0; r < plan::debugPortsNeeded(job.spec); ++r) {
    auto lease = d.port != 0 ? plan::PortLease::acquireExact("127.0.0.1", d.port + r,
                                                             plan::defaultLeaseDir())
                             : plan::PortLease::acquire("127.0.0.1", plan::defaultLeaseDir());
    if (!lease) {
      return fail(Code::kFailedPrecondition,
                  spec::fieldLabel(job.spec, d.port != 0 ? "debug.port" : "debug") +
                      "no port for rank " + std::to_string(r) +
                      "'s debugger: " + lease.error().message);
    }
    job.context.debug_ports.push_back(lease->port());
    leases.push_back(std::move(*lease));
  }
  return {};
}

Result<void> writePlan(const plan::Plan& plan) {
  auto write = [](const std::string& path, std::string_view content) -> Result<void> {
    auto written = makeDirs(path.substr(0, path.rfind('/')));
    if (written) written = writeFileAtomic(path, content, false);
    if (!written) return withContext(written.error(), path.substr(path.rfind('/') + 1));
    return {};
  };
  COHORT_TRY(write(job::Layout(plan.job_dir).planFile(), plan::toJson(plan)));
  for (const plan::GeneratedFile& f : plan.files) COHORT_TRY(write(f.path, f.content));
  for (const plan::GeneratedFile& f : plan::pythonHelperFiles(plan.job_dir)) {
    COHORT_TRY(write(f.path, f.content));
  }
  return {};
}

agent::Placement placeOnHosts(const PreparedJob& job) {
  return [&job](const std::vector<HostAddress>& hosts) -> Result<plan::Plan> {
    plan::PlanContext ctx = job.context;
    ctx.hosts.clear();
    for (const HostAddress& h : hosts) {
      ctx.hosts.push_back(h.address);
      ctx.interfaces.push_back(h.interface);
    }
    ctx.master_addr = hosts.at(0).address;
    COHORT_ASSIGN(plan::Plan placed, plan::makePlan(job.spec, ctx));
    COHORT_TRY(writePlan(placed));
    return placed;
  };
}

namespace {

// The last `count` lines of the file at `path` (its last 64 KiB at most), read without following
// a link; none when it cannot be read.
std::vector<std::string> lastLines(const std::string& path, size_t count) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd.valid()) return {};
  const off_t size = ::lseek(fd.get(), 0, SEEK_END);
  const off_t from = std::max<off_t>(0, size - 65536);
  std::string text(static_cast<size_t>(size - from), '\0');
  const ssize_t n = ::pread(fd.get(), text.data(), text.size(), from);
  if (n <= 0) return {};
  text.resize(static_cast<size_t>(n));
  std::vector<std::string> lines = split(text, '\n');
  while (!lines.empty() && lines.back().empty()) lines.pop_back();
  if (lines.size() > count) lines.erase(lines.begin(), lines.end() - static_cast<long>(count));
  return lines;
}

}  // namespace

void printOutcome(const plan::Plan& plan, const agent::JobOutcome& outcome, bool progress) {
  if (outcome.state == agent::JobState::kSucceeded) {
    if (progress) {
      std::fprintf(stderr, "cohort: job %s succeeded; outputs in %s/output\n", plan.job_id.c_str(),
                   plan.job_dir.c_str());
    }
    return;
  }
  std::fprintf(stderr, "cohort: job %s %s: %s (exit code %d)\n", plan.job_id.c_str(),
               agent::jobStateName(outcome.state), outcome.reason.c_str(), outcome.exit_code);
  if (!outcome.diagnosis.empty()) std::fprintf(stderr, "%s", outcome.diagnosis.c_str());
  if (outcome.root_cause) {
    std::string report = agent::formatRootCause(*outcome.root_cause, outcome.exits);
    std::fprintf(stderr, "%s", report.c_str());
  } else if (outcome.lost_node) {
    // The lost node's ranks' last lines, from the logs this coordinator wrote for them.
    std::vector<std::vector<std::string>> tails;
    for (const std::string& log : outcome.lost_node->logs) tails.push_back(lastLines(log, 5));
    std::fprintf(stderr, "%s",
                 agent::formatLostNode(*outcome.lost_node, tails, outcome.exits).c_str());
  }
  std::fprintf(stderr, "cohort: logs in %s/logs\n", plan.job_dir.c_str());
}

}  // namespace cohort::cli
