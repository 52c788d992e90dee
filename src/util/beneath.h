// Opening what someone else named, below a directory, without following a link: the kernel's
// openat2 with RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS, or, where the
// kernel has no openat2 (before Linux 5.6), each part of the path opened in turn with
// O_NOFOLLOW. Neither a symbolic link (anywhere on the path, its last part included), a magic
// link (/proc/<pid>/fd/...) nor a ".." that leaves the directory is ever followed. Thread-safe.
#pragma once

#include <string>

#include "util/fd.h"
#include "util/result.h"

namespace cohort {

// Opens `rel` (relative; "" or "." is the directory itself) below the directory `dir_fd` with
// `flags` (O_CLOEXEC is added; O_CREAT is refused). Errors: kInvalidArgument naming the part
// of `rel` that is a symbolic link ("'a/b' is a symbolic link") or that leaves the directory
// (an absolute path, ".."), kNotFound, kIo (permission and the rest, naming `rel`).
Result<UniqueFd> openBeneath(int dir_fd, const std::string& rel, int flags);

// openBeneath without openat2, a part at a time (what it does on a kernel without openat2;
// exposed for its test).
Result<UniqueFd> openBeneathByParts(int dir_fd, const std::string& rel, int flags);

// Whether this kernel has openat2 (asked once).
bool haveOpenat2();

}  // namespace cohort
