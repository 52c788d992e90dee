// Debug status: what a rank of a job with debug: says about its debugger, in its status file
// ($COHORT_DEBUG_FILE, written by cohort's debug bootstrap, plan/debug_bootstrap.py): waiting
// for one, one attached, or running without one. The file is the rank's, so hostile: it is opened
// without following a link, only when it is a plain file with one name (owned by the rank's
// identity when it has its own), read up to kMaxDebugStatusBytes, and every field is checked;
// anything else is no status at all. Never throws. Pure but for readDebugStatus; thread-safe.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "util/result.h"

namespace cohort::agent {

inline constexpr size_t kMaxDebugStatusBytes = 4096;
inline constexpr size_t kMaxDebugWhereBytes = 400;

struct DebugStatus {
  std::string state;   // waiting | attached | running
  std::string reason;  // start | breakpoint | exception | pdb
  std::string where;   // printable text, at most kMaxDebugWhereBytes; may be empty
  int64_t seq = 0;     // the rank's count of its changes
  // How many times a debugger attached: an attach that came and went between two reads of the
  // file (a client that attached, let the rank go and left) still counts.
  int64_t attaches = 0;

  bool operator==(const DebugStatus&) const = default;
};

// Errors: kInvalidArgument naming what is wrong, for text that is not one JSON object with a
// known state and reason.
Result<DebugStatus> parseDebugStatus(std::string_view text);

// The status file at `path`. `uid` >= 0: the file must belong to it. Errors: kNotFound when there
// is none (yet), kInvalidArgument for a file that is not a plain one, too large, or malformed.
Result<DebugStatus> readDebugStatus(const std::string& path, uid_t uid = static_cast<uid_t>(-1));

}  // namespace cohort::agent
