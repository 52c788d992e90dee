// `cohort env`: the environments jobs run in (env/environments.h), kept under the data root's
// envs/: ls, show NAME, build NAME, create NAME --from BASE [--pip PKG==VER]... [--requirements
// FILE], rebuild NAME, rm NAME.
#pragma once

#include <string>

namespace cohort::cli {

// argv[1] is "env". Exit codes: 0 done, 1 a build that failed (pip's words on stderr), 2 bad
// usage or no such environment.
int cmdEnv(int argc, char** argv);

std::string envHelp();

}  // namespace cohort::cli
