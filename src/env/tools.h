// Internal to env/: running the tools environments are made with (python -m venv, pip, podman)
// as children of this process, with this process's environment less what would point them at
// another environment (VIRTUAL_ENV, PYTHONHOME) and with pip kept quiet and non-interactive.
#pragma once

#include <string>
#include <vector>

#include "env/environments.h"
#include "proc/spawn.h"
#include "util/result.h"

namespace cohort::env {

// This process's environment for a tool.
std::vector<std::string> toolEnvironment();

// Runs `argv`, each line it prints (stdout and stderr) going to `progress`, for at most an hour.
// Returns its last lines. Errors: kUnavailable, in the tool's words (its last lines), when it
// fails; those of proc::spawn().
Result<std::string> runShowing(const std::vector<std::string>& argv, const Progress& progress);

// Runs `argv` to its end (at most `timeout`), its stdout and stderr apart.
Result<proc::Captured> runQuietly(const std::vector<std::string>& argv, Millis timeout);

}  // namespace cohort::env
