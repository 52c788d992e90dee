// Environments: where a job's ranks find their interpreter and packages. A job names one
// (`environment: pytorch`); every rank then runs with that environment's bin/ first on PATH and
// VIRTUAL_ENV set, so `command: [python3, train.py]` runs in it.
//
// Presets ship with cohort (presets()): `system` (the interpreter as it is), `pytorch` (a
// virtual environment over Debian's python3-torch; `deepspeed` and `jupyter` add pinned PyPI
// packages on it), `tensorflow` and `mindspore` (from PyPI, pinned). They are built on first
// use, then kept. A saved environment is made from one with
// `cohort env create NAME --from pytorch --pip PKG==VER`: a virtual environment layered on its
// base (the base's packages stay visible through a .pth file; nothing is copied) with the
// requirements installed, every package it installed pinned in its lock file.
//
// Where: a list of directories (storeDirs(): $COHORT_ENVS, DIR[:DIR...], else DATA_ROOT/envs).
// Saved environments are made in the first; a name is looked up in each in turn; presets are
// built in the last. So `COHORT_ENVS=~/envs:/shared/envs` keeps one's own environments apart
// from a team's, and a server's account finds its own, then the admins', then the presets.
//
// On disk, in its directory: NAME/venv (the virtual environment), NAME/lock.txt (`pip freeze` of
// what NAME itself installed) and NAME/env.json (its definition, its content hash and what was
// found when it was built), written last: an environment is built exactly when its env.json is
// there, so a build that failed or was killed leaves nothing usable under the name and is
// started again from scratch. A build writes only inside NAME/ (which it empties first; it never
// makes or removes NAME/ itself when it is there), so it can run where nothing else is writable
// (env/confined_build.h). Builds of one name are serialised with a lock file (.NAME.lock beside
// it, flock), so that two jobs starting at once build it once.
//
// Each environment has a content hash: a preset's, of its definition; a saved one's, of its
// base's hash, its requirements and its lock file. A node that must build an environment where
// the planner saw it (agent/staging.h) builds it from the lock file and checks the hash.
//
// What a build wrote (env.json, lock.txt) is read without following links: on a server, the
// account whose environment it is wrote it. Not thread-safe: one Store per thread.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "plan/plan.h"
#include "util/result.h"
#include "util/text.h"

namespace cohort::env {

struct Preset {
  std::string name;
  std::string summary;                    // one line for `cohort env ls`
  std::string python;                     // what the virtual environment is made from
  bool system_site_packages = false;      // Debian's packages for that interpreter stay visible
  std::vector<std::string> requirements;  // from PyPI, pinned
  // pip constraints (PKG==VER) for whatever the requirements pull in, so that every build of
  // the preset installs the same set.
  std::vector<std::string> constraints;
  std::vector<std::string> modules;  // imported after the build; their versions recorded
};

// system, pytorch, deepspeed, jupyter, tensorflow, mindspore.
const std::vector<Preset>& presets();
const Preset* findPreset(const std::string& name);

// Where environments are kept: the directories of $COHORT_ENVS (separated by ':'; relative ones
// from the current directory) when it is set, else DATA_ROOT/envs.
std::vector<std::string> storeDirs(const std::string& data_root);

struct Environment {
  std::string name;
  bool preset = false;
  bool built = false;
  std::string from;                             // the environment a saved one is layered on
  std::vector<std::string> requirements;        // what it asked pip for (a preset's pins)
  std::string store;                            // the directory it is kept in
  std::string dir;                              // its directory; "" for system
  std::string venv;                             // its virtual environment; "" for system
  std::string python;                           // its interpreter, absolute, once built
  std::string python_version;                   // once built
  std::map<std::string, std::string> packages;  // key packages and their versions, once built
  std::string hash;                             // its content hash (a saved one: once built)
  std::string summary;
  // Its directory is there without env.json: a build was killed (kill -9, Ctrl-C, a machine
  // that went down) or is running now. list() shows it, remove() takes it away, and a build of
  // the name starts again from scratch.
  bool incomplete = false;
};

// One line of a build's progress (pip's own lines among them), for the terminal or a job log.
using Progress = std::function<void(const std::string& line)>;

// What `cohort env create` makes.
struct CreateRequest {
  std::string name;
  std::string from;                       // the environment it is built on
  std::vector<std::string> requirements;  // pip requirement specifiers, "PKG==VER"
  std::string requirements_file;          // a requirements.txt, added to them
  // A lock file (PKG==VER lines) to install instead of resolving the requirements, so that the
  // build has exactly those versions (another machine's build, a rebuild); "" for none.
  std::string lock_file;
};

class Store {
 public:
  // `dirs`: storeDirs()'s answer (at least one).
  explicit Store(std::vector<std::string> dirs) : dirs_(std::move(dirs)) {}

  // A preset or a saved environment, built or not. Errors: kNotFound, listing the names there
  // are; kInvalidArgument for a name that cannot be one.
  Result<Environment> get(const std::string& name) const;
  // Every preset, then every saved environment by name (one of a directory earlier in the list
  // hides one of the same name in a later one), then the unfinished builds of saved names
  // (`incomplete`) that have none.
  std::vector<Environment> list() const;

  // `name`, built now unless it is. Errors: as get(), or kUnavailable with pip's or Python's
  // own words when the build fails (nothing is left under the name then).
  Result<Environment> ensureBuilt(const std::string& name, const Progress& progress);
  // A saved environment, made in the first directory, on its base (built first when it is a
  // preset that is not). Errors: kAlreadyExists; kInvalidArgument for a bad name, a missing
  // file or a lock file with a line that is not PKG==VER; as ensureBuilt.
  Result<Environment> create(const CreateRequest& request, const Progress& progress);
  // Builds a saved environment again from its lock file: the same versions. Errors: as
  // ensureBuilt; kNotFound for a preset or a name without a lock file.
  Result<Environment> rebuild(const std::string& name, const Progress& progress);
  // Removes a saved environment, or a preset's build (it is built again on next use), or what
  // an unfinished build of either left. Errors: kNotFound; kFailedPrecondition when a saved
  // environment is layered on it, or when a build of it is running now.
  Result<void> remove(const std::string& name);

  // What a node needs to find or build `name` where it is (a built one), bottom layer first:
  // its preset, ..., itself. Nothing for system. Errors: as get(); kFailedPrecondition when it
  // or a layer below it is not built, or its lock file cannot be read.
  Result<std::vector<plan::EnvironmentLayer>> layers(const std::string& name) const;

  const std::string& root() const { return dirs_.front(); }
  const std::vector<std::string>& dirs() const { return dirs_; }

 private:
  std::vector<std::string> savedNames() const;  // with an env.json, in any directory, by name
  // Saved names whose directory is there without env.json in any store directory: what
  // unfinished builds left, by name.
  std::vector<Environment> unfinished() const;

  std::vector<std::string> dirs_;
};

// What a rank running in `e` gets on top of its environment: VIRTUAL_ENV, and PATH with the
// environment's bin/ first (`path`: the PATH it would have had). Nothing for system.
std::vector<std::pair<std::string, std::string>> rankVariables(const Environment& e,
                                                               const std::string& path);

// Bytes used under `dir` (not following links); 0 when it is not there.
int64_t diskUsage(const std::string& dir);

// Whether `name` can name a saved environment: 1-64 letters, digits, '-', '_', '.', not
// starting with '.' or '-', and not a preset's. Errors: kInvalidArgument saying why.
Result<void> checkSavedName(const std::string& name);

// A requirement of a package by name, as pip takes it: NAME[EXTRAS][SPECIFIERS][; MARKER]
// ("termcolor==3.3.0", "requests[socks]>=2,<3"). Refused (kInvalidArgument, saying what is
// accepted): URLs, paths, pip's options (-e, -r, --index-url), and more than 256 bytes.
Result<void> checkRequirement(const std::string& requirement);

// A lock file's pins (`pip freeze`: PKG==VER lines; blank lines and comments are dropped), one
// per element, trimmed. Errors: kInvalidArgument naming the line that is not a pin (a package
// installed from a URL or a path: "PKG @ file:///...", "-e ...").
Result<std::vector<std::string>> parseLock(const std::string& text);

// The content hashes (64 hex digits).
std::string presetHash(const Preset& preset);
std::string savedHash(const std::string& base_hash, const std::vector<std::string>& requirements,
                      const std::vector<std::string>& pins);

// The first `max` bytes of the regular file at `path`, opened without following a link (a file
// a build wrote). Errors: kNotFound when it is not there, kInvalidArgument when it is not a
// regular file with one name, or is bigger than `max`.
Result<std::string> readBuiltFile(const std::string& path, size_t max);

}  // namespace cohort::env
