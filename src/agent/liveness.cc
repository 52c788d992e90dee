#include "agent/liveness.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "proc/spawn.h"
#include "util/fd.h"

namespace cohort::agent {

std::string loadNote() {
  auto text = readFile("/proc/loadavg");
  if (!text) return "";
  const double load = std::strtod(text->c_str(), nullptr);
  const long cpus = ::sysconf(_SC_NPROCESSORS_ONLN);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f", load);
  return std::string("; this machine's load average is ") + buf + " over " +
         std::to_string(cpus) +
         " CPU(s): if the other side is only slow, raise policy.heartbeat_timeout "
         "(--heartbeat-timeout)";
}

bool processStopped(int pid) {
  const std::vector<std::string> fields = proc::statFields(pid);
  return !fields.empty() && !fields[0].empty() && (fields[0][0] == 'T' || fields[0][0] == 't');
}

}  // namespace cohort::agent
