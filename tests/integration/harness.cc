#include "harness.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

extern char** environ;

namespace cohort::testing {

std::string testRank() { return COHORT_TEST_RANK_BIN; }
std::string sourceDir() { return COHORT_SOURCE_DIR; }

bool usePresetEnvironment(const std::string& name, const std::string& module) {
  const std::string bin = COHORT_BIN;
  const std::string envs = bin.substr(0, bin.rfind('/')) + "/envs";
  const std::string python = envs + "/" + name + "/venv/bin/python";
  if (::access((envs + "/" + name + "/env.json").c_str(), F_OK) != 0) return false;
  if (std::system((python + " -c 'import " + module + "' >/dev/null 2>&1").c_str()) != 0) {
    return false;
  }
  ::setenv("COHORT_ENVS", envs.c_str(), 1);
  return true;
}

CohortProcess::CohortProcess(const std::vector<std::string>& args,
                             const std::vector<std::string>& extra_env, int stdin_fd) {
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) < 0 || ::pipe2(err, O_CLOEXEC) < 0) std::abort();
  std::vector<std::string> argv_s = {COHORT_BIN};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_s;
  for (char** e = environ; *e; ++e) env_s.emplace_back(*e);
  for (const auto& extra : extra_env) {  // replaces a variable of the same name
    size_t name_end = extra.find('=');
    if (name_end != std::string::npos) {
      std::erase_if(env_s, [&](const std::string& entry) {
        return entry.compare(0, name_end + 1, extra, 0, name_end + 1) == 0;
      });
    }
    env_s.push_back(extra);
  }
  std::vector<char*> envp;
  for (auto& e : env_s) envp.push_back(e.data());
  envp.push_back(nullptr);
  pid_ = ::fork();
  if (pid_ == 0) {
    if (stdin_fd >= 0) ::dup2(stdin_fd, 0);
    ::dup2(out[1], 1);
    ::dup2(err[1], 2);
    ::execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  ::close(out[1]);
  ::close(err[1]);
  out_ = out[0];
  err_ = err[0];
}

CohortProcess::~CohortProcess() {
  if (!done_) {
    ::kill(pid_, SIGKILL);
    wait(5s);
  }
}

RunResult CohortProcess::wait(std::chrono::milliseconds deadline) {
  RunResult result;
  auto until = std::chrono::steady_clock::now() + deadline;
  bool killed = false;
  int open_fds = 2;
  char buf[65536];
  while (open_fds > 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - std::chrono::steady_clock::now());
    if (left.count() <= 0 && !killed) {
      ::kill(pid_, SIGKILL);
      killed = true;
    }
    pollfd fds[2] = {{out_, POLLIN, 0}, {err_, POLLIN, 0}};
    ::poll(fds, 2, killed ? 1000 : static_cast<int>(std::max<int64_t>(left.count(), 1)));
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP))) continue;
      ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
      if (n > 0) {
        (i == 0 ? result.out : result.err).append(buf, n);
      } else {
        ::close(fds[i].fd);
        (i == 0 ? out_ : err_) = -1;
        --open_fds;
      }
    }
    if (killed && std::chrono::steady_clock::now() > until + 5s) break;  // held open elsewhere
  }
  int status = 0;
  ::waitpid(pid_, &status, 0);
  done_ = true;
  if (killed) return result;
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

RunResult runCohort(const std::vector<std::string>& args, std::chrono::milliseconds deadline) {
  return CohortProcess(args).wait(deadline);
}

ServerProcess::~ServerProcess() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGTERM);
  auto until = std::chrono::steady_clock::now() + 10s;
  int status = 0;
  while (::waitpid(pid_, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > until) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
      break;
    }
    std::this_thread::sleep_for(5ms);
  }
}

std::string ServerProcess::log() const { return readText(out_path_) + readText(err_path_); }

std::unique_ptr<ServerProcess> startServer(std::string* why,
                                           const std::vector<std::string>& flags) {
  std::unique_ptr<ServerProcess> server(new ServerProcess);
  const std::string logs = tempDir();
  server->data_root_ = tempDir();
  server->out_path_ = logs + "/server.out";
  server->err_path_ = logs + "/server.err";
  std::vector<std::string> argv_s = {COHORT_BIN, "server", "--listen", "127.0.0.1:0",
                                     "--data-root", server->data_root_};
  argv_s.insert(argv_s.end(), flags.begin(), flags.end());
  const auto root_flag = std::find(flags.begin(), flags.end(), "--data-root");
  const bool reused = root_flag != flags.end() && root_flag + 1 != flags.end();
  if (reused) server->data_root_ = *(root_flag + 1);
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  int out = ::open(server->out_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  int err = ::open(server->err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (out < 0 || err < 0) std::abort();
  server->pid_ = ::fork();
  if (server->pid_ == 0) {
    ::dup2(out, 1);
    ::dup2(err, 2);
    ::execv(argv[0], argv.data());
    _exit(127);
  }
  ::close(out);
  ::close(err);
  auto lineValue = [&](const std::string& text, const std::string& marker) {
    auto at = text.find(marker);
    if (at == std::string::npos) return std::string();
    auto end = text.find('\n', at);
    if (end == std::string::npos) return std::string();  // not complete yet
    return text.substr(at + marker.size(), end - at - marker.size());
  };
  bool exited = false;
  bool up = waitFor(
      [&] {
        int status = 0;
        if (::waitpid(server->pid_, &status, WNOHANG) == server->pid_) {
          exited = true;
          return true;
        }
        std::string text = readText(server->out_path_);
        server->url_ = lineValue(text, "cohort server: listening on ");
        server->admin_token_ = lineValue(text, "cohort server: admin token: ");
        // A data root used before has its accounts: no new token is printed.
        return !server->url_.empty() &&
               (!server->admin_token_.empty() ||
                (reused && !lineValue(text, "cohort server: jobs run ").empty()));
      },
      30s);
  if (!up || exited) {
    if (why) *why = (exited ? "cohort server exited: " : "cohort server did not come up: ") +
                    server->log();
    if (exited) server->pid_ = -1;
    return nullptr;
  }
  return server;
}

namespace {

// Removes the test's temporary directories when the test binary exits (unless
// COHORT_TEST_KEEP is set: then they stay, to look at what a failing test left).
struct TempDirs {
  std::vector<std::string> dirs;
  ~TempDirs() {
    if (std::getenv("COHORT_TEST_KEEP")) return;
    std::error_code ignored;
    for (const auto& dir : dirs) std::filesystem::remove_all(dir, ignored);
  }
};
TempDirs temp_dirs;

}  // namespace

std::string tempDir() {
  char tmpl[] = "/tmp/cohort-test-XXXXXX";
  if (!::mkdtemp(tmpl)) std::abort();
  // Servers run as root give each account's ranks a user of their own, who must get through.
  if (::chmod(tmpl, 0755) != 0) std::abort();
  temp_dirs.dirs.emplace_back(tmpl);
  return tmpl;
}

std::string onlyJobDir(const std::string& data_root, const std::string& prefix) {
  std::string jobs = data_root + "/jobs";
  DIR* dir = ::opendir(jobs.c_str());
  if (!dir) return "";
  std::string found;
  while (dirent* e = ::readdir(dir)) {
    if (e->d_name[0] != '.' && std::string(e->d_name).rfind(prefix, 0) == 0) {
      found = jobs + "/" + e->d_name;
    }
  }
  ::closedir(dir);
  return found;
}

bool waitFor(const std::function<bool()>& condition, std::chrono::milliseconds deadline,
             std::chrono::milliseconds every) {
  auto until = std::chrono::steady_clock::now() + deadline;
  while (!condition()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(every);
  }
  return true;
}

std::vector<pid_t> readPids(const std::string& path) {
  std::vector<pid_t> pids;
  std::ifstream in(path);
  for (long pid; in >> pid;) pids.push_back(static_cast<pid_t>(pid));
  return pids;
}

bool processGone(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return true;
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  auto close = text.rfind(')');
  return close == std::string::npos || text.size() < close + 3 || text[close + 2] == 'Z';
}

bool have(const std::string& check) {
  return std::system((check + " >/dev/null 2>&1").c_str()) == 0;
}

int freePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

std::string shellOutput(const std::string& command) {
  std::string out;
  if (FILE* p = ::popen(command.c_str(), "r")) {
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    ::pclose(p);
  }
  return out;
}

std::string readText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

nlohmann::json readJson(const std::string& path) {
  return nlohmann::json::parse(readText(path), nullptr, false);
}

std::vector<nlohmann::json> readJsonLines(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::istringstream in(readText(path));
  for (std::string line; std::getline(in, line);) {
    out.push_back(nlohmann::json::parse(line, nullptr, false));
  }
  return out;
}

int listeningPort(pid_t pid) {
  std::set<std::string> sockets;  // their inodes
  const std::string fds = "/proc/" + std::to_string(pid) + "/fd";
  std::error_code gone;  // the process may end meanwhile: no exception, no port
  for (const auto& entry : std::filesystem::directory_iterator(fds, gone)) {
    std::error_code ec;
    const std::string target = std::filesystem::read_symlink(entry.path(), ec).string();
    if (target.rfind("socket:[", 0) == 0) sockets.insert(target.substr(8, target.size() - 9));
  }
  std::istringstream table(readText("/proc/" + std::to_string(pid) + "/net/tcp"));
  std::string line;
  std::getline(table, line);  // the header
  while (std::getline(table, line)) {
    // sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
    std::istringstream fields(line);
    std::string sl, local, remote, state, queues, timers, retransmits, uid, timeout, inode;
    fields >> sl >> local >> remote >> state >> queues >> timers >> retransmits >> uid >> timeout >>
        inode;
    if (state == "0A" && sockets.count(inode)) {
      return static_cast<int>(std::stol(local.substr(local.find(':') + 1), nullptr, 16));
    }
  }
  return 0;
}


}  // namespace cohort::testing
