// Accounts and tokens.
#include "server/server_impl.h"

namespace cohort::server {

void Server::Impl::accountRoutes() {
  route({"GET", "/v1/whoami", Who::kAccount, BodyKind::kNone},
        [](const Request&, Response& res, const Caller& c) -> Result<void> {
          writeJson(res, 200, {{"account", c.account}, {"admin", c.admin}});
          return Result<void>();
        });
  route({"POST", "/v1/accounts", Who::kAdmin, BodyKind::kJson},
        [this](const Request& req, Response& res, const Caller&) -> Result<void> {
          COHORT_ASSIGN(Json body, jsonBody(req, {"name", "admin", "max_gpus", "max_cpus"}));
          store::Account a;
          COHORT_ASSIGN(a.name, field<std::string>(body, "name", ""));
          if (!validAccountName(a.name)) {
            return fail(Code::kInvalidArgument,
                        "name: 1-64 of a-z, 0-9, '-' and '_', starting with a letter or digit; "
                        "got '" +
                            a.name + "'");
          }
          COHORT_ASSIGN(a.admin, field<bool>(body, "admin", false));
          // Absent or null: no limit.
          if (body.contains("max_gpus") && !body["max_gpus"].is_null()) {
            COHORT_ASSIGN(int64_t gpus, field<int64_t>(body, "max_gpus", 0));
            if (gpus < 0) return fail(Code::kInvalidArgument, "max_gpus: expected >= 0");
            a.max_gpus = gpus;
          }
          if (body.contains("max_cpus") && !body["max_cpus"].is_null()) {
            COHORT_ASSIGN(double cpus, field<double>(body, "max_cpus", 0));
            if (cpus < 0) return fail(Code::kInvalidArgument, "max_cpus: expected >= 0");
            a.max_cpu_millis = static_cast<int64_t>(cpus * 1000);
          }
          a.created = nowUnixNanos();
          COHORT_TRY(store->createAccount(a));
          COHORT_ASSIGN(std::string token, newToken());
          COHORT_TRY(store->addToken(a.name, sha256Hex(token), "created with the account"));
          writeJson(res, 201, {{"account", accountJson(a)}, {"token", token}});
          return Result<void>();
        });
  route({"GET", "/v1/accounts", Who::kAdmin, BodyKind::kNone},
        [this](const Request&, Response& res, const Caller&) -> Result<void> {
          COHORT_ASSIGN(std::vector<store::Account> list, store->accounts());
          Json out = Json::array();
          for (const auto& a : list) out.push_back(accountJson(a));
          writeJson(res, 200, {{"accounts", out}});
          return Result<void>();
        });
  route({"GET", "/v1/tokens", Who::kAccount, BodyKind::kNone},
        [this](const Request&, Response& res, const Caller& c) -> Result<void> {
          COHORT_ASSIGN(std::vector<store::Token> list,
                        store->tokens(c.admin ? std::nullopt : std::optional(c.account)));
          Json out = Json::array();
          for (const auto& t : list) out.push_back(tokenJson(t));
          writeJson(res, 200, {{"tokens", out}});
          return Result<void>();
        });
  route({"POST", "/v1/tokens", Who::kAccount, BodyKind::kJson},
        [this](const Request& req, Response& res, const Caller& c) -> Result<void> {
          COHORT_ASSIGN(Json body, jsonBody(req, {"label", "account"}));
          COHORT_ASSIGN(std::string label, field<std::string>(body, "label", ""));
          if (label.size() > kMaxTokenLabel) {
            return fail(Code::kInvalidArgument, "label: at most " +
                                                    std::to_string(kMaxTokenLabel) +
                                                    " bytes, got " +
                                                    std::to_string(label.size()));
          }
          COHORT_ASSIGN(std::string account, field<std::string>(body, "account", c.account));
          if (account != c.account && !c.admin) {
            return fail(Code::kPermissionDenied,
                        "only an admin may make tokens for another account");
          }
          if (!store->account(account)) {
            return fail(Code::kNotFound, "account '" + account + "' not found");
          }
          COHORT_ASSIGN(std::string token, newToken());
          COHORT_ASSIGN(int64_t id, store->addToken(account, sha256Hex(token), label));
          COHORT_ASSIGN(store::Token t, store->token(id));
          Json out = tokenJson(t);
          out["token"] = token;
          writeJson(res, 201, out);
          return Result<void>();
        });
  route({"DELETE", "/v1/tokens/{id}", Who::kAccount, BodyKind::kNone},
        [this](const Request& req, Response& res, const Caller& c) -> Result<void> {
          COHORT_ASSIGN(int64_t id, idParam(req.matches[0], "token"));
          auto token = store->token(id);
          if (!token || (token->account != c.account && !c.admin)) {
            return fail(Code::kNotFound, "token " + std::to_string(id) + " not found");
          }
          COHORT_TRY(store->deleteToken(id));
          forgetTokens();
          limits.revoke(token->hash);  // its open streams end now
          res.status = 204;
          return Result<void>();
        });
}

}  // namespace cohort::server
