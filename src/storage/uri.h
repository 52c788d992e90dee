// Where data lives: a Location is either a local path ("data/train", "/mnt/x", "file:///mnt/x")
// or an object in the embedded object store ("store://bucket/path"), which is a directory tree
// at <data-root>/store/<bucket>/<path>. Bucket names follow S3's rules (3 to 63 characters of
// lower-case letters, digits, dots and hyphens, starting and ending with a letter or digit, no
// ".."). A store path never leaves its bucket: a ".." component is refused, so a store URI can
// only name something under <data-root>/store/<bucket> (symbolic links placed inside the store
// by hand are not looked at: parsing is pure).
// On a server, buckets belong to accounts: "store://OWNER@BUCKET/path" names account OWNER's
// bucket, kept in the directory "OWNER@BUCKET" of the store (a name no bucket can have, so an
// account's bucket never meets a bucket of a store without accounts); "store://BUCKET/path" in
// a request or job file means the caller's own (server/access.h decides, and hands the
// coordinator the directory's name). Below the server a URI names a directory of the store as
// written. Pure functions, thread-safe.
#pragma once

#include <string>

#include "util/result.h"

namespace cohort::storage {

struct Location {
  enum class Kind { kLocal, kStore };
  Kind kind = Kind::kLocal;
  std::string path;    // kLocal: the path as given, without "file://"
  std::string owner;   // kStore: the account before '@', "" when none was named
  std::string bucket;  // kStore: the bucket
  std::string key;     // kStore: the normalised path inside the bucket ("" for the bucket root)
  bool trailing_slash = false;  // the URI ended in "/" or names a bucket: it is a directory
};

// Parses a URI. Errors: kInvalidArgument naming the URI for an empty URI, an unknown scheme
// ("s3://", "http://"), an empty or invalid bucket name, an invalid owner, or a store path with
// a ".." component.
Result<Location> parseLocation(const std::string& uri);

// True when `name` is a valid bucket name (see above).
bool validBucketName(const std::string& name);

// True when `name` is a valid account name: 1 to 64 characters of a-z, 0-9, '-' and '_', not
// starting with '-' or '_' (the one rule for accounts, which name buckets' owners).
bool validAccountName(const std::string& name);

// The name of a bucket's directory in the store: "BUCKET", or "OWNER@BUCKET" for an account's.
// storeDirName(owner, bucket) is valid for validStoreDirName, and only such names are.
std::string storeDirName(const std::string& owner, const std::string& bucket);
bool validStoreDirName(const std::string& name);

// "store://DIR[/key]" for the bucket whose directory is `dir` (storeDirName).
std::string storeUri(const std::string& dir, const std::string& key);

// The absolute local path a URI names: a store URI becomes <data_root>/store/<dir>[/<key>]
// (<dir> as storeDirName makes it),
// a relative local path is joined onto `cwd` (and left relative when `cwd` is empty). A trailing
// "/" on the URI is kept (a copy into "dir/" means "into the directory dir"). `data_root` must
// be absolute for store URIs. A bucket itself resolves with a trailing "/". Errors: those of
// parseLocation, and kInvalidArgument when a store URI is resolved with a relative or empty data
// root.
Result<std::string> resolve(const std::string& uri, const std::string& data_root,
                            const std::string& cwd = "");

}  // namespace cohort::storage
