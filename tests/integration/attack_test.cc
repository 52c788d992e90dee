// The attack suite: a hostile job, a real rank under the real `cohort server`, tries every way we
// know to reach another account or the server — its workdir, inputs and outputs, symbolic and
// hard links, /proc, signals and ptrace to other processes, the job's own record, the server's
// API without a token — and each attempt must fail, visibly in the job's own log, and leave the
// server healthy. The rank prints one line per attempt: "ATTEMPT <name> <ok|blocked> <detail>".
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "harness.h"
#include "tests/integration/httplib.h"

namespace cohort::testing {
namespace {

using Json = nlohmann::json;

constexpr auto kDeadline = std::chrono::seconds(60);

class Attack : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    server_ = startServer(&why, {"--cpus", "8"});
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

  std::unique_ptr<ServerProcess> server_;
  bool isolated_ = false;
  bool separate_users_ = false;
  std::string work_, alice_, bob_;
};

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
try read-alice-bucket cat @ROOT@/store/alice-data/secret.txt
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
ln -s @ROOT@/store/alice-data $COHORT_OUTPUT_DIR/alice-link
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
TEST_F(Attack, ADebuggedJobIsRefusedWhereAccountsAreKeptApart) {
  auto [status, json] =
      submit(alice_,
             shellJob("dbg", "true",
                      {{"command", {"/usr/bin/python3", "-c", "1"}}, {"debug", {{"ranks", {0}}}}}));
  EXPECT_EQ(status, 409) << json.dump();
  EXPECT_NE(json.dump().find("debug: a paused rank's debugger listens"), std::string::npos)
      << json.dump();
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

}  // namespace
}  // namespace cohort::testing
