#include "backends/ssh.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>

#include "job/layout.h"
#include "storage/archive.h"
#include "util/sha256.h"
#include "util/text.h"

extern char** environ;

namespace cohort::backends {

namespace {

// How long a host may take to answer the probe, and to take cohort's binary.
constexpr Millis kProbeTimeout{30000};
constexpr Millis kUploadTimeout{300000};

// Options cohort adds after the user's (ssh takes the first value given for each, so the
// user's --ssh words win): never ask for a password (nobody is there to type it), give up on a
// host that does not answer, and notice a connection that died.
const std::vector<std::string> kSshOptions = {
    "-T", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "-o", "ServerAliveInterval=5",
    "-o", "ServerAliveCountMax=3"};

UniqueFd memoryFile(const char* name) { return UniqueFd(::memfd_create(name, MFD_CLOEXEC)); }

std::string readAll(int fd) {
  struct stat st{};
  if (fd < 0 || ::fstat(fd, &st) != 0 || st.st_size <= 0) return "";
  std::string text(static_cast<size_t>(st.st_size), '\0');
  const ssize_t n = ::pread(fd, text.data(), text.size(), 0);
  text.resize(n > 0 ? static_cast<size_t>(n) : 0);
  return text;
}

Result<void> writeAll(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return failErrno("write");
    data.remove_prefix(static_cast<size_t>(n));
  }
  return {};
}

// The environment ssh gets: the user's (its agent socket, HOME), never the job's secret.
std::vector<std::string> sshEnvironment() {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    if (!startsWith(*e, "COHORT_JOB_SECRET=")) env.emplace_back(*e);
  }
  return env;
}

// `ssh [user's words] [cohort's options] HOST sh -c 'SCRIPT'`.
std::vector<std::string> sshArgv(const SshOptions& o, const std::string& host,
                                 const std::string& script) {
  std::vector<std::string> argv = o.ssh;
  argv.insert(argv.end(), kSshOptions.begin(), kSshOptions.end());
  argv.push_back(host);
  argv.push_back("sh -c " + shellQuote(script));
  return argv;
}

// One script run on a host, captured.
struct Run {
  proc::Child child;
  UniqueFd out, err;
  std::optional<proc::ExitStatus> status;
  std::string failed;  // it could not be started
};

// Runs `script` on each of `hosts` at once (stdin from `stdin_fds[i]`, -1: none) and waits up
// to `timeout` for all of them; a run still going then is killed.
std::vector<Run> runOnHosts(const SshOptions& o, const std::vector<std::string>& hosts,
                            const std::vector<std::string>& scripts,
                            const std::vector<int>& stdin_fds, Millis timeout) {
  std::vector<Run> runs(hosts.size());
  const std::vector<std::string> env = sshEnvironment();
  for (size_t i = 0; i < hosts.size(); ++i) {
    Run& r = runs[i];
    r.out = memoryFile("cohort-ssh-out");
    r.err = memoryFile("cohort-ssh-err");
    proc::SpawnRequest req;
    req.argv = sshArgv(o, hosts[i], scripts[i]);
    req.env = env;
    req.stdin_fd = stdin_fds.empty() ? -1 : stdin_fds[i];
    req.stdout_fd = r.out.get();
    req.stderr_fd = r.err.get();
    req.death_signal = SIGKILL;
    auto child = proc::spawn(req);
    if (!child) {
      r.failed = child.error().message;
      continue;
    }
    r.child = std::move(*child);
  }
  const auto until = std::chrono::steady_clock::now() + timeout;
  for (Run& r : runs) {
    if (!r.child.pidfd.valid()) continue;
    const auto left = std::chrono::duration_cast<Millis>(until - std::chrono::steady_clock::now());
    pollfd p{r.child.pidfd.get(), POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(std::max<int64_t>(left.count(), 0))) <= 0) {
      ::kill(r.child.pid, SIGKILL);
      r.failed = "no answer in " + formatDuration(timeout);
    }
    auto status = proc::reap(r.child.pidfd.get());
    r.child.pidfd.reset();
    if (status && r.failed.empty()) r.status = *status;
  }
  return runs;
}

bool isIpv4(const std::string& text) {
  in_addr a{};
  return ::inet_pton(AF_INET, text.c_str(), &a) == 1;
}

std::string thisMachine() {
  utsname u{};
  return ::uname(&u) == 0 ? u.machine : "";
}

}  // namespace

std::vector<Result<HostCapacity>> askCapacity(const std::vector<SshHost>& hosts,
                                              const std::vector<std::string>& ssh) {
  SshOptions o;
  o.ssh = ssh;
  std::vector<std::string> names;
  for (const SshHost& h : hosts) names.push_back(h.name);
  std::vector<Run> runs = runOnHosts(o, names, std::vector<std::string>(names.size(), capacityScript()),
                                     {}, kProbeTimeout);
  std::vector<Result<HostCapacity>> answers;
  for (size_t i = 0; i < hosts.size(); ++i) {
    Run& r = runs[i];
    if (!r.status) {
      answers.push_back(fail(Code::kUnavailable, "host " + hosts[i].name + ": " +
                                                     (r.failed.empty() ? "ssh failed" : r.failed)));
    } else if (r.status->shellCode() != 0) {
      answers.push_back(fail(Code::kUnavailable,
                             describeHostExit(hosts[i].name, r.status->shellCode(),
                                              std::string(trim(readAll(r.err.get()))))));
    } else {
      auto answer = parseCapacity(readAll(r.out.get()), hosts[i].slots);
      if (!answer) answer = withContext(answer.error(), "host " + hosts[i].name);
      answers.push_back(std::move(answer));
    }
  }
  return answers;
}

Result<std::string> fileSha256(const std::string& path) {
  COHORT_ASSIGN(std::string bytes, readFile(path));
  const Sha256Digest digest = sha256(bytes);
  return hexEncode(digest.data(), digest.size());
}

Result<std::string> binarySha256(const std::string& exe) {
  struct stat st{};
  if (::stat(exe.c_str(), &st) != 0) return failErrno("stat '" + exe + "'");
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  const std::string dir = xdg && *xdg ? std::string(xdg) + "/cohort"
                          : home      ? std::string(home) + "/.cache/cohort"
                                      : "";
  const std::string key = exe + " " + std::to_string(st.st_dev) + " " +
                          std::to_string(st.st_ino) + " " + std::to_string(st.st_size) + " " +
                          std::to_string(st.st_mtim.tv_sec) + "." +
                          std::to_string(st.st_mtim.tv_nsec) + " " +
                          std::to_string(st.st_ctim.tv_sec) + "." + std::to_string(st.st_ctim.tv_nsec);
  const std::string file = dir + "/self-sha256";
  if (!dir.empty()) {
    if (auto known = readFile(file); known && startsWith(*known, key + " ")) {
      std::string hash(trim(known->substr(key.size() + 1)));
      if (hash.size() == 64 && hash.find_first_not_of("0123456789abcdef") == std::string::npos) {
        return hash;
      }
    }
  }
  COHORT_ASSIGN(std::string hash, fileSha256(exe));
  if (!dir.empty() && makeDirs(dir)) (void)writeFileAtomic(file, key + " " + hash + "\n", false);
  return hash;
}

Result<void> SshLauncher::launch(int nodes, const agent::Dial& dial) {
  if (nodes > static_cast<int>(options_.hosts.size())) {
    return fail(Code::kInternal, "the plan has more nodes than hosts");
  }
  COHORT_ASSIGN(const std::string hash, binarySha256(options_.cohort_exe));
  std::vector<std::string> hosts;
  for (int n = 0; n < nodes; ++n) hosts.push_back(options_.hosts[n].name);

  // Every host at once: can it be reached, has it this cohort, has it the job's Python.
  const std::string probe = probeScript(hash, options_.python, options_.python_args);
  std::vector<Run> probes =
      runOnHosts(options_, hosts, std::vector<std::string>(hosts.size(), probe), {}, kProbeTimeout);
  std::vector<std::string> problems;
  std::vector<HostProbe> found(hosts.size());
  std::vector<std::string> missing;  // hosts that get cohort copied
  const std::string machine = thisMachine();
  for (size_t i = 0; i < hosts.size(); ++i) {
    Run& r = probes[i];
    const std::string name = hosts[i] + " (node " + std::to_string(i) + ")";
    if (!r.status) {
      problems.push_back("host " + name + ": " + (r.failed.empty() ? "ssh failed" : r.failed));
      continue;
    }
    if (r.status->shellCode() != 0) {
      problems.push_back(describeHostExit(name, r.status->shellCode(), readAll(r.err.get())));
      continue;
    }
    auto parsed = parseProbe(readAll(r.out.get()));
    if (!parsed) {
      problems.push_back("host " + name + ": " + parsed.error().message);
      continue;
    }
    found[i] = *parsed;
    if (!machine.empty() && !parsed->machine.empty() && parsed->machine != machine) {
      problems.push_back("host " + name + ": it is a " + parsed->machine + " machine and this cohort is built for " + machine);
      continue;
    }
    if (!options_.python.empty() && parsed->python.empty()) {
      problems.push_back("host " + name + ": no '" + options_.python +
                         "' on its PATH (as ssh runs commands there): install Python there, or "
                         "name the interpreter's full path in the command");
      continue;
    }
    if (!options_.python.empty() && options_.explain && !parsed->python_answer.empty()) {
      const std::string why = options_.explain(parsed->python_answer);
      if (!why.empty()) {
        problems.push_back("host " + name + ": " + why);
        continue;
      }
    }
    if (dial.addr == "0.0.0.0" && !isIpv4(parsed->from)) {
      problems.push_back("host " + name + ": it was reached over '" + parsed->from +
                         "', not IPv4: set the job's network (network: {cidr: NET}) to the "
                         "addresses the hosts reach this machine at");
      continue;
    }
    if (!parsed->has_binary) missing.push_back(hosts[i]);
  }
  if (!problems.empty()) return fail(Code::kUnavailable, join(problems, "\n"));

  if (!missing.empty()) {
    if (options_.progress) {
      std::fprintf(stderr, "cohort: copying cohort to %s (once; kept in ~/.cache/cohort/bin there)\n",
                   join(missing, ", ").c_str());
    }
    std::vector<UniqueFd> binaries;
    std::vector<int> fds;
    for (size_t i = 0; i < missing.size(); ++i) {
      binaries.emplace_back(::open(options_.cohort_exe.c_str(), O_RDONLY | O_CLOEXEC));
      if (!binaries.back().valid()) return failErrno("open '" + options_.cohort_exe + "'");
      fds.push_back(binaries.back().get());
    }
    std::vector<Run> uploads =
        runOnHosts(options_, missing, std::vector<std::string>(missing.size(), uploadScript(hash)),
                   fds, kUploadTimeout);
    for (size_t i = 0; i < missing.size(); ++i) {
      Run& r = uploads[i];
      if (!r.status || r.status->shellCode() != 0) {
        const std::string err = r.failed.empty() ? readAll(r.err.get()) : r.failed;
        problems.push_back("host " + missing[i] + ": cohort could not be copied there: " +
                           std::string(trim(err)));
      }
    }
    if (!problems.empty()) return fail(Code::kUnavailable, join(problems, "\n"));
  }

  // The agents. Each reads the secret, then the snapshot, on its stdin: a file of memory that
  // only this process and its ssh can read.
  UniqueFd input = memoryFile("cohort-ssh-in");
  if (!input.valid()) return failErrno("memfd_create");
  COHORT_TRY(writeAll(input.get(), dial.secret + "\n"));
  COHORT_TRY(writeAll(input.get(), options_.snapshot));
  const std::string input_path = "/proc/self/fd/" + std::to_string(input.get());
  const std::vector<std::string> env = sshEnvironment();
  for (int n = 0; n < nodes; ++n) {
    Session s;
    s.out = memoryFile("cohort-ssh-out");
    s.err = memoryFile("cohort-ssh-err");
    // Each agent reads the input from its start: an open file description of its own.
    UniqueFd in(::open(input_path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!in.valid() || !s.out.valid() || !s.err.valid()) return failErrno("memfd");
    AgentScript a;
    a.hash = hash;
    a.job_dir = plan_.job_dir;
    // The address the job's network setting chose, else the one this host reached us from.
    const std::string addr = dial.addr != "0.0.0.0" ? dial.addr : found[n].from;
    a.coordinator = addr + ":" + std::to_string(dial.port);
    a.node = n;
    a.interface = network_.interface;
    a.cidr = network_.cidr;
    a.snapshot = !options_.snapshot.empty();
    proc::SpawnRequest req;
    req.argv = sshArgv(options_, hosts[n], agentScript(a));
    req.env = env;
    req.stdin_fd = in.get();
    req.stdout_fd = s.out.get();
    req.stderr_fd = s.err.get();
    req.death_signal = SIGKILL;  // its host's agent then finds the coordinator gone
    auto child = proc::spawn(req);
    if (!child) return withContext(child.error(), "host " + hosts[n]);
    s.child = std::move(*child);
    sessions_.push_back(std::move(s));
  }
  if (options_.progress) {
    std::fprintf(stderr, "cohort: agents starting on %s over ssh\n", join(hosts, ", ").c_str());
  }
  return {};
}

std::string SshLauncher::errorsOf(Session& s) {
  std::string err = readAll(s.err.get());
  // The last lines say what went wrong.
  std::vector<std::string> lines = split(std::string(trim(err)), '\n');
  if (lines.size() > 4) lines.erase(lines.begin(), lines.end() - 4);
  return join(lines, "\n");
}

agent::LaunchStatus SshLauncher::status() {
  for (size_t n = 0; n < sessions_.size(); ++n) {
    Session& s = sessions_[n];
    if (s.code || !s.child.pidfd.valid()) continue;
    pollfd p{s.child.pidfd.get(), POLLIN, 0};
    if (::poll(&p, 1, 0) <= 0) continue;
    auto ended = proc::reap(s.child.pidfd.get());
    s.child.pidfd.reset();
    s.code = ended ? ended->shellCode() : 1;
    return {agent::LaunchStatus::Phase::kEnded,
            describeHostExit(options_.hosts[n].name + " (node " + std::to_string(n) + ")",
                             *s.code, errorsOf(s))};
  }
  return {};
}

void SshLauncher::abandon(int node) {
  if (node < 0 || static_cast<size_t>(node) >= sessions_.size()) return;
  Session& s = sessions_[node];
  if (s.child.pidfd.valid()) ::kill(s.child.pid, SIGKILL);
}

void SshLauncher::reap(Millis deadline) {
  if (reaped_) return;
  reaped_ = true;
  const auto until = std::chrono::steady_clock::now() + deadline;
  for (size_t n = 0; n < sessions_.size(); ++n) {
    Session& s = sessions_[n];
    if (s.child.pidfd.valid()) {
      const auto left =
          std::chrono::duration_cast<Millis>(until - std::chrono::steady_clock::now());
      pollfd p{s.child.pidfd.get(), POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(std::max<int64_t>(left.count(), 0))) <= 0) {
        ::kill(s.child.pid, SIGKILL);
      }
      auto ended = proc::reap(s.child.pidfd.get());
      s.child.pidfd.reset();
      s.code = ended ? ended->shellCode() : 1;
    }
    bringOutputsBack(static_cast<int>(n), s);
  }
}

void SshLauncher::bringOutputsBack(int node, Session& s) {
  const std::string archive = readAll(s.out.get());
  s.out.reset();
  if (archive.empty()) return;
  const job::Layout layout(plan_.job_dir);
  const std::string staging = layout.dir() + "/.output-node" + std::to_string(node);
  auto extracted = storage::extractArchive(archive, staging, storage::ArchiveLimits{});
  if (!extracted) {
    std::fprintf(stderr, "cohort: host %s's output/ could not be brought back: %s\n",
                 options_.hosts[node].name.c_str(), extracted.error().message.c_str());
    return;
  }
  // Each entry moves into output/, never over one that is there (another host's of that name
  // is kept beside it, as NAME.node<N>).
  UniqueFd from(::open(staging.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  UniqueFd to(::open(layout.outputDir().c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  auto listing = storage::listTree(staging, storage::IgnoreRules::fromText(""), {});
  if (from.valid() && to.valid() && listing) {
    for (const storage::TreeEntry& e : listing->entries) {
      if (e.rel.find('/') != std::string::npos) continue;  // top-level entries move whole
      if (::renameat2(from.get(), e.rel.c_str(), to.get(), e.rel.c_str(), RENAME_NOREPLACE) == 0) {
        continue;
      }
      const std::string beside = e.rel + ".node" + std::to_string(node);
      if (::renameat2(from.get(), e.rel.c_str(), to.get(), beside.c_str(), RENAME_NOREPLACE) == 0) {
        std::fprintf(stderr, "cohort: output/%s came from more than one host: host %s's is output/%s\n",
                     e.rel.c_str(), options_.hosts[node].name.c_str(), beside.c_str());
      }
    }
  }
  std::error_code ignored;
  std::filesystem::remove_all(staging, ignored);
}

}  // namespace cohort::backends
