// Quotas: how much of a shared server one account may hold and do at once. An admin sets an
// account's own (cohort accounts quota); the server's flags are the defaults for the others
// (QuotaDefaults); an admin account is held only to what was set for it. Over a quota, a request
// fails with kResourceExhausted naming the quota, what is in use and the limit (overQuota), and
// nothing of another account is touched.
//
// DiskUsage counts what each account holds in the data root: the store's buckets it owns, its
// uploads, its jobs' directories (record, logs, work, outputs) and its environments. A file
// counts at its apparent size or what it takes on disk, the larger (a sparse file cannot hide
// what it would take once copied); every file, directory and link is an inode. Counting walks
// the directories without following a link; a directory that no longer changes (a job that
// ended) is walked once and remembered. Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "store/job_store.h"
#include "util/result.h"

namespace cohort::server {

// The server's defaults (cohort server --quota-*, --max-followers); absent: no limit.
struct QuotaDefaults {
  std::optional<int64_t> bytes;   // default: a quarter of the data root's file system
  std::optional<int64_t> inodes;  // default: a quarter of its inodes
  std::optional<int64_t> queued_jobs = 100;
  std::optional<int64_t> uploads = 16;
  std::optional<int64_t> followers = 256;
  std::optional<int64_t> max_priority = 0;
};

// An account's quotas in force: its own, else (unless it is an admin) the server's default.
store::Quotas effectiveQuotas(const store::Account& account, const QuotaDefaults& defaults);

// What one account holds in the data root.
struct DiskUse {
  int64_t bytes = 0;
  int64_t inodes = 0;
};

// The error for a request that would take `account` past `quota` ("bytes", "inodes",
// "queued_jobs", "uploads", "followers", "max_priority"): kResourceExhausted, saying the quota,
// what is in use (`used`, and `adding` more for this request; < 0: an amount not known, which
// would go past it) and the limit, and `what_to_do`.
Error overQuota(const std::string& account, const std::string& quota, int64_t used,
                int64_t adding, int64_t limit, const std::string& what_to_do);

// Checks that `use` plus `adding` stays within `quotas`' bytes and inodes. Errors: overQuota's.
Result<void> checkDiskQuota(const std::string& account, const store::Quotas& quotas,
                            const DiskUse& use, const DiskUse& adding);

// What a tree holds, walked without following a link (the top's own inode included).
DiskUse measureTree(const std::string& path);

class DiskUsage {
 public:
  // A directory an account holds. `settled`: it no longer changes (a job that ended), so one
  // walk is enough.
  struct Root {
    std::string path;
    bool settled = false;
  };
  // Walks every account's `roots` (those settled only once: what is remembered of a root no
  // longer listed is forgotten) and makes their sums the accounts' use. Returns it.
  std::map<std::string, DiskUse> refresh(const std::map<std::string, std::vector<Root>>& roots);
  // The account's use as last counted (none before the first refresh).
  DiskUse of(const std::string& account) const;
  // Counts `adding` as the account's until the next refresh counts it for real (what a request
  // just wrote), so that requests in between see it.
  void add(const std::string& account, const DiskUse& adding);

 private:
  mutable std::mutex mu_;
  std::map<std::string, DiskUse> by_account_;
  std::map<std::string, DiskUse> settled_;  // by path
};

}  // namespace cohort::server
