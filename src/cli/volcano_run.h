// `cohort run --backend volcano`: the job as a Volcano Job in the Kubernetes cluster of the
// user's kubeconfig, followed from this terminal. cohort creates the job's Secret and the Job,
// says in its own words what the gang waits for (Volcano's PodGroup and the pods' conditions),
// prints what the job's coordinator prints (the merged, prefixed log of every rank and the root
// cause: the coordinator pod's log, as `kubectl logs -f` reads it), and exits with the job's exit
// code. Ctrl-C deletes the Job (every pod gets SIGTERM and the coordinator stops the ranks
// gracefully); a second Ctrl-C deletes the pods at once. Nothing of the job is left but the
// ended Job itself (for `kubectl get vcjob`), which the next run of a job of that name replaces.
#pragma once

#include "cli/job_options.h"

namespace cohort::cli {

// Runs the job of `options` (whose backend is volcano) and returns cohort's exit code: the
// job's, 2 for a job or a cluster configuration that is wrong (nothing was created), 1 when the
// cluster could not run it, 128+N when signal N stopped it.
int runOnVolcano(const JobOptions& options);

}  // namespace cohort::cli
