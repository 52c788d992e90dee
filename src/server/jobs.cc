#include "server/jobs.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "agent/rank_env.h"
#include "backends/local.h"
#include "env/confined_build.h"
#include "env/environments.h"
#include "env/python_check.h"
#include "job/events.h"
#include "job/id.h"
#include "job/layout.h"
#include "job/lifecycle.h"
#include "server/tokens.h"
#include "server/uploads.h"
#include "spec/job_spec.h"
#include "storage/s3.h"
#include "storage/uri.h"
#include "util/fd.h"
#include "util/json_limits.h"
#include "util/text.h"


namespace cohort::server {

using Json = nlohmann::json;

namespace {

// A running job's reason while it stops because someone asked (rather than the server).
constexpr std::string_view kStoppedOnRequest = "stopped on request";

// Every state but the final ones.
std::vector<std::string> liveStates() {
  std::vector<std::string> live;
  for (job::JobState st : job::kAllJobStates) {
    if (!job::isFinal(st)) live.emplace_back(job::stateName(st));
  }
  return live;
}

// The lifecycle (job/lifecycle.h) over the store's names: the state `job` goes to on `input`,
// by name; nothing when it stays. A name the store should not hold counts as failed.
std::optional<std::string> next(const store::Job& job, job::JobInput input,
                                const std::string& reported = "") {
  const job::JobState current = job::parseJobState(job.state).value_or(job::JobState::kFailed);
  const job::JobState word = job::parseJobState(reported).value_or(job::JobState::kQueued);
  auto to = job::nextState(current, input, word);
  if (!to) return std::nullopt;
  return std::string(job::stateName(*to));
}


constexpr size_t kMaxReportEvents = 4096;
constexpr size_t kMaxProgressBytes = 2u << 20;

// Appends an event the server writes itself.
Result<void> appendEvent(store::JobStore& store, const std::string& job_id,
                         const job::Event& event) {
  return store.appendEvents(job_id, {{0, event.t, job::encodeEvent(event)}});
}

// Records a job the server itself ended (its state, reason and end time set) and its last event.
Result<void> recordEnd(store::JobStore& store, const store::Job& job) {
  COHORT_TRY(store.updateJob(job));
  job::Event e = job::stateEvent(job.ended, job.state, job.reason);
  e.exit_code = job.exit_code;
  return appendEvent(store, job.id, e);
}

// A workdir in another job's directory: a job runs only its own code, or (below) a copy of an
// earlier job's of its account.
Result<void> notAnotherJobsCode(const std::string& workdir, const std::string& data_root) {
  if (startsWith(workdir, job::jobsDir(data_root) + "/")) {
    return fail(Code::kInvalidArgument,
                "workdir: '" + workdir +
                    "' is the code another job uploaded; a job runs only its own code, or that of "
                    "an earlier job of its account: submit the code again (cohort submit -f "
                    "job.yaml uploads the workdir)");
  }
  return {};
}

// The job whose code/ `workdir` is (what the job file of a job that ran uploaded code says, so
// that `cohort rerun` and the console's Re-run run it again), or "" when it is no job's code/.
std::string jobOfCode(const std::string& workdir, const std::string& data_root) {
  const std::string prefix = job::jobsDir(data_root) + "/";
  if (!startsWith(workdir, prefix)) return "";
  std::string rest = workdir.substr(prefix.size());
  while (!rest.empty() && rest.back() == '/') rest.pop_back();
  const size_t slash = rest.find('/');
  if (slash == std::string::npos || slash == 0 || rest.substr(slash) != "/code") return "";
  const std::string id = rest.substr(0, slash);
  return id == "." || id == ".." ? "" : id;
}

// Removes, when it goes, the copy of an earlier job's code made for a job that was then
// refused; a job that was recorded has moved its copy away already.
struct CopyNoJobTook {
  std::string path;
  ~CopyNoJobTook() {
    std::error_code ec;
    if (!path.empty()) std::filesystem::remove_all(path, ec);
  }
};

}  // namespace

struct JobService::Supervised {
  std::string id;
  std::string handle;  // the backend's
  std::string job_dir;
};

JobService::JobService(store::JobStore& store, JobServiceOptions options, const sched::Clock& clock)
    : store_(store),
      options_(std::move(options)),
      backend_(options_.nodes == spec::Backend::kVolcano
                   ? backends::makeVolcanoBackend(options_.volcano)
                   : backends::makeLocalBackend(options_.cohort_bin, options_.nodes,
                                                options_.hosts)),
      clock_(clock) {}

Result<std::unique_ptr<JobService>> JobService::create(store::JobStore& store,
                                                       JobServiceOptions options,
                                                       const sched::Clock& clock) {
  std::unique_ptr<JobService> service(new JobService(store, std::move(options), clock));
  COHORT_TRY(makeDirs(job::jobsDir(service->options_.data_root)));
  // Jobs can be entered but not listed; each job's own directory is open to its account only.
  if (::chmod(job::jobsDir(service->options_.data_root).c_str(), 0711) != 0) {
    return failErrno("chmod '" + job::jobsDir(service->options_.data_root) + "'");
  }
  const Identities& ids = service->options_.identities;
  if (ids.first < 0 && !ids.single_user) {
    COHORT_ASSIGN(std::vector<store::Account> accounts, store.accounts());
    if (accounts.size() > 1) {
      return fail(Code::kFailedPrecondition,
                  std::to_string(accounts.size()) +
                      " accounts share this data root, but this server cannot give each "
                      "account's jobs a Unix identity of its own (it does not run as root): "
                      "run it as root, or with --single-user if one person owns every account "
                      "(docs/security.md)");
    }
  }
  COHORT_TRY(service->reconcile());
  service->thread_ = std::thread([s = service.get()] { s->loop(); });
  return service;
}

JobService::~JobService() {
  {
    std::lock_guard lock(mu_);
    quit_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

Result<void> JobService::writeReportUrl(const std::string& job_dir) const {
  const std::string pin = options_.report_pin.empty() ? "" : "pin " + options_.report_pin + "\n";
  return writeFileAtomic(job::Layout(job_dir).reportUrlFile(), options_.report_url + "\n" + pin,
                         false, 0600);
}

void JobService::notify(const std::string& job_id) const {
  if (options_.on_events) options_.on_events(job_id);
}

void JobService::wake() {
  dirty_ = true;
  cv_.notify_all();  // a wake-up lost to a race costs at most one poll interval
}

std::vector<int> JobService::freeGpus(int64_t count) const {
  std::vector<int> free;
  for (int gpu : options_.gpu_ids) {
    if (static_cast<int64_t>(free.size()) == count) break;
    bool held = false;
    for (const auto& [id, gpus] : gpus_held_) {
      held |= std::find(gpus.begin(), gpus.end(), gpu) != gpus.end();
    }
    if (!held) free.push_back(gpu);
  }
  return free;
}

void JobService::takeIncoming() {
  std::lock_guard lock(incoming_mu_);
  for (sched::Job& job : incoming_) queue_[job.id] = std::move(job);
  incoming_.clear();
}

namespace {

// What one node of `role` takes: its processes' resources.
sched::Resources perNode(const spec::Role& role) {
  const int64_t procs = role.procs_per_node;
  return {static_cast<int64_t>(std::llround(role.resources.cpus * 1000)) * procs,
          role.resources.memory_bytes * procs, static_cast<int64_t>(role.resources.gpus) * procs};
}

// `by_node`: the backend's nodes are hosts (Backend::nodes), and each role asks for its nodes,
// each with what its processes take. Otherwise simulated nodes share the machine (or the
// cluster allocates them): one request for the whole gang.
sched::Job schedJob(const store::Job& job, bool by_node) {
  sched::Job s;
  s.id = job.id;
  s.account = job.account;
  s.priority = job.priority;
  s.submitted = sched::TimePoint(std::chrono::milliseconds(job.submitted / 1000000));
  if (auto spec = by_node ? spec::parseJobFile(job.spec_json, "job")
                          : Result<spec::JobSpec>(fail(Code::kNotFound, ""));
      spec) {
    for (const spec::Role& role : spec->roles) s.roles.push_back({role.name, role.nodes, perNode(role)});
  }
  if (s.roles.empty()) s.roles.push_back({"job", 1, {job.cpu_millis, job.memory_bytes, job.gpus}});
  if (job.max_runtime_ms) s.max_runtime = Millis(*job.max_runtime_ms);
  return s;
}

// `nodes`: where the backend found the job's nodes running (Found::nodes), node i on nodes[i].
sched::Running runningOf(const store::Job& job, const std::vector<int>& nodes) {
  sched::Running r;
  r.job_id = job.id;
  r.account = job.account;
  if (auto spec = nodes.empty() ? Result<spec::JobSpec>(fail(Code::kNotFound, ""))
                                : spec::parseJobFile(job.spec_json, "job");
      spec) {
    size_t i = 0;
    for (const spec::Role& role : spec->roles) {
      for (int n = 0; n < role.nodes && i < nodes.size(); ++n) {
        r.shares.push_back({nodes[i++], perNode(role)});
      }
    }
  }
  if (r.shares.empty()) r.shares.push_back({0, {job.cpu_millis, job.memory_bytes, job.gpus}});
  if (job.max_runtime_ms) {
    r.expected_end =
        sched::TimePoint(std::chrono::milliseconds(job.started / 1000000 + *job.max_runtime_ms));
  }
  return r;
}

}  // namespace

Result<void> JobService::reconcile() {
  COHORT_ASSIGN(
      std::vector<store::Job> jobs,
      store_.jobsInStates(liveStates()));
  for (store::Job& job : jobs) {
    if (job.state == "queued") {
      queue_[job.id] = schedJob(job, onHosts());
      continue;
    }
    // A stop the server decided (a quota) names its cause in the record: it outlives a restart.
    if (job.state == "stopping" && !job.reason.empty() && job.reason != kStoppedOnRequest) {
      stopped_why_[job.id] = job.reason;
    }
    auto s = std::make_unique<Supervised>();
    s->id = job.id;
    s->handle = job.handle;
    s->job_dir = job.job_dir;
    const backends::Found found = backend_->recover(job.handle);
    const std::string where = backend_->describe(job.handle);
    running_[job.id] = runningOf(job, found.nodes);
    auto record = [&](const std::string& found) {
      job::Event e;
      e.t = nowUnixNanos();
      e.kind = job::EventKind::kReconciled;
      e.found = found;
      (void)appendEvent(store_, job.id, e);
    };
    if (found.running) {
      // This server may listen elsewhere than the one that started the job.
      if (auto w = writeReportUrl(job.job_dir); !w) {
        std::fprintf(stderr, "cohort server: job %s: %s\n", job.id.c_str(),
                     w.error().message.c_str());
      }
      gpus_held_[job.id] = found.gpus;
      record("still " + job.state + " (" + where + ") after a server restart");
      reconciled_.push_back("job " + job.id + ": still " + job.state + " (" + where +
                            "), following it again");
      supervise(std::move(s));
      continue;
    }
    record("ended while the server was down");
    Supervised& ref = *s;
    supervise(std::move(s));
    finish(ref, !job.handle.empty()
                    ? "lost: its " + where +
                          " ended while the server was down, without handing over its result "
                          "(the job directory's result.json has it)"
                    : "lost: the server stopped while starting it");
    auto after = store_.job(job.id);
    reconciled_.push_back(
        "job " + job.id + ": ended while the server was down: " +
        (after ? after->state + (after->reason.empty() ? "" : " (" + after->reason + ")")
               : std::string("unknown")));
  }
  return {};
}

// Whether `path` is below one of `roots` as written: no "." or ".." part, and a root's own
// parts first.
bool belowInputRoot(const std::string& path, const std::vector<std::string>& roots) {
  for (const std::string& part : split(path, '/')) {
    if (part == "." || part == "..") return false;
  }
  for (const std::string& root : roots) {
    if (path == root || startsWith(path, root == "/" ? root : root + "/")) return true;
  }
  return false;
}

// The job's data: store:// locations the caller may read (inputs) or write (outputs), local
// inputs outside the server's data root. Checked at submission and again at the start, so that
// a share revoked in between stops the job from reading through it; the spec placed at the
// start is the one its coordinator reads.
Result<spec::JobSpec> JobService::checkData(const Caller& caller, const spec::JobSpec& spec,
                                            const std::string& job_id) {
  spec::JobSpec placed = spec;
  const std::string root = options_.data_root + "/";
  std::error_code root_ec;
  const std::string real_root =
      std::filesystem::weakly_canonical(options_.data_root, root_ec).string() + "/";
  // Compared as written and resolved, so that neither '..' nor a link leads into the data root
  // (the server's database and tokens, every job's directory, every bucket).
  auto inside_root = [&](const std::string& path) {
    std::error_code ec;
    const std::string real = std::filesystem::weakly_canonical(path, ec).string();
    return (path + "/").rfind(root, 0) == 0 || (!ec && (real + "/").rfind(real_root, 0) == 0);
  };
  // The one place inside it a job's code may be: its own uploaded snapshot.
  const std::string own_code = job::Layout::of(options_.data_root, job_id).codeDir();
  if (spec.workdir != own_code && inside_root(spec.workdir)) {
    COHORT_TRY(notAnotherJobsCode(spec.workdir, options_.data_root));
    return fail(Code::kInvalidArgument,
                "workdir: '" + spec.workdir +
                    "' is inside the server's data root; a job's code must live outside it");
  }
  // A server job would reach S3 with the server's own credentials, for every account alike.
  auto no_s3 = [](const std::string& field) {
    return fail(Code::kInvalidArgument,
                field +
                    ": a server job does not read or write s3:// (it would do so with the "
                    "server's credentials, not yours): copy the data with cohort cp to "
                    "server://BUCKET/PATH and name store://BUCKET/PATH");
  };
  for (size_t i = 0; i < spec.inputs.size(); ++i) {
    std::string field = "inputs[" + std::to_string(i) + "].source";
    if (storage::isS3Uri(spec.inputs[i].source)) return no_s3(field);
    auto where = storage::parseLocation(spec.inputs[i].source);
    if (!where) return withContext(where.error(), field);
    if (where->kind == storage::Location::Kind::kStore) {
      auto bucket = reachBucket(store_, caller, *where, Access::kRead);
      if (!bucket) return withContext(bucket.error(), field);
      placed.inputs[i].source = placedUri(*bucket, where->key, where->trailing_slash);
      if (options_.store_in_s3 && spec.inputs[i].mode == spec::Input::Mode::kLink) {
        return fail(Code::kInvalidArgument,
                    "inputs[" + std::to_string(i) +
                        "].mode: link needs a store on disk; this server keeps its store in S3, "
                        "so its inputs are copied (mode: copy)");
      }
      // The store is the server's alone (mode 0700): a rank that runs as its account's own
      // identity could not read through the link.
      if (options_.identities.first >= 0 && spec.inputs[i].mode == spec::Input::Mode::kLink) {
        return fail(Code::kInvalidArgument,
                    "inputs[" + std::to_string(i) +
                        "].mode: link is not offered by this server: its ranks run as your "
                        "account's own identity, which cannot read the server's store; leave "
                        "mode out (copy, the default): each node gets its own copy");
      }
      continue;
    }
    const std::string& path = where->path;
    if (path.empty() || path[0] != '/') {
      return fail(Code::kInvalidArgument, field +
                                              ": must be store://... or an absolute path on "
                                              "the server's machine, got '" +
                                              path + "'");
    }
    // Only below a directory the admin listed, compared as written: the job's agent opens it
    // there without following a link, and reads it as the account (account/as_account.h). Not
    // a look at the path here: the answer is the same whether it exists or not.
    if (!belowInputRoot(path, options_.input_roots) || (path + "/").rfind(root, 0) == 0) {
      const std::string roots =
          options_.input_roots.empty()
              ? std::string("no local inputs (cohort server --input-root DIR lists where they "
                            "may be)")
              : "local inputs only below " + join(options_.input_roots, ", ");
      return fail(Code::kInvalidArgument,
                  field + ": '" + path + "': this server takes " + roots +
                      "; copy the data into the store (cohort cp DIR server://BUCKET/PATH) and "
                      "name store://BUCKET/PATH");
    }
  }
  for (size_t i = 0; i < spec.outputs.size(); ++i) {
    std::string field = "outputs[" + std::to_string(i) + "].target";
    if (storage::isS3Uri(spec.outputs[i].target)) return no_s3(field);
    auto where = storage::parseLocation(spec::expandTarget(spec.outputs[i].target, job_id, spec.name));
    if (!where) return withContext(where.error(), field);
    if (where->kind != storage::Location::Kind::kStore) {
      return fail(Code::kInvalidArgument,
                  field +
                      ": a server job writes its outputs to store://bucket/path (its "
                      "output/ directory can always be downloaded with cohort outputs)");
    }
    auto bucket = reachBucket(store_, caller, *where, Access::kWrite);
    if (!bucket) return withContext(bucket.error(), field);
    placed.outputs[i].target = placedUri(*bucket, where->key, where->trailing_slash);
  }
  return placed;
}

Result<std::pair<int, int>> JobService::identityOf(const std::string& account_name) {
  return accountIdentity(store_, options_.identities, account_name);
}

Result<std::pair<int, int>> accountIdentity(store::JobStore& store, const Identities& ids,
                                            const std::string& account_name) {
  if (ids.first < 0) return std::pair<int, int>{-1, -1};
  COHORT_ASSIGN(store::Account account, store.account(account_name));
  if (account.number < 1 || account.number > ids.count) {
    return fail(Code::kFailedPrecondition,
                "account '" + account_name + "' is number " + std::to_string(account.number) +
                    ", beyond the server's " + std::to_string(ids.count) +
                    " rank identities (cohort server --rank-uids)");
  }
  const int id = static_cast<int>(ids.first + account.number);
  return std::pair<int, int>{id, id};
}

// A session runs cohort's own program as its account (cli/session_host.cc), whatever the job
// file said; its SSH server listens on its node's loopback, which only a network of the job's
// own keeps from every other job and from the machine.
Result<void> JobService::asSession(const Caller& caller, spec::JobSpec& spec) const {
  if (!debuggerHasItsOwnNetwork()) {
    return fail(Code::kFailedPrecondition,
                "session: a session's services listen on its node's 127.0.0.1, and this "
                "server's jobs have no network of their own (cohort server --job-network " +
                    (options_.job_network.empty() ? std::string("host") : options_.job_network) +
                    "): sessions need a server whose jobs run on its own machine, each in a "
                    "network of its own (as root, --job-network isolated or nat; docs/sessions.md)");
  }
  spec.command = {options_.cohort_bin, "session-host"};
  spec.hyperparameters.clear();
  spec.framework = spec::Framework::kGeneric;
  spec.launcher = spec::Launcher::kDirect;
  spec.workdir = "/";
  spec.debug = {};
  spec.policy.max_restarts = 0;
  // The login name inside the session: the account's, where it is one.
  std::string user;
  for (char c : caller.account) {
    const unsigned char u = static_cast<unsigned char>(c);
    user += std::isalnum(u) ? static_cast<char>(std::tolower(u)) : (c == '-' ? '-' : '_');
  }
  if (user.empty() || std::isdigit(static_cast<unsigned char>(user[0]))) user = "u" + user;
  spec.session->user = user.substr(0, 32);
  // The lab's token: the server's and the session's alone (the proxy adds it to each request).
  spec.session->jupyter_token.clear();
  if (spec.session->jupyter) {
    COHORT_ASSIGN(spec.session->jupyter_token, randomHex(32));
  }
  return {};
}

bool JobService::debuggerHasItsOwnNetwork() const {
  return options_.nodes == spec::Backend::kLocal &&
         (options_.job_network == "isolated" || options_.job_network == "nat");
}

// Each account's ranks need an identity of their own, and must be able to read the job's code.
Result<void> JobService::checkIdentity(const Caller& caller, const spec::JobSpec& spec,
                                       bool uploaded) {
  const Identities& ids = options_.identities;
  if (spec.debug.enabled && ids.first >= 0 && !debuggerHasItsOwnNetwork()) {
    // debugpy runs whatever a client sends it, and listens on its node's loopback without a
    // password: where accounts are kept apart but their jobs share the machine's network,
    // another account's ranks could take it over. In a network of the job's own only the
    // job's ranks reach it, and its account through a tunnel (server/tunnels.h).
    COHORT_ASSIGN(std::vector<store::Account> accounts, store_.accounts());
    if (accounts.size() > 1) {
      return fail(Code::kFailedPrecondition,
                  "debug: a paused rank's debugger listens on its node's 127.0.0.1 without a "
                  "password, and the jobs of this server's " +
                      std::to_string(accounts.size()) +
                      " accounts share the machine's network (cohort server --job-network " +
                      (options_.job_network.empty() ? std::string("host") : options_.job_network) +
                      ", or a backend whose nodes are not the server's), where they could reach "
                      "it: debug the job with cohort run on a machine of your own, or on a "
                      "server whose jobs have networks of their own (docs/debugging.md)");
    }
  }
  if (ids.first < 0) {
    if (ids.single_user) return {};
    COHORT_ASSIGN(std::vector<store::Account> accounts, store_.accounts());
    if (accounts.size() > 1) {
      return fail(Code::kFailedPrecondition,
                  "this server cannot give each account's jobs a Unix identity of its own (it "
                  "does not run as root), and " + std::to_string(accounts.size()) +
                      " accounts share it: run it as root, or with --single-user if one "
                      "person owns every account (docs/security.md)");
    }
    return {};
  }
  COHORT_ASSIGN(auto id, identityOf(caller.account));
  if (uploaded) return {};
  // The ranks run as `id`, not as the server: the code must be readable by anyone.
  std::string path;
  for (const std::string& part : split(spec.workdir, '/')) {
    if (part.empty()) continue;
    path += "/" + part;
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) break;  // checkCommand names a missing workdir
    const mode_t need = path == spec.workdir || path + "/" == spec.workdir ? (S_IROTH | S_IXOTH)
                                                                           : S_IXOTH;
    if ((st.st_mode & need) != need) {
      return fail(Code::kInvalidArgument,
                  "workdir: the job's ranks run as account '" + caller.account +
                      "''s own user (uid " + std::to_string(id.first) + "), who cannot " +
                      (need == S_IXOTH ? "enter '" : "read '") + path +
                      "': make it readable by others (chmod o+rx)");
    }
  }
  return {};
}

// A job of the caller's account that ran uploaded code runs it again on a copy of it (its
// code/ stays its own, removed with it), made a new upload of the account.
Result<std::string> JobService::copyOfCode(const Caller& caller, const std::string& job_id) {
  const std::string dir = job::Layout::of(options_.data_root, job_id).codeDir();
  auto earlier = store_.job(job_id);
  struct stat st {};
  // Another account's job reads as one deleted: neither says whether the other exists.
  if (!earlier || earlier->account != caller.account || ::lstat(dir.c_str(), &st) != 0 ||
      !S_ISDIR(st.st_mode)) {
    return fail(Code::kNotFound,
                "workdir: '" + dir + "' is the code of job " + job_id +
                    ", which is gone (deleted) or not this account's; a job runs only its own "
                    "code, or that of an earlier job of its account: submit the code again "
                    "(cohort submit -f job.yaml uploads the workdir)");
  }
  storage::ArchiveLimits limits;
  limits.max_bytes = options_.max_upload_bytes;
  COHORT_ASSIGN(auto id, identityOf(caller.account));
  COHORT_ASSIGN(Upload copy, uploadTree(options_.data_root, caller.account,
                                        {id.first, id.second}, dir, limits));
  return pendingUpload(options_.data_root, caller.account, copy.id);
}

Result<std::string> JobService::environmentOf(const Caller& caller, const spec::JobSpec& spec) {
  if (!spec.image.empty()) {
    return fail(Code::kInvalidArgument,
                "environment.image: a server's jobs do not run in container images yet: an "
                "image's ranks mount its layers as root, which neither the sandbox nor an "
                "account's own identity allows (docs/environments.md): name a preset or an "
                "environment of yours (cohort env ls --on-server; cohort env push NAME)");
  }
  if (spec.environment.empty() || !options_.environments) return std::string();
  auto path = options_.environments(caller, spec.environment);
  if (!path) return withContext(path.error(), "environment");
  return path;
}

Result<void> JobService::checkRanksPython(const Caller& caller, const spec::JobSpec& spec) {
  // Slurm's nodes, Volcano's pods and ssh hosts run it elsewhere: their ranks say what they lack.
  if (options_.nodes != spec::Backend::kLocal || !env::runsPython(spec.command)) return {};
  COHORT_ASSIGN(auto id, identityOf(caller.account));
  // An account's user outside the sandbox (a root server where bubblewrap does not work): what
  // the interpreter started could outlive the check, in no job's cgroup. Its ranks say instead.
  if (id.first >= 0 && !options_.isolate) return {};
  // The ranks' environment, as agent/rank_env.h makes it: the coordinator's (the server's) when
  // they inherit it, else cohort's base; the job's variables over it, its environment's last.
  const bool inherits = !options_.isolate && id.first < 0;
  std::vector<std::pair<std::string, std::string>> vars;
  if (inherits) {
    for (char** e = environ; *e; ++e) {
      const std::string entry = *e;
      const size_t eq = entry.find('=');
      if (eq != std::string::npos) vars.emplace_back(entry.substr(0, eq), entry.substr(eq + 1));
    }
  } else {
    for (const auto& [k, v] : agent::kBaseVariables) vars.emplace_back(k, v);
  }
  auto set = [&vars](const std::string& key, const std::string& value) {
    std::erase_if(vars, [&](const auto& kv) { return kv.first == key; });
    vars.emplace_back(key, value);
  };
  std::string path = std::getenv("PATH") ? std::getenv("PATH") : "/usr/bin:/bin";
  for (const auto& [k, v] : spec.env) {
    set(k, v);
    if (k == "PATH") path = v;
  }
  COHORT_ASSIGN(const std::string stores, environmentOf(caller, spec));
  std::vector<std::string> readable = {spec.workdir};
  if (!stores.empty()) {
    env::Store store(split(stores, ':'));
    auto found = store.get(spec.environment);
    // One not built yet is built as the job starts: its ranks will say what it lacks.
    if (!found || !found->built) return {};
    for (const auto& [k, v] : env::rankVariables(*found, path)) set(k, v);
    for (const std::string& dir : split(stores, ':')) readable.push_back(dir);
  }
  env::PythonRanks ranks;
  ranks.workdir = spec.workdir;
  for (const auto& [k, v] : vars) {
    ranks.env.push_back(k + "=" + v);
    if (k == "PATH") ranks.path = v;
  }
  ranks.uid = id.first;
  ranks.gid = id.second;
  ranks.refuse_unanswered = false;
  ranks.environments = "cohort env ls --on-server";
  if (options_.isolate) {
    // As a rank's: bubblewrap by its path with cohort's environment, the ranks' own handed to
    // it on a descriptor (never on its command line, nor to bubblewrap itself).
    const env::Confinement how{id.first, id.second, true, {options_.data_root}};
    ranks.confine = [how, readable](proc::SpawnRequest& req) -> Result<UniqueFd> {
      UniqueFd args(::memfd_create("cohort-python-check-env", MFD_CLOEXEC));
      if (!args.valid()) return failErrno("memfd_create");
      COHORT_TRY(writeAll(args.get(), agent::sandboxArguments(req.env)));
      if (::lseek(args.get(), 0, SEEK_SET) != 0) return failErrno("lseek");
      req.argv = env::sandboxArgv(how, readable, "", req.argv);
      // No network: finding modules needs none, and no port of this machine is the check's.
      req.argv.insert(req.argv.begin() + 1,
                      {"--unshare-net", "--args", std::to_string(plan::kSandboxArgsFd)});
      req.env.assign(std::begin(plan::kSandboxLauncherEnvironment),
                     std::end(plan::kSandboxLauncherEnvironment));
      req.fd3 = args.get();
      return args;
    };
  }
  return env::checkPython(spec, ranks, env::pythonNeeds(spec), {"cohort"});
}

Result<store::Job> JobService::submit(const Caller& caller, const std::string& job_file,
                                      int priority, const std::string& code) {
  COHORT_ASSIGN(spec::JobSpec spec, spec::parseJobFile(job_file, "job"));
  spec.base_dir = "/";
  if (spec.name.empty()) spec.name = "job";
  if (spec.session) COHORT_TRY(asSession(caller, spec));
  COHORT_TRY(spec::validate(spec));
  // A Volcano Job runs in its image: its workdir and command are the image's, not this machine's.
  const bool in_image = options_.nodes == spec::Backend::kVolcano;
  if (in_image) COHORT_TRY(backends::checkVolcanoJob(spec, !code.empty()));
  if (!in_image) COHORT_TRY(environmentOf(caller, spec));
  std::string upload_dir;
  CopyNoJobTook copy;
  if (!code.empty()) {
    COHORT_ASSIGN(upload_dir, pendingUpload(options_.data_root, caller.account, code));
  } else if (const std::string earlier = jobOfCode(spec.workdir, options_.data_root);
             !earlier.empty()) {
    COHORT_ASSIGN(upload_dir, copyOfCode(caller, earlier));
    copy.path = upload_dir;
  }
  // Until the job has an id: the command is looked for there.
  if (!upload_dir.empty()) spec.workdir = upload_dir;
  if (!in_image && (spec.workdir.empty() || spec.workdir[0] != '/')) {
    return fail(
        Code::kInvalidArgument,
        "workdir: must be an absolute path on the server's machine, got '" + spec.workdir +
            "' (or upload the code: cohort submit does unless the server is on this machine)");
  }
  if (!in_image) {
    if (upload_dir.empty()) COHORT_TRY(notAnotherJobsCode(spec.workdir, options_.data_root));
    // The account's user must be able to enter the workdir before anything in it is looked
    // at: the server looks as root, and would otherwise tell what is in a directory only
    // root may enter.
    COHORT_TRY(checkIdentity(caller, spec, !upload_dir.empty()));
    COHORT_TRY(backends::checkCommand(spec));
    COHORT_TRY(checkRanksPython(caller, spec));
  }
  // The server's configuration decides where its jobs run.
  if (spec.backend == spec::Backend::kSlurm && options_.nodes != spec::Backend::kSlurm) {
    return fail(Code::kInvalidArgument,
                "backend: this server runs its jobs on its own machine; a server started with "
                "--backend slurm hands them to Slurm");
  }
  if (spec.backend == spec::Backend::kSsh && !onHosts()) {
    return fail(Code::kInvalidArgument,
                "backend: ssh: this server does not run jobs on hosts over SSH; a server "
                "started with --backend ssh --hosts H1,H2 places them on its hosts");
  }
  if (onHosts()) {
    const size_t hosts = backend_->nodes().size();
    if (static_cast<size_t>(spec::totalNodes(spec)) > hosts) {
      return fail(Code::kInvalidArgument,
                  "roles: the job has " + std::to_string(spec::totalNodes(spec)) +
                      " nodes and this server has " + std::to_string(hosts) +
                      " hosts, one node on each: ask for fewer nodes (--nodes N)");
    }
  }
  for (spec::Role& role : spec.roles) {
    if (role.procs_per_node != spec::kAutoProcs) continue;
    if (options_.nodes == spec::Backend::kSlurm || in_image || onHosts()) {
      return fail(Code::kInvalidArgument,
                  "roles." + role.name +
                      ".procs_per_node: auto counts this machine's GPUs, not the cluster nodes': "
                      "give a number, the jobs of this server run on " +
                      (in_image ? "Volcano" : onHosts() ? "hosts over SSH" : "Slurm"));
    }
    int64_t per_node = options_.capacity.gpus / spec::totalNodes(spec);
    role.procs_per_node = static_cast<int>(std::max<int64_t>(per_node, 1));
    // One process per GPU: each of them takes its GPU.
    if (per_node > 0 && role.resources.gpus == 0) role.resources.gpus = 1;
  }

  // A fork bomb stops at the server's limit: every rank has one, as its job file says or this.
  for (spec::Role& role : spec.roles) {
    if (options_.rank_pids <= 0 || in_image) break;
    if (role.resources.pids > options_.rank_pids) {
      return fail(Code::kInvalidArgument,
                  "roles." + role.name + ".resources.pids: at most " +
                      std::to_string(options_.rank_pids) +
                      " processes and threads per rank on this server (cohort server "
                      "--rank-pids), got " + std::to_string(role.resources.pids));
    }
    if (role.resources.pids == 0) role.resources.pids = options_.rank_pids;
  }

  store::Job job;
  job.id = job::newJobId(spec.name);
  auto place_code = [&] {
    if (!upload_dir.empty()) spec.workdir = job::Layout::of(options_.data_root, job.id).codeDir();
  };
  place_code();
  job.account = caller.account;
  job.name = spec.name;
  job.state = std::string(job::stateName(job::JobState::kQueued));
  job.priority = priority;
  job.framework = spec::frameworkName(spec.framework);
  job.ranks = spec::totalProcs(spec);
  double cpus = 0;
  for (const spec::Role& role : spec.roles) {
    int64_t procs = static_cast<int64_t>(role.nodes) * role.procs_per_node;
    cpus += role.resources.cpus * static_cast<double>(procs);
    job.memory_bytes += role.resources.memory_bytes * procs;
    job.gpus += role.resources.gpus * procs;
  }
  job.cpu_millis = static_cast<int64_t>(std::llround(cpus * 1000));
  if (spec.policy.max_runtime) job.max_runtime_ms = spec.policy.max_runtime->count();

  COHORT_TRY(checkData(caller, spec, job.id));

  // A job that can never start is refused now rather than queued forever.
  // On hosts, the scheduler says how a job's nodes fit the hosts (they may come and go).
  const sched::Resources need{job.cpu_millis, job.memory_bytes, job.gpus};
  if (!onHosts() && !need.fitsIn(options_.capacity)) {
    // What to ask less of, per process, as the job file and cohort submit's flags say it.
    const sched::Resources& have = options_.capacity;
    std::vector<std::string> less;
    if (need.cpu_millis > have.cpu_millis) {
      less.push_back("--cpus 0.5 (resources: {cpus: 0.5}) is half a CPU each, held to it where "
                     "cgroups allow");
    }
    if (need.memory_bytes > have.memory_bytes) {
      less.push_back("--memory 2Gi (resources: {memory: 2Gi}) is 2Gi each");
    }
    if (need.gpus > have.gpus) less.push_back("--gpus N (resources: {gpus: N}) is N GPUs each");
    return fail(Code::kInvalidArgument,
                "roles: the job needs " + sched::describe(need) + " at once for its " +
                    std::to_string(job.ranks) +
                    " processes (each takes its role's resources: 1 CPU unless --cpus or "
                    "resources.cpus says otherwise); this server has " +
                    sched::describe(have) +
                    " in all (its --cpus, --memory and --gpus set what it hands out): ask less "
                    "per process (" +
                    join(less, "; ") + "), or run fewer processes");
  }
  COHORT_ASSIGN(store::Account account, store_.account(caller.account));
  if ((account.max_gpus && need.gpus > *account.max_gpus) ||
      (account.max_cpu_millis && need.cpu_millis > *account.max_cpu_millis)) {
    return fail(
        Code::kInvalidArgument,
        "roles: the job needs " + sched::describe(need) + ", more than account '" + caller.account +
            "' may hold at once (quota: " +
            sched::describe({account.max_cpu_millis.value_or(0), 0, account.max_gpus.value_or(0)}) +
            ")");
  }

  job.spec_json = spec::toJobFile(spec);
  job.submitted = nowUnixNanos();
  for (int tries = 1;; ++tries) {
    auto inserted = store_.insertJob(job);
    if (inserted) break;
    // Two jobs of one name in one second drew the same suffix: draw again.
    if (inserted.error().code != Code::kAlreadyExists || tries == 5) {
      return tl::unexpected<Error>(inserted.error());
    }
    job.id = job::newJobId(spec.name);
    place_code();
    job.spec_json = spec::toJobFile(spec);
  }
  if (!upload_dir.empty()) {
    // The snapshot moves into the job's directory before the job can be scheduled, so that no
    // one else can take it; a job whose code could not be placed is not kept.
    const job::Layout layout = job::Layout::of(options_.data_root, job.id);
    auto placed = [&]() -> Result<void> {
      if (::mkdir(layout.dir().c_str(), 0700) != 0) return failErrno("create " + layout.dir());
      if (::rename(upload_dir.c_str(), layout.codeDir().c_str()) != 0) {
        return failErrno("code: move upload '" + code + "' into " + layout.dir());
      }
      return {};
    }();
    if (!placed) {
      (void)::rmdir(layout.dir().c_str());
      (void)store_.deleteJob(job.id);
      return tl::unexpected<Error>(placed.error());
    }
  }
  {
    std::lock_guard lock(incoming_mu_);
    incoming_.push_back(schedJob(job, onHosts()));
  }
  wake();
  return job;
}

Result<store::Job> JobService::stop(const std::string& id, const std::string& why) {
  std::lock_guard lock(mu_);
  takeIncoming();
  COHORT_ASSIGN(store::Job job, store_.job(id));
  const auto to = next(job, job::JobInput::kStopAsked);
  if (store::isFinalState(job.state)) return job;
  if (job.state == "queued" && to) {
    job.state = *to;  // stopped
    job.ended = nowUnixNanos();
    job.reason = why.empty() ? "stopped before it started" : why;
    job.exit_code = 143;
    COHORT_TRY(recordEnd(store_, job));
    notify(id);
    queue_.erase(id);
    {
      std::lock_guard waiting_lock(waiting_mu_);
      waiting_.erase(id);
    }
    wake();
    return job;
  }
  if (!job.handle.empty()) backend_->cancel(job.handle);  // again, if it was asked before
  if (to) {
    job.state = *to;  // stopping
    job.reason = why.empty() ? std::string(kStoppedOnRequest) : why;
    if (!why.empty()) stopped_why_[id] = why;
    COHORT_TRY(store_.updateJob(job));
    notify(id);
  }
  return job;
}

Result<void> JobService::requestStacks(const std::string& id) {
  std::lock_guard lock(mu_);
  COHORT_ASSIGN(store::Job job, store_.job(id));
  if (job.state != "running" || job.handle.empty() || !backend_->requestStacks(job.handle)) {
    return fail(Code::kFailedPrecondition,
                "job '" + id + "' is " + job.state + ": only a running job has stacks to take");
  }
  return {};
}

Result<void> JobService::remove(const std::string& id) {
  COHORT_ASSIGN(store::Job job, store_.job(id));
  if (!store::isFinalState(job.state)) {
    return fail(Code::kFailedPrecondition,
                "job '" + id + "' is " + job.state + ": stop it first (cohort stop " + id + ")");
  }
  // A job stopped before it started may still have a directory: its uploaded code.
  const std::string dir =
      job.job_dir.empty() ? job::Layout::of(options_.data_root, id).dir() : job.job_dir;
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  if (ec) return fail(Code::kIo, "remove '" + dir + "': " + ec.message());
  return store_.deleteJob(id);
}

std::optional<sched::Waiting> JobService::waiting(const std::string& id) const {
  std::lock_guard lock(waiting_mu_);
  auto it = waiting_.find(id);
  if (it == waiting_.end()) return std::nullopt;
  return it->second;
}

void JobService::loop() {
  using Clock = std::chrono::steady_clock;
  // Running jobs are looked at every poll interval; a change (a submission, a job's end) brings
  // a scheduling pass at once, but passes are at least kPassGap apart so that a stream of
  // submissions does not keep the loop scheduling.
  constexpr auto kPassGap = std::chrono::milliseconds(20);
  auto next_poll = Clock::now() + options_.poll_interval;
  auto next_pass = Clock::now();
  std::unique_lock lock(mu_);
  while (!quit_) {
    auto deadline = dirty_ ? std::min(std::max(next_pass, Clock::now()), next_poll) : next_poll;
    cv_.wait_until(lock, deadline, [&] { return quit_ || (dirty_ && Clock::now() >= next_pass); });
    if (quit_) break;
    if (Clock::now() >= next_poll) {
      for (auto it = supervised_.begin(); it != supervised_.end();) {
        Supervised& s = *it->second;
        ++it;  // finish() erases s
        if (backend_->running(s.handle)) continue;
        const std::string how = backend_->endWords(s.handle);
        finish(s, "lost: its " + backend_->describe(s.handle) +
                      " ended without reporting a result" + (how.empty() ? "" : ": " + how));
      }
      if (backend_->nodesChanged()) dirty_ = true;  // a host dropped off or came back
      next_poll = Clock::now() + options_.poll_interval;
    }
    if (Clock::now() >= next_pass && dirty_.exchange(false)) {
      takeIncoming();
      schedulePass();
      queue_length_ = queue_.size();
      next_pass = Clock::now() + kPassGap;
    }
  }
}

void JobService::schedulePass() {
  sched::ClusterState state;
  state.nodes = backend_->nodes();
  if (state.nodes.empty()) {
    char host[256] = "this machine";
    ::gethostname(host, sizeof host);
    state.nodes.push_back({host, options_.capacity});
  }
  for (const auto& [id, job] : queue_) state.queue.push_back(job);
  for (const auto& [id, r] : running_) state.running.push_back(r);
  if (!queue_.empty()) {
    auto accounts = store_.accounts();
    if (accounts) {
      for (const store::Account& a : *accounts) {
        if (a.max_gpus || a.max_cpu_millis) state.quotas[a.name] = {a.max_gpus, a.max_cpu_millis};
      }
    }
  }
  auto t0 = std::chrono::steady_clock::now();
  // Reservation times are shown in the server's local time.
  time_t now = ::time(nullptr);
  tm local{};
  ::localtime_r(&now, &local);
  sched::Options sched_options;
  sched_options.utc_offset = std::chrono::minutes(local.tm_gmtoff / 60);
  auto decision = sched::schedule(state, clock_, sched_options);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  pass_latency_.observe(seconds);
  if (!decision) {
    std::fprintf(stderr, "cohort server: scheduling: %s\n", decision.error().message.c_str());
    return;
  }
  {
    std::lock_guard waiting_lock(waiting_mu_);
    waiting_ = std::move(decision->waiting);
  }
  for (const sched::Placement& placement : decision->start) {
    auto job = store_.job(placement.job_id);
    if (!job || job->state != "queued") {
      // Stopped or removed while a submission was still on its way to the queue.
      if (job || job.error().code == Code::kNotFound) queue_.erase(placement.job_id);
      continue;
    }
    if (auto started = startJob(*job, placement); !started) {
      std::fprintf(stderr, "cohort server: job %s: %s\n", placement.job_id.c_str(),
                   started.error().message.c_str());
    }
  }
}

Result<void> JobService::startJob(store::Job job, const sched::Placement& placement) {
  const sched::Job queued = queue_[job.id];
  queue_.erase(job.id);
  {
    std::lock_guard waiting_lock(waiting_mu_);
    waiting_.erase(job.id);
  }
  job.state = next(job, job::JobInput::kStarted).value_or(job.state);  // starting
  job.started = nowUnixNanos();
  job.job_dir = job::Layout::of(options_.data_root, job.id).dir();
  // Recorded before the coordinator exists: a server that dies now finds the job lost, never a
  // coordinator it does not know about.
  COHORT_TRY(store_.updateJob(job));
  notify(job.id);
  running_[job.id] = sched::runningFrom(
      queued, placement, sched::TimePoint(std::chrono::milliseconds(job.started / 1000000)));

  auto failed = [&](const Error& e) -> Result<void> {
    job.state = next(job, job::JobInput::kStartFailed).value_or(job.state);  // failed
    job.ended = nowUnixNanos();
    job.exit_code = 1;
    job.reason = "could not start: " + e.message;
    running_.erase(job.id);
    dirty_ = true;
    COHORT_TRY(recordEnd(store_, job));
    notify(job.id);
    return tl::unexpected<Error>(e);
  };
  bool has_code = false;  // the job's directory exists already, holding only its code/
  std::string job_file_text;  // what the coordinator reads: the spec with its data placed
  std::string environments;  // where its coordinator looks environments up
  {
    auto spec = spec::parseJobFile(job.spec_json, "job");
    if (!spec) return failed(spec.error());
    has_code = spec->workdir == job::Layout(job.job_dir).codeDir();
    auto account = store_.account(job.account);
    if (!account) return failed(account.error());
    auto placed = checkData({account->name, account->admin}, *spec, job.id);
    if (!placed) return failed(placed.error());
    job_file_text = spec::toJobFile(*placed);
    if (options_.nodes != spec::Backend::kVolcano) {
      auto envs = environmentOf({account->name, account->admin}, *spec);
      if (!envs) return failed(envs.error());
      environments = *envs;
    }
  }
  auto id = identityOf(job.account);
  if (!id) return failed(id.error());
  if (::mkdir(job.job_dir.c_str(), 0755) != 0 && !(errno == EEXIST && has_code)) {
    return failed(failErrno("create " + job.job_dir).value());
  }
  if (has_code && id->first < 0 && ::chmod(job.job_dir.c_str(), 0755) != 0) {
    return failed(failErrno("chmod " + job.job_dir).value());
  }
  // Ranks that run as their account's user reach their job through its group; no other
  // account's user can enter it.
  if (id->first >= 0 && (::chown(job.job_dir.c_str(), 0, static_cast<gid_t>(id->second)) != 0 ||
                         ::chmod(job.job_dir.c_str(), 0750) != 0)) {
    return failed(failErrno("give " + job.job_dir + " to its account").value());
  }
  const job::Layout layout(job.job_dir);
  const std::string job_file = layout.specFile();
  if (auto w = writeFileAtomic(job_file, job_file_text, false); !w) return failed(w.error());
  // Where the coordinator reports, and its credential: the server keeps only its hash.
  auto token = newToken();
  if (!token) return failed(token.error());
  if (auto w = writeFileAtomic(layout.reportTokenFile(), *token + "\n", false, 0600); !w) {
    return failed(w.error());
  }
  if (auto w = writeReportUrl(job.job_dir); !w) return failed(w.error());
  job.report_hash = sha256Hex(*token);

  backends::JobLaunch launch;
  launch.job_id = job.id;
  launch.job_dir = job.job_dir;
  launch.data_root = options_.data_root;
  launch.isolate = options_.isolate;
  launch.uid = id->first;
  launch.gid = id->second;
  launch.gpus = freeGpus(job.gpus);
  launch.report = true;
  launch.environments = environments;
  launch.input_roots = options_.input_roots;
  // A paused rank's debugger listens in its node's own network, reached through the job's
  // coordinator (agent/job_ports.h), never by widening the job's network.
  launch.job_network = options_.job_network;
  for (const sched::RolePlacement& role : placement.roles) {
    launch.nodes.insert(launch.nodes.end(), role.nodes.begin(), role.nodes.end());
  }
  auto handle = backend_->submit(launch);
  if (!handle) return failed(handle.error());
  gpus_held_[job.id] = launch.gpus;
  job.backend = backend_->name();
  job.handle = *handle;
  auto s = std::make_unique<Supervised>();
  s->id = job.id;
  s->handle = job.handle;
  s->job_dir = job.job_dir;
  supervise(std::move(s));
  COHORT_TRY(store_.updateJob(job));
  notify(job.id);
  return {};
}

Result<JobService::ReportAnswer> JobService::report(const std::string& job_id,
                                                   const std::string& token,
                                                   const std::string& body) {
  auto job = store_.job(job_id);
  if (!job && job.error().code != Code::kNotFound) return tl::unexpected<Error>(job.error());
  if (!job || !sameHash(sha256Hex(token), job->report_hash)) {
    return fail(Code::kUnauthenticated, "not the report token of job '" + job_id + "'");
  }
  COHORT_TRY(checkJsonDepth(body));
  const Json report = Json::parse(body, nullptr, false);
  if (!report.is_object()) return fail(Code::kInvalidArgument, "the report is not a JSON object");
  auto seq = report.find("seq");
  auto events = report.find("events");
  if (seq == report.end() || !seq->is_number_integer() || seq->get<int64_t>() < 1) {
    return fail(Code::kInvalidArgument, "seq: expected the number of the first event, >= 1");
  }
  if (events == report.end() || !events->is_array() || events->size() > kMaxReportEvents) {
    return fail(Code::kInvalidArgument, "events: expected an array of at most " +
                                            std::to_string(kMaxReportEvents) + " events");
  }
  // Only what decodes is kept, and as cohort encodes it, never as the bytes that came; a refused
  // event still takes its number, so that the coordinator does not send it again.
  std::vector<store::Event> rows;
  std::vector<std::optional<job::Event>> decoded;
  for (const Json& e : *events) {
    auto event = job::decodeEvent(e.dump(-1, ' ', false, Json::error_handler_t::replace));
    if (!event) {
      std::fprintf(stderr, "cohort server: job %s: %s: refused\n", job_id.c_str(),
                   event.error().message.c_str());
      rows.push_back({});
      decoded.push_back(std::nullopt);
      continue;
    }
    rows.push_back({0, event->t ? event->t : nowUnixNanos(), job::encodeEvent(*event)});
    decoded.push_back(std::move(*event));
  }
  // The progress of a job that runs: the latest replaces the last (memory only).
  if (auto p = report.find("progress");
      p != report.end() && p->is_object() && !store::isFinalState(job->state)) {
    std::string snapshot = p->dump(-1, ' ', false, Json::error_handler_t::replace);
    if (snapshot.size() <= kMaxProgressBytes) {
      std::lock_guard plock(progress_mu_);
      progress_[job_id] = std::move(snapshot);
    }
  }
  auto r = report.find("result");
  ReportAnswer answer;
  if (events->empty() && r == report.end()) {  // progress alone: nothing to write
    answer.events_seq = job->events_seq;
    answer.result = store::isFinalState(job->state);
    return answer;
  }
  std::lock_guard lock(mu_);  // the loop must not end the job between the events and its state
  const int64_t first = seq->get<int64_t>();
  COHORT_ASSIGN(store::JobStore::Ingested in, store_.ingestEvents(job_id, first, rows));
  answer.events_seq = in.events_seq;
  if (in.taken) {
    std::vector<job::Event> fresh;
    for (size_t i = decoded.size() - in.taken; i < decoded.size(); ++i) {
      if (decoded[i]) fresh.push_back(std::move(*decoded[i]));
    }
    applyEvents(job_id, fresh);
    notify(job_id);
  }
  COHORT_ASSIGN(store::Job now, store_.job(job_id));
  const bool all_in = in.events_seq == first + static_cast<int64_t>(events->size()) - 1;
  if (r != report.end() && all_in && !store::isFinalState(now.state)) {
    COHORT_ASSIGN(job::JobResult result,
                  job::decodeResult(r->dump(-1, ' ', false, Json::error_handler_t::replace)));
    now.state = next(now, job::JobInput::kReported, result.state).value_or(now.state);
    now.exit_code = result.exit_code;
    now.reason = result.reason;
    if (auto why = stopped_why_.find(job_id); why != stopped_why_.end()) {
      if (now.state == "stopped") now.reason = why->second;
      stopped_why_.erase(why);
    }
    if (result.attempts > 0) now.attempts = result.attempts;
    now.root_cause_json = result.root_cause_json;
    now.ended = nowUnixNanos();
    COHORT_TRY(store_.updateJob(now));
    notify(job_id);
  }
  answer.result = store::isFinalState(now.state);
  if (answer.result) {
    std::lock_guard plock(progress_mu_);
    progress_.erase(job_id);
  }
  return answer;
}

std::optional<std::string> JobService::progress(const std::string& job_id) const {
  std::lock_guard lock(progress_mu_);
  auto it = progress_.find(job_id);
  if (it == progress_.end()) return std::nullopt;
  return it->second;
}

void JobService::applyEvents(const std::string& job_id, const std::vector<job::Event>& events) {
  std::optional<std::string> state;
  std::optional<int> attempts;
  std::optional<std::string> reason;  // why a job waits: a cluster's queue
  for (const job::Event& e : events) {
    if (e.kind != job::EventKind::kState) continue;
    if (!store::isFinalState(e.state)) {
      state = e.state;
      reason = e.reason;
    }
    if (e.state == "running") attempts = e.attempt.value_or(0) + 1;
  }
  if (!state && !attempts) return;
  auto job = store_.job(job_id);
  if (!job || store::isFinalState(job->state)) return;
  bool changed = false;
  // The coordinator's word moves the job as the lifecycle says (a stopping job stays stopping
  // until it ends); the reason goes with the state it explains.
  if (state) {
    if (auto to = next(*job, job::JobInput::kReported, *state)) {
      job->state = *to;
      job->reason = *reason;
      changed = true;
    } else if (job->state == *state && job->reason != *reason) {
      job->reason = *reason;
      changed = true;
    }
  }
  if (attempts && job->attempts != *attempts) {
    job->attempts = *attempts;
    changed = true;
  }
  if (changed && store_.updateJob(*job)) notify(job_id);
}

void JobService::finish(Supervised& s, const std::string& lost_why) {
  const std::string id = s.id;
  auto job = store_.job(id);
  // A coordinator reports the job's end before it exits; one that did not was lost.
  if (job && !store::isFinalState(job->state)) {
    job->ended = nowUnixNanos();
    // A stop that reached the coordinator before it blocked signals (first thing in `cohort
    // run`) ended it without a result: the job was stopped, not lost. Nothing had started.
    const bool stopped = job->state == "stopping";
    job->state = next(*job, job::JobInput::kCoordinatorGone).value_or(job->state);
    job->exit_code = stopped ? 143 : 1;
    if (!stopped) job->reason = lost_why;
    if (auto u = recordEnd(store_, *job); !u) {
      std::fprintf(stderr, "cohort server: job %s: %s\n", id.c_str(), u.error().message.c_str());
    }
    notify(id);
  }
  {
    std::lock_guard lock(progress_mu_);
    progress_.erase(id);
  }
  running_.erase(id);
  gpus_held_.erase(id);
  supervised_.erase(id);  // destroys s
  {
    std::lock_guard lock(coordinators_mu_);
    coordinators_.erase(id);
  }
  notify(id);  // its log is complete: followers may end
  dirty_ = true;
}

void JobService::supervise(std::unique_ptr<Supervised> s) {
  {
    std::lock_guard lock(coordinators_mu_);
    coordinators_.insert(s->id);
  }
  const std::string id = s->id;
  supervised_[id] = std::move(s);
}

bool JobService::coordinatorRunning(const std::string& id) const {
  std::lock_guard lock(coordinators_mu_);
  return coordinators_.count(id) > 0;
}

}  // namespace cohort::server
