// EnvironmentService: the server's environments, per account (docs/environments.md, "On a
// server"). An account pushes a saved environment's definition (its base, its requirements,
// optionally its lock file) and the server builds it; its jobs then name it like a preset.
//
// Where: an account's environments are built in <data_root>/account-envs/<account>/, a directory
// of its group alone; an admin's in the server's own environment store (env::storeDirs: the
// presets' too), readable by every account: an admin's environments are presets for everyone.
// A job of an account looks a name up in its own directory, then the server's (its
// coordinator's COHORT_ENVS: `searchPath`); another account's are not there to find, and every
// answer about them is "not found".
//
// The record of each pushed environment (definition, state: building, built or failed, why,
// what it holds) is <data_root>/server/envs/<scope>/NAME.json, with its build's output in
// NAME.log beside it: the server writes both, and reads nothing else a build wrote but the
// built environment's env.json and lock.txt (without following links, size-limited). A push
// answers at once; one builder thread builds the environments in the order they were pushed,
// each as its owner's Unix identity (the identity its ranks run as), in the sandbox when the
// server's jobs run in one: env/confined_build.h. A server restarted during a build builds it
// again. An environment that a queued or running job names, or that another is built on, is
// neither replaced nor removed.
//
// Limits: kMaxEnvironments per account (and for the admins together), kMaxRequirements
// requirements of at most 256 bytes each, a lock file of kMaxLockLines lines, a build of at
// most the options' build_timeout. Thread-safe: every method may be called from any thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "server/access.h"
#include "server/event_hub.h"
#include "server/http.h"
#include "server/jobs.h"
#include "store/job_store.h"
#include "util/result.h"
#include "util/text.h"

namespace cohort::server {

constexpr int kMaxEnvironments = 32;
constexpr size_t kMaxRequirements = 256;
constexpr size_t kMaxLockLines = 4096;

struct EnvironmentServiceOptions {
  std::string data_root;
  std::vector<std::string> site;  // env::storeDirs(data_root): presets, the admins' environments
  std::string cohort_bin;         // what builds them (cohort env create)
  bool sandbox = false;           // build under bubblewrap (the server's jobs run in it)
  Identities identities;          // whose Unix identity an account's build runs as
  Millis build_timeout{1800000};  // a build that runs longer is stopped, and failed
  // Called (from any of the service's threads) after a build's state changed or its log grew;
  // `key` is logKey()'s. Must be quick and must not call back into the service.
  std::function<void(const std::string& key)> on_change;
};

// A pushed environment's definition.
struct EnvironmentDefinition {
  std::string base;
  std::vector<std::string> requirements;
  std::string lock;  // a lock file's text: the versions to install ("" to resolve)
};

class EnvironmentService {
 public:
  // Reads the records, queues again the builds a stopped server left unfinished, and starts the
  // builder thread. Errors: kIo.
  static Result<std::unique_ptr<EnvironmentService>> create(store::JobStore& store,
                                                            EnvironmentServiceOptions options);
  // Stops the builder thread (and kills a build under way; it is built again next start).
  ~EnvironmentService();
  EnvironmentService(const EnvironmentService&) = delete;
  EnvironmentService& operator=(const EnvironmentService&) = delete;

  // Every environment the caller's jobs may name: the presets, the admins', its own, as the
  // API shows them (docs/server-api.md). Errors: kIo.
  Result<nlohmann::json> list(const Caller& caller);
  // One of them, with its lock file and the last lines of its build. Errors: kNotFound (also
  // for another account's), kInvalidArgument for a name that cannot be one.
  Result<nlohmann::json> show(const Caller& caller, const std::string& name);
  // Records `definition` as the caller's environment `name` (an admin's: the server's) and
  // queues its build; returns it, building. Errors: kInvalidArgument naming the field (name,
  // base, requirements[i], lock line N), kNotFound for a base the caller cannot use,
  // kFailedPrecondition when it is being built, a queued or running job names it, another
  // environment is built on it, or the account has kMaxEnvironments; kIo.
  Result<nlohmann::json> push(const Caller& caller, const std::string& name,
                              const EnvironmentDefinition& definition);
  // Removes the caller's environment `name` (an admin: one of the server's). Errors:
  // kNotFound; kFailedPrecondition as push, and for a preset; kIo.
  Result<void> remove(const Caller& caller, const std::string& name);

  // Where a job of `caller` finds environment `name` (its coordinator's COHORT_ENVS: the
  // account's directory, then the server's), once it is sure the caller may use it now.
  // Errors: kNotFound listing what the caller may use; kFailedPrecondition when it is being
  // built or its build failed.
  Result<std::string> searchPath(const Caller& caller, const std::string& name);

  // The build log of `caller`'s environment `name`, and the key its changes are notified under.
  // Errors: kNotFound (a preset has none).
  struct Log {
    std::string path;
    std::string key;
  };
  Result<Log> log(const Caller& caller, const std::string& name);
  // Whether the build of the environment behind `key` is over (or it is gone).
  bool buildOver(const std::string& key);

 private:
  struct Record;
  explicit EnvironmentService(store::JobStore& store, EnvironmentServiceOptions options);

  std::string scopeOf(const Caller& caller) const;  // "site", or "account/<name>"
  std::string recordsDir(const std::string& scope) const;
  std::vector<std::string> storesOf(const std::string& scope) const;
  Result<std::unique_ptr<Record>> load(const std::string& scope, const std::string& name) const;
  Result<void> save(const Record& record);
  std::vector<Record> records(const std::string& scope) const;
  // The record, else the server's own environment (a preset, or one made on its machine), that
  // `caller` finds under `name`.
  Result<nlohmann::json> find(const Caller& caller, const std::string& name, bool full);
  Result<void> checkUnused(const std::string& scope, const std::string& name);
  Result<void> checkBase(const Caller& caller, const std::string& name, const std::string& base);
  void loop();
  void build(const std::string& scope, const std::string& name);
  void appendLog(const std::string& scope, const std::string& name, const std::string& line);
  void changed(const std::string& scope, const std::string& name) const;

  store::JobStore& store_;
  const EnvironmentServiceOptions options_;
  std::mutex mu_;  // records and the queue
  std::condition_variable cv_;
  std::deque<std::pair<std::string, std::string>> queue_;  // (scope, name), oldest first
  bool quit_ = false;
  std::atomic<bool> stopping_{false};  // the builder's build is killed
  std::thread thread_;
};

// A build's log (GET /v1/environments/{name}/log) from `offset`; with `follow`, then what is
// appended as it is, until the build is over, woken through `hub` by the service's on_change.
// `stopping`: the server is going.
std::unique_ptr<http::StreamSource> buildLogStream(EnvironmentService& service, EventHub& hub,
                                                   EnvironmentService::Log log, int64_t offset,
                                                   bool follow, std::function<bool()> stopping);

}  // namespace cohort::server
