// The `cohort` command line: the subcommand table, flags, help texts, and turning a Result into
// a message on stderr and an exit code. stdout carries only what the user asked for.
#pragma once

namespace cohort::cli {

// Runs the command line and returns the process exit code: 0 success, 2 bad usage or bad input
// (nothing was started), 1 when cohort itself failed, otherwise the job's own result.
int main(int argc, char** argv);

}  // namespace cohort::cli
