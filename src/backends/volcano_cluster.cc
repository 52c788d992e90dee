#include "backends/volcano_cluster.h"

#include <chrono>

#include "backends/volcano.h"
#include "backends/volcano_status.h"
#include "util/text.h"

namespace cohort::backends {

using Json = nlohmann::json;

namespace {

constexpr const char* kJobs = "/apis/batch.volcano.sh/v1alpha1";
constexpr const char* kPodGroups = "/apis/scheduling.volcano.sh/v1beta1";
// The label Volcano's controller puts on every pod of a Job: the Job's name.
constexpr const char* kPodJobLabel = "volcano.sh/job-name";
// A watch asks the server to end it after this long; the next one starts where it ended.
constexpr int kWatchSeconds = 240;

std::string str(const Json& j, std::initializer_list<const char*> path) {
  const Json& at = jsonAt(j, path);
  return at.is_string() ? at.get<std::string>() : "";
}

// The coordinator container's state (running, terminated, waiting), or null.
const Json& containerState(const Json& pod) {
  static const Json kNull;
  const Json& statuses = jsonAt(pod, {"status", "containerStatuses"});
  if (!statuses.is_array() || statuses.empty()) return kNull;
  return jsonAt(statuses[0], {"state"});
}

Json deleteOptions(const std::string& uid, std::optional<int> grace_s) {
  Json o = {{"kind", "DeleteOptions"}, {"apiVersion", "v1"}, {"propagationPolicy", "Background"}};
  if (!uid.empty()) o["preconditions"] = {{"uid", uid}};
  if (grace_s) o["gracePeriodSeconds"] = *grace_s;
  return o;
}

bool gone(const Result<Json>& r) { return !r && r.error().code == Code::kNotFound; }

}  // namespace

std::string VolcanoJobRef::coordinatorPod() const {
  return name + "-" + kVolcanoCoordinatorTask + "-0";
}

std::string VolcanoJobRef::encode() const {
  Json j = {{"namespace", namespace_name}, {"name", name}, {"uid", uid}, {"job_id", job_id}};
  if (!job_dir.empty()) j["job_dir"] = job_dir;
  return j.dump();
}

Result<VolcanoJobRef> VolcanoJobRef::decode(const std::string& text) {
  Json j = Json::parse(text.size() <= 4096 ? text : "", nullptr, false);
  VolcanoJobRef ref{str(j, {"namespace"}), str(j, {"name"}), str(j, {"uid"}), str(j, {"job_id"}),
                    str(j, {"job_dir"})};
  if (ref.namespace_name.empty() || ref.name.empty() || ref.uid.empty()) {
    return fail(Code::kInvalidArgument, "not a Volcano Job's handle");
  }
  return ref;
}

Result<std::unique_ptr<VolcanoCluster>> VolcanoCluster::connect(const std::string& namespace_name) {
  COHORT_ASSIGN(kube::Config config, kube::loadConfig());
  const std::string ns = namespace_name.empty() ? config.namespace_name : namespace_name;
  COHORT_ASSIGN(std::unique_ptr<kube::Client> client, kube::Client::create(std::move(config)));
  return std::make_unique<VolcanoCluster>(std::move(client), ns);
}

VolcanoCluster::VolcanoCluster(std::unique_ptr<kube::Client> client, std::string namespace_name)
    : client_(std::move(client)), namespace_(std::move(namespace_name)) {}

std::string VolcanoCluster::where() const {
  return "namespace '" + namespace_ + "' of " + client_->config().server + " (" +
         client_->config().origin + ")";
}

std::string VolcanoCluster::jobPath(const std::string& name) const {
  return std::string(kJobs) + "/namespaces/" + urlEncode(namespace_) + "/jobs" +
         (name.empty() ? "" : "/" + urlEncode(name));
}

std::string VolcanoCluster::secretPath(const std::string& name) const {
  return "/api/v1/namespaces/" + urlEncode(namespace_) + "/secrets" +
         (name.empty() ? "" : "/" + urlEncode(name));
}

Result<void> VolcanoCluster::checkVolcano() const {
  // The list of the namespace's Jobs (one at most): the API's presence and the right to use it.
  COHORT_TRY(client_->call("GET", jobPath() + "?limit=1",
                           "list Volcano Jobs in namespace '" + namespace_ + "'"));
  return {};
}

Result<VolcanoJobRef> VolcanoCluster::submit(
    const Json& job, const std::string& secret,
    const std::optional<VolcanoReport>& report,
    const std::vector<std::pair<std::string, std::string>>& store,
    const std::function<void(const std::string&)>& say) {
  const std::string name = job["metadata"]["name"].get<std::string>();
  const std::string what = "Volcano Job '" + name + "' in namespace '" + namespace_ + "'";
  auto existing = client_->call("GET", jobPath(name), "look for " + what);
  if (existing) {
    const std::string phase = str(*existing, {"status", "state", "phase"});
    const bool ours =
        str(*existing, {"metadata", "labels", "app.kubernetes.io/managed-by"}) == "cohort";
    const std::string of = str(*existing, {"metadata", "annotations", "cohort/job-id"});
    if (!ours || !volcanoPhaseFinal(phase)) {
      return fail(Code::kAlreadyExists,
                  "a " + what + " already exists (" + (phase.empty() ? "not started" : phase) +
                      ", " + (ours ? "cohort's job " + of : "not made by cohort") +
                      "): give this job another name (--name NAME), or delete that one "
                      "(kubectl delete vcjob " +
                      name + " -n " + namespace_ + ")");
    }
    say("replacing the " + what + " of the ended job " + of + " (" + phase + ")");
    VolcanoJobRef old{namespace_, name, str(*existing, {"metadata", "uid"}), of};
    COHORT_TRY(remove(old, false));
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!gone(client_->call("GET", jobPath(name), "look for " + what))) {
      if (std::chrono::steady_clock::now() > until) {
        return fail(Code::kUnavailable, "the ended " + what +
                                            " is still there 30 s after it "
                                            "was deleted: try again later");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  } else if (existing.error().code != Code::kNotFound) {
    return tl::unexpected<Error>(existing.error());
  }

  const Json secret_object = volcanoSecret(job, secret, report, store);
  const std::string secret_name = volcanoSecretName(name);
  const std::string secret_what =
      "create Secret '" + secret_name + "' in namespace '" + namespace_ + "'";
  auto made = client_->call("POST", secretPath(), secret_what, secret_object);
  if (!made && made.error().code == Code::kAlreadyExists) {
    // Left by a cohort that was killed between the Secret and the Job: cohort's to replace.
    auto old = client_->call("GET", secretPath(secret_name), secret_what);
    if (!old || str(*old, {"metadata", "labels", "app.kubernetes.io/managed-by"}) != "cohort") {
      return fail(Code::kAlreadyExists,
                  secret_what +
                      ": a Secret of that name that cohort did not make is there: "
                      "give this job another name (--name NAME)");
    }
    COHORT_TRY(removeSecret({namespace_, name, "", ""}));
    made = client_->call("POST", secretPath(), secret_what, secret_object);
  }
  if (!made) return tl::unexpected<Error>(made.error());

  auto created = client_->call("POST", jobPath(), "create " + what, job);
  if (!created) {
    (void)removeSecret({namespace_, name, "", ""});  // nothing is left half-made
    return tl::unexpected<Error>(created.error());
  }
  VolcanoJobRef ref{namespace_, name, str(*created, {"metadata", "uid"}),
                    str(job, {"metadata", "annotations", "cohort/job-id"})};
  // Deleting the Job deletes the Secret (Kubernetes' garbage collector); cohort deletes it too
  // when the job ends.
  Json owner = {{"metadata",
                 {{"ownerReferences",
                   {{{"apiVersion", "batch.volcano.sh/v1alpha1"},
                     {"kind", "Job"},
                     {"name", name},
                     {"uid", ref.uid}}}}}}};
  if (auto owned = client_->call("PATCH", secretPath(secret_name),
                                 "give Secret '" + secret_name + "' to its Job", owner,
                                 "application/merge-patch+json");
      !owned) {
    say(owned.error().message + " (cohort deletes it when the job ends)");
  }
  return ref;
}

Result<std::string> VolcanoCluster::phase(const VolcanoJobRef& ref) const {
  COHORT_ASSIGN(Json job, client_->call("GET", jobPath(ref.name),
                                        "get Volcano Job '" + ref.name + "' in namespace '" +
                                            namespace_ + "'"));
  if (str(job, {"metadata", "uid"}) != ref.uid) {
    return fail(Code::kNotFound, "Volcano Job '" + ref.name + "' is another Job now");
  }
  return str(job, {"status", "state", "phase"});
}

Result<bool> VolcanoCluster::coordinatorStarted(const VolcanoJobRef& ref) const {
  COHORT_ASSIGN(Json pod, client_->call("GET",
                                        "/api/v1/namespaces/" + urlEncode(ref.namespace_name) +
                                            "/pods/" + urlEncode(ref.coordinatorPod()),
                                        "get pod '" + ref.coordinatorPod() + "'"));
  const Json& state = containerState(pod);
  return jsonAt(state, {"running"}).is_object() || jsonAt(state, {"terminated"}).is_object();
}

Result<std::string> VolcanoCluster::coordinatorEnd(const VolcanoJobRef& ref) const {
  COHORT_ASSIGN(Json pod, client_->call("GET",
                                        "/api/v1/namespaces/" + urlEncode(ref.namespace_name) +
                                            "/pods/" + urlEncode(ref.coordinatorPod()),
                                        "get pod '" + ref.coordinatorPod() + "'"));
  const Json& code = jsonAt(containerState(pod), {"terminated", "exitCode"});
  if (!code.is_number_integer()) return std::string();
  return coordinatorEndWords(code.get<int>(),
                             str(containerState(pod), {"terminated", "reason"}),
                             str(containerState(pod), {"terminated", "message"}));
}

Result<void> VolcanoCluster::remove(const VolcanoJobRef& ref, bool now) const {
  const std::string ns = urlEncode(ref.namespace_name);
  if (now) {
    // The pods at once (SIGKILL), whoever deletes them otherwise.
    auto pods = client_->call(
        "DELETE",
        "/api/v1/namespaces/" + ns +
            "/pods?labelSelector=" + urlEncode(std::string(kPodJobLabel) + "=" + ref.name),
        "delete the pods of Volcano Job '" + ref.name + "'", deleteOptions("", 0));
    if (!pods && !gone(pods)) return tl::unexpected<Error>(pods.error());
  }
  auto job = client_->call(
      "DELETE", std::string(kJobs) + "/namespaces/" + ns + "/jobs/" + urlEncode(ref.name),
      "delete Volcano Job '" + ref.name + "' in namespace '" + ref.namespace_name + "'",
      deleteOptions(ref.uid, std::nullopt));
  // A uid that is not the Job's any more (409): the job's own Job is gone already.
  if (!job && !gone(job) && job.error().code != Code::kAlreadyExists) {
    return tl::unexpected<Error>(job.error());
  }
  return removeSecret(ref);
}

Result<void> VolcanoCluster::removeSecret(const VolcanoJobRef& ref) const {
  const std::string name = volcanoSecretName(ref.name);
  auto r = client_->call(
      "DELETE",
      "/api/v1/namespaces/" + urlEncode(ref.namespace_name) + "/secrets/" + urlEncode(name),
      "delete Secret '" + name + "' in namespace '" + ref.namespace_name + "'",
      deleteOptions("", std::nullopt));
  if (!r && !gone(r)) return tl::unexpected<Error>(r.error());
  return {};
}

Result<int64_t> VolcanoCluster::followCoordinatorLog(
    const VolcanoJobRef& ref, int64_t skip, const std::function<void(std::string_view)>& on_line,
    const std::atomic<bool>* stop) const {
  const std::string pod_path = "/api/v1/namespaces/" + urlEncode(ref.namespace_name) + "/pods/" +
                               urlEncode(ref.coordinatorPod());
  int64_t next = skip;  // the index of the next line to hand on
  int failures = 0;
  while (!(stop && stop->load())) {
    int64_t index = 0;
    std::string body;
    auto status = client_->stream(
        pod_path + "/log?container=" + kVolcanoCoordinatorTask + "&follow=true",
        [&](std::string_view line) {
          if (index++ >= next) {
            on_line(line);
            next = index;
          }
          return true;
        },
        stop, std::chrono::hours(1), &body);
    if (stop && stop->load()) break;
    if (!status) {
      if (++failures >= 30) return tl::unexpected<Error>(status.error());
    } else if (*status / 100 == 2) {
      // The log ended: the container did, or the stream broke; the pod says which.
      auto pod = client_->call("GET", pod_path, "get pod '" + ref.coordinatorPod() + "'");
      if (!pod || str(*pod, {"metadata", "uid"}).empty()) break;
      if (jsonAt(containerState(*pod), {"terminated"}).is_object()) break;
      failures = 0;
    } else if (*status == 404) {
      break;  // the pod is gone
    } else if (*status != 400 && ++failures >= 30) {
      // 400: its container has not started yet; anything else is the API's refusal.
      return tl::unexpected<Error>(
          kube::apiError(client_->config(), "read the log of pod '" + ref.coordinatorPod() + "'",
                         kube::Response{*status, body}));
    }
    for (int i = 0; i < 10 && !(stop && stop->load()); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  return next;
}

// ---------------------------------------------------------------------------------- watching

struct VolcanoWatch::Stream {
  enum class Kind { kJob, kPodGroup, kPods } kind;
  std::string collection;               // the path of the collection
  std::string selector;                 // "labelSelector=..." or "fieldSelector=..."
  std::map<std::string, Json> objects;  // by name (under mu_)
  std::string error;                    // the latest (under mu_)
  std::thread thread;
};

VolcanoWatch::VolcanoWatch(const VolcanoCluster& cluster, VolcanoJobRef ref,
                           std::function<void()> changed)
    : cluster_(cluster), ref_(std::move(ref)), changed_(std::move(changed)) {
  const std::string ns = urlEncode(ref_.namespace_name);
  auto add = [&](Stream::Kind kind, std::string collection, std::string selector) {
    auto s = std::make_unique<Stream>();
    s->kind = kind;
    s->collection = std::move(collection);
    s->selector = std::move(selector);
    streams_.push_back(std::move(s));
  };
  add(Stream::Kind::kJob, std::string(kJobs) + "/namespaces/" + ns + "/jobs",
      "fieldSelector=" + urlEncode("metadata.name=" + ref_.name));
  add(Stream::Kind::kPodGroup, std::string(kPodGroups) + "/namespaces/" + ns + "/podgroups",
      "fieldSelector=" + urlEncode("metadata.name=" + ref_.name + "-" + ref_.uid));
  add(Stream::Kind::kPods, "/api/v1/namespaces/" + ns + "/pods",
      "labelSelector=" + urlEncode(std::string(kPodJobLabel) + "=" + ref_.name));
  for (auto& s : streams_) {
    Stream* stream = s.get();
    stream->thread = std::thread([this, stream] { run(*stream); });
  }
}

VolcanoWatch::~VolcanoWatch() {
  stop_ = true;
  stopped_cv_.notify_all();
  for (auto& s : streams_) {
    if (s->thread.joinable()) s->thread.join();
  }
}

void VolcanoWatch::run(Stream& s) {
  const kube::Client& client = cluster_.client();
  auto pause = [&] {
    std::unique_lock lock(mu_);
    stopped_cv_.wait_for(lock, std::chrono::seconds(1), [&] { return stop_.load(); });
  };
  // Keeps an object of the stream; under mu_.
  auto keep = [&](const Json& object) {
    const std::string name = str(object, {"metadata", "name"});
    if (name.empty()) return;
    if (s.kind == Stream::Kind::kJob) {
      if (str(object, {"metadata", "uid"}) != ref_.uid) return;  // another Job of that name
      job_seen_ = true;
    }
    if (s.kind == Stream::Kind::kPods && name == ref_.coordinatorPod()) last_coordinator_ = object;
    s.objects[name] = object;
  };
  while (!stop_) {
    auto list = client.call("GET", s.collection + "?" + s.selector, "list " + s.collection);
    if (!list) {
      // No PodGroups served, or not to this user: why a gang waits is then in its pods alone.
      if (s.kind == Stream::Kind::kPodGroup &&
          (list.error().code == Code::kNotFound || list.error().code == Code::kPermissionDenied)) {
        return;
      }
      {
        std::lock_guard lock(mu_);
        s.error = list.error().message;
      }
      changed_();
      pause();
      continue;
    }
    {
      std::lock_guard lock(mu_);
      s.error.clear();
      s.objects.clear();
      if (const Json& items = jsonAt(*list, {"items"}); items.is_array()) {
        for (const Json& item : items) keep(item);
      }
    }
    changed_();
    std::string version = str(*list, {"metadata", "resourceVersion"});
    while (!stop_) {
      bool relist = false;
      std::string body;
      auto status = client.stream(
          s.collection + "?" + s.selector + "&watch=1&allowWatchBookmarks=true&resourceVersion=" +
              urlEncode(version) + "&timeoutSeconds=" + std::to_string(kWatchSeconds),
          [&](std::string_view line) {
            auto event = kube::parseObject(line, "a watch event");
            if (!event) return true;  // one bad line: the next ones may be good
            const std::string type = str(*event, {"type"});
            const Json& object = jsonAt(*event, {"object"});
            if (type == "ERROR") {  // 410 Gone: the version is too old; list again
              relist = true;
              return false;
            }
            const std::string v = str(object, {"metadata", "resourceVersion"});
            if (!v.empty()) version = v;
            if (type == "BOOKMARK") return true;
            {
              std::lock_guard lock(mu_);
              if (type == "DELETED") {
                const std::string name = str(object, {"metadata", "name"});
                if (s.kind == Stream::Kind::kPods && name == ref_.coordinatorPod()) {
                  last_coordinator_ = object;
                }
                s.objects.erase(name);
              } else {
                keep(object);
              }
            }
            changed_();
            return true;
          },
          &stop_, std::chrono::seconds(kWatchSeconds + 60), &body);
      if (!status || *status / 100 != 2) {
        std::lock_guard lock(mu_);
        s.error = status ? "watching " + s.collection + ": HTTP " + std::to_string(*status)
                         : status.error().message;
        relist = true;
      }
      if (relist) break;
    }
    if (!stop_) pause();
  }
}

VolcanoView VolcanoWatch::view() const {
  std::lock_guard lock(mu_);
  Json job, podgroup, pods = Json::array();
  for (const auto& s : streams_) {
    for (const auto& [name, object] : s->objects) {
      if (s->kind == Stream::Kind::kJob && name == ref_.name) job = object;
      if (s->kind == Stream::Kind::kPodGroup) podgroup = object;
      if (s->kind == Stream::Kind::kPods) pods.push_back(object);
    }
  }
  bool have = false;
  for (const Json& p : pods) have = have || str(p, {"metadata", "name"}) == ref_.coordinatorPod();
  if (!have && !last_coordinator_.is_null()) pods.push_back(last_coordinator_);
  return volcanoView(job, podgroup, pods, ref_.coordinatorPod());
}

bool VolcanoWatch::jobGone() const {
  std::lock_guard lock(mu_);
  if (!job_seen_) return false;
  for (const auto& s : streams_) {
    if (s->kind == Stream::Kind::kJob) return s->objects.count(ref_.name) == 0;
  }
  return false;
}

int VolcanoWatch::pods() const {
  std::lock_guard lock(mu_);
  for (const auto& s : streams_) {
    if (s->kind == Stream::Kind::kPods) return static_cast<int>(s->objects.size());
  }
  return 0;
}

std::string VolcanoWatch::error() const {
  std::lock_guard lock(mu_);
  for (const auto& s : streams_) {
    if (!s->error.empty()) return s->error;
  }
  return "";
}

}  // namespace cohort::backends
