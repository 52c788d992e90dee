// Environments: where a job's ranks find their interpreter and packages. A job names one
// (`environment: pytorch`); every rank then runs with that environment's bin/ first on PATH and
// VIRTUAL_ENV set, so `command: [python3, train.py]` runs in it.
//
// Presets ship with cohort (presets()): `system` (the interpreter as it is), `pytorch` (a
// virtual environment over Debian's python3-torch), `tensorflow` and `mindspore` (from PyPI,
// pinned). They are built on first use, then kept. A saved environment is made from one with
// `cohort env create NAME --from pytorch --pip PKG==VER`: a virtual environment layered on its
// base (the base's packages stay visible through a .pth file; nothing is copied) with the
// requirements installed, every package it installed pinned in its lock file.
//
// On disk, under storeDir(): NAME/venv (the virtual environment), NAME/lock.txt
// (`pip freeze` of what NAME itself installed) and NAME/env.json (its definition and what was
// found when it was built), written last: an environment is built exactly when its env.json is
// there, so a build that failed or was killed leaves nothing usable under the name and is
// started again from scratch. Builds of one name are serialised with a lock file (flock), so
// that two jobs starting at once build it once. Not thread-safe: one Store per thread.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

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

// system, pytorch, tensorflow, mindspore.
const std::vector<Preset>& presets();

// Where environments are kept: $COHORT_ENVS when it is set (a directory the nodes of a cluster
// share, or one that several data roots use), else DATA_ROOT/envs.
std::string storeDir(const std::string& data_root);

struct Environment {
  std::string name;
  bool preset = false;
  bool built = false;
  std::string from;                             // the environment a saved one is layered on
  std::vector<std::string> requirements;        // what it asked pip for (a preset's pins)
  std::string dir;                              // its directory; "" for system
  std::string venv;                             // its virtual environment; "" for system
  std::string python;                           // its interpreter, absolute, once built
  std::string python_version;                   // once built
  std::map<std::string, std::string> packages;  // key packages and their versions, once built
  std::string summary;
};

// One line of a build's progress (pip's own lines among them), for the terminal or a job log.
using Progress = std::function<void(const std::string& line)>;

class Store {
 public:
  // `root`: storeDir()'s answer.
  explicit Store(std::string root) : root_(std::move(root)) {}

  // A preset or a saved environment, built or not. Errors: kNotFound, listing the names there
  // are; kInvalidArgument for a name that cannot be one.
  Result<Environment> get(const std::string& name) const;
  // Every preset, then every saved environment, by name.
  std::vector<Environment> list() const;

  // `name`, built now unless it is. Errors: as get(), or kUnavailable with pip's or Python's
  // own words when the build fails (nothing is left under the name then).
  Result<Environment> ensureBuilt(const std::string& name, const Progress& progress);
  // A saved environment `name` on `from` (built first when it is not) with `requirements`
  // (pip requirement specifiers, "PKG==VER") and those of `requirements_file` installed.
  // Errors: kAlreadyExists; kInvalidArgument for a bad name or a missing file; as ensureBuilt.
  Result<Environment> create(const std::string& name, const std::string& from,
                             const std::vector<std::string>& requirements,
                             const std::string& requirements_file, const Progress& progress);
  // Builds a saved environment again from its lock file: the same versions. Errors: as
  // ensureBuilt; kNotFound for a preset or a name without a lock file.
  Result<Environment> rebuild(const std::string& name, const Progress& progress);
  // Removes a saved environment, or a preset's build (it is built again on next use). Errors:
  // kNotFound; kFailedPrecondition when a saved environment is layered on it.
  Result<void> remove(const std::string& name);

  const std::string& root() const { return root_; }

 private:
  std::string root_;
};

// What a rank running in `e` gets on top of its environment: VIRTUAL_ENV, and PATH with the
// environment's bin/ first (`path`: the PATH it would have had). Nothing for system.
std::vector<std::pair<std::string, std::string>> rankVariables(const Environment& e,
                                                               const std::string& path);

// Bytes used under `dir` (not following links); 0 when it is not there.
int64_t diskUsage(const std::string& dir);

}  // namespace cohort::env
