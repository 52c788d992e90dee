// The server's volcano backend (`cohort server --backend volcano`): each job of the server is a
// Volcano Job in the cluster of the server's Kubernetes configuration. submit() renders the job
// (volcano.h), creates its Secret, holding the job's secret and the server's URL and report
// credential for its coordinator pod, and its Job (volcano_cluster.h); the handle is the Job's
// namespace, name and uid, with which recover() finds it again after a server restart. Its
// coordinator pod reports the job's events to the server as every coordinator does
// (agent/reporter.h); a thread of this backend copies the coordinator pod's log into the job
// directory's console.log, for `cohort logs`. cancel() deletes the Job: every pod gets SIGTERM
// and the coordinator stops the ranks gracefully and reports the stop. Called from the job
// service's loop thread (backend.h); its log threads are its own.
#pragma once

#include <memory>
#include <string>

#include "backends/backend.h"
#include "backends/volcano_cluster.h"
#include "spec/job_spec.h"

namespace cohort::backends {

struct VolcanoSettings {
  std::string namespace_name;  // the Jobs' namespace; "": the Kubernetes configuration's
  // The address the pods reach this server at: the host of the URL its coordinators report to.
  std::string advertise;
};

// Whether the server's volcano backend can run `spec` (a job submitted to it): it has an image
// and renders as a Volcano Job; `uploaded`: it came with code uploaded to the server, which no
// pod can read. Errors: kInvalidArgument naming the field and what to do.
Result<void> checkVolcanoJob(const spec::JobSpec& spec, bool uploaded);

// Errors of the cluster (no configuration, unreachable, Volcano not installed) come from
// submit(), naming the job.
std::unique_ptr<Backend> makeVolcanoBackend(VolcanoSettings settings);

// The address of this host that the cluster's pods reach a server listening on `listen_host` at:
// `listen_host` itself when it is an address of its own, for 0.0.0.0 the one this host reaches
// the API server from. Errors: kInvalidArgument when that is a loopback address (no pod reaches
// it), saying to listen on another.
Result<std::string> volcanoAdvertiseAddress(const VolcanoCluster& cluster,
                                            const std::string& listen_host);

}  // namespace cohort::backends
