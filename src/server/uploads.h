// Code uploads: the snapshots of a workdir that `cohort submit` (or Client.submit) sends before
// the job that runs them (POST /v1/uploads, then POST /v1/jobs with "code": ID). An upload is
// extracted at once (storage/archive.h refuses whatever could write outside it), as the account
// (account/as_account.h: a process with its uid and gid), into <data-root>/uploads/<account>/
// <id>/, a directory only the server and the account's own processes can enter (0710, the
// account's group); the job that names it takes it, moving it into its own job directory (job/layout.h's code/), so one upload runs
// one job and no account can name another's. Uploads no job took within kUploadLifetime are
// removed by the account's next upload; how many an account may have waiting is its uploads
// quota (server/quotas.h), counted when the request comes.
//
// Thread-safe as far as the filesystem is: distinct ids never touch the same paths.
#pragma once

#include <chrono>
#include <string>
#include <string_view>

#include "account/as_account.h"
#include "storage/archive.h"
#include "util/result.h"

namespace cohort::server {

constexpr auto kUploadLifetime = std::chrono::hours(1);

struct Upload {
  std::string id;  // "up-" + 24 hex digits
  storage::ExtractStats stats;
};

// Extracts `archive` (ustar) as a new upload of `account`. Errors: kInvalidArgument naming the
// archive entry, kTooLarge over `limits`, kIo.
Result<Upload> receiveUpload(const std::string& data_root, const std::string& account,
                             const account::Identity& as, std::string_view archive,
                             const storage::ArchiveLimits& limits);

// The same, the archive being the `fd`'s whole file (a request's body, received into a file).
Result<Upload> receiveUploadFile(const std::string& data_root, const std::string& account,
                                 const account::Identity& as, int fd,
                                 const storage::ArchiveLimits& limits);

// How many uploads of `account` wait for their job (removing those that expired).
int waitingUploads(const std::string& data_root, const std::string& account);

// A new upload of `account` holding a copy of the tree at `dir` (an earlier job's code/, for a
// job that runs it again): listed and archived as the client does it, then extracted as any
// upload is, so the copy passes the same checks and limits; all of it as the account. Errors:
// those of storage::listTree and of receiveUpload.
Result<Upload> uploadTree(const std::string& data_root, const std::string& account,
                          const account::Identity& as, const std::string& dir,
                          const storage::ArchiveLimits& limits);

// The directory of `account`'s upload `id`, waiting for its job. Errors: kInvalidArgument for
// an id that is not one, kNotFound (never made, another account's, taken by a job, expired).
Result<std::string> pendingUpload(const std::string& data_root, const std::string& account,
                                  const std::string& id);

}  // namespace cohort::server
