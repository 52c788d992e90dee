// `cohort server`: the flags, the first admin token, and running the service in the foreground
// until SIGINT/SIGTERM.
#pragma once

namespace cohort::cli {

int cmdServer(int argc, char** argv);
const char* serverHelp();

}  // namespace cohort::cli
