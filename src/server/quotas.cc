#include "server/quotas.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <set>

#include "util/fd.h"
#include "util/text.h"

namespace cohort::server {

namespace {

// The words for a quota in a message, and the flag that sets it.
struct QuotaWords {
  const char* name;
  const char* unit;
  const char* flag;
};

QuotaWords wordsFor(const std::string& quota) {
  if (quota == "bytes") return {"bytes", "in the data root", "--bytes"};
  if (quota == "inodes") return {"files and directories", "in the data root", "--inodes"};
  if (quota == "queued_jobs") return {"queued jobs", "", "--queued-jobs"};
  if (quota == "uploads") return {"uploads", "being received or waiting for their job", "--uploads"};
  if (quota == "followers") return {"followed streams", "(jobs' events and logs)", "--followers"};
  return {"priority", "", "--max-priority"};
}

std::string amount(const std::string& quota, int64_t n) {
  return quota == "bytes" ? formatSize(static_cast<double>(n)) : std::to_string(n);
}

void walk(int dir_fd, int depth, DiskUse& use) {
  DIR* dir = ::fdopendir(dir_fd);
  if (!dir) {
    ::close(dir_fd);
    return;
  }
  while (dirent* entry = ::readdir(dir)) {
    const std::string name = entry->d_name;
    if (name == "." || name == "..") continue;
    struct stat st{};
    if (::fstatat(::dirfd(dir), entry->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    ++use.inodes;
    const int64_t on_disk = static_cast<int64_t>(st.st_blocks) * 512;
    use.bytes += S_ISREG(st.st_mode) ? std::max<int64_t>(st.st_size, on_disk) : on_disk;
    if (S_ISDIR(st.st_mode) && depth < 256) {
      int child = ::openat(::dirfd(dir), entry->d_name,
                           O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (child >= 0) walk(child, depth + 1, use);
    }
  }
  ::closedir(dir);
}

}  // namespace

store::Quotas effectiveQuotas(const store::Account& account, const QuotaDefaults& defaults) {
  const store::Quotas& own = account.quotas;
  if (account.admin) return own;
  auto either = [](const std::optional<int64_t>& set, const std::optional<int64_t>& fallback) {
    return set ? set : fallback;
  };
  return {either(own.bytes, defaults.bytes),
          either(own.inodes, defaults.inodes),
          either(own.queued_jobs, defaults.queued_jobs),
          either(own.uploads, defaults.uploads),
          either(own.followers, defaults.followers),
          either(own.max_priority, defaults.max_priority)};
}

Error overQuota(const std::string& account, const std::string& quota, int64_t used,
                int64_t adding, int64_t limit, const std::string& what_to_do) {
  const QuotaWords words = wordsFor(quota);
  std::string message;
  if (quota == "max_priority") {
    message = "account '" + account + "' may give its jobs a priority of at most " +
              std::to_string(limit) + ", not " + std::to_string(used) + " (its max_priority quota)";
  } else {
    message = "account '" + account + "' is over its quota of " + amount(quota, limit) + " " +
              words.name + (*words.unit ? std::string(" ") + words.unit : "") + ": " +
              amount(quota, used) + " in use" +
              (adding > 0   ? ", and this needs " + amount(quota, adding) + " more"
               : adding < 0 ? ", and this would go past it"
                            : "") +
              " (" + quota + " quota)";
  }
  message += ": " + what_to_do + ", or ask an admin to raise it (cohort accounts quota " +
             account + " " + words.flag + " N)";
  return Error{Code::kResourceExhausted, message};
}

Result<void> checkDiskQuota(const std::string& account, const store::Quotas& quotas,
                            const DiskUse& use, const DiskUse& adding) {
  const std::string free_some =
      "remove jobs (cohort rm) or store files (cohort store rm) it no longer needs";
  if (quotas.bytes && use.bytes + adding.bytes > *quotas.bytes) {
    return tl::unexpected(overQuota(account, "bytes", use.bytes, adding.bytes, *quotas.bytes,
                                    free_some));
  }
  if (quotas.inodes && use.inodes + adding.inodes > *quotas.inodes) {
    return tl::unexpected(overQuota(account, "inodes", use.inodes, adding.inodes, *quotas.inodes,
                                    free_some));
  }
  return {};
}

DiskUse measureTree(const std::string& path) {
  DiskUse use;
  struct stat st{};
  if (::lstat(path.c_str(), &st) != 0) return use;
  use.inodes = 1;
  const int64_t on_disk = static_cast<int64_t>(st.st_blocks) * 512;
  use.bytes = S_ISREG(st.st_mode) ? std::max<int64_t>(st.st_size, on_disk) : on_disk;
  if (!S_ISDIR(st.st_mode)) return use;
  int dir = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dir >= 0) walk(dir, 0, use);
  return use;
}

std::map<std::string, DiskUse> DiskUsage::refresh(
    const std::map<std::string, std::vector<Root>>& roots) {
  std::map<std::string, DiskUse> settled;
  {
    std::lock_guard lock(mu_);
    settled = settled_;
  }
  std::map<std::string, DiskUse> totals, still_settled;
  for (const auto& [account, list] : roots) {
    DiskUse& total = totals[account];
    for (const Root& root : list) {
      auto known = root.settled ? settled.find(root.path) : settled.end();
      const DiskUse use = known != settled.end() ? known->second : measureTree(root.path);
      total.bytes += use.bytes;
      total.inodes += use.inodes;
      if (root.settled) still_settled[root.path] = use;
    }
  }
  std::lock_guard lock(mu_);
  settled_ = std::move(still_settled);
  by_account_ = totals;
  return totals;
}

DiskUse DiskUsage::of(const std::string& account) const {
  std::lock_guard lock(mu_);
  auto it = by_account_.find(account);
  return it == by_account_.end() ? DiskUse{} : it->second;
}

void DiskUsage::add(const std::string& account, const DiskUse& adding) {
  std::lock_guard lock(mu_);
  DiskUse& use = by_account_[account];
  use.bytes += adding.bytes;
  use.inodes += adding.inodes;
}

}  // namespace cohort::server
