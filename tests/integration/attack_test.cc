// The attack suite: a hostile job, a real rank under the real `cohort server`, tries every way we
// know to reach another account or the server — its workdir, inputs and outputs, symbolic and
// hard links, /proc, signals and ptrace to other processes, the job's own record, the server's
// API without a token — and each attempt must fail, visibly in the job's own log, and leave the
// server healthy. The rank prints one line per attempt: "ATTEMPT <name> <ok|blocked> <detail>".
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "harness.h"
#include "tests/tar_entry.h"
#include "tests/integration/httplib.h"
#include "util/text.h"

namespace cohort::testing {
namespace {

using Json = nlohmann::json;

constexpr auto kDeadline = std::chrono::seconds(60);

class Attack : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    // The admin's datasets, the one place jobs may name local inputs, and secrets the server
    // was started with that no job may see.
    datasets_ = tempDir();
    for (const auto& [name, value] : kServerSecrets) ::setenv(name, value, 1);
    server_ = startServer(&why, {"--cpus", "8", "--input-root", datasets_});
    for (const auto& [name, value] : kServerSecrets) ::unsetenv(name);
    ASSERT_TRUE(server_) << why;
    const std::string log = server_->log();
    isolated_ = contains(log, "jobs run isolated");
    separate_users_ = contains(log, "run as a user of its own");
    work_ = tempDir();
    alice_ = account("alice");
    bob_ = account("bob");
  }

  std::pair<int, Json> call(const std::string& method, const std::string& path,
                            const std::string& token, const std::string& body = "",
                            const std::string& type = "application/json") {
    const std::string url = server_->url();
    httplib::Client client("127.0.0.1", std::atoi(url.c_str() + url.rfind(':') + 1));
    client.set_read_timeout(30);
    httplib::Headers headers;
    if (!token.empty()) headers.emplace("Authorization", "Bearer " + token);
    auto res = method == "GET"   ? client.Get(path, headers)
               : method == "PUT" ? client.Put(path, headers, body, type)
                                 : client.Post(path, headers, body, type);
    if (!res) return {0, Json()};
    return {res->status, Json::parse(res->body, nullptr, false)};
  }

  std::string account(const std::string& name) {
    auto [status, json] = call("POST", "/v1/accounts", server_->adminToken(),
                               Json{{"name", name}}.dump());
    EXPECT_EQ(status, 201) << json.dump();
    return json.is_object() ? json.value("token", "") : "";
  }

  std::pair<int, Json> submit(const std::string& token, const Json& job) {
    return call("POST", "/v1/jobs", token, Json{{"job", job}}.dump());
  }

  // A job of one shell rank running `script` (with the test rank binary at hand).
  Json shellJob(const std::string& name, const std::string& script, Json extra = Json::object()) {
    Json job = {{"name", name}, {"framework", "generic"}, {"workdir", work_},
                {"command", {"/bin/sh", "-c", script}}};
    job.update(extra);
    return job;
  }

  Json waitFinal(const std::string& token, const std::string& id) {
    Json record;
    waitFor(
        [&] {
          auto [status, json] = call("GET", "/v1/jobs/" + id, token);
          record = json;
          std::string state = json.is_object() ? json.value("state", "") : "";
          return state == "succeeded" || state == "failed" || state == "stopped";
        },
        kDeadline, 50ms);
    return record;
  }

  std::string logOf(const std::string& token, const std::string& id) {
    const std::string url = server_->url();
    httplib::Client client("127.0.0.1", std::atoi(url.c_str() + url.rfind(':') + 1));
    auto res = client.Get("/v1/jobs/" + id + "/logs?rank=0",
                          {{"Authorization", "Bearer " + token}});
    return res ? res->body : "";
  }

  void expectServerHealthy() {
    auto [status, json] = call("GET", "/v1/whoami", alice_);
    EXPECT_EQ(status, 200) << "the server did not survive: " << server_->log();
    EXPECT_EQ(::kill(server_->pid(), 0), 0) << server_->log();
  }

  // The environment of a cohort command of the account of `token`, its config in `config`.
  std::vector<std::string> cliAs(const std::string& token, const std::string& config) const {
    return {"COHORT_SERVER=" + server_->url(), "COHORT_TOKEN=" + token, "XDG_CONFIG_HOME=" + config};
  }

  // The job's own network: where the server says its jobs have one.
  bool ownNetwork() const { return contains(server_->log(), "each job has a network of its own"); }

  static constexpr std::pair<const char*, const char*> kServerSecrets[] = {
      {"HF_TOKEN", "hf_attack_secret_1"},
      {"GITHUB_TOKEN", "ghp_attack_secret_2"},
      {"DATABASE_PASSWORD", "attack_secret_3"}};

  std::unique_ptr<ServerProcess> server_;
  bool isolated_ = false;
  bool separate_users_ = false;
  std::string work_, alice_, bob_, datasets_;
};

// `text` with each "@KEY@" replaced.
std::string fill(std::string text, const std::vector<std::pair<std::string, std::string>>& with) {
  for (const auto& [from, to] : with) {
    for (size_t at; (at = text.find(from)) != std::string::npos;) text.replace(at, from.size(), to);
  }
  return text;
}

std::vector<std::string> attempts(const std::string& log, const std::string& verdict) {
  std::vector<std::string> out;
  std::istringstream in(log);
  for (std::string line; std::getline(in, line);) {
    auto at = line.find("ATTEMPT ");
    if (at == std::string::npos) continue;
    std::string rest = line.substr(at + 8);
    auto space = rest.find(' ');
    if (space != std::string::npos && rest.compare(space + 1, verdict.size(), verdict) == 0) {
      out.push_back(rest);
    }
  }
  return out;
}

TEST_F(Attack, WorkdirInsideTheDataRootIsRefusedHoweverItIsSpelled) {
  const std::string root = server_->dataRoot();
  std::filesystem::create_directory_symlink(root + "/server", work_ + "/innocent");
  for (const std::string& workdir :
       {root + "/server", root + "/store", root + "/../" +
                                               std::filesystem::path(root).filename().string() +
                                               "/server",
        work_ + "/innocent"}) {
    auto [status, json] = submit(bob_, shellJob("steal", "cat admin.token", {{"workdir", workdir}}));
    EXPECT_EQ(status, 400) << workdir << ": " << json.dump();
    EXPECT_TRUE(contains(json.dump(), "workdir")) << json.dump();
  }
  expectServerHealthy();
}

TEST_F(Attack, AHostileRankReachesNothingThatIsNotItsOwn) {
  if (!isolated_) GTEST_SKIP() << "bubblewrap does not work here: jobs run without the sandbox";
  const std::string root = server_->dataRoot();
  // Alice has data and a job that runs while bob's attacks it.
  ASSERT_EQ(call("PUT", "/v1/store/alice-data/secret.txt", alice_, "alice-secret",
                 "application/octet-stream").first, 201);
  auto [a_status, a_json] = submit(alice_, shellJob("alice-job",
                                                    "echo $$ > /dev/null; exec sleep 120"));
  ASSERT_EQ(a_status, 201) << a_json.dump();
  const std::string alice_job = a_json.value("id", "");
  pid_t alice_rank = 0;
  ASSERT_TRUE(waitFor(
      [&] {
        for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
          std::string name = entry.path().filename();
          if (name.find_first_not_of("0123456789") != std::string::npos) continue;
          std::string cmd = readText(entry.path().string() + "/cmdline");
          if (contains(cmd, "sleep") && contains(cmd, "120")) {
            alice_rank = std::stoi(name);
            return true;
          }
        }
        return false;
      },
      kDeadline, 50ms));

  const pid_t server = server_->pid();
  const std::string url = server_->url();
  std::string script = R"SH(
try() { name=$1; shift; if "$@" >/tmp/attack.$$ 2>&1; then echo "ATTEMPT $name ok $(head -c 200 /tmp/attack.$$ | tr '\n' ' ')"; else echo "ATTEMPT $name blocked"; fi; }
try read-admin-token cat @ROOT@/server/admin.token
try read-database cat @ROOT@/server/cohort.db
try read-alice-bucket cat @ROOT@/store/alice@alice-data/secret.txt
try list-other-jobs sh -c 'ls @ROOT@/jobs | grep -v "^$COHORT_JOB_ID$" | grep .'
try read-server-environ cat /proc/@SERVER@/environ
try read-server-root ls /proc/@SERVER@/root/
try signal-server kill -0 @SERVER@
try signal-alice-rank kill -0 @ALICE@
try ptrace-server python3 -c "import ctypes,sys; sys.exit(0 if ctypes.CDLL(None).ptrace(16, @SERVER@, 0, 0) == 0 else 1)"
try see-other-processes sh -c 'test $(ls /proc | grep -c "^[0-9]") -gt 8'
try write-own-plan sh -c 'echo x >> $COHORT_OUTPUT_DIR/../plan.json'
try write-own-events sh -c 'echo "{\"t\":\"x\"}" >> $COHORT_OUTPUT_DIR/../events.jsonl'
try write-own-log sh -c 'echo forged > $COHORT_LOG_DIR/worker-0.log'
try api-without-token python3 -c "import urllib.request; urllib.request.urlopen('@URL@/v1/jobs')"
try read-report-token cat $COHORT_OUTPUT_DIR/../report.token
try forge-own-result python3 -c "import urllib.request as u; u.urlopen(u.Request('@URL@/v1/jobs/$COHORT_JOB_ID/report', data=b'{\"seq\":1,\"events\":[],\"result\":{\"state\":\"succeeded\",\"exit_code\":0}}', headers={'Authorization': 'Bearer cohort_guess', 'Content-Type': 'application/json'}))"
echo "IDENTITY $(id -u)"
ln -s @ROOT@/server/admin.token $COHORT_OUTPUT_DIR/token-link
ln -s @ROOT@/store/alice@alice-data $COHORT_OUTPUT_DIR/alice-link
true
)SH";
  for (const auto& [from, to] :
       std::vector<std::pair<std::string, std::string>>{{"@ROOT@", root},
                                                        {"@SERVER@", std::to_string(server)},
                                                        {"@ALICE@", std::to_string(alice_rank)},
                                                        {"@URL@", url}}) {
    for (size_t at; (at = script.find(from)) != std::string::npos;) script.replace(at, from.size(), to);
  }
  auto [status, json] =
      submit(bob_, shellJob("hostile", script,
                            {{"outputs", {{{"source", "output/"},
                                           {"target", "store://bob-loot/{job}/"}}}}}));
  ASSERT_EQ(status, 201) << json.dump();
  const std::string id = json.value("id", "");
  Json record = waitFinal(bob_, id);
  const std::string log = logOf(bob_, id);
  EXPECT_TRUE(attempts(log, "ok").empty())
      << "attempts that got through:\n" << ::testing::PrintToString(attempts(log, "ok"))
      << "\nlog:\n" << log;
  EXPECT_EQ(attempts(log, "blocked").size(), 16u) << log;
  EXPECT_FALSE(contains(log, "alice-secret")) << log;
  const std::string job_dir = root + "/jobs/" + id;
  EXPECT_FALSE(contains(readText(job_dir + "/events.jsonl"), "\"t\":\"x\"")) << "events forged";
  EXPECT_FALSE(contains(readText(job_dir + "/plan.json"), "}\nx")) << "plan forged";
  // The output copy refuses the links, says which, and fails the job; nothing reached the bucket.
  EXPECT_EQ(record.value("state", ""), "failed") << record.dump();
  EXPECT_TRUE(contains(record.dump(), "symbolic link")) << record.dump();
  auto [loot_status, loot] = call("GET", "/v1/store/bob-loot/" + id + "/token-link", bob_);
  EXPECT_NE(loot_status, 200) << loot.dump();
  if (separate_users_) {
    auto at = log.find("IDENTITY ");
    ASSERT_NE(at, std::string::npos) << log;
    EXPECT_NE(std::atoi(log.c_str() + at + 9), 0) << "bob's rank ran as root: " << log;
  }
  // Alice's job was not touched.
  auto [alice_status, alice_record] = call("GET", "/v1/jobs/" + alice_job, alice_);
  EXPECT_EQ(alice_record.value("state", ""), "running") << alice_record.dump();
  expectServerHealthy();
  call("POST", "/v1/jobs/" + alice_job + "/stop", alice_);
  waitFinal(alice_, alice_job);
}

// Buckets belong to accounts. Bob reaches alice's "models" by no spelling: his own name for it,
// hers without a share, "..", an encoded '@' or '/', in a request or in a job file, or (in the
// sandbox) by its path. A share then opens what it names, no more.
TEST_F(Attack, AnotherAccountsBucketIsReachedByNoSpelling) {
  const std::string url = server_->url();
  auto raw = [&](const std::string& method, const std::string& path, const std::string& token,
                 const std::string& body = "") -> std::pair<int, std::string> {
    httplib::Client client("127.0.0.1", std::atoi(url.c_str() + url.rfind(':') + 1));
    httplib::Headers headers{{"Authorization", "Bearer " + token}};
    auto res = method == "GET" ? client.Get(path, headers)
                               : client.Put(path, headers, body, "application/octet-stream");
    return res ? std::pair{res->status, res->body} : std::pair{0, std::string()};
  };
  ASSERT_EQ(raw("PUT", "/v1/store/models/secret.txt", alice_, "alice-secret").first, 201);
  ASSERT_EQ(raw("PUT", "/v1/store/models/run1/model.txt", alice_, "alice-model").first, 201);
  ASSERT_EQ(raw("PUT", "/v1/store/models/mine.txt", bob_, "bob-own").first, 201);

  for (const std::string path :
       {"/v1/store/alice@models/secret.txt",
        "/v1/store/alice%40models/secret.txt", "/v1/store/models/../alice@models/secret.txt",
        "/v1/store/models/..%2F..%2Falice@models%2Fsecret.txt",
        "/v1/store/bob@models/%2E%2E/alice@models/secret.txt",
        "/v1/store/models/..%2Fmodels%2Fsecret.txt", "/v1/store/Alice@models/secret.txt",
        "/v1/store/@models/secret.txt", "/v1/store/bob@alice@models/secret.txt",
        "/v1/store/alice@models?list=1", "/v1/store/alice@models/run1/model.txt"}) {
    auto [got, body] = raw("GET", path, bob_);
    EXPECT_NE(got, 200) << path << ": " << body;
    EXPECT_FALSE(contains(body, "alice-")) << path << ": " << body;
    auto [put, answer] = raw("PUT", path, bob_, "bob-was-here");
    EXPECT_TRUE(put == 404 || put == 400) << path << ": " << put << " " << answer;
  }
  for (const auto& [field, value] : std::vector<std::pair<std::string, std::string>>{
           {"inputs", "store://alice@models/secret.txt"},
           {"inputs", "store://models/../alice@models/secret.txt"},
           {"inputs", "store://bob@models/../alice@models"},
           {"outputs", "store://alice@models/{job}/"},
           {"outputs", "store://alice@models/"}}) {
    Json data = field == "inputs" ? Json::array({{{"source", value}, {"target", "in"}}})
                                  : Json::array({{{"source", "output/"}, {"target", value}}});
    auto [status, json] = submit(bob_, shellJob("steal", "true", {{field, data}}));
    EXPECT_TRUE(status == 404 || status == 400) << value << ": " << json.dump();
    EXPECT_TRUE(contains(json.dump(), field + "[0]")) << json.dump();
  }

  // Bob's job names "models": his own; where its sandbox hides the store, alice's is not at its
  // path either.
  const std::string root = server_->dataRoot();
  std::string script = fill(R"SH(
cat $COHORT_WORK_DIR/copied/*
cat @ROOT@/store/alice@models/secret.txt
echo output > $COHORT_OUTPUT_DIR/out.txt
true
)SH", {{"@ROOT@", root}});
  auto [status, json] = submit(
      bob_, shellJob("own-models", script,
                     {{"inputs", {{{"source", "store://models"}, {"target", "copied"}}}},
                      {"outputs",
                       {{{"source", "output/"}, {"target", "store://models/{job}/"}}}}}));
  ASSERT_EQ(status, 201) << json.dump();
  const std::string id = json.value("id", "");
  Json record = waitFinal(bob_, id);
  EXPECT_EQ(record.value("state", ""), "succeeded") << record.dump();
  const std::string log = logOf(bob_, id);
  EXPECT_TRUE(contains(log, "bob-own")) << log;
  if (isolated_) {
    EXPECT_FALSE(contains(log, "alice-")) << log;
  }
  EXPECT_EQ(raw("GET", "/v1/store/models/" + id + "/out.txt", bob_).second, "output\n");
  EXPECT_EQ(raw("GET", "/v1/store/models/" + id + "/out.txt", alice_).first, 404);

  // A share opens the prefix it names, read-only, under alice's name.
  ASSERT_EQ(call("POST", "/v1/shares", alice_,
                 Json{{"prefix", "store://models/run1"}, {"with", "bob"}, {"access", "read"}}
                     .dump())
                .first,
            201);
  EXPECT_EQ(raw("GET", "/v1/store/alice@models/run1/model.txt", bob_),
            (std::pair<int, std::string>{200, "alice-model"}));
  EXPECT_EQ(raw("GET", "/v1/store/alice@models/secret.txt", bob_).first, 404);
  EXPECT_EQ(raw("GET", "/v1/store/models/run1/model.txt", bob_).first, 404);
  EXPECT_EQ(raw("PUT", "/v1/store/alice@models/run1/model.txt", bob_, "x").first, 403);
  // Bob's own "models" takes his writes under its name; nothing of alice's changed.
  EXPECT_EQ(raw("PUT", "/v1/store/models/secret.txt", bob_, "bob-was-here").first, 201);
  EXPECT_EQ(raw("GET", "/v1/store/models/secret.txt", bob_).second, "bob-was-here");
  EXPECT_EQ(raw("GET", "/v1/store/models/secret.txt", alice_).second, "alice-secret");
  EXPECT_EQ(raw("GET", "/v1/store/models/run1/model.txt", alice_).second, "alice-model");
  auto [listed, files] = call("GET", "/v1/store/models?list=1", alice_);
  EXPECT_EQ(files["files"].size(), 2u) << files.dump();
  // A link into the store would be read through by the rank's own identity, which cannot read
  // the server's store: refused at submission, naming the input, not a failure in the sandbox.
  if (::geteuid() == 0) {
    auto [linked, why] = submit(
        bob_, shellJob("linked", "true",
                       {{"inputs", {{{"source", "store://models"}, {"target", "in"},
                                     {"mode", "link"}}}}}));
    EXPECT_EQ(linked, 400) << why.dump();
    EXPECT_TRUE(contains(why.dump(), "inputs[0].mode")) << why.dump();
  }
  expectServerHealthy();
}

// /tmp, /var/tmp, /run/lock and /dev/shm are writable by everyone on the machine: what one job
// leaves there another account's job would read, and a link planted there it would follow. A
// sandboxed job has its own on each node, shared by its ranks there, gone when it ends.
TEST_F(Attack, WhatAJobLeavesInTmpOrDevShmNoOtherJobSees) {
  if (!isolated_) GTEST_SKIP() << "bubblewrap does not work here: jobs run without the sandbox";
  const std::string tag = "cohort-attack-" + std::to_string(::getpid());
  std::string leave = R"SH(
if [ "$COHORT_LOCAL_RANK" = 0 ]; then
  for d in /tmp /var/tmp /run/lock /dev/shm; do echo alice-secret > $d/@TAG@ || echo "WRITE $d failed"; done
  ln -s /etc/hostname /tmp/@TAG@-plant
else
  for i in $(seq 200); do [ -f /tmp/@TAG@ ] && [ -f /dev/shm/@TAG@ ] && break; sleep 0.1; done
  cat /tmp/@TAG@ /var/tmp/@TAG@ /run/lock/@TAG@ /dev/shm/@TAG@ | grep -c alice-secret | sed 's/^/SHARED /'
fi
)SH";
  for (size_t at; (at = leave.find("@TAG@")) != std::string::npos;) leave.replace(at, 5, tag);
  auto [a_status, a_json] =
      submit(alice_, shellJob("leaves", leave, {{"roles", {{"worker", {{"procs_per_node", 2}}}}}}));
  ASSERT_EQ(a_status, 201) << a_json.dump();
  const std::string alice_job = a_json.value("id", "");
  Json alice_record = waitFinal(alice_, alice_job);
  EXPECT_EQ(alice_record.value("state", ""), "succeeded") << alice_record.dump();
  const std::string url = server_->url();
  httplib::Client client("127.0.0.1", std::atoi(url.c_str() + url.rfind(':') + 1));
  auto rank1 =
      client.Get("/v1/jobs/" + alice_job + "/logs?rank=1", {{"Authorization", "Bearer " + alice_}});
  ASSERT_TRUE(rank1);
  EXPECT_TRUE(contains(rank1->body, "SHARED 4"))
      << "the ranks of one node share them: " << rank1->body << logOf(alice_, alice_job);
  // Nothing of it is on the machine, and the job's own are gone with it.
  for (const char* dir : {"/tmp/", "/var/tmp/", "/run/lock/", "/dev/shm/"}) {
    EXPECT_FALSE(std::filesystem::exists(std::string(dir) + tag)) << dir;
  }
  EXPECT_FALSE(std::filesystem::is_symlink("/tmp/" + tag + "-plant"));
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm")) {
    EXPECT_FALSE(contains(entry.path().string(), alice_job)) << entry.path();
  }
  EXPECT_FALSE(std::filesystem::exists(server_->dataRoot() + "/jobs/" + alice_job +
                                       "/work/node0/.scratch/tmp"));

  std::string look = R"SH(
for f in /tmp/@TAG@ /var/tmp/@TAG@ /run/lock/@TAG@ /dev/shm/@TAG@ /tmp/@TAG@-plant; do
  if cat $f >/dev/null 2>&1; then echo "ATTEMPT read-$f ok"; else echo "ATTEMPT read-$f blocked"; fi
done
)SH";
  for (size_t at; (at = look.find("@TAG@")) != std::string::npos;) look.replace(at, 5, tag);
  auto [b_status, b_json] = submit(bob_, shellJob("looks", look));
  ASSERT_EQ(b_status, 201) << b_json.dump();
  const std::string bob_job = b_json.value("id", "");
  waitFinal(bob_, bob_job);
  const std::string log = logOf(bob_, bob_job);
  EXPECT_TRUE(attempts(log, "ok").empty()) << log;
  EXPECT_EQ(attempts(log, "blocked").size(), 5u) << log;
  expectServerHealthy();
}

// A debugged rank's debugpy listens on loopback without a password and runs what it is sent:
// on a server that keeps accounts apart, no account may start one.
// Where accounts are kept apart but their jobs share the machine's network, a paused rank's
// debugger (no password, on its node's loopback) would be in every other job's reach: refused.
TEST_F(Attack, ADebuggedJobIsRefusedWhereAccountsShareTheMachinesNetwork) {
  if (!separate_users_) GTEST_SKIP() << "the server is not root: accounts share its user";
  std::string why;
  auto shared = startServer(&why, {"--cpus", "2", "--job-network", "host"});
  ASSERT_TRUE(shared) << why;
  const std::string url = shared->url();
  httplib::Client client("127.0.0.1", std::atoi(url.c_str() + url.rfind(':') + 1));
  auto made = client.Post("/v1/accounts", {{"Authorization", "Bearer " + shared->adminToken()}},
                          Json{{"name", "carol"}}.dump(), "application/json");
  ASSERT_TRUE(made && made->status == 201);
  const std::string carol = Json::parse(made->body).value("token", "");
  const Json job = shellJob("dbg", "true", {{"command", {"/usr/bin/python3", "-c", "1"}},
                                           {"debug", {{"ranks", {0}}}}});
  auto res = client.Post("/v1/jobs", {{"Authorization", "Bearer " + carol}},
                         Json{{"job", job}}.dump(), "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 409) << res->body;
  EXPECT_TRUE(contains(res->body, "debug: a paused rank's debugger listens")) << res->body;
  EXPECT_TRUE(contains(res->body, "--job-network host")) << res->body;
}

// An HTTP Upgrade to `path` as `token`: the answer's status line and what followed, raw.
std::string upgrade(const std::string& url, const std::string& path, const std::string& token) {
  const int port = std::atoi(url.c_str() + url.rfind(':') + 1);
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(port));
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) != 0) {
    ::close(fd);
    return "";
  }
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  const std::string req = "GET " + path + " HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
                          token + "\r\nConnection: Upgrade\r\nUpgrade: cohort-tunnel\r\n\r\n";
  (void)!::write(fd, req.data(), req.size());
  std::string answer;
  char buf[4096];
  ssize_t n;
  while (answer.find("\r\n\r\n") == std::string::npos && (n = ::read(fd, buf, sizeof buf)) > 0) {
    answer.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return answer;
}

// Whether something on this machine's own network accepts a connection to 127.0.0.1:`port`.
bool loopbackAccepts(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(port));
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) == 0;
  ::close(fd);
  return ok;
}

// A paused rank's debugger listens in its job's own network: its account attaches a real DAP
// client through the server's tunnel (cohort debug --attach), steps and reads locals; another
// account reaches it neither through the API (as itself, with the job's id and rank) nor over
// the network (from the machine, or from a job of its own), and an account holds at most its
// --max-tunnels of them.
TEST_F(Attack, APausedRanksDebuggerIsReachedOnlyByItsAccountThroughTheServer) {
  if (!separate_users_ || !isolated_) GTEST_SKIP() << "needs root and the sandbox";
  REQUIRE("/usr/bin/python3 -c 'import debugpy'", "Debian's python3-debugpy is not installed");
  const std::string program = work_ + "/paused.py";
  std::ofstream(program) << "def step(n):\n"
                            "    total = n * 2\n"       // line 2: the breakpoint
                            "    total += 1\n"          // line 3: where next stops
                            "    return total\n"
                            "print('result', step(20))\n";
  ::chmod(program.c_str(), 0644);
  auto [status, json] = submit(alice_, shellJob("paused", "", {{"command", {"/usr/bin/python3", program}},
                                                               {"debug", {{"ranks", {0}}}}}));
  ASSERT_EQ(status, 201) << json.dump();
  const std::string id = json.value("id", "");
  const std::vector<std::string> as_alice = {"COHORT_SERVER=" + server_->url(),
                                             "COHORT_TOKEN=" + alice_};
  const std::vector<std::string> as_bob = {"COHORT_SERVER=" + server_->url(),
                                           "COHORT_TOKEN=" + bob_};
  Json listed;
  const bool waiting = waitFor(
      [&] {
        RunResult r = CohortProcess({"debug", id, "--json"}, as_alice).wait();
        listed = Json::parse(r.out, nullptr, false);
        return listed.is_object() && listed["ranks"].size() == 1 &&
               listed["ranks"][0]["state"] == "waiting";
      },
      kDeadline, 200ms);
  ASSERT_TRUE(waiting) << listed << server_->log();
  const int rank_port = listed["ranks"][0]["port"].get<int>();

  // Bob, through the API: the job does not exist for him, tunnel or list.
  const std::string tunnel = "/v1/jobs/" + id + "/debug/0/tunnel";
  const std::string refused = upgrade(server_->url(), tunnel, bob_);
  EXPECT_TRUE(contains(refused, " 404 ")) << refused;
  EXPECT_TRUE(contains(upgrade(server_->url(), tunnel, ""), " 401 "));
  RunResult bob_attach = CohortProcess({"debug", id, "--attach", "0"}, as_bob).wait();
  EXPECT_NE(bob_attach.exit_code, 0) << bob_attach.out;
  EXPECT_TRUE(contains(bob_attach.err, "not found")) << bob_attach.err;
  // Bob, over the network: from the machine's loopback, and from a rank of his own job, at
  // the port and at every address a node of a job has.
  EXPECT_FALSE(loopbackAccepts(rank_port));
  const std::string probe =
      "import socket\n"
      "for host in ['127.0.0.1', '10.88.0.1', '10.88.0.2', '10.88.0.3']:\n"
      "    s = socket.socket(); s.settimeout(2)\n"
      "    try:\n"
      "        s.connect((host, " + std::to_string(rank_port) + ")); print('reached', host)\n"
      "    except OSError as e:\n"
      "        print('refused', host, e)\n";
  auto [ps, pj] = submit(bob_, shellJob("probe", "", {{"command", {"/usr/bin/python3", "-c", probe}}}));
  ASSERT_EQ(ps, 201) << pj.dump();
  waitFinal(bob_, pj.value("id", ""));
  const std::string probed = logOf(bob_, pj.value("id", ""));
  EXPECT_FALSE(contains(probed, "reached")) << probed;
  EXPECT_TRUE(contains(probed, "refused 127.0.0.1")) << probed;

  // Alice: a local port carried through the server; a real DAP client stops at the
  // breakpoint, steps over a line and reads the locals.
  const int local_port = freePort();
  CohortProcess attached({"debug", id, "--attach", "0", "--port", std::to_string(local_port)},
                         as_alice);
  ASSERT_TRUE(waitFor([&] { return loopbackAccepts(local_port); }, 30s, 50ms));
  const std::string out = shellOutput(
      "/usr/bin/python3 " + sourceDir() + "/tests/integration/dap_client.py --port " +
      std::to_string(local_port) + " --breakpoint " + program + ":2 --evaluate n --step 2>&1");
  Json dap = Json::parse(out.substr(std::min(out.find('{'), out.size())), nullptr, false);
  ASSERT_TRUE(dap.is_object()) << out << server_->log();
  EXPECT_EQ(dap["stopped"], "breakpoint") << out;
  EXPECT_EQ(dap["line"], 2) << out;
  EXPECT_EQ(dap["value"], "20") << out;
  EXPECT_EQ(dap["stepped_line"], 3) << out;
  EXPECT_EQ(dap["locals"]["n"], "20") << out;
  EXPECT_EQ(dap["locals"]["total"], "40") << out;
  Json record = waitFinal(alice_, id);
  EXPECT_EQ(record.value("state", ""), "succeeded") << record.dump();
  EXPECT_TRUE(contains(logOf(alice_, id), "result 41")) << logOf(alice_, id);
  // Once the job has ended there is nothing to tunnel to.
  EXPECT_TRUE(contains(upgrade(server_->url(), tunnel, alice_), " 409 "));
  expectServerHealthy();
}

// The first process of user `uid` whose command line names `word` on this machine, 0 when none
// runs (other servers on the machine may give their accounts the same uids: name something of
// this test's own).
pid_t processOf(uid_t uid, const std::string& word) {
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    struct stat st {};
    if (::stat(entry.path().c_str(), &st) != 0 || st.st_uid != uid) continue;
    if (contains(readText(entry.path().string() + "/cmdline"), word)) return std::stoi(name);
  }
  return 0;
}

bool processOfUser(uid_t uid, const std::string& word) { return processOf(uid, word) != 0; }

// A session runs a real OpenSSH sshd as its account, in its sandbox and its own network: its
// account logs in with a real ssh through the server (cohort session ssh, and ssh with the
// ProxyCommand block that --config prints), while another account reaches it neither through
// the API (as itself) nor over the network (from the machine, or from a job of its own); once
// stopped, nothing of it is left running.
TEST_F(Attack, ASessionsSshServerIsReachedOnlyByItsAccountThroughTheServer) {
  if (!separate_users_ || !isolated_ || !ownNetwork()) {
    GTEST_SKIP() << "needs root, the sandbox and networks of the jobs' own";
  }
  REQUIRE("test -x /usr/sbin/sshd && command -v ssh >/dev/null && test -e /usr/lib/x86_64-linux-gnu/libnss_wrapper.so",
          "OpenSSH's server and client and libnss-wrapper are not installed");
  const std::string config = tempDir();
  const std::vector<std::string> as_alice = cliAs(alice_, config);
  const std::vector<std::string> as_bob = cliAs(bob_, config);
  RunResult started = CohortProcess({"session", "start", "--name", "dev", "--cpus", "1",
                                     "--memory", "1Gi"}, as_alice).wait();
  ASSERT_EQ(started.exit_code, 0) << started.out << started.err << server_->log();
  const std::string id(trim(started.out));
  Json listed;
  ASSERT_TRUE(waitFor(
      [&] {
        RunResult r = CohortProcess({"session", "ls", "--json"}, as_alice).wait();
        listed = Json::parse(r.out, nullptr, false);
        return listed.is_array() && listed.size() == 1 && listed[0]["state"] == "running";
      },
      kDeadline, 200ms))
      << listed << server_->log();
  EXPECT_EQ(listed[0]["id"], id);
  EXPECT_EQ(listed[0]["kind"], "session");

  // Alice: a real ssh, through the server, runs a command in the session as her identity.
  RunResult ssh = CohortProcess({"session", "ssh", "dev", "--", "echo", "in-session", "$(id -u)",
                                 "$COHORT_JOB_ID", "$(whoami)"}, as_alice).wait();
  ASSERT_EQ(ssh.exit_code, 0) << ssh.out << ssh.err << logOf(alice_, id);
  const std::vector<std::string> words = split(std::string(trim(ssh.out)), ' ');
  ASSERT_EQ(words.size(), 4u) << ssh.out;
  EXPECT_EQ(words[0], "in-session");
  const uid_t alice_uid = static_cast<uid_t>(std::stoul(words[1]));
  EXPECT_NE(alice_uid, 0u);
  EXPECT_EQ(words[2], id);
  EXPECT_EQ(words[3], "alice");
  // The same with plain ssh and the Host block of --config, as VS Code and PyCharm use it.
  RunResult block = CohortProcess({"session", "ssh", "dev", "--config"}, as_alice).wait();
  ASSERT_EQ(block.exit_code, 0) << block.err;
  EXPECT_TRUE(contains(block.out, "ProxyCommand ")) << block.out;
  const std::string ssh_config = config + "/ssh_config";
  std::ofstream(ssh_config) << block.out;
  const std::string plain = shellOutput(
      "env COHORT_SERVER=" + server_->url() + " COHORT_TOKEN=" + alice_ + " XDG_CONFIG_HOME=" +
      config + " ssh -F " + ssh_config + " -o BatchMode=yes cohort-dev 'echo plain-$((6*7))' 2>&1");
  EXPECT_TRUE(contains(plain, "plain-42")) << plain;

  // Bob, through the API: the session does not exist for him, tunnel or list.
  const std::string tunnel = "/v1/jobs/" + id + "/session/ssh/tunnel";
  EXPECT_TRUE(contains(upgrade(server_->url(), tunnel, bob_), " 404 "));
  EXPECT_TRUE(contains(upgrade(server_->url(), tunnel, ""), " 401 "));
  RunResult bob_ssh = CohortProcess({"session", "ssh", "--stdio", id}, as_bob).wait();
  EXPECT_EQ(bob_ssh.exit_code, 2) << bob_ssh.err;
  RunResult bob_ls = CohortProcess({"session", "ls", "--json"}, as_bob).wait();
  EXPECT_EQ(Json::parse(bob_ls.out, nullptr, false), Json::array()) << bob_ls.out;
  RunResult bob_stop = CohortProcess({"session", "stop", id}, as_bob).wait();
  EXPECT_EQ(bob_stop.exit_code, 2) << bob_stop.err;
  // Bob, over the network: from the machine's loopback, and from a rank of his own job.
  EXPECT_FALSE(loopbackAccepts(2222));
  const std::string probe =
      "import socket\n"
      "for host in ['127.0.0.1', '10.88.0.1', '10.88.0.2', '10.88.0.3']:\n"
      "    s = socket.socket(); s.settimeout(2)\n"
      "    try:\n"
      "        s.connect((host, 2222)); print('reached', host)\n"
      "    except OSError as e:\n"
      "        print('refused', host, e)\n";
  auto [ps, pj] = submit(bob_, shellJob("probe", "", {{"command", {"/usr/bin/python3", "-c", probe}}}));
  ASSERT_EQ(ps, 201) << pj.dump();
  waitFinal(bob_, pj.value("id", ""));
  const std::string probed = logOf(bob_, pj.value("id", ""));
  EXPECT_FALSE(contains(probed, "reached")) << probed;
  EXPECT_TRUE(contains(probed, "refused 127.0.0.1")) << probed;

  // Stopped: the session ends, and nothing of it runs on.
  EXPECT_TRUE(processOfUser(alice_uid, id));  // its sshd, as alice
  RunResult stopped = CohortProcess({"session", "stop", "dev"}, as_alice).wait();
  EXPECT_EQ(stopped.exit_code, 0) << stopped.err;
  Json record = waitFinal(alice_, id);
  EXPECT_EQ(record.value("state", ""), "stopped") << record.dump();
  EXPECT_TRUE(waitFor([&] { return !processOfUser(alice_uid, id); }, 10s, 100ms));
  EXPECT_TRUE(contains(upgrade(server_->url(), tunnel, alice_), " 409 "));
  expectServerHealthy();
}

// Where process `pid` is, as tests/integration/session_run.py reports it for a rank: its PID
// and network namespaces, its uid and its cpu and memory cgroups.
std::string whereIs(pid_t pid, uid_t uid) {
  const std::string proc = "/proc/" + std::to_string(pid);
  std::string cgroups;
  for (const std::string& line : split(readText(proc + "/cgroup"), '\n')) {
    if (!contains(line, ":cpu,") && !contains(line, ":memory:") && !startsWith(line, "0::")) {
      continue;
    }
    cgroups += (cgroups.empty() ? "" : ";") + line;
  }
  std::error_code ec;
  return std::filesystem::read_symlink(proc + "/ns/pid", ec).string() + " " +
         std::filesystem::read_symlink(proc + "/ns/net", ec).string() + " uid " +
         std::to_string(uid) + " cgroup " + cgroups;
}

// A distributed run started inside a session — `cohort run` in its shell, cohort.run from
// Python, a notebook's %%cohort cell — runs there with no setup: its ranks are the session
// user's processes in the session's PID namespace, cgroup and network, as the machine (not the
// session) says, and its state is in the session's home, removed with it. What its ranks try
// against the server — its data root, the session's record, its binary, its API — fails.
TEST_F(Attack, ADistributedRunInASessionRunsInsideTheSessionAndNowhereElse) {
  if (!separate_users_ || !isolated_ || !ownNetwork()) {
    GTEST_SKIP() << "needs root, the sandbox and networks of the jobs' own";
  }
#if defined(__SANITIZE_ADDRESS__)
  // A login preloads libnss_wrapper (its passwd entry), which opens libc with RTLD_DEEPBIND:
  // a cohort built with ASan cannot start there. The normal build runs this test.
  GTEST_SKIP() << "cohort built with ASan cannot run under libnss_wrapper (RTLD_DEEPBIND)";
#endif
  REQUIRE("test -x /usr/sbin/sshd && command -v ssh >/dev/null && test -e /usr/lib/x86_64-linux-gnu/libnss_wrapper.so",
          "OpenSSH's server and client and libnss-wrapper are not installed");
  REQUIRE("/usr/bin/python3 -c 'import torch.distributed'",
          "Debian's python3-torch is not installed");
  const std::string config = tempDir();
  const std::vector<std::string> as_alice = {"COHORT_SERVER=" + server_->url(),
                                             "COHORT_TOKEN=" + alice_, "XDG_CONFIG_HOME=" + config};
  RunResult started = CohortProcess({"session", "start", "--name", "dev", "--cpus", "2",
                                     "--memory", "6Gi"}, as_alice).wait();
  ASSERT_EQ(started.exit_code, 0) << started.out << started.err << server_->log();
  const std::string id(trim(started.out));
  auto inSession = [&](const std::string& command) {
    return CohortProcess({"session", "ssh", "dev", "--", command}, as_alice).wait(300s);
  };
  // What a login is given: cohort on PATH, the session's allocation, a data root of its own.
  RunResult login = inSession(
      "id -u; command -v cohort; echo $COHORT_CPUS $COHORT_GPUS $COHORT_MEMORY; "
      "echo $COHORT_DATA_ROOT; echo $HOME; echo ${MASTER_ADDR:-none} $OMP_NUM_THREADS");
  ASSERT_EQ(login.exit_code, 0) << login.out << login.err << logOf(alice_, id);
  const std::vector<std::string> given = split(std::string(trim(login.out)), '\n');
  ASSERT_EQ(given.size(), 6u) << login.out;
  const uid_t alice_uid = static_cast<uid_t>(std::stoul(given[0]));
  EXPECT_EQ(given[1], "/tmp/.cohort-session-" + id + "/bin/cohort") << login.out;
  EXPECT_EQ(given[2], "2 0 " + std::to_string(6LL << 30)) << login.out;
  const std::string home = given[4];
  EXPECT_EQ(given[3], home + "/.cohort") << login.out;
  EXPECT_TRUE(startsWith(home, server_->dataRoot() + "/")) << login.out;
  EXPECT_EQ(given[5], "none 2") << login.out;
  // The session as the machine sees it: its sshd (rank 0), run as alice.
  const pid_t sshd = processOf(alice_uid, id + "/sshd_config");
  ASSERT_GT(sshd, 0) << "no sshd of the session";
  const std::string inside = whereIs(sshd, alice_uid);
  ASSERT_FALSE(contains(inside, std::filesystem::read_symlink("/proc/self/ns/net").string()))
      << "the session shares the machine's network: " << inside;
  // Each rank says where it is: "<tag> rank R sum 30 <where>".
  auto expectInside = [&](const std::string& out, const std::string& tag) {
    for (int rank = 0; rank < 2; ++rank) {
      const std::string head = tag + " rank " + std::to_string(rank) + " sum 30 ";
      const size_t at = out.find(head);
      ASSERT_NE(at, std::string::npos) << out;
      const size_t end = out.find_first_of("\r\n", at);
      EXPECT_EQ(out.substr(at + head.size(), end - at - head.size()), inside) << tag;
    }
  };
  const std::string script = sourceDir() + "/tests/integration/session_run.py";

  // (a) cohort run, the CLI, in the session's shell.
  RunResult cli = inSession(
      "cd && cohort run --nproc-per-node 2 -- /usr/bin/python3 -c 'import sys; "
      "sys.path.insert(0, \"" + sourceDir() + "/tests/integration\"); "
      "import session_run; session_run.allreduce(\"cli\")'");
  EXPECT_EQ(cli.exit_code, 0) << cli.out << cli.err;
  expectInside(cli.out, "cli");
  EXPECT_TRUE(contains(cli.err, "cohort: job directory " + home + "/.cohort/jobs/")) << cli.err;

  // (b) cohort.run from Python, with each rank's result back.
  RunResult sdk = inSession("cd && /usr/bin/python3 " + script + " sdk");
  EXPECT_EQ(sdk.exit_code, 0) << sdk.out << sdk.err;
  expectInside(sdk.out, "sdk");
  EXPECT_TRUE(contains(sdk.out, "state succeeded 0")) << sdk.out;
  EXPECT_TRUE(contains(sdk.out, "result {\"rank\": 0, \"sum\": 30.0}")) << sdk.out;
  EXPECT_TRUE(contains(sdk.out, "result {\"rank\": 1, \"sum\": 30.0}")) << sdk.out;
  EXPECT_TRUE(contains(sdk.out, "job_dir " + home + "/.cohort/jobs/")) << sdk.out;

  // (c) a notebook's %%cohort cell, executed with nbclient against an ipykernel in the session.
  if (have("/usr/bin/python3 -c 'import nbclient, nbformat, ipykernel'")) {
    RunResult book = inSession("cd && /usr/bin/python3 " + script + " notebook");
    EXPECT_EQ(book.exit_code, 0) << book.out << book.err;
    expectInside(book.out, "notebook");
    EXPECT_TRUE(contains(book.out, "cell state succeeded")) << book.out;
  } else {
    std::fprintf(stderr, "not checked: a notebook (python3-nbclient, python3-ipykernel)\n");
  }

  // More ranks than the session's CPUs run, sharing them, and cohort says so.
  RunResult many = inSession("cd && cohort run --nproc-per-node 3 -- /bin/true");
  EXPECT_EQ(many.exit_code, 0) << many.err;
  EXPECT_TRUE(contains(many.err, "3 rank(s) share the 2 CPU(s) this session was given"))
      << many.err;

  // A rank of a run in the session against the server: every attempt fails.
  const std::string url = server_->url();
  RunResult escape = inSession(
      "cd && cohort run -- /usr/bin/python3 " + script + " escape " + server_->dataRoot() + " " +
      id + " " + url.substr(url.rfind(':') + 1));
  EXPECT_EQ(escape.exit_code, 0) << escape.out << escape.err;
  for (const char* name : {"data-root", "jobs", "record", "binary", "api"}) {
    EXPECT_TRUE(contains(escape.out, std::string("ATTEMPT ") + name + " blocked")) << escape.out;
  }
  EXPECT_FALSE(std::filesystem::exists(server_->dataRoot() + "/planted"));
  EXPECT_FALSE(std::filesystem::exists(server_->dataRoot() + "/jobs/planted"));
  // Nor may the session's user point a run of its own at the server's data root.
  RunResult rooted =
      inSession("cd && cohort run --data-root " + server_->dataRoot() + " -- /bin/true");
  EXPECT_NE(rooted.exit_code, 0) << rooted.err;
  EXPECT_FALSE(std::filesystem::exists(server_->dataRoot() + "/jobs/planted"));

  // Stopped: nothing of the runs runs on; their job directories go with the session's record.
  RunResult stopped = CohortProcess({"session", "stop", "dev"}, as_alice).wait();
  EXPECT_EQ(stopped.exit_code, 0) << stopped.err;
  Json record = waitFinal(alice_, id);
  EXPECT_EQ(record.value("state", ""), "stopped") << record.dump();
  EXPECT_TRUE(waitFor([&] { return processOf(alice_uid, id) == 0; }, 10s, 100ms));
  EXPECT_EQ(processOf(alice_uid, "session_run"), 0);
  RunResult deleted = CohortProcess({"delete", id}, as_alice).wait();
  EXPECT_EQ(deleted.exit_code, 0) << deleted.err;
  EXPECT_FALSE(std::filesystem::exists(home + "/.cohort")) << home;
  expectServerHealthy();
}

// A session is kept while a connection into it is open, and ends once none has been for its
// idle timeout, saying so; its record never shows the host key it was started with.
TEST_F(Attack, ASessionEndsAtItsIdleTimeoutAndKeepsItsHostKey) {
  if (!separate_users_ || !isolated_ || !ownNetwork()) {
    GTEST_SKIP() << "needs root, the sandbox and networks of the jobs' own";
  }
  REQUIRE("test -x /usr/sbin/sshd && command -v ssh-keygen >/dev/null", "OpenSSH is not installed");
  const std::string config = tempDir();
  const std::vector<std::string> as_alice = cliAs(alice_, config);
  RunResult started =
      CohortProcess({"session", "start", "--idle-timeout", "3s"}, as_alice).wait();
  ASSERT_EQ(started.exit_code, 0) << started.err;
  const std::string id(trim(started.out));
  // A login longer than the idle timeout keeps it: an open connection is use.
  RunResult login = CohortProcess({"session", "ssh", "session", "--", "sleep", "5"}, as_alice).wait();
  EXPECT_EQ(login.exit_code, 0) << login.err;
  auto [running_status, running] = call("GET", "/v1/jobs/" + id, alice_);
  EXPECT_EQ(running.value("state", ""), "running") << running.dump();
  Json record = waitFinal(alice_, id);
  EXPECT_EQ(record.value("state", ""), "stopped") << record.dump();
  EXPECT_TRUE(contains(record.value("reason", ""), "idle for")) << record.dump();
  auto [status, full] = call("GET", "/v1/jobs/" + id, alice_);
  EXPECT_EQ(status, 200);
  EXPECT_TRUE(full["spec"]["session"].is_object()) << full.dump();
  EXPECT_FALSE(full["spec"]["session"].contains("host_key")) << full.dump();
  // A job file's command is not a session's: the server runs its own program.
  auto [ss, sj] = submit(alice_, shellJob("fake", "echo not-a-session",
                                          {{"session", {{"idle_timeout", "2s"}}}}));
  ASSERT_EQ(ss, 201) << sj.dump();
  Json fake = waitFinal(alice_, sj.value("id", ""));
  EXPECT_FALSE(contains(logOf(alice_, sj.value("id", "")), "not-a-session"));
}

// What was pip-installed in a session (from a wheel on the machine: the session's network has
// no way out) is saved as an environment of its account, which the server builds with its lock
// file from the package index; another account can neither save nor see it.
TEST_F(Attack, WhatWasPipInstalledInASessionIsSavedAsAnEnvironmentOfItsAccountAlone) {
  if (!separate_users_ || !isolated_ || !ownNetwork()) {
    GTEST_SKIP() << "needs root, the sandbox and networks of the jobs' own";
  }
  REQUIRE("test -x /usr/sbin/sshd && test -e /usr/share/python-wheels/setuptools-66.1.1-py3-none-any.whl "
          "&& /usr/bin/python3 -m pip --version >/dev/null",
          "OpenSSH's server, Debian's setuptools wheel or pip is not installed");
  const std::string config = tempDir();
  const std::vector<std::string> as_alice = cliAs(alice_, config);
  const std::vector<std::string> as_bob = cliAs(bob_, config);
  RunResult started =
      CohortProcess({"session", "start", "--name", "work", "--env", "pytorch"}, as_alice).wait();
  ASSERT_EQ(started.exit_code, 0) << started.err;
  const std::string id(trim(started.out));
  ASSERT_TRUE(waitFor(
      [&] {
        auto [status, job] = call("GET", "/v1/jobs/" + id, alice_);
        return job.is_object() && job.value("state", "") == "running";
      },
      300s, 200ms))
      << logOf(alice_, id);
  RunResult installed = CohortProcess(
      {"session", "ssh", "work", "--", "python3", "-m", "pip", "install", "-q", "--no-index",
       "/usr/share/python-wheels/setuptools-66.1.1-py3-none-any.whl"},
      as_alice).wait(300s);
  ASSERT_EQ(installed.exit_code, 0) << installed.out << installed.err << logOf(alice_, id);
  RunResult bob_save = CohortProcess({"session", "save", id, "--as", "stolen"}, as_bob).wait();
  EXPECT_EQ(bob_save.exit_code, 2) << bob_save.err;
  RunResult saved =
      CohortProcess({"session", "save", "work", "--as", "work-env"}, as_alice).wait(600s);
  if (saved.exit_code != 0 && contains(saved.err, "failed to build")) {
    GTEST_SKIP() << "the server could not build the environment (no package index?): " << saved.err;
  }
  ASSERT_EQ(saved.exit_code, 0) << saved.err;
  auto [status, env] = call("GET", "/v1/environments/work-env", alice_);
  ASSERT_EQ(status, 200) << env.dump();
  EXPECT_EQ(env.value("state", ""), "built") << env.dump();
  EXPECT_EQ(env.value("base", ""), "pytorch") << env.dump();
  EXPECT_EQ(env["requirements"], Json::array({"setuptools==66.1.1"})) << env.dump();
  EXPECT_TRUE(env["lock"].is_string()) << env.dump();
  auto [bob_status, bob_env] = call("GET", "/v1/environments/work-env", bob_);
  EXPECT_EQ(bob_status, 404) << bob_env.dump();
  CohortProcess({"session", "stop", "work"}, as_alice).wait();
  waitFinal(alice_, id);
}

// A session's JupyterLab, for the server whose environments include the `jupyter` preset
// that scripts/test builds into build/envs.
class JupyterSession : public Attack {
 protected:
  void SetUp() override {
    lab_env_ = usePresetEnvironment("jupyter", "jupyterlab");
    Attack::SetUp();
  }
  bool lab_env_ = false;
};

// A real JupyterLab 4 (the `jupyter` preset, from PyPI) in a session on a multi-account server,
// driven through the server's proxy by a real client (lab_client.py): its REST API and a
// kernel's WebSocket channel, which runs code in the session (torch, from Debian, included),
// by the account's token and by the cookie a ticket sets; while no credentials, another
// account's token, a cookie on another job's path, forged and replayed tickets, cross-origin
// and origin-less WebSockets and unsafe requests with the cookie, and a revoked token's cookie
// are all refused. The lab's port is reachable from nowhere else, a session whose environment
// has no jupyterlab fails at once saying what to do, and once stopped nothing of it is left.
TEST_F(JupyterSession, ALabIsReachedOnlyByItsAccountThroughTheServersProxy) {
  if (!separate_users_ || !isolated_ || !ownNetwork()) {
    GTEST_SKIP() << "needs root, the sandbox and networks of the jobs' own";
  }
  if (!lab_env_) {
    GTEST_SKIP() << "the jupyter preset is not built in build/envs (scripts/test --setup-only "
                    "builds it)";
  }
  REQUIRE("test -x /usr/sbin/sshd && test -e /usr/lib/x86_64-linux-gnu/libnss_wrapper.so && "
          "command -v ssh-keygen >/dev/null",
          "OpenSSH's server and client and libnss-wrapper are not installed");
  const std::string config = tempDir();
  const std::vector<std::string> as_alice = cliAs(alice_, config);
  const std::vector<std::string> as_bob = cliAs(bob_, config);
  // Without jupyterlab in its environment, the session ends at once, saying what to do.
  RunResult bare = CohortProcess({"session", "start", "--jupyter", "--name", "bare"}, as_alice).wait();
  ASSERT_EQ(bare.exit_code, 0) << bare.err;
  const std::string bare_id(trim(bare.out));
  Json bare_record = waitFinal(alice_, bare_id);
  EXPECT_EQ(bare_record.value("state", ""), "failed") << bare_record.dump();
  const std::string bare_log = logOf(alice_, bare_id);
  EXPECT_TRUE(contains(bare_log, "has no jupyterlab: start it with --env jupyter")) << bare_log;
  RunResult bare_open = CohortProcess({"session", "open", bare_id}, as_alice).wait();
  EXPECT_NE(bare_open.exit_code, 0);

  RunResult started = CohortProcess({"session", "start", "--jupyter", "--env", "jupyter",
                                     "--name", "lab", "--memory", "2Gi"}, as_alice).wait();
  ASSERT_EQ(started.exit_code, 0) << started.out << started.err << server_->log();
  const std::string id(trim(started.out));
  // `open` waits for the lab, then prints a URL that signs a browser in.
  RunResult opened = CohortProcess({"session", "open", "lab"}, as_alice).wait(180s);
  ASSERT_EQ(opened.exit_code, 0) << opened.err << logOf(alice_, id);
  EXPECT_TRUE(startsWith(std::string(trim(opened.out)),
                         server_->url() + "/v1/jobs/" + id + "/session/jupyter/ticket/"))
      << opened.out;
  RunResult listed = CohortProcess({"session", "ls"}, as_alice).wait();
  EXPECT_TRUE(contains(listed.out, "JupyterLab (cohort session open lab)")) << listed.out;
  // The SDK's URL is a ticket's too.
  const std::string sdk = shellOutput(
      "PYTHONPATH=" + sourceDir() + "/python /usr/bin/python3 -c \"import cohort; print(cohort."
      "Client('" + server_->url() + "', '" + alice_ + "').session_url('lab'))\" 2>&1");
  EXPECT_TRUE(startsWith(sdk, server_->url() + "/v1/jobs/" + id + "/session/jupyter/ticket/")) << sdk;
  auto [record_status, record] = call("GET", "/v1/jobs/" + id, alice_);
  EXPECT_EQ(record["session"]["jupyter"], "/v1/jobs/" + id + "/session/jupyter/lab") << record.dump();
  EXPECT_FALSE(record["spec"]["session"].contains("jupyter_token")) << record.dump();

  // A plain session of Bob's: the job another cookie and another ticket are tried on.
  RunResult bob_started = CohortProcess({"session", "start", "--name", "other"}, as_bob).wait();
  ASSERT_EQ(bob_started.exit_code, 0) << bob_started.err;
  const std::string bob_id(trim(bob_started.out));

  const std::string client = sourceDir() + "/tests/integration/lab_client.py";
  const std::string answer = shellOutput("/usr/bin/python3 " + client + " " + server_->url() +
                                         " " + id + " " + alice_ + " " + bob_ + " " + bob_id +
                                         " 2>&1");
  Json got = Json::parse(answer, nullptr, false);
  ASSERT_TRUE(got.is_object()) << answer << logOf(alice_, id);
  // The account's token: REST and a kernel that computes in the session.
  EXPECT_EQ(got["status_by_token"], 200) << got.dump(1);
  EXPECT_EQ(got["kernel_started"], 201) << got.dump(1);
  EXPECT_EQ(got["run_by_token"], "RESULT 42 " + id) << got.dump(1) << logOf(alice_, id);
  // A browser's ticket: once, then the cookie, scoped and strict, with which the lab works.
  EXPECT_EQ(got["ticket"], 201);
  EXPECT_EQ(got["ticket_opened"], 303);
  EXPECT_EQ(got["ticket_location"], "/v1/jobs/" + id + "/session/jupyter/lab");
  const std::string attributes = got.value("cookie_attributes", "");
  EXPECT_TRUE(contains(attributes, "; Path=/v1/jobs/" + id + "/session/jupyter/; HttpOnly; SameSite=Strict"))
      << attributes;
  EXPECT_EQ(got["lab_page_by_cookie"], 200);
  EXPECT_EQ(got["status_by_cookie"], 200);
  EXPECT_EQ(got["run_by_cookie"], "RESULT 42") << got.dump(1);
  // Refused.
  EXPECT_EQ(got["no_credentials"], 401);
  EXPECT_EQ(got["no_credentials_ws"], 401);
  EXPECT_EQ(got["bob_token"], 404);
  EXPECT_EQ(got["bob_token_ws"], 404);
  EXPECT_EQ(got["bob_ticket"], 404);
  EXPECT_EQ(got["replayed_ticket"], 401);
  EXPECT_EQ(got["forged_ticket"], 401);
  EXPECT_EQ(got["ticket_on_another_path"], 401);
  EXPECT_EQ(got["cookie_on_another_job"], 404);
  EXPECT_EQ(got["cookie_cross_origin_ws"], 403);
  EXPECT_EQ(got["cookie_ws_without_origin"], 403);
  EXPECT_EQ(got["cookie_post_without_origin"], 403);
  EXPECT_EQ(got["cookie_cross_site"], 403);
  EXPECT_EQ(got["token_cross_origin_post"], 403);
  EXPECT_EQ(got["forged_cookie"], 401);
  EXPECT_EQ(got["cookie_before_revoke"], 200);
  EXPECT_EQ(got["cookie_after_revoke"], 401);
  EXPECT_EQ(got["kernel_deleted"], 204);
  // A real browser: headless Chromium opens a fresh ticket, is signed in and runs the lab's
  // own page (its shell is drawn by the lab's scripts, all of them through the proxy).
  if (have("command -v chromium")) {
    RunResult again = CohortProcess({"session", "open", "lab"}, as_alice).wait(60s);
    ASSERT_EQ(again.exit_code, 0) << again.err;
    const std::string profile = tempDir();
    const std::string dom = shellOutput(
        "timeout -k 5 150 chromium --headless=new --no-sandbox --disable-gpu "
        "--disable-dev-shm-usage --no-first-run --user-data-dir=" + profile +
        " --virtual-time-budget=30000 --dump-dom '" + std::string(trim(again.out)) +
        "' 2>/dev/null");
    // The shell, and its launcher with the kernel the lab's API listed.
    EXPECT_TRUE(contains(dom, "class=\"lm-Widget jp-LabShell")) << dom.substr(0, 4000);
    EXPECT_TRUE(contains(dom, "jp-Launcher-body")) << dom.substr(0, 4000);
    EXPECT_TRUE(contains(dom, "Python 3 (ipykernel)")) << dom.substr(0, 4000);
  } else {
    std::cerr << "chromium is not installed: the lab's page was not loaded in a browser\n";
  }

  // Bob through the CLI, and anyone on the machine's loopback.
  RunResult bob_open = CohortProcess({"session", "open", id}, as_bob).wait();
  EXPECT_EQ(bob_open.exit_code, 2) << bob_open.err;
  EXPECT_FALSE(loopbackAccepts(8888));

  // Stopped: the lab ends with it, and its cookie with it.
  RunResult ssh_uid = CohortProcess({"session", "ssh", "lab", "--", "id", "-u"}, as_alice).wait();
  ASSERT_EQ(ssh_uid.exit_code, 0) << ssh_uid.err;
  const uid_t alice_uid = static_cast<uid_t>(std::stoul(std::string(trim(ssh_uid.out))));
  EXPECT_TRUE(processOfUser(alice_uid, "jupyterlab"));
  CohortProcess({"session", "stop", "lab"}, as_alice).wait();
  CohortProcess({"session", "stop", "other"}, as_bob).wait();
  Json record_after = waitFinal(alice_, id);
  EXPECT_EQ(record_after.value("state", ""), "stopped") << record_after.dump();
  EXPECT_TRUE(waitFor([&] { return !processOfUser(alice_uid, id); }, 10s, 100ms));
  const std::string url = server_->url();
  httplib::Client after("127.0.0.1", std::atoi(url.c_str() + url.rfind(':') + 1));
  auto gone = after.Get("/v1/jobs/" + id + "/session/jupyter/api/status",
                        {{"Authorization", "Bearer " + alice_}});
  ASSERT_TRUE(gone);
  EXPECT_EQ(gone->status, 409) << gone->body;
  waitFinal(bob_, bob_id);
  expectServerHealthy();
}

TEST_F(Attack, EachAccountsRanksRunAsTheirOwnUser) {
  if (!separate_users_) GTEST_SKIP() << "the server is not root: accounts share its user";
  auto [as, aj] = submit(alice_, shellJob("who", "id -u; id -G"));
  auto [bs, bj] = submit(bob_, shellJob("who", "id -u; id -G"));
  ASSERT_EQ(as, 201);
  ASSERT_EQ(bs, 201);
  waitFinal(alice_, aj.value("id", ""));
  waitFinal(bob_, bj.value("id", ""));
  std::string a = logOf(alice_, aj.value("id", ""));
  std::string b = logOf(bob_, bj.value("id", ""));
  int alice_uid = std::atoi(a.c_str() + a.find(']') + 2);
  int bob_uid = std::atoi(b.c_str() + b.find(']') + 2);
  EXPECT_GT(alice_uid, 0) << a;
  EXPECT_GT(bob_uid, 0) << b;
  EXPECT_NE(alice_uid, bob_uid) << a << b;
  EXPECT_FALSE(contains(a, " 0\n")) << "root's group: " << a;
}

TEST_F(Attack, ForgedReportsAndAForgedEventsFileNeitherEndAJobNorHurtTheServer) {
  auto [status, json] = submit(bob_, shellJob("gated", "while [ ! -e " + work_ +
                                                       "/go ]; do sleep 0.05; done"));
  ASSERT_EQ(status, 201);
  const std::string id = json.value("id", "");
  const std::string events = server_->dataRoot() + "/jobs/" + id + "/events.jsonl";
  ASSERT_TRUE(waitFor([&] { return std::filesystem::exists(events); }, kDeadline, 20ms));
  // What a compromised process of the machine could write: the server never reads it.
  std::ofstream(events, std::ios::app) << "{\"t\":\"x\"}\n[[[[[[[[[[[[[[[[[[[[\n";
  // Reports without the job's token, with an account's token, with garbage: all refused.
  const std::string report = "/v1/jobs/" + id + "/report";
  const std::string forged = R"({"seq":1,"events":[],"result":{"state":"failed","exit_code":9}})";
  for (const std::string& token :
       {std::string(), std::string("cohort_guess"), bob_, server_->adminToken()}) {
    auto [s, j] = call("POST", report, token, forged, "application/json");
    EXPECT_EQ(s, 401) << j.dump();
  }
  auto [deep, deep_json] = call("POST", report, "x", std::string(200000, '['), "application/json");
  EXPECT_EQ(deep, 401) << deep_json.dump();
  std::ofstream(work_ + "/go").put('\n');
  Json record = waitFinal(bob_, id);
  EXPECT_EQ(record.value("state", ""), "succeeded") << record.dump();
  EXPECT_EQ(record["exit_code"], Json(0)) << record.dump();
  expectServerHealthy();
}


// Route: a job names as its input what an earlier job (or anyone) planted below an input root —
// links to the server's database, another account's bucket, the whole data root — or files only
// root may read. The agent stages inputs as the job's account, opening them below the input root
// with no link followed: each attempt fails naming the link or the refusal, and nothing of it
// reaches the job. What is not below an input root is refused at submission with the same words
// whether it exists or not.
TEST_F(Attack, LinksPlantedForALaterJobAndRootOnlyInputsAreNeitherFollowedNorRead) {
  if (!isolated_ || !separate_users_) GTEST_SKIP() << "needs root and bubblewrap";
  const std::string root = server_->dataRoot();
  ASSERT_EQ(call("PUT", "/v1/store/alice-data/secret.txt", alice_, "alice-secret",
                 "application/octet-stream").first, 201);
  // A scratch area of the admin's that every user may write.
  const std::string shared = datasets_ + "/shared";
  std::filesystem::create_directory(shared);
  ASSERT_EQ(::chmod(shared.c_str(), 01777), 0);
  const std::string plant = fill(R"SH(
ln -s @ROOT@/server/cohort.db @SHARED@/db
ln -s @ROOT@/store/alice@alice-data @SHARED@/alice
ln -s @ROOT@ @SHARED@/everything
mkdir @SHARED@/dir && echo mine > @SHARED@/dir/mine.txt && ln -s @ROOT@/server/admin.token @SHARED@/dir/token
echo planted
)SH", {{"@ROOT@", root}, {"@SHARED@", shared}});
  // Its workdir there: the sandbox puts a workdir in the machine's /tmp back in the job's.
  auto [p_status, p_json] = submit(bob_, shellJob("plant", plant, {{"workdir", shared}}));
  ASSERT_EQ(p_status, 201) << p_json.dump();
  EXPECT_EQ(waitFinal(bob_, p_json.value("id", "")).value("state", ""), "succeeded");
  ASSERT_TRUE(std::filesystem::is_symlink(shared + "/db")) << logOf(bob_, p_json.value("id", ""));
  // Files of root's below the input root, and a second name of the admin token.
  std::filesystem::create_directory(datasets_ + "/private");
  ASSERT_EQ(::chmod((datasets_ + "/private").c_str(), 0700), 0);
  std::ofstream(datasets_ + "/private/notes.txt") << "root-notes\n";
  ::chmod((datasets_ + "/private/notes.txt").c_str(), 0644);
  std::ofstream(datasets_ + "/rootonly.txt") << "root-only\n";
  ::chmod((datasets_ + "/rootonly.txt").c_str(), 0600);
  ASSERT_EQ(::link((root + "/server/admin.token").c_str(), (datasets_ + "/hard").c_str()), 0);
  std::ofstream(datasets_ + "/public.txt") << "public-data\n";
  ::chmod((datasets_ + "/public.txt").c_str(), 0644);
  const std::string token = readText(root + "/server/admin.token");
  ASSERT_FALSE(token.empty());

  const std::vector<std::pair<std::string, std::string>> routes = {
      {shared + "/db", "symbolic link"},
      {shared + "/alice", "symbolic link"},
      {shared + "/everything/server/cohort.db", "symbolic link"},
      {shared + "/dir", "symbolic link"},
      {datasets_ + "/private/notes.txt", "Permission denied"},
      {datasets_ + "/rootonly.txt", "Permission denied"},
      {datasets_ + "/hard", "hard links"}};
  for (const auto& [source, why] : routes) {
    Json job = shellJob("loot", "find $COHORT_WORK_DIR/in -type f -exec cat {} +; true",
                        {{"inputs", {{{"source", source}, {"target", "in"}}}}});
    auto [status, json] = submit(bob_, job);
    ASSERT_EQ(status, 201) << source << ": " << json.dump();
    const std::string id = json.value("id", "");
    Json record = waitFinal(bob_, id);
    EXPECT_EQ(record.value("state", ""), "failed") << source << ": " << record.dump();
    EXPECT_TRUE(contains(record.value("reason", ""), why)) << source << ": " << record.dump();
    const std::string log = logOf(bob_, id);
    for (const std::string& secret : {std::string("alice-secret"), std::string("root-notes"),
                                      std::string("root-only"), token, std::string("SQLite")}) {
      EXPECT_FALSE(contains(log, secret)) << source << " leaked " << secret;
    }
    std::error_code ec;
    for (const auto& entry :
         std::filesystem::recursive_directory_iterator(root + "/jobs/" + id + "/work", ec)) {
      if (!entry.is_regular_file() || entry.is_symlink()) continue;
      const std::string text = readText(entry.path());
      EXPECT_FALSE(contains(text, "alice-secret") || contains(text, "root-") ||
                   contains(text, token) || contains(text, "SQLite"))
          << source << " reached " << entry.path();
    }
  }
  // What the account may read is staged, as the account.
  Json ok = shellJob("fine", "cat $COHORT_WORK_DIR/in; stat -c 'OWNER %u' $COHORT_WORK_DIR/in",
                     {{"inputs", {{{"source", datasets_ + "/public.txt"}, {"target", "in"}}}}});
  auto [ok_status, ok_json] = submit(bob_, ok);
  ASSERT_EQ(ok_status, 201) << ok_json.dump();
  Json ok_record = waitFinal(bob_, ok_json.value("id", ""));
  EXPECT_EQ(ok_record.value("state", ""), "succeeded") << ok_record.dump();
  const std::string ok_log = logOf(bob_, ok_json.value("id", ""));
  EXPECT_TRUE(contains(ok_log, "public-data")) << ok_log;
  EXPECT_FALSE(contains(ok_log, "OWNER 0")) << "staged by root: " << ok_log;

  // Anywhere else: one answer, whether the path exists or not.
  for (const std::string& source : {std::string("/etc/shadow"), root + "/server/cohort.db",
                                    std::string("/no/such/file"), datasets_ + "/../etc",
                                    std::string("/dev/shm")}) {
    auto [status, json] = submit(bob_, shellJob("probe", "true",
                                                {{"inputs", {{{"source", source}, {"target", "in"}}}}}));
    EXPECT_EQ(status, 400) << source;
    EXPECT_EQ(json["error"].value("message", ""),
              "inputs[0].source: '" + source + "': this server takes local inputs only below " +
                  datasets_ + "; copy the data into the store (cohort cp DIR " +
                  "server://BUCKET/PATH) and name store://BUCKET/PATH")
        << json.dump();
  }
  expectServerHealthy();
}

// Route: the job's own `env:` steering cohort's programs. A PATH that puts the job's own `env`
// and `bwrap` first and an LD_PRELOAD of the job's library apply inside the sandbox only: cohort
// starts bubblewrap and env by their absolute paths with an environment of its own.
TEST_F(Attack, TheJobsEnvCannotSteerTheSandbox) {
  if (!isolated_) GTEST_SKIP() << "bubblewrap does not work here: jobs run without the sandbox";
  const std::string evil = work_ + "/evil", marks = work_ + "/marks";
  std::filesystem::create_directories(evil);
  std::filesystem::create_directories(marks);
  ASSERT_EQ(::chmod(marks.c_str(), 0777), 0);
  for (const char* tool : {"env", "bwrap"}) {
    const std::string path = evil + "/" + tool;
    std::ofstream(path) << "#!/bin/sh\necho \"$0 $(id -u)\" >> " << marks
                        << "/path\nexec /usr/bin/" << tool << " \"$@\"\n";
    ::chmod(path.c_str(), 0755);
  }
  Json job = shellJob("steer", "echo PROCS $(ls /proc | grep -c '^[0-9]'); echo ranks-own",
                      {{"env",
                        {{"PATH", evil + ":/usr/bin:/bin"},
                         {"LD_PRELOAD", COHORT_TEST_PRELOAD},
                         {"TEST_MARKER_FILE", marks + "/preload"}}}});
  auto [status, json] = submit(bob_, job);
  ASSERT_EQ(status, 201) << json.dump();
  const std::string id = json.value("id", "");
  Json record = waitFinal(bob_, id);
  EXPECT_EQ(record.value("state", ""), "succeeded") << record.dump();
  const std::string log = logOf(bob_, id);
  EXPECT_TRUE(contains(log, "ranks-own")) << log;
  EXPECT_FALSE(std::filesystem::exists(marks + "/path"))
      << "the job's PATH chose cohort's programs: " << readText(marks + "/path");
  // The job's library was loaded, but only by what runs inside (where process 1 is the
  // sandbox's own).
  const std::string preloaded = readText(marks + "/preload");
  EXPECT_TRUE(contains(preloaded, " bwrap\n")) << "LD_PRELOAD did not reach the rank: " << preloaded;
  std::istringstream lines(preloaded);
  for (std::string line; std::getline(lines, line);) {
    EXPECT_TRUE(line.size() > 6 && line.substr(line.size() - 6) == " bwrap")
        << "the job's code ran outside its sandbox: " << line;
  }
  auto at = log.find("PROCS ");
  ASSERT_NE(at, std::string::npos) << log;
  EXPECT_LT(std::atoi(log.c_str() + at + 6), 8) << "the rank sees the machine's processes: " << log;
  // No rank sees the other's variables on a command line either.
  EXPECT_FALSE(contains(readText(server_->dataRoot() + "/jobs/" + id + "/plan.json"),
                        "--setenv"));
}

// Route: the server's own environment (tokens and passwords its admin started it with) in a
// rank's. A rank's environment is an allowlist: the job's, cohort's and a small base.
TEST_F(Attack, TheServersEnvironmentReachesNoRank) {
  auto [status, json] = submit(bob_, shellJob("environ", "env; echo END"));
  ASSERT_EQ(status, 201) << json.dump();
  const std::string id = json.value("id", "");
  EXPECT_EQ(waitFinal(bob_, id).value("state", ""), "succeeded");
  const std::string log = logOf(bob_, id);
  ASSERT_TRUE(contains(log, "END")) << log;
  for (const auto& [name, value] : kServerSecrets) {
    EXPECT_FALSE(contains(log, value)) << name << " reached a rank: " << log;
    EXPECT_FALSE(contains(log, std::string(name) + "=")) << log;
  }
  EXPECT_TRUE(contains(log, "PATH=/usr/local/bin:/usr/bin:/bin")) << log;
  EXPECT_TRUE(contains(log, "COHORT_RANK=0")) << log;
}

// The machine's IPv4 addresses (not loopback): where a rank outside a network of its own would
// find the server and other jobs.
std::vector<std::string> machineAddresses() {
  std::vector<std::string> out;
  std::istringstream in(shellOutput("hostname -I 2>/dev/null"));
  for (std::string a; in >> a;) {
    if (a.find(':') == std::string::npos) out.push_back(a);
  }
  return out;
}

// More of what a hostile rank tries from inside: the server's port and the machine's addresses
// (its network is its own, with no way out), a set-uid or file-capability program (no new
// privileges), a device node of its own making, and the environment of the sandbox's first
// process (cohort's, not the job's or the server's).
TEST_F(Attack, AHostileRankFindsNoWayOutOfItsSandboxOrItsNetwork) {
  if (!isolated_ || ::geteuid() != 0) GTEST_SKIP() << "needs root and bubblewrap";
  ASSERT_TRUE(ownNetwork()) << server_->log();
  const std::string url = server_->url();
  const std::string port = url.substr(url.rfind(':') + 1);
  std::string targets;
  for (const std::string& a : machineAddresses()) targets += " " + a;
  const std::string script = fill(R"SH(
try() { name=$1; shift; if "$@" >/tmp/attempt 2>&1; then echo "ATTEMPT $name ok $(head -c 120 /tmp/attempt)"; else echo "ATTEMPT $name blocked"; fi; }
reach() { python3 -c "import socket,sys; socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=2)" "$@"; }
try server-on-loopback reach 127.0.0.1 @PORT@
for a in @TARGETS@; do try server-on-$a reach $a @PORT@; done
try ping ping -c1 -W1 127.0.0.1
try mknod-gpu mknod /tmp/nv c 195 0
try first-process-environ sh -c 'tr "\0" "\n" < /proc/1/environ | grep -v -e "^PATH=" -e "^LANG=" | grep .'
grep NoNewPrivs /proc/self/status
)SH", {{"@PORT@", port}, {"@TARGETS@", targets}});
  auto [status, json] = submit(bob_, shellJob("way-out", script, {{"env", {{"SECRET_OF_MINE", "x"}}}}));
  ASSERT_EQ(status, 201) << json.dump();
  const std::string id = json.value("id", "");
  waitFinal(bob_, id);
  const std::string log = logOf(bob_, id);
  EXPECT_TRUE(attempts(log, "ok").empty()) << log;
  EXPECT_EQ(attempts(log, "blocked").size(), 4u + machineAddresses().size()) << log;
  EXPECT_TRUE(contains(log, "NoNewPrivs:\t1")) << log;
  expectServerHealthy();
}

// Route: another account's job's rendezvous: its TCPStore on its master port. Each job has a
// network of its own: Alice's master is node 0's address on hers, which on Bob's is his own
// node; neither the machine's addresses nor its loopback lead to it.
TEST_F(Attack, AnotherJobsTcpStoreAndMasterPortAreOutOfReach) {
  if (!isolated_ || ::geteuid() != 0) GTEST_SKIP() << "network namespaces need root";
  ASSERT_TRUE(ownNetwork()) << "a root server with the sandbox gives each job a network of its "
                               "own: "
                            << server_->log();
  REQUIRE("/usr/bin/python3 -c 'import torch.distributed'", "needs python3-torch");
  const std::string go = work_ + "/go";
  const std::string alice_script = fill(R"PY(
import datetime, os, time
import torch.distributed as d
r = int(os.environ["RANK"])
s = d.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), 2, r == 0,
               timeout=datetime.timedelta(seconds=60))
print("MASTER", os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"], flush=True)
s.set("alice-%d" % r, "1")
while not os.path.exists("@GO@"):
    time.sleep(0.05)
try:
    s.wait(["bob"], datetime.timedelta(milliseconds=300))
    print("BOBKEY True", flush=True)
except Exception:
    print("BOBKEY False", flush=True)
s.set("done-%d" % r, "1")
s.wait(["done-0", "done-1"])
)PY", {{"@GO@", go}});
  Json alice_job = shellJob("rendezvous", "", {{"framework", "pytorch"},
                                               {"command", {"/usr/bin/python3", "-c", alice_script}},
                                               {"roles", {{"worker", {{"nodes", 2}}}}}});
  auto [a_status, a_json] = submit(alice_, alice_job);
  ASSERT_EQ(a_status, 201) << a_json.dump();
  const std::string alice_id = a_json.value("id", "");
  std::string master;
  ASSERT_TRUE(waitFor(
      [&] {
        const std::string log = logOf(alice_, alice_id);
        auto at = log.find("MASTER ");
        if (at == std::string::npos || log.find('\n', at) == std::string::npos) return false;
        master = log.substr(at + 7, log.find('\n', at) - at - 7);
        return true;
      },
      kDeadline, 50ms))
      << logOf(alice_, alice_id);
  const std::string addr = master.substr(0, master.find(' '));
  const std::string port = master.substr(master.find(' ') + 1);
  EXPECT_EQ(port, "29500") << "a fixed port on the job's own network";
  std::vector<std::string> targets = {addr, "127.0.0.1", "10.88.0.1"};
  for (const std::string& a : machineAddresses()) targets.push_back(a);
  std::string bob_script = R"PY(
import datetime, sys
import torch.distributed as d
for addr in sys.argv[1].split(","):
    try:
        s = d.TCPStore(addr, int(sys.argv[2]), 1, False, timeout=datetime.timedelta(seconds=2),
                       wait_for_workers=False)
        s.set("bob", "was here")
        print("ATTEMPT store-%s ok" % addr, flush=True)
    except Exception as e:
        print("ATTEMPT store-%s blocked %s" % (addr, str(e).splitlines()[0][:80]), flush=True)
)PY";
  std::string list;
  for (const std::string& t : targets) list += (list.empty() ? "" : ",") + t;
  auto [b_status, b_json] = submit(
      bob_, shellJob("steal-store", "", {{"command", {"/usr/bin/python3", "-c", bob_script, list, port}}}));
  ASSERT_EQ(b_status, 201) << b_json.dump();
  const std::string bob_id = b_json.value("id", "");
  waitFinal(bob_, bob_id);
  const std::string bob_log = logOf(bob_, bob_id);
  EXPECT_TRUE(attempts(bob_log, "ok").empty()) << bob_log;
  EXPECT_EQ(attempts(bob_log, "blocked").size(), targets.size()) << bob_log;
  std::ofstream(go).put('\n');
  Json alice_record = waitFinal(alice_, alice_id);
  EXPECT_EQ(alice_record.value("state", ""), "succeeded") << alice_record.dump();
  EXPECT_TRUE(contains(logOf(alice_, alice_id), "BOBKEY False")) << logOf(alice_, alice_id);
  expectServerHealthy();
}

// Route: squatting ports. Bob's job binds every port near the usual master ports, on its
// loopback and on every address it has; Alice's two-node DDP job, started meanwhile, runs as if
// Bob were not there.
TEST_F(Attack, SquattingPortsHarmsNoOtherJob) {
  if (!isolated_ || ::geteuid() != 0) GTEST_SKIP() << "network namespaces need root";
  ASSERT_TRUE(ownNetwork()) << "a root server with the sandbox gives each job a network of its "
                               "own: "
                            << server_->log();
  REQUIRE("/usr/bin/python3 -c 'import torch.distributed'", "needs python3-torch");
  const std::string release = work_ + "/release";
  const std::string squat = fill(R"PY(
import os, socket, time
held = []
for host in ("127.0.0.1", "0.0.0.0"):
    for port in range(29400, 29700):
        s = socket.socket()
        try:
            s.bind((host, port)); s.listen(1); held.append(s)
        except OSError:
            s.close()
print("SQUATTED", len(held), flush=True)
while not os.path.exists("@RELEASE@"):
    time.sleep(0.05)
)PY", {{"@RELEASE@", release}});
  auto [b_status, b_json] =
      submit(bob_, shellJob("squat", "", {{"command", {"/usr/bin/python3", "-c", squat}}}));
  ASSERT_EQ(b_status, 201) << b_json.dump();
  const std::string bob_id = b_json.value("id", "");
  ASSERT_TRUE(waitFor([&] { return contains(logOf(bob_, bob_id), "SQUATTED"); }, kDeadline, 50ms))
      << logOf(bob_, bob_id);
  const std::string ddp = R"PY(
import os, torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(1) * (dist.get_rank() + 1)
dist.all_reduce(t)
print("SUM", t.item(), os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"], flush=True)
dist.destroy_process_group()
)PY";
  auto [a_status, a_json] = submit(
      alice_, shellJob("ddp", "", {{"framework", "pytorch"},
                                   {"command", {"/usr/bin/python3", "-c", ddp}},
                                   {"roles", {{"worker", {{"nodes", 2}, {"procs_per_node", 2}}}}}}));
  ASSERT_EQ(a_status, 201) << a_json.dump();
  const std::string alice_id = a_json.value("id", "");
  Json record = waitFinal(alice_, alice_id);
  EXPECT_EQ(record.value("state", ""), "succeeded") << record.dump() << logOf(alice_, alice_id);
  EXPECT_TRUE(contains(logOf(alice_, alice_id), "SUM 10.0 10.88.0.2 29500")) << logOf(alice_, alice_id);
  std::ofstream(release).put('\n');
  EXPECT_EQ(waitFinal(bob_, bob_id).value("state", ""), "succeeded");
  expectServerHealthy();
}

// Route: another job's GPU. A sandboxed job has a /dev of its own in which only its own GPUs'
// device files are put back. There is no GPU here: the test makes stand-in device files (the
// null device's numbers under NVIDIA's names) and checks the mechanism, not CUDA.
TEST_F(Attack, AJobSeesOnlyItsOwnGpusDeviceFiles) {
  if (!isolated_ || ::geteuid() != 0) GTEST_SKIP() << "needs root and bubblewrap";
  std::vector<std::string> made;
  for (const char* name : {"/dev/nvidia0", "/dev/nvidia1", "/dev/nvidiactl"}) {
    if (std::filesystem::exists(name)) continue;
    if (::mknod(name, S_IFCHR | 0666, makedev(1, 3)) != 0) {
      for (const std::string& m : made) ::unlink(m.c_str());
      GTEST_SKIP() << "cannot make a stand-in device file " << name;
    }
    made.push_back(name);
  }
  struct Cleanup {
    std::vector<std::string>& made;
    ~Cleanup() {
      for (const std::string& m : made) ::unlink(m.c_str());
    }
  } cleanup{made};
  std::string why;
  auto server = startServer(&why, {"--cpus", "8", "--gpus", "2"});
  ASSERT_TRUE(server) << why;
  const std::string url = server->url();
  httplib::Client client("127.0.0.1", std::atoi(url.c_str() + url.rfind(':') + 1));
  const httplib::Headers admin = {{"Authorization", "Bearer " + server->adminToken()}};
  const std::string gate = work_ + "/gpus-go";
  auto gpuJob = [&](const std::string& name) {
    Json job = shellJob(name, "while [ ! -e " + gate + " ]; do sleep 0.05; done; "
                              "for f in /dev/nvidia0 /dev/nvidia1 /dev/nvidiactl; do "
                              "[ -e $f ] && echo HAS $f; done; echo CVD=$CUDA_VISIBLE_DEVICES; "
                              "cat /dev/nvidia1 /dev/nvidia0 >/dev/null 2>&1; true",
                        {{"roles", {{"worker", {{"resources", {{"gpus", 1}}}}}}}});
    auto res = client.Post("/v1/jobs", admin, Json{{"job", job}}.dump(), "application/json");
    EXPECT_TRUE(res && res->status == 201) << (res ? res->body : "no answer");
    return res ? Json::parse(res->body, nullptr, false).value("id", "") : std::string();
  };
  const std::string a = gpuJob("gpu-a"), b = gpuJob("gpu-b");
  // A job given no GPU that names them all in its own env: gets none.
  Json thief = shellJob("gpu-thief", "for f in /dev/nvidia0 /dev/nvidia1; do [ -e $f ] && echo HAS $f; "
                                     "done; echo CVD=$CUDA_VISIBLE_DEVICES; true",
                        {{"env", {{"CUDA_VISIBLE_DEVICES", "0,1"}}}});
  auto stolen = client.Post("/v1/jobs", admin, Json{{"job", thief}}.dump(), "application/json");
  ASSERT_TRUE(stolen && stolen->status == 201) << (stolen ? stolen->body : "no answer");
  const std::string c = Json::parse(stolen->body, nullptr, false).value("id", "");
  auto state = [&](const std::string& id) {
    auto res = client.Get("/v1/jobs/" + id, admin);
    return res ? Json::parse(res->body, nullptr, false).value("state", "") : std::string();
  };
  ASSERT_TRUE(waitFor([&] { return state(a) == "running" && state(b) == "running"; }, kDeadline,
                      50ms));
  std::ofstream(gate).put('\n');
  ASSERT_TRUE(waitFor([&] { return state(a) == "succeeded" && state(b) == "succeeded"; },
                      kDeadline, 50ms))
      << state(a) << " " << state(b);
  auto log = [&](const std::string& id) {
    auto res = client.Get("/v1/jobs/" + id + "/logs?rank=0", admin);
    return res ? res->body : std::string();
  };
  const std::string la = log(a), lb = log(b);
  for (const std::string& l : {la, lb}) {
    EXPECT_TRUE(contains(l, "HAS /dev/nvidiactl")) << l;
    EXPECT_TRUE(contains(l, "CVD=0")) << "its one GPU is its first: " << l;
    EXPECT_EQ(contains(l, "HAS /dev/nvidia0") + contains(l, "HAS /dev/nvidia1"), 1)
        << "exactly its own GPU: " << l;
  }
  EXPECT_NE(contains(la, "HAS /dev/nvidia0"), contains(lb, "HAS /dev/nvidia0")) << la << lb;
  ASSERT_TRUE(waitFor([&] { return state(c) == "succeeded"; }, kDeadline, 50ms)) << state(c);
  const std::string lc = log(c);
  EXPECT_TRUE(contains(lc, "CVD=")) << lc;
  EXPECT_FALSE(contains(lc, "HAS /dev/nvidia")) << "a GPU it was not given: " << lc;
}

// Route: a code upload, which the account chose byte for byte, extracted by root. It is
// extracted by a process of the account's, into a directory no other account can enter.
TEST_F(Attack, AnUploadIsExtractedAsItsAccount) {
  if (!separate_users_) GTEST_SKIP() << "the server is not root: accounts share its user";
  const std::string archive = tarEntry("run.sh", '0', "echo from-upload\n") + tarEntry("lib", '5') +
                              tarEntry("lib/data.txt", '0', "data\n") + tarEnd();
  auto [status, json] = call("POST", "/v1/uploads", bob_, archive, "application/x-tar");
  ASSERT_EQ(status, 201) << json.dump();
  const std::string dir = server_->dataRoot() + "/uploads/bob";
  const std::string upload = dir + "/" + json.value("id", "");
  struct stat st {}, file {}, parent {};
  ASSERT_EQ(::lstat(upload.c_str(), &st), 0);
  ASSERT_EQ(::lstat((upload + "/lib/data.txt").c_str(), &file), 0);
  ASSERT_EQ(::lstat(dir.c_str(), &parent), 0);
  EXPECT_NE(st.st_uid, 0u) << "extracted by root";
  EXPECT_EQ(file.st_uid, st.st_uid);
  EXPECT_EQ(parent.st_uid, 0u);
  EXPECT_EQ(parent.st_gid, st.st_gid) << "the account's group enters it";
  EXPECT_EQ(parent.st_mode & 07777, 0710u);
  // And the job that takes it runs it as the same user.
  auto [j_status, j_json] = call("POST", "/v1/jobs", bob_,
                                 Json{{"job", {{"name", "up"}, {"framework", "generic"},
                                               {"command", {"/bin/sh", "run.sh"}}}},
                                      {"code", json.value("id", "")}}.dump());
  ASSERT_EQ(j_status, 201) << j_json.dump();
  EXPECT_EQ(waitFinal(bob_, j_json.value("id", "")).value("state", ""), "succeeded");
  EXPECT_TRUE(contains(logOf(bob_, j_json.value("id", "")), "from-upload"));
}

// What the kernel says of a process: a line's number from /proc/PID/status (VmRSS: KiB), its
// open descriptors, and its CPU time in clock ticks.
int64_t statusField(pid_t pid, const std::string& field) {
  const std::string status = readText("/proc/" + std::to_string(pid) + "/status");
  const auto at = status.find(field + ":");
  return at == std::string::npos ? -1 : std::atoll(status.c_str() + at + field.size() + 1);
}
int64_t openDescriptors(pid_t pid) {
  std::error_code ec;
  int64_t n = 0;
  for (auto it = std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    ++n;
  }
  return n;
}
int64_t cpuTicks(pid_t pid) {
  const std::string stat = readText("/proc/" + std::to_string(pid) + "/stat");
  std::istringstream in(stat.substr(stat.rfind(')') + 2));
  std::string field;
  int64_t utime = 0, stime = 0;
  for (int i = 3; in >> field; ++i) {
    if (i == 14) utime = std::atoll(field.c_str());
    if (i == 15) stime = std::atoll(field.c_str());
  }
  return utime + stime;
}

// Anyone who reaches a coordinator's port can connect to it. 20,000 connections that never prove
// the job's secret (silent ones, and ones that send garbage) cost it a bounded number of
// descriptors and a bounded amount of memory; those it still holds are closed at their
// deadline; and the job, its reports to the server and its verdict go on.
TEST_F(Attack, AFloodOfStrangersOnTheControlChannelCostsTheCoordinatorABoundedAmount) {
  const std::string gate = work_ + "/flooded-go";
  auto [status, json] =
      submit(bob_, shellJob("flooded", "echo started; while [ ! -e " + gate +
                                           " ]; do sleep 0.1; done; echo after the flood"));
  ASSERT_EQ(status, 201) << json.dump();
  const std::string id = json.value("id", "");
  const std::string pid_file = server_->dataRoot() + "/jobs/" + id + "/coordinator.pid";
  pid_t coordinator = -1;
  ASSERT_TRUE(waitFor(
      [&] {
        auto [s, record] = call("GET", "/v1/jobs/" + id, bob_);
        coordinator = std::atoi(readText(pid_file).c_str());
        return s == 200 && record.value("state", "") == "running" && coordinator > 0;
      },
      kDeadline, 50ms));
  const int port = listeningPort(coordinator);
  ASSERT_GT(port, 0) << "the coordinator listens on no TCP port";
  // Enough descriptors of our own to hold thousands of connections open at once.
  rlimit files{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &files), 0);
  files.rlim_cur = std::min<rlim_t>(files.rlim_max, 24000);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &files), 0);
  const int64_t rss_before = statusField(coordinator, "VmRSS");
  const int64_t fds_before = openDescriptors(coordinator);
  const int64_t cpu_before = cpuTicks(coordinator);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(port));
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::vector<int> held;
  int64_t fds_peak = 0;
  constexpr int kFlood = 20000;
  for (int i = 0; i < kFlood; ++i) {
    if (held.size() + 64 >= files.rlim_cur) {  // out of our own: let the oldest go
      for (size_t k = 0; k < held.size() / 2; ++k) ::close(held[k]);
      held.erase(held.begin(), held.begin() + static_cast<long>(held.size() / 2));
    }
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) != 0) {
      ::close(fd);
      continue;  // the backlog was full for a moment
    }
    if (i % 4 == 1) (void)!::send(fd, "\x00\x00\x10\x00garbage", 11, MSG_NOSIGNAL);
    held.push_back(fd);
    if (i % 1000 == 0) fds_peak = std::max(fds_peak, openDescriptors(coordinator));
  }
  ASSERT_TRUE(waitFor([&] { return openDescriptors(coordinator) < fds_before + 300; }, 10s, 50ms))
      << "the coordinator holds " << openDescriptors(coordinator) << " descriptors, "
      << fds_before << " before";
  const int64_t rss_after = statusField(coordinator, "VmRSS");
  const int64_t cpu_used = cpuTicks(coordinator) - cpu_before;
  std::printf("flood of %d connections: coordinator VmRSS %lld -> %lld KiB, descriptors %lld "
              "(at most %lld seen during it), CPU %.2f s\n",
              kFlood, static_cast<long long>(rss_before), static_cast<long long>(rss_after),
              static_cast<long long>(fds_before), static_cast<long long>(fds_peak),
              static_cast<double>(cpu_used) / static_cast<double>(::sysconf(_SC_CLK_TCK)));
  EXPECT_LT(fds_peak, fds_before + 300) << "strangers were not capped";
  EXPECT_LT(rss_after - rss_before, 32 * 1024) << "the flood grew the coordinator";
  // Those it still holds are closed by their deadline, without a word.
  auto closed = [](int fd) {
    char byte;
    const ssize_t n = ::recv(fd, &byte, 1, MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
  };
  EXPECT_TRUE(waitFor(
      [&] { return std::all_of(held.begin(), held.end(), closed); }, 20s, 200ms))
      << std::count_if(held.begin(), held.end(), [&](int fd) { return !closed(fd); })
      << " strangers are still open past their deadline";
  for (int fd : held) ::close(fd);
  // The job goes on, reports its end to the server, and succeeds.
  std::ofstream(gate).put('\n');
  const Json record = waitFinal(bob_, id);
  EXPECT_EQ(record.value("state", ""), "succeeded") << record.dump();
  EXPECT_NE(logOf(bob_, id).find("after the flood"), std::string::npos);
  expectServerHealthy();
}

}  // namespace
}  // namespace cohort::testing
