// `cohort cp` to and from a server's store: `cohort cp ./data server://datasets/x` uploads a
// file or a tree (one PUT /v1/store/... per file, streamed from disk) with the login's token
// (cohort login, or COHORT_SERVER/COHORT_TOKEN, or --server/--token), and `cohort cp
// server://datasets/x ./data` downloads a file or every file under a prefix. A server:// URI
// names the same place as store:// does on the server's machine, with the same access rules
// (an account's own buckets and what is shared with it). Downloads go through a temporary file
// renamed into place, and a listed path that would land outside the destination is refused.
// Call from one thread.
#pragma once

#include <string>

#include "cli/client.h"
#include "util/result.h"

namespace cohort::cli {

// Whether `arg` is a server:// URI.
bool isServerUri(const std::string& arg);

struct ServerCopyStats {
  int64_t files = 0;
  int64_t bytes = 0;
};

// Copies between a local path and a server:// URI (exactly one of `src`, `dst` is one).
// Errors: kInvalidArgument for a bad URI or path, those of ApiClient (not found, no access),
// kIo naming the local file.
Result<ServerCopyStats> copyWithServer(ApiClient& api, const std::string& src,
                                       const std::string& dst, bool progress);

}  // namespace cohort::cli
