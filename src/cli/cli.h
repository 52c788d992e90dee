// The `cohort` command line: the table of its commands, their help texts, and turning a Result into
// a message on stderr and an exit code. stdout carries only what the user asked for.
#pragma once

#include <string>
#include <vector>

#include "cli/command.h"

namespace cohort::cli {

// Every command of cohort, each once (command.h): the local ones here, then the server's
// (client_cmd.h). To add one, add its entry to this table in cli.cc.
const std::vector<Command>& commands();
// The command named `name`, or null.
const Command* findCommand(const std::string& name);

// Runs the command line and returns the process exit code: 0 success, 2 bad usage or bad input
// (nothing was started), 1 when cohort itself failed, otherwise the job's own result.
int main(int argc, char** argv);

}  // namespace cohort::cli
