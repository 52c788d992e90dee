// ObjectStore: a flat namespace of keys holding immutable byte strings (S3's model), the seam
// between cohort's transfer engine (storage/transfer.h: `cohort cp`, staging) and where objects
// live. An implementation is an S3-compatible service (storage/s3.h); tests wrap one to inject
// faults. Keys are '/'-separated paths without a leading '/'. An object appears under its key
// only once all of its bytes are stored: a failed or interrupted put leaves nothing under the
// key (the previous object, if any, stays). Implementations are safe to call from several
// threads at once.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "util/result.h"

namespace cohort::storage {

struct ObjectInfo {
  std::string key;
  int64_t size = 0;
  std::string etag;  // the store's content tag, without quotes (S3: MD5, or MD5s-of-parts "-N")
};

class ObjectStore {
 public:
  virtual ~ObjectStore() = default;

  // For messages: the URI of `key` ("s3://bucket/key").
  virtual std::string uri(const std::string& key) const = 0;

  // Every object whose key starts with `prefix` (a plain string prefix), in key order.
  // Errors: kNotFound (no such bucket), kUnauthenticated / kPermissionDenied, kUnavailable.
  virtual Result<std::vector<ObjectInfo>> list(const std::string& prefix) = 0;

  // The object under `key`. Errors: kNotFound when there is none, and those of list.
  virtual Result<ObjectInfo> head(const std::string& key) = 0;

  // Writes bytes [offset, offset + length) of the object under `key` to `fd` at the same
  // offsets (pwrite), so that ranges of one object may be fetched in parallel. Errors: kNotFound,
  // kIo naming the object when fewer bytes arrive, and those of list.
  virtual Result<void> getRange(const std::string& key, int fd, int64_t offset, int64_t length) = 0;

  // The etag this store gives an object holding the `size` bytes of `fd` (read with pread):
  // what a transfer compares a local file with, to skip what is there already and to check
  // what it fetched. Errors: kIo reading the file.
  virtual Result<std::string> etagOf(int fd, int64_t size) const = 0;
  // Whether etagOf can reproduce `object`'s etag from its bytes (an object another tool wrote
  // may carry a tag this store cannot recompute); only such objects are checked and skipped.
  virtual bool checkable(const ObjectInfo& object) const = 0;

  // Stores the `size` bytes of `fd` (read with pread from offset 0) under `key`, and returns
  // the new object's etag. The store checks what it receives (S3: a SHA-256 of every request's
  // body). Stops early with kFailedPrecondition when `cancel` turns true. `sent(bytes)`, when
  // set, is called as each part of a large object is stored (from that part's thread), so that
  // a transfer can show a large file moving.
  virtual Result<std::string> put(const std::string& key, int fd, int64_t size,
                                  const std::atomic<bool>* cancel,
                                  const std::function<void(int64_t)>& sent = {}) = 0;
};

}  // namespace cohort::storage
