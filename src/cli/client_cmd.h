// The commands that talk to a `cohort server` over its HTTP API (docs/server-api.md): submit,
// ps, status, logs, stop, delete, outputs, share, shares, unshare, accounts, tokens, login,
// whoami. Where the server is and which token to send come from --server/--token, else
// COHORT_SERVER/COHORT_TOKEN, else the config file `cohort login` writes.
#pragma once

#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/command.h"

namespace cohort::cli {

// The server's commands, each with its line in cohort --help, its help, its flags and what runs
// it (command.h). Their exit codes: 0 success, 2 bad usage or a request the server refused as
// invalid (400, 404, 409), 1 when the server cannot be reached or failed; `cohort submit --wait`
// and `cohort status --wait` return the job's exit code.
std::vector<Command> clientCommands();

// The flags of the server's command `command` (besides serverFlags()).
const std::vector<FlagSpec>& clientFlags(const std::string& command);

// `cohort rerun JOB` for a job of the server (cohort rerun runs a job of this machine here).
int cmdServerRerun(int argc, char** argv);

}  // namespace cohort::cli
