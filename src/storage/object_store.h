// ObjectStore: a flat namespace of keys holding immutable byte strings (S3's model), the seam
// between cohort's transfer engine (storage/transfer.h: `cohort cp`, staging, outputs, the
// server's store) and where objects live. Two implementations: a local directory, one file per
// object (storage/dir_store.h), and an S3-compatible service (storage/s3.h); tests wrap either
// to inject faults. Keys are '/'-separated paths without a leading '/'. An object appears under
// its key only once all of its bytes are stored: a failed or interrupted put leaves nothing
// under the key (the previous object, if any, stays). Implementations are safe to call from
// several threads at once.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "util/fd.h"
#include "util/result.h"

namespace cohort::storage {

struct ObjectInfo {
  std::string key;
  int64_t size = 0;
  std::string etag;  // the store's content tag, without quotes (S3: MD5, or MD5s-of-parts "-N")
  // The store's CRC-64/NVME of the whole object (storage/crc64.h), where it keeps one and gave
  // it (S3's head, from services that keep it: AWS since 2025, versitygw); listings give none.
  std::optional<uint64_t> crc64;
};

// What getRange wrote: the CRC-64/NVME of those bytes, and the whole object's where the store
// sent it along (S3, for a range that is the whole object).
struct Fetched {
  uint64_t crc = 0;
  std::optional<uint64_t> object_crc;
};

// Called with a count of bytes as each part of a large object is stored or copied (from that
// part's thread), so that a transfer can show a large file moving. May be empty.
using PartDone = std::function<void(int64_t)>;

// The most objects one list() returns.
constexpr int64_t kMaxListed = 10'000'000;

class ObjectStore {
 public:
  virtual ~ObjectStore() = default;

  // For messages: the URI of `key` ("s3://bucket/key", "store://bucket/key").
  virtual std::string uri(const std::string& key) const = 0;

  // Every object whose key starts with `prefix` (a plain string prefix), in key order.
  // Errors: kNotFound (no such bucket), kUnauthenticated / kPermissionDenied, kUnavailable,
  // kTooLarge past kMaxListed objects.
  virtual Result<std::vector<ObjectInfo>> list(const std::string& prefix) = 0;

  // The object under `key`. Errors: kNotFound when there is none, and those of list.
  virtual Result<ObjectInfo> head(const std::string& key) = 0;

  // Writes bytes [offset, offset + length) of the object under `key` to `fd` at the same
  // offsets (pwrite), so that ranges of one object may be fetched in parallel. Errors: kNotFound,
  // kIo naming the object when fewer bytes arrive, and those of list.
  virtual Result<Fetched> getRange(const std::string& key, int fd, int64_t offset,
                                   int64_t length) = 0;

  // The etag this store gives an object holding the `size` bytes of `fd` (read with pread):
  // what a transfer compares a local file with, to skip what is there already and to check
  // what it fetched. Errors: kIo reading the file.
  virtual Result<std::string> etagOf(int fd, int64_t size) const = 0;
  // Whether etagOf can reproduce `object`'s etag from its bytes (an object another tool wrote
  // may carry a tag this store cannot recompute); only such objects are checked and skipped.
  virtual bool checkable(const ObjectInfo& object) const = 0;

  // Stores the `size` bytes of `fd` (read with pread from offset 0) under `key`, and returns
  // the new object's etag once the store is known to hold exactly those bytes (S3: a SHA-256
  // of every request's body, then the service's CRC-64/NVME of the object against that of the
  // bytes sent, or where it keeps none, the etag against the file's MD5s; a directory: the
  // file read back). Errors: kIo "holds other bytes than were sent". Stops early with
  // kFailedPrecondition "interrupted" when `cancel` turns true.
  virtual Result<std::string> put(const std::string& key, int fd, int64_t size,
                                  const std::atomic<bool>* cancel, const PartDone& sent = {}) = 0;

  // Copies `object` of `from` to `key` of this store inside the service, its bytes never
  // passing through this process (S3: CopyObject, or UploadPartCopy in the parts put would
  // make, so that the copy has the etag an upload of the same bytes has). Returns the new
  // object's etag, or nothing when the two stores cannot (another service or other
  // credentials): the caller then streams the bytes. Errors and `cancel` as put's.
  virtual Result<std::optional<std::string>> copyIn(ObjectStore& from, const ObjectInfo& object,
                                                    const std::string& key,
                                                    const std::atomic<bool>* cancel,
                                                    const PartDone& copied = {});

  // The object's bytes, to read from offset 0: where the store keeps objects as files, that
  // file (read-only); else the object fetched into an unlinked temporary file in `tmp_dir` and
  // checked (checkFetched). Errors: those of head and getRange, kIo.
  struct Opened {
    UniqueFd fd;
    ObjectInfo info;
  };
  virtual Result<Opened> open(const std::string& key, const std::string& tmp_dir);
};

// ---- the content tag both implementations give an object -------------------------------------
// S3's etag of an object cohort uploaded: the MD5 of its bytes, or, above kPartSize, the MD5 of
// its parts' MD5s followed by "-<parts>", with parts of partSize(size) bytes.

// Multipart sizes: parts of 8 MiB, more for objects that would need over 10,000 parts.
constexpr int64_t kPartSize = int64_t{8} << 20;
int64_t partSize(int64_t object_size);

// The tag of the `size` bytes of `fd` (pread). Errors: kIo reading it, or it shrank.
Result<std::string> contentTag(int fd, int64_t size);

// Checks the `object.size` bytes fetched into `fd`, with CRC-64/NVME `fetched.crc`, against
// `object`: against the object's own CRC-64/NVME where the store gave one (`fetched.object_crc`,
// else `object.crc64`), else against its etag where `store` can recompute it (reading the file
// again), else not at all. Errors: kIo "the bytes received do not match the object".
Result<void> checkFetched(const ObjectStore& store, const ObjectInfo& object, int fd,
                          const Fetched& fetched);

// Whether `object`'s etag has the form contentTag gives its size (an MD5, or an MD5 with as
// many parts as partSize makes): only then can it be recomputed from the bytes.
bool isContentTag(const ObjectInfo& object);

}  // namespace cohort::storage
