// Where data lives: a Location is either a local path ("data/train", "/mnt/x", "file:///mnt/x")
// or an object in the embedded object store ("store://bucket/path"), which is a directory tree
// at <data-root>/store/<bucket>/<path>. Bucket names follow S3's rules (3 to 63 characters of
// lower-case letters, digits, dots and hyphens, starting and ending with a letter or digit, no
// ".."). A store path never leaves its bucket: a ".." component is refused, so a store URI can
// only name something under <data-root>/store/<bucket> (symbolic links placed inside the store
// by hand are not looked at: parsing is pure). Pure functions, thread-safe.
#pragma once

#include <string>

#include "util/result.h"

namespace cohort::storage {

struct Location {
  enum class Kind { kLocal, kStore };
  Kind kind = Kind::kLocal;
  std::string path;    // kLocal: the path as given, without "file://"
  std::string bucket;  // kStore: the bucket
  std::string key;     // kStore: the normalised path inside the bucket ("" for the bucket root)
  bool trailing_slash = false;  // the URI ended in "/" or names a bucket: it is a directory
};

// Parses a URI. Errors: kInvalidArgument naming the URI for an empty URI, an unknown scheme
// ("s3://", "http://"), an empty or invalid bucket name, or a store path with a ".." component.
Result<Location> parseLocation(const std::string& uri);

// True when `name` is a valid bucket name (see above).
bool validBucketName(const std::string& name);

// The absolute local path a URI names: a store URI becomes <data_root>/store/<bucket>[/<key>],
// a relative local path is joined onto `cwd` (and left relative when `cwd` is empty). A trailing
// "/" on the URI is kept (a copy into "dir/" means "into the directory dir"). `data_root` must
// be absolute for store URIs. A bucket itself resolves with a trailing "/". Errors: those of
// parseLocation, and kInvalidArgument when a store URI is resolved with a relative or empty data
// root.
Result<std::string> resolve(const std::string& uri, const std::string& data_root,
                            const std::string& cwd = "");

}  // namespace cohort::storage
