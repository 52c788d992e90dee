// The operations' routes (the OpenAPI document, Prometheus metrics) and the table's
// assembly from every resource's routes.
#include "server/server_impl.h"

namespace cohort::server {

void Server::Impl::routes() {
  route({"GET", "/v1/openapi.json", Who::kAnyone, BodyKind::kNone},
        [](const Request&, Response& res, const Caller&) -> Result<void> {
          res.setContent(openApiDocument(), "application/json");
          return Result<void>();
        });
  route({"GET", "/metrics", Who::kAnyone, BodyKind::kNone},
      [this](const Request&, Response& res, const Caller&) -> Result<void> {
        std::string out = "# HELP cohort_jobs Jobs by state.\n# TYPE cohort_jobs gauge\n";
        std::map<std::string, int64_t> counts;
        for (const std::string& s : store::kJobStates) counts[s] = 0;
        COHORT_ASSIGN(auto by_state, store->countJobsByState());
        for (const auto& [state, n] : by_state) counts[state] = n;
        for (const auto& [state, n] : counts) {
          out += "cohort_jobs{state=\"" + state + "\"} " + std::to_string(n) + "\n";
        }
        out +=
            "# HELP cohort_queue_length Jobs waiting to start.\n# TYPE cohort_queue_length gauge\n";
        out += "cohort_queue_length " + std::to_string(jobs->queueLength()) + "\n";
        out +=
            "# HELP cohort_schedule_seconds Time of one scheduling pass.\n"
            "# TYPE cohort_schedule_seconds histogram\n";
        out += jobs->passLatency().render("cohort_schedule_seconds", "");
        out += "# HELP cohort_http_connections Open HTTP connections.\n"
               "# TYPE cohort_http_connections gauge\n";
        out += "cohort_http_connections " + std::to_string(http ? http->connections() : 0) + "\n";
        out += "# HELP cohort_followers Streams following a job's events or log (no thread "
               "each).\n# TYPE cohort_followers gauge\n";
        out += "cohort_followers " + std::to_string(hub->subscribers()) + "\n";
        out += metrics.render();
        res.setContent(out, "text/plain; version=0.0.4");
        return Result<void>();
      });
  // Per-job gauges (docs/observing.md#prometheus): they name jobs and accounts, so an admin's
  // token only, and bounded: running jobs and those that ended in the last kRecentlyEnded.
  route({"GET", "/v1/metrics", Who::kAdmin, BodyKind::kNone},
      [this](const Request&, Response& res, const Caller&) -> Result<void> {
        constexpr size_t kMaxJobs = 1000;
        constexpr size_t kMaxSeries = 20000;
        constexpr int64_t kRecentlyEnded = int64_t{15} * 60 * 1000000000;
        std::vector<std::string> active;
        for (const std::string& s : store::kJobStates) {
          if (!store::isFinalState(s) && s != "queued") active.push_back(s);
        }
        COHORT_ASSIGN(std::vector<store::Job> listed, store->jobsInStates(active));
        store::JobFilter ended;
        for (const std::string& s : store::kJobStates) {
          if (store::isFinalState(s)) ended.states.push_back(s);
        }
        ended.limit = static_cast<int>(kMaxJobs);
        COHORT_ASSIGN(std::vector<store::Job> finished, store->jobs(ended));
        const int64_t since = nowUnixNanos() - kRecentlyEnded;
        for (store::Job& j : finished) {
          if (j.ended >= since) listed.push_back(std::move(j));
        }
        if (listed.size() > kMaxJobs) listed.resize(kMaxJobs);
        std::vector<JobSeries> series;
        for (const store::Job& j : listed) {
          JobSeries js{j.id, j.name, j.account, j.state, {}};
          const auto snapshot = store::isFinalState(j.state) ? std::nullopt : jobs->progress(j.id);
          Json p = snapshot ? Json::parse(*snapshot, nullptr, false) : Json();
          if (p.is_object() && p["ranks"].is_array()) {
            for (const Json& r : p["ranks"]) {
              if (!r.is_object()) continue;
              static const Json kNone;
              auto at = [&](const char* key) -> const Json& {
                auto it = r.find(key);
                return it == r.end() ? kNone : *it;
              };
              if (!at("rank").is_number_integer()) continue;
              JobSeries::Rank rank;
              const std::string name = at("name").is_string() ? at("name").get<std::string>() : "";
              rank.role = at("role").is_string() ? at("role").get<std::string>()
                                                 : name.substr(0, name.find('/'));
              rank.rank = at("rank").get<int>();
              rank.node = at("node").is_number_integer() ? at("node").get<int>() : 0;
              if (at("cpu_seconds").is_number()) rank.cpu_seconds = at("cpu_seconds").get<double>();
              if (at("rss_bytes").is_number_integer())
                rank.rss_bytes = at("rss_bytes").get<int64_t>();
              if (at("gpu_util").is_number()) rank.gpu_util = at("gpu_util").get<double>();
              if (at("gpu_memory_bytes").is_number_integer()) {
                rank.gpu_memory_bytes = at("gpu_memory_bytes").get<int64_t>();
              }
              js.ranks.push_back(std::move(rank));
            }
          }
          series.push_back(std::move(js));
        }
        res.setContent(renderJobMetrics(series, kMaxSeries), "text/plain; version=0.0.4");
        return Result<void>();
      });
  jobRoutes();
  labRoutes();
  storeRoutes();
  accountRoutes();
  environmentRoutes();
}

}  // namespace cohort::server
