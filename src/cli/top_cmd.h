// `cohort top JOB`: a live per-rank table of a job, like `top`: each rank's CPU use and
// resident memory (the agents' samples, resources.jsonl) and its latest training metrics
// (cohort.log lines, metrics.jsonl), redrawn every 2 seconds until the job ends; printed once
// when stdout is not a terminal, or with --once. A job this machine runs is read from its job
// directory; any other is asked of the server (GET /v1/jobs/{id}, /ranks, /metrics).
#pragma once

#include <string>

namespace cohort::cli {

// argv[1] is "top". Exit codes: 0 shown, 2 bad usage or no such job.
int cmdTop(int argc, char** argv);

std::string topHelp();

}  // namespace cohort::cli
