// Accounts and tokens.
#include "server/server_impl.h"

namespace cohort::server {

namespace {

// The quotas in the order they are shown, with each one's field in Quotas.
using QuotaField = std::optional<int64_t> store::Quotas::*;
constexpr std::pair<const char*, QuotaField> kQuotaFields[] = {
    {"bytes", &store::Quotas::bytes},
    {"inodes", &store::Quotas::inodes},
    {"queued_jobs", &store::Quotas::queued_jobs},
    {"uploads", &store::Quotas::uploads},
    {"followers", &store::Quotas::followers},
    {"max_priority", &store::Quotas::max_priority}};

}  // namespace

Json Server::Impl::quotasJson(const store::Account& a) {
  const store::Quotas in_force = effectiveQuotas(a, options.quotas);
  const DiskUse disk = usage.of(a.name);
  const int64_t queued = store->countJobs(a.name, {"queued"}).value_or(0);
  const int64_t uploads =
      static_cast<int64_t>(limits.held(AccountLimits::Kind::kUpload, a.name)) +
      waitingUploads(options.data_root, a.name);
  const std::map<std::string, std::optional<int64_t>> used = {
      {"bytes", disk.bytes},
      {"inodes", disk.inodes},
      {"queued_jobs", queued},
      {"uploads", uploads},
      {"followers", static_cast<int64_t>(limits.held(AccountLimits::Kind::kFollower, a.name))},
      {"max_priority", std::nullopt}};
  Json out = Json::object();
  for (const auto& [name, member] : kQuotaFields) {
    const std::optional<int64_t>& limit = in_force.*member;
    out[name] = {{"limit", limit ? Json(*limit) : Json(nullptr)},
                 {"used", used.at(name) ? Json(*used.at(name)) : Json(nullptr)},
                 {"default", !(a.quotas.*member).has_value()}};
  }
  return out;
}

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
  route({"GET", "/v1/accounts/{name}/quotas", Who::kAccount, BodyKind::kNone},
        [this](const Request& req, Response& res, const Caller& c) -> Result<void> {
          const std::string& name = req.matches.at(0);
          auto account = store->account(name);
          if (!account || (name != c.account && !c.admin)) {
            return fail(Code::kNotFound, "account '" + printable(name) + "' not found");
          }
          writeJson(res, 200, {{"account", name}, {"quotas", quotasJson(*account)}});
          return Result<void>();
        });
  route({"PUT", "/v1/accounts/{name}/quotas", Who::kAdmin, BodyKind::kJson},
        [this](const Request& req, Response& res, const Caller&) -> Result<void> {
          const std::string& name = req.matches.at(0);
          std::set<std::string> known;
          for (const auto& [field_name, member] : kQuotaFields) known.insert(field_name);
          COHORT_ASSIGN(Json body, jsonBody(req, known));
          COHORT_ASSIGN(store::Account account, store->account(name));
          // A field given is set; null gives it back to the server's default; one left out
          // stays as it is.
          store::Quotas quotas = account.quotas;
          for (const auto& [field_name, member] : kQuotaFields) {
            if (!body.contains(field_name)) continue;
            if (body[field_name].is_null()) {
              quotas.*member = std::nullopt;
              continue;
            }
            COHORT_ASSIGN(int64_t value, field<int64_t>(body, field_name, 0));
            if (value < 0 && std::string(field_name) != "max_priority") {
              return fail(Code::kInvalidArgument,
                          std::string(field_name) + ": expected a number >= 0 or null, got " +
                              std::to_string(value));
            }
            quotas.*member = value;
          }
          COHORT_TRY(store->setQuotas(name, quotas));
          account.quotas = quotas;
          writeJson(res, 200, {{"account", name}, {"quotas", quotasJson(account)}});
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
