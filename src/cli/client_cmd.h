// The commands that talk to a `cohort server` over its HTTP API (docs/server-api.md): submit,
// ps, status, logs, stop, delete, outputs, share, shares, unshare, accounts, tokens, login,
// whoami. Where the server is and which token to send come from --server/--token, else
// COHORT_SERVER/COHORT_TOKEN, else the config file `cohort login` writes.
#pragma once

#include <string>

namespace cohort::cli {

bool isClientCommand(const std::string& command);

// Runs the client command argv[1] and returns the exit code: 0 success, 2 bad usage or a request
// the server refused as invalid (400, 404, 409), 1 when the server cannot be reached or failed;
// `cohort submit --wait` and `cohort status --wait` return the job's exit code.
int cmdClient(int argc, char** argv);

// Help for one client command; "" when `command` is not one.
std::string clientHelp(const std::string& command);

// The client commands' lines for `cohort --help`.
const char* clientCommandsHelp();

}  // namespace cohort::cli
