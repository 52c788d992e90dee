#include "server/access.h"

namespace cohort::server {

bool prefixCovers(const std::string& prefix, const std::string& key) {
  std::string p = prefix;
  while (!p.empty() && p.back() == '/') p.pop_back();
  if (p.empty()) return true;
  if (key.size() < p.size() || key.compare(0, p.size(), p) != 0) return false;
  return key.size() == p.size() || key[p.size()] == '/';
}

Result<void> checkStoreAccess(store::JobStore& store, const Caller& caller,
                              const std::string& bucket, const std::string& key, Access access) {
  auto not_found = [&] {
    return fail(Code::kNotFound, "store://" + bucket + "/" + key + ": not found");
  };
  COHORT_ASSIGN(std::optional<std::string> owner, store.bucketOwner(bucket));
  if (!owner) {
    if (access == Access::kWrite) {
      COHORT_ASSIGN(std::string claimed, store.claimBucket(bucket, caller.account));
      if (claimed == caller.account || caller.admin) return {};
    }
    return not_found();
  }
  if (*owner == caller.account || caller.admin) return {};
  COHORT_ASSIGN(std::vector<store::Share> shares, store.sharesFor(bucket, caller.account));
  for (const store::Share& share : shares) {
    if (!prefixCovers(share.prefix, key)) continue;
    if (access == Access::kRead || share.access == "write") return {};
    return fail(Code::kPermissionDenied,
                "store://" + bucket + "/" + key + ": shared with you read-only");
  }
  return not_found();
}

}  // namespace cohort::server
