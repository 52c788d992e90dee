#include "server/jobs.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "backends/local.h"
#include "spec/job_spec.h"
#include "storage/uri.h"
#include "util/fd.h"
#include "util/text.h"

extern char** environ;

namespace cohort::server {

using Json = nlohmann::json;

namespace {

// A process's state letter and start time (clock ticks since boot) from /proc/<pid>/stat.
struct ProcStat {
  char state = '?';
  int64_t start = 0;
};

std::optional<ProcStat> procStat(int64_t pid) {
  auto text = readFile("/proc/" + std::to_string(pid) + "/stat");
  if (!text) return std::nullopt;
  auto paren = text->rfind(')');
  if (paren == std::string::npos) return std::nullopt;
  std::vector<std::string> fields = split(text->substr(paren + 2), ' ');
  if (fields.size() < 20) return std::nullopt;
  ProcStat st;
  st.state = fields[0].empty() ? '?' : fields[0][0];
  st.start = std::strtoll(fields[19].c_str(), nullptr, 10);
  return st;
}

// Appends an event the server writes itself, stamped `at` like the coordinator's.
Result<void> appendEvent(store::JobStore& store, const std::string& job_id, Json event,
                         int64_t at) {
  event["t"] = at;
  event["time"] = isoTime(at);
  return store.appendEvents(job_id, {{0, at, event.dump()}});
}

// Records a job the server itself ended (its state, reason and end time set) and its last event.
Result<void> recordEnd(store::JobStore& store, const store::Job& job) {
  COHORT_TRY(store.updateJob(job));
  return appendEvent(store, job.id,
                     {{"event", "state"}, {"state", job.state}, {"reason", job.reason}}, job.ended);
}

// The GPUs a running coordinator was given (its CUDA_VISIBLE_DEVICES).
std::vector<int> gpusOf(int64_t pid) {
  std::vector<int> gpus;
  auto environ_text = readFile("/proc/" + std::to_string(pid) + "/environ");
  if (!environ_text) return gpus;
  for (const std::string& var : split(*environ_text, '\0')) {
    if (!startsWith(var, "CUDA_VISIBLE_DEVICES=")) continue;
    for (const std::string& id : split(var.substr(21), ',')) {
      if (auto n = parseInt(id)) gpus.push_back(*n);
    }
  }
  return gpus;
}

}  // namespace

std::string newJobId(const std::string& name) {
  time_t now = ::time(nullptr);
  tm local{};
  ::localtime_r(&now, &local);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &local);
  // Unique enough with the stamp: submit draws again on a collision.
  return name + "-" + stamp + "-" + randomHex(3).value_or("000000");
}

struct JobService::Supervised {
  std::string id;
  int64_t pid = 0;
  int64_t start_ticks = 0;
  bool child = false;  // spawned by this server: it must reap it
  std::string job_dir;
  int64_t offset = 0;  // of the events file, ingested
};

JobService::JobService(store::JobStore& store, JobServiceOptions options, const sched::Clock& clock)
    : store_(store), options_(std::move(options)), clock_(clock) {}

Result<std::unique_ptr<JobService>> JobService::create(store::JobStore& store,
                                                       JobServiceOptions options,
                                                       const sched::Clock& clock) {
  std::unique_ptr<JobService> service(new JobService(store, std::move(options), clock));
  COHORT_TRY(makeDirs(service->options_.data_root + "/jobs"));
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

sched::Job schedJob(const store::Job& job) {
  sched::Job s;
  s.id = job.id;
  s.account = job.account;
  s.priority = job.priority;
  s.submitted = sched::TimePoint(std::chrono::milliseconds(job.submitted / 1000000));
  // Simulated nodes share the machine: one request for the whole gang.
  s.roles.push_back({"job", 1, {job.cpu_millis, job.memory_bytes, job.gpus}});
  if (job.max_runtime_ms) s.max_runtime = Millis(*job.max_runtime_ms);
  return s;
}

sched::Running runningOf(const store::Job& job) {
  sched::Running r;
  r.job_id = job.id;
  r.account = job.account;
  r.shares.push_back({0, {job.cpu_millis, job.memory_bytes, job.gpus}});
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
      store_.jobsInStates({"queued", "starting", "staging", "running", "restarting", "stopping"}));
  for (store::Job& job : jobs) {
    if (job.state == "queued") {
      queue_[job.id] = schedJob(job);
      continue;
    }
    auto s = std::make_unique<Supervised>();
    s->id = job.id;
    s->pid = job.coordinator_pid;
    s->start_ticks = job.coordinator_start;
    s->job_dir = job.job_dir;
    s->offset = job.events_offset;
    auto st = job.coordinator_pid ? procStat(job.coordinator_pid) : std::nullopt;
    bool alive = st && st->start == job.coordinator_start && st->state != 'Z';
    running_[job.id] = runningOf(job);
    // What the coordinator wrote while the server was down comes first in the job's history,
    // then what the restarted server found.
    follow(*s);
    if (auto now = store_.job(job.id)) job.state = now->state;  // as those events left it
    auto record = [&](const std::string& found) {
      (void)appendEvent(store_, job.id, {{"event", "reconciled"}, {"found", found}},
                        nowUnixNanos());
    };
    if (alive) {
      gpus_held_[job.id] = gpusOf(job.coordinator_pid);
      record("still " + job.state + " (coordinator pid " + std::to_string(job.coordinator_pid) +
             ") after a server restart");
      reconciled_.push_back("job " + job.id + ": still " + job.state + " (coordinator pid " +
                            std::to_string(job.coordinator_pid) + "), following it again");
      supervised_[job.id] = std::move(s);
      continue;
    }
    record("ended while the server was down");
    Supervised& ref = *s;
    supervised_[job.id] = std::move(s);
    finish(ref, job.coordinator_pid
                    ? "lost: its coordinator (pid " + std::to_string(job.coordinator_pid) +
                          ") ended without a result while the server was down"
                    : "lost: the server stopped while starting it");
    auto after = store_.job(job.id);
    reconciled_.push_back(
        "job " + job.id + ": ended while the server was down: " +
        (after ? after->state + (after->reason.empty() ? "" : " (" + after->reason + ")")
               : std::string("unknown")));
  }
  return {};
}

// The job's data: store:// locations the caller may read (inputs) or write (outputs), local
// inputs outside the server's data root. Checked at submission and again at the start, so that
// a share revoked in between stops the job from reading through it.
Result<void> JobService::checkData(const Caller& caller, const spec::JobSpec& spec,
                                   const std::string& job_id) {
  const std::string root = options_.data_root + "/";
  std::error_code root_ec;
  const std::string real_root =
      std::filesystem::weakly_canonical(options_.data_root, root_ec).string() + "/";
  for (size_t i = 0; i < spec.inputs.size(); ++i) {
    std::string field = "inputs[" + std::to_string(i) + "].source";
    auto where = storage::parseLocation(spec.inputs[i].source);
    if (!where) return withContext(where.error(), field);
    if (where->kind == storage::Location::Kind::kStore) {
      auto ok = checkStoreAccess(store_, caller, where->bucket, where->key, Access::kRead);
      if (!ok) return withContext(ok.error(), field);
      continue;
    }
    const std::string& path = where->path;
    if (path.empty() || path[0] != '/') {
      return fail(Code::kInvalidArgument, field +
                                              ": must be store://... or an absolute path on "
                                              "the server's machine, got '" +
                                              path + "'");
    }
    // Compared resolved, so that neither '..' nor a link leads into the data root.
    std::error_code ec;
    const std::string real = std::filesystem::weakly_canonical(path, ec).string();
    if ((path + "/").rfind(root, 0) == 0 || (!ec && (real + "/").rfind(real_root, 0) == 0)) {
      return fail(Code::kInvalidArgument,
                  field + ": '" + path + "' is inside the server's data root; use store://");
    }
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
      return fail(Code::kInvalidArgument, field + ": '" + path + "' does not exist");
    }
  }
  for (size_t i = 0; i < spec.outputs.size(); ++i) {
    std::string field = "outputs[" + std::to_string(i) + "].target";
    auto where = storage::parseLocation(spec::expandTarget(spec.outputs[i].target, job_id, spec.name));
    if (!where) return withContext(where.error(), field);
    if (where->kind != storage::Location::Kind::kStore) {
      return fail(Code::kInvalidArgument,
                  field +
                      ": a server job writes its outputs to store://bucket/path (its "
                      "output/ directory can always be downloaded with cohort outputs)");
    }
    auto ok = checkStoreAccess(store_, caller, where->bucket, where->key, Access::kWrite);
    if (!ok) return withContext(ok.error(), field);
  }

  return {};
}

Result<store::Job> JobService::submit(const Caller& caller, const std::string& job_file,
                                      int priority) {
  COHORT_ASSIGN(spec::JobSpec spec, spec::parseJobFile(job_file, "job"));
  spec.base_dir = "/";
  if (spec.name.empty()) spec.name = "job";
  COHORT_TRY(spec::validate(spec));
  if (spec.workdir.empty() || spec.workdir[0] != '/') {
    return fail(
        Code::kInvalidArgument,
        "workdir: must be an absolute path on the server's machine, got '" + spec.workdir + "'");
  }
  COHORT_TRY(backends::checkCommand(spec));
  for (spec::Role& role : spec.roles) {
    if (role.procs_per_node != spec::kAutoProcs) continue;
    int64_t per_node = options_.capacity.gpus / spec::totalNodes(spec);
    role.procs_per_node = static_cast<int>(std::max<int64_t>(per_node, 1));
    // One process per GPU: each of them takes its GPU.
    if (per_node > 0 && role.resources.gpus == 0) role.resources.gpus = 1;
  }

  store::Job job;
  job.id = newJobId(spec.name);
  job.account = caller.account;
  job.name = spec.name;
  job.state = "queued";
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
  const sched::Resources need{job.cpu_millis, job.memory_bytes, job.gpus};
  if (!need.fitsIn(options_.capacity)) {
    return fail(
        Code::kInvalidArgument,
        "roles: the job needs " + sched::describe(need) +
            " at once (each rank takes "
            "its role's resources, 1 CPU unless resources.cpus says less); this server has " +
            sched::describe(options_.capacity) +
            " in all (its --cpus, --memory and --gpus set what it hands out)");
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
    job.id = newJobId(spec.name);
    job.spec_json = spec::toJobFile(spec);
  }
  {
    std::lock_guard lock(incoming_mu_);
    incoming_.push_back(schedJob(job));
  }
  wake();
  return job;
}

Result<store::Job> JobService::stop(const std::string& id) {
  std::lock_guard lock(mu_);
  takeIncoming();
  COHORT_ASSIGN(store::Job job, store_.job(id));
  if (store::isFinalState(job.state)) return job;
  if (job.state == "queued") {
    job.state = "stopped";
    job.ended = nowUnixNanos();
    job.reason = "stopped before it started";
    job.exit_code = 143;
    COHORT_TRY(recordEnd(store_, job));
    queue_.erase(id);
    {
      std::lock_guard waiting_lock(waiting_mu_);
      waiting_.erase(id);
    }
    wake();
    return job;
  }
  auto st = job.coordinator_pid ? procStat(job.coordinator_pid) : std::nullopt;
  if (st && st->start == job.coordinator_start && st->state != 'Z') {
    ::kill(static_cast<pid_t>(job.coordinator_pid), SIGTERM);
  }
  if (job.state != "stopping") {
    job.state = "stopping";
    job.reason = "stopped on request";
    COHORT_TRY(store_.updateJob(job));
  }
  return job;
}

Result<void> JobService::remove(const std::string& id) {
  COHORT_ASSIGN(store::Job job, store_.job(id));
  if (!store::isFinalState(job.state)) {
    return fail(Code::kFailedPrecondition,
                "job '" + id + "' is " + job.state + ": stop it first (cohort stop " + id + ")");
  }
  if (!job.job_dir.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(job.job_dir, ec);
    if (ec) return fail(Code::kIo, "remove '" + job.job_dir + "': " + ec.message());
  }
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
        follow(s);
        auto st = procStat(s.pid);
        bool alive = st && st->start == s.start_ticks && st->state != 'Z';
        if (alive) continue;
        if (s.child) {
          int status = 0;
          ::waitpid(static_cast<pid_t>(s.pid), &status, WNOHANG);
        }
        finish(s, "lost: its coordinator (pid " + std::to_string(s.pid) +
                      ") ended without writing a result");
      }
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
  char host[256] = "this machine";
  ::gethostname(host, sizeof host);
  state.nodes.push_back({host, options_.capacity});
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
  job.state = "starting";
  job.started = nowUnixNanos();
  job.job_dir = options_.data_root + "/jobs/" + job.id;
  // Recorded before the coordinator exists: a server that dies now finds the job lost, never a
  // coordinator it does not know about.
  COHORT_TRY(store_.updateJob(job));
  running_[job.id] = sched::runningFrom(
      queued, placement, sched::TimePoint(std::chrono::milliseconds(job.started / 1000000)));

  auto failed = [&](const Error& e) -> Result<void> {
    job.state = "failed";
    job.ended = nowUnixNanos();
    job.exit_code = 1;
    job.reason = "could not start: " + e.message;
    running_.erase(job.id);
    dirty_ = true;
    COHORT_TRY(recordEnd(store_, job));
    return tl::unexpected<Error>(e);
  };
  {
    auto spec = spec::parseJobFile(job.spec_json, "job");
    if (!spec) return failed(spec.error());
    auto account = store_.account(job.account);
    if (!account) return failed(account.error());
    if (auto data = checkData({account->name, account->admin}, *spec, job.id); !data) {
      return failed(data.error());
    }
  }
  if (::mkdir(job.job_dir.c_str(), 0755) != 0)
    return failed(failErrno("create " + job.job_dir).value());
  const std::string job_file = job.job_dir + "/job.json";
  if (auto w = writeFileAtomic(job_file, job.spec_json, false); !w) return failed(w.error());

  std::vector<std::string> args = {options_.cohort_bin, "run", "--job-id", job.id, "--data-root",
                                   options_.data_root,  "-f",  job_file};
  if (options_.isolate) args.push_back("--isolate");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  const std::string console = job.job_dir + "/console.log";
  posix_spawn_file_actions_addopen(&actions, 1, console.c_str(), O_WRONLY | O_CREAT | O_APPEND,
                                   0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGCHLD}) sigaddset(&defaults, sig);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  // Its own session: the job survives the server (and the server's terminal).
  posix_spawnattr_setflags(&attr,
                           POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  pid_t pid = 0;
  // The job's own GPUs, and no others: the coordinator hands them to its ranks.
  const std::vector<int> gpus = freeGpus(job.gpus);
  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e) {
    if (!startsWith(*e, "CUDA_VISIBLE_DEVICES=")) env_strings.emplace_back(*e);
  }
  std::vector<std::string> ids;
  for (int gpu : gpus) ids.push_back(std::to_string(gpu));
  env_strings.push_back("CUDA_VISIBLE_DEVICES=" + join(ids, ","));
  std::vector<char*> envp;
  for (std::string& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  int err = ::posix_spawn(&pid, argv[0], &actions, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (err != 0) return failed(failErrno("start the coordinator '" + args[0] + "'", err).value());

  gpus_held_[job.id] = gpus;
  auto st = procStat(pid);
  job.coordinator_pid = pid;
  job.coordinator_start = st ? st->start : 0;
  auto s = std::make_unique<Supervised>();
  s->id = job.id;
  s->pid = pid;
  s->start_ticks = job.coordinator_start;
  s->child = true;
  s->job_dir = job.job_dir;
  supervised_[job.id] = std::move(s);
  return store_.updateJob(job);
}

void JobService::follow(Supervised& s) {
  const std::string path = s.job_dir + "/events.jsonl";
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return;
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || st.st_size <= s.offset) return;
  std::string data(static_cast<size_t>(st.st_size - s.offset), '\0');
  ssize_t n = ::pread(fd.get(), data.data(), data.size(), s.offset);
  if (n <= 0) return;
  data.resize(static_cast<size_t>(n));
  size_t end = data.rfind('\n');
  if (end == std::string::npos) return;  // only part of a line so far
  data.resize(end + 1);

  std::vector<store::Event> events;
  std::optional<std::string> state;
  std::optional<int> attempts;
  for (const std::string& line : split(data, '\n')) {
    if (line.empty()) continue;
    Json e = Json::parse(line, nullptr, false);
    if (e.is_discarded() || !e.is_object()) continue;
    int64_t t = e.value("t", int64_t{0});
    events.push_back({0, t ? t : nowUnixNanos(), line});
    if (e.value("event", "") == "state") {
      std::string st_name = e.value("state", "");
      if (!store::isFinalState(st_name)) state = st_name;
      if (st_name == "running") attempts = e.value("attempt", 0) + 1;
    }
  }
  int64_t offset = s.offset + static_cast<int64_t>(end + 1);
  if (auto a = store_.appendEvents(s.id, events, offset); !a) {
    std::fprintf(stderr, "cohort server: job %s: events: %s\n", s.id.c_str(),
                 a.error().message.c_str());
    return;
  }
  s.offset = offset;
  if (!state && !attempts) return;
  auto job = store_.job(s.id);
  if (!job || store::isFinalState(job->state)) return;
  bool changed = false;
  // A stop asked for stays "stopping" until the job ends.
  if (state && job->state != "stopping" && job->state != *state) {
    job->state = *state;
    changed = true;
  }
  if (attempts && job->attempts != *attempts) {
    job->attempts = *attempts;
    changed = true;
  }
  if (changed) (void)store_.updateJob(*job);
}

void JobService::finish(Supervised& s, const std::string& lost_why) {
  follow(s);
  const std::string id = s.id;
  auto job = store_.job(id);
  if (job && !store::isFinalState(job->state)) {
    job->ended = nowUnixNanos();
    auto text = readFile(s.job_dir + "/result.json");
    Json result = text ? Json::parse(*text, nullptr, false) : Json();
    const bool have_result = result.is_object() && store::isFinalState(result.value("state", ""));
    if (have_result) {
      job->state = result.value("state", "failed");
      job->exit_code = result.value("exit_code", 1);
      job->reason = result.value("reason", "");
      job->attempts = result.value("attempts", job->attempts);
      if (result.contains("root_cause")) job->root_cause_json = result["root_cause"].dump();
    } else {
      // A stop that reached the coordinator before it blocked signals (first thing in `cohort
      // run`) ended it without a result: the job was stopped, not lost. Nothing had started.
      const bool stopped = job->state == "stopping";
      job->state = stopped ? "stopped" : "failed";
      job->exit_code = stopped ? 143 : 1;
      if (!stopped) job->reason = lost_why;
    }
    // The coordinator wrote its own last event; the server writes one only for a job it ended.
    auto u = have_result ? store_.updateJob(*job) : recordEnd(store_, *job);
    if (!u) {
      std::fprintf(stderr, "cohort server: job %s: %s\n", id.c_str(), u.error().message.c_str());
    }
  }
  running_.erase(id);
  gpus_held_.erase(id);
  supervised_.erase(id);  // destroys s
  dirty_ = true;
}

}  // namespace cohort::server
