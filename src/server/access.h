// Who may read or write what in the server's store: an account owns the buckets it created
// (first write claims a bucket nobody owns); a share grants another account read or write on a
// prefix of a bucket; admins may do everything. Every check reads the store, so a revoked share
// stops working with the next request. Thread-safe (the store is).
#pragma once

#include <string>

#include "store/job_store.h"
#include "util/result.h"

namespace cohort::server {

struct Caller {
  std::string account;
  bool admin = false;
};

enum class Access { kRead, kWrite };

// Whether `caller` may read (or write) `key` in `bucket`. A bucket nobody owns: reading answers
// kNotFound; writing claims it for the caller. Errors: kNotFound (the bucket does
// not exist or the caller may not see it: existence never leaks), kPermissionDenied (writing
// under a read-only share), kIo from the store.
Result<void> checkStoreAccess(store::JobStore& store, const Caller& caller,
                              const std::string& bucket, const std::string& key, Access access);

// Whether share `prefix` covers `key`: "" covers everything; "a/b" covers "a/b" and "a/b/...".
bool prefixCovers(const std::string& prefix, const std::string& key);

}  // namespace cohort::server
