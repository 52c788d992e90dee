// `cohort coordinate`: the coordinator of a job that runs as a Volcano Job, the command of its
// coordinator pod (volcano.h renders it). The job comes in the pod's environment: the job file
// as JSON in COHORT_JOB, the job id in COHORT_JOB_ID, the secret the agents prove in
// COHORT_JOB_SECRET (from the job's Kubernetes Secret), and for a job of `cohort server` the
// server's URL and the job's report credential (COHORT_REPORT_URL, COHORT_REPORT_TOKEN, from the
// same Secret). It listens for the agents, which Volcano starts in the job's other pods (it
// starts nothing itself), plans with the addresses they report, runs the job as `cohort run`
// does, keeps the job's record in a job directory inside its pod, reports it to the server when
// there is one, and exits with the job's exit code, which the pod's phase carries to Volcano.
#pragma once

#include <string>

namespace cohort::cli {

int cmdCoordinate(int argc, char** argv);
std::string coordinateHelp();

}  // namespace cohort::cli
