#include "server/tunnels.h"

#include "job/session.h"
#include "util/text.h"

namespace cohort::server {

Result<TunnelTo> decideTunnel(const TunnelAsk& ask) {
  const std::string job = "job '" + ask.job_id + "'";
  if (!ask.caller.admin && ask.caller.account != ask.job_account) {
    return fail(Code::kNotFound, "no " + job);
  }
  if (ask.job_final) return fail(Code::kFailedPrecondition, job + " has ended");
  if (!ask.job_started) return fail(Code::kFailedPrecondition, job + " has not started yet");
  if (!ask.service.empty()) {
    if (!ask.session) {
      return fail(Code::kNotFound, job + " is not a session (cohort session ls lists yours)");
    }
    const int port = job::sessionPort(ask.service);
    if (port == 0) {
      std::string known;
      for (const job::SessionService& s : job::kSessionServices) {
        known += (known.empty() ? "" : ", ") + std::string(s.name);
      }
      return fail(Code::kNotFound,
                  "session '" + ask.job_id + "' has no service '" + ask.service + "' (" + known + ")");
    }
    return TunnelTo{0, port};
  }
  const job::DebugTarget* target = nullptr;
  for (const job::DebugTarget& t : ask.paused) {
    if (t.rank == ask.rank) target = &t;
  }
  if (!target) {
    return fail(Code::kNotFound, job + ": rank " + std::to_string(ask.rank) +
                                     " does not wait for a debugger (cohort debug " + ask.job_id +
                                     " lists the ranks that do)");
  }
  const std::string prefix = "127.0.0.1:";
  auto port = startsWith(target->address, prefix)
                  ? parseInt(target->address.substr(prefix.size()))
                  : Result<int>(fail(Code::kInvalidArgument, ""));
  if (!port || *port < 1 || *port > 65535) {
    return fail(Code::kFailedPrecondition,
                job + ": " + target->name + " does not listen on its node's loopback (" +
                    target->address + "): it dials its IDE (debug.connect), nothing to attach to");
  }
  return TunnelTo{target->node, *port};
}

}  // namespace cohort::server
