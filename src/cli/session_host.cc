// `cohort session-host`: the program of a session's ranks (docs/sessions.md), which the server
// starts in place of a job's command (server/jobs.cc). It runs as the session's ranks do: as
// its account's identity, in the job's sandbox and network, in its environment. Rank 0 serves
// OpenSSH's sshd on its node's loopback (job/session.h), which its account reaches only through
// the server's tunnel, and JupyterLab beside it when the session asked for it (reached only
// through the server's proxy, server/jupyter_proxy.h, which adds the lab's token); every other
// rank holds its share of the allocation until the session stops.
//
// sshd runs without privileges: it may then log in only its own user, with public keys, which
// is what a session wants. It needs a passwd entry for that user, which an account's identity
// has not on the machine (a uid of a range of cohort's own): libnss_wrapper gives it one, from
// files in the node's own /tmp, for sshd and for everything the user runs in the session.
#include "cli/session_host.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "backends/local.h"
#include "job/session.h"
#include "util/fd.h"
#include "util/text.h"

extern char** environ;

namespace cohort::cli {

namespace {

constexpr const char* kSshd = "/usr/sbin/sshd";
constexpr const char* kNssWrapper = "/usr/lib/x86_64-linux-gnu/libnss_wrapper.so";

int refuse(const std::string& message) {
  std::fprintf(stderr, "cohort session: %s\n", message.c_str());
  return 1;
}

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// The host key as its OpenSSH file: `body` is the file's base64 on one line (spec::Session).
std::string privateKeyFile(const std::string& body) {
  std::string out = "-----BEGIN OPENSSH PRIVATE KEY-----\n";
  for (size_t at = 0; at < body.size(); at += 70) out += body.substr(at, 70) + "\n";
  return out + "-----END OPENSSH PRIVATE KEY-----\n";
}

// A variable of the rank that the user's shells in the session get too (sshd gives a login a
// fresh environment): the environment's PATH, the job's COHORT_* but its secrets. Not the
// session's own wiring (MASTER_ADDR, WORLD_SIZE): it runs no training, and a run started in it
// would inherit them.
bool passedOn(const std::string& name) {
  if (name == "COHORT_JOB_SECRET" || startsWith(name, "COHORT_SESSION_")) return false;
  return startsWith(name, "COHORT_") || name == "PATH" || name == "VIRTUAL_ENV" ||
         name == "PYTHONPATH" || name == "LD_LIBRARY_PATH" || name == "CUDA_VISIBLE_DEVICES" ||
         name == "TMPDIR" || startsWith(name, "NSS_WRAPPER_") || name == "LD_PRELOAD" ||
         startsWith(name, "PIP_") || name == "OMP_NUM_THREADS";
}

// What a distributed run started in the session needs (cohort run, cohort.run, %%cohort): the
// program this one is, first on PATH as `cohort` (a link in the session's own directory `dir`),
// and a data root in its home, removed with it; the ranks of such a run are then the user's
// children, in the session's sandbox, cgroup and network. Its Python threads default to the
// CPUs the session was given (COHORT_CPUS), not to the machine's.
void forRunsInSession(const std::string& dir, const std::string& home) {
  const std::string self = backends::selfExecutable();
  const std::string bin = dir + "/bin";
  ::mkdir(bin.c_str(), 0700);
  ::unlink((bin + "/cohort").c_str());
  if (!self.empty() && ::symlink(self.c_str(), (bin + "/cohort").c_str()) == 0) {
    const std::string path = env("PATH");
    ::setenv("PATH", (bin + (path.empty() ? "" : ":" + path)).c_str(), 1);
    ::setenv("COHORT_BIN", self.c_str(), 1);
  }
  ::setenv("COHORT_DATA_ROOT", (home + "/.cohort").c_str(), 1);
  const double cpus = std::atof(env("COHORT_CPUS").c_str());
  if (cpus >= 1 && env("OMP_NUM_THREADS").empty()) {
    ::setenv("OMP_NUM_THREADS", std::to_string(static_cast<int>(cpus)).c_str(), 1);
  }
}

// Waits for the session's stop (the rank's stop signal).
int holdUntilStopped() {
  sigset_t set;
  sigemptyset(&set);
  for (int s : {SIGTERM, SIGINT, SIGHUP}) sigaddset(&set, s);
  sigprocmask(SIG_BLOCK, &set, nullptr);
  int got = 0;
  sigwait(&set, &got);
  return 0;
}

// `argv` as a child (PATH searched), with the signals the parent blocks unblocked (and its
// stderr gone when `quiet`); -1 when it cannot be started.
pid_t spawn(const std::vector<std::string>& argv, const sigset_t& unblock, bool quiet = false) {
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  sigprocmask(SIG_UNBLOCK, &unblock, nullptr);
  if (quiet) {
    const int null = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (null >= 0) ::dup2(null, 2);
  }
  std::vector<char*> raw;
  for (const std::string& a : argv) raw.push_back(const_cast<char*>(a.c_str()));
  raw.push_back(nullptr);
  ::execvp(raw[0], raw.data());
  std::fprintf(stderr, "cohort session: cannot start %s\n", raw[0]);
  ::_exit(127);
}

// Whether the environment's python3 (first on PATH) imports jupyterlab.
bool hasJupyterLab() {
  sigset_t none;
  sigemptyset(&none);
  const pid_t pid = spawn({"python3", "-c", "import jupyterlab"}, none, true);
  if (pid < 0) return false;
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

// JupyterLab on the node's loopback, at the proxy's base URL, with the token only the server
// and the session know (in its environment, not on its command line). No browser, nothing
// fetched from outside (the session's network may have no way out).
std::vector<std::string> jupyterArgv(const std::string& home) {
  return {"python3", "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1",
          "--port=" + std::to_string(job::sessionPort("jupyter")), "--port-retries=0",
          "--ServerApp.base_url=" + job::jupyterBaseUrl(env("COHORT_JOB_ID")),
          "--ServerApp.root_dir=" + home, "--LabApp.news_url=None",
          "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
          "--LabApp.extension_manager=readonly"};
}

// The lab asks in its first minute whether to fetch Jupyter's news from the internet, which a
// session's network may not reach: its user settings say no, unless the user said otherwise.
void quietLab(const std::string& home) {
  const std::string dir = home + "/.jupyter/lab/user-settings/@jupyterlab/apputils-extension";
  const std::string file = dir + "/notification.jupyterlab-settings";
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (!ec && ::access(file.c_str(), F_OK) != 0) {
    (void)writeFileAtomic(file, "{\"fetchNews\": \"false\"}\n", false, 0600);
  }
}

// sshd and JupyterLab side by side until the session's stop, which ends both; either one's
// end ends the session, saying which.
int superviseBoth(const std::vector<std::string>& sshd, const std::vector<std::string>& lab) {
  sigset_t set;
  sigemptyset(&set);
  for (int s : {SIGTERM, SIGINT, SIGHUP, SIGCHLD}) sigaddset(&set, s);
  sigprocmask(SIG_BLOCK, &set, nullptr);
  const pid_t children[2] = {spawn(sshd, set), spawn(lab, set)};
  const char* names[2] = {"sshd", "jupyter lab"};
  if (children[0] < 0 || children[1] < 0) return refuse("cannot start sshd and jupyter lab");
  int code = 0;
  for (bool stopping = false; !stopping;) {
    int got = 0;
    sigwait(&set, &got);
    if (got != SIGCHLD) break;
    int status = 0;
    for (int i = 0; i < 2; ++i) {
      if (::waitpid(children[i], &status, WNOHANG) == children[i]) {
        std::fprintf(stderr, "cohort session: %s ended (%s %d): the session ends\n", names[i],
                     WIFEXITED(status) ? "exit" : "signal",
                     WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
        code = 1;
        stopping = true;
      }
    }
  }
  for (pid_t pid : children) ::kill(pid, SIGTERM);
  for (pid_t pid : children) {
    while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
  return code;
}

}  // namespace

int cmdSessionHost(int, char**) {
  if (env("COHORT_RANK") != "0") return holdUntilStopped();
  const std::string user = env("COHORT_SESSION_USER");
  const std::string authorized = env("COHORT_SESSION_AUTHORIZED_KEY");
  const std::string host_key = env("COHORT_SESSION_HOST_KEY");
  if (user.empty() || authorized.empty() || host_key.empty()) {
    return refuse("no keys: a session is started with cohort session start, which makes them");
  }
  for (const char* need : {kSshd, kNssWrapper}) {
    if (::access(need, R_OK) != 0) {
      return refuse(std::string("this server's machine has no ") + need +
                    " (apt-get install openssh-server libnss-wrapper)");
    }
  }
  const std::string home = env("HOME").empty() ? "/tmp" : env("HOME");
  const std::string lab_token = env("COHORT_SESSION_JUPYTER_TOKEN");
  if (!lab_token.empty() && !hasJupyterLab()) {
    const std::string named = env("COHORT_SESSION_ENVIRONMENT");
    return refuse("JupyterLab: the session's environment" +
                  (named.empty() ? std::string(" (the server's PATH)") : " '" + named + "'") +
                  " has no jupyterlab: start it with --env jupyter (a preset with JupyterLab 4), "
                  "or pip install jupyterlab in a session and cohort session save it");
  }
  // The node's own /tmp (a tmpfs of the job's), which no other job sees.
  const std::string dir = "/tmp/.cohort-session-" + env("COHORT_JOB_ID");
  ::mkdir(dir.c_str(), 0700);
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::getuid()) {
    return refuse(dir + " is not a directory of this session's own");
  }
  ::chmod(dir.c_str(), 0700);
  const std::string uid = std::to_string(::getuid()), gid = std::to_string(::getgid());
  std::string passwd = readFile("/etc/passwd").value_or("");
  std::string group = readFile("/etc/group").value_or("");
  if (!passwd.empty() && passwd.back() != '\n') passwd += '\n';
  if (!group.empty() && group.back() != '\n') group += '\n';
  passwd += user + ":x:" + uid + ":" + gid + ":cohort session:" + home + ":/bin/bash\n";
  group += user + ":x:" + gid + ":\n";
  const std::string config =
      "ListenAddress 127.0.0.1:" + std::to_string(job::sessionPort("ssh")) + "\n" +
      "HostKey " + dir + "/host_key\n" +
      "AuthorizedKeysFile " + dir + "/authorized_keys\n" +
      "PidFile none\nUsePAM no\nStrictModes no\nPasswordAuthentication no\n"
      "KbdInteractiveAuthentication no\nPermitUserEnvironment no\nPrintMotd no\n"
      "AllowUsers " + user + "\n"
      "Subsystem sftp internal-sftp\n";
  ::setenv("LD_PRELOAD", kNssWrapper, 1);
  ::setenv("NSS_WRAPPER_PASSWD", (dir + "/passwd").c_str(), 1);
  ::setenv("NSS_WRAPPER_GROUP", (dir + "/group").c_str(), 1);
  ::setenv("USER", user.c_str(), 1);
  // What `pip install` installs in the session goes to a directory of its own, first on
  // Python's path: `cohort session save` makes an environment of it.
  const std::string packages = home + "/.session-packages";
  ::mkdir(packages.c_str(), 0700);
  const std::string path = env("PYTHONPATH");
  ::setenv("PYTHONPATH", (packages + (path.empty() ? "" : ":" + path)).c_str(), 1);
  ::setenv("PIP_TARGET", packages.c_str(), 1);
  ::setenv("PIP_DISABLE_PIP_VERSION_CHECK", "1", 1);
  forRunsInSession(dir, home);
  std::string set_env;
  for (char** e = environ; *e; ++e) {
    const std::string kv = *e;
    const size_t eq = kv.find('=');
    if (eq == std::string::npos || !passedOn(kv.substr(0, eq))) continue;
    if (kv.find_first_of("\"\\\n") != std::string::npos) continue;  // sshd_config cannot say it
    set_env += " \"" + kv + "\"";
  }
  const std::pair<std::string, std::string> files[] = {
      {"passwd", passwd},
      {"group", group},
      {"host_key", privateKeyFile(host_key)},
      {"authorized_keys", authorized + "\n"},
      {"sshd_config", config + (set_env.empty() ? "" : "SetEnv" + set_env + "\n")}};
  for (const auto& [name, content] : files) {
    if (auto w = writeFileAtomic(dir + "/" + name, content, false, 0600); !w) {
      return refuse(w.error().message);
    }
  }
  for (const char* secret : {"COHORT_SESSION_HOST_KEY", "COHORT_SESSION_AUTHORIZED_KEY",
                             "COHORT_SESSION_JUPYTER_TOKEN"}) {
    ::unsetenv(secret);
  }
  const std::string cfg = dir + "/sshd_config";
  if (!lab_token.empty()) {
    ::setenv("JUPYTER_TOKEN", lab_token.c_str(), 1);
    quietLab(home);
    return superviseBoth({kSshd, "-D", "-e", "-f", cfg}, jupyterArgv(home));
  }
  std::vector<const char*> argv = {kSshd, "-D", "-e", "-f", cfg.c_str(), nullptr};
  ::execv(kSshd, const_cast<char* const*>(argv.data()));
  return refuse(std::string("cannot start ") + kSshd);
}

}  // namespace cohort::cli
