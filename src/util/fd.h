// UniqueFd owns a file descriptor and closes it once; plus the few fd helpers the supervisor and
// the control channel share. Not thread-safe; a UniqueFd belongs to one owner.
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>
#include <utility>

#include "util/result.h"

namespace cohort {

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release();
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

Result<void> setNonBlocking(int fd);

// Writes all of `data`, retrying on EINTR and short writes (waiting on EAGAIN).
Result<void> writeAll(int fd, std::string_view data);

Result<std::string> readFile(const std::string& path);

// What a follower of a growing file reads next: up to 64 KiB of `fd` at `offset` into `out`
// (replacing it), `offset` moved past them. Returns whether any were read (false at the end,
// and on an error).
bool readNextChunk(int fd, int64_t& offset, std::string& out);

// Raises this process's soft limit on open descriptors to its hard limit: a coordinator holds
// one connection and a log per node and rank, an agent a pipe and a pidfd per rank, the server
// one connection per follower; 1,024 (a common default) is not enough for big jobs.
void raiseFileLimit();

// Creates `path` and its missing parents (mode 0755), like `mkdir -p`. Errors: kIo.
Result<void> makeDirs(const std::string& path);

// Writes `content` to `path` through a temporary file and rename, so readers never see half.
// With `durable`, the data is also fsync'd before the rename (a record that must survive a
// crash); files that can be made again skip that cost. A new file gets `mode` (less the umask):
// 0600 for secrets, which are thus never readable by others, not even for a moment.
Result<void> writeFileAtomic(const std::string& path, std::string_view content,
                             bool durable = true, mode_t mode = 0644);

// writeFileAtomic() in two steps, for a file written once at the end of something. The file is
// made now, without a name (O_TMPFILE), and named only by commit(): the write is not held up by
// making a file (on ext4 with many files just deleted that can take a millisecond), and no other
// process can put a file of its own where ours will be named. Where the filesystem has no
// unnamed files, commit() makes it as writeFileAtomic() does. One never committed leaves nothing.
class PreparedFile {
 public:
  // Nothing made yet: commit() makes the file.
  explicit PreparedFile(std::string path, mode_t mode = 0644)
      : path_(std::move(path)), mode_(mode) {}
  // Errors: kIo when no file can be made in the directory of `path`.
  static Result<PreparedFile> create(const std::string& path, mode_t mode = 0644);

  // Writes `content` (fsync'd with `durable`) and renames the file into place; once only.
  // Errors: kIo (nothing is left under a temporary name), kFailedPrecondition when called again.
  Result<void> commit(std::string_view content, bool durable = true);

 private:
  std::string path_;
  mode_t mode_;
  UniqueFd fd_;  // the unnamed file; invalid: made at commit()
  bool committed_ = false;
};

}  // namespace cohort
