// Transfers between local files and an ObjectStore (storage/object_store.h), and between two
// object stores: what `cohort cp`, staging and outputs do when a side is an object store
// (s3://, or store:// kept in S3: storage/place.h). Which store it is does not matter here. The
// same rules as copyTree (storage/copy.h) where an object store allows them:
//  - A directory uploads its files as objects "<key>/<relative path>" (links followed, a link
//    loop or a socket, FIFO or device is an error found before anything is sent,
//    ".cohort-tmp-*" files are left out); a file uploads to `key`, or to "<key>/<name>" when
//    `key` is empty or ends in "/".
//  - A download of a key that names an object fetches that object (into `local` when it is an
//    existing directory or ends in "/"); otherwise every object under "<key>/" is fetched under
//    `local`, which is created. A key that would land outside `local` (an empty, "." or ".."
//    part) is an error naming it, found before anything is written.
//  - Files are fetched into a temporary name in their directory (".cohort-tmp-<name>-<random>"),
//    checked against the store's etag where the etag is a content digest cohort can compute
//    (always for what cohort uploaded), and renamed into place; uploads compare the etag the
//    store returns with the local file's. A file or object already identical at the destination
//    (same size and etag) is skipped, so running the same transfer again finishes it.
//  - Large objects move in parts, several at once; `workers` files move at once.
//  - Between two stores (copyObjects), keys map as a download's names do (a key of the source
//    that would land outside the destination's prefix is an error found before anything is
//    copied), an object already at the destination with the same size and etag is skipped, and
//    each object is copied inside the service where the two stores can (ObjectStore::copyIn:
//    one S3 endpoint and access key), else fetched into an unlinked temporary file in $TMPDIR
//    (or /tmp; so that much room is needed there for `workers` objects at once), checked
//    against its etag, and stored; what was stored is compared with what was sent.
//  - The first error stops the others and is returned, naming the file or object.
// Modes and times are not kept (an object store has neither). Call from one thread; `progress`
// is called from that thread about every 100 ms.
#pragma once

#include <string>

#include "storage/copy.h"
#include "storage/object_store.h"
#include "util/result.h"

namespace cohort::storage {

struct TransferOptions {
  int workers = 8;
  std::function<void(const CopyProgress&)> progress;
  const std::atomic<bool>* cancel = nullptr;  // true: stop early with kFailedPrecondition
  // Upload of a tree someone else may have written (a job's output/): as CopyOptions's
  // refuse_links, a symbolic link, a file with more than one hard link, or anything but a
  // regular file or a directory is an error naming it, and a file or directory that changed
  // since it was listed is an error.
  bool refuse_links = false;
};

Result<CopyStats> upload(const std::string& local, ObjectStore& store, const std::string& key,
                         const TransferOptions& options = {});

Result<CopyStats> download(ObjectStore& store, const std::string& key, const std::string& local,
                           const TransferOptions& options = {});

// Copies `from_key` of `from` (an object, or every object under "<from_key>/") to `to_key` of
// `to` (the object's key, or, when `to_key` is empty or ends in "/", the prefix it goes under;
// the objects under a prefix go under "<to_key>/"). Errors: those of download and upload.
Result<CopyStats> copyObjects(ObjectStore& from, const std::string& from_key, ObjectStore& to,
                              const std::string& to_key, const TransferOptions& options = {});

// Whether a download of `key` would find something (an object, or objects under "<key>/"):
// errors as download's, before anything is written.
Result<void> checkSource(ObjectStore& store, const std::string& key);

}  // namespace cohort::storage
