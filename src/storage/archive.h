// Code snapshots: what `cohort submit` uploads so that a job runs on a server that cannot see the
// submitter's disk. A snapshot is a plain ustar archive (POSIX.1-1988, the format `tar
// --format=ustar` and Python's tarfile.USTAR_FORMAT write): a 512-byte header per entry, the
// entry's bytes padded to 512, two zero blocks at the end. Only regular files, directories and
// symbolic links are in it; names up to 255 bytes (name + prefix fields).
//
// The writing side (the client) lists a directory tree, leaving out what its ignore rules name
// (`.cohortignore` in the tree's top directory, else its `.gitignore`; `.git/` always), and
// writes the archive to a file descriptor.
//
// The reading side (the server) trusts nothing in the archive: `extractArchive` refuses absolute
// names, `..` components, links whose target is absolute or leads out of the destination, hard
// links, devices, FIFOs, extended (pax, GNU) headers, duplicate entries, bad checksums, an
// archive cut short, and totals over its limits (bytes and entries). It writes only below one
// directory descriptor with openat/mkdirat/symlinkat and O_NOFOLLOW on every component, so it
// never follows a link while writing, and it keeps only the permission bits 0755/0644 (no
// setuid, no group or other write). On any refusal it returns an error naming the entry and
// what to do, and removes what it had written.
//
// Pure functions of their arguments and the filesystem; any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "util/result.h"

namespace cohort::storage {

struct ArchiveLimits {
  int64_t max_bytes = int64_t{1} << 30;  // the sum of the files' sizes
  int64_t max_entries = 100000;          // files, directories and links
};

// What to leave out of a snapshot: a small subset of gitignore's patterns, one per line. Blank
// lines and `#` comments are skipped; `!pattern` takes a file back in; a trailing `/` matches
// only directories; a pattern with a `/` (other than a trailing one) is anchored at the tree's
// top directory (a leading `/` only anchors), one without matches a name at any depth; `*`, `?`
// and `[...]` as in fnmatch(3), `**/` for any number of directories. The last matching line
// decides. Nested ignore files are not read.
class IgnoreRules {
 public:
  // The rules of the tree at `root`: its .cohortignore, else its .gitignore, else none; `.git`
  // is always left out. `source()` names the file read ("" when none). Errors: kIo when the
  // file exists but cannot be read.
  static Result<IgnoreRules> forTree(const std::string& root);
  static IgnoreRules fromText(std::string_view text, std::string source = "");

  // Whether `rel` (a path relative to the tree, '/'-separated) is left out.
  bool ignored(const std::string& rel, bool is_dir) const;
  const std::string& source() const { return source_; }

 private:
  struct Rule {
    std::string pattern;
    bool negate = false;
    bool dir_only = false;
    bool anchored = false;
  };
  std::vector<Rule> rules_;
  std::string source_;
};

struct TreeEntry {
  enum class Kind { kFile, kDir, kLink };
  Kind kind = Kind::kFile;
  std::string rel;  // relative to the tree's top, '/'-separated
  int64_t size = 0;
  uint32_t mode = 0;
  int64_t mtime = 0;   // seconds
  std::string target;  // a link's
};

struct TreeListing {
  std::vector<TreeEntry> entries;  // parents before their children
  int64_t bytes = 0;               // the files' sizes
  int64_t files = 0;
};

// Lists the tree at `root` for a snapshot, leaving out what `rules` name. Errors, each naming
// the path and what to do: kInvalidArgument for a socket, FIFO or device, a link whose target is
// absolute or leads out of the tree, a name too long for ustar (over 255 bytes, or no '/' that
// splits it into 155 + 100), and for more than `limits` (kTooLarge, saying how much there is
// and the biggest files); kIo when something cannot be read.
Result<TreeListing> listTree(const std::string& root, const IgnoreRules& rules,
                             const ArchiveLimits& limits);

// Writes `listing` (of the tree at `root`) as a ustar archive to `fd`. `progress(bytes)` is
// called with the file bytes written so far, after each file. Errors: kIo naming the file
// (kInvalidArgument when a file changed size while it was read: submit again).
Result<void> writeArchive(const std::string& root, const TreeListing& listing, int fd,
                          const std::function<void(int64_t)>& progress = {});

struct ExtractStats {
  int64_t files = 0;
  int64_t dirs = 0;
  int64_t links = 0;
  int64_t bytes = 0;
};

// Extracts the ustar `archive` into `dest`, which must not exist (it is created 0755; its
// parent must exist). Errors: kInvalidArgument naming the entry (see above), kTooLarge when the
// archive holds more than `limits`, kIo; after any error `dest` is removed.
Result<ExtractStats> extractArchive(std::string_view archive, const std::string& dest,
                                    const ArchiveLimits& limits);

}  // namespace cohort::storage
