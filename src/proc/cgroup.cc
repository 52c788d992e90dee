#include "proc/cgroup.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <utility>
#include <vector>

#include "proc/spawn.h"

namespace cohort::proc {

namespace {

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string unescapeMountField(const std::string& field) {
  auto octal = [&](size_t i) { return field[i] >= '0' && field[i] <= '7'; };
  std::string out;
  for (size_t i = 0; i < field.size(); ++i) {
    if (field[i] == '\\' && i + 3 < field.size() && octal(i + 1) && octal(i + 2) &&
        octal(i + 3)) {
      out.push_back(static_cast<char>((field[i + 1] - '0') * 64 + (field[i + 2] - '0') * 8 +
                                      (field[i + 3] - '0')));
      i += 3;
    } else {
      out.push_back(field[i]);
    }
  }
  return out;
}

bool isDirectory(const std::string& path) {
  struct stat st{};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::string parentOf(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos || slash == 0 ? "/" : path.substr(0, slash);
}

// "populated 1" in cgroup.events. Returns 0 or 1, or -1 when the file cannot be read.
int populated(int events_fd) {
  char buf[256];
  ssize_t n = ::pread(events_fd, buf, sizeof buf - 1, 0);
  if (n < 0) return -1;
  buf[n] = 0;
  const char* at = std::strstr(buf, "populated ");
  if (!at) return -1;
  return at[10] == '0' ? 0 : 1;
}

int64_t millisLeft(std::chrono::steady_clock::time_point until) {
  auto left = std::chrono::duration_cast<Millis>(until - std::chrono::steady_clock::now());
  return std::max<int64_t>(left.count(), 0);
}

// The cgroups right below `path` (directories: a cgroup's interface files are plain files).
std::vector<std::string> childCgroups(const std::string& path) {
  std::vector<std::string> out;
  DIR* dir = ::opendir(path.c_str());
  if (!dir) return out;
  while (dirent* entry = ::readdir(dir)) {
    const std::string name = entry->d_name;
    if (name == "." || name == ".." || entry->d_type != DT_DIR) continue;
    out.push_back(path + "/" + name);
  }
  ::closedir(dir);
  return out;
}

void collectProcesses(const std::string& path, int depth, std::vector<pid_t>& pids) {
  if (auto text = readFile(path + "/cgroup.procs")) {
    for (const std::string& line : split(*text, '\n')) {
      if (!line.empty()) pids.push_back(static_cast<pid_t>(std::atol(line.c_str())));
    }
  }
  if (depth == 0) return;
  for (const std::string& child : childCgroups(path)) collectProcesses(child, depth - 1, pids);
}

// Removes the (empty) cgroups below `path`, deepest first.
void removeChildCgroups(const std::string& path, int depth) {
  if (depth == 0) return;
  for (const std::string& child : childCgroups(path)) {
    removeChildCgroups(child, depth - 1);
    for (int attempt = 0; ::rmdir(child.c_str()) != 0 && errno == EBUSY && attempt < 200;
         ++attempt) {
      ::poll(nullptr, 0, 5);
    }
  }
}

constexpr int kMaxDepth = 8;  // below a cgroup of ours: node, rank, and what a rank may add

// Writes `text` to the file `name` of the cgroup directory `dir_fd`. Returns errno, 0 when done.
int writeCgroupFile(int dir_fd, const char* name, const std::string& text) {
  // O_TRUNC as a shell's ">" has it: the kernel ignores it for a cgroup's files.
  UniqueFd file(::openat(dir_fd, name, O_WRONLY | O_TRUNC | O_CLOEXEC));
  if (!file.valid()) return errno;
  if (::write(file.get(), text.data(), text.size()) < 0) return errno;
  return 0;
}

// The words of a cgroup's list file (cgroup.controllers, cgroup.subtree_control).
std::vector<std::string> words(const std::string& text) {
  std::string flat = text;
  std::replace(flat.begin(), flat.end(), '\n', ' ');
  std::vector<std::string> out;
  for (const std::string& word : split(flat, ' ')) {
    if (!word.empty()) out.push_back(word);
  }
  return out;
}

bool contains(const std::vector<std::string>& list, const std::string& item) {
  return std::find(list.begin(), list.end(), item) != list.end();
}

// A cgroup v1 hierarchy that holds `controller`: where this process's cgroup is in it
// (`dir`), or why there is none to use.
struct V1Found {
  std::string dir;
  std::string why;  // empty when `dir` is there
};

V1Found findV1(const std::string& controller, const ProcessCgroups& self) {
  // /proc/self/cgroup: "4:memory:/system.slice/x", "1:cpu,cpuacct:/", "0::/" (cgroup v2).
  std::string relative;
  bool bound = false;
  for (const std::string& line : split(self.cgroup, '\n')) {
    const size_t first = line.find(':');
    const size_t second = first == std::string::npos ? first : line.find(':', first + 1);
    if (second == std::string::npos) continue;
    if (contains(split(line.substr(first + 1, second - first - 1), ','), controller)) {
      relative = line.substr(second + 1);
      bound = true;
    }
  }
  if (!bound) return {"", "no cgroup v1 hierarchy holds it either"};
  for (const std::string& line : split(self.mountinfo, '\n')) {
    // id parent major:minor root mount-point options [optional...] - type source super-options
    std::vector<std::string> fields = split(line, ' ');
    auto dash = std::find(fields.begin(), fields.end(), "-");
    if (fields.size() < 5 || dash == fields.end() || fields.end() - dash < 4 ||
        *(dash + 1) != "cgroup" || !contains(split(*(dash + 3), ','), controller)) {
      continue;
    }
    const std::string root = unescapeMountField(fields[3]);
    const std::string mount_point = unescapeMountField(fields[4]);
    std::string dir;
    if (root == "/") {
      dir = mount_point + (relative == "/" ? "" : relative);
    } else if (relative == root || startsWith(relative, root + "/")) {
      dir = mount_point + relative.substr(root.size());
    } else {
      continue;  // this mount shows another part of the hierarchy
    }
    if (!isDirectory(dir)) continue;
    if (::access(dir.c_str(), W_OK) != 0 || ::access((dir + "/cgroup.procs").c_str(), W_OK) != 0) {
      return {"", "cgroup v1's " + controller + " hierarchy ('" + dir +
                      "') is not writable: " + std::strerror(errno)};
    }
    return {dir, ""};
  }
  return {"", "cgroup v1's " + controller + " hierarchy that holds it is not mounted where " +
                  "this process sees its cgroup '" + relative + "'"};
}

// A share of contended CPU time of `cpus` CPUs, in cgroup v1's cpu.shares (1024 a CPU, 2 to
// 262144) and cgroup v2's cpu.weight (100 a CPU, 1 to 10000).
int64_t cpuShares(double cpus) {
  return std::clamp<int64_t>(static_cast<int64_t>(cpus * 1024 + 0.5), 2, 262144);
}
int64_t cpuWeight(double cpus) {
  return std::clamp<int64_t>(static_cast<int64_t>(cpus * 100 + 0.5), 1, 10000);
}

// Kills and removes what one process told the watchdog about, once that process is gone.
void cleanUp(const std::vector<std::pair<int, std::string>>& cgroups) {
  for (const auto& [parents, path] : cgroups) {
    auto killed = killCgroup(path, Millis(10000));
    Result<void> done = killed ? removeCgroup(path, parents) : tl::unexpected(killed.error());
    if (!done) std::fprintf(stderr, "cohort watchdog: %s\n", done.error().message.c_str());
  }
}

// The watchdog's body, in the forked child. It reads lines from `input`: "<pid> <parents>
// <path>" (process <pid> made the cgroup <path>) and "<pid> -" (it removed them itself). It
// watches each such process through a pidfd and cleans up after the one that goes; once no
// process holds the pipe's write end any more, after all of them, and exits.
[[noreturn]] void runWatchdog(int input) {
  constexpr size_t kMaxLine = 8192;
  ::setpgid(0, 0);  // out of the creator's process group: a signal to that group spares us
  ::prctl(PR_SET_NAME, "cohort-watchdog");
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGPIPE}) ::signal(sig, SIG_IGN);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null >= 0) {
    ::dup2(null, 0);
    ::dup2(null, 1);
  }
  // Keep stdin, stdout, stderr and the pipe; the creator's sockets and pipes must not stay open
  // in here (a peer would not see them close).
  if (input > 3) ::close_range(3, static_cast<unsigned>(input - 1), 0);
  ::close_range(static_cast<unsigned>(input + 1), ~0U, 0);

  struct Creator {
    UniqueFd pidfd;  // invalid: it was gone before we heard of it
    std::vector<std::pair<int, std::string>> cgroups;
  };
  std::map<pid_t, Creator> creators;
  std::string received;
  char buf[4096];
  for (;;) {
    std::vector<pollfd> fds = {{input, POLLIN, 0}};
    std::vector<pid_t> pids;
    for (const auto& [pid, creator] : creators) {
      fds.push_back({creator.pidfd.get(), POLLIN, 0});
      pids.push_back(pid);
    }
    if (::poll(fds.data(), fds.size(), -1) < 0) {
      if (errno != EINTR) ::poll(nullptr, 0, 100);
      continue;
    }
    bool closed = false;
    if (fds[0].revents) {
      const ssize_t got = ::read(input, buf, sizeof buf);
      if (got > 0) {
        received.append(buf, static_cast<size_t>(got));
      } else if (got == 0 || errno != EINTR) {
        closed = true;
      }
    }
    for (size_t end; (end = received.find('\n')) != std::string::npos;) {
      const std::string line = received.substr(0, end);
      received.erase(0, end + 1);
      const size_t space = line.find(' ');
      const pid_t pid = static_cast<pid_t>(std::atol(line.c_str()));
      if (pid <= 0 || space == std::string::npos) continue;
      const std::string rest = line.substr(space + 1);
      if (rest == "-") {
        creators.erase(pid);
        continue;
      }
      const size_t second = rest.find(' ');
      if (second == std::string::npos) continue;
      Creator& creator = creators[pid];
      if (!creator.pidfd.valid()) creator.pidfd.reset(openPidfd(pid));
      creator.cgroups.emplace_back(std::atoi(rest.c_str()), rest.substr(second + 1));
    }
    // A line is "<pid> <parents> <path>", the path at most PATH_MAX: one longer than kMaxLine did
    // not come from an agent (a process of the same user can open the pipe through /proc), and
    // is not held.
    if (received.size() > kMaxLine) received.clear();
    for (size_t i = 1; i < fds.size(); ++i) {
      if (!fds[i].revents) continue;
      auto it = creators.find(pids[i - 1]);
      if (it == creators.end()) continue;
      cleanUp(it->second.cgroups);
      creators.erase(it);
    }
    for (auto it = creators.begin(); it != creators.end();) {
      // Gone before we heard of it, or (the pipe closed) every process that could write is gone.
      if (it->second.pidfd.valid() && !closed) {
        ++it;
        continue;
      }
      cleanUp(it->second.cgroups);
      it = creators.erase(it);
    }
    if (closed) break;
  }
  _exit(0);
}

}  // namespace

Result<std::string> cgroupBase() {
  const char* root = std::getenv("COHORT_CGROUP_ROOT");
  if (!root || !*root) return ownWritableCgroup();
  if (::access((std::string(root) + "/cgroup.procs").c_str(), W_OK) != 0) {
    return fail(Code::kPermissionDenied, std::string("COHORT_CGROUP_ROOT '") + root +
                                             "' is not a writable cgroup: " + std::strerror(errno));
  }
  return std::string(root);
}

Result<std::string> ownWritableCgroup() {
  auto own = readFile("/proc/self/cgroup");
  if (!own) return fail(Code::kNotFound, own.error().message);
  std::string relative;
  bool found = false;
  for (const std::string& line : split(*own, '\n')) {
    if (startsWith(line, "0::")) {
      relative = line.substr(3);
      found = true;
    }
  }
  if (!found) return fail(Code::kNotFound, "no cgroup v2 hierarchy ('/proc/self/cgroup')");
  auto mounts = readFile("/proc/self/mountinfo");
  if (!mounts) return fail(Code::kNotFound, mounts.error().message);
  std::string dir;
  for (const std::string& line : split(*mounts, '\n')) {
    // id parent major:minor root mount-point options [optional...] - type source super-options
    std::vector<std::string> fields = split(line, ' ');
    auto dash = std::find(fields.begin(), fields.end(), "-");
    if (fields.size() < 5 || dash == fields.end() || dash + 1 == fields.end() ||
        *(dash + 1) != "cgroup2") {
      continue;
    }
    std::string root = unescapeMountField(fields[3]);
    std::string mount_point = unescapeMountField(fields[4]);
    std::string candidate;
    if (root == "/") {
      candidate = mount_point + (relative == "/" ? "" : relative);
    } else if (relative == root || startsWith(relative, root + "/")) {
      candidate = mount_point + relative.substr(root.size());
    } else {
      continue;  // this mount shows another part of the tree
    }
    if (isDirectory(candidate)) {
      dir = candidate;
      break;
    }
  }
  if (dir.empty()) {
    return fail(Code::kNotFound, "no cgroup v2 hierarchy mounted that shows cgroup '" +
                                     relative + "'");
  }
  if (::access(dir.c_str(), W_OK) != 0 || ::access((dir + "/cgroup.procs").c_str(), W_OK) != 0) {
    return fail(Code::kPermissionDenied,
                "cgroup '" + dir + "' is not writable: " + std::strerror(errno));
  }
  return dir;
}

std::vector<pid_t> cgroupProcesses(const std::string& path) {
  std::vector<pid_t> pids;
  collectProcesses(path, kMaxDepth, pids);
  return pids;
}

ProcessCgroups ProcessCgroups::own() {
  ProcessCgroups self;
  if (auto mounts = readFile("/proc/self/mountinfo")) self.mountinfo = std::move(*mounts);
  if (auto own = readFile("/proc/self/cgroup")) self.cgroup = std::move(*own);
  return self;
}

Result<std::vector<V1Hierarchy>> enableLimitControllers(const std::string& base,
                                                        const std::string& dir,
                                                        const std::vector<std::string>& controllers,
                                                        const ProcessCgroups& self) {
  if (dir != base && !startsWith(dir, base + "/")) {
    return fail(Code::kInvalidArgument, "cgroup '" + dir + "' is not below '" + base + "'");
  }
  auto offered = readFile(base + "/cgroup.controllers");
  if (!offered) return fail(Code::kFailedPrecondition, offered.error().message);
  const std::vector<std::string> have = words(*offered);
  std::vector<std::string> in_v2, missing, why;
  std::vector<V1Hierarchy> in_v1;
  for (const std::string& controller : controllers) {
    if (contains(have, controller)) {
      in_v2.push_back(controller);
      continue;
    }
    V1Found found = findV1(controller, self);
    if (!found.dir.empty()) {
      in_v1.push_back({controller, found.dir});
    } else {
      missing.push_back(controller);
      if (!contains(why, found.why)) why.push_back(found.why);
    }
  }
  if (!missing.empty()) {
    const bool permission = std::any_of(why.begin(), why.end(), [](const std::string& w) {
      return w.find("not writable") != std::string::npos;
    });
    return fail(permission ? Code::kPermissionDenied : Code::kFailedPrecondition,
                "cgroup '" + base + "' has no " + join(missing, " and ") +
                    " controller (it offers " +
                    (have.empty() ? std::string("none") : join(have, ", ")) + "), and " +
                    join(why, "; ") +
                    (permission ? "" : ": the controller was not delegated"));
  }
  std::vector<std::string> dirs = {base};
  for (size_t at = base.size(); at < dir.size();) {
    size_t next = dir.find('/', at + 1);
    if (next == std::string::npos) next = dir.size();
    dirs.push_back(dir.substr(0, next));
    at = next;
  }
  for (const std::string& d : in_v2.empty() ? std::vector<std::string>{} : dirs) {
    UniqueFd fd(::open(d.c_str(), O_DIRECTORY | O_RDONLY | O_CLOEXEC));
    if (!fd.valid()) return failErrno("open cgroup '" + d + "'");
    for (const std::string& controller : in_v2) {
      int err = writeCgroupFile(fd.get(), "cgroup.subtree_control", "+" + controller);
      if (err == 0) continue;
      std::string what = "enable the " + controller + " controller in '" + d +
                         "/cgroup.subtree_control'";
      if (err == EBUSY) {
        return fail(Code::kFailedPrecondition,
                    "cgroup '" + d +
                        "' holds processes of its own, and cgroup v2 gives controllers only to "
                        "cgroups whose parent holds none: set COHORT_CGROUP_ROOT to an empty "
                        "cgroup delegated to cohort");
      }
      if (err == EACCES || err == EPERM || err == EROFS) {
        return fail(Code::kPermissionDenied, what + ": " + std::strerror(err) +
                                                 " (the cgroup is not delegated to this user)");
      }
      return failErrno(what, err);
    }
  }
  return in_v1;
}

namespace {

// The parts of a cgroup's name below its parent. Errors: kInvalidArgument for an empty one or
// one that leaves the parent.
Result<std::vector<std::string>> nameParts(const std::string& relative) {
  std::vector<std::string> parts;
  for (const std::string& part : split(relative, '/')) {
    if (part.empty()) continue;
    if (part == "." || part == "..") {
      return fail(Code::kInvalidArgument, "cgroup name '" + relative + "' leaves its parent");
    }
    parts.push_back(part);
  }
  if (parts.empty()) return fail(Code::kInvalidArgument, "empty cgroup name");
  return parts;
}

// Makes `base`/`parts` and the missing directories between. Returns its path.
Result<std::string> makeCgroupDir(const std::string& base, const std::vector<std::string>& parts) {
  // Another agent may remove a shared parent ("cohort") the moment it is empty: start again.
  for (int attempt = 0; attempt < 20; ++attempt) {
    std::string path = base;
    bool again = false;
    for (size_t i = 0; i < parts.size() && !again; ++i) {
      path += "/" + parts[i];
      if (::mkdir(path.c_str(), 0755) == 0) continue;
      int err = errno;
      if (err == EEXIST && i + 1 < parts.size()) continue;
      if (err == EEXIST) return fail(Code::kAlreadyExists, "cgroup '" + path + "' exists");
      if (err == ENOENT && i > 0) {
        again = true;
      } else if (err == EACCES || err == EPERM || err == EROFS) {
        return fail(Code::kPermissionDenied,
                    "create cgroup '" + path + "': " + std::strerror(err));
      } else {
        return failErrno("create cgroup '" + path + "'", err);
      }
    }
    if (!again) return path;
  }
  return fail(Code::kIo, "create cgroup '" + base + "/" + join(parts, "/") + "': raced");
}

}  // namespace

Result<Cgroup> Cgroup::create(const std::string& base, const std::string& relative) {
  COHORT_ASSIGN(std::vector<std::string> parts, nameParts(relative));
  Cgroup cgroup;
  COHORT_ASSIGN(cgroup.path_, makeCgroupDir(base, parts));
  cgroup.relative_ = join(parts, "/");
  cgroup.parents_ = static_cast<int>(parts.size()) - 1;
  cgroup.dir_.reset(::open(cgroup.path_.c_str(), O_DIRECTORY | O_RDONLY | O_CLOEXEC));
  if (!cgroup.dir_.valid()) {
    auto error = failErrno("open cgroup '" + cgroup.path_ + "'");
    (void)cgroup.remove();
    return error;
  }
  return cgroup;
}

Result<void> Cgroup::mirrorIn(const std::vector<V1Hierarchy>& v1) {
  const std::vector<std::string> parts = split(relative_, '/');
  for (const V1Hierarchy& hierarchy : v1) {
    // A name that is there already is another cgroup's: the watchdog's lines and remove() would
    // then take it for ours. (It may be one this process made and could not yet remove.)
    COHORT_ASSIGN(std::string path, makeCgroupDir(hierarchy.dir, parts));
    Mirror mirror{hierarchy.controller, path, UniqueFd()};
    mirror.dir.reset(::open(path.c_str(), O_DIRECTORY | O_RDONLY | O_CLOEXEC));
    if (!mirror.dir.valid()) {
      auto error = failErrno("open cgroup '" + path + "'");
      (void)removeCgroup(path, parents_);
      return error;
    }
    mirrors_.push_back(std::move(mirror));
  }
  return {};
}

Result<Cgroup> Cgroup::child(const std::string& name) const {
  COHORT_ASSIGN(std::vector<std::string> parts, nameParts(name));
  Cgroup made;
  COHORT_ASSIGN(made.path_, makeCgroupDir(path_, parts));
  made.relative_ = relative_ + "/" + join(parts, "/");
  made.parents_ = static_cast<int>(parts.size()) - 1;
  made.dir_.reset(::open(made.path_.c_str(), O_DIRECTORY | O_RDONLY | O_CLOEXEC));
  if (!made.dir_.valid()) {
    auto error = failErrno("open cgroup '" + made.path_ + "'");
    (void)made.remove();
    return error;
  }
  for (const Mirror& mirror : mirrors_) {
    auto path = makeCgroupDir(mirror.path, parts);
    if (!path) {
      (void)made.remove();
      return tl::unexpected(path.error());
    }
    Mirror below{mirror.controller, *path, UniqueFd()};
    below.dir.reset(::open(path->c_str(), O_DIRECTORY | O_RDONLY | O_CLOEXEC));
    made.mirrors_.push_back(std::move(below));
    if (!made.mirrors_.back().dir.valid()) {
      auto error = failErrno("open cgroup '" + *path + "'");
      (void)made.remove();
      return error;
    }
  }
  return made;
}

Cgroup::Cgroup(Cgroup&& other) noexcept
    : path_(std::exchange(other.path_, std::string())),
      relative_(std::move(other.relative_)),
      dir_(std::move(other.dir_)),
      mirrors_(std::exchange(other.mirrors_, {})),
      parents_(other.parents_),
      kills_(other.kills_) {}

Cgroup& Cgroup::operator=(Cgroup&& other) noexcept {
  if (this != &other) {
    if (!path_.empty()) (void)remove();
    path_ = std::exchange(other.path_, std::string());
    relative_ = std::move(other.relative_);
    dir_ = std::move(other.dir_);
    mirrors_ = std::exchange(other.mirrors_, {});
    parents_ = other.parents_;
    kills_ = other.kills_;
  }
  return *this;
}

Cgroup::~Cgroup() {
  if (!path_.empty()) (void)remove();
}

std::vector<int> Cgroup::v1Fds() const {
  std::vector<int> fds;
  for (const Mirror& mirror : mirrors_) fds.push_back(mirror.dir.get());
  return fds;
}

std::vector<std::string> Cgroup::paths() const {
  std::vector<std::string> out = {path_};
  for (const Mirror& mirror : mirrors_) out.push_back(mirror.path);
  return out;
}

const Cgroup::Mirror* Cgroup::mirrorOf(const char* controller) const {
  for (const Mirror& mirror : mirrors_) {
    if (mirror.controller == controller) return &mirror;
  }
  return nullptr;
}

Result<void> Cgroup::adopt(pid_t pid) const {
  const std::string text = std::to_string(pid);
  // The mirrors first: the cgroup v2 one is what kills it, and it is there once it is anywhere.
  std::vector<std::pair<int, std::string>> dirs;
  for (const Mirror& mirror : mirrors_) dirs.emplace_back(mirror.dir.get(), mirror.path);
  dirs.emplace_back(dir_.get(), path_);
  for (const auto& [fd, path] : dirs) {
    UniqueFd procs(::openat(fd, "cgroup.procs", O_WRONLY | O_CLOEXEC));
    if (!procs.valid()) return failErrno("open '" + path + "/cgroup.procs'");
    if (::write(procs.get(), text.data(), text.size()) < 0) {
      return failErrno("move process " + text + " into '" + path + "'");
    }
  }
  return {};
}

Result<void> Cgroup::setLimits(const CgroupLimits& limits) const {
  auto set = [](int dir, const std::string& path, const char* name,
                const std::string& value) -> Result<void> {
    if (int err = writeCgroupFile(dir, name, value); err != 0) {
      return failErrno("write '" + value + "' to '" + path + "/" + name + "'", err);
    }
    return {};
  };
  auto has = [](int dir, const char* name) { return ::faccessat(dir, name, F_OK, 0) == 0; };
  if (limits.memory_bytes > 0) {
    const std::string bytes = std::to_string(limits.memory_bytes);
    if (const Mirror* v1 = mirrorOf("memory")) {
      const int dir = v1->dir.get();
      COHORT_TRY(set(dir, v1->path, "memory.limit_in_bytes", bytes));
      // Memory and swap together (with swap accounting): the same, so swap takes nothing.
      if (has(dir, "memory.memsw.limit_in_bytes")) {
        COHORT_TRY(set(dir, v1->path, "memory.memsw.limit_in_bytes", bytes));
      }
    } else {
      COHORT_TRY(set(dir_.get(), path_, "memory.max", bytes));
      // Without swap accounting (or without swap) there is no such file: nothing to close.
      if (has(dir_.get(), "memory.swap.max")) {
        COHORT_TRY(set(dir_.get(), path_, "memory.swap.max", "0"));
      }
      // A rank is its processes together: the out-of-memory killer ends all of them, so that
      // the rank dies of it rather than limping on without the DataLoader worker it chose.
      if (has(dir_.get(), "memory.oom.group")) {
        COHORT_TRY(set(dir_.get(), path_, "memory.oom.group", "1"));
      }
    }
  }
  const Mirror* cpu = mirrorOf("cpu");
  const int cpu_dir = cpu ? cpu->dir.get() : dir_.get();
  const std::string& cpu_path = cpu ? cpu->path : path_;
  if (limits.cpus > 0) {
    constexpr int64_t kPeriodUs = 100000;
    const std::string quota = std::to_string(
        std::max<int64_t>(1000, static_cast<int64_t>(limits.cpus * kPeriodUs + 0.5)));
    if (cpu) {
      COHORT_TRY(set(cpu_dir, cpu_path, "cpu.cfs_period_us", std::to_string(kPeriodUs)));
      COHORT_TRY(set(cpu_dir, cpu_path, "cpu.cfs_quota_us", quota));
    } else {
      COHORT_TRY(set(cpu_dir, cpu_path, "cpu.max", quota + " " + std::to_string(kPeriodUs)));
    }
  }
  if (limits.cpu_share > 0) {
    COHORT_TRY(set(cpu_dir, cpu_path, cpu ? "cpu.shares" : "cpu.weight",
                   std::to_string(cpu ? cpuShares(limits.cpu_share) : cpuWeight(limits.cpu_share))));
  }
  if (limits.pids > 0) {
    const Mirror* v1 = mirrorOf("pids");
    COHORT_TRY(set(v1 ? v1->dir.get() : dir_.get(), v1 ? v1->path : path_, "pids.max",
                   std::to_string(limits.pids)));
  }
  return {};
}

Result<int64_t> Cgroup::oomKills() const {
  const Mirror* v1 = mirrorOf("memory");
  const std::string path = (v1 ? v1->path : path_) + (v1 ? "/memory.oom_control" : "/memory.events");
  UniqueFd events(::openat(v1 ? v1->dir.get() : dir_.get(),
                           v1 ? "memory.oom_control" : "memory.events", O_RDONLY | O_CLOEXEC));
  if (!events.valid()) {
    if (errno == ENOENT) return int64_t{0};
    return failErrno("open '" + path + "'");
  }
  char buf[512];
  ssize_t n = ::pread(events.get(), buf, sizeof buf - 1, 0);
  if (n < 0) return failErrno("read '" + path + "'");
  buf[n] = 0;
  for (const std::string& line : split(buf, '\n')) {
    if (startsWith(line, "oom_kill ")) return std::strtoll(line.c_str() + 9, nullptr, 10);
  }
  return int64_t{0};
}

Result<UniqueFd> Cgroup::oomNotifier() const {
  const Mirror* v1 = mirrorOf("memory");
  if (!v1) return UniqueFd();
  UniqueFd event(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!event.valid()) return failErrno("eventfd");
  UniqueFd oom(::openat(v1->dir.get(), "memory.oom_control", O_RDONLY | O_CLOEXEC));
  if (!oom.valid()) return failErrno("open '" + v1->path + "/memory.oom_control'");
  const std::string line = std::to_string(event.get()) + " " + std::to_string(oom.get());
  if (int err = writeCgroupFile(v1->dir.get(), "cgroup.event_control", line); err != 0) {
    return failErrno("write to '" + v1->path + "/cgroup.event_control'", err);
  }
  return event;
}

Result<void> Cgroup::shareParent() const {
  const Mirror* v1 = mirrorOf("cpu");
  const std::string parent = parentOf(v1 ? v1->path : path_);
  const char* file = v1 ? "cpu.shares" : "cpu.weight";
  UniqueFd dir(::open(parent.c_str(), O_DIRECTORY | O_RDONLY | O_CLOEXEC));
  if (!dir.valid()) return failErrno("open cgroup '" + parent + "'");
  if (::faccessat(dir.get(), file, F_OK, 0) != 0) return {};  // no cpu controller there
  auto sum = [&] {
    int64_t total = 0;
    for (const std::string& child : childCgroups(parent)) {
      if (auto text = readFile(child + "/" + file)) total += std::strtoll(text->c_str(), nullptr, 10);
    }
    return total;
  };
  // The kernel's bounds: cpu.weight 1 to 10000, cpu.shares 2 to 262144.
  auto bounded = [&](int64_t total) {
    return v1 ? std::clamp<int64_t>(total, 2, 262144) : std::clamp<int64_t>(total, 1, 10000);
  };
  int64_t wrote = -1;
  for (int round = 0; round < 20; ++round) {
    const int64_t total = bounded(sum());
    if (total == wrote) return {};
    if (int err = writeCgroupFile(dir.get(), file, std::to_string(total)); err != 0) {
      return failErrno("write '" + std::to_string(total) + "' to '" + parent + "/" + file + "'",
                       err);
    }
    wrote = total;
  }
  return {};
}

Result<void> Cgroup::killAll(Millis deadline) {
  if (path_.empty()) return {};
  COHORT_ASSIGN(bool killed, killCgroup(path_, deadline));
  if (killed) ++kills_;
  return {};
}

Result<void> Cgroup::remove(Millis deadline) {
  if (path_.empty()) return {};
  dir_.reset();
  std::vector<std::string> paths = {std::exchange(path_, std::string())};
  for (Mirror& mirror : std::exchange(mirrors_, {})) paths.push_back(mirror.path);
  // The cgroup v2 one kills them all; a mirror only holds processes it holds too.
  Result<void> first;
  for (const std::string& path : paths) {
    auto killed = killCgroup(path, deadline);
    Result<void> done = killed ? removeCgroup(path, parents_) : tl::unexpected(killed.error());
    if (!done && first) first = done;
  }
  return first;
}

Result<bool> killCgroup(const std::string& path, Millis deadline) {
  auto until = std::chrono::steady_clock::now() + deadline;
  UniqueFd events(::open((path + "/cgroup.events").c_str(), O_RDONLY | O_CLOEXEC));
  if (!events.valid() && errno == ENOENT && isDirectory(path)) {
    // A cgroup v1 one (a mirror): no cgroup.kill and no "populated" to wait on. Kill what is
    // listed until nothing is (an exiting process leaves the list before it is a zombie); a
    // process may fork while we look, and the pids limit keeps that short.
    bool any = false;
    for (;;) {
      std::vector<pid_t> pids = cgroupProcesses(path);
      if (pids.empty()) return any;
      any = true;
      for (pid_t pid : pids) ::kill(pid, SIGKILL);
      if (millisLeft(until) == 0) {
        return fail(Code::kDeadlineExceeded, "cgroup '" + path + "' still has processes after " +
                                                 std::to_string(deadline.count()) + " ms");
      }
      ::poll(nullptr, 0, 2);
    }
  }
  if (!events.valid()) {
    if (errno == ENOENT) return false;  // no such cgroup: nothing runs in it
    return failErrno("open '" + path + "/cgroup.events'");
  }
  // Nothing in it (the ranks exited and left nothing behind): no kill, which costs the kernel a
  // millisecond or two even then. Nothing can fork into an empty cgroup.
  if (populated(events.get()) == 0) return false;
  bool have_kill = false;
  {
    UniqueFd kill(::open((path + "/cgroup.kill").c_str(), O_WRONLY | O_CLOEXEC));
    if (kill.valid()) {
      if (::write(kill.get(), "1", 1) != 1) return failErrno("kill cgroup '" + path + "'");
      have_kill = true;
    } else if (errno != ENOENT) {
      return failErrno("open '" + path + "/cgroup.kill'");
    }
  }
  for (;;) {
    // Without cgroup.kill (kernels before 5.14) kill what is listed, again and again: a process
    // may fork while we look.
    if (!have_kill) {
      for (pid_t pid : cgroupProcesses(path)) ::kill(pid, SIGKILL);
    }
    int state = populated(events.get());
    if (state == 0) return true;
    if (state < 0) return failErrno("read '" + path + "/cgroup.events'");
    int64_t left = millisLeft(until);
    if (left == 0) {
      return fail(Code::kDeadlineExceeded, "cgroup '" + path + "' still has processes after " +
                                               std::to_string(deadline.count()) + " ms");
    }
    // cgroup.events wakes a poller with POLLPRI when "populated" changes.
    pollfd p{events.get(), POLLPRI, 0};
    ::poll(&p, 1, static_cast<int>(have_kill ? left : std::min<int64_t>(left, 10)));
  }
}

Result<void> removeCgroup(const std::string& path, int parents) {
  removeChildCgroups(path, kMaxDepth);
  // A process that was just killed may keep the cgroup busy for a moment after "populated 0".
  for (int attempt = 0; ::rmdir(path.c_str()) != 0; ++attempt) {
    if (errno == ENOENT) break;
    if (errno != EBUSY || attempt == 200) return failErrno("remove cgroup '" + path + "'");
    ::poll(nullptr, 0, 5);
  }
  std::string dir = path;
  for (int i = 0; i < parents; ++i) {
    dir = parentOf(dir);
    if (::rmdir(dir.c_str()) != 0) break;  // not empty (another node's cgroup), or gone
  }
  return {};
}

Result<CgroupWatchdog> CgroupWatchdog::start() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) < 0) return failErrno("pipe2");
  UniqueFd read_end(fds[0]);
  CgroupWatchdog watchdog;
  watchdog.pipe_.reset(fds[1]);
  pid_t pid = ::fork();
  if (pid < 0) return failErrno("fork the cgroup watchdog");
  if (pid == 0) runWatchdog(read_end.get());
  watchdog.pid_ = pid;
  watchdog.pidfd_.reset(openPidfd(pid));  // our child, not reaped: the pid is still its
  return watchdog;
}

CgroupWatchdog CgroupWatchdog::adopt(UniqueFd fd) {
  CgroupWatchdog watchdog;
  watchdog.pipe_ = std::move(fd);
  return watchdog;
}

Result<void> CgroupWatchdog::watch(const Cgroup& cgroup) {
  if (!pipe_.valid()) return fail(Code::kFailedPrecondition, "no cgroup watchdog");
  // One line for each directory (the cgroup v2 one first: killing it kills what the mirrors
  // hold). Lines are whole in the pipe (shorter than PIPE_BUF each).
  std::string lines;
  for (const std::string& path : cgroup.paths()) {
    lines += std::to_string(::getpid()) + " " + std::to_string(cgroup.parents()) + " " + path +
             "\n";
  }
  auto written = writeAll(pipe_.get(), lines);
  if (!written) return withContext(written.error(), "tell the cgroup watchdog");
  return {};
}

void CgroupWatchdog::retire() {
  if (pidfd_.valid()) {
    pipe_.reset();
    if (::syscall(SYS_pidfd_send_signal, pidfd_.get(), SIGKILL, nullptr, 0) == 0) {
      (void)proc::reap(pidfd_.get());
    }
    pidfd_.reset();
    pid_ = -1;
  } else if (pipe_.valid()) {
    (void)writeAll(pipe_.get(), std::to_string(::getpid()) + " -\n");
    pipe_.reset();
  }
}

void CgroupWatchdog::detach() { pipe_.reset(); }

void CgroupWatchdog::reap(Millis deadline) {
  if (!pidfd_.valid()) return;
  pollfd p{pidfd_.get(), POLLIN, 0};
  if (::poll(&p, 1, static_cast<int>(deadline.count())) <= 0) {
    (void)::syscall(SYS_pidfd_send_signal, pidfd_.get(), SIGKILL, nullptr, 0);
  }
  (void)proc::reap(pidfd_.get());
  pidfd_.reset();
  pid_ = -1;
}

}  // namespace cohort::proc
