// `cohort stacks JOB`: every rank's Python stack of a running job, now, grouped so that
// identical stacks print once with the ranks that share them (agent/hang.h). For a job of this
// machine it signals the job's coordinator (SIGUSR1, its pid in the job directory), which asks
// every agent for its ranks' stacks and writes them to stacks-now.txt; this prints that file.
// For a job of the server, the server does the signalling (POST /v1/jobs/{id}/stacks) and GET
// serves the file. The job goes on.
#pragma once

#include <string>

namespace cohort::cli {

// argv[1] is "stacks". Exit codes: 0 printed, 1 the job is not running or did not answer, 2 bad
// usage or no such job.
int cmdStacks(int argc, char** argv);

std::string stacksHelp();

}  // namespace cohort::cli
