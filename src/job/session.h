// A session's services (docs/sessions.md): what rank 0 of a session job listens on, on its
// node's loopback, inside the job's own network. The server's tunnels (server/tunnels.h) and
// its JupyterLab proxy (server/jupyter_proxy.h) reach them by these names; the session's
// program (cli/session_host.cc) listens on these ports. Fixed ports are safe there: no other
// job shares the network. Pure data.
#pragma once

#include <string>
#include <string_view>

namespace cohort::job {

struct SessionService {
  std::string_view name;
  int port;
};

// ssh: OpenSSH's sshd, in every session. jupyter: JupyterLab, in a session started with
// session.jupyter (cohort session start --jupyter).
inline constexpr SessionService kSessionServices[] = {{"ssh", 2222}, {"jupyter", 8888}};

// The port of service `name`, or 0 when a session has none of that name.
inline int sessionPort(std::string_view name) {
  for (const SessionService& s : kSessionServices) {
    if (s.name == name) return s.port;
  }
  return 0;
}

// Where the server's proxy serves session `job_id`'s JupyterLab: its base URL (Jupyter's
// ServerApp.base_url), which every path of the lab starts with.
inline std::string jupyterBaseUrl(std::string_view job_id) {
  return "/v1/jobs/" + std::string(job_id) + "/session/jupyter/";
}

}  // namespace cohort::job
