// A session's services (docs/sessions.md): what rank 0 of a session job listens on, on its
// node's loopback, inside the job's own network. The server's tunnels (server/tunnels.h) reach
// them by these names; the session's program (cli/session_host.cc) listens on these ports.
// Fixed ports are safe there: no other job shares the network. Pure data.
#pragma once

#include <string_view>

namespace cohort::job {

struct SessionService {
  std::string_view name;
  int port;
};

inline constexpr SessionService kSessionServices[] = {{"ssh", 2222}};

// The port of service `name`, or 0 when a session has none of that name.
inline int sessionPort(std::string_view name) {
  for (const SessionService& s : kSessionServices) {
    if (s.name == name) return s.port;
  }
  return 0;
}

}  // namespace cohort::job
