#include "server/access.h"

namespace cohort::server {

bool prefixCovers(const std::string& prefix, const std::string& key) {
  std::string p = prefix;
  while (!p.empty() && p.back() == '/') p.pop_back();
  if (p.empty()) return true;
  if (key.size() < p.size() || key.compare(0, p.size(), p) != 0) return false;
  return key.size() == p.size() || key[p.size()] == '/';
}

Result<store::Bucket> reachBucket(store::JobStore& store, const Caller& caller,
                                  const storage::Location& where, Access access) {
  const std::string owner = where.owner.empty() ? caller.account : where.owner;
  const bool own = owner == caller.account;
  auto not_found = [&] {
    return fail(Code::kNotFound,
                storage::storeUri(storage::storeDirName(where.owner, where.bucket), where.key) +
                    ": not found");
  };
  COHORT_ASSIGN(std::optional<store::Bucket> bucket, store.bucket(owner, where.bucket));
  if (!bucket) {
    if (access != Access::kWrite || !(own || caller.admin)) return not_found();
    if (!own && !store.account(owner)) return not_found();
    return store.claimBucket(owner, where.bucket, storage::storeDirName(owner, where.bucket));
  }
  if (own || caller.admin) return *bucket;
  COHORT_ASSIGN(std::vector<store::Share> shares,
                store.sharesFor(owner, where.bucket, caller.account));
  for (const store::Share& share : shares) {
    if (!prefixCovers(share.prefix, where.key)) continue;
    if (access == Access::kRead || share.access == "write") return *bucket;
    return fail(Code::kPermissionDenied,
                storage::storeUri(storage::storeDirName(owner, where.bucket), where.key) +
                    ": shared with you read-only");
  }
  return not_found();
}

std::string placedUri(const store::Bucket& bucket, const std::string& key, bool directory) {
  return storage::storeUri(bucket.dir, key) + (directory && !key.empty() ? "/" : "");
}

std::string sharedUri(const store::Share& share) {
  return storage::storeUri(storage::storeDirName(share.owner, share.bucket), share.prefix);
}

}  // namespace cohort::server
