// A cohort job's Volcano Job in a Kubernetes cluster, through the API server (kube.h): submitting
// it (the Secret its pods read, then the Job, nothing left behind when either fails), finding it
// again from a handle, following what it does (watches of the Job, its PodGroup and its pods, in
// cohort's words by volcano_status.h), reading its coordinator's output (the coordinator pod's
// log, as `kubectl logs -f` reads it), and deleting it. Used by `cohort run --backend volcano`
// and by the server's volcano backend. A VolcanoCluster is thread-safe; a VolcanoWatch runs
// threads of its own and may be read from any thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "backends/kube.h"
#include "backends/volcano.h"
#include "backends/volcano_status.h"
#include "util/result.h"

namespace cohort::backends {

// Where a job's Volcano Job is: all that is needed to find it again (the server keeps it as the
// job's handle).
struct VolcanoJobRef {
  std::string namespace_name;
  std::string name;  // the Job's
  std::string uid;   // the Job's, so that another Job of the same name is never taken for it
  std::string job_id;
  std::string job_dir;  // the server's directory of the job ("": none)

  std::string coordinatorPod() const;
  std::string encode() const;  // JSON
  // Errors: kInvalidArgument for text that is not a handle encode() made.
  static Result<VolcanoJobRef> decode(const std::string& text);
};

class VolcanoCluster {
 public:
  // The cluster of the Kubernetes configuration (kube::loadConfig), in `namespace_name` ("": the
  // configuration's). Errors: those of kube::loadConfig and kube::Client::create.
  static Result<std::unique_ptr<VolcanoCluster>> connect(const std::string& namespace_name = "");
  // A cluster through `client` (tests).
  VolcanoCluster(std::unique_ptr<kube::Client> client, std::string namespace_name);

  const kube::Client& client() const { return *client_; }
  const std::string& namespaceName() const { return namespace_; }
  // "namespace 'default' of https://10.0.0.1:6443 (kubeconfig '...', context 'x')".
  std::string where() const;

  // Whether the API server serves Volcano's Jobs. Errors: kNotFound ("Volcano is not installed
  // on this cluster ..."), those of the API (unreachable, 401, 403).
  Result<void> checkVolcano() const;

  // Creates the Secret (`secret`, and the report target when given), then the Job `job` (a
  // volcanoJob) in the namespace, then makes the Job the Secret's owner (deleting the Job deletes
  // it). A Job of that name that cohort made and that has ended is replaced (`say` says so);
  // any other is kAlreadyExists naming it and what to do. When the Job cannot be created the
  // Secret is deleted again: nothing is left half-made. Errors: those of the API, in a person's
  // words.
  // `store`: a server's store in S3 for the pods (storage::siteVariables), or none.
  Result<VolcanoJobRef> submit(const nlohmann::json& job, const std::string& secret,
                               const std::optional<VolcanoReport>& report,
                               const std::vector<std::pair<std::string, std::string>>& store,
                               const std::function<void(const std::string&)>& say);

  // The Job's phase now ("" when Volcano has not set one). Errors: kNotFound when the Job is
  // gone or is another Job of the same name; those of the API.
  Result<std::string> phase(const VolcanoJobRef& ref) const;

  // Whether the coordinator pod's container has started (its log can be read). Errors: those of
  // the API; kNotFound while the pod is not there.
  Result<bool> coordinatorStarted(const VolcanoJobRef& ref) const;

  // How the coordinator pod's container ended, in cohort's words (coordinatorEndWords); "" while
  // it has not. Errors: those of the API; kNotFound when the pod is gone.
  Result<std::string> coordinatorEnd(const VolcanoJobRef& ref) const;

  // Deletes the Job (its pods get SIGTERM and their grace period; with `now`, the pods are
  // deleted at once, SIGKILL) and the Secret. A Job or Secret already gone is no error.
  Result<void> remove(const VolcanoJobRef& ref, bool now) const;
  // Deletes the Secret alone (the job has ended).
  Result<void> removeSecret(const VolcanoJobRef& ref) const;

  // Follows the coordinator pod's log (stdout and stderr, as the kubelet keeps them), handing
  // each line after the first `skip` to `on_line`, until the container ends (the log ends),
  // `stop` becomes true, or the pod is gone. A stream that breaks is taken up again where it
  // was. Returns the lines handed on plus `skip`. Errors: those of the API when the log cannot
  // be read at all.
  Result<int64_t> followCoordinatorLog(const VolcanoJobRef& ref, int64_t skip,
                                       const std::function<void(std::string_view)>& on_line,
                                       const std::atomic<bool>* stop) const;

 private:
  std::string jobPath(const std::string& name = "") const;
  std::string secretPath(const std::string& name = "") const;

  std::unique_ptr<kube::Client> client_;
  std::string namespace_;
};

// Watches a submitted job's Job, PodGroup and pods (a list, then a watch, again after the
// watch expires or breaks: the API server's own streams, never polling), keeping what it saw,
// and calls `changed` (from its threads) after each change. The view it gives keeps the
// coordinator pod's last state when the pod is deleted after it ended (Volcano deletes the pods
// of a completed Job), so that its exit code is not lost.
class VolcanoWatch {
 public:
  VolcanoWatch(const VolcanoCluster& cluster, VolcanoJobRef ref, std::function<void()> changed);
  ~VolcanoWatch();  // stops and joins the threads
  VolcanoWatch(const VolcanoWatch&) = delete;
  VolcanoWatch& operator=(const VolcanoWatch&) = delete;

  VolcanoView view() const;
  // True once the Job (this uid) has been seen and is gone since.
  bool jobGone() const;
  // The pods of the job that exist now.
  int pods() const;
  // The latest error of a watch ("" when they work): an API server away, a 403.
  std::string error() const;

 private:
  struct Stream;
  void run(Stream& stream);

  const VolcanoCluster& cluster_;
  const VolcanoJobRef ref_;
  std::function<void()> changed_;
  mutable std::mutex mu_;
  std::atomic<bool> stop_{false};
  std::condition_variable stopped_cv_;
  std::vector<std::unique_ptr<Stream>> streams_;
  nlohmann::json last_coordinator_;  // its last state seen (kept past its deletion)
  bool job_seen_ = false;
};

}  // namespace cohort::backends
