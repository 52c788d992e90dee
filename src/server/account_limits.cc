#include "server/account_limits.h"

#include "server/quotas.h"

#include <vector>

namespace cohort::server {

AccountLimits::Slot::~Slot() { limits_.give(this); }

bool AccountLimits::Slot::revoked() const {
  std::lock_guard lock(limits_.mu_);
  return revoked_;
}

void AccountLimits::Slot::onRevoke(std::function<void()> callback) {
  bool now = false;
  {
    std::lock_guard lock(limits_.mu_);
    if (revoked_) {
      now = true;
    } else {
      on_revoke_ = std::move(callback);
    }
  }
  if (now && callback) callback();
}

Result<std::shared_ptr<AccountLimits::Slot>> AccountLimits::take(
    Kind kind, const std::string& account, const std::string& token_hash,
    std::optional<int64_t> limit, const std::function<size_t()>& held_elsewhere) {
  std::lock_guard lock(mu_);
  size_t& count = counts_[{kind, account}];
  const size_t elsewhere = held_elsewhere ? held_elsewhere() : 0;
  if (limit && static_cast<int64_t>(count + elsewhere) >= *limit) {
    const int64_t used = static_cast<int64_t>(count + elsewhere);
    if (kind == Kind::kTunnel || kind == Kind::kLabRequest) {
      // Limits of the server's, not quotas an admin sets per account.
      return fail(Code::kResourceExhausted,
                  kind == Kind::kTunnel
                      ? "account '" + account + "' holds " + std::to_string(used) +
                            " tunnels, the most this server lets an account hold at once "
                            "(cohort server --max-tunnels): close some first (each debugger "
                            "attached through cohort debug --attach holds one, each cohort "
                            "session ssh, and each WebSocket of a session's JupyterLab)"
                      : "account '" + account + "' has " + std::to_string(used) +
                            " requests to its sessions' JupyterLab waiting for their answers, "
                            "the most at once: let some finish");
    }
    return tl::unexpected(
        kind == Kind::kFollower ? overQuota(account, "followers", used, 1, *limit, "end some first")
            : overQuota(account, "uploads", used, 1, *limit,
                        "let them finish (a code upload waits until a job names it, or an "
                        "hour)"));
  }
  ++count;
  std::shared_ptr<Slot> slot(new Slot(*this, kind, account, token_hash));
  by_token_.emplace(token_hash, slot.get());
  return slot;
}

void AccountLimits::give(Slot* slot) {
  std::lock_guard lock(mu_);
  auto it = counts_.find({slot->kind_, slot->account_});
  if (it != counts_.end() && --it->second == 0) counts_.erase(it);
  auto [from, to] = by_token_.equal_range(slot->token_hash_);
  for (auto t = from; t != to; ++t) {
    if (t->second == slot) {
      by_token_.erase(t);
      break;
    }
  }
}

void AccountLimits::revoke(const std::string& token_hash) {
  std::vector<std::function<void()>> callbacks;
  {
    std::lock_guard lock(mu_);
    auto [from, to] = by_token_.equal_range(token_hash);
    for (auto t = from; t != to; ++t) {
      t->second->revoked_ = true;
      if (t->second->on_revoke_) callbacks.push_back(std::move(t->second->on_revoke_));
      t->second->on_revoke_ = nullptr;
    }
  }
  for (auto& callback : callbacks) callback();
}

size_t AccountLimits::held(Kind kind, const std::string& account) const {
  std::lock_guard lock(mu_);
  auto it = counts_.find({kind, account});
  return it == counts_.end() ? 0 : it->second;
}

}  // namespace cohort::server
