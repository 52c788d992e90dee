// DirStore: an ObjectStore (storage/object_store.h) on a local directory, one regular file per
// object: the key "a/b.bin" is the file <root>/a/b.bin. It is what the server keeps each
// bucket of its store in, unless the store is in S3 (storage/place.h).
//  - No key leaves the root: a key with an empty, "." or ".." part, a NUL byte or a part
//    starting with ".cohort-tmp-" is refused (kInvalidArgument), and nothing is read or written
//    through a symbolic link below the root (a link is not an object, and is not followed to
//    one).
//  - put copies the bytes to a temporary file (".cohort-tmp-<name>-<random>") in the object's
//    directory, compares its content tag with the source's, fsyncs it and renames it into
//    place: a failed or interrupted put leaves no file under the key, nor its temporary file.
//    A key whose directory is a file, or which is a directory, is refused
//    (kFailedPrecondition, naming it).
//  - The etag is contentTag (object_store.h): the same bytes carry the same etag here and in
//    S3. It is kept in the file's extended attribute "user.cohort.etag" with the size and
//    modification time it was computed for, and computed again (reading the file) when they
//    changed or the file has none: a file another program wrote is read once, at its first
//    listing.
//  - A missing root is a bucket nothing was put in yet: it lists nothing, and put makes it.
// Thread-safe: every call opens what it needs.
#pragma once

#include <memory>
#include <string>

#include "storage/object_store.h"

namespace cohort::storage {

// The store in `root` (an absolute path), whose objects are named "<name>/<key>" in messages
// ("store://datasets").
std::unique_ptr<ObjectStore> makeDirStore(std::string root, std::string name);

}  // namespace cohort::storage
