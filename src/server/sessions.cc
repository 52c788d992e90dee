#include "server/sessions.h"

#include <nlohmann/json.hpp>

#include "spec/job_spec.h"
#include "util/json_limits.h"

namespace cohort::server {

std::optional<SessionSettings> sessionOf(const store::Job& job) {
  // The job file as the server wrote it (spec::toJobFile): JSON, with "session" only for one.
  if (job.spec_json.find("\"session\"") == std::string::npos) return std::nullopt;
  auto spec = spec::parseJobFile(job.spec_json, "job");
  if (!spec || !spec->session) return std::nullopt;
  return SessionSettings{spec->session->idle_timeout, spec->session->user, spec->session->jupyter,
                         spec->session->jupyter_token};
}

std::optional<std::string> idleReason(const SessionIdleAsk& ask) {
  if (ask.open > 0 || ask.started <= 0) return std::nullopt;
  const int64_t since = std::max(ask.started, ask.last_closed);
  const int64_t idle_ns = ask.now - since;
  if (idle_ns < ask.idle_timeout.count() * 1000000) return std::nullopt;
  return "idle for " + formatDuration(ask.idle_timeout) +
         ": no connection through the server (session.idle_timeout; cohort session start "
         "--idle-timeout DUR keeps one longer)";
}

std::shared_ptr<void> SessionActivity::opened(const std::string& id) {
  {
    std::lock_guard lock(mu_);
    ++seen_[id].open;
  }
  return std::shared_ptr<void>(nullptr, [this, id](void*) {
    std::lock_guard lock(mu_);
    Seen& s = seen_[id];
    --s.open;
    s.last_closed = nowUnixNanos();
  });
}

SessionActivity::Seen SessionActivity::of(const std::string& id) const {
  std::lock_guard lock(mu_);
  auto at = seen_.find(id);
  return at == seen_.end() ? Seen{} : at->second;
}

void SessionActivity::forget(const std::string& id) {
  std::lock_guard lock(mu_);
  auto at = seen_.find(id);
  if (at != seen_.end() && at->second.open == 0) seen_.erase(at);
}

}  // namespace cohort::server
