// The parallel copy engine behind `cohort cp`, job inputs and job outputs: copies one file or a
// directory tree between local paths (store URIs are resolved to paths by the caller, see
// storage/uri.h) with a pool of worker threads, verifying every file it writes.
//
// What a copy means:
//  - A directory source copies its contents into dst, like `cp -r src/. dst/` or
//    `rsync -a src/ dst/` (with or without a trailing "/" on src). dst and its missing parents
//    are created; dst must not be, or be inside, src.
//  - A file source copies to dst, or into dst (keeping its name) when dst is an existing
//    directory or ends in "/". Missing parent directories of the target are created.
//  - Every file is written to a temporary name in its destination directory
//    (".cohort-tmp-<name>-<random>"), read back and checked (size, and the XXH3-64 of the bytes
//    read back against the XXH3-64 of the source bytes computed while copying) and only then
//    renamed into place. So a file under its final name is always complete; after an error or an
//    interruption only whole files and temporary files exist. Files are not fsync'd.
//  - Permission bits, atime and mtime (to the nanosecond) of files and directories are
//    preserved; empty directories are created; ownership is not copied.
//  - A file already identical at the destination is skipped: same size and same mtime (the
//    quick check, like rsync), or with `checksum` the same content (and only its mode and times
//    are fixed). A re-run after an interruption therefore copies only what is missing, and
//    deletes the ".cohort-tmp-*" files left in every destination directory it copies into
//    (also: ".cohort-tmp-*" files in the source are never copied). Two copies into the same
//    directory at once are not supported. Files at the destination that the source does not
//    have are left alone.
//  - Symbolic links in the source are followed (what object-store tools do): a link to a file
//    copies the file, a link to a directory copies the directory. A link that leads back to a
//    directory being copied (a loop, detected by device and inode) and a dangling link are
//    errors, found before anything is written. Below dst nothing is written through a symbolic
//    link: a link where a directory should be is an error, a link where a file should be is
//    replaced by the file. Sockets, FIFOs and devices are errors.
//  - The first error stops the other workers early and is returned, naming the file and the
//    cause: "copy 'data/a/b.bin': write: No space left on device". Files finished before it
//    stay; the file that failed has no final name and no temporary file left.
//
// copyTree may be called from any thread; it blocks until the copy ends and calls `progress`
// from the calling thread only.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "util/result.h"

namespace cohort::storage {

struct CopyProgress {
  int64_t files_done = 0;   // copied or skipped
  int64_t files_total = 0;
  int64_t bytes_done = 0;   // bytes written plus the sizes of skipped files
  int64_t bytes_total = 0;  // the sizes of all source files
  int64_t bytes_copied = 0; // bytes written only (for a rate)
  double seconds = 0;       // since the copy started
};

struct CopyStats {
  int64_t files_copied = 0;
  int64_t files_skipped = 0;  // identical at the destination already
  int64_t bytes_copied = 0;
  int64_t dirs_created = 0;
  double seconds = 0;
};

// How a copy's bytes reach its files (the seam where tests play a full disk or one that stores
// something else than it was given). The default writes them; an implementation must be safe to
// call from every worker thread at once.
class FileWriter {
 public:
  virtual ~FileWriter() = default;
  // Writes all of `data` to `fd`, where it goes at byte `offset` of its file (the bytes before
  // it are written). Errors: kIo naming the call that failed.
  virtual Result<void> write(int fd, std::string_view data, int64_t offset) = 0;
};

// write(2) until all is written.
FileWriter& directWriter();

struct CopyOptions {
  int workers = 8;        // threads copying files (1..256)
  bool checksum = false;  // compare content, not size and mtime, to decide what to skip
  // Called about every 100 ms while files are copied and once when the copy ends, from the
  // thread that called copyTree. Optional.
  std::function<void(const CopyProgress&)> progress;
  // When set and true, the copy stops early and returns kFailedPrecondition "interrupted"
  // (for a signal handler). Not owned.
  const std::atomic<bool>* cancel = nullptr;
  // For a source that someone else may have written (a job's output/ or work/, copied out by
  // cohort with more rights than the job has): a symbolic link, a file with more than one hard
  // link, or anything but a regular file or a directory anywhere in the source is an error
  // naming it, nothing is read through a link, and a file that changed since it was listed is
  // an error.
  bool refuse_links = false;
  // Where the files' bytes go; null: directWriter(). Not owned.
  FileWriter* writer = nullptr;
};

// Copies `src` to `dst` as described above. Returns what was done. Errors: kNotFound (the source
// does not exist), kInvalidArgument (bad options, dst inside src, a file onto a directory, a
// directory onto a file, a source that is neither a file nor a directory, a symbolic link loop or
// a dangling link), kIo (the operating system refused, or verification failed),
// kFailedPrecondition (cancelled).
Result<CopyStats> copyTree(const std::string& src, const std::string& dst,
                           const CopyOptions& options = {});

}  // namespace cohort::storage
