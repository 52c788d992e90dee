// Who may read or write what in the server's store. Buckets belong to accounts: each account has
// bucket names of its own, so "store://models/..." is the caller's own `models` whoever else has
// one, made by the first write to it. Another account's bucket is named with its owner,
// "store://alice@models/...", and reached only through a share that grants read or write on a
// prefix of it; admins may do everything. Every check reads the store, so a revoked share stops
// working with the next request. Thread-safe (the store is).
#pragma once

#include <string>

#include "storage/uri.h"
#include "store/job_store.h"
#include "util/result.h"

namespace cohort::server {

struct Caller {
  std::string account;
  bool admin = false;
};

enum class Access { kRead, kWrite };

// The bucket that `where` (a store location as `caller` wrote it) names, when `caller` may read
// (or write) `where.key` in it: its own bucket `where.bucket` when `where.owner` is empty or its
// own name, else that account's, through a share covering the key. The caller's own bucket
// that does not exist yet: reading answers kNotFound; writing makes it (an admin may make one
// for any account). Errors: kNotFound (the bucket does not exist or the caller may not see it:
// existence never leaks), kPermissionDenied (writing under a read-only share), kIo from the
// store.
Result<store::Bucket> reachBucket(store::JobStore& store, const Caller& caller,
                                  const storage::Location& where, Access access);

// "store://DIR/KEY" for `key` of `bucket`, as cohort's own processes below the server take it
// (storage/uri.h: the bucket's directory, whoever the caller was), with a trailing '/' when
// `directory`.
std::string placedUri(const store::Bucket& bucket, const std::string& key, bool directory);

// "store://OWNER@BUCKET/PREFIX": how a share's grantee names what it was granted.
std::string sharedUri(const store::Share& share);

// Whether share `prefix` covers `key`: "" covers everything; "a/b" covers "a/b" and "a/b/...".
bool prefixCovers(const std::string& prefix, const std::string& key);

}  // namespace cohort::server
