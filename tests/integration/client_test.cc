// The client commands (cohort login, submit, ps, status, logs, outputs, ...) run as a user runs
// them. The first tests need no server: help, usage errors, where the server comes from, a server
// that cannot be reached. The Live* tests start a real `cohort server` on a free port.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "harness.h"
#include "tests/integration/httplib.h"

namespace cohort::testing {
namespace {

::testing::AssertionResult Contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << part << "' not in:\n" << text;
}

::testing::AssertionResult Lacks(const std::string& text, const std::string& part) {
  if (text.find(part) == std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << part << "' unexpectedly in:\n" << text;
}

// A port on 127.0.0.1 nothing listens on.
int closedPort() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) < 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) < 0) {
    std::abort();
  }
  // Left bound, never listening, until the tests end: a connection is refused, and no other
  // call or process gets the same port.
  return ntohs(addr.sin_port);
}

std::string localUrl(int port) { return "http://127.0.0.1:" + std::to_string(port); }

// An HTTP server on 127.0.0.1 that answers every request with one status and body, and keeps
// the head of each request: for answers the real server does not give on demand (a 500, a path
// with ".."), and to see which token the client sent.
class FakeServer {
 public:
  FakeServer(int status, std::string body) : status_(status), body_(std::move(body)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) < 0 ||
        ::listen(fd_, 16) < 0 || ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) < 0) {
      std::abort();
    }
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~FakeServer() {
    stop_ = true;
    thread_.join();
    ::close(fd_);
  }
  std::string url() const { return localUrl(port_); }
  std::vector<std::string> requests() const {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_;
  }

 private:
  void serve() {
    while (!stop_) {
      pollfd p = {fd_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      int conn = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (conn < 0) continue;
      std::string head;
      char c;
      while (head.find("\r\n\r\n") == std::string::npos && ::read(conn, &c, 1) == 1) head += c;
      auto length_at = head.find("Content-Length: ");
      size_t length = length_at == std::string::npos ? 0 : std::stoul(head.substr(length_at + 16));
      for (size_t i = 0; i < length && ::read(conn, &c, 1) == 1; ++i) {
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        requests_.push_back(head);
      }
      std::string answer = "HTTP/1.1 " + std::to_string(status_) + " X\r\nContent-Type: " +
                           "application/json\r\nContent-Length: " + std::to_string(body_.size()) +
                           "\r\nConnection: close\r\n\r\n" + body_;
      (void)!::write(conn, answer.data(), answer.size());
      ::close(conn);
    }
  }

  int status_;
  std::string body_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  mutable std::mutex mu_;
  std::vector<std::string> requests_;
};

// The client's environment, isolated from the user's: an empty config directory and no
// COHORT_SERVER/COHORT_TOKEN, plus `extra`.
class ClientEnv {
 public:
  ClientEnv() : config_home_(tempDir()) {}

  std::string configFile() const { return config_home_ + "/cohort/config.json"; }

  void writeConfig(const std::string& text) const {
    std::filesystem::create_directories(config_home_ + "/cohort");
    std::ofstream(configFile()) << text;
  }

  RunResult run(const std::vector<std::string>& args, std::vector<std::string> extra = {},
                std::chrono::milliseconds deadline = 60s) const {
    std::vector<std::string> env = {"XDG_CONFIG_HOME=" + config_home_,
                                    "COHORT_SERVER=", "COHORT_TOKEN="};
    env.insert(env.end(), extra.begin(), extra.end());
    return CohortProcess(args, env).wait(deadline);
  }

 private:
  std::string config_home_;
};

const std::vector<std::string> kClientCommands = {
    "login",  "whoami",  "submit", "rerun",  "ps",      "status",   "logs",  "stop",
    "delete", "outputs", "share",  "shares", "unshare", "accounts", "tokens"};

TEST(ClientHelp, EveryCommandHasHelpNamingItsUsage) {
  for (const std::string& command : kClientCommands) {
    RunResult r = runCohort({command, "--help"});
    EXPECT_EQ(r.exit_code, 0) << command;
    EXPECT_EQ(r.out.rfind("cohort " + command + ": ", 0), 0u) << r.out;
    EXPECT_TRUE(Contains(r.out, "Usage: cohort " + command)) << command;
    EXPECT_EQ(runCohort({"help", command}).out, r.out) << command;
  }
}

TEST(ClientHelp, MainHelpListsTheServerCommands) {
  RunResult r = runCohort({"--help"});
  EXPECT_EQ(r.exit_code, 0);
  for (const char* line : {"cohort login URL", "cohort submit [flags]", "cohort ps",
                           "cohort status JOB", "cohort logs JOB", "cohort outputs JOB"}) {
    EXPECT_TRUE(Contains(r.out, line));
  }
}

TEST(ClientHelp, SubmitHelpHasJobFlagsButNotRunOnlyOnes) {
  RunResult r = runCohort({"submit", "--help"});
  EXPECT_EQ(r.exit_code, 0);
  for (const char* flag : {"--nodes N", "--nproc-per-node", "--env KEY=VALUE", "--hp KEY=VALUE",
                           "--priority N", "--wait", "--server URL", "--token TOKEN"}) {
    EXPECT_TRUE(Contains(r.out, flag));
  }
  EXPECT_TRUE(Lacks(r.out, "--data-root"));
  EXPECT_TRUE(Lacks(r.out, "--isolate"));
  EXPECT_TRUE(Lacks(r.out, "--log-ranks"));
}

TEST(ClientServer, NoServerAnywhereExitsTwoSayingHowToSetOne) {
  ClientEnv env;
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"ps"},
        {"whoami"},
        {"status", "some-job"},
        {"submit", "--framework", "generic", "--", "true"}}) {
    RunResult r = env.run(args);
    EXPECT_EQ(r.exit_code, 2) << args[0] << ": " << r.err;
    EXPECT_EQ(r.err,
              "cohort: error: no server: pass --server URL, set COHORT_SERVER or run cohort "
              "login URL\n");
    EXPECT_EQ(r.out, "");
  }
}

TEST(ClientServer, UnreachableServerExitsOneNamingIt) {
  ClientEnv env;
  const int port = closedPort();
  RunResult r = env.run({"ps", "--server", "127.0.0.1:" + std::to_string(port)});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "cohort: error: cannot reach the server at " + localUrl(port) +
                       ": Connection refused (is cohort server running?)\n");
  EXPECT_EQ(r.out, "");
}

TEST(ClientServer, OtherSchemesAndAMissingCertificateFileAreBadUsage) {
  ClientEnv env;
  RunResult r = env.run({"ps", "--server", "ftp://example.org"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(Contains(r.err, "expected an http:// or https:// URL")) << r.err;
  r = env.run({"ps", "--server", "https://127.0.0.1:1", "--ca", "/nonexistent/ca.pem"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(Contains(r.err, "'/nonexistent/ca.pem' (--ca, COHORT_CA or cohort login)")) << r.err;
}

TEST(ClientServer, FlagBeatsEnvironmentBeatsConfigFile) {
  ClientEnv env;
  const int from_file = closedPort(), from_env = closedPort(), from_flag = closedPort();
  env.writeConfig(R"({"server": ")" + localUrl(from_file) + R"(", "token": "t"})");
  const std::string env_server = "COHORT_SERVER=127.0.0.1:" + std::to_string(from_env);

  RunResult r = env.run({"ps"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(Contains(r.err, "at " + localUrl(from_file) + ":"));

  r = env.run({"ps"}, {env_server});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(Contains(r.err, "at " + localUrl(from_env) + ":"));

  r = env.run({"ps", "--server", localUrl(from_flag) + "/"}, {env_server});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(Contains(r.err, "at " + localUrl(from_flag) + ":"));
}

TEST(ClientServer, BrokenConfigFileIsNamed) {
  ClientEnv env;
  env.writeConfig("not json");
  RunResult r = env.run({"ps"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(Contains(r.err, "config file '" + env.configFile() + "': not a JSON object"));
}

TEST(ClientServer, ConfigTokenGoesOnlyToTheConfigServer) {
  ClientEnv env;
  FakeServer server(200, R"({"account": "alice", "admin": false})");
  env.writeConfig(R"({"server": ")" + server.url() + R"(", "token": "from-file"})");
  auto authorization = [&] {
    std::string head = server.requests().back();
    auto at = head.find("Authorization: ");
    return at == std::string::npos ? "" : head.substr(at, head.find("\r\n", at) - at);
  };

  RunResult r = env.run({"whoami"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "alice\n");
  EXPECT_EQ(authorization(), "Authorization: Bearer from-file");
  EXPECT_EQ(env.run({"whoami"}, {"COHORT_TOKEN=from-env"}).exit_code, 0);
  EXPECT_EQ(authorization(), "Authorization: Bearer from-env");
  EXPECT_EQ(env.run({"whoami", "--token", "from-flag"}, {"COHORT_TOKEN=from-env"}).exit_code, 0);
  EXPECT_EQ(authorization(), "Authorization: Bearer from-flag");

  // Another server named by the environment never gets the file's token.
  FakeServer other(200, R"({"account": "nobody", "admin": false})");
  EXPECT_EQ(env.run({"whoami"}, {"COHORT_SERVER=" + other.url()}).out, "nobody\n");
  ASSERT_EQ(other.requests().size(), 1u);
  EXPECT_TRUE(Lacks(other.requests()[0], "Authorization"));
}

TEST(ClientServer, ErrorAnswersMapToExitCodes) {
  ClientEnv env;
  {
    FakeServer server(500, R"({"error": {"code": "internal", "message": "boom"}})");
    RunResult r = env.run({"ps", "--server", server.url()});
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_EQ(r.err, "cohort: error: boom\n");
  }
  {
    FakeServer server(409, R"({"error": {"code": "failed_precondition", "message": "running"}})");
    RunResult r = env.run({"delete", "j1", "--server", server.url()});
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_EQ(r.err, "cohort: error: running\n");
    EXPECT_EQ(server.requests()[0].rfind("DELETE /v1/jobs/j1 HTTP/1.1\r\n", 0), 0u);
  }
  {
    FakeServer server(404, "no such page");
    RunResult r = env.run({"status", "a b", "--server", server.url()});
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_TRUE(Contains(r.err, "HTTP 404: no such page"));
    EXPECT_EQ(server.requests()[0].rfind("GET /v1/jobs/a%20b HTTP/1.1\r\n", 0), 0u);
  }
  {
    FakeServer server(401, R"({"error": {"code": "unauthenticated", "message": "bad token"}})");
    RunResult r = env.run({"whoami", "--server", server.url()});
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_TRUE(Contains(r.err, "cohort: error: bad token (log in with cohort login URL"));
  }
  {
    // The server's own message already says how to log in: said once.
    FakeServer server(401, R"j({"error": {"code": "unauthenticated", "message": )j"
                           R"j("no token: send it (cohort login URL)"}})j");
    RunResult r = env.run({"whoami", "--server", server.url()});
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_EQ(r.err, "cohort: error: no token: send it (cohort login URL)\n");
  }
  for (int status : {403, 413}) {
    FakeServer server(status, R"({"error": {"code": "x", "message": "refused"}})");
    RunResult r = env.run({"whoami", "--server", server.url()});
    EXPECT_EQ(r.exit_code, 2) << status;
    EXPECT_EQ(r.err, "cohort: error: refused\n") << status;
  }
}

TEST(ClientOutputs, DownloadRefusesPathsLeavingTheDestination) {
  ClientEnv env;
  for (const char* path : {"../evil", "/tmp/evil", "a/../../evil", "a//b", ""}) {
    FakeServer server(200, R"({"files": [{"path": "ok.txt", "size": 1}, {"path": ")" +
                               std::string(path) + R"(", "size": 1}]})");
    const std::string dest = tempDir() + "/out";
    RunResult r = env.run({"outputs", "j", "download", dest, "--server", server.url()});
    EXPECT_EQ(r.exit_code, 2) << path;
    EXPECT_TRUE(Contains(r.err, "output path '" + std::string(path) +
                                    "' would be written "
                                    "outside '" +
                                    dest + "'; refused"));
    EXPECT_EQ(server.requests().size(), 1u) << "nothing is fetched";
    EXPECT_FALSE(std::filesystem::exists(dest));
  }
}

TEST(ClientLogin, ClosedPortFailsCleanlyAndSavesNothing) {
  ClientEnv env;
  const int port = closedPort();
  RunResult r = env.run({"login", localUrl(port), "--token", "cohort_x"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "cohort: error: cannot reach the server at " + localUrl(port) +
                       ": Connection refused (is cohort server running?)\n");
  EXPECT_FALSE(std::filesystem::exists(env.configFile()));
}

TEST(ClientLogin, NeedsAUrl) {
  ClientEnv env;
  RunResult r = env.run({"login", "--token", "x"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(Contains(r.err, "login: expects the server's URL"));
}

TEST(ClientSubmit, RefusesFlagsThatOnlyMeanSomethingForCohortRun) {
  ClientEnv env;
  for (const std::vector<std::string>& flag : {std::vector<std::string>{"--data-root", "/tmp/x"},
                                               {"--data-root=/tmp/x"},
                                               {"--isolate"},
                                               {"--log-ranks", "0"},
                                               {"--job-id", "j1"}}) {
    std::vector<std::string> args = {"submit", "--framework", "generic"};
    args.insert(args.end(), flag.begin(), flag.end());
    args.insert(args.end(), {"--", "true"});
    RunResult r = env.run(args);
    std::string name = flag[0].substr(0, flag[0].find('='));
    EXPECT_EQ(r.exit_code, 2) << name;
    EXPECT_TRUE(
        Contains(r.err, "cohort: error: submit: " + name + " does not apply to a submitted job"));
  }
}

TEST(ClientSubmit, BadFlagsAndJobFilesFailBeforeAnyRequest) {
  ClientEnv env;
  const std::string server = "--server=127.0.0.1:" + std::to_string(closedPort());
  RunResult r = env.run({"submit", server, "--priority", "high", "--", "true"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(Contains(r.err, "--priority: expected an integer, got 'high'"));

  r = env.run({"submit", server, "-f", "/nonexistent/job.yaml"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(Contains(r.err, "job file"));

  r = env.run({"submit", server, "--nodes", "0", "--", "true"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(Contains(r.err, "--nodes"));

  r = env.run({"submit", server, "--bogus", "--", "true"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(Contains(r.err, "unknown flag '--bogus'"));
}

TEST(ClientUsage, MissingOrExtraArgumentsExitTwo) {
  ClientEnv env;
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"accounts", "create", "x", "--max-cpus", "nan"},
       "accounts: --max-cpus: 'nan' is not a number of CPUs"},
      {{"server", "--cpus", "inf"}, "server: --cpus: expected a number of CPUs"},
      {{"server", "--isolate", "--no-isolate"}, "server: --isolate and --no-isolate contradict"},
      {{"status"}, "status: expects JOB"},
      {{"ps", "extra"}, "ps: unexpected argument 'extra'"},
      {{"logs", "j", "--rank", "x"}, "logs: --rank: expected a rank number"},
      {{"stop", "--frob", "j"}, "stop: unknown flag '--frob'"},
      {{"outputs", "j", "fetch", "d"}, "outputs: unexpected argument 'fetch'"},
      {{"share", "store://b/p"}, "share: --with ACCOUNT is required"},
      {{"share", "store://b/p", "--with", "bob", "--access", "admin"},
       "share: --access: expected read or write"},
      {{"share", "/local/path", "--with", "bob"}, "share: '/local/path' is not a store URI"},
      {{"accounts", "frob"}, "accounts: unknown subcommand 'frob'"},
      {{"tokens", "delete"}, "tokens: expects delete ID"},
  };
  for (const Case& c : cases) {
    RunResult r = env.run(c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args[0] << ": " << r.err;
    EXPECT_TRUE(Contains(r.err, "cohort: error: " + c.message)) << c.args[0];
  }
}

// ---------------------------------------------------------------------------------------------
// Against a live server.

class LiveClient : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    // Two-rank jobs must fit whatever this machine's core count. The tests' local inputs are
    // in their temporary directories.
    server_ = startServer(&why, {"--cpus", "4", "--input-root", "/tmp"});
    ASSERT_TRUE(server_) << why;
  }

  // Runs a command as the admin (or as the owner of `token`).
  RunResult as(const std::string& token, const std::vector<std::string>& args,
               std::chrono::milliseconds deadline = 60s) const {
    return env_.run(args, {"COHORT_SERVER=" + server_->url(), "COHORT_TOKEN=" + token}, deadline);
  }
  RunResult admin(const std::vector<std::string>& args,
                  std::chrono::milliseconds deadline = 60s) const {
    return as(server_->adminToken(), args, deadline);
  }

  // Submits a generic job running cohort-test-rank with `actions` and waits for it; returns
  // its id.
  std::string runJob(const std::vector<std::string>& actions, int procs = 1,
                     int expected_exit = 0) {
    std::vector<std::string> args = {"submit",  "--wait",           "--framework",
                                     "generic", "--nproc-per-node", std::to_string(procs),
                                     "--",      testRank()};
    args.insert(args.end(), actions.begin(), actions.end());
    RunResult r = admin(args);
    EXPECT_EQ(r.exit_code, expected_exit) << r.err << server_->log();
    return r.out.substr(0, r.out.find('\n'));
  }

  ClientEnv env_;
  std::unique_ptr<ServerProcess> server_;
};

TEST_F(LiveClient, LoginChecksTheTokenAndSavesItPrivately) {
  RunResult r = env_.run({"login", server_->url(), "--token", server_->adminToken()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(Contains(r.err, "logged in to " + server_->url() + " as admin"));
  struct stat st {};
  ASSERT_EQ(::stat(env_.configFile().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  nlohmann::json config = readJson(env_.configFile());
  EXPECT_EQ(config["server"], server_->url());
  EXPECT_EQ(config["token"], server_->adminToken());

  r = env_.run({"whoami"});  // from the config file alone
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "admin (admin)\n");

  r = env_.run({"login", server_->url(), "--token", "cohort_wrong"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(Contains(r.err, "cohort: error: "));
  EXPECT_EQ(readJson(env_.configFile())["token"], server_->adminToken());  // unchanged
}

TEST_F(LiveClient, SubmitWaitExitsWithTheJobsExitCode) {
  RunResult r =
      admin({"submit", "--wait", "--framework", "generic", "--", testRank(), "echo=hello"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  ASSERT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;  // only the id
  const std::string id = r.out.substr(0, r.out.size() - 1);
  EXPECT_TRUE(Contains(r.err, "cohort: submitted " + id + " ("));
  EXPECT_TRUE(Contains(r.err, "cohort: job " + id + " succeeded"));

  r = admin({"submit", "--wait", "--framework", "generic", "--name", "fails", "--", testRank(),
             "echo=bye", "exit=3"});
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_TRUE(Contains(r.err, "failed"));
  EXPECT_TRUE(Contains(r.err, "exit code 3"));
  EXPECT_TRUE(Contains(r.err, "root cause: worker/0"));
}

// cohort top for a job of the server: its ranks and the metrics they logged, from the API.
TEST_F(LiveClient, TopShowsAServerJobsRanksAndMetrics) {
  const std::string id = runJob({"echo=cohort.log step=3 loss=0.5 accuracy=0.75"}, 2);
  ASSERT_FALSE(id.empty());
  RunResult r = admin({"top", id, "--once"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "job " + id + ": succeeded, 2 rank(s)\n")) << r.out;
  EXPECT_TRUE(std::regex_search(
      r.out, std::regex(R"(\n1 +worker/1 +0 +\S+ +\S+( MiB)? +3 +(0.5 +0.75|0.75 +0.5)\n)")))
      << r.out;
  RunResult missing = admin({"top", "no-such-job-20000101-000000-abcdef", "--once"});
  EXPECT_EQ(missing.exit_code, 2) << missing.err;
}

// cohort stacks for a running job of the server; a job that ended has none to take.
TEST_F(LiveClient, StacksOfARunningServerJob) {
  RunResult submitted = admin({"submit", "--framework", "generic", "--nproc-per-node", "2", "--",
                               testRank(), "echo=up", "sleep=20"});
  ASSERT_EQ(submitted.exit_code, 0) << submitted.err;
  const std::string id = submitted.out.substr(0, submitted.out.find('\n'));
  // Until both ranks have printed, so that both are asleep (a rank still starting is running).
  for (int i = 0; i < 200; ++i) {
    const std::string log = admin({"logs", id}).out;
    if (contains(log, "[worker/0 node0] up") && contains(log, "[worker/1 node0] up")) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // from echo into its sleep
  RunResult r = admin({"stacks", id}, 60s);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "stacks of 2 rank(s), grouped:")) << r.out;
  EXPECT_TRUE(contains(r.out, "worker/0 on node 0, worker/1 on node 0 (2 rank(s), sleeping)"))
      << r.out;
  EXPECT_EQ(admin({"stop", id}).exit_code, 0);
  const std::string done = runJob({"echo=done"});
  RunResult ended = admin({"stacks", done});
  EXPECT_EQ(ended.exit_code, 2) << ended.err;
  EXPECT_TRUE(contains(ended.err, "only a running job has stacks to take")) << ended.err;
}

// cohort rerun for a server job: the same job file again, as a new job with its priority.
// The server (4 CPUs) refuses a job of 8 processes at 1 CPU each, naming the flag that asks
// less; with --cpus 0.5 the same job runs, and its record holds what the flag asked.
TEST_F(LiveClient, ARefusalForCpusNamesTheFlagAndTheFlagMakesItFit) {
  std::vector<std::string> job = {"submit", "--framework", "generic", "--nodes", "2",
                                  "--nproc-per-node", "4"};
  RunResult r = admin([&] {
    auto args = job;
    args.insert(args.end(), {"--", testRank()});
    return args;
  }());
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(Contains(r.err, "the job needs 8 CPUs at once for its 8 processes")) << r.err;
  EXPECT_TRUE(Contains(r.err, "--cpus 0.5 (resources: {cpus: 0.5})")) << r.err;
  EXPECT_TRUE(Lacks(r.err, "--memory 2Gi")) << r.err;

  job.insert(job.end(), {"--cpus", "0.5", "--memory", "64Mi", "--wait", "--", testRank()});
  r = admin(job);
  ASSERT_EQ(r.exit_code, 0) << r.err << server_->log();
  const std::string id = r.out.substr(0, r.out.find('\n'));
  r = admin({"status", id, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json status = nlohmann::json::parse(r.out);
  EXPECT_EQ(status["job"]["resources"]["cpus"], 4.0) << r.out;
  EXPECT_EQ(status["job"]["resources"]["memory"], 8 * 64 * 1024 * 1024LL) << r.out;
  EXPECT_EQ(status["job"]["spec"]["roles"]["worker"]["resources"]["cpus"], 0.5) << r.out;
}

TEST_F(LiveClient, RerunSubmitsTheJobFileAgain) {
  RunResult first =
      admin({"submit", "--framework", "generic", "--hang-timeout", "30s", "--priority", "4",
             "--wait", "--name", "once", "--", testRank(), "echo=from the job file"});
  // --priority and --wait after a job flag's value are still submit's own.
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const std::string id = first.out.substr(0, first.out.find('\n'));
  RunResult again = admin({"rerun", id, "--name", "twice", "--wait"});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  const std::string new_id = again.out.substr(0, again.out.find('\n'));
  EXPECT_NE(new_id, id);
  EXPECT_EQ(new_id.rfind("twice-", 0), 0u) << new_id;
  EXPECT_TRUE(contains(admin({"logs", new_id}).out, "from the job file"));
  RunResult status = admin({"status", new_id});
  EXPECT_TRUE(std::regex_search(status.out, std::regex("Priority: +4"))) << status.out;
  RunResult missing = admin({"rerun", "no-such-job-20000101-000000-abcdef"});
  EXPECT_EQ(missing.exit_code, 2) << missing.err;
}

TEST_F(LiveClient, SubmitWithoutWaitPrintsOnlyTheId) {
  RunResult r = admin({"submit", "--framework", "generic", "--", testRank(), "sleep=0.2"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  const std::string id = r.out.substr(0, r.out.find('\n'));
  EXPECT_EQ(id.rfind("cohort-test-rank-", 0), 0u) << id;
  r = admin({"status", "--wait", id});
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

TEST_F(LiveClient, SubmitMakesTheWorkdirAndLocalInputsAbsolute) {
  // A job file with a relative workdir and a relative input, submitted from elsewhere.
  const std::string dir = tempDir();
  std::filesystem::create_directories(dir + "/code");
  std::filesystem::create_directories(dir + "/data");
  std::ofstream(dir + "/data/a.txt") << "a\n";
  std::ofstream(dir + "/job.yaml") << "name: paths\nframework: generic\nworkdir: code\n"
                                      "command: [" +
                                          testRank() +
                                          ", work-file=in/a.txt]\n"
                                          "inputs: [{source: data, target: in}]\n";
  RunResult r = admin({"submit", "--wait", "-f", dir + "/job.yaml"});
  ASSERT_EQ(r.exit_code, 0) << r.err << server_->log();
  const std::string id = r.out.substr(0, r.out.find('\n'));
  nlohmann::json job = readJson(server_->dataRoot() + "/jobs/" + id + "/job.json");
  EXPECT_EQ(job["workdir"], dir + "/code");
  EXPECT_EQ(job["inputs"][0]["source"], dir + "/data");
}

// A submit from another directory, uploading: the ranks run on the snapshot in the job's own
// directory, not on files of the server's disk, which may be gone by then.
TEST_F(LiveClient, SubmitUploadsTheWorkdirAndTheRanksRunTheSnapshot) {
  const std::string dir = tempDir();
  std::filesystem::create_directories(dir + "/code/lib");
  std::ofstream(dir + "/code/run.sh")
      << "pwd\ncat lib/data.txt\nif [ -e secret.txt ]; then echo secret seen; else echo no "
         "secret; fi\n";
  std::ofstream(dir + "/code/lib/data.txt") << "from the snapshot\n";
  std::ofstream(dir + "/code/secret.txt") << "s3cret\n";
  std::ofstream(dir + "/code/.cohortignore") << "# not for the server\nsecret.txt\n";
  std::ofstream(dir + "/job.yaml") << "name: snap\nframework: generic\nworkdir: code\n"
                                      "command: [sh, run.sh]\n";
  RunResult r = admin({"submit", "--upload", "-f", dir + "/job.yaml"});
  ASSERT_EQ(r.exit_code, 0) << r.err << server_->log();
  EXPECT_TRUE(Contains(r.err, "cohort: uploaded the workdir " + dir + "/code (3 files, ")) << r.err;
  EXPECT_TRUE(Contains(r.err, "without what " + dir + "/code/.cohortignore names")) << r.err;
  const std::string id = r.out.substr(0, r.out.find('\n'));
  std::filesystem::remove_all(dir + "/code");  // the job must not need it
  RunResult waited = admin({"status", "--wait", id});
  EXPECT_EQ(waited.exit_code, 0) << waited.err << server_->log();
  const std::string code_dir = server_->dataRoot() + "/jobs/" + id + "/code";
  EXPECT_EQ(admin({"logs", id, "--rank", "0"}).out, code_dir + "\nfrom the snapshot\nno secret\n");
  EXPECT_EQ(readJson(server_->dataRoot() + "/jobs/" + id + "/job.json")["workdir"], code_dir);
  // cohort rerun runs the same snapshot again, though the files it came from are gone.
  RunResult again = admin({"rerun", id, "--wait"});
  ASSERT_EQ(again.exit_code, 0) << again.err << server_->log();
  const std::string second = again.out.substr(0, again.out.find('\n'));
  EXPECT_EQ(admin({"logs", second, "--rank", "0"}).out,
            server_->dataRoot() + "/jobs/" + second + "/code\nfrom the snapshot\nno secret\n");
}

TEST_F(LiveClient, AWorkdirThatCannotBeUploadedIsRefusedBeforeAnythingIsSubmitted) {
  const std::string dir = tempDir();
  std::filesystem::create_directories(dir + "/code/data");
  std::ofstream(dir + "/code/train.py") << "print(1)\n";
  std::ofstream(dir + "/code/data/big.bin") << std::string(64 << 10, 'b');
  std::ofstream(dir + "/job.yaml") << "name: big\nframework: generic\nworkdir: code\n"
                                      "command: [sh, -c, 'true']\n";
  RunResult r = admin({"submit", "--upload", "--max-upload", "16Ki", "-f", dir + "/job.yaml"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(Contains(r.err, "cohort: error: submit: the workdir '" + dir +
                                  "/code' holds 64.0 KiB in 2 files to upload, over the 16.0 KiB "
                                  "limit; the biggest: data/big.bin (64.0 KiB)"))
      << r.err;
  EXPECT_TRUE(Contains(r.err, "raise the limit with --max-upload SIZE")) << r.err;
  EXPECT_TRUE(Contains(r.err, "add a .cohortignore")) << r.err;
  std::filesystem::remove(dir + "/code/data/big.bin");
  std::filesystem::create_symlink("/etc", dir + "/code/etc");
  r = admin({"submit", "--upload", "-f", dir + "/job.yaml"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(Contains(r.err, "the link '" + dir +
                                  "/code/etc' cannot be uploaded: its target "
                                  "'/etc' is an absolute path"))
      << r.err;
  r = admin({"submit", "--upload", "--no-upload", "-f", dir + "/job.yaml"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(Contains(r.err, "--upload and --no-upload contradict each other")) << r.err;
  nlohmann::json jobs = nlohmann::json::parse(admin({"ps", "--json"}).out, nullptr, false);
  EXPECT_TRUE(jobs.is_array() && jobs.empty()) << jobs.dump();
}

TEST_F(LiveClient, SubmitMakesARelativeFileUriInputAbsoluteToo) {
  const std::string dir = tempDir();
  std::filesystem::create_directories(dir + "/data");
  std::ofstream(dir + "/data/a.txt") << "a\n";
  std::ofstream(dir + "/job.yaml") << "name: file-uri\nframework: generic\n"
                                      "command: [" +
                                          testRank() +
                                          ", work-file=in/a.txt]\n"
                                          "inputs: [{source: 'file://data', target: in}]\n";
  RunResult r = admin({"submit", "--wait", "-f", dir + "/job.yaml"});
  ASSERT_EQ(r.exit_code, 0) << r.err << server_->log();
  const std::string id = r.out.substr(0, r.out.find('\n'));
  nlohmann::json job = readJson(server_->dataRoot() + "/jobs/" + id + "/job.json");
  EXPECT_EQ(job["inputs"][0]["source"], dir + "/data");
}

TEST_F(LiveClient, PsListsJobsWithTheirState) {
  const std::string id = runJob({"echo=hello"});
  RunResult r = admin({"ps"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("ID", 0), 0u) << r.out;
  EXPECT_TRUE(Contains(r.out, "STATE"));
  EXPECT_TRUE(Lacks(r.out, "ACCOUNT"));  // all the caller's own
  EXPECT_TRUE(Contains(r.out, id));
  EXPECT_TRUE(Contains(r.out, "succeeded"));

  r = admin({"ps", "--json"});
  nlohmann::json jobs = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_TRUE(jobs.is_array()) << r.out;
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0]["id"], id);

  r = admin({"ps", "--state", "running,queued"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(Lacks(r.out, id));
}

TEST_F(LiveClient, StatusShowsRanksAndEvents) {
  const std::string id = runJob({"echo=hello"}, 2);
  RunResult r = admin({"status", id});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(Contains(r.out, "Job:        " + id));
  EXPECT_TRUE(Contains(r.out, "succeeded"));
  EXPECT_TRUE(Contains(r.out, "Ranks:\n"));
  EXPECT_TRUE(Contains(r.out, "worker/0"));
  EXPECT_TRUE(Contains(r.out, "worker/1"));
  EXPECT_TRUE(Contains(r.out, "Events:\n"));
  EXPECT_TRUE(Contains(r.out, "submitted"));
  EXPECT_TRUE(Contains(r.out, "rank_exit"));

  r = admin({"status", id, "--json"});
  nlohmann::json status = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_TRUE(status.is_object()) << r.out;
  EXPECT_EQ(status["job"]["id"], id);
  EXPECT_EQ(status["ranks"].size(), 2u);
  EXPECT_FALSE(status["events"].empty());
}

TEST_F(LiveClient, StatusOfAFailedJobShowsTheRootCause) {
  const std::string id = runJob({"echo=last words", "exit=3"}, 1, 3);
  RunResult r = admin({"status", id});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(Contains(r.out, "Root cause: worker/0"));
  EXPECT_TRUE(Contains(r.out, "exited with code 3"));
  EXPECT_TRUE(Contains(r.out, "| last words"));
}

TEST_F(LiveClient, LogsPrintsARanksOutput) {
  const std::string id = runJob({"echo=hello"}, 2);
  RunResult r = admin({"logs", id, "--rank", "1"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "hello\n");
  r = admin({"logs", id, "--rank", "7"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
}

TEST_F(LiveClient, MergedLogHasEveryRanksLines) {
  const std::string id = runJob({"echo=hello"}, 2);
  RunResult r = admin({"logs", id});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(Contains(r.out, "[worker/0 "));
  EXPECT_TRUE(Contains(r.out, "[worker/1 "));
  EXPECT_TRUE(Contains(r.out, "hello"));
}

TEST_F(LiveClient, LogsFollowStreamsUntilTheJobEnds) {
  // The job waits between its lines until the test opens the gate, so the follower is known to
  // be attached while the job runs.
  // The gate is in the job's workdir: a sandboxed job's /tmp is its own, but its workdir it sees.
  const std::string workdir = tempDir();
  const std::string gate = workdir + "/go";
  RunResult s = admin({"submit", "-q", "--framework", "generic", "--workdir", workdir, "--",
                       testRank(), "echo=one", "wait-file=" + gate, "echo=two"});
  ASSERT_EQ(s.exit_code, 0) << s.err;
  const std::string id = s.out.substr(0, s.out.find('\n'));
  CohortProcess follower({"logs", "-f", id, "--rank", "0"},
                         {"XDG_CONFIG_HOME=" + tempDir(), "COHORT_SERVER=" + server_->url(),
                          "COHORT_TOKEN=" + server_->adminToken()});
  ASSERT_TRUE(waitFor(
      [&] {
        return Contains(admin({"logs", id, "--rank", "0"}).out, "one");
      },
      30s));
  EXPECT_FALSE(processGone(follower.pid())) << "logs -f ended while the job still ran";
  std::ofstream(gate).put('\n');
  RunResult r = follower.wait(30s);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "one\ntwo\n");
}

TEST_F(LiveClient, StatusWaitFollowsTheJobsEventsInsteadOfPollingItsRecord) {
  const std::string workdir = tempDir();  // the gate is where the sandboxed rank sees it
  const std::string gate = workdir + "/go";
  RunResult s = admin({"submit", "-q", "--framework", "generic", "--workdir", workdir, "--",
                       testRank(), "wait-file=" + gate, "exit=3"});
  ASSERT_EQ(s.exit_code, 0) << s.err;
  const std::string id = s.out.substr(0, s.out.find('\n'));
  CohortProcess waiter({"status", id, "--wait"},
                       {"XDG_CONFIG_HOME=" + tempDir(), "COHORT_SERVER=" + server_->url(),
                        "COHORT_TOKEN=" + server_->adminToken()});
  // The waiter is a follower of the job's events (a long-poll the server answers when the next
  // one is stored), not a loop of GETs.
  const int port = std::atoi(server_->url().substr(server_->url().rfind(':') + 1).c_str());
  auto followers = [&] {
    httplib::Client client("127.0.0.1", port);
    auto res = client.Get("/metrics");
    if (!res) return -1;
    const std::string body = res->body;
    const std::string name = "\ncohort_followers ";
    size_t at = body.find(name);
    return at == std::string::npos ? -1 : std::atoi(body.c_str() + at + name.size());
  };
  EXPECT_TRUE(waitFor([&] { return followers() >= 1; }, 30s))
      << "cohort status --wait does not follow the job's events";
  EXPECT_FALSE(processGone(waiter.pid()));
  std::ofstream(gate).put('\n');
  RunResult r = waiter.wait(30s);
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_TRUE(Contains(r.out, "failed")) << r.out;
}

TEST_F(LiveClient, OutputsDownloadRoundTripsTheFiles) {
  const std::string id = runJob({"output-file=model.txt"}, 2);
  const std::string original = readText(server_->dataRoot() + "/jobs/" + id + "/output/model.txt");
  ASSERT_FALSE(original.empty());

  RunResult r = admin({"outputs", id});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(Contains(r.out, "model.txt"));

  const std::string dest = tempDir() + "/fetched";
  r = admin({"outputs", id, "download", dest});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(Contains(r.err, "model.txt"));
  EXPECT_EQ(readText(dest + "/model.txt"), original);
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dest)) {
    names.push_back(e.path().filename());
  }
  EXPECT_EQ(names, std::vector<std::string>{"model.txt"});  // no temporary file left
}

// cohort cp with server://: the login's token, the server's store and its access rules.
TEST_F(LiveClient, CpWritesAndReadsTheServersStore) {
  const std::string dir = tempDir();
  std::filesystem::create_directories(dir + "/data/sub");
  std::ofstream(dir + "/data/a.txt") << "alpha\n";
  std::ofstream(dir + "/data/sub/b.bin") << std::string(3000, 'b');
  RunResult r = admin({"cp", dir + "/data", "server://datasets/digits"});
  ASSERT_EQ(r.exit_code, 0) << r.err << server_->log();
  EXPECT_TRUE(Contains(r.err, "cohort: copied 2 files (2.9 KiB) to " + server_->url())) << r.err;
  EXPECT_EQ(readText(server_->dataRoot() + "/store/admin@datasets/digits/sub/b.bin"),
            std::string(3000, 'b'));
  r = admin({"cp", "server://datasets/digits", dir + "/back"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(readText(dir + "/back/a.txt"), "alpha\n");
  EXPECT_EQ(readText(dir + "/back/sub/b.bin"), std::string(3000, 'b'));
  std::filesystem::create_directories(dir + "/one");
  r = admin({"cp", "server://datasets/digits/a.txt", dir + "/one"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(readText(dir + "/one/a.txt"), "alpha\n");
  // Another account sees nothing of it; a missing file is named.
  RunResult created = admin({"accounts", "create", "carol"});
  ASSERT_EQ(created.exit_code, 0) << created.err;
  const std::string carol = created.out.substr(0, created.out.find('\n'));
  for (const std::string theirs :
       {"server://datasets/digits/a.txt", "server://admin@datasets/digits/a.txt"}) {
    r = as(carol, {"cp", theirs, dir + "/stolen.txt"});
    EXPECT_EQ(r.exit_code, 2) << theirs << ": " << r.err;
    EXPECT_TRUE(Contains(r.err, "not found")) << r.err;
    EXPECT_FALSE(std::filesystem::exists(dir + "/stolen.txt"));
  }
  r = admin({"cp", "server://datasets/digits/missing.txt", dir + "/m.txt"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(Contains(r.err, "missing.txt")) << r.err;
  r = admin({"cp", "server://datasets/../x", dir + "/m"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
}

TEST_F(LiveClient, AnotherAccountCannotSeeTheJob) {
  const std::string id = runJob({"echo=secret"});
  RunResult created = admin({"accounts", "create", "bob"});
  ASSERT_EQ(created.exit_code, 0) << created.err;
  const std::string bob = created.out.substr(0, created.out.find('\n'));
  ASSERT_FALSE(bob.empty());
  EXPECT_TRUE(Contains(created.err, "shown only this once"));

  RunResult r = as(bob, {"whoami"});
  EXPECT_EQ(r.out, "bob\n");
  r = as(bob, {"status", id});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(Contains(r.err, "not found"));
  r = as(bob, {"logs", id});
  EXPECT_EQ(r.exit_code, 2);
  r = as(bob, {"ps", "--json"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(Lacks(r.out, id));
  r = as(bob, {"accounts"});  // admin only
  EXPECT_EQ(r.exit_code, 2);

  r = admin({"accounts"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(Contains(r.out, "bob"));

  // The admin sees bob's job too, and ps then names each job's account.
  r = as(bob, {"submit", "--wait", "--framework", "generic", "--name", "bobs", "--", testRank()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = admin({"ps"});
  EXPECT_TRUE(Contains(r.out, "ACCOUNT"));
  EXPECT_TRUE(Contains(r.out, "bob "));
}

TEST_F(LiveClient, StopThenDelete) {
  RunResult s = admin(
      {"submit", "--framework", "generic", "--grace-period", "1s", "--", testRank(), "sleep=60"});
  ASSERT_EQ(s.exit_code, 0) << s.err;
  const std::string id = s.out.substr(0, s.out.find('\n'));

  RunResult r = admin({"delete", id});  // not finished yet
  EXPECT_EQ(r.exit_code, 2) << r.err;

  r = admin({"stop", id});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(Contains(r.err, id));
  r = admin({"status", "--wait", id}, 30s);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(Contains(r.out, "stopped"));

  r = admin({"delete", id});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  r = admin({"status", id});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(Contains(r.err, "not found"));
}

// `cohort stop` of a server job: the rank (in the server's sandbox, where there is one) gets the
// job's stop signal, saves and exits 0; the events say what it was sent, in words.
TEST_F(LiveClient, StopGivesTheRankItsNoticeToCheckpoint) {
  const std::string script =
      "import os, signal, sys, time\n"
      "def save(s, f):\n"
      "    open(os.path.join(os.environ['COHORT_OUTPUT_DIR'], 'ckpt'), 'w').write('saved')\n"
      "    sys.exit(0)\n"
      "signal.signal(signal.Signals[os.environ['COHORT_STOP_SIGNAL']], save)\n"
      "print('ready', flush=True)\n"
      "time.sleep(120)\n";
  RunResult s = admin({"submit", "--framework", "generic", "--stop-signal", "SIGUSR1",
                       "--grace-period", "20s", "--", "/usr/bin/python3", "-c", script});
  ASSERT_EQ(s.exit_code, 0) << s.err;
  const std::string id = s.out.substr(0, s.out.find('\n'));
  ASSERT_TRUE(waitFor(
      [&] {
        return Contains(admin({"logs", id}).out, "ready");
      },
      30s))
      << server_->log();
  RunResult r = admin({"stop", id});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  r = admin({"status", "--wait", id}, 30s);
  EXPECT_TRUE(Contains(r.out, "stopped")) << r.out;
  EXPECT_TRUE(Contains(r.out,
                       "stopping: stopped by SIGTERM; sent SIGUSR1 to 1 rank(s), SIGKILL "
                       "in 20.0s"))
      << r.out;
  EXPECT_TRUE(Contains(r.out, "worker/0 on node 0 exited with code 0")) << r.out;
  EXPECT_EQ(readText(server_->dataRoot() + "/jobs/" + id + "/output/ckpt"), "saved");
}

TEST_F(LiveClient, TokensCanBeCreatedUsedAndRevoked) {
  RunResult r = admin({"tokens", "create", "--label", "ci"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string token = r.out.substr(0, r.out.find('\n'));
  EXPECT_EQ(as(token, {"whoami"}).out, "admin (admin)\n");

  r = admin({"tokens", "--json"});
  nlohmann::json tokens = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_TRUE(tokens.is_array()) << r.out;
  std::string id;
  for (const auto& t : tokens) {
    if (t["label"] == "ci") id = t["id"].is_string() ? t["id"].get<std::string>() : t["id"].dump();
  }
  ASSERT_FALSE(id.empty()) << r.out;
  r = admin({"tokens", "delete", id});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  r = as(token, {"whoami"});
  EXPECT_EQ(r.exit_code, 2);
}

}  // namespace
}  // namespace cohort::testing
