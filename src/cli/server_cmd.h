// `cohort server`: the flags, the first admin token, and running the service in the foreground
// until SIGINT/SIGTERM.
#pragma once

#include <string>

namespace cohort::cli {

int cmdServer(int argc, char** argv);
std::string serverHelp();

}  // namespace cohort::cli
