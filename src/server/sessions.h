// Sessions (docs/sessions.md): a session is a job of its account with `session:` in its job
// file (spec/job_spec.h), scheduled, limited and sandboxed like any job; what makes it one is
// decided here, apart from the routes and the job service that act on it:
// - sessionOf: whether a stored job is a session, and its settings, from the job file the
//   server itself wrote;
// - SessionActivity: the connections open through the server's tunnels into each session, and
//   when the last one closed (thread-safe);
// - idleReason: whether a running session has been idle for its idle_timeout (pure; a test
//   per rule in sessions_test.cc). The server's session watch stops it then, saying why.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "store/job_store.h"
#include "util/text.h"

namespace cohort::server {

struct SessionSettings {
  Millis idle_timeout{0};
  std::string user;  // the login name inside it
  bool jupyter = false;       // it serves JupyterLab (job/session.h)
  std::string jupyter_token;  // the lab's token, which the proxy adds (never shown)
};

// The session settings of `job`, or nullopt when it is not a session.
std::optional<SessionSettings> sessionOf(const store::Job& job);

// What is known of one running session at a moment (unix nanos).
struct SessionIdleAsk {
  int64_t now = 0;
  int64_t started = 0;      // when the job started running (0: not started)
  int64_t last_closed = 0;  // when its last connection through the server closed (0: none yet)
  int open = 0;             // connections open through the server now
  Millis idle_timeout{0};
};

// Why the session must end now, or nullopt: idle once no connection is open and none has been
// for idle_timeout, counted from the later of its start and its last connection's close.
std::optional<std::string> idleReason(const SessionIdleAsk& ask);

class SessionActivity {
 public:
  struct Seen {
    int open = 0;
    int64_t last_closed = 0;
  };
  // A connection into session `id` opened; it counts as open until the returned guard is gone.
  std::shared_ptr<void> opened(const std::string& id);
  Seen of(const std::string& id) const;
  void forget(const std::string& id);

 private:
  mutable std::mutex mu_;
  std::map<std::string, Seen> seen_;
};

}  // namespace cohort::server
