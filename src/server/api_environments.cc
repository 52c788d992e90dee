// Environments: list, show, push (built after the answer), remove, and their builds' logs.
#include "server/server_impl.h"

namespace cohort::server {

// An environment's name is "{name}" in the routes' names (a lazy capture). It captures any
// path, a slash or ".." included, so that the service refuses a name that cannot be one (400,
// naming it) instead of "no such endpoint"; the log's route comes first.
void Server::Impl::environmentRoutes() {
  route({"GET", "/v1/environments/{name+}/log", Who::kAccount, BodyKind::kNone},
        [this](const Request& req, Response& res, const Caller& c) -> Result<void> {
          COHORT_ASSIGN(EnvironmentService::Log log, environments->log(c, req.matches[0]));
          COHORT_ASSIGN(int64_t start, offsetParameter(req));
          res.status = 200;
          res.content_type = "text/plain; charset=utf-8";
          res.setHeader("Cache-Control", "no-cache");
          res.setHeader("X-Content-Type-Options", "nosniff");
          res.stream = buildLogStream(*environments, *hub, log, start, followParameter(req),
                                      [this] { return stopping.load(); });
          return Result<void>();
        });
  route({"GET", "/v1/environments", Who::kAccount, BodyKind::kNone},
        [this](const Request&, Response& res, const Caller& c) -> Result<void> {
          COHORT_ASSIGN(Json list, environments->list(c));
          writeJson(res, 200, list);
          return Result<void>();
        });
  route({"GET", "/v1/environments/{name+}", Who::kAccount, BodyKind::kNone},
        [this](const Request& req, Response& res, const Caller& c) -> Result<void> {
          COHORT_ASSIGN(Json e, environments->show(c, req.matches[0]));
          writeJson(res, 200, e);
          return Result<void>();
        });
  route({"PUT", "/v1/environments/{name+}", Who::kAccount, BodyKind::kJson},
        [this](const Request& req, Response& res, const Caller& c) -> Result<void> {
          COHORT_ASSIGN(Json body, jsonBody(req, {"base", "requirements", "lock"}));
          EnvironmentDefinition d;
          COHORT_ASSIGN(d.base, field<std::string>(body, "base", ""));
          COHORT_ASSIGN(d.requirements, field<std::vector<std::string>>(body, "requirements", {}));
          COHORT_ASSIGN(d.lock, field<std::string>(body, "lock", ""));
          COHORT_ASSIGN(Json e, environments->push(c, req.matches[0], d));
          writeJson(res, 202, e);
          return Result<void>();
        });
  route({"DELETE", "/v1/environments/{name+}", Who::kAccount, BodyKind::kNone},
        [this](const Request& req, Response& res, const Caller& c) -> Result<void> {
          COHORT_TRY(environments->remove(c, req.matches[0]));
          res.status = 204;
          return Result<void>();
        });
}

}  // namespace cohort::server
