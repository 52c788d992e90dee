// AccountLimits: how much of the server's edge one account holds at once: followers (streams
// waiting for a job's events or log, or a build's log), uploads (bodies being received: store
// files and code uploads) and tunnels (connections into its jobs' networks: tunnels.h). Counting and taking are one step under one lock, so concurrent
// requests never take more than the limit between them (a check that counted first and took
// later let 24 uploads through a limit of 16). A slot is given back when it is destroyed.
//
// Followers are also how a revoked token loses its open streams: each follower slot knows the
// token it was opened with, and revoke() ends every stream of that token at once.
//
// Thread-safe.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "util/result.h"

namespace cohort::server {

class AccountLimits {
 public:
  // kLabRequest: a request to a session's JupyterLab waiting for its answer (it holds a worker).
  enum class Kind { kFollower, kUpload, kTunnel, kLabRequest };

  // A held slot. `revoked()` turns true when the token it was taken with is revoked, and then
  // `on_revoke` (set by the stream holding it) is called once, from the revoking thread.
  class Slot {
   public:
    ~Slot();
    Slot(const Slot&) = delete;
    Slot& operator=(const Slot&) = delete;
    bool revoked() const;
    void onRevoke(std::function<void()> callback);

   private:
    friend class AccountLimits;
    Slot(AccountLimits& limits, Kind kind, std::string account, std::string token_hash)
        : limits_(limits), kind_(kind), account_(std::move(account)),
          token_hash_(std::move(token_hash)) {}
    AccountLimits& limits_;
    const Kind kind_;
    const std::string account_, token_hash_;
    bool revoked_ = false;                 // guarded by limits_.mu_
    std::function<void()> on_revoke_;      // guarded by limits_.mu_
  };

  // Takes one slot of `kind` for `account` when it holds fewer than `limit` (its quota of them;
  // none: no limit), counting also `held_elsewhere()` (asked under the lock: code uploads
  // waiting on disk for their job). Errors: kResourceExhausted naming the quota (quotas.h).
  Result<std::shared_ptr<Slot>> take(Kind kind, const std::string& account,
                                     const std::string& token_hash,
                                     std::optional<int64_t> limit,
                                     const std::function<size_t()>& held_elsewhere = {});

  // Marks every slot taken with `token_hash` revoked and calls their callbacks.
  void revoke(const std::string& token_hash);

  size_t held(Kind kind, const std::string& account) const;

 private:
  void give(Slot* slot);
  mutable std::mutex mu_;
  std::map<std::pair<Kind, std::string>, size_t> counts_;
  std::multimap<std::string, Slot*> by_token_;
};

}  // namespace cohort::server
