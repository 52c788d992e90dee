// `cohort stacks JOB`: every rank's Python stack of a job running on this machine, now, grouped
// so that identical stacks print once with the ranks that share them (agent/hang.h). It signals
// the job's coordinator (SIGUSR1, its pid in the job directory), which asks every agent for its
// ranks' stacks and writes them to stacks-now.txt; this prints that file. The job goes on.
#pragma once

namespace cohort::cli {

// argv[1] is "stacks". Exit codes: 0 printed, 1 the job is not running or did not answer, 2 bad
// usage or no such job.
int cmdStacks(int argc, char** argv);

const char* stacksHelp();

}  // namespace cohort::cli
