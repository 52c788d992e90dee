// What `cohort submit` does with a job's workdir when the server cannot read it: archives it
// (storage/archive.h: leaving out what its .cohortignore, else its .gitignore, names), checks
// the size against a limit the user can raise, and uploads it to the server (POST /v1/uploads),
// which answers the upload's id for the job to name. Progress goes to stderr. Call from one
// thread.
#pragma once

#include <cstdint>
#include <string>

#include "cli/client.h"
#include "util/result.h"

namespace cohort::cli {

constexpr int64_t kDefaultMaxUpload = int64_t{256} << 20;

struct CodeUploadOptions {
  int64_t max_bytes = kDefaultMaxUpload;  // --max-upload
  bool quiet = false;                     // no summary line (errors are still returned)
};

// Uploads the tree at `workdir`; returns the upload id. Errors: kTooLarge over the limit (the
// message names the biggest files, the ignore file read, and --max-upload), kInvalidArgument
// for what cannot be archived (a link leading out, a socket, a name too long), kIo, and those
// of ApiClient (a server that refused the archive names the entry).
Result<std::string> uploadWorkdir(ApiClient& api, const std::string& workdir,
                                  const CodeUploadOptions& options);

}  // namespace cohort::cli
