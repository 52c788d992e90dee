#include "server/environments.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <filesystem>
#include <map>
#include <set>

#include "env/confined_build.h"
#include "env/environments.h"
#include "server/api.h"
#include "util/fd.h"
#include "util/json_limits.h"

namespace cohort::server {

using Json = nlohmann::json;

namespace {

constexpr const char* kSite = "site";
constexpr const char* kAccountScope = "account/";
constexpr size_t kMaxLockBytes = 1 << 20;
constexpr int64_t kMaxLogBytes = int64_t{8} << 20;
constexpr size_t kShownLogLines = 40;

std::string printableName(const std::string& name) {
  std::string out;
  for (unsigned char c : name.substr(0, 64)) out.push_back(c >= 0x20 && c < 0x7f ? c : '?');
  return out;
}

// A name from a request (any bytes a hostile account sends): one that can name a saved
// environment, else kInvalidArgument showing it printably.
Result<void> checkName(const std::string& name) {
  if (env::checkSavedName(name)) return {};
  return fail(Code::kInvalidArgument,
              "name: '" + printableName(name) + (name.size() > 64 ? "...'" : "'") +
                  (env::findPreset(name) ? " is a preset: choose another name"
                                         : " cannot name an environment (1-64 letters, digits, "
                                           "'-', '_' and '.', not starting with '.' or '-')"));
}

// The last `count` lines of the server's log of a build.
std::vector<std::string> lastLines(const std::string& path, size_t count) {
  std::vector<std::string> lines;
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  struct stat st {};
  if (!fd.valid() || ::fstat(fd.get(), &st) != 0) return lines;
  const off_t size = st.st_size, from = std::max<off_t>(0, size - (64 << 10));
  std::string text(static_cast<size_t>(size - from), '\0');
  ssize_t n = ::pread(fd.get(), text.data(), text.size(), from);
  text.resize(n > 0 ? static_cast<size_t>(n) : 0);
  for (const std::string& line : split(text, '\n')) {
    if (!line.empty()) lines.push_back(line);
  }
  if (lines.size() > count) lines.erase(lines.begin(), lines.end() - static_cast<long>(count));
  return lines;
}

// An environment the server has without a record: a preset, or one made on its machine.
Json environmentJson(const env::Environment& e, bool full) {
  Json j = {{"name", e.name},
            {"kind", e.preset ? "preset" : "saved"},
            {"owner", nullptr},
            {"shared", true},
            {"state", e.built ? "built" : "not_built"},
            {"base", e.from.empty() ? Json(nullptr) : Json(e.from)},
            {"requirements", e.requirements},
            {"hash", e.hash.empty() ? Json(nullptr) : Json(e.hash)},
            {"python_version", e.python_version},
            {"packages", e.packages},
            {"summary", e.summary},
            {"reason", ""},
            {"created", nullptr},
            {"updated", nullptr}};
  if (full) {
    auto lock = e.built && !e.dir.empty() ? env::readBuiltFile(e.dir + "/lock.txt", kMaxLockBytes)
                                          : Result<std::string>("");
    j["lock"] = lock ? *lock : "";
    j["log"] = Json::array();
  }
  return j;
}

}  // namespace

struct EnvironmentService::Record {
  std::string scope;
  std::string name;
  std::string owner;  // the account that pushed it
  EnvironmentDefinition definition;
  std::string state;  // building | built | failed
  std::string reason;
  std::string lock;  // the built environment's lock file
  std::string hash;
  std::string python_version;
  std::map<std::string, std::string> packages;
  int64_t created = 0;
  int64_t updated = 0;

  Json toJson(bool full, const std::string& log_path) const {
    Json j = {{"name", name},
              {"kind", "saved"},
              {"owner", owner},
              {"shared", scope == kSite},
              {"state", state},
              {"base", definition.base},
              {"requirements", definition.requirements},
              {"hash", hash.empty() ? Json(nullptr) : Json(hash)},
              {"python_version", python_version},
              {"packages", packages},
              {"summary", "on " + definition.base},
              {"reason", reason},
              {"created", isoOrNull(created)},
              {"updated", isoOrNull(updated)}};
    if (full) {
      j["lock"] = lock.empty() ? definition.lock : lock;
      j["log"] = lastLines(log_path, kShownLogLines);
    }
    return j;
  }
};

EnvironmentService::EnvironmentService(store::JobStore& store, EnvironmentServiceOptions options)
    : store_(store), options_(std::move(options)) {}

Result<std::unique_ptr<EnvironmentService>> EnvironmentService::create(
    store::JobStore& store, EnvironmentServiceOptions options) {
  std::unique_ptr<EnvironmentService> service(new EnvironmentService(store, std::move(options)));
  const std::string root = service->options_.data_root;
  COHORT_TRY(makeDirs(root + "/server/envs"));
  // Account directories can be entered by their own group only; the list of them by no one.
  COHORT_TRY(makeDirs(root + "/account-envs"));
  if (::chmod((root + "/account-envs").c_str(), 0711) != 0) {
    return failErrno("chmod '" + root + "/account-envs'");
  }
  // What a stopped server was building is built again.
  std::vector<std::string> scopes = {kSite};
  std::error_code ec;
  for (const auto& entry :
       std::filesystem::directory_iterator(root + "/server/envs/accounts", ec)) {
    scopes.push_back(kAccountScope + entry.path().filename().string());
  }
  for (const std::string& scope : scopes) {
    for (const Record& r : service->records(scope)) {
      if (r.state != "building") continue;
      service->appendLog(scope, r.name, "the server restarted during the build: building again");
      service->queue_.emplace_back(scope, r.name);
    }
  }
  service->thread_ = std::thread([s = service.get()] { s->loop(); });
  return service;
}

EnvironmentService::~EnvironmentService() {
  {
    std::lock_guard lock(mu_);
    quit_ = true;
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::string EnvironmentService::scopeOf(const Caller& caller) const {
  return caller.admin ? kSite : kAccountScope + caller.account;
}

std::string EnvironmentService::recordsDir(const std::string& scope) const {
  const std::string base = options_.data_root + "/server/envs/";
  return scope == kSite ? base + kSite : base + "accounts/" + scope.substr(strlen(kAccountScope));
}

std::vector<std::string> EnvironmentService::storesOf(const std::string& scope) const {
  if (scope == kSite) return options_.site;
  std::vector<std::string> stores = {options_.data_root + "/account-envs/" +
                                     scope.substr(strlen(kAccountScope))};
  stores.insert(stores.end(), options_.site.begin(), options_.site.end());
  return stores;
}

Result<std::unique_ptr<EnvironmentService::Record>> EnvironmentService::load(
    const std::string& scope, const std::string& name) const {
  COHORT_ASSIGN(std::string text, readFile(recordsDir(scope) + "/" + name + ".json"));
  COHORT_TRY(checkJsonDepth(text));
  Json j = Json::parse(text, nullptr, false);
  if (!j.is_object()) return fail(Code::kIo, "the record of environment " + name + " is damaged");
  auto r = std::make_unique<Record>();
  r->scope = scope;
  r->name = name;
  r->owner = j.value("owner", "");
  r->definition.base = j.value("base", "");
  r->definition.requirements = j.value("requirements", std::vector<std::string>{});
  r->definition.lock = j.value("asked_lock", "");
  r->state = j.value("state", "failed");
  r->reason = j.value("reason", "");
  r->lock = j.value("lock", "");
  r->hash = j.value("hash", "");
  r->python_version = j.value("python_version", "");
  r->packages = j.value("packages", std::map<std::string, std::string>{});
  r->created = j.value("created", int64_t{0});
  r->updated = j.value("updated", int64_t{0});
  return r;
}

Result<void> EnvironmentService::save(const Record& r) {
  const std::string dir = recordsDir(r.scope);
  COHORT_TRY(makeDirs(dir));
  Json j = {{"owner", r.owner},
            {"base", r.definition.base},
            {"requirements", r.definition.requirements},
            {"asked_lock", r.definition.lock},
            {"state", r.state},
            {"reason", r.reason},
            {"lock", r.lock},
            {"hash", r.hash},
            {"python_version", r.python_version},
            {"packages", r.packages},
            {"created", r.created},
            {"updated", r.updated}};
  return writeFileAtomic(dir + "/" + r.name + ".json",
                         j.dump(2, ' ', false, Json::error_handler_t::replace) + "\n", true, 0600);
}

std::vector<EnvironmentService::Record> EnvironmentService::records(
    const std::string& scope) const {
  std::vector<Record> out;
  std::error_code ec;
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(recordsDir(scope), ec)) {
    const std::string file = entry.path().filename().string();
    if (file.size() > 5 && file.substr(file.size() - 5) == ".json") {
      names.push_back(file.substr(0, file.size() - 5));
    }
  }
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) {
    if (!env::checkSavedName(name)) continue;
    if (auto r = load(scope, name)) out.push_back(std::move(**r));
  }
  return out;
}

void EnvironmentService::changed(const std::string& scope, const std::string& name) const {
  if (options_.on_change) options_.on_change("env:" + scope + "/" + name);
}

void EnvironmentService::appendLog(const std::string& scope, const std::string& name,
                                   const std::string& line) {
  const std::string dir = recordsDir(scope);
  if (!makeDirs(dir)) return;
  const std::string path = dir + "/" + name + ".log";
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  struct stat st {};
  if (!fd.valid() || ::fstat(fd.get(), &st) != 0 || st.st_size > kMaxLogBytes) return;
  (void)writeAll(fd.get(), line + "\n");
  changed(scope, name);
}

Result<Json> EnvironmentService::list(const Caller& caller) {
  std::lock_guard lock(mu_);
  Json out = Json::array();
  std::set<std::string> listed;
  env::Store site(options_.site);
  for (const env::Environment& e : site.list()) {
    if (!e.preset) continue;
    out.push_back(environmentJson(e, false));
  }
  // The admins': pushed (with records, in any state), or made on the server's machine.
  std::map<std::string, Json> shared;
  for (const env::Environment& e : site.list()) {
    if (!e.preset) shared[e.name] = environmentJson(e, false);
  }
  for (const Record& r : records(kSite)) shared[r.name] = r.toJson(false, "");
  for (auto& [name, j] : shared) out.push_back(std::move(j));
  if (!caller.admin) {
    for (const Record& r : records(scopeOf(caller))) out.push_back(r.toJson(false, ""));
  }
  return Json{{"environments", out}};
}

Result<Json> EnvironmentService::find(const Caller& caller, const std::string& name, bool full) {
  env::Store site(options_.site);
  if (env::findPreset(name)) {
    COHORT_ASSIGN(env::Environment e, site.get(name));
    return environmentJson(e, full);
  }
  COHORT_TRY(checkName(name));
  if (!caller.admin) {
    if (auto own = load(scopeOf(caller), name)) {
      return (*own)->toJson(full, recordsDir(scopeOf(caller)) + "/" + name + ".log");
    }
  }
  if (auto r = load(kSite, name)) {
    return (*r)->toJson(full, recordsDir(kSite) + "/" + name + ".log");
  }
  auto e = site.get(name);
  if (e && e->built && !e->preset) return environmentJson(*e, full);
  std::vector<std::string> names;
  COHORT_ASSIGN(Json all, [&]() -> Result<Json> {
    Json out = Json::array();
    for (const env::Environment& known : site.list()) out.push_back(known.name);
    for (const Record& r : records(kSite)) out.push_back(r.name);
    if (!caller.admin) {
      for (const Record& r : records(scopeOf(caller))) out.push_back(r.name);
    }
    return out;
  }());
  for (const Json& n : all) {
    if (std::find(names.begin(), names.end(), n.get<std::string>()) == names.end()) {
      names.push_back(n.get<std::string>());
    }
  }
  return fail(Code::kNotFound, "no environment '" + printableName(name) +
                                   "' on the server (there are: " + join(names, ", ") +
                                   "; cohort env push NAME sends one)");
}

Result<Json> EnvironmentService::show(const Caller& caller, const std::string& name) {
  std::lock_guard lock(mu_);
  return find(caller, name, true);
}

Result<void> EnvironmentService::checkBase(const Caller& caller, const std::string& name,
                                           const std::string& base) {
  if (base.empty()) {
    return fail(Code::kInvalidArgument,
                "base: name the environment to build on (a preset: pytorch, tensorflow, "
                "mindspore; or one of the server's: cohort env ls --on-server)");
  }
  if (base == name) {
    return fail(Code::kInvalidArgument, "base: an environment cannot be built on itself");
  }
  if (base == "system") {
    return fail(Code::kInvalidArgument,
                "base: system has no virtual environment to build on: name pytorch, "
                "tensorflow, mindspore or one of the server's environments");
  }
  COHORT_ASSIGN(Json found, [&]() -> Result<Json> {
    auto j = find(caller, base, false);
    if (!j && j.error().code == Code::kNotFound) {
      return fail(Code::kNotFound, "base: no environment '" + printableName(base) +
                                       "' on the server: push it first (cohort env push " +
                                       printableName(base) + ")");
    }
    if (!j) return withContext(j.error(), "base");
    return j;
  }());
  const std::string state = found.value("state", "");
  if (state == "building" || state == "failed") {
    return fail(Code::kFailedPrecondition,
                "base: environment '" + base + "' " +
                    (state == "building" ? "is still being built" : "failed to build") +
                    ": build on it once it is built (cohort env show " + base + " --on-server)");
  }
  return {};
}

Result<void> EnvironmentService::checkUnused(const std::string& scope, const std::string& name) {
  // Jobs that would start in it, or run in it now.
  std::vector<std::string> live;
  for (const std::string& s : store::kJobStates) {
    if (!store::isFinalState(s)) live.push_back(s);
  }
  COHORT_ASSIGN(std::vector<store::Job> jobs, store_.jobsInStates(live));
  for (const store::Job& job : jobs) {
    if (scope != kSite && kAccountScope + job.account != scope) continue;
    // A job of an account that has its own environment of that name runs in its own.
    if (scope == kSite && load(kAccountScope + job.account, name)) continue;
    Json spec = Json::parse(job.spec_json, nullptr, false);  // written by the server
    if (!spec.is_object() || !spec.contains("environment") || !spec["environment"].is_string() ||
        spec["environment"].get<std::string>() != name) {
      continue;
    }
    return fail(Code::kFailedPrecondition,
                "environment '" + name + "': job " + job.id + " (" + job.state +
                    ") runs in it: wait for it to end, or stop it (cohort stop " + job.id + ")");
  }
  // Environments built on it.
  std::vector<std::string> scopes = {scope};
  if (scope == kSite) {
    std::error_code ec;
    for (const auto& entry :
         std::filesystem::directory_iterator(options_.data_root + "/server/envs/accounts", ec)) {
      scopes.push_back(kAccountScope + entry.path().filename().string());
    }
    for (const env::Environment& e : env::Store(options_.site).list()) {
      if (!e.preset && e.from == name) {
        return fail(Code::kFailedPrecondition, "environment '" + name + "': environment '" +
                                                   e.name + "' is built on it: remove it first");
      }
    }
  }
  for (const std::string& s : scopes) {
    if (s != scope && load(s, name)) continue;  // that account's own of the name
    for (const Record& r : records(s)) {
      if (r.definition.base != name || r.name == name) continue;
      return fail(Code::kFailedPrecondition,
                  "environment '" + name + "': environment '" + r.name + "'" +
                      (s == scope ? std::string() : " of account '" + r.owner + "'") +
                      " is built on it: remove it first");
    }
  }
  return {};
}

Result<Json> EnvironmentService::push(const Caller& caller, const std::string& name,
                                      const EnvironmentDefinition& definition) {
  COHORT_TRY(checkName(name));
  if (definition.requirements.size() > kMaxRequirements) {
    return fail(Code::kInvalidArgument,
                "requirements: " + std::to_string(definition.requirements.size()) +
                    " of them; at most " + std::to_string(kMaxRequirements));
  }
  for (size_t i = 0; i < definition.requirements.size(); ++i) {
    if (auto ok = env::checkRequirement(definition.requirements[i]); !ok) {
      return withContext(ok.error(), "requirements[" + std::to_string(i) + "]");
    }
  }
  if (definition.lock.size() > kMaxLockBytes) {
    return fail(Code::kInvalidArgument, "lock: over 1 MiB");
  }
  auto pins = env::parseLock(definition.lock);
  if (!pins) return withContext(pins.error(), "lock");
  if (pins->size() > kMaxLockLines) {
    return fail(Code::kInvalidArgument, "lock: " + std::to_string(pins->size()) +
                                            " pins; at most " + std::to_string(kMaxLockLines));
  }
  // Whose identity builds it: refused now rather than at the build.
  COHORT_ASSIGN(auto id, accountIdentity(store_, options_.identities, caller.account));
  if (id.first < 0 && !options_.identities.single_user) {
    COHORT_ASSIGN(std::vector<store::Account> accounts, store_.accounts());
    if (accounts.size() > 1) {
      return fail(Code::kFailedPrecondition,
                  "this server cannot build an account's environment as a user of its own (it "
                  "does not run as root), and " +
                      std::to_string(accounts.size()) +
                      " accounts share it: run it as root, or with --single-user if one person "
                      "owns every account (docs/security.md)");
    }
  }
  std::lock_guard lock(mu_);
  COHORT_TRY(checkBase(caller, name, definition.base));
  const std::string scope = scopeOf(caller);
  auto existing = load(scope, name);
  const bool made_here = scope == kSite && env::Store(options_.site).get(name).has_value();
  if (existing && (*existing)->state == "building") {
    return fail(Code::kFailedPrecondition, "environment '" + name +
                                               "' is being built: wait for it (cohort env show " +
                                               name + " --on-server), then push again");
  }
  if (existing || made_here) {
    COHORT_TRY(checkUnused(scope, name));
  } else if (records(scope).size() >= static_cast<size_t>(kMaxEnvironments)) {
    return fail(
        Code::kFailedPrecondition,
        (caller.admin ? std::string("the admins have ") : "account '" + caller.account + "' has ") +
            std::to_string(kMaxEnvironments) +
            " environments, the most the server keeps for one: remove one (cohort env "
            "rm NAME --on-server)");
  }
  Record r;
  r.scope = scope;
  r.name = name;
  r.owner = caller.account;
  r.definition = definition;
  r.state = "building";
  r.created = existing ? (*existing)->created : nowUnixNanos();
  r.updated = nowUnixNanos();
  COHORT_TRY(save(r));
  const std::string log = recordsDir(scope) + "/" + name + ".log";
  COHORT_TRY(writeFileAtomic(log, "", false, 0600));
  appendLog(scope, name,
            "queued" +
                (queue_.empty() ? std::string()
                                : " behind " + std::to_string(queue_.size()) + " build(s)") +
                " (" + isoTime(r.updated) + ")");
  queue_.emplace_back(scope, name);
  cv_.notify_all();
  return r.toJson(false, "");
}

Result<void> EnvironmentService::remove(const Caller& caller, const std::string& name) {
  if (env::findPreset(name)) {
    return fail(Code::kFailedPrecondition,
                "'" + name + "' is a preset: it is part of the server, not removed");
  }
  COHORT_TRY(checkName(name));
  std::lock_guard lock(mu_);
  const std::string scope = scopeOf(caller);
  auto record = load(scope, name);
  if (!record) {
    auto site = env::Store(options_.site).get(name);
    const bool shared = (site && site->built) || load(kSite, name);
    if (!caller.admin && shared) {
      return fail(Code::kPermissionDenied,
                  "environment '" + name + "' is an admin's: only an admin may remove it");
    }
    if (!caller.admin || !site || !site->built) {
      return fail(Code::kNotFound, "no environment '" + printableName(name) +
                                       "' of yours on the server (cohort env ls --on-server)");
    }
  } else if ((*record)->state == "building") {
    return fail(Code::kFailedPrecondition,
                "environment '" + name + "' is being built: remove it once the build is over");
  }
  COHORT_TRY(checkUnused(scope, name));
  std::error_code ec;
  std::filesystem::remove_all(storesOf(scope).front() + "/" + name, ec);
  if (ec) return fail(Code::kIo, "remove environment '" + name + "': " + ec.message());
  const std::string dir = recordsDir(scope);
  for (const char* suffix : {".json", ".log"}) {
    if (::unlink((dir + "/" + name + suffix).c_str()) != 0 && errno != ENOENT) {
      return failErrno("remove the record of environment '" + name + "'");
    }
  }
  changed(scope, name);
  return {};
}

Result<std::string> EnvironmentService::searchPath(const Caller& caller, const std::string& name) {
  std::lock_guard lock(mu_);
  const std::string scope = scopeOf(caller);
  const std::string path = join(storesOf(scope), ":");
  if (env::findPreset(name)) return path;
  COHORT_ASSIGN(Json found, find(caller, name, false));
  const std::string state = found.value("state", "");
  if (state == "building") {
    return fail(Code::kFailedPrecondition,
                "environment '" + name +
                    "' is still being built: submit the job once it is built (cohort env show " +
                    name + " --on-server)");
  }
  if (state == "failed") {
    return fail(Code::kFailedPrecondition, "environment '" + name + "' failed to build (" +
                                               found.value("reason", "").substr(0, 2000) +
                                               "): push it again (cohort env push " + name + ")");
  }
  return path;
}

Result<EnvironmentService::Log> EnvironmentService::log(const Caller& caller,
                                                        const std::string& name) {
  std::lock_guard lock(mu_);
  COHORT_ASSIGN(Json found, find(caller, name, false));
  if (found.value("kind", "") == "preset" || found["owner"].is_null()) {
    return fail(Code::kNotFound, "environment '" + name + "' has no build log on the server");
  }
  const std::string scope = found.value("shared", false) ? kSite : scopeOf(caller);
  return Log{recordsDir(scope) + "/" + name + ".log", "env:" + scope + "/" + name};
}

bool EnvironmentService::buildOver(const std::string& key) {
  const std::string rest = key.substr(std::min(key.size(), size_t{4}));
  const size_t slash = rest.rfind('/');
  if (slash == std::string::npos) return true;
  std::lock_guard lock(mu_);
  auto r = load(rest.substr(0, slash), rest.substr(slash + 1));
  return !r || (*r)->state != "building";
}

void EnvironmentService::loop() {
  std::unique_lock lock(mu_);
  while (!quit_) {
    cv_.wait(lock, [&] { return quit_ || !queue_.empty(); });
    if (quit_) break;
    auto [scope, name] = queue_.front();
    queue_.pop_front();
    lock.unlock();
    build(scope, name);
    lock.lock();
  }
}

void EnvironmentService::build(const std::string& scope, const std::string& name) {
  std::unique_ptr<Record> r;
  {
    std::lock_guard lock(mu_);
    auto loaded = load(scope, name);
    if (!loaded || (*loaded)->state != "building") return;
    r = std::move(*loaded);
  }
  auto progress = [&](const std::string& line) { appendLog(scope, name, line); };
  const std::vector<std::string> stores = storesOf(scope);
  auto built = [&]() -> Result<void> {
    COHORT_ASSIGN(auto id, accountIdentity(store_, options_.identities, r->owner));
    // An account's directory: its group's alone (its ranks read it; no other account's can).
    if (scope != kSite) {
      const std::string& dir = stores.front();
      COHORT_TRY(makeDirs(dir));
      const bool own_group = id.second >= 0;
      if ((own_group && ::chown(dir.c_str(), 0, static_cast<gid_t>(id.second)) != 0) ||
          ::chmod(dir.c_str(), own_group ? 0750 : 0700) != 0) {
        return failErrno("give '" + dir + "' to account '" + r->owner + "'");
      }
    } else {
      COHORT_TRY(makeDirs(stores.front()));
    }
    // A preset base is the server's own: built by it, once, as for a job that names it.
    if (env::findPreset(r->definition.base)) {
      env::Store site(options_.site);
      COHORT_ASSIGN(env::Environment base, site.get(r->definition.base));
      if (!base.built) {
        progress("building preset " + base.name + " first (once; every account's jobs use it)");
        COHORT_TRY(site.ensureBuilt(base.name, progress));
      }
    }
    progress("building " + name + " on " + r->definition.base + " as uid " +
             std::to_string(id.first >= 0 ? id.first : static_cast<int>(::geteuid())) +
             (options_.sandbox ? ", in the sandbox" : ""));
    env::Confinement how{id.first, id.second, options_.sandbox, {options_.data_root}};
    return env::buildConfined(
        options_.cohort_bin,
        {stores, name, r->definition.base, r->definition.requirements, r->definition.lock}, how,
        options_.build_timeout, progress, [this] { return stopping_.load(); });
  }();
  if (stopping_) return;  // built again when the server starts again
  Record done = *r;
  done.updated = nowUnixNanos();
  if (built) {
    auto e = env::Store(stores).get(name);
    if (e && e->built && e->store == stores.front()) {
      done.state = "built";
      done.reason.clear();
      done.hash = e->hash;
      done.python_version = e->python_version;
      done.packages = e->packages;
      auto lock = env::readBuiltFile(e->dir + "/lock.txt", kMaxLockBytes);
      done.lock = lock ? *lock : "";
      progress("built " + name);
    } else {
      built = fail(Code::kUnavailable, "the build ended without an environment");
    }
  }
  if (!built) {
    done.state = "failed";
    done.reason = built.error().message;
    progress("failed: " + done.reason);
    std::error_code ec;
    std::filesystem::remove_all(stores.front() + "/" + name, ec);
  }
  std::lock_guard lock(mu_);
  if (auto saved = save(done); !saved) {
    std::fprintf(stderr, "cohort server: environment %s: %s\n", name.c_str(),
                 saved.error().message.c_str());
  }
  changed(scope, name);
}

namespace {

class BuildLogStream : public http::StreamSource {
 public:
  BuildLogStream(EnvironmentService& service, EventHub& hub, EnvironmentService::Log log,
                 int64_t offset, bool follow, std::function<bool()> stopping)
      : service_(service),
        hub_(hub),
        log_(std::move(log)),
        pos_(offset),
        ended_(!follow),
        stopping_(std::move(stopping)) {}

  void start(http::StreamWaker waker) override {
    sub_ = hub_.subscribe(log_.key, [waker] { waker.wake(); });
  }

  State pull(std::string& out) override {
    if (stopping_ && stopping_()) return State::kEnd;
    if (!fd_.valid()) fd_.reset(::open(log_.path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
    if (fd_.valid() && readNextChunk(fd_.get(), pos_, out)) return State::kMore;
    if (ended_) return State::kEnd;
    // One more read once the build is over catches its last lines.
    if (service_.buildOver(log_.key)) {
      ended_ = true;
      return State::kMore;
    }
    sub_->wakeAfter(std::chrono::seconds(5));  // should a wake-up be lost
    return State::kWait;
  }

 private:
  EnvironmentService& service_;
  EventHub& hub_;
  const EnvironmentService::Log log_;
  int64_t pos_;
  bool ended_;
  std::function<bool()> stopping_;
  UniqueFd fd_;
  std::unique_ptr<EventHub::Subscription> sub_;
};

}  // namespace

std::unique_ptr<http::StreamSource> buildLogStream(EnvironmentService& service, EventHub& hub,
                                                   EnvironmentService::Log log, int64_t offset,
                                                   bool follow, std::function<bool()> stopping) {
  return std::make_unique<BuildLogStream>(service, hub, std::move(log), offset, follow,
                                          std::move(stopping));
}

}  // namespace cohort::server
