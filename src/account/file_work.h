// File work done for a job or an account: what cohort does with files that a job or an account
// named or wrote (staging a job's inputs, copying its outputs, extracting a code upload, removing
// a job's own /tmp), as typed requests with a codec, and the function that does one. Which
// identity does it is account/as_account.h's business: this file holds no privilege of its own
// and runs as whoever calls it.
//
// The rules for what a job or an account named (docs/security.md):
//  - A local input named by a server's job is opened below the directory the admin listed for
//    it (`Input::beneath`, `cohort server --input-root`) with openat2 and no link followed on
//    the way (util/beneath.h), and copied with links refused (a symbolic link, a file with
//    other hard links, a device, FIFO or socket fails the copy, naming it).
//  - An output is copied with links refused.
//  - What is in a store (store://, s3://) is reached only through the ObjectStore the caller
//    hands in, by key.
// Blocking; any thread, one call at a time per request.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "storage/archive.h"
#include "storage/object_store.h"
#include "util/result.h"

namespace cohort::account {

// One input of a node: a local path, or a key of one of the stores handed in, copied (or linked)
// to `target`.
struct Input {
  std::string source;   // an absolute path, or a key of stores[store]
  int store = -1;       // -1: a local path
  // For a local path: the directory it must be below ("" for a user's own job: anywhere, and
  // links are followed, as cp follows them). It is opened without following a link; then
  // `source` below it is too, and nothing in the copy is read through a link.
  std::string beneath;
  std::string target;  // absolute
  // A symbolic link to `source` instead of a copy (below `beneath`, checked there; elsewhere
  // the caller checked that it is there).
  bool link = false;
};

// A node's work directory and its inputs: `dirs` are made first (each mode 0700, and new: one
// that is there already is refused), then every input.
struct StageInputs {
  std::string work_dir;  // made (with its missing parents) when missing
  std::vector<std::string> dirs;
  std::vector<Input> inputs;
};

// An output of a job: `source` (the job's output/ or a file in it, written by its ranks) to a
// local path, or to a key of stores[store]; links refused.
struct CopyOutput {
  std::string source;
  std::string target;
  int store = -1;
};

// A code upload: the ustar archive on the descriptor handed in, extracted into `dest` (new; its
// parent must exist) with storage::extractArchive's checks and `limits`.
struct Extract {
  std::string dest;
  storage::ArchiveLimits limits;
};

// A copy of the tree at `from` made as an upload is (listed and archived as the client does it,
// then extracted into `dest` as an upload is), for a job that runs an earlier job's code again.
struct Snapshot {
  std::string from;
  std::string dest;
  storage::ArchiveLimits limits;
};

// Trees removed, each with everything in it (links removed, never followed); with
// `contents_only`, each path stays, empty (for a directory whose parent its user may not write).
struct Remove {
  std::vector<std::string> paths;
  bool contents_only = false;
};

using Work = std::variant<StageInputs, CopyOutput, Extract, Snapshot, Remove>;

// What was done: files copied (or skipped as identical, or linked as inputs, or extracted) and
// bytes written.
struct Done {
  int64_t files = 0;
  int64_t bytes = 0;
  int64_t dirs = 0;   // an extraction's directories
  int64_t links = 0;  // an extraction's symbolic links
};

// The work's name, for messages ("stage inputs", "copy an output", ...).
const char* describe(const Work& work);

// The codec of a request as it crosses to the process that does it. decodeWork never throws and
// checks every field's type. Errors: kInvalidArgument.
std::string encodeWork(const Work& work);
Result<Work> decodeWork(std::string_view text);

// Does `work` as the calling process, the stores it names being `stores` (an input's or an
// output's `store` indexes it) and an Extract's archive being read from `archive_fd`. Errors:
// those of the copy engines and the archive (storage/), each naming the input, output or file.
Result<Done> perform(const Work& work, const std::vector<storage::ObjectStore*>& stores,
                     int archive_fd = -1);

}  // namespace cohort::account
