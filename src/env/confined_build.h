// Building a saved environment as someone else: a child `cohort env create` that runs as a given
// Unix user and, with the sandbox, under bubblewrap. pip installing a requirement runs that
// package's code, so a build for a server's account is that account's code: it runs as the
// account's own user, never as the server's, and in the sandbox it sees the machine read-only
// but for its environment's own directory and a /tmp of its own, with the directories in `hide`
// (the data root: the server's database and tokens, every job and account) empty but for the
// environment stores it builds from (read-only). The network is the machine's: pip reaches its
// index. The server builds its accounts' environments this way (server/environments.h), and a
// node's agent the environment a job brought that the node does not have (env/node_copy.h).
//
// Before the child starts, this process (root, on a server) makes what the child cannot: the
// environment's directory, empty and owned by the build's user, the build lock beside it, and
// the lock file to install from. Blocking; any thread that outlives the build (the child gets
// SIGKILL when the thread that started it ends).
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "env/environments.h"
#include "util/result.h"
#include "util/text.h"

namespace cohort::env {

struct Confinement {
  int uid = -1;  // the user the build runs as; -1: this process's
  int gid = -1;
  bool sandbox = false;           // under bubblewrap (/usr/bin/bwrap)
  std::vector<std::string> hide;  // directories the sandbox shows empty (but for the stores)
};

struct ConfinedBuild {
  // Where the build looks environments up (its COHORT_ENVS): it makes NAME in the first; its
  // base (a preset in the last, built already) is found in them.
  std::vector<std::string> stores;
  std::string name;
  std::string from;
  std::vector<std::string> requirements;
  std::string lock;  // a lock file's text: install exactly these pins ("" to resolve)
};

// Builds `build` with `cohort_bin` (env create) under `how`, each line the build prints going
// to `progress`, for at most `timeout`; `cancelled` (when set) is asked every fraction of a
// second and kills the build when it says so. Nothing is left under the name when it fails.
// Errors: kUnavailable with the build's last lines (pip's words) when it fails;
// kDeadlineExceeded past `timeout`; kFailedPrecondition when the sandbox is wanted and
// bubblewrap is missing; kIo when the directory cannot be prepared.
Result<void> buildConfined(const std::string& cohort_bin, const ConfinedBuild& build,
                           const Confinement& how, Millis timeout, const Progress& progress,
                           const std::function<bool()>& cancelled = nullptr);

// Whether a variable of this process's environment ("NAME=VALUE") reaches a build: the tools'
// PATH, the locale (LANG, LC_*, TZ), and how pip reaches its index (PIP_*, the proxies, the CA
// bundles). Nothing else of the server's environment does: a build runs the packages' code as
// the account. (An index credential in PIP_INDEX_URL reaches every account's builds.)
bool buildMayKeep(std::string_view entry);

// The argv that runs `command` under `how`'s sandbox, writable only in `writable` ("": nowhere
// but its own /tmp), with `stores` readable (what buildConfined runs; a server's check of a
// job's Python, env/python_check.h, too).
std::vector<std::string> sandboxArgv(const Confinement& how, const std::vector<std::string>& stores,
                                     const std::string& writable,
                                     const std::vector<std::string>& command);

}  // namespace cohort::env
