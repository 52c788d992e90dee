// The privilege seam (as Slurm's slurmstepd and OpenSSH's privilege separation draw it): the
// code that runs as root decides and spawns; what touches an account's files (account/
// file_work.h) runs as that account, in a process of its own, and answers through typed
// messages.
//
// runAs starts `cohort account-worker` (accountWorkerMain) with the account's uid and gid, no
// supplementary group, no capability (a process whose every uid is not 0 has none), no way to
// gain one (PR_SET_NO_NEW_PRIVS), not dumpable (no process of the account can trace it or read
// its memory), an environment cohort builds, and its death tied to the calling thread. It gets
// the request on its stdin and a socket on descriptor 3 (SOCK_SEQPACKET), through which it asks
// the caller for what only the caller holds: the stores (the store on disk, root's; S3, with
// the server's credentials, which never reach the worker). The caller answers each call for the
// keys the request was granted only (StoreGrant), reading and writing objects through file
// descriptors the worker opened (SCM_RIGHTS), never through a path the worker named. The last
// message is the work's result.
//
// Where the identity is the caller's own (a user's own `cohort run`, a server that does not run
// as root), the work is done in the calling process, with the same rules. Blocking; any thread.
#pragma once

#include <string>
#include <vector>

#include "account/file_work.h"
#include "storage/object_store.h"
#include "util/result.h"

namespace cohort::account {

// Whose files: a uid and gid; -1 for both is the calling process's own.
struct Identity {
  int uid = -1;
  int gid = -1;
  bool own() const { return uid < 0 && gid < 0; }
};

// A store handed to the work (an input's or an output's `store` indexes the list), and the keys
// the work may use in it: `prefix` and what is below it ("" for all of them), read-only or not.
struct StoreGrant {
  storage::ObjectStore* store = nullptr;  // not owned; used from the calling thread only
  std::string prefix;
  bool write = false;
};

// Does `work` as `who` (see above); an Extract's archive is read from `archive_fd` (the worker
// gets a descriptor of it: a memory file or a regular file, read from its start). Errors: those
// of perform (the worker's, as it said them); kPermissionDenied when the identity cannot be
// taken; kIo when the worker cannot start (cohort's binary must be one every user may run) or
// ends without an answer (naming how it ended).
Result<Done> runAs(const Identity& who, const Work& work, const std::vector<StoreGrant>& stores,
                   int archive_fd = -1);

// Whether runAs would start a process for `who` (the identity is not this process's).
bool needsWorker(const Identity& who);

// The worker's side: `cohort account-worker`, started by runAs only. Returns the exit code.
int accountWorkerMain();

}  // namespace cohort::account
