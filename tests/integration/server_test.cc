// `cohort server` over HTTP, as clients use it: the real binary on a free port over a fresh data
// root, jobs played by cohort-test-rank. The OpenAPI document against the routes and the answers
// (validated with a small schema checker), isolation between accounts (jobs, store, shares,
// tokens), hostile requests, a log follower that hangs up, and the server killed under running
// and queued jobs.
#include <arpa/inet.h>
#include <dirent.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "harness.h"
#include "tests/integration/httplib.h"
#include "tests/tar_entry.h"

namespace cohort::testing {
namespace {

using Json = nlohmann::json;

constexpr auto kDeadline = 20s;

// Runs `sql` on the database at `path` with a connection of the test's own: "" or SQLite's
// message.
std::string sqlite(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  std::string error;
  if (sqlite3_open(path.c_str(), &db) != SQLITE_OK) error = sqlite3_errmsg(db);
  char* message = nullptr;
  if (error.empty() && sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &message) != SQLITE_OK) {
    error = message ? message : "failed";
  }
  sqlite3_free(message);
  sqlite3_close(db);
  return error;
}

// A process's command line, its arguments split ("" when it is gone).
std::vector<std::string> commandLine(pid_t pid) {
  std::string text = readText("/proc/" + std::to_string(pid) + "/cmdline");
  std::vector<std::string> args;
  std::string arg;
  for (char c : text) {
    if (c == '\0') {
      args.push_back(arg);
      arg.clear();
    } else {
      arg += c;
    }
  }
  return args;
}

std::vector<pid_t> allPids() {
  std::vector<pid_t> pids;
  DIR* dir = ::opendir("/proc");
  if (!dir) return pids;
  while (dirent* e = ::readdir(dir)) {
    char* end = nullptr;
    long pid = std::strtol(e->d_name, &end, 10);
    if (*end == '\0' && pid > 0) pids.push_back(static_cast<pid_t>(pid));
  }
  ::closedir(dir);
  return pids;
}

// The pid of the job's coordinator (`cohort run --job-id ID ...`), 0 when none runs.
pid_t coordinatorOf(const std::string& job_id) {
  for (pid_t pid : allPids()) {
    std::vector<std::string> args = commandLine(pid);
    for (size_t i = 1; i + 1 < args.size(); ++i) {
      if (args[i] == "--job-id" && args[i + 1] == job_id && args[1] == "run") return pid;
    }
  }
  return 0;
}

// ---------------------------------------------------------------------------------------------
// A small checker for the subset of OpenAPI 3.0 schemas the document uses: $ref (to the same
// document), allOf, oneOf, type, nullable, enum, required, properties, additionalProperties,
// items.

void checkSchema(const Json& doc, const Json& schema, const Json& value, const std::string& at,
                 std::vector<std::string>& problems) {
  if (schema.contains("$ref")) {
    const std::string ref = schema["$ref"];
    if (ref.rfind("#/", 0) != 0 || !doc.contains(Json::json_pointer(ref.substr(1)))) {
      problems.push_back(at + ": unresolved $ref " + ref);
      return;
    }
    checkSchema(doc, doc.at(Json::json_pointer(ref.substr(1))), value, at, problems);
    return;
  }
  if (value.is_null()) {
    if (!schema.value("nullable", false)) problems.push_back(at + ": null, but not nullable");
    return;
  }
  for (const Json& part : schema.value("allOf", Json::array())) {
    checkSchema(doc, part, value, at, problems);
  }
  if (schema.contains("oneOf")) {
    int matched = 0;
    for (const Json& part : schema["oneOf"]) {
      std::vector<std::string> sub;
      checkSchema(doc, part, value, at, sub);
      matched += sub.empty();
    }
    if (matched != 1) problems.push_back(at + ": matches " + std::to_string(matched) + " of oneOf");
  }
  const std::string type = schema.value("type", "");
  bool ok = type.empty() || (type == "string" && value.is_string()) ||
            (type == "integer" && value.is_number_integer()) ||
            (type == "number" && value.is_number()) ||
            (type == "boolean" && value.is_boolean()) || (type == "array" && value.is_array()) ||
            (type == "object" && value.is_object());
  if (!ok) {
    problems.push_back(at + ": expected " + type + ", got " + value.dump());
    return;
  }
  if (schema.contains("enum")) {
    bool listed = false;
    for (const Json& e : schema["enum"]) listed |= e == value;
    if (!listed) {
      problems.push_back(at + ": " + value.dump() + " is not in " + schema["enum"].dump());
    }
  }
  if (value.is_object()) {
    for (const Json& name : schema.value("required", Json::array())) {
      if (!value.contains(name.get<std::string>())) {
        problems.push_back(at + ": required field '" + name.get<std::string>() + "' is missing");
      }
    }
    const Json properties = schema.value("properties", Json::object());
    const Json additional = schema.value("additionalProperties", Json(true));
    for (const auto& [key, item] : value.items()) {
      if (properties.contains(key)) {
        checkSchema(doc, properties[key], item, at + "." + key, problems);
      } else if (additional == Json(false)) {
        problems.push_back(at + ": field '" + key + "' is not in the schema");
      } else if (additional.is_object()) {
        checkSchema(doc, additional, item, at + "." + key, problems);
      }
    }
  }
  if (value.is_array() && schema.contains("items")) {
    for (size_t i = 0; i < value.size(); ++i) {
      checkSchema(doc, schema["items"], value[i], at + "[" + std::to_string(i) + "]", problems);
    }
  }
}

// The JSON schema of the answer `status` to `method path` in `doc` (null when undocumented).
Json responseSchema(const Json& doc, std::string method, const std::string& path, int status) {
  for (char& c : method) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  Json::json_pointer op = Json::json_pointer("/paths") / path / method / "responses" /
                          std::to_string(status);
  if (!doc.contains(op)) return nullptr;
  Json response = doc.at(op);
  if (response.contains("$ref")) {
    Json::json_pointer shared(response["$ref"].get<std::string>().substr(1));
    if (!doc.contains(shared)) return nullptr;
    response = doc.at(shared);
  }
  Json::json_pointer schema("/content/application~1json/schema");
  return response.contains(schema) ? response.at(schema) : Json(nullptr);
}

// ---------------------------------------------------------------------------------------------

struct Answer {
  int status = 0;  // 0: no answer (the message is in `body`)
  std::string body;
  std::string content_type;
  Json json;  // the body parsed (discarded when it is not JSON)

  std::string code() const {
    return json.is_object() && json.contains("error") && json["error"].is_object()
               ? json["error"].value("code", "")
               : "";
  }
  std::string message() const {
    return json.is_object() && json.contains("error") && json["error"].is_object()
               ? json["error"].value("message", "")
               : "";
  }
};

std::ostream& operator<<(std::ostream& os, const Answer& a) {
  return os << a.status << " " << a.body.substr(0, 2000);
}

// What no answer may ever show: a crash, an exception's what(), C++ types.
const std::vector<std::string> kInternals = {"terminate called", "what():", "std::", "nlohmann",
                                             "__cxx11", "basic_string", "json.exception"};

// A `cohort server` on 127.0.0.1:0 over a temp directory (data root and job workdir), stopped
// and removed after each test with every process its jobs left.
class ServerFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    ::signal(SIGPIPE, SIG_IGN);  // a server that hangs up on a request must not end the test
    char pattern[] = "/tmp/cohort-server-test-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    dir_ = pattern;
    // As root the server runs each account's ranks as a user of its own, who must get through.
    ASSERT_EQ(::chmod(dir_.c_str(), 0755), 0);
    data_root_ = dir_ + "/data";
    work_ = dir_ + "/work";
    std::filesystem::create_directories(data_root_);
    std::filesystem::create_directories(work_);
    ASSERT_TRUE(startServer());
  }

  void TearDown() override {
    if (server_ > 0) stopServer();
    // Coordinators name the data root; ranks run in the workdir. Only ours match.
    for (pid_t pid : allPids()) {
      std::vector<std::string> args = commandLine(pid);
      bool ours = false;
      for (const std::string& a : args) ours |= contains(a, dir_);
      std::error_code ec;
      auto cwd = std::filesystem::read_symlink("/proc/" + std::to_string(pid) + "/cwd", ec);
      ours |= !ec && cwd.string().rfind(dir_, 0) == 0;
      if (ours && pid != ::getpid()) ::kill(pid, SIGKILL);
    }
    std::error_code ec;
    if (!dir_.empty() && !std::getenv("COHORT_TEST_KEEP")) std::filesystem::remove_all(dir_, ec);
  }

  // Starts the server on the data root and waits until it printed where it listens (and, on
  // the first start, the admin token).
  bool startServer(const std::vector<std::string>& flags = {"--cpus", "4"}) {
    const std::string out = dir_ + "/server-" + std::to_string(++starts_) + ".out";
    server_err_ = dir_ + "/server-" + std::to_string(starts_) + ".err";
    std::vector<std::string> args = {COHORT_BIN, "server", "--listen", "127.0.0.1:0",
                                     "--data-root", data_root_};
    args.insert(args.end(), flags.begin(), flags.end());
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    server_ = ::fork();
    if (server_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // a test that crashes takes its server along
      FILE* o = std::freopen(out.c_str(), "w", stdout);
      FILE* e = std::freopen(server_err_.c_str(), "w", stderr);
      if (!o || !e) _exit(126);
      ::execv(argv[0], argv.data());
      _exit(127);
    }
    const bool first = admin_.empty();
    bool up = waitFor(
        [&] {
          std::string text = readText(out);
          std::string listening = "listening on http://127.0.0.1:";
          if (text.find("listening on https://") != std::string::npos) {
            listening = "listening on https://127.0.0.1:";
          }
          auto at = text.find(listening);
          if (at == std::string::npos || text.find('\n', at) == std::string::npos) return false;
          port_ = std::atoi(text.c_str() + at + listening.size());
          if (!first) return true;
          const std::string token = "admin token: ";
          auto t = text.find(token);
          auto end = t == std::string::npos ? t : text.find('\n', t);
          if (end == std::string::npos) return false;
          admin_ = text.substr(t + token.size(), end - t - token.size());
          return true;
        },
        kDeadline, 50ms);
    if (!up || port_ <= 0) {
      ADD_FAILURE() << "the server did not come up:\n" << readText(out) << readText(server_err_);
      ::kill(server_, SIGKILL);
      ::waitpid(server_, nullptr, 0);
      server_ = -1;
      return false;
    }
    return true;
  }

  // SIGTERM (or `sig`) to the server; waits for it to exit.
  void stopServer(int sig = SIGTERM) {
    ::kill(server_, sig);
    int status = 0;
    bool gone = waitFor([&] { return ::waitpid(server_, &status, WNOHANG) == server_; },
                          kDeadline, 50ms);
    if (!gone) {
      ADD_FAILURE() << "the server did not stop on signal " << sig;
      ::kill(server_, SIGKILL);
      ::waitpid(server_, &status, 0);
    }
    server_ = -1;
  }

  Answer call(const std::string& method, const std::string& path, const std::string& token,
              const std::string& body = "", const std::string& content_type = "application/json") {
    httplib::Client client("127.0.0.1", port_);
    client.set_connection_timeout(5);
    client.set_read_timeout(30);
    client.set_url_encode(false);  // paths go as written (tests send odd ones on purpose)
    httplib::Headers headers;
    if (!token.empty()) headers.emplace("Authorization", "Bearer " + token);
    httplib::Result res = method == "GET"    ? client.Get(path, headers)
                          : method == "POST" ? client.Post(path, headers, body, content_type)
                          : method == "PUT"  ? client.Put(path, headers, body, content_type)
                                             : client.Delete(path, headers, body, content_type);
    return answerOf(method, path, res);
  }

  Answer answerOf(const std::string& method, const std::string& path, httplib::Result& res) {
    Answer a;
    if (!res) {
      a.body = "no answer: " + httplib::to_string(res.error());
      return a;
    }
    a.status = res->status;
    a.body = res->body;
    a.content_type = res->get_header_value("Content-Type");
    a.json = Json::parse(a.body, nullptr, false);
    for (const std::string& marker : kInternals) {
      EXPECT_FALSE(contains(a.body, marker))
          << method << " " << path << " shows C++ internals ('" << marker << "'): " << a.body;
    }
    if (a.status >= 400) {
      EXPECT_FALSE(a.code().empty()) << method << " " << path << ": not the error shape: " << a;
    }
    return a;
  }

  Answer get(const std::string& path, const std::string& token) { return call("GET", path, token); }
  Answer post(const std::string& path, const std::string& token, const Json& body) {
    return call("POST", path, token, body.dump());
  }

  // An account made by the admin; returns its token.
  std::string createAccount(const std::string& name) {
    Answer a = post("/v1/accounts", admin_, {{"name", name}});
    EXPECT_EQ(a.status, 201) << a;
    return a.json.is_object() ? a.json.value("token", "") : "";
  }

  // A generic job of one cohort-test-rank process with these actions.
  Json rankJob(const std::string& name, const std::vector<std::string>& actions) const {
    Json command = Json::array({testRank()});
    for (const std::string& a : actions) command.push_back(a);
    return {{"name", name}, {"framework", "generic"}, {"workdir", work_}, {"command", command}};
  }

  // A rank action that waits until openGate() creates the file: the test decides when the job
  // goes on, instead of racing a sleep.
  std::string gate(const std::string& name) const { return "wait-file=" + work_ + "/" + name; }
  void openGate(const std::string& name) const { std::ofstream(work_ + "/" + name).put('\n'); }

  // Submits; returns the job id ("" after a failed expectation).
  std::string submit(const std::string& token, const Json& job) {
    Answer a = post("/v1/jobs", token, {{"job", job}});
    EXPECT_EQ(a.status, 201) << a;
    return a.status == 201 ? a.json.value("id", "") : "";
  }

  // Polls the job's record until `until` holds; returns the last record seen.
  Json waitJob(const std::string& token, const std::string& id,
               const std::function<bool(const Json&)>& until) {
    Json record;
    bool ok = waitFor(
        [&] {
          Answer a = get("/v1/jobs/" + id, token);
          record = a.json;
          return a.status == 200 && until(record);
        },
        kDeadline, 50ms);
    EXPECT_TRUE(ok) << "job " << id << " never reached the state waited for; last: "
                    << record.dump();
    return record;
  }

  static bool isFinal(const Json& r) {
    const std::string s = r.value("state", "");
    return s == "succeeded" || s == "failed" || s == "stopped";
  }
  static bool isRunning(const Json& r) { return r.value("state", "") == "running"; }

  Json waitFinal(const std::string& token, const std::string& id) {
    return waitJob(token, id, isFinal);
  }

  // The served OpenAPI document.
  Json document() {
    Answer a = get("/v1/openapi.json", "");
    EXPECT_EQ(a.status, 200) << a;
    EXPECT_FALSE(a.json.is_discarded()) << "the document is not JSON";
    return a.json;
  }

  // Whether the answer `a` to `method path` matches the document.
  ::testing::AssertionResult matches(const Json& doc, const std::string& method,
                                     const std::string& path, int status, const Answer& a) {
    if (a.status != status) {
      return ::testing::AssertionFailure() << method << " " << path << ": status " << a;
    }
    Json schema = responseSchema(doc, method, path, status);
    if (schema.is_null()) {
      return ::testing::AssertionFailure()
             << method << " " << path << " " << status << " has no JSON schema in the document";
    }
    std::vector<std::string> problems;
    checkSchema(doc, schema, a.json, "body", problems);
    if (a.json.is_discarded()) problems.push_back("the body is not JSON");
    if (problems.empty()) return ::testing::AssertionSuccess();
    auto failure = ::testing::AssertionFailure();
    failure << method << " " << path << " " << status << " does not match the document:";
    for (const std::string& p : problems) failure << "\n  " << p;
    return failure << "\nbody: " << a.body;
  }

  std::string dir_, data_root_, work_, server_err_;
  pid_t server_ = -1;
  int port_ = 0;
  int starts_ = 0;
  std::string admin_;
};

// ---------------------------------------------------------------------------------------------
// The document

using ApiDocument = ServerFixture;

TEST_F(ApiDocument, IsServedWithoutATokenAndEveryOperationIsRouted) {
  Json doc = document();
  ASSERT_TRUE(doc.is_object());
  EXPECT_EQ(doc.value("openapi", ""), "3.0.3");
  ASSERT_TRUE(doc.contains("paths"));
  int operations = 0;
  for (const auto& [path, item] : doc["paths"].items()) {
    for (const auto& [method, operation] : item.items()) {
      if (method == "parameters") continue;
      std::string upper = method;
      for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      // Placeholders: ids and names that exist nowhere, so every call is harmless.
      std::string concrete = path;
      for (const auto& [from, to] :
           {std::pair<std::string, std::string>{
                "{id}", path.find("/v1/jobs/") == 0 ? "no-such-job" : "999999"},
            {"{bucket}", "api-probe"},
            {"{name}", "no-such-environment"},
            {"{path}", "probe.txt"}}) {
        for (size_t at; (at = concrete.find(from)) != std::string::npos;) {
          concrete.replace(at, from.size(), to);
        }
      }
      Answer a = call(upper, concrete, admin_, upper == "POST" || upper == "PUT" ? "{}" : "");
      ++operations;
      EXPECT_NE(a.status, 0) << upper << " " << concrete << ": " << a.body;
      EXPECT_FALSE(a.message().rfind("no such endpoint", 0) == 0)
          << "documented but not routed: " << upper << " " << path << " (" << a << ")";
    }
  }
  EXPECT_GE(operations, 20);
  // The check above can tell: an undocumented path is the generic 404.
  Answer unknown = get("/v1/no-such-thing", admin_);
  EXPECT_EQ(unknown.status, 404);
  EXPECT_EQ(unknown.message().rfind("no such endpoint", 0), 0u) << unknown;
}

TEST_F(ApiDocument, AnswersMatchTheDocumentedSchemas) {
  Json doc = document();
  ASSERT_TRUE(doc.is_object());
  Answer created = post("/v1/accounts", admin_, {{"name", "alice"}, {"max_cpus", 2.5}});
  EXPECT_TRUE(matches(doc, "POST", "/v1/accounts", 201, created));
  const std::string alice = created.json.value("token", "");
  createAccount("bob");

  Answer submitted =
      post("/v1/jobs", alice,
           {{"job", rankJob("schema", {"echo=hello", "echo=cohort.log step=7 loss=0.25",
                                       "output-file=model.txt"})}});
  EXPECT_TRUE(matches(doc, "POST", "/v1/jobs", 201, submitted));
  const std::string id = submitted.json.value("id", "");
  const std::string failing = submit(alice, rankJob("schema-fails", {"echo=oops", "exit=3"}));
  Json record = waitFinal(alice, id);
  EXPECT_EQ(record.value("state", ""), "succeeded") << record.dump();
  Json failed = waitFinal(alice, failing);
  EXPECT_EQ(failed.value("state", ""), "failed");
  EXPECT_TRUE(failed["root_cause"].is_object()) << failed.dump();

  const std::string job = "/v1/jobs/{id}";
  EXPECT_TRUE(matches(doc, "GET", job, 200, get("/v1/jobs/" + id, alice)));
  EXPECT_TRUE(matches(doc, "GET", job, 200, get("/v1/jobs/" + failing, alice)));
  EXPECT_TRUE(matches(doc, "GET", "/v1/jobs", 200, get("/v1/jobs", alice)));
  EXPECT_TRUE(matches(doc, "GET", "/v1/jobs", 200,
                      get("/v1/jobs?state=failed,succeeded&limit=5", admin_)));
  Answer events = get("/v1/jobs/" + id + "/events", alice);
  EXPECT_TRUE(matches(doc, "GET", job + "/events", 200, events));
  EXPECT_GE(events.json.value("events", Json::array()).size(), 3u);
  Answer ranks = get("/v1/jobs/" + id + "/ranks", alice);
  EXPECT_TRUE(matches(doc, "GET", job + "/ranks", 200, ranks));
  EXPECT_EQ(ranks.json.value("ranks", Json::array()).size(), 1u);
  EXPECT_TRUE(
      matches(doc, "GET", job + "/ranks", 200, get("/v1/jobs/" + failing + "/ranks", alice)));
  Answer logged = get("/v1/jobs/" + id + "/metrics", alice);
  EXPECT_TRUE(matches(doc, "GET", job + "/metrics", 200, logged));
  ASSERT_EQ(logged.json.value("metrics", Json::array()).size(), 1u) << logged;
  EXPECT_EQ(logged.json["metrics"][0].value("loss", 0.0), 0.25) << logged;
  EXPECT_EQ(logged.json["metrics"][0].value("step", 0), 7) << logged;
  EXPECT_EQ(get("/v1/jobs/" + id + "/metrics?after=" +
                    std::to_string(logged.json["metrics"][0].value("t", int64_t{0})),
                alice)
                .json.value("metrics", Json::array())
                .size(),
            0u);
  EXPECT_EQ(get("/v1/jobs/" + id + "/metrics?limit=0", alice).status, 400);
  Answer outputs = get("/v1/jobs/" + id + "/outputs", alice);
  EXPECT_TRUE(matches(doc, "GET", job + "/outputs", 200, outputs));
  EXPECT_EQ(outputs.json.value("files", Json::array()).size(), 1u) << outputs;
  EXPECT_TRUE(
      matches(doc, "POST", job + "/stop", 202, call("POST", "/v1/jobs/" + id + "/stop", alice)));
  Answer logs = get("/v1/jobs/" + id + "/logs?rank=0", alice);
  EXPECT_EQ(logs.status, 200);
  EXPECT_EQ(logs.body, "hello\ncohort.log step=7 loss=0.25\n") << "a metric line stays in the log";

  Answer upload = call("PUT", "/v1/store/alice-data/run1/model.txt", alice, "weights",
                       "application/octet-stream");
  EXPECT_TRUE(matches(doc, "PUT", "/v1/store/{bucket}/{path}", 201, upload));
  EXPECT_TRUE(matches(doc, "GET", "/v1/store/{bucket}/{path}", 200,
                      get("/v1/store/alice-data/run1?list=1", alice)));
  EXPECT_TRUE(matches(doc, "GET", "/v1/buckets", 200, get("/v1/buckets", alice)));
  Answer share = post("/v1/shares", alice,
                      {{"prefix", "store://alice-data/run1"}, {"with", "bob"}, {"access", "read"}});
  EXPECT_TRUE(matches(doc, "POST", "/v1/shares", 201, share));
  EXPECT_TRUE(matches(doc, "GET", "/v1/shares", 200, get("/v1/shares", alice)));
  EXPECT_TRUE(matches(doc, "GET", "/v1/accounts", 200, get("/v1/accounts", admin_)));
  Answer token = post("/v1/tokens", alice, {{"label", "laptop"}});
  EXPECT_TRUE(matches(doc, "POST", "/v1/tokens", 201, token));
  EXPECT_TRUE(matches(doc, "GET", "/v1/tokens", 200, get("/v1/tokens", alice)));
  EXPECT_TRUE(matches(doc, "GET", "/v1/tokens", 200, get("/v1/tokens", admin_)));
  EXPECT_TRUE(matches(doc, "GET", "/v1/whoami", 200, get("/v1/whoami", alice)));

  // Errors have the documented shape too.
  EXPECT_TRUE(matches(doc, "GET", job, 404, get("/v1/jobs/nothing-here", alice)));
  EXPECT_TRUE(matches(doc, "GET", "/v1/whoami", 401, get("/v1/whoami", "")));
  EXPECT_TRUE(matches(doc, "GET", "/v1/accounts", 403, get("/v1/accounts", alice)));
  EXPECT_TRUE(matches(doc, "POST", "/v1/jobs", 400, call("POST", "/v1/jobs", alice, "{")));
  EXPECT_TRUE(matches(doc, "DELETE", "/v1/tokens/{id}", 404,
                      call("DELETE", "/v1/tokens/424242", alice)));
  Answer metrics = get("/metrics", "");
  EXPECT_EQ(metrics.status, 200);
  EXPECT_TRUE(contains(metrics.body, "cohort_jobs{state=\"succeeded\"}")) << metrics;

  // The checker can fail: a record without its id, or a job with a string for ranks.
  Answer broken = get("/v1/jobs/" + id, alice);
  broken.json.erase("id");
  EXPECT_FALSE(matches(doc, "GET", job, 200, broken));
  broken.json["id"] = id;
  broken.json["ranks"] = "1";
  EXPECT_FALSE(matches(doc, "GET", job, 200, broken));
}

// ---------------------------------------------------------------------------------------------
// Isolation between accounts

using ServerIsolation = ServerFixture;

TEST_F(ServerIsolation, AnotherAccountsJobIsNotFoundOnEveryEndpoint) {
  const std::string alice = createAccount("alice");
  const std::string bob = createAccount("bob");
  const std::string name = "alice-private-run";
  const std::string id = submit(alice, rankJob(name, {"echo=secret", "output-file=model.txt"}));
  ASSERT_FALSE(id.empty());
  EXPECT_EQ(waitFinal(alice, id).value("state", ""), "succeeded");

  // Bob's answers for alice's job are those for a job that does not exist.
  const std::string ghost = "ghost-20000101-000000-abcdef";
  struct Probe {
    std::string method, suffix;
  };
  const std::vector<Probe> probes = {{"GET", ""},         {"GET", "/events"},
                                     {"GET", "/ranks"},   {"GET", "/logs"},
                                     {"GET", "/metrics"},     {"GET", "/stacks"},
                                     {"POST", "/stacks"}, {"GET", "/logs?rank=0"},
                                     {"GET", "/outputs"}, {"GET", "/outputs/model.txt"},
                                     {"POST", "/stop"},   {"DELETE", ""}};
  for (const Probe& p : probes) {
    Answer theirs = call(p.method, "/v1/jobs/" + id + p.suffix, bob);
    Answer none = call(p.method, "/v1/jobs/" + ghost + p.suffix, bob);
    EXPECT_EQ(theirs.status, 404) << p.method << " " << p.suffix << ": " << theirs;
    EXPECT_EQ(theirs.code(), "not_found") << p.method << " " << p.suffix;
    std::string body = theirs.body;
    for (size_t at; (at = body.find(id)) != std::string::npos;) body.replace(at, id.size(), "ID");
    std::string expected = none.body;
    for (size_t at; (at = expected.find(ghost)) != std::string::npos;) {
      expected.replace(at, ghost.size(), "ID");
    }
    EXPECT_EQ(body, expected) << p.method << " " << p.suffix;
    EXPECT_FALSE(contains(body, name)) << p.method << " " << p.suffix << ": " << theirs;
    EXPECT_FALSE(contains(body, "secret")) << p.method << " " << p.suffix;
  }
  // Still there, untouched by bob's stop and delete.
  EXPECT_EQ(get("/v1/jobs/" + id, alice).status, 200);
  EXPECT_EQ(get("/v1/jobs/" + id + "/outputs/model.txt", alice).body, "rank 0\n");

  auto listed = [&](const std::string& token) {
    Answer a = get("/v1/jobs", token);
    EXPECT_EQ(a.status, 200) << a;
    for (const Json& j : a.json.value("jobs", Json::array())) {
      if (j.value("id", "") == id) return true;
    }
    return false;
  };
  EXPECT_TRUE(listed(alice));
  EXPECT_TRUE(listed(admin_));
  EXPECT_FALSE(listed(bob));
  EXPECT_FALSE(contains(get("/v1/jobs?state=succeeded", bob).body, name));
}

TEST_F(ServerIsolation, StorePathsAreNormalisedAsSharesAreAndAFileIsNoDirectory) {
  const std::string alice = createAccount("alice");
  const std::string bob = createAccount("bob");
  Answer up = call("PUT", "/v1/store/alice-data/run1/model.txt", alice, "weights",
                   "application/octet-stream");
  ASSERT_EQ(up.status, 201) << up;
  ASSERT_EQ(post("/v1/shares", alice,
                 {{"prefix", "store://alice-data/run1"}, {"with", "bob"}, {"access", "read"}})
                .status,
            201);
  // The share's prefix is normalised; so is the path it is checked against.
  Answer odd = get("/v1/store/alice@alice-data/./run1//model.txt", bob);
  EXPECT_EQ(odd.status, 200) << odd;
  EXPECT_EQ(odd.body, "weights");

  Answer under = call("PUT", "/v1/store/alice-data/run1/model.txt/more.txt", alice, "x",
                      "application/octet-stream");
  EXPECT_EQ(under.status, 409) << under;
  EXPECT_EQ(under.code(), "failed_precondition") << under;
  EXPECT_TRUE(contains(under.message(), "store://alice-data/run1/model.txt is a file")) << under;
  EXPECT_FALSE(contains(under.body, data_root_)) << under;
}

// A server takes local inputs only below its --input-roots (here none): a path that leads into
// the data root by "..", or anywhere else, is refused with the same words whether it exists or
// not. (attack_test.cc tries links below an input root.)
TEST_F(ServerIsolation, ALocalInputCannotReachIntoTheDataRootByDotDotOrALink) {
  std::filesystem::create_symlink(data_root_ + "/server", work_ + "/sneak");
  for (const std::string& source : {work_ + "/../data/server", work_ + "/sneak",
                                    data_root_ + "/server/admin.token", std::string("/etc/shadow"),
                                    std::string("/no/such/file")}) {
    Json job = rankJob("sneaky", {});
    job["inputs"] = Json::array({{{"source", source}, {"target", "in"}}});
    Answer a = post("/v1/jobs", admin_, {{"job", job}});
    EXPECT_EQ(a.status, 400) << source << ": " << a;
    EXPECT_EQ(a.message(), "inputs[0].source: '" + source +
                               "': this server takes no local inputs (cohort server "
                               "--input-root DIR lists where they may be); copy the data into "
                               "the store (cohort cp DIR server://BUCKET/PATH) and name "
                               "store://BUCKET/PATH")
        << a;
  }
}

TEST_F(ServerIsolation, StoreNeedsAShareAndRevokingItWorksAtOnce) {
  const std::string alice = createAccount("alice");
  const std::string bob = createAccount("bob");
  for (std::string path : {"run1/model.txt", "run10/model.txt", "other/secret.txt"}) {
    Answer up = call("PUT", "/v1/store/alice-data/" + path, alice, "weights of " + path,
                     "application/octet-stream");
    ASSERT_EQ(up.status, 201) << up;
  }
  const std::string inside = "/v1/store/alice@alice-data/run1/model.txt";
  Answer before = get(inside, bob);
  EXPECT_EQ(before.status, 404) << before;
  EXPECT_EQ(before.code(), "not_found");
  EXPECT_FALSE(contains(before.body, "weights"));
  EXPECT_EQ(get("/v1/store/alice@alice-data?list=1", bob).status, 404);
  // Bob's own "alice-data" is not alice's.
  EXPECT_EQ(get("/v1/store/alice-data/run1/model.txt", bob).status, 404);

  Answer share = post("/v1/shares", alice,
                      {{"prefix", "store://alice-data/run1"}, {"with", "bob"}, {"access", "read"}});
  ASSERT_EQ(share.status, 201) << share;
  const int64_t share_id = share.json.value("id", int64_t{0});

  Answer read = get(inside, bob);
  EXPECT_EQ(read.status, 200) << read;
  EXPECT_EQ(read.body, "weights of run1/model.txt");
  EXPECT_EQ(get("/v1/store/alice@alice-data/run1?list=1", bob).status, 200);
  for (std::string outside :
       {"/v1/store/alice@alice-data/other/secret.txt", "/v1/store/alice@alice-data/run10/model.txt",
        "/v1/store/alice@alice-data?list=1", "/v1/store/alice@alice-data/run1/../other/secret.txt",
        "/v1/store/alice-data/run1/model.txt"}) {
    Answer a = get(outside, bob);
    EXPECT_TRUE(a.status == 404 || a.status == 400) << outside << ": " << a;
    EXPECT_FALSE(contains(a.body, "weights")) << outside;
  }
  Answer write = call("PUT", "/v1/store/alice@alice-data/run1/model.txt", bob, "overwritten",
                      "application/octet-stream");
  EXPECT_EQ(write.status, 403) << write;
  EXPECT_EQ(write.code(), "permission_denied");
  EXPECT_EQ(get(inside, alice).body, "weights of run1/model.txt");
  // Bob sees the share, named as he reaches it, but cannot revoke it; alice can.
  EXPECT_TRUE(contains(get("/v1/shares", bob).body, "store://alice@alice-data/run1"));
  EXPECT_EQ(call("DELETE", "/v1/shares/" + std::to_string(share_id), bob).status, 403);

  Answer revoked = call("DELETE", "/v1/shares/" + std::to_string(share_id), alice);
  EXPECT_EQ(revoked.status, 204) << revoked;
  Answer after = get(inside, bob);
  EXPECT_EQ(after.status, 404) << after;
  EXPECT_FALSE(contains(after.body, "weights"));
}

TEST_F(ServerIsolation, JobInputFromAnotherAccountsBucketNeedsAShare) {
  const std::string alice = createAccount("alice");
  const std::string bob = createAccount("bob");
  ASSERT_EQ(call("PUT", "/v1/store/alice-data/run1/model.txt", alice, "weights",
                 "application/octet-stream").status, 201);
  Json job = rankJob("bob-reads", {"work-file=model.txt"});
  for (const std::string source :
       {"store://alice@alice-data/run1/model.txt", "store://alice-data/run1/model.txt"}) {
    job["inputs"] = Json::array({{{"source", source}, {"target", "model.txt"}}});
    Answer refused = post("/v1/jobs", bob, {{"job", job}});
    EXPECT_EQ(refused.status, 404) << refused;
    EXPECT_EQ(refused.code(), "not_found");
    EXPECT_EQ(refused.message(), "inputs[0].source: " + source + ": not found") << refused;
  }
  job["inputs"] = Json::array({{{"source", "store://alice@alice-data/run1/model.txt"},
                                {"target", "model.txt"}}});

  ASSERT_EQ(post("/v1/shares", alice,
                 {{"prefix", "store://alice-data/run1"}, {"with", "bob"}, {"access", "read"}})
                .status, 201);
  const std::string id = submit(bob, job);
  ASSERT_FALSE(id.empty());
  Json record = waitFinal(bob, id);
  EXPECT_EQ(record.value("state", ""), "succeeded") << record.dump();
}

// The issue's first hour: one account's first output to store://models does not take the name
// from every other account. Each writes its own "models" with the same job file.
TEST_F(ServerIsolation, EveryAccountsJobWritesItsOwnModelsBucket) {
  const std::string alice = createAccount("alice");
  const std::string bob = createAccount("bob");
  Json job = rankJob("train", {"output-file=model.txt"});
  job["outputs"] = Json::array({{{"source", "output/"}, {"target", "store://models/{job}/"}}});
  const std::string first = submit(alice, job);
  ASSERT_EQ(waitFinal(alice, first).value("state", ""), "succeeded");
  const std::string second = submit(bob, job);
  ASSERT_FALSE(second.empty());
  Json record = waitFinal(bob, second);
  ASSERT_EQ(record.value("state", ""), "succeeded") << record.dump();
  EXPECT_EQ(get("/v1/store/models/" + second + "/model.txt", bob).body, "rank 0\n");
  EXPECT_EQ(get("/v1/store/models/" + second + "/model.txt", alice).status, 404);
  EXPECT_EQ(get("/v1/store/models/" + first + "/model.txt", bob).status, 404);
  EXPECT_TRUE(std::filesystem::exists(data_root_ + "/store/bob@models/" + second + "/model.txt"));
  Answer buckets = get("/v1/buckets", bob);
  ASSERT_EQ(buckets.json["buckets"].size(), 1u) << buckets;
  EXPECT_EQ(buckets.json["buckets"][0].value("name", ""), "models");
  EXPECT_EQ(buckets.json["buckets"][0].value("owner", ""), "bob");
}

// A data root from before buckets belonged to accounts (schema version 5, each bucket in
// store/NAME): the server opens it, each bucket is its owner's where it was, shares still work,
// and another account's first write of the name makes a bucket of its own.
TEST_F(ServerIsolation, AnOldDataRootsBucketsBecomeTheirOwners) {
  const std::string alice = createAccount("alice");
  const std::string bob = createAccount("bob");
  ASSERT_EQ(call("PUT", "/v1/store/models/run1/model.txt", alice, "alice's weights",
                 "application/octet-stream").status, 201);
  ASSERT_EQ(post("/v1/shares", alice,
                 {{"prefix", "store://models/run1"}, {"with", "bob"}, {"access", "read"}})
                .status, 201);
  stopServer();
  // Back to the layout of schema version 5, as cohort before this one left it.
  std::filesystem::rename(data_root_ + "/store/alice@models", data_root_ + "/store/models");
  ASSERT_EQ(sqlite(data_root_ + "/server/cohort.db",
                   "CREATE TABLE old_buckets(name TEXT PRIMARY KEY NOT NULL, owner TEXT NOT NULL, "
                   "created INTEGER NOT NULL);"
                   "INSERT INTO old_buckets SELECT name, owner, created FROM buckets;"
                   "DROP TABLE buckets; ALTER TABLE old_buckets RENAME TO buckets;"
                   "DROP INDEX shares_bucket_grantee;"
                   "CREATE INDEX shares_bucket_grantee ON shares(bucket, grantee);"
                   "PRAGMA user_version = 5;"),
            "");
  ASSERT_TRUE(startServer());

  EXPECT_EQ(get("/v1/store/models/run1/model.txt", alice).body, "alice's weights");
  EXPECT_EQ(get("/v1/store/alice@models/run1/model.txt", bob).body, "alice's weights");
  EXPECT_EQ(get("/v1/store/models/run1/model.txt", bob).status, 404);
  ASSERT_EQ(call("PUT", "/v1/store/models/run1/model.txt", bob, "bob's weights",
                 "application/octet-stream").status, 201);
  EXPECT_EQ(get("/v1/store/models/run1/model.txt", bob).body, "bob's weights");
  EXPECT_EQ(get("/v1/store/models/run1/model.txt", alice).body, "alice's weights");
  EXPECT_EQ(readText(data_root_ + "/store/models/run1/model.txt"), "alice's weights");
  EXPECT_EQ(readText(data_root_ + "/store/bob@models/run1/model.txt"), "bob's weights");
  // A job of alice's reads her old bucket and writes into it.
  Json job = rankJob("reads-old", {"work-file=in/model.txt", "output-file=out.txt"});
  job["inputs"] = Json::array({{{"source", "store://models/run1"}, {"target", "in"}}});
  job["outputs"] = Json::array({{{"source", "output/"}, {"target", "store://models/run2/"}}});
  const std::string id = submit(alice, job);
  Json record = waitFinal(alice, id);
  EXPECT_EQ(record.value("state", ""), "succeeded") << record.dump();
  EXPECT_EQ(readText(data_root_ + "/store/models/run2/out.txt"), "rank 0\n");
}

TEST_F(ServerIsolation, AShareRevokedWhileTheJobWaitsStopsItFromStarting) {
  stopServer();
  ASSERT_TRUE(startServer({"--cpus", "1"}));
  const std::string alice = createAccount("alice");
  const std::string bob = createAccount("bob");
  ASSERT_EQ(call("PUT", "/v1/store/alice-data/run1/model.txt", alice, "weights",
                 "application/octet-stream").status, 201);
  Answer share = post("/v1/shares", alice,
                      {{"prefix", "store://alice-data/run1"}, {"with", "bob"}, {"access", "read"}});
  ASSERT_EQ(share.status, 201) << share;
  // Bob's job waits behind a job that holds the only CPU.
  const std::string first = submit(bob, rankJob("first", {"sleep=30"}));
  waitJob(bob, first, isRunning);
  Json job = rankJob("bob-reads", {"work-file=model.txt"});
  job["inputs"] = Json::array({{{"source", "store://alice@alice-data/run1/model.txt"},
                                {"target", "model.txt"}}});
  const std::string id = submit(bob, job);
  ASSERT_FALSE(id.empty());

  EXPECT_EQ(call("DELETE", "/v1/shares/" + std::to_string(share.json.value("id", 0)), alice)
                .status,
            204);
  EXPECT_EQ(post("/v1/jobs/" + first + "/stop", bob, Json::object()).status, 202);
  Json record = waitFinal(bob, id);
  EXPECT_EQ(record.value("state", ""), "failed") << record.dump();
  EXPECT_TRUE(contains(record.value("reason", ""), "could not start: inputs[0].source"))
      << record.dump();
  EXPECT_TRUE(record["started"].is_string()) << record.dump();
}

TEST_F(ServerIsolation, AJobSeesNeitherTheStoreNorOtherJobsDirectories) {
  if (!contains(readText(dir_ + "/server-1.out"), "jobs run isolated")) {
    GTEST_SKIP() << "bubblewrap does not work here: the server runs jobs without the sandbox";
  }
  const std::string alice = createAccount("alice");
  const std::string bob = createAccount("bob");
  ASSERT_EQ(call("PUT", "/v1/store/alice-data/run1/model.txt", alice, "secret-weights",
                 "application/octet-stream").status, 201);
  const std::string first = submit(alice, rankJob("alice-job", {"echo=alice-was-here"}));
  waitFinal(alice, first);

  Json snoop = {{"name", "snoop"}, {"framework", "generic"}, {"workdir", work_},
                {"command", {"/bin/sh", "-c",
                             "cat " + data_root_ + "/store/alice@alice-data/run1/model.txt; "
                             "cat " + data_root_ + "/jobs/" + first + "/console.log; "
                             "ls " + data_root_ + "/jobs " + data_root_ + "/server; true"}}};
  const std::string id = submit(bob, snoop);
  Json record = waitFinal(bob, id);
  EXPECT_EQ(record.value("state", ""), "succeeded") << record.dump();
  const std::string log = get("/v1/jobs/" + id + "/logs?rank=0", bob).body;
  EXPECT_FALSE(contains(log, "secret-weights")) << log;
  EXPECT_FALSE(contains(log, "alice-was-here")) << log;
  EXPECT_FALSE(contains(log, "\n" + first + "\n")) << "listed: " << log;
  EXPECT_FALSE(contains(log, "cohort.db")) << log;
  EXPECT_TRUE(contains(log, id)) << "its own directory is there: " << log;
}

TEST_F(ServerIsolation, ASandboxedJobImportsCohortWithNothingInstalled) {
  if (!contains(readText(dir_ + "/server-1.out"), "jobs run isolated")) {
    GTEST_SKIP() << "bubblewrap does not work here: the server runs jobs without the sandbox";
  }
  const std::string alice = createAccount("alice");
  // Debian's Python, which never had cohort installed: the module comes with the job.
  Json job = {{"name", "helpers"}, {"framework", "generic"}, {"workdir", work_},
              {"command", {"/usr/bin/python3", "-c",
                           "import cohort; cohort.log(step=1, loss=0.5); "
                           "print('from', cohort.__file__, cohort.rank())"}}};
  const std::string id = submit(alice, job);
  Json record = waitFinal(alice, id);
  EXPECT_EQ(record.value("state", ""), "succeeded") << record.dump();
  const std::string log = get("/v1/jobs/" + id + "/logs?rank=0", alice).body;
  EXPECT_TRUE(contains(log, "cohort.log step=1 loss=0.5")) << log;
  EXPECT_TRUE(contains(log, "from " + data_root_ + "/jobs/" + id +
                                "/files/python/package/cohort/__init__.py 0"))
      << log;
}

TEST_F(ServerIsolation, TokensBelongToTheirAccountAndRevokingOneWorksAtOnce) {
  const std::string alice = createAccount("alice");
  const std::string bob = createAccount("bob");
  Answer made = post("/v1/tokens", alice, {{"label", "laptop"}});
  ASSERT_EQ(made.status, 201) << made;
  const std::string laptop = made.json.value("token", "");
  const std::string token_id = std::to_string(made.json.value("id", int64_t{0}));
  EXPECT_EQ(get("/v1/whoami", laptop).json.value("account", ""), "alice");
  EXPECT_FALSE(contains(get("/v1/tokens", bob).body, "laptop"));

  Answer stolen = call("DELETE", "/v1/tokens/" + token_id, bob);
  EXPECT_EQ(stolen.status, 404) << stolen;
  EXPECT_EQ(stolen.code(), "not_found");
  EXPECT_EQ(get("/v1/whoami", laptop).status, 200);
  // Bob may not make tokens for alice either.
  EXPECT_EQ(post("/v1/tokens", bob, {{"label", "x"}, {"account", "alice"}}).status, 403);

  EXPECT_EQ(call("DELETE", "/v1/tokens/" + token_id, alice).status, 204);
  Answer gone = get("/v1/whoami", laptop);
  EXPECT_EQ(gone.status, 401) << gone;
  EXPECT_EQ(gone.code(), "unauthenticated");
  EXPECT_EQ(get("/v1/whoami", alice).status, 200);
  EXPECT_EQ(get("/v1/whoami", "").status, 401);
  EXPECT_EQ(get("/v1/whoami", "cohort_0000").status, 401);
}

TEST_F(ServerIsolation, OnlyAnAdminManagesAccounts) {
  const std::string alice = createAccount("alice");
  Answer made = post("/v1/accounts", alice, {{"name", "mallory"}, {"admin", true}});
  EXPECT_EQ(made.status, 403) << made;
  EXPECT_EQ(made.code(), "permission_denied");
  EXPECT_EQ(get("/v1/accounts", alice).status, 403);
  Answer taken = post("/v1/accounts", admin_, {{"name", "alice"}});
  EXPECT_EQ(taken.status, 409) << taken;
  EXPECT_FALSE(contains(get("/v1/accounts", admin_).body, "mallory"));
}

// ---------------------------------------------------------------------------------------------
// GPUs

using ServerGpus = ServerFixture;

// The value of `name` in a log of `env` output ("" when absent, "<unset>" when not there at all).
std::string envValue(const std::string& log, const std::string& name) {
  std::istringstream in(log);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(name + "=", 0) == 0) return line.substr(name.size() + 1);
  }
  return "<unset>";
}

TEST_F(ServerGpus, EachJobGetsGpusNoOtherRunningJobHolds) {
  stopServer();
  // No GPU here: --gpus makes the server hand out indices 0 and 1 all the same.
  ASSERT_TRUE(startServer({"--cpus", "4", "--gpus", "2"}));
  auto gpuJob = [&](const std::string& name, int gpus) {
    Json job = rankJob(name, {"env", gate("go")});
    job["roles"] = {{"worker", {{"nodes", 1}, {"resources", {{"gpus", gpus}}}}}};
    return submit(admin_, job);
  };
  const std::string a = gpuJob("a", 1);
  const std::string b = gpuJob("b", 1);
  const std::string none = gpuJob("none", 0);
  Json refused = rankJob("three", {"exit=0"});
  refused["roles"] = {{"worker", {{"nodes", 3}, {"resources", {{"gpus", 1}}}}}};
  Answer too_many = post("/v1/jobs", admin_, {{"job", refused}});
  EXPECT_EQ(too_many.status, 400) << too_many;
  EXPECT_TRUE(contains(too_many.message(), "3 GPUs")) << too_many;

  // a and b run at the same time, on different GPUs; the job without GPUs sees none.
  waitJob(admin_, a, isRunning);
  waitJob(admin_, b, isRunning);
  openGate("go");
  for (const std::string& id : {a, b, none}) waitFinal(admin_, id);
  // Which of the machine's GPUs each has: its CUDA_VISIBLE_DEVICES, or in the sandbox, where a
  // job's GPUs are numbered from 0 as in a container, the one device file put back for it.
  auto machineGpu = [&](const std::string& id) {
    const std::string seen =
        envValue(get("/v1/jobs/" + id + "/logs?rank=0", admin_).body, "CUDA_VISIBLE_DEVICES");
    Json plan = readJson(data_root_ + "/jobs/" + id + "/plan.json");
    std::string bound;
    for (const Json& arg : plan["nodes"][0]["ranks"][0]["argv"]) {
      const std::string text = arg.is_string() ? arg.get<std::string>() : "";
      if (text.rfind("/dev/nvidia", 0) == 0 && std::isdigit(static_cast<unsigned char>(text.back()))) {
        bound = text.substr(11);
      }
    }
    if (!bound.empty()) {
      EXPECT_EQ(seen, "0") << "in its sandbox a job's one GPU is its first";
    }
    return bound.empty() ? seen : bound;
  };
  const std::string gpu_a = machineGpu(a);
  const std::string gpu_b = machineGpu(b);
  EXPECT_TRUE(gpu_a == "0" || gpu_a == "1") << gpu_a;
  EXPECT_TRUE(gpu_b == "0" || gpu_b == "1") << gpu_b;
  EXPECT_NE(gpu_a, gpu_b);
  EXPECT_EQ(envValue(get("/v1/jobs/" + none + "/logs?rank=0", admin_).body,
                     "CUDA_VISIBLE_DEVICES"),
            "");
}

// ---------------------------------------------------------------------------------------------
// Metrics

// The value of the sample `name` (labels included, as written) in Prometheus text; -1 if absent.
double sample(const std::string& text, const std::string& name) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(name + " ", 0) == 0) return std::stod(line.substr(name.size() + 1));
  }
  return -1;
}

using ServerMetrics = ServerFixture;

TEST_F(ServerMetrics, CountJobsTheQueueSchedulingPassesAndRequests) {
  stopServer();
  ASSERT_TRUE(startServer({"--cpus", "1"}));
  const std::string running = submit(admin_, rankJob("long", {"sleep=30"}));
  waitJob(admin_, running, isRunning);
  const std::string queued = submit(admin_, rankJob("behind", {"exit=0"}));
  EXPECT_EQ(get("/v1/jobs/no-such-job", admin_).status, 404);
  waitJob(admin_, queued, [](const Json& r) {
    return r["waiting"].is_object() && r["waiting"].value("kind", "") == "reserved";
  });

  Answer m = get("/metrics", "");
  ASSERT_EQ(m.status, 200);
  EXPECT_TRUE(contains(m.content_type, "text/plain")) << m.content_type;
  EXPECT_EQ(sample(m.body, "cohort_jobs{state=\"running\"}"), 1) << m.body;
  EXPECT_EQ(sample(m.body, "cohort_jobs{state=\"queued\"}"), 1) << m.body;
  EXPECT_EQ(sample(m.body, "cohort_queue_length"), 1) << m.body;
  EXPECT_GE(sample(m.body, "cohort_schedule_seconds_count"), 2) << m.body;
  EXPECT_EQ(sample(m.body, "cohort_http_requests_total{method=\"POST\",route=\"/v1/jobs\","
                           "status=\"201\"}"),
            2)
      << m.body;
  EXPECT_GE(sample(m.body, "cohort_http_requests_total{method=\"GET\",route=\"/v1/jobs/{id}\","
                           "status=\"404\"}"),
            1)
      << m.body;
  EXPECT_GE(sample(m.body, "cohort_http_request_duration_seconds_count{route=\"/v1/jobs\"}"), 2)
      << m.body;
  // Every line is a comment or `name{labels} value`.
  std::istringstream in(m.body);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    size_t space = line.rfind(' ');
    ASSERT_NE(space, std::string::npos) << line;
    std::string value = line.substr(space + 1);
    char* end = nullptr;
    std::strtod(value.c_str(), &end);
    EXPECT_TRUE(*end == '\0' && !value.empty()) << "not a sample: " << line;
  }
  EXPECT_EQ(post("/v1/jobs/" + running + "/stop", admin_, Json::object()).status, 202);
  waitFinal(admin_, queued);
}

// ---------------------------------------------------------------------------------------------
// Hostile and broken requests

using ServerRobustness = ServerFixture;

TEST_F(ServerRobustness, ASecondServerOnTheSamePortOrDataRootIsRefused) {
  const std::string other = dir_ + "/other";
  RunResult port = runCohort({"server", "--listen", "127.0.0.1:" + std::to_string(port_),
                              "--data-root", other},
                             20s);
  EXPECT_EQ(port.exit_code, 1) << port.out << port.err;
  EXPECT_TRUE(contains(port.err, "cannot listen on 127.0.0.1:" + std::to_string(port_)))
      << port.err;
  RunResult root =
      runCohort({"server", "--listen", "127.0.0.1:0", "--data-root", data_root_}, 20s);
  EXPECT_EQ(root.exit_code, 1) << root.out << root.err;
  EXPECT_TRUE(contains(root.err, "another cohort server (pid ")) << root.err;
  // The first server still answers.
  EXPECT_EQ(get("/v1/whoami", admin_).status, 200);
}

TEST_F(ServerRobustness, AJobStoppedWhileItStartsEndsStoppedNotLost) {
  // The stop lands at any point of the start: before the coordinator runs, while it sets up,
  // or once the rank runs. Each ending is "stopped".
  for (int delay_ms : {0, 5, 20, 60, 150}) {
    Json job = rankJob("stop-" + std::to_string(delay_ms), {"sleep=60"});
    job["policy"] = {{"grace_period", "1s"}};
    const std::string id = submit(admin_, job);
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    EXPECT_EQ(post("/v1/jobs/" + id + "/stop", admin_, Json::object()).status, 202);
    Json record = waitFinal(admin_, id);
    EXPECT_EQ(record.value("state", ""), "stopped") << delay_ms << " ms: " << record.dump();
  }
}

TEST_F(ServerRobustness, MalformedJsonIsAnInvalidArgument) {
  for (std::string body : {"{", "not json", "", "[1, 2]", "{\"job\": ", "\"text\""}) {
    Answer a = call("POST", "/v1/jobs", admin_, body);
    EXPECT_EQ(a.status, 400) << body << ": " << a;
    EXPECT_EQ(a.code(), "invalid_argument") << body;
  }
}

TEST_F(ServerRobustness, BodyOverFourMebibytesIsTooLarge) {
  const std::string big = "{\"job\": {\"name\": \"" + std::string(5 << 20, 'x') + "\"}}";
  Answer a = call("POST", "/v1/jobs", admin_, big);
  EXPECT_EQ(a.status, 413) << a;
  EXPECT_EQ(a.code(), "too_large");
  // Sent chunked, without a Content-Length.
  httplib::Client client("127.0.0.1", port_);
  client.set_read_timeout(30);
  httplib::Headers headers = {{"Authorization", "Bearer " + admin_}};
  httplib::Result res = client.Post(
      "/v1/accounts", headers,
      [&big](size_t offset, httplib::DataSink& sink) {
        if (offset < big.size()) {
          sink.write(big.data() + offset, std::min<size_t>(1 << 16, big.size() - offset));
        } else {
          sink.done();
        }
        return true;
      },
      "application/json");
  Answer chunked = answerOf("POST", "/v1/accounts", res);
  EXPECT_EQ(chunked.status, 413) << chunked;
  EXPECT_EQ(chunked.code(), "too_large");
  EXPECT_EQ(get("/v1/whoami", admin_).status, 200);
}

TEST_F(ServerRobustness, UnknownFieldsAreRefusedByName) {
  Answer top = post("/v1/jobs", admin_, {{"job", rankJob("x", {})}, {"prio", 1}});
  EXPECT_EQ(top.status, 400) << top;
  EXPECT_TRUE(contains(top.message(), "'prio'")) << top;
  Json job = rankJob("x", {});
  job["comand"] = "echo";
  Answer inner = post("/v1/jobs", admin_, {{"job", job}});
  EXPECT_EQ(inner.status, 400) << inner;
  EXPECT_TRUE(contains(inner.message(), "comand")) << inner;
  Answer share =
      post("/v1/shares", admin_, {{"prefix", "store://b/x"}, {"with", "x"}, {"mode", "r"}});
  EXPECT_EQ(share.status, 400) << share;
  EXPECT_TRUE(contains(share.message(), "'mode'")) << share;
  Answer account = post("/v1/accounts", admin_, {{"name", "carol"}, {"quota", 3}});
  EXPECT_EQ(account.status, 400) << account;
  EXPECT_TRUE(contains(account.message(), "'quota'")) << account;
}

TEST_F(ServerRobustness, JobWithoutACommandOrWithARelativeWorkdirIsRefused) {
  Json job = rankJob("x", {});
  job.erase("command");
  Answer missing = post("/v1/jobs", admin_, {{"job", job}});
  EXPECT_EQ(missing.status, 400) << missing;
  EXPECT_EQ(missing.code(), "invalid_argument");
  EXPECT_TRUE(contains(missing.message(), "command")) << missing;

  for (std::string workdir : {"work", ".", "../tmp", ""}) {
    Json relative = rankJob("x", {});
    relative["workdir"] = workdir;
    Answer a = post("/v1/jobs", admin_, {{"job", relative}});
    EXPECT_EQ(a.status, 400) << "workdir '" << workdir << "': " << a;
    EXPECT_TRUE(contains(a.message(), "workdir")) << a;
  }
  EXPECT_TRUE(contains(get("/v1/jobs", admin_).body, "\"jobs\":[]"));
}

TEST_F(ServerRobustness, WrongTypesAndBadParametersAnswer4xxWithoutInternals) {
  const std::string alice = createAccount("alice");
  struct Bad {
    std::string method, path, body;
  };
  Json wrong_roles = rankJob("x", {});
  wrong_roles["roles"] = {{"worker", {{"nodes", "many"}}}};
  Json greedy = rankJob("x", {});
  greedy["roles"] = {{"worker", {{"nodes", 1}, {"procs_per_node", 64}}}};
  Json traversal = rankJob("x", {});
  traversal["outputs"] = Json::array({{{"source", "m"}, {"target", "store://../x"}}});
  Json local_root = rankJob("x", {});
  local_root["inputs"] = Json::array({{{"source", data_root_ + "/server/cohort.db"},
                                       {"target", "db"}}});
  const std::vector<Bad> bad = {
      {"POST", "/v1/jobs", Json({{"job", wrong_roles}}).dump()},
      {"POST", "/v1/jobs", Json({{"job", greedy}}).dump()},
      {"POST", "/v1/jobs", Json({{"job", traversal}}).dump()},
      {"POST", "/v1/jobs", Json({{"job", local_root}}).dump()},
      {"POST", "/v1/jobs", R"({"job": [1, 2]})"},
      {"POST", "/v1/jobs", R"({"job": "name: x"})"},
      {"POST", "/v1/jobs", Json({{"job", rankJob("x", {})}, {"priority", "high"}}).dump()},
      {"POST", "/v1/jobs", Json({{"job", rankJob("x", {})}, {"priority", 1e30}}).dump()},
      {"POST", "/v1/jobs", Json({{"job", rankJob("x", {})}, {"priority", 1.5}}).dump()},
      {"POST", "/v1/jobs", R"({"job": {}, "priority": 18446744073709551615})"},
      {"POST", "/v1/accounts", R"({"name": "carol", "max_gpus": 1e300})"},
      {"POST", "/v1/jobs", std::string(100000, '[')},
      {"POST", "/v1/jobs", "{\"job\": {\"name\": \"\xff\xfe\"}}"},
      {"POST", "/v1/accounts", R"({"name": "Bad Name!"})"},
      {"POST", "/v1/accounts", R"({"name": "carol", "max_gpus": "x"})"},
      {"POST", "/v1/accounts", R"({"name": 7})"},
      {"POST", "/v1/shares", R"({"prefix": 5, "with": "alice"})"},
      {"POST", "/v1/shares", R"({"prefix": "store://no-bucket/x", "with": "alice",
                                 "access": "all"})"},
      {"POST", "/v1/shares", R"({"prefix": "/etc", "with": "alice"})"},
      {"POST", "/v1/tokens", R"({"label": {"a": 1}})"},
      {"GET", "/v1/jobs?state=runing", ""},
      {"GET", "/v1/jobs?limit=abc", ""},
      {"GET", "/v1/jobs?limit=-1", ""},
      {"GET", "/v1/jobs/x/logs?rank=abc", ""},
      {"GET", "/v1/jobs/x/logs?offset=-5", ""},
      {"DELETE", "/v1/shares/99999999999999999999999", ""},
      {"DELETE", "/v1/tokens/99999999999999999999999", ""},
      {"GET", "/v1/store/..", ""},
      {"GET", "/v1/store/UPPER/x", ""},
      {"GET", "/v1/store/a/%00", ""},
      {"PUT", "/v1/store/alice-data", "x"},
      {"PUT", "/v1/store/alice-data/../../server/cohort.db", "x"},
  };
  for (const Bad& b : bad) {
    Answer a = call(b.method, b.path, alice, b.body);
    const std::string what = b.method + " " + b.path + " " + b.body.substr(0, 200);
    EXPECT_GE(a.status, 400) << what << ": " << a;
    EXPECT_LT(a.status, 500) << what << ": " << a;
  }
  EXPECT_EQ(get("/v1/whoami", alice).status, 200);
  EXPECT_TRUE(contains(get("/v1/jobs", alice).body, "\"jobs\":[]"));
  EXPECT_TRUE(std::filesystem::exists(data_root_ + "/server/cohort.db"));
  // Quotas are checked as an admin gives them, not only refused to others.
  for (const char* quota : {R"("max_gpus": -1)", R"("max_cpus": -0.5)"}) {
    Answer a = call("POST", "/v1/accounts", admin_,
                    std::string(R"({"name": "dave", )") + quota + "}");
    EXPECT_EQ(a.status, 400) << quota << ": " << a;
    EXPECT_TRUE(contains(a.message(), std::string(quota).substr(1, 8))) << a;
  }
}

TEST_F(ServerRobustness, OutputPathsCannotLeaveTheOutputDirectory) {
  const std::string alice = createAccount("alice");
  Json job = {{"name", "links"},
              {"framework", "generic"},
              {"workdir", work_},
              {"command", {"sh", "-c",
                           "ln -s /etc/passwd \"$COHORT_OUTPUT_DIR/leak\" && "
                           "ln -s .. \"$COHORT_OUTPUT_DIR/up\" && "
                           "echo ok > \"$COHORT_OUTPUT_DIR/ok.txt\""}}};
  const std::string id = submit(alice, job);
  ASSERT_FALSE(id.empty());
  ASSERT_EQ(waitFinal(alice, id).value("state", ""), "succeeded");
  const std::string base = "/v1/jobs/" + id + "/outputs";
  Answer ok = get(base + "/ok.txt", alice);
  EXPECT_EQ(ok.status, 200) << ok;
  EXPECT_EQ(ok.body, "ok\n");
  Answer list = get(base, alice);
  EXPECT_EQ(list.status, 200);
  EXPECT_FALSE(contains(list.body, "leak")) << list;
  const std::string job_json = readText(data_root_ + "/jobs/" + id + "/job.json");
  ASSERT_FALSE(job_json.empty());
  for (std::string path :
       {"/../job.json", "/%2e%2e%2fjob.json", "/%2E%2E/job.json", "/..%2fjob.json",
        "/ok.txt/../../job.json", "//etc/passwd", "/%2Fetc%2Fpasswd", "/leak", "/up/job.json",
        "/up/console.log", "/./../job.json", "/..", "/%2e%2e", "/up/output/../job.json"}) {
    Answer a = get(base + path, alice);
    EXPECT_TRUE(a.status == 400 || a.status == 404) << path << ": " << a;
    EXPECT_FALSE(contains(a.body, "root:")) << path;
    EXPECT_FALSE(contains(a.body, job_json.substr(0, 40))) << path;
    EXPECT_FALSE(contains(a.body, "cohort: job")) << path;
  }
}

// A raw client: sends `request`, reads until `want` arrived (or 10 s), and hangs up.
std::string hangUpAfter(int port, const std::string& request, const std::string& want) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string got;
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    if (fd >= 0) ::close(fd);
    return got;
  }
  timeval timeout{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) ==
      static_cast<ssize_t>(request.size())) {
    char buf[4096];
    while (!contains(got, want)) {
      ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n <= 0) break;
      got.append(buf, static_cast<size_t>(n));
    }
  }
  ::close(fd);
  return got;
}

TEST_F(ServerRobustness, ChunkedBodiesNeedATokenBeforeAnyIsReadAndCompressedOnesAreRefused) {
  // Only the headers are sent: the answer comes before any of the body.
  std::string chunked = hangUpAfter(port_,
                                    "POST /v1/jobs HTTP/1.1\r\nHost: x\r\n"
                                    "Transfer-Encoding: chunked\r\n\r\n",
                                    "}}");
  EXPECT_TRUE(contains(chunked, "HTTP/1.1 401")) << chunked;
  EXPECT_TRUE(contains(chunked, "unauthenticated")) << chunked;
  std::string gzip = hangUpAfter(port_,
                                 "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
                                     admin_ + "\r\nContent-Encoding: gzip\r\n"
                                              "Content-Length: 1000000\r\n\r\n",
                                 "}}");
  EXPECT_TRUE(contains(gzip, "HTTP/1.1 400")) << gzip;
  EXPECT_TRUE(contains(gzip, "send the request body uncompressed")) << gzip;
  EXPECT_EQ(get("/v1/whoami", admin_).status, 200);
}

TEST_F(ServerRobustness, LogFollowersThatHangUpDoNotHoldTheServer) {
  // Few HTTP threads: followers that stayed attached would leave none for other requests.
  stopServer();
  ASSERT_TRUE(startServer({"--cpus", "4", "--threads", "3"}));
  const std::string id =
      submit(admin_, rankJob("quiet", {"echo=before", gate("go"), "echo=after"}));
  ASSERT_FALSE(id.empty());
  waitJob(admin_, id, isRunning);
  const std::string request = "GET /v1/jobs/" + id + "/logs?follow=1 HTTP/1.1\r\nHost: x\r\n"
                              "Authorization: Bearer " + admin_ + "\r\n\r\n";
  for (int i = 0; i < 6; ++i) {
    std::string got = hangUpAfter(port_, request, "before");
    ASSERT_TRUE(contains(got, "before")) << "follower " << i << " got: " << got;
  }
  // Served while the job still runs: the followers' threads are free again.
  EXPECT_EQ(get("/v1/whoami", admin_).status, 200);
  Answer record = get("/v1/jobs/" + id, admin_);
  EXPECT_EQ(record.json.value("state", ""), "running")
      << "the server answered only after the job ended: hung-up followers held its threads";

  // A follower that stays gets every line until the job ends.
  openGate("go");
  Answer followed = get("/v1/jobs/" + id + "/logs?follow=1&rank=0", admin_);
  EXPECT_EQ(followed.status, 200);
  EXPECT_EQ(followed.body, "before\nafter\n");
  Json done = waitFinal(admin_, id);
  EXPECT_EQ(done.value("state", ""), "succeeded");
  EXPECT_EQ(done.value("exit_code", -1), 0);
}

// ---------------------------------------------------------------------------------------------
// Streams: followers of a job's log and events are pushed to and hold no thread

// A raw HTTP/1.1 connection that stays open: sends a request, then reads what arrives.
class RawConnection {
 public:
  explicit RawConnection(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd_ >= 0 && ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      ::close(fd_);
      fd_ = -1;
    }
  }
  ~RawConnection() { hangUp(); }
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;

  bool send(const std::string& request) {
    return fd_ >= 0 && ::send(fd_, request.data(), request.size(), MSG_NOSIGNAL) ==
                           static_cast<ssize_t>(request.size());
  }
  // Reads until `done(received)` holds, the server closes, or `deadline` passes.
  const std::string& readUntil(const std::function<bool(const std::string&)>& done,
                               std::chrono::milliseconds deadline = kDeadline) {
    auto until = std::chrono::steady_clock::now() + deadline;
    while (fd_ >= 0 && !done(got_)) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          until - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      timeval timeout{static_cast<time_t>(left.count() / 1000),
                      static_cast<suseconds_t>(left.count() % 1000 * 1000)};
      ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
      char buf[16384];
      ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) {
        closed_ = n == 0;
        break;
      }
      got_.append(buf, static_cast<size_t>(n));
    }
    return got_;
  }
  const std::string& readUntilContains(const std::string& want,
                                       std::chrono::milliseconds deadline = kDeadline) {
    return readUntil([&](const std::string& got) { return contains(got, want); }, deadline);
  }
  void hangUp() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  bool closedByServer() const { return closed_; }
  const std::string& received() const { return got_; }

 private:
  int fd_ = -1;
  bool closed_ = false;
  std::string got_;
};

// The body of a chunked answer (after its headers), decoded; `complete` says whether its last
// chunk (the end of the stream) came.
std::string dechunk(const std::string& answer, bool* complete = nullptr) {
  if (complete) *complete = false;
  size_t at = answer.find("\r\n\r\n");
  if (at == std::string::npos) return "";
  at += 4;
  std::string body;
  for (;;) {
    size_t eol = answer.find("\r\n", at);
    if (eol == std::string::npos) break;
    size_t size = std::strtoul(answer.substr(at, eol - at).c_str(), nullptr, 16);
    if (size == 0) {
      if (complete) *complete = answer.compare(at, 1, "0") == 0;
      break;
    }
    if (answer.size() < eol + 2 + size + 2) break;
    body += answer.substr(eol + 2, size);
    at = eol + 2 + size + 2;
  }
  return body;
}

bool streamEnded(const std::string& answer) {
  bool complete = false;
  dechunk(answer, &complete);
  return complete;
}

// The events of a Server-Sent Events text: (id, data as JSON) in order.
std::vector<std::pair<int64_t, Json>> sseEvents(const std::string& text) {
  std::vector<std::pair<int64_t, Json>> out;
  std::istringstream in(text);
  std::string line;
  int64_t id = -1;
  std::string data;
  while (std::getline(in, line)) {
    if (line.empty()) {
      if (!data.empty()) out.emplace_back(id, Json::parse(data, nullptr, false));
      id = -1;
      data.clear();
    } else if (line.rfind("id: ", 0) == 0) {
      id = std::atoll(line.c_str() + 4);
    } else if (line.rfind("data: ", 0) == 0) {
      data += line.substr(6);
    }
  }
  return out;
}

// The value of a metric line "name value" in a /metrics text; -1 when absent.
double metricValue(const std::string& text, const std::string& name) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(name + " ", 0) == 0) return std::atof(line.c_str() + name.size() + 1);
  }
  return -1;
}

// Every line of a text exposition is a HELP or TYPE comment or one sample: name, labels whose
// values hold no raw quote or newline, one number (a strict reader is in metrics_test.cc).
::testing::AssertionResult isExposition(const std::string& text) {
  static const std::regex comment(R"(# (HELP|TYPE) [a-zA-Z_:][a-zA-Z0-9_:]* .*)");
  static const std::regex sample(
      R"([a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\\n]|\\[\\"n])*",?)*\})? )"
      R"([-+]?([0-9.]+([eE][-+]?[0-9]+)?|Inf|NaN))");
  std::istringstream in(text);
  std::string line;
  int lines = 0;
  while (std::getline(in, line)) {
    ++lines;
    if (!std::regex_match(line, comment) && !std::regex_match(line, sample)) {
      return ::testing::AssertionFailure() << "line " << lines << " is not the format: " << line;
    }
  }
  if (lines == 0 || text.back() != '\n') return ::testing::AssertionFailure() << "empty or cut";
  return ::testing::AssertionSuccess();
}

using ServerMetrics = ServerFixture;

TEST_F(ServerMetrics, PerJobGaugesGoToAnAdminOnlyAndTheOpenMetricsNameNoJob) {
  const std::string alice = createAccount("alice");
  const std::string id = submit(alice, rankJob("gauged-train", {"echo=up", gate("done")}));
  ASSERT_FALSE(id.empty());
  waitJob(alice, id, isRunning);
  // An admin's scrape: the job, then its rank's samples once its agent reported one.
  Answer scrape;
  const std::string rank_cpu = "cohort_rank_cpu_seconds_total{job_id=\"" + id +
                               "\",job_name=\"gauged-train\",account=\"alice\",role=\"worker\","
                               "rank=\"0\",node=\"0\"} ";
  EXPECT_TRUE(waitFor(
      [&] {
        scrape = get("/v1/metrics", admin_);
        return scrape.status == 200 && contains(scrape.body, rank_cpu);
      },
      kDeadline, 100ms))
      << scrape;
  EXPECT_TRUE(contains(scrape.body, "cohort_job_info{job_id=\"" + id +
                                        "\",job_name=\"gauged-train\",account=\"alice\","
                                        "state=\"running\"} 1\n"))
      << scrape;
  EXPECT_TRUE(contains(scrape.body, "cohort_rank_resident_memory_bytes{job_id=\"" + id + "\""))
      << scrape;
  EXPECT_TRUE(isExposition(scrape.body)) << scrape.body;
  EXPECT_EQ(metricValue(scrape.body, "cohort_job_series_dropped"), 0);

  // Anyone else: refused, in the error shape.
  Answer theirs = get("/v1/metrics", alice);
  EXPECT_EQ(theirs.status, 403) << theirs;
  EXPECT_EQ(get("/v1/metrics", "").status, 401);
  // The open /metrics has the server's numbers, no job's id, name or account.
  Answer open = get("/metrics", "");
  EXPECT_EQ(open.status, 200);
  EXPECT_TRUE(isExposition(open.body)) << open.body;
  EXPECT_FALSE(contains(open.body, id)) << open.body;
  EXPECT_FALSE(contains(open.body, "gauged-train")) << open.body;
  EXPECT_FALSE(contains(open.body, "alice")) << open.body;

  // Ended lately: still there, with its final state and no rank samples.
  openGate("done");
  waitFinal(alice, id);
  Answer after = get("/v1/metrics", admin_);
  EXPECT_TRUE(contains(after.body, "cohort_job_info{job_id=\"" + id +
                                       "\",job_name=\"gauged-train\",account=\"alice\","
                                       "state=\"succeeded\"} 1\n"))
      << after;
  EXPECT_FALSE(contains(after.body, rank_cpu)) << after;
  EXPECT_TRUE(isExposition(after.body)) << after.body;
}

using ServerStreams = ServerFixture;

TEST_F(ServerRobustness, ConnectionsThatKeepTheServerWaitingAreClosedButFollowersAreNot) {
  stopServer();
  ASSERT_TRUE(startServer({"--cpus", "4", "--idle-timeout", "1s"}));
  const std::string id = submit(admin_, rankJob("followed", {"echo=before", gate("go")}));
  ASSERT_FALSE(id.empty());
  waitJob(admin_, id, isRunning);
  RawConnection silent(port_);                 // connects and says nothing
  RawConnection slow(port_);                   // half a request, then nothing
  ASSERT_TRUE(slow.send("GET /v1/whoami HTTP/1.1\r\nHost: x\r\n"));
  RawConnection follower(port_);               // waits for its job, legitimately
  ASSERT_TRUE(follower.send("GET /v1/jobs/" + id + "/logs?follow=1&rank=0 HTTP/1.1\r\nHost: x\r\n" +
                            "Authorization: Bearer " + admin_ + "\r\n\r\n"));
  ASSERT_TRUE(contains(follower.readUntilContains("before"), "before")) << follower.received();
  silent.readUntil([](const std::string&) { return false; }, 10s);
  slow.readUntil([](const std::string&) { return false; }, 10s);
  EXPECT_TRUE(silent.closedByServer());
  EXPECT_TRUE(slow.closedByServer());
  EXPECT_FALSE(follower.closedByServer());
  openGate("go");
  EXPECT_EQ(dechunk(follower.readUntil(streamEnded)), "before\n");
  EXPECT_EQ(get("/v1/whoami", admin_).status, 200);
}

TEST_F(ServerStreams, HundredsOfLogFollowersHoldNoThreadAndTheApiStaysResponsive) {
  // Three HTTP threads and 200 followers: each follower holding a thread would leave none.
  stopServer();
  ASSERT_TRUE(startServer({"--cpus", "4", "--threads", "3"}));
  const std::string id =
      submit(admin_, rankJob("followed", {"echo=before", gate("go"), "echo=after"}));
  ASSERT_FALSE(id.empty());
  waitJob(admin_, id, isRunning);
  const std::string other = submit(admin_, rankJob("other", {"echo=x"}));
  ASSERT_FALSE(other.empty());
  const std::string request = "GET /v1/jobs/" + id + "/logs?follow=1&rank=0 HTTP/1.1\r\n" +
                              "Host: x\r\nAuthorization: Bearer " + admin_ + "\r\n\r\n";
  std::vector<std::unique_ptr<RawConnection>> followers;
  for (int i = 0; i < 200; ++i) {
    followers.push_back(std::make_unique<RawConnection>(port_));
    ASSERT_TRUE(followers.back()->send(request)) << "follower " << i;
  }
  for (size_t i = 0; i < followers.size(); ++i) {
    ASSERT_TRUE(contains(followers[i]->readUntilContains("before"), "before"))
        << "follower " << i << " got: " << followers[i]->received();
  }
  // Every follower is attached and waits; the API answers anyway (the job still runs).
  for (int round = 0; round < 5; ++round) {
    EXPECT_EQ(get("/v1/whoami", admin_).status, 200);
    Answer metrics = get("/metrics", "");
    EXPECT_EQ(metrics.status, 200);
    EXPECT_GE(metricValue(metrics.body, "cohort_followers"), 200) << metrics.body;
    Answer record = get("/v1/jobs/" + id, admin_);
    EXPECT_EQ(record.json.value("state", ""), "running") << record;
    EXPECT_EQ(get("/v1/jobs/" + other, admin_).status, 200);
  }
  // Pushed, not polled: every follower gets the next line and the end of the stream.
  openGate("go");
  for (size_t i = 0; i < followers.size(); ++i) {
    const std::string& got = followers[i]->readUntil(streamEnded);
    EXPECT_EQ(dechunk(got), "before\nafter\n") << "follower " << i << ": " << got;
  }
  EXPECT_EQ(waitFinal(admin_, id).value("state", ""), "succeeded");
}

TEST_F(ServerStreams, EachRunningRankShowsWhenItLastWroteAndWhatItUses) {
  const std::string id = submit(
      admin_, rankJob("busy", {"echo=started", "hold=67108864", "spin=1.5", gate("go")}));
  ASSERT_FALSE(id.empty());
  waitJob(admin_, id, isRunning);
  // The node agent says every 2 s; the coordinator pushes it to the server.
  Json rank;
  const bool shown = waitFor(
      [&] {
        Answer a = get("/v1/jobs/" + id + "/ranks", admin_);
        if (!a.json.is_object() || a.json["ranks"].empty()) return false;
        rank = a.json["ranks"][0];
        return rank.value("cpu_seconds", 0.0) >= 1.0 && rank.value("rss_bytes", 0) >= (64 << 20);
      },
      kDeadline, 200ms);
  EXPECT_TRUE(shown) << rank.dump();
  EXPECT_TRUE(rank["last_output"].is_string()) << rank.dump();
  EXPECT_EQ(rank.value("state", ""), "running") << rank.dump();
  auto status = runCohort({"status", id, "--server", "http://127.0.0.1:" + std::to_string(port_),
                           "--token", admin_});
  EXPECT_EQ(status.exit_code, 0) << status.err;
  EXPECT_TRUE(contains(status.out, "LAST OUTPUT")) << status.out;
  EXPECT_TRUE(contains(status.out, "MiB")) << status.out;
  openGate("go");
  Json final = waitFinal(admin_, id);
  EXPECT_EQ(final.value("state", ""), "succeeded") << final.dump();
  // Once the job is over there is nothing to say about what it does.
  Json after = get("/v1/jobs/" + id + "/ranks", admin_).json;
  EXPECT_FALSE(after["ranks"][0].contains("cpu_seconds")) << after.dump();
}

TEST_F(ServerStreams, ASseFollowerGetsEveryEventOnceInOrderThenTheStreamEnds) {
  const std::string id = submit(admin_, rankJob("sse", {"echo=one", gate("go"), "echo=two"}));
  ASSERT_FALSE(id.empty());
  RawConnection follower(port_);
  ASSERT_TRUE(follower.send("GET /v1/jobs/" + id + "/events HTTP/1.1\r\nHost: x\r\n" +
                            "Accept: text/event-stream\r\nAuthorization: Bearer " + admin_ +
                            "\r\n\r\n"));
  waitJob(admin_, id, isRunning);
  openGate("go");
  const std::string& got = follower.readUntil(streamEnded);
  ASSERT_TRUE(streamEnded(got)) << "the stream did not end after the job's final event: " << got;
  EXPECT_TRUE(contains(got, "Content-Type: text/event-stream")) << got;
  auto streamed = sseEvents(dechunk(got));
  ASSERT_FALSE(streamed.empty()) << got;
  // Exactly the stored events, in seq order, each once, the final state last.
  Answer all = get("/v1/jobs/" + id + "/events?after=0", admin_);
  ASSERT_EQ(all.status, 200) << all;
  std::vector<int64_t> want = {0};  // submitted
  for (const Json& e : all.json["events"]) {
    want.push_back(e.value("seq", int64_t{-1}));
    if (e.value("event", "") == "state" && e.value("state", "") == "succeeded") break;
  }
  std::vector<int64_t> ids;
  for (const auto& [seq, event] : streamed) {
    ids.push_back(seq);
    EXPECT_EQ(event.value("seq", int64_t{-1}), seq) << event.dump();
  }
  EXPECT_EQ(ids, want);
  EXPECT_EQ(streamed.front().second.value("event", ""), "submitted");
  EXPECT_EQ(streamed.back().second.value("event", ""), "state");
  EXPECT_EQ(streamed.back().second.value("state", ""), "succeeded");
}

TEST_F(ServerStreams, ResumingWithLastEventIdLosesNothingAndRepeatsNothing) {
  const std::string id = submit(admin_, rankJob("resume", {"echo=one", gate("go"), "echo=two"}));
  ASSERT_FALSE(id.empty());
  waitJob(admin_, id, isRunning);
  const std::string head = "GET /v1/jobs/" + id + "/events HTTP/1.1\r\nHost: x\r\n" +
                           "Accept: text/event-stream\r\nAuthorization: Bearer " + admin_ + "\r\n";
  std::vector<std::pair<int64_t, Json>> seen;
  {
    RawConnection first(port_);
    ASSERT_TRUE(first.send(head + "\r\n"));
    // Up to the running state, then hang up.
    const std::string& got = first.readUntil(
        [](const std::string& g) { return contains(dechunk(g), "\"state\":\"running\""); });
    seen = sseEvents(dechunk(got));
    ASSERT_FALSE(seen.empty()) << got;
  }
  openGate("go");
  waitFinal(admin_, id);
  RawConnection again(port_);
  ASSERT_TRUE(again.send(head + "Last-Event-ID: " + std::to_string(seen.back().first) +
                         "\r\n\r\n"));
  const std::string& rest = again.readUntil(streamEnded);
  ASSERT_TRUE(streamEnded(rest)) << rest;
  for (auto& e : sseEvents(dechunk(rest))) seen.push_back(e);
  Answer all = get("/v1/jobs/" + id + "/events?after=0", admin_);
  std::vector<int64_t> want = {0};
  for (const Json& e : all.json["events"]) {
    want.push_back(e.value("seq", int64_t{-1}));
    if (e.value("event", "") == "state" && e.value("state", "") == "succeeded") break;
  }
  std::vector<int64_t> ids;
  for (const auto& [seq, event] : seen) ids.push_back(seq);
  EXPECT_EQ(ids, want);
}

TEST_F(ServerStreams, ALongPollAnswersAtOnceWhenThereAreEventsElseWhenTheNextArrives) {
  const std::string id = submit(admin_, rankJob("poll", {gate("go"), "echo=done"}));
  ASSERT_FALSE(id.empty());
  waitJob(admin_, id, isRunning);
  // Events after 0 exist: answered at once, with the seq to ask after next.
  Answer now = get("/v1/jobs/" + id + "/events?after=0&wait=30s", admin_);
  ASSERT_EQ(now.status, 200) << now;
  ASSERT_FALSE(now.json["events"].empty()) << now;
  EXPECT_FALSE(now.json.value("ended", true));
  const int64_t last = now.json.value("last_seq", int64_t{0});
  EXPECT_EQ(last, now.json["events"].back().value("seq", int64_t{-1}));
  // None after `last` yet: the answer waits for the next one.
  RawConnection waiter(port_);
  ASSERT_TRUE(waiter.send("GET /v1/jobs/" + id + "/events?after=" + std::to_string(last) +
                          "&wait=60s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + admin_ +
                          "\r\n\r\n"));
  openGate("go");
  const std::string& got = waiter.readUntil(streamEnded);
  Json answer = Json::parse(dechunk(got), nullptr, false);
  ASSERT_TRUE(answer.is_object()) << got;
  ASSERT_FALSE(answer["events"].empty()) << got;
  EXPECT_GT(answer["events"].front().value("seq", int64_t{0}), last);
  // A final job answers at once, saying it ended.
  waitFinal(admin_, id);
  Answer ended = get("/v1/jobs/" + id + "/events?after=100000&wait=60s", admin_);
  EXPECT_EQ(ended.status, 200);
  EXPECT_TRUE(ended.json.value("ended", false)) << ended;
  EXPECT_EQ(get("/v1/jobs/" + id + "/events?wait=1h", admin_).status, 400);
  EXPECT_EQ(get("/v1/jobs/" + id + "/events?after=-3", admin_).status, 400);
}

TEST_F(ServerStreams, FollowersThatHangUpFreeTheirConnectionsAndSubscriptions) {
  const std::string id = submit(admin_, rankJob("hangup", {"echo=before", gate("go")}));
  ASSERT_FALSE(id.empty());
  waitJob(admin_, id, isRunning);
  auto metric = [&](const std::string& name) { return metricValue(get("/metrics", "").body, name); };
  const double base = metric("cohort_http_connections");
  {
    std::vector<std::unique_ptr<RawConnection>> followers;
    for (int i = 0; i < 20; ++i) {
      followers.push_back(std::make_unique<RawConnection>(port_));
      const bool sse = i % 2 == 1;
      ASSERT_TRUE(followers.back()->send(
          "GET /v1/jobs/" + id + (sse ? "/events" : "/logs?follow=1") + " HTTP/1.1\r\nHost: x\r\n" +
          (sse ? "Accept: text/event-stream\r\n" : "") + "Authorization: Bearer " + admin_ +
          "\r\n\r\n"));
      followers.back()->readUntilContains(sse ? "running" : "before");
    }
    EXPECT_EQ(metric("cohort_followers"), 20);
    EXPECT_GE(metric("cohort_http_connections"), base + 20);
  }  // all hang up
  EXPECT_TRUE(waitFor([&] { return metric("cohort_followers") == 0; }, kDeadline, 20ms))
      << "followers that hung up are still subscribed";
  EXPECT_TRUE(
      waitFor([&] { return metric("cohort_http_connections") <= base; }, kDeadline, 20ms))
      << "the connections of followers that hung up are still open";
  openGate("go");
  EXPECT_EQ(waitFinal(admin_, id).value("state", ""), "succeeded");
}

TEST_F(ServerStreams, LogsAreReadFromTheLayoutsPathNeverFromOneInThePlanNorThroughALink) {
  const std::string id = submit(admin_, rankJob("paths", {"echo=the-real-log"}));
  ASSERT_FALSE(id.empty());
  waitFinal(admin_, id);
  const std::string job_dir = data_root_ + "/jobs/" + id;
  const std::string secret = dir_ + "/secret.txt";
  std::ofstream(secret) << "the-secret\n";
  // A plan that names another file: the log still comes from logs/worker-0.log.
  std::string plan = readText(job_dir + "/plan.json");
  ASSERT_TRUE(contains(plan, "log_file")) << plan;
  Json p = Json::parse(plan);
  for (Json& node : p["nodes"]) {
    for (Json& r : node["ranks"]) r["log_file"] = secret;
  }
  std::ofstream(job_dir + "/plan.json") << p.dump();
  Answer log = get("/v1/jobs/" + id + "/logs?rank=0", admin_);
  EXPECT_EQ(log.status, 200) << log;
  EXPECT_TRUE(contains(log.body, "the-real-log")) << log;
  EXPECT_FALSE(contains(log.body, "the-secret")) << log;
  // The log replaced by a link: refused, not followed.
  const std::string log_file = job_dir + "/logs/worker-0.log";
  ASSERT_TRUE(std::filesystem::exists(log_file));
  std::filesystem::remove(log_file);
  std::filesystem::create_symlink(secret, log_file);
  Answer linked = get("/v1/jobs/" + id + "/logs?rank=0", admin_);
  EXPECT_EQ(linked.status, 404) << linked;
  EXPECT_FALSE(contains(linked.body, "the-secret")) << linked;
  EXPECT_FALSE(contains(linked.body, data_root_)) << linked;
}

TEST_F(ServerRobustness, DeeplyNestedJsonIsRefusedAndTheServerStaysUp) {
  // 100,000 nested objects under job.env: a recursive parser would overflow its stack.
  std::string deep = "{\"job\": {\"name\": \"deep\", \"env\": ";
  for (int i = 0; i < 100000; ++i) deep += "{\"a\":";
  deep += "1";
  deep += std::string(100000, '}');
  deep += "}}";
  Answer a = call("POST", "/v1/jobs", admin_, deep);
  EXPECT_EQ(a.status, 400) << a.status << " " << a.body.substr(0, 200);
  EXPECT_EQ(a.code(), "invalid_argument");
  EXPECT_TRUE(contains(a.message(), "nested deeper")) << a;
  std::string arrays = "{\"label\": ";
  arrays += std::string(50000, '[') + std::string(50000, ']') + "}";
  EXPECT_EQ(call("POST", "/v1/tokens", admin_, arrays).status, 400);
  EXPECT_EQ(get("/v1/whoami", admin_).status, 200);
}

TEST_F(ServerRobustness, StorePathsOfBadUtf8OrOverlongNamesAre400sNamingTheStorePath) {
  const std::string token = createAccount("paths");
  Answer bucket = call("PUT", "/v1/store/paths-data/ok.txt", token, "x", "text/plain");
  ASSERT_EQ(bucket.status, 201) << bucket;
  Answer bad = call("PUT", "/v1/store/paths-data/a%ff%fe.txt", token, "x", "text/plain");
  EXPECT_EQ(bad.status, 400) << bad;
  EXPECT_TRUE(contains(bad.message(), "store://paths-data/")) << bad;
  EXPECT_TRUE(contains(bad.message(), "UTF-8")) << bad;
  EXPECT_EQ(get("/v1/store/paths-data/a%ff", token).status, 400);
  const std::string name(300, 'n');
  Answer long_name = call("PUT", "/v1/store/paths-data/dir/" + name, token, "x", "text/plain");
  EXPECT_EQ(long_name.status, 400) << long_name;
  EXPECT_TRUE(contains(long_name.message(), "store://paths-data/dir/")) << long_name;
  EXPECT_TRUE(contains(long_name.message(), "255 bytes")) << long_name;
  for (const Answer& a : {bad, long_name}) {
    EXPECT_FALSE(contains(a.body, data_root_)) << "the server's path shows: " << a;
  }
  EXPECT_EQ(get("/v1/store/paths-data/dir/" + name, token).status, 400);
}

TEST_F(ServerRobustness, TokenLabelsOverTwoHundredFiftySixBytesAreRefused) {
  Answer ok = post("/v1/tokens", admin_, {{"label", std::string(256, 'l')}});
  EXPECT_EQ(ok.status, 201) << ok;
  Answer over = post("/v1/tokens", admin_, {{"label", std::string(100000, 'l')}});
  EXPECT_EQ(over.status, 400) << over;
  EXPECT_TRUE(contains(over.message(), "label")) << over;
  EXPECT_TRUE(contains(over.message(), "256")) << over;
}

// ---------------------------------------------------------------------------------------------
// The server dies under its jobs

class ServerRecovery : public ServerFixture {
 protected:
  // A job that ended while the server was away: its coordinator waits to hand the end over.
  struct Waiting {
    std::string dir;  // the job's directory
    pid_t coordinator = 0;
  };

  // Submits a job that exits 0 when let go, kills the server, lets the job go and waits until
  // it has ended; `coordinator` is 0 if that went wrong (a failure is recorded).
  Waiting endAJobWhileTheServerIsAway(const std::string& name) {
    Waiting w;
    const std::string id = submit(admin_, rankJob(name, {gate("go"), "exit=0"}));
    if (id.empty()) {
      ADD_FAILURE() << "submit";
      return w;
    }
    waitJob(admin_, id, isRunning);
    pid_t coordinator = 0;
    if (!waitFor([&] { return (coordinator = coordinatorOf(id)) > 0; }, kDeadline, 50ms)) {
      ADD_FAILURE() << "no coordinator";
      return w;
    }
    stopServer(SIGKILL);
    openGate("go");
    w.dir = data_root_ + "/jobs/" + id;
    if (!waitFor([&] { return !readText(w.dir + "/result.json").empty(); }, kDeadline, 20ms)) {
      ADD_FAILURE() << "no result.json";
      return w;
    }
    EXPECT_FALSE(processGone(coordinator)) << "it waits for the server";
    w.coordinator = coordinator;
    return w;
  }
};

TEST_F(ServerRecovery, RunningJobFinishesAfterTheServerIsKilled) {
  const std::string id =
      submit(admin_, rankJob("survivor", {"echo=before", gate("go"), "echo=after"}));
  ASSERT_FALSE(id.empty());
  waitJob(admin_, id, isRunning);
  stopServer(SIGKILL);
  const std::string console = data_root_ + "/jobs/" + id + "/console.log";
  EXPECT_FALSE(contains(readText(console), "after")) << "the job ended before the kill";
  ASSERT_TRUE(startServer());
  EXPECT_TRUE(contains(readText(server_err_), "job " + id + ": still running"))
      << readText(server_err_);
  openGate("go");

  Json record = waitFinal(admin_, id);
  EXPECT_EQ(record.value("state", ""), "succeeded") << record.dump();
  EXPECT_EQ(record["exit_code"], Json(0));
  EXPECT_TRUE(record["started"].is_string()) << record.dump();
  EXPECT_TRUE(record["ended"].is_string()) << record.dump();
  Answer events = get("/v1/jobs/" + id + "/events", admin_);
  Json last_state;
  for (const Json& e : events.json.value("events", Json::array())) {
    if (e.value("event", "") == "state") last_state = e;
  }
  EXPECT_EQ(last_state.value("state", ""), "succeeded") << events;
  Answer logs = get("/v1/jobs/" + id + "/logs", admin_);
  EXPECT_TRUE(contains(logs.body, "before")) << logs;
  EXPECT_TRUE(contains(logs.body, "after")) << logs;
  EXPECT_EQ(get("/v1/jobs/" + id + "/logs?rank=0", admin_).body, "before\nafter\n");
}

TEST_F(ServerRecovery, JobThatEndedWhileTheServerWasDownHandsOverItsRecordWhenItIsBack) {
  const std::string id = submit(admin_, rankJob("ends-alone", {gate("go"), "echo=bye", "exit=3"}));
  ASSERT_FALSE(id.empty());
  waitJob(admin_, id, isRunning);
  pid_t coordinator = 0;
  ASSERT_TRUE(waitFor([&] { return (coordinator = coordinatorOf(id)) > 0; }, kDeadline, 50ms));
  stopServer(SIGKILL);
  openGate("go");
  const std::string result = data_root_ + "/jobs/" + id + "/result.json";
  ASSERT_TRUE(waitFor([&] { return !readText(result).empty(); }, kDeadline, 20ms));
  // The job is over, but its coordinator waits to hand the end over.
  EXPECT_FALSE(processGone(coordinator));
  ASSERT_TRUE(startServer());  // on another port: report.url tells the coordinator
  EXPECT_TRUE(contains(readText(server_err_), "job " + id + ": still running"))
      << readText(server_err_);

  Json record = waitFinal(admin_, id);
  EXPECT_EQ(record.value("state", ""), "failed") << record.dump();
  EXPECT_EQ(record["exit_code"], Json(3)) << record.dump();
  EXPECT_TRUE(record["ended"].is_string()) << record.dump();
  EXPECT_TRUE(waitFor([&] { return processGone(coordinator); }, kDeadline, 50ms));
  // Every event of the coordinator once, and the server's note of what it found.
  Answer events = get("/v1/jobs/" + id + "/events", admin_);
  std::map<std::string, int> kinds;
  for (const Json& e : events.json.value("events", Json::array())) {
    std::string kind = e.value("event", "");
    if (kind == "state") kind += ":" + e.value("state", "");
    if (kind == "reconciled") kind += ":" + e.value("found", "").substr(0, 13);
    ++kinds[kind];
  }
  EXPECT_EQ(kinds["state:running"], 1) << events.body;
  EXPECT_EQ(kinds["state:failed"], 1) << events.body;
  EXPECT_EQ(kinds["rank_exit"], 1) << events.body;
  EXPECT_EQ(kinds["reconciled:still running"], 1) << events.body;
  EXPECT_EQ(get("/v1/jobs/" + id + "/logs?rank=0", admin_).body, "bye\n");
}

// A coordinator waiting to hand its job's end to a server that is away goes at a stop signal (an
// admin's pkill), saying what the server does not have.
TEST_F(ServerRecovery, ACoordinatorWaitingForTheServerGoesWhenToldTo) {
  Waiting w = endAJobWhileTheServerIsAway("told-to-go");
  ASSERT_GT(w.coordinator, 0);
  ::kill(w.coordinator, SIGTERM);
  EXPECT_TRUE(waitFor([&] { return processGone(w.coordinator); }, 10s, 20ms))
      << "a coordinator told to go waited for the server anyway";
  EXPECT_TRUE(contains(readText(w.dir + "/console.log"), "stopped waiting for it: SIGTERM"));
}

// One whose job directory is removed (the job deleted, the data root cleaned) has nothing left
// to hand over: it goes at once rather than wait report_linger for a server.
TEST_F(ServerRecovery, ACoordinatorWaitingForTheServerGoesWhenItsJobDirectoryIsGone) {
  Waiting w = endAJobWhileTheServerIsAway("dir-gone");
  ASSERT_GT(w.coordinator, 0);
  // The job's agent may still be clearing its scratch files: remove until nothing is left.
  ASSERT_TRUE(waitFor(
      [&] {
        std::error_code ec;
        std::filesystem::remove_all(w.dir, ec);
        return !std::filesystem::exists(w.dir, ec);
      },
      10s, 20ms));
  EXPECT_TRUE(waitFor([&] { return processGone(w.coordinator); }, 10s, 20ms))
      << "a coordinator whose job directory is gone waited for the server anyway";
}

TEST_F(ServerRecovery, JobWhoseCoordinatorDiedWithTheServerIsLost) {
  const std::string pids = work_ + "/rank.pids";
  const std::string id = submit(admin_, rankJob("orphan", {"pidfile=" + pids, "sleep=20"}));
  ASSERT_FALSE(id.empty());
  waitJob(admin_, id, isRunning);
  pid_t coordinator = 0;
  ASSERT_TRUE(waitFor([&] { return (coordinator = coordinatorOf(id)) > 0; }, kDeadline, 50ms));
  stopServer(SIGKILL);
  ::kill(coordinator, SIGKILL);
  EXPECT_TRUE(waitFor([&] { return processGone(coordinator); }, kDeadline, 50ms));
  for (pid_t rank : readPids(pids)) ::kill(rank, SIGKILL);
  ASSERT_TRUE(startServer());

  Json record = waitFinal(admin_, id);
  EXPECT_EQ(record.value("state", ""), "failed") << record.dump();
  EXPECT_EQ(record.value("reason", "").rfind("lost", 0), 0u) << record.dump();
  EXPECT_TRUE(record["ended"].is_string());
  Answer events = get("/v1/jobs/" + id + "/events", admin_);
  EXPECT_TRUE(contains(events.body, "\"state\":\"failed\"")) << events;
}

// A coordinator that refuses its job before it can run it (here its program was removed while
// the job waited in the queue; an input it cannot read is the same) gives the server the cause:
// the record says why, never "lost: ... ended without reporting a result".
TEST_F(ServerRecovery, AJobItsCoordinatorRefusesIsRecordedWithTheCause) {
  const std::string program = work_ + "/gone-rank";
  std::filesystem::copy_file(testRank(), program);
  ::chmod(program.c_str(), 0755);
  Json blocker = rankJob("blocker", {gate("go")});
  blocker["roles"] = {{"worker", {{"resources", {{"cpus", 4}}}}}};  // the whole server: the next waits
  const std::string first = submit(admin_, blocker);
  ASSERT_FALSE(first.empty());
  waitJob(admin_, first, isRunning);
  Json victim = {{"name", "refused"},
                 {"framework", "generic"},
                 {"workdir", work_},
                 {"command", {program, "exit=0"}},
                 {"roles", {{"worker", {{"resources", {{"cpus", 2}}}}}}}};
  const std::string id = submit(admin_, victim);
  ASSERT_FALSE(id.empty());
  std::filesystem::remove(program);
  openGate("go");
  Json record = waitFinal(admin_, id);
  EXPECT_EQ(record.value("state", ""), "failed") << record.dump();
  const std::string reason = record.value("reason", "");
  EXPECT_EQ(reason.rfind("lost", 0), std::string::npos) << record.dump();
  EXPECT_TRUE(contains(reason, "gone-rank")) << "the cause names the program: " << record.dump();
  EXPECT_NE(record["exit_code"], Json(0)) << record.dump();
  Answer events = get("/v1/jobs/" + id + "/events", admin_);
  EXPECT_TRUE(contains(events.body, "gone-rank")) << events;
}

TEST_F(ServerRecovery, QueuedJobStaysQueuedAcrossARestartAndThenRuns) {
  stopServer();
  ASSERT_TRUE(startServer({"--cpus", "1"}));
  const std::string first = submit(admin_, rankJob("first", {gate("go"), "echo=first"}));
  ASSERT_FALSE(first.empty());
  waitJob(admin_, first, isRunning);
  const std::string second = submit(admin_, rankJob("second", {"echo=second"}));
  ASSERT_FALSE(second.empty());
  waitJob(admin_, second, [](const Json& r) {
    // "reserved": next to start, once the first job gives the CPU back.
    return r.value("state", "") == "queued" && r["waiting"].is_object() &&
           r["waiting"].value("kind", "") == "reserved";
  });

  stopServer();
  ASSERT_TRUE(startServer({"--cpus", "1"}));
  Json after = get("/v1/jobs/" + second, admin_).json;
  EXPECT_EQ(after.value("state", ""), "queued") << after.dump();
  openGate("go");
  Json one = waitFinal(admin_, first);
  Json two = waitFinal(admin_, second);
  EXPECT_EQ(one.value("state", ""), "succeeded") << one.dump();
  EXPECT_EQ(two.value("state", ""), "succeeded") << two.dump();
  ASSERT_TRUE(one["ended"].is_string() && two["started"].is_string());
  EXPECT_GE(two["started"].get<std::string>(), one["ended"].get<std::string>())
      << "the second job started while the first held the only CPU";
  EXPECT_EQ(get("/v1/jobs/" + second + "/logs?rank=0", admin_).body, "second\n");
}

// ---------------------------------------------------------------------------------------------
// Code uploads (POST /v1/uploads, then "code" in POST /v1/jobs)

using ServerUploads = ServerFixture;

TEST_F(ServerUploads, AJobRunsOnItsAccountsUploadOnceAndNoOtherAccountCanNameIt) {
  const std::string alice = createAccount("alice");
  const std::string bob = createAccount("bob");
  const std::string archive = tarEntry("run.sh", '0', "pwd\ncat lib/data.txt\n") +
                              tarEntry("lib", '5') +
                              tarEntry("lib/data.txt", '0', "from the upload\n") + tarEnd();
  Answer up = call("POST", "/v1/uploads", alice, archive, "application/x-tar");
  ASSERT_EQ(up.status, 201) << up;
  EXPECT_TRUE(matches(document(), "POST", "/v1/uploads", 201, up));
  const std::string code = up.json.value("id", "");
  EXPECT_EQ(up.json.value("files", 0), 2);
  EXPECT_EQ(up.json.value("bytes", 0), 37);
  // The job file's workdir is the client's; with code it does not matter.
  const Json job = {{"name", "uploaded"},
                    {"framework", "generic"},
                    {"workdir", "/nonexistent/on/the/server"},
                    {"command", {"sh", "run.sh"}}};
  Answer theirs = post("/v1/jobs", bob, {{"job", job}, {"code", code}});
  EXPECT_EQ(theirs.status, 404) << theirs;
  EXPECT_TRUE(contains(theirs.message(), "upload '" + code + "' not found")) << theirs;
  Answer bad = post("/v1/jobs", alice, {{"job", job}, {"code", "../../jobs"}});
  EXPECT_EQ(bad.status, 400) << bad;
  EXPECT_TRUE(contains(bad.message(), "is not an upload id")) << bad;

  Answer mine = post("/v1/jobs", alice, {{"job", job}, {"code", code}});
  ASSERT_EQ(mine.status, 201) << mine;
  const std::string id = mine.json.value("id", "");
  EXPECT_EQ(waitFinal(alice, id).value("state", ""), "succeeded");
  const std::string code_dir = data_root_ + "/jobs/" + id + "/code";
  EXPECT_EQ(get("/v1/jobs/" + id + "/logs?rank=0", alice).body, code_dir + "\nfrom the upload\n");
  EXPECT_EQ(readJson(data_root_ + "/jobs/" + id + "/job.json").value("workdir", ""), code_dir);
  // One upload, one job.
  Answer again = post("/v1/jobs", alice, {{"job", job}, {"code", code}});
  EXPECT_EQ(again.status, 404) << again;
  // A job cannot take another job's snapshot as its workdir either.
  Json steal = job;
  steal["workdir"] = code_dir;
  Answer stolen = post("/v1/jobs", bob, {{"job", steal}});
  EXPECT_EQ(stolen.status, 404) << stolen;
  EXPECT_TRUE(contains(stolen.message(), "gone (deleted) or not this account's")) << stolen;
  Json below = steal;
  below["workdir"] = code_dir + "/lib";
  Answer inside = post("/v1/jobs", alice, {{"job", below}});
  EXPECT_EQ(inside.status, 400) << inside;
  EXPECT_TRUE(contains(inside.message(), "is the code another job uploaded")) << inside;
  // Its own account runs it again (cohort rerun, the console's Re-run): on a copy of its own.
  Json recorded = get("/v1/jobs/" + id, alice).json["spec"];
  ASSERT_EQ(recorded.value("workdir", ""), code_dir) << recorded.dump();
  Json broken = recorded;
  broken["command"] = {"./no-such-program"};
  Answer refused = post("/v1/jobs", alice, {{"job", broken}});
  EXPECT_EQ(refused.status, 404) << refused;
  EXPECT_TRUE(contains(refused.message(), "command: './no-such-program'")) << refused;
  for (const auto& e : std::filesystem::directory_iterator(data_root_ + "/uploads/alice")) {
    ADD_FAILURE() << "a refused job left its copy of the code: " << e.path();
  }
  Answer rerun = post("/v1/jobs", alice, {{"job", recorded}});
  ASSERT_EQ(rerun.status, 201) << rerun;
  const std::string second = rerun.json.value("id", "");
  const std::string second_code = data_root_ + "/jobs/" + second + "/code";
  EXPECT_EQ(waitFinal(alice, second).value("state", ""), "succeeded");
  EXPECT_EQ(get("/v1/jobs/" + second + "/logs?rank=0", alice).body,
            second_code + "\nfrom the upload\n");
  // Deleting a job removes its code, and not the copy another job runs.
  EXPECT_EQ(call("DELETE", "/v1/jobs/" + id, alice).status, 204);
  EXPECT_FALSE(std::filesystem::exists(code_dir));
  EXPECT_TRUE(std::filesystem::exists(second_code + "/lib/data.txt"));
  Answer gone = post("/v1/jobs", alice, {{"job", recorded}});
  EXPECT_EQ(gone.status, 404) << gone;
  EXPECT_EQ(gone.message(), stolen.message()) << "a deleted job and another account's read alike";
}

TEST_F(ServerUploads, HostileArchivesAreRefusedNamingTheEntryAndNothingLandsOutside) {
  const std::string outside = dir_ + "/escaped.txt";
  struct Case {
    const char* what;
    std::string archive;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"dot-dot", tarEntry("../../../escaped.txt", '0', "x") + tarEnd(),
       "archive entry '../../../escaped.txt': '..' is refused"},
      {"absolute", tarEntry(outside, '0', "x") + tarEnd(),
       "archive entry '" + outside + "': absolute paths are refused"},
      {"absolute link", tarEntry("l", '2', "", dir_) + tarEnd(),
       "archive entry 'l': the link is refused: its target '" + dir_ + "' is an absolute path"},
      {"escaping link", tarEntry("l", '2', "", "../../../..") + tarEnd(),
       "leads out of the workdir"},
      {"a write through a link",
       tarEntry("d", '5') + tarEntry("l", '2', "", "d") + tarEntry("l/x.py", '0', "x") + tarEnd(),
       "archive entry 'l/x.py': 'l' is a link or a file, not a directory"},
      {"a device", tarEntry("null", '3') + tarEnd(), "device files are refused"},
      {"not an archive", std::string(2048, 'x'), "not a tar archive"},
  };
  for (const Case& c : cases) {
    Answer a = call("POST", "/v1/uploads", admin_, c.archive, "application/x-tar");
    EXPECT_EQ(a.status, 400) << c.what << ": " << a;
    EXPECT_EQ(a.code(), "invalid_argument") << c.what;
    EXPECT_TRUE(contains(a.message(), c.message)) << c.what << ": " << a.message();
  }
  EXPECT_FALSE(std::filesystem::exists(outside));
  // Nothing half-extracted is left, and the server still answers.
  int left = 0;
  for (const auto& e : std::filesystem::directory_iterator(data_root_ + "/uploads/admin")) {
    ADD_FAILURE() << "left behind: " << e.path();
    ++left;
  }
  EXPECT_EQ(left, 0);
  EXPECT_EQ(get("/v1/whoami", admin_).status, 200);
}

TEST_F(ServerUploads, AnUploadOverTheServersLimitIsRefusedSayingWhichLimit) {
  stopServer();
  ASSERT_TRUE(startServer({"--cpus", "4", "--max-upload", "4Ki"}));
  const std::string archive = tarEntry("big.bin", '0', std::string(8192, 'b')) + tarEnd();
  Answer a = call("POST", "/v1/uploads", admin_, archive, "application/x-tar");
  EXPECT_EQ(a.status, 413) << a;
  EXPECT_EQ(a.code(), "too_large");
  EXPECT_TRUE(contains(a.message(), "this server's limit (cohort server --max-upload)")) << a;
  Answer fits = call("POST", "/v1/uploads", admin_,
                     tarEntry("small.py", '0', "print(1)\n") + tarEnd(), "application/x-tar");
  EXPECT_EQ(fits.status, 201) << fits;
}

// ---------------------------------------------------------------------------------------------
// Environments on the server, per account (docs/environments.md, "On a server"). The builds here
// are on the pytorch preset (Debian's python3-torch: nothing is downloaded); those that install
// from PyPI are RealServerEnvironments (label "frameworks").

class ServerEnvironments : public ServerFixture {
 protected:
  Answer put(const std::string& path, const std::string& token, const Json& body) {
    return call("PUT", path, token, body.dump());
  }

  // Waits until the build of `name` is over; returns the environment as `token` then sees it.
  Json waitBuild(const std::string& token, const std::string& name) {
    Json e;
    bool over = waitFor(
        [&] {
          Answer a = get("/v1/environments/" + name, token);
          e = a.json;
          return a.status == 200 && e.value("state", "") != "building";
        },
        240s, 100ms);
    EXPECT_TRUE(over) << "the build of " << name << " did not end: " << e.dump();
    return e;
  }

  // `cohort ARGS` as a client of this server with `token`.
  RunResult client(const std::vector<std::string>& args, const std::string& token) {
    return CohortProcess(args, {"COHORT_SERVER=http://127.0.0.1:" + std::to_string(port_),
                                "COHORT_TOKEN=" + token, "PIP_RETRIES=1", "PIP_TIMEOUT=20"})
        .wait(300s);
  }

  // A job whose rank prints the interpreter it runs and the environment it is in.
  Json envJob(const std::string& name, const std::string& environment,
              const std::string& imports = "") const {
    return {{"name", name},
            {"framework", "generic"},
            {"workdir", work_},
            {"environment", environment},
            {"command",
             {"python3", "-c",
              "import os, sys" + imports +
                  "; print('ran', sys.executable, "
                  "os.environ['VIRTUAL_ENV'])"}}};
  }

  std::string jobLog(const std::string& token, const std::string& id) {
    return get("/v1/jobs/" + id + "/logs", token).body;
  }

  static std::vector<std::string> names(const Answer& list) {
    std::vector<std::string> out;
    for (const Json& e : list.json.value("environments", Json::array())) {
      out.push_back(e.value("name", ""));
    }
    return out;
  }
};

TEST_F(ServerEnvironments, NamesThatCannotBeOnesAreRefusedWith400NamingTheName) {
  const std::string alice = createAccount("alice");
  const Json body = {{"base", "pytorch"}};
  for (const std::string& name : std::vector<std::string>{
           "../x", "..%2Fx", "%2E%2E", "a/b", "%2Fetc%2Fpasswd", ".hidden", "-x",
           std::string(300, 'a'), "%C3%A9t%C3%A9", "%FF%FE", "x%20y", "x%0Ay"}) {
    const std::string path = "/v1/environments/" + name;
    for (const Answer& a : {get(path, alice), put(path, alice, body), call("DELETE", path, alice),
                            get(path + "/log", alice)}) {
      EXPECT_EQ(a.status, 400) << path << ": " << a;
      EXPECT_EQ(a.code(), "invalid_argument") << path << ": " << a;
      EXPECT_TRUE(contains(a.message(), "name: '")) << path << ": " << a;
    }
  }
  // A preset is a name nobody pushes or removes.
  Answer preset = put("/v1/environments/pytorch", alice, body);
  EXPECT_EQ(preset.status, 400) << preset;
  EXPECT_TRUE(contains(preset.message(), "'pytorch' is a preset")) << preset;
  EXPECT_EQ(call("DELETE", "/v1/environments/pytorch", alice).status, 409);
  // Nothing was recorded, and nothing landed anywhere.
  Answer list = get("/v1/environments", alice);
  ASSERT_EQ(list.status, 200) << list;
  EXPECT_EQ(names(list),
            (std::vector<std::string>{"system", "pytorch", "deepspeed", "jupyter", "tensorflow",
                                      "mindspore"}));
  EXPECT_FALSE(std::filesystem::exists(data_root_ + "/x"));
  EXPECT_FALSE(std::filesystem::exists(data_root_ + "/account-envs/x"));
}

TEST_F(ServerEnvironments, BadDefinitionsAreRefusedNamingTheField) {
  const std::string alice = createAccount("alice");
  const std::string path = "/v1/environments/mine";
  Answer url =
      put(path, alice,
          {{"base", "pytorch"}, {"requirements", {"termcolor", "pkg @ file:///etc/passwd"}}});
  EXPECT_EQ(url.status, 400) << url;
  EXPECT_TRUE(contains(url.message(),
                       "requirements[1]: 'pkg @ file:///etc/passwd' is not a requirement of a "
                       "package by name"))
      << url;
  for (const std::string bad :
       {"--index-url=http://x", "-r /etc/shadow", "./pkg", "git+https://x/y"}) {
    Answer a = put(path, alice, {{"base", "pytorch"}, {"requirements", {bad}}});
    EXPECT_EQ(a.status, 400) << bad << ": " << a;
    EXPECT_TRUE(contains(a.message(), "requirements[0]: ")) << a;
  }
  Answer lock =
      put(path, alice, {{"base", "pytorch"}, {"lock", "six==1.17.0\n-e git+https://x/y\n"}});
  EXPECT_EQ(lock.status, 400) << lock;
  EXPECT_TRUE(contains(lock.message(), "lock: line 2: '-e git+https://x/y' is not a pin")) << lock;
  Answer no_base = put(path, alice, Json::object());
  EXPECT_EQ(no_base.status, 400) << no_base;
  EXPECT_TRUE(contains(no_base.message(), "base: ")) << no_base;
  Answer unknown = put(path, alice, {{"base", "nope"}});
  EXPECT_EQ(unknown.status, 404) << unknown;
  EXPECT_TRUE(contains(unknown.message(), "base: no environment 'nope' on the server")) << unknown;
  Answer extra = put(path, alice, {{"base", "pytorch"}, {"index", "http://x"}});
  EXPECT_EQ(extra.status, 400) << extra;
  EXPECT_TRUE(contains(extra.message(), "index")) << extra;
  Answer wrong = put(path, alice, {{"base", "pytorch"}, {"requirements", "termcolor"}});
  EXPECT_EQ(wrong.status, 400) << wrong;
  EXPECT_EQ(get(path, alice).status, 404) << "nothing was recorded";
}

TEST_F(ServerEnvironments, AnImageJobIsRefusedAtSubmissionSayingWhy) {
  const std::string alice = createAccount("alice");
  Json job = rankJob("in-image", {"exit=0"});
  job["environment"] = {{"image", "localhost/train:1"}};
  Answer a = post("/v1/jobs", alice, {{"job", job}});
  EXPECT_EQ(a.status, 400) << a;
  EXPECT_TRUE(contains(a.message(),
                       "environment.image: a server's jobs do not run in container images yet"))
      << a;
  EXPECT_TRUE(get("/v1/jobs", alice).json["jobs"].empty()) << "no job was made";
}

// An account's environment is its own: another account cannot see, use or remove it (404, as
// for a name nobody has), and a job of its own runs in it. An admin's is every account's.
TEST_F(ServerEnvironments, AnAccountsEnvironmentIsItsOwnAndAnAdminsIsEveryones) {
  const std::string alice = createAccount("alice"), bob = createAccount("bob");
  Answer pushed = put("/v1/environments/mine", alice, {{"base", "pytorch"}});
  ASSERT_EQ(pushed.status, 202) << pushed;
  EXPECT_EQ(pushed.json.value("state", ""), "building");
  EXPECT_EQ(pushed.json.value("owner", ""), "alice");
  const Json doc = document();
  EXPECT_TRUE(matches(doc, "PUT", "/v1/environments/{name}", 202, pushed));
  Json built = waitBuild(alice, "mine");
  EXPECT_TRUE(
      matches(doc, "GET", "/v1/environments/{name}", 200, get("/v1/environments/mine", alice)));
  EXPECT_TRUE(matches(doc, "GET", "/v1/environments", 200, get("/v1/environments", alice)));
  EXPECT_TRUE(
      matches(doc, "GET", "/v1/environments/{name}", 404, get("/v1/environments/mine", bob)));
  ASSERT_EQ(built.value("state", ""), "built") << built.dump(2);
  EXPECT_EQ(built.value("shared", true), false);
  EXPECT_EQ(built["hash"].get<std::string>().size(), 64u);
  Answer log = get("/v1/environments/mine/log", alice);
  ASSERT_EQ(log.status, 200) << log;
  EXPECT_TRUE(contains(log.body, "building mine on pytorch as uid ")) << log.body;
  EXPECT_TRUE(contains(log.body, "built mine")) << log.body;

  // Bob: not there, on every route, and nothing says whose it is.
  for (const Answer& a : {get("/v1/environments/mine", bob), get("/v1/environments/mine/log", bob),
                          call("DELETE", "/v1/environments/mine", bob),
                          post("/v1/jobs", bob, {{"job", envJob("bobs", "mine")}})}) {
    EXPECT_EQ(a.status, 404) << a;
    EXPECT_TRUE(contains(a.message(), "no environment 'mine'")) << a;
    EXPECT_FALSE(contains(a.message(), "alice")) << a;
  }
  Answer bobs = get("/v1/environments", bob);
  const std::vector<std::string> bob_sees = names(bobs);
  EXPECT_EQ(std::count(bob_sees.begin(), bob_sees.end(), "mine"), 0) << bobs;
  EXPECT_EQ(get("/v1/environments/mine", alice).status, 200) << "bob's DELETE did nothing";

  // Alice's job runs in it.
  const std::string venv = data_root_ + "/account-envs/alice/mine/venv";
  const std::string id = submit(alice, envJob("in-mine", "mine"));
  Json record = waitJob(alice, id, isFinal);
  EXPECT_EQ(record.value("state", ""), "succeeded") << jobLog(alice, id);
  EXPECT_TRUE(contains(jobLog(alice, id), "ran " + venv + "/bin/python3 " + venv))
      << jobLog(alice, id);

  // Not removed nor replaced while a job of hers runs in it.
  Json waiting = rankJob("waits", {gate("go"), "exit=0"});
  waiting["environment"] = "mine";
  const std::string running = submit(alice, waiting);
  waitJob(alice, running, isRunning);
  for (const Answer& a : {call("DELETE", "/v1/environments/mine", alice),
                          put("/v1/environments/mine", alice, {{"base", "pytorch"}})}) {
    EXPECT_EQ(a.status, 409) << a;
    EXPECT_TRUE(contains(a.message(), "job " + running + " (running) runs in it")) << a;
  }
  openGate("go");
  EXPECT_EQ(waitFinal(alice, running).value("state", ""), "succeeded");
  Answer removed = call("DELETE", "/v1/environments/mine", alice);
  EXPECT_EQ(removed.status, 204) << removed;
  EXPECT_FALSE(std::filesystem::exists(data_root_ + "/account-envs/alice/mine"));
  EXPECT_EQ(get("/v1/environments/mine", alice).status, 404);

  // The admin's: every account's jobs run in it; only an admin removes it.
  ASSERT_EQ(put("/v1/environments/team", admin_, {{"base", "pytorch"}}).status, 202);
  Json team = waitBuild(bob, "team");
  ASSERT_EQ(team.value("state", ""), "built") << team.dump(2);
  EXPECT_EQ(team.value("shared", false), true);
  const std::string bobs_job = submit(bob, envJob("in-team", "team"));
  EXPECT_EQ(waitFinal(bob, bobs_job).value("state", ""), "succeeded") << jobLog(bob, bobs_job);
  const std::string team_venv = data_root_ + "/envs/team/venv";
  EXPECT_TRUE(contains(jobLog(bob, bobs_job), "ran " + team_venv + "/bin/python3 " + team_venv))
      << jobLog(bob, bobs_job);
  Answer not_bobs = call("DELETE", "/v1/environments/team", bob);
  EXPECT_EQ(not_bobs.status, 403) << not_bobs;
  EXPECT_EQ(call("DELETE", "/v1/environments/team", admin_).status, 204);
}

// With pip and PyPI: `cohort env push` of an environment made here.
class RealServerEnvironments : public ServerEnvironments {};

TEST_F(RealServerEnvironments, PushStreamsTheBuildAndTheAccountsJobRunsInIt) {
  const std::string alice = createAccount("alice");
  const std::string here = dir_ + "/client";  // the client's own data root
  RunResult made = runCohort({"env", "create", "extra", "--data-root", here, "--from", "pytorch",
                              "--pip", "termcolor==3.3.0"},
                             300s);
  ASSERT_EQ(made.exit_code, 0) << made.err;

  RunResult pushed = client({"env", "push", "extra", "--data-root", here}, alice);
  ASSERT_EQ(pushed.exit_code, 0) << pushed.err;
  EXPECT_TRUE(contains(pushed.err, "cohort env: extra sent to")) << pushed.err;
  EXPECT_TRUE(contains(pushed.err, "  installing termcolor==3.3.0")) << pushed.err;
  EXPECT_TRUE(contains(pushed.err, "Successfully installed termcolor-3.3.0")) << pushed.err;
  EXPECT_TRUE(contains(pushed.err, "cohort env: extra is built on the server (termcolor 3.3.0)"))
      << pushed.err;

  RunResult ls = client({"env", "ls", "--on-server"}, alice);
  ASSERT_EQ(ls.exit_code, 0) << ls.err;
  EXPECT_TRUE(std::regex_search(ls.out, std::regex("\nextra +saved +built +alice +on pytorch")))
      << ls.out;
  RunResult show = client({"env", "show", "extra", "--on-server", "--json"}, alice);
  ASSERT_EQ(show.exit_code, 0) << show.err;
  Json shown = Json::parse(show.out, nullptr, false);
  EXPECT_EQ(shown["packages"].value("termcolor", ""), "3.3.0") << show.out;
  EXPECT_EQ(shown.value("lock", ""), readText(here + "/envs/extra/lock.txt")) << "the same pins";

  const std::string venv = data_root_ + "/account-envs/alice/extra/venv";
  const std::string id = submit(alice, envJob("in-extra", "extra", ", termcolor, torch"));
  EXPECT_EQ(waitJob(alice, id, isFinal).value("state", ""), "succeeded") << jobLog(alice, id);
  EXPECT_TRUE(contains(jobLog(alice, id), "ran " + venv + "/bin/python3 " + venv))
      << jobLog(alice, id);

  // Under another name; rm on the server.
  RunResult as = client({"env", "push", "extra", "--as", "extra-v2", "--data-root", here}, alice);
  EXPECT_EQ(as.exit_code, 0) << as.err;
  EXPECT_EQ(get("/v1/environments/extra-v2", alice).json.value("state", ""), "built");
  RunResult rm = client({"env", "rm", "extra-v2", "--on-server"}, alice);
  EXPECT_EQ(rm.exit_code, 0) << rm.err;
  EXPECT_EQ(get("/v1/environments/extra-v2", alice).status, 404);
  RunResult gone = client({"env", "show", "extra-v2", "--on-server"}, alice);
  EXPECT_EQ(gone.exit_code, 2) << gone.err;
  EXPECT_TRUE(contains(gone.err, "no environment 'extra-v2' on the server")) << gone.err;
}

TEST_F(RealServerEnvironments, APackageThatDoesNotExistFailsThePushInPipsWords) {
  const std::string alice = createAccount("alice");
  // Another machine's environment, as its build left it: its definition and its lock file.
  const std::string here = dir_ + "/client", env = here + "/envs/broken";
  std::filesystem::create_directories(env + "/venv/bin");
  std::ofstream(env + "/lock.txt") << "cohort-no-such-package-anywhere==9.9.9\n";
  std::ofstream(env + "/env.json")
      << Json{{"name", "broken"},
              {"from", "pytorch"},
              {"requirements", {"cohort-no-such-package-anywhere==9.9.9"}}}
             .dump();
  RunResult pushed = client({"env", "push", "broken", "--data-root", here}, alice);
  EXPECT_EQ(pushed.exit_code, 1) << pushed.err;
  EXPECT_TRUE(contains(pushed.err,
                       "No matching distribution found for "
                       "cohort-no-such-package-anywhere==9.9.9"))
      << pushed.err;
  EXPECT_TRUE(contains(pushed.err, "cohort env: broken failed to build on the server"))
      << pushed.err;
  Json failed = get("/v1/environments/broken", alice).json;
  EXPECT_EQ(failed.value("state", ""), "failed") << failed.dump(2);
  EXPECT_TRUE(contains(failed.value("reason", ""), "cohort-no-such-package-anywhere"))
      << failed.dump(2);
  EXPECT_FALSE(std::filesystem::exists(data_root_ + "/account-envs/alice/broken/venv"));
  // A job cannot name it until it is pushed again and built.
  Answer job = post("/v1/jobs", alice, {{"job", envJob("in-broken", "broken")}});
  EXPECT_EQ(job.status, 409) << job;
  EXPECT_TRUE(contains(job.message(), "environment 'broken' failed to build")) << job;
}


// ---------------------------------------------------------------------------------------------
// The edge: what anyone who reaches the port can send. Nothing but a bounded header block is
// read before the token is checked, and nothing a stranger sends takes the server down or
// holds what others need.

// The server's resident memory, in MiB (VmRSS).
int64_t residentMiB(pid_t pid) {
  const std::string status = readText("/proc/" + std::to_string(pid) + "/status");
  auto at = status.find("VmRSS:");
  return at == std::string::npos ? -1 : std::strtoll(status.c_str() + at + 6, nullptr, 10) / 1024;
}

// A connection from a chosen loopback address (127.0.0.N), to test per-address limits.
int connectFrom(int port, const std::string& from) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in local{};
  local.sin_family = AF_INET;
  ::inet_pton(AF_INET, from.c_str(), &local.sin_addr);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof local) != 0 ||
      ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    if (fd >= 0) ::close(fd);
    return -1;
  }
  return fd;
}

// Whether the server closed `fd` within `deadline` (reads and drops whatever comes first).
bool closedWithin(int fd, std::chrono::milliseconds deadline) {
  auto until = std::chrono::steady_clock::now() + deadline;
  char buf[4096];
  while (std::chrono::steady_clock::now() < until) {
    timeval timeout{0, 100000};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      return true;
    }
  }
  return false;
}

using ServerEdge = ServerFixture;

TEST_F(ServerEdge, ALongUrlIsAnsweredAndTheServerStaysUp) {
  // std::regex recursed once per byte of these, before any token was asked for: a segfault.
  const std::string as(30000, 'a');
  for (const std::string& path :
       {"/v1/jobs/" + as, "/v1/jobs/" + as + "/logs", "/v1/store/b/" + as,
        "/v1/environments/" + as + "/log", "/v1/shares/" + as, "/" + as}) {
    for (const std::string& token : {std::string(), admin_}) {
      Answer a = get(path, token);
      EXPECT_TRUE(a.status == 400 || a.status == 401 || a.status == 404 || a.status == 431 ||
                  a.status == 200)
          << path.substr(0, 40) << "...: " << a.status << " " << a.body.substr(0, 200);
    }
  }
  // Over the header block's bound: 431 (or the connection closed), never a crash.
  std::string huge = hangUpAfter(port_, "GET /v1/jobs/" + std::string(200000, 'a') +
                                            " HTTP/1.1\r\nHost: x\r\n\r\n",
                                 "\r\n\r\n");
  EXPECT_TRUE(huge.empty() || contains(huge, " 431 ") || contains(huge, " 414 ")) << huge;
  EXPECT_EQ(get("/v1/whoami", admin_).status, 200);
  EXPECT_EQ(::kill(server_, 0), 0) << "the server died";
}

TEST_F(ServerEdge, NoBodyByteIsReadBeforeTheTokenIsChecked) {
  const int64_t before = residentMiB(server_);
  // 30 strangers announce 64 MiB bodies and send 1 MiB of each: each is answered 401 at once,
  // from the headers alone, and the connection closes.
  std::vector<int> fds;
  const std::string megabyte(1 << 20, 'x');
  for (int i = 0; i < 30; ++i) {
    int fd = connectFrom(port_, "127.0.0.1");
    ASSERT_GE(fd, 0);
    const std::string head = "PUT /v1/store/b/f HTTP/1.1\r\nHost: x\r\nContent-Length: " +
                             std::to_string(64 << 20) + "\r\n\r\n";
    ASSERT_EQ(::send(fd, head.data(), head.size(), MSG_NOSIGNAL), static_cast<ssize_t>(head.size()));
    ::send(fd, megabyte.data(), megabyte.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    fds.push_back(fd);
  }
  for (int fd : fds) {
    char buf[4096];
    timeval timeout{10, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    ASSERT_GT(n, 0) << "no answer";
    EXPECT_TRUE(contains(std::string(buf, static_cast<size_t>(n)), "HTTP/1.1 401"))
        << std::string(buf, static_cast<size_t>(n));
    ::close(fd);
  }
  // Chunked too, and on every route that takes a body.
  for (std::string route : {"POST /v1/jobs", "POST /v1/uploads", "PUT /v1/store/b/f",
                                   "POST /v1/tokens", "PUT /v1/environments/e",
                                   "POST /v1/jobs/x/report"}) {
    std::string got = hangUpAfter(port_, route + " HTTP/1.1\r\nHost: x\r\n"
                                         "Transfer-Encoding: chunked\r\n\r\n",
                                  "\r\n\r\n");
    EXPECT_TRUE(contains(got, "HTTP/1.1 401")) << route << ": " << got;
  }
  EXPECT_LT(residentMiB(server_) - before, 64) << "the bodies were read";
  EXPECT_EQ(get("/v1/whoami", admin_).status, 200);
}

TEST_F(ServerEdge, ConflictingFramingIsRefusedBeforeAnythingElse) {
  for (const std::string& framing :
       {std::string("Content-Length: 5\r\nContent-Length: 6\r\n"),
        std::string("Content-Length: 5\r\nContent-Length: 5\r\n"),
        std::string("Content-Length: 5\r\nTransfer-Encoding: chunked\r\n"),
        std::string("Transfer-Encoding: gzip, chunked\r\n"),
        std::string("Content-Length: -5\r\n"), std::string("Content-Length: 5x\r\n")}) {
    std::string got = hangUpAfter(port_,
                                  "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
                                      admin_ + "\r\n" + framing + "\r\n{}{}{}",
                                  "\r\n\r\n");
    EXPECT_TRUE(contains(got, "HTTP/1.1 400") || contains(got, "HTTP/1.1 501")) << framing << got;
    EXPECT_FALSE(contains(got, "HTTP/1.1 201")) << framing;
  }
  EXPECT_EQ(get("/v1/whoami", admin_).status, 200);
}

TEST_F(ServerEdge, SlowHeadersAreCutOffAtTheirDeadlineAndBystandersAreServed) {
  stopServer();
  ASSERT_TRUE(startServer({"--cpus", "4", "--idle-timeout", "2s"}));
  // Slowloris: a byte every 200 ms keeps resetting an idle timer, never the header deadline.
  std::vector<int> slow;
  for (int i = 0; i < 50; ++i) {
    int fd = connectFrom(port_, "127.0.0.1");
    ASSERT_GE(fd, 0);
    slow.push_back(fd);
  }
  const std::string request = "GET /v1/whoami HTTP/1.1\r\nHost: x\r\nX-Slow: ";
  const auto start = std::chrono::steady_clock::now();
  std::vector<bool> closed(slow.size(), false);
  size_t closed_count = 0;
  for (size_t byte = 0; closed_count < slow.size() &&
                        std::chrono::steady_clock::now() - start < std::chrono::seconds(8);
       ++byte) {
    for (size_t i = 0; i < slow.size(); ++i) {
      if (closed[i]) continue;
      const char c = byte < request.size() ? request[byte] : 'a';
      if (::send(slow[i], &c, 1, MSG_NOSIGNAL) != 1 || closedWithin(slow[i], 1ms)) {
        closed[i] = true;
        ++closed_count;
      }
    }
    EXPECT_EQ(get("/v1/whoami", admin_).status, 200) << "a bystander was not served";
    std::this_thread::sleep_for(200ms);
  }
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(closed_count, slow.size()) << "slow header blocks outlived their deadline";
  EXPECT_LT(took, std::chrono::seconds(6));
  for (int fd : slow) ::close(fd);
}

TEST_F(ServerEdge, ConnectionsArePerAddressAndInAllCapped) {
  stopServer();
  ASSERT_TRUE(startServer({"--cpus", "4", "--max-connections-per-address", "8"}));
  std::vector<int> mine;
  for (int i = 0; i < 8; ++i) {
    int fd = connectFrom(port_, "127.0.0.2");
    ASSERT_GE(fd, 0);
    mine.push_back(fd);
  }
  // The ninth from that address is closed at once; another address is served.
  int ninth = connectFrom(port_, "127.0.0.2");
  ASSERT_GE(ninth, 0);
  const std::string whoami = "GET /v1/whoami HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
                             admin_ + "\r\n\r\n";
  ::send(ninth, whoami.data(), whoami.size(), MSG_NOSIGNAL);
  EXPECT_TRUE(closedWithin(ninth, 5s));
  ::close(ninth);
  EXPECT_EQ(get("/v1/whoami", admin_).status, 200);
  for (int fd : mine) ::close(fd);
}

TEST_F(ServerEdge, UploadsGoToAFileNotMemoryAndThePendingLimitHoldsUnderARace) {
  const std::string alice = createAccount("alice");
  const int64_t before = residentMiB(server_);
  // Four 128 MiB store files at once: streamed to disk as they come.
  std::vector<std::thread> puts;
  std::vector<int> statuses(4, 0);
  const std::string big(128 << 20, 'z');
  for (int i = 0; i < 4; ++i) {
    puts.emplace_back([&, i] {
      statuses[static_cast<size_t>(i)] =
          call("PUT", "/v1/store/alice-big/f" + std::to_string(i), alice, big,
               "application/octet-stream")
              .status;
    });
  }
  for (auto& t : puts) t.join();
  for (int s : statuses) EXPECT_EQ(s, 201);
  EXPECT_LT(residentMiB(server_) - before, 100) << "the uploads were held in memory";
  // 24 code uploads at once: never more than 16 wait for their job.
  const std::string archive = tarEntry("run.sh", '0', "true\n") + tarEnd();
  std::vector<std::thread> uploads;
  std::vector<Answer> answers(24);
  for (size_t i = 0; i < answers.size(); ++i) {
    uploads.emplace_back([&, i] {
      answers[i] = call("POST", "/v1/uploads", alice, archive, "application/x-tar");
    });
  }
  for (auto& t : uploads) t.join();
  int accepted = 0;
  for (const Answer& a : answers) {
    if (a.status == 201) {
      ++accepted;
    } else {
      EXPECT_TRUE(a.status == 429 || a.status == 409) << a;
    }
  }
  EXPECT_LE(accepted, 16);
  EXPECT_GE(accepted, 1);
  std::error_code ec;
  int waiting = 0;
  for (const auto& e : std::filesystem::directory_iterator(data_root_ + "/uploads/alice", ec)) {
    waiting += e.path().filename().string().rfind("up-", 0) == 0;
  }
  EXPECT_LE(waiting, 16);
}

TEST_F(ServerEdge, AnAccountsFollowersAreCappedAndFreedWhenTheyHangUp) {
  stopServer();
  ASSERT_TRUE(startServer({"--cpus", "4", "--max-followers", "5"}));
  const std::string bob = createAccount("bob");
  const std::string carol = createAccount("carol");
  const std::string id = submit(bob, rankJob("followed", {"echo=before", gate("go")}));
  ASSERT_FALSE(id.empty());
  waitJob(bob, id, isRunning);
  const std::string request = "GET /v1/jobs/" + id + "/logs?follow=1 HTTP/1.1\r\nHost: x\r\n"
                              "Authorization: Bearer " + bob + "\r\n\r\n";
  std::vector<std::unique_ptr<RawConnection>> followers;
  for (int i = 0; i < 5; ++i) {
    followers.push_back(std::make_unique<RawConnection>(port_));
    ASSERT_TRUE(followers.back()->send(request));
    ASSERT_TRUE(contains(followers.back()->readUntilContains("before"), "before"));
  }
  Answer sixth = get("/v1/jobs/" + id + "/logs?follow=1", bob);
  EXPECT_EQ(sixth.status, 429) << sixth;
  EXPECT_EQ(sixth.code(), "resource_exhausted");
  EXPECT_TRUE(contains(sixth.message(), "quota of 5 followed streams")) << sixth;
  EXPECT_TRUE(contains(sixth.message(), "5 in use")) << sixth;
  // What is not a follower is not counted, and another account's limit is its own (an admin
  // is held only to what was set for it).
  EXPECT_EQ(get("/v1/jobs/" + id + "/logs", bob).status, 200);
  RawConnection admins(port_);
  ASSERT_TRUE(admins.send("GET /v1/jobs/" + id + "/logs?follow=1 HTTP/1.1\r\nHost: x\r\n"
                          "Authorization: Bearer " + admin_ + "\r\n\r\n"));
  EXPECT_TRUE(contains(admins.readUntilContains("before"), "before"));
  EXPECT_EQ(get("/v1/accounts/carol/quotas", carol).json["quotas"]["followers"]["used"], 0);
  // One hangs up: its slot is free again at once.
  followers.pop_back();
  bool again = waitFor(
      [&] {
        RawConnection c(port_);
        c.send(request);
        return contains(c.readUntilContains("before", 2s), "before");
      },
      kDeadline, 100ms);
  EXPECT_TRUE(again);
  openGate("go");
}

TEST_F(ServerEdge, ARevokedTokensOpenStreamsEndWithinASecond) {
  const std::string id = submit(admin_, rankJob("followed", {"echo=before", gate("go")}));
  ASSERT_FALSE(id.empty());
  waitJob(admin_, id, isRunning);
  Answer made = post("/v1/tokens", admin_, {{"label", "laptop"}});
  ASSERT_EQ(made.status, 201) << made;
  const std::string token = made.json.value("token", "");
  RawConnection logs(port_), events(port_);
  ASSERT_TRUE(logs.send("GET /v1/jobs/" + id + "/logs?follow=1 HTTP/1.1\r\nHost: x\r\n"
                        "Authorization: Bearer " + token + "\r\n\r\n"));
  ASSERT_TRUE(events.send("GET /v1/jobs/" + id + "/events HTTP/1.1\r\nHost: x\r\n"
                          "Accept: text/event-stream\r\nAuthorization: Bearer " + token +
                          "\r\n\r\n"));
  ASSERT_TRUE(contains(logs.readUntilContains("before"), "before"));
  ASSERT_TRUE(contains(events.readUntilContains("data:"), "data:"));
  const auto revoked = std::chrono::steady_clock::now();
  EXPECT_EQ(call("DELETE", "/v1/tokens/" + std::to_string(made.json.value("id", 0)), admin_)
                .status,
            204);
  logs.readUntil([](const std::string&) { return false; }, 3s);
  events.readUntil([](const std::string&) { return false; }, 3s);
  EXPECT_TRUE(logs.closedByServer());
  EXPECT_TRUE(events.closedByServer());
  EXPECT_LT(std::chrono::steady_clock::now() - revoked, std::chrono::seconds(4));
  EXPECT_FALSE(streamEnded(logs.received())) << "a cut-off stream must not look finished";
  EXPECT_EQ(get("/v1/whoami", token).status, 401);
  openGate("go");
}


// ---------------------------------------------------------------------------------------------
// TLS: beyond loopback the server speaks HTTPS or refuses to start, and every client verifies.

using ServerTls = ServerFixture;

TEST_F(ServerTls, BeyondLoopbackWithoutTlsTheServerRefusesToStartUnlessTold) {
  RunResult refused = CohortProcess({"server", "--listen", "0.0.0.0:0",
                                     "--data-root", dir_ + "/other"})
                          .wait(30s);
  EXPECT_EQ(refused.exit_code, 2) << refused.err;
  EXPECT_TRUE(contains(refused.err, "--tls-self-signed")) << refused.err;
  EXPECT_TRUE(contains(refused.err, "--insecure-http")) << refused.err;
  RunResult mismatched = CohortProcess({"server", "--listen", "127.0.0.1:0",
                                        "--data-root", dir_ + "/other", "--tls-cert",
                                        "/etc/hostname", "--tls-key", "/etc/hostname"})
                             .wait(30s);
  EXPECT_EQ(mismatched.exit_code, 2) << mismatched.err;
  EXPECT_TRUE(contains(mismatched.err, "holds no PEM certificate")) << mismatched.err;
}

TEST_F(ServerTls, ASelfSignedServerIsPinnedByFingerprintAndItsJobsReportOverTls) {
  stopServer();
  ASSERT_TRUE(startServer({"--cpus", "4", "--tls-self-signed"}));
  const std::string out = readText(dir_ + "/server-2.out");
  const std::string marker = "SHA-256 fingerprint ";
  auto at = out.find(marker);
  ASSERT_NE(at, std::string::npos) << out;
  const std::string fingerprint = out.substr(at + marker.size(), 95);
  const std::string url = "https://127.0.0.1:" + std::to_string(port_);
  // Plain HTTP gets nothing from it.
  EXPECT_NE(get("/v1/whoami", admin_).status, 200);
  const std::string config = dir_ + "/config";
  auto cohort = [&](std::vector<std::string> args) {
    return CohortProcess(args, {"XDG_CONFIG_HOME=" + config}).wait(60s);
  };
  // Unverified, nothing is sent; a wrong fingerprint is refused and nothing is saved.
  RunResult unpinned = cohort({"login", url, "--token", admin_});
  EXPECT_EQ(unpinned.exit_code, 1) << unpinned.err;
  EXPECT_TRUE(contains(unpinned.err, "could not be trusted")) << unpinned.err;
  std::string wrong = fingerprint;
  wrong[0] = wrong[0] == 'A' ? 'B' : 'A';
  RunResult mitm = cohort({"login", url, "--token", admin_, "--fingerprint", wrong});
  EXPECT_NE(mitm.exit_code, 0) << mitm.err;
  EXPECT_TRUE(contains(mitm.err, "this may not be your server")) << mitm.err;
  EXPECT_FALSE(std::filesystem::exists(config + "/cohort/config.json"));
  RunResult pinned = cohort({"login", url, "--token", admin_, "--fingerprint", fingerprint});
  ASSERT_EQ(pinned.exit_code, 0) << pinned.err;
  RunResult who = cohort({"whoami"});
  EXPECT_EQ(who.exit_code, 0) << who.err;
  EXPECT_TRUE(contains(who.out, "admin")) << who.out;
  // A job's coordinator reports over TLS, trusting the server's key; logs follow over TLS.
  RunResult submitted = cohort({"submit", "--wait", "--name", "tls", "--workdir", work_, "--",
                                testRank(), "echo=over-tls", "exit=0"});
  EXPECT_EQ(submitted.exit_code, 0) << submitted.err;
  RunResult ps = cohort({"ps"});
  EXPECT_TRUE(contains(ps.out, "succeeded")) << ps.out;
  const std::string id = ps.out.substr(ps.out.find("tls-"), ps.out.find(' ', ps.out.find("tls-")) - ps.out.find("tls-"));
  RunResult logs = cohort({"logs", id, "-f"});
  EXPECT_EQ(logs.exit_code, 0) << logs.err;
  EXPECT_TRUE(contains(logs.out, "over-tls")) << logs.out;
  // The certificate file is the CA for the SDK and for COHORT_CA.
  RunResult with_ca = CohortProcess({"whoami", "--server", url, "--token", admin_,
                                     "--ca", data_root_ + "/server/tls/cert.pem"},
                                    {"XDG_CONFIG_HOME=" + dir_ + "/empty"})
                          .wait(30s);
  EXPECT_EQ(with_ca.exit_code, 0) << with_ca.err;
}


// ---------------------------------------------------------------------------------------------
// Followers that survive and finish: a server restart does not end `cohort logs -f` or
// `--wait`, and a follower ends only after the job's last line.

TEST_F(ServerRecovery, FollowersRideOutARestartAndEndAfterTheJobsLastLine) {
  const std::string id =
      submit(admin_, rankJob("restarted", {"echo=before", gate("go"), "echo=after"}));
  ASSERT_FALSE(id.empty());
  waitJob(admin_, id, isRunning);
  const std::vector<std::string> env = {
      "COHORT_SERVER=http://127.0.0.1:" + std::to_string(port_), "COHORT_TOKEN=" + admin_,
      "XDG_CONFIG_HOME=" + dir_ + "/no-config"};
  CohortProcess logs({"logs", id, "-f"}, env);
  CohortProcess wait({"status", id, "--wait"}, env);
  // The follower has the first line, then the server goes away and comes back on its port.
  ASSERT_TRUE(waitFor([&] { return contains(get("/v1/jobs/" + id + "/logs", admin_).body,
                                            "before"); },
                      kDeadline, 50ms));
  std::this_thread::sleep_for(500ms);  // lets the follower read it before the server goes
  const int port = port_;
  stopServer();
  ASSERT_TRUE(startServer({"--cpus", "4", "--listen", "127.0.0.1:" + std::to_string(port)}));
  ASSERT_EQ(port_, port);
  openGate("go");
  RunResult followed = logs.wait(120s);
  EXPECT_EQ(followed.exit_code, 0) << followed.err;
  EXPECT_TRUE(contains(followed.out, "[worker/0 node0] before")) << followed.out;
  EXPECT_TRUE(contains(followed.out, "[worker/0 node0] after")) << followed.out;
  // Nothing twice, and the job's own last line is there.
  EXPECT_EQ(followed.out.find("before"), followed.out.rfind("before")) << followed.out;
  EXPECT_TRUE(contains(followed.out, "cohort: job " + id + " succeeded")) << followed.out;
  RunResult waited = wait.wait(120s);
  EXPECT_EQ(waited.exit_code, 0) << waited.err;
}

TEST_F(ServerStreams, AFollowedLogEndsOnlyAfterTheJobsLastLine) {
  const std::vector<std::string> env = {
      "COHORT_SERVER=http://127.0.0.1:" + std::to_string(port_), "COHORT_TOKEN=" + admin_,
      "XDG_CONFIG_HOME=" + dir_ + "/no-config"};
  for (int i = 0; i < 5; ++i) {
    const std::string id = submit(admin_, rankJob("short" + std::to_string(i), {"echo=only"}));
    ASSERT_FALSE(id.empty());
    RunResult followed = CohortProcess({"logs", id, "-f"}, env).wait(60s);
    EXPECT_EQ(followed.exit_code, 0) << followed.err;
    EXPECT_TRUE(contains(followed.out, "cohort: job " + id + " succeeded"))
        << "follow " << i << " ended before the job's last line:\n" << followed.out;
  }
}

// ---------------------------------------------------------------------------------------------
// Quotas: what one account may hold and do at once. Each is tried by a hostile account next to
// another one, whose work must go on untouched.

class ServerQuotas : public ServerFixture {
 protected:
  // The admin sets `account`'s quotas; returns the answer's quotas.
  Json setQuotas(const std::string& account, const Json& quotas) {
    Answer a = call("PUT", "/v1/accounts/" + account + "/quotas", admin_, quotas.dump());
    EXPECT_EQ(a.status, 200) << a;
    return a.json.is_object() ? a.json["quotas"] : Json();
  }
  static ::testing::AssertionResult overQuota(const Answer& a, const std::string& quota,
                                              const std::string& in_use) {
    if (a.status != 429 || a.code() != "resource_exhausted") {
      return ::testing::AssertionFailure() << "not a 429: " << a;
    }
    for (const std::string& words : {"(" + quota + " quota)", in_use + " in use",
                                     std::string("cohort accounts quota")}) {
      if (quota == "max_priority" && words != "cohort accounts quota") continue;
      if (!contains(a.message(), words)) {
        return ::testing::AssertionFailure() << "'" << words << "' not in: " << a.message();
      }
    }
    return ::testing::AssertionSuccess();
  }
};

TEST_F(ServerQuotas, NoAccountGivesItselfAPriorityAboveItsMaximum) {
  const std::string alice = createAccount("alice");
  const std::string bob = createAccount("bob");
  const Json job = rankJob("eager", {"echo=hi"});
  for (int priority : {10, 1000000}) {
    Answer a = post("/v1/jobs", alice, {{"job", job}, {"priority", priority}});
    EXPECT_TRUE(overQuota(a, "max_priority", "")) << priority;
    EXPECT_TRUE(contains(a.message(), "a priority of at most 0, not " + std::to_string(priority)))
        << a;
  }
  EXPECT_EQ(call("PUT", "/v1/accounts/alice/quotas", alice, R"({"max_priority": 99})").status,
            403)
      << "an account set its own quota";
  EXPECT_EQ(post("/v1/jobs", bob, {{"job", job}, {"priority", 0}}).status, 201);
  const Json set = setQuotas("alice", {{"max_priority", 10}});
  EXPECT_EQ(set["max_priority"]["limit"], 10) << set;
  EXPECT_EQ(set["max_priority"]["default"], false) << set;
  EXPECT_EQ(post("/v1/jobs", alice, {{"job", job}, {"priority", 10}}).status, 201);
  EXPECT_TRUE(overQuota(post("/v1/jobs", alice, {{"job", job}, {"priority", 11}}),
                        "max_priority", ""));
  // Back to the server's default.
  EXPECT_EQ(setQuotas("alice", {{"max_priority", nullptr}})["max_priority"]["limit"], 0);
}

TEST_F(ServerQuotas, QueuedJobsPastTheQuotaAreRefusedAndAnotherAccountStillQueues) {
  stopServer();
  ASSERT_TRUE(startServer({"--cpus", "1", "--quota-queued-jobs", "2"}));
  const std::string alice = createAccount("alice");
  const std::string bob = createAccount("bob");
  const std::string first = submit(alice, rankJob("holds-the-cpu", {gate("go")}));
  ASSERT_FALSE(first.empty());
  waitJob(alice, first, isRunning);
  for (int i = 0; i < 2; ++i) ASSERT_FALSE(submit(alice, rankJob("waits", {gate("go")})).empty());
  Answer third = post("/v1/jobs", alice, {{"job", rankJob("one-too-many", {"echo=x"})}});
  EXPECT_TRUE(overQuota(third, "queued_jobs", "2")) << third;
  const Json quotas = get("/v1/accounts/alice/quotas", alice).json["quotas"];
  EXPECT_EQ(quotas["queued_jobs"]["used"], 2) << quotas;
  EXPECT_EQ(quotas["queued_jobs"]["limit"], 2) << quotas;
  EXPECT_EQ(quotas["queued_jobs"]["default"], true) << quotas;
  // Bob's queue is his own.
  const std::string bobs = submit(bob, rankJob("bobs", {"echo=bob"}));
  ASSERT_FALSE(bobs.empty());
  EXPECT_EQ(get("/v1/jobs/" + bobs, bob).json.value("state", ""), "queued");
  // Another account cannot read alice's quotas; the admin can.
  EXPECT_EQ(get("/v1/accounts/alice/quotas", bob).status, 404);
  EXPECT_EQ(get("/v1/accounts/alice/quotas", admin_).status, 200);
  openGate("go");
  EXPECT_EQ(waitFinal(bob, bobs).value("state", ""), "succeeded");
}

TEST_F(ServerQuotas, UploadsPastTheQuotaAreRefusedAndAnotherAccountStillUploads) {
  const std::string alice = createAccount("alice");
  const std::string bob = createAccount("bob");
  setQuotas("alice", {{"uploads", 2}});
  const std::string archive = tarEntry("run.sh", '0', "true\n") + tarEnd();
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(call("POST", "/v1/uploads", alice, archive, "application/x-tar").status, 201);
  }
  Answer third = call("POST", "/v1/uploads", alice, archive, "application/x-tar");
  EXPECT_TRUE(overQuota(third, "uploads", "2")) << third;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(call("POST", "/v1/uploads", bob, archive, "application/x-tar").status, 201);
  }
}

TEST_F(ServerQuotas, BytesAndInodesPastTheQuotaAreRefusedAndAnotherAccountStillWrites) {
  const std::string alice = createAccount("alice");
  const std::string bob = createAccount("bob");
  setQuotas("alice", {{"bytes", 1 << 20}, {"inodes", 40}});
  const std::string two_mib(2 << 20, 'z');
  // A store file larger than the quota: refused from its headers, before a byte of its body.
  RawConnection put(port_);
  ASSERT_TRUE(put.send("PUT /v1/store/alice-data/big HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
                       alice + "\r\nContent-Type: application/octet-stream\r\nContent-Length: " +
                       std::to_string(two_mib.size()) + "\r\n\r\n"));
  const std::string refused = put.readUntilContains("quota)");
  EXPECT_TRUE(contains(refused, "HTTP/1.1 429")) << refused;
  EXPECT_TRUE(contains(refused, "quota of 1.0 MiB bytes in the data root")) << refused;
  EXPECT_TRUE(contains(refused, "(bytes quota)")) << refused;
  EXPECT_EQ(call("PUT", "/v1/store/bob-data/big", bob, two_mib, "application/octet-stream").status,
            201);
  // A code upload of 60 small files: past the inodes however few bytes.
  std::string many;
  for (int i = 0; i < 60; ++i) many += tarEntry("f" + std::to_string(i), '0', "x");
  many += tarEnd();
  Answer up = call("POST", "/v1/uploads", alice, many, "application/x-tar");
  EXPECT_EQ(up.status, 429) << up;
  EXPECT_TRUE(contains(up.message(), "(inodes quota)")) << up;
  EXPECT_EQ(call("POST", "/v1/uploads", bob, many, "application/x-tar").status, 201);
  // Within both: accepted, and counted.
  EXPECT_EQ(call("PUT", "/v1/store/alice-data/small", alice, std::string(4096, 's'),
                 "application/octet-stream")
                .status,
            201);
  const Json quotas = get("/v1/accounts/alice/quotas", alice).json["quotas"];
  EXPECT_GE(quotas["bytes"]["used"].get<int64_t>(), 4096) << quotas;
  EXPECT_GE(quotas["inodes"]["used"].get<int64_t>(), 1) << quotas;
  // Nothing of alice's refused requests is left in the data root.
  std::error_code ec;
  EXPECT_FALSE(std::filesystem::exists(data_root_ + "/store/alice@alice-data/big", ec));
}

// A job that writes past its account's bytes quota is stopped, saying why; another account's
// running job goes on.
TEST_F(ServerQuotas, ARunningJobThatWritesPastItsAccountsBytesIsStoppedAndNoOtherIs) {
  const std::string alice = createAccount("alice");
  const std::string bob = createAccount("bob");
  setQuotas("alice", {{"bytes", 8 << 20}});
  const std::string bobs = submit(bob, rankJob("bystander", {"echo=started", gate("go")}));
  ASSERT_FALSE(bobs.empty());
  Json filler = {{"name", "filler"},
                 {"framework", "generic"},
                 {"workdir", work_},
                 {"command",
                  {"/bin/sh", "-c",
                   "head -c 33554432 /dev/zero > \"$COHORT_OUTPUT_DIR/fill\"; sleep 60"}}};
  const std::string id = submit(alice, filler);
  ASSERT_FALSE(id.empty());
  const Json record = waitFinal(alice, id);
  EXPECT_EQ(record.value("state", ""), "stopped") << record;
  EXPECT_TRUE(contains(record.value("reason", ""), "(bytes quota)")) << record;
  EXPECT_TRUE(contains(record.value("reason", ""), "the job was stopped")) << record;
  EXPECT_EQ(get("/v1/jobs/" + bobs, bob).json.value("state", ""), "running");
  openGate("go");
  EXPECT_EQ(waitFinal(bob, bobs).value("state", ""), "succeeded");
  // Over its quota, alice may submit nothing more until it frees some.
  Answer more = post("/v1/jobs", alice, {{"job", rankJob("more", {"echo=x"})}});
  EXPECT_TRUE(overQuota(more, "bytes", "")) << more;
}

// The server's reason for a stop outlives the server: killed while the job stops, it comes back
// and records the quota, not the signal the coordinator was sent.
TEST_F(ServerQuotas, AQuotaStopKeepsItsReasonAcrossARestart) {
  const std::string alice = createAccount("alice");
  setQuotas("alice", {{"bytes", 8 << 20}});
  const std::string go = work_ + "/fill-now";
  Json filler = {{"name", "filler"},
                 {"framework", "generic"},
                 {"workdir", work_},
                 {"command",
                  {"/bin/sh", "-c",
                   "while [ ! -e " + go + " ]; do sleep 0.05; done; "
                   "head -c 33554432 /dev/zero > \"$COHORT_OUTPUT_DIR/fill\"; sleep 60"}}};
  const std::string id = submit(alice, filler);
  ASSERT_FALSE(id.empty());
  waitJob(alice, id, isRunning);
  pid_t coordinator = 0;
  ASSERT_TRUE(waitFor([&] { return (coordinator = coordinatorOf(id)) > 0; }, kDeadline, 50ms));
  // The coordinator cannot report the end while the server decides and then dies.
  ASSERT_EQ(::kill(coordinator, SIGSTOP), 0);
  openGate("fill-now");
  const Json stopping =
      waitJob(alice, id, [](const Json& r) { return r.value("state", "") == "stopping"; });
  EXPECT_TRUE(contains(stopping.value("reason", ""), "(bytes quota)")) << stopping;
  stopServer(SIGKILL);
  ::kill(coordinator, SIGCONT);
  ASSERT_TRUE(startServer());
  const Json record = waitFinal(alice, id);
  EXPECT_EQ(record.value("state", ""), "stopped") << record;
  EXPECT_TRUE(contains(record.value("reason", ""), "(bytes quota)")) << record;
}

TEST_F(ServerQuotas, BadQuotasAreRefusedNamingTheField) {
  createAccount("alice");
  for (const char* body : {R"({"bytes": -1})", R"({"inodes": "many"})", R"({"speed": 3})"}) {
    Answer a = call("PUT", "/v1/accounts/alice/quotas", admin_, body);
    EXPECT_EQ(a.status, 400) << body << ": " << a;
  }
  EXPECT_EQ(call("PUT", "/v1/accounts/nobody/quotas", admin_, R"({"bytes": 1})").status, 404);
}

// ---------------------------------------------------------------------------------------------
// The ranks' Python, asked at submission where they will run it

class ServerPython : public ServerFixture {
 protected:
  // A file of the workdir, readable by every account's user.
  void write(const std::string& name, const std::string& text) const {
    const std::string path = work_ + "/" + name;
    std::ofstream(path) << text;
    ::chmod(path.c_str(), 0644);
  }
};

// A module the ranks' interpreter lacks refuses the job when it is submitted, not when its
// ranks die: the answer names the field, the interpreter as the ranks find it (their PATH,
// their user, their sandbox) and the line that imports it; nothing is queued.
TEST_F(ServerPython, AModuleTheRanksInterpreterLacksRefusesTheSubmission) {
  const std::string alice = createAccount("alice");
  write("train.py", "import json\nfrom no_such_module_anywhere import x\nprint('ran')\n");
  Json job = {{"name", "missing"}, {"framework", "generic"}, {"workdir", work_},
              {"command", {"/usr/bin/python3", "train.py"}}};
  Answer a = post("/v1/jobs", alice, {{"job", job}});
  EXPECT_EQ(a.status, 409) << a;
  EXPECT_TRUE(contains(a.message(), "command: the ranks' interpreter '/usr/bin/python3' ("))
      << a;
  EXPECT_TRUE(contains(a.message(), "cannot import 'no_such_module_anywhere' (train.py line 2)"))
      << a;
  EXPECT_TRUE(contains(get("/v1/jobs", alice).body, "\"jobs\":[]")) << "nothing was queued";

  // What the workdir holds is the job's own: importing it is no refusal, and the job runs.
  write("helper_of_the_job.py", "WORD = 'found'\n");
  write("train.py", "import json\nimport helper_of_the_job\nprint(helper_of_the_job.WORD)\n");
  const std::string id = submit(alice, job);
  ASSERT_FALSE(id.empty());
  EXPECT_EQ(waitFinal(alice, id).value("state", ""), "succeeded");
  EXPECT_TRUE(contains(get("/v1/jobs/" + id + "/logs?rank=0", alice).body, "found"));
}

// The interpreter is the one the ranks' PATH finds (the job's `env:` sets it): a virtual
// environment without torch is named, with the machine's Python that has it.
TEST_F(ServerPython, TheInterpreterIsTheOneTheRanksPathFindsAndAnotherThatHasItIsNamed) {
  REQUIRE("/usr/bin/python3 -c 'import torch'", "Debian's python3-torch is not installed");
  const std::string venv = work_ + "/bare";
  ASSERT_EQ(std::system(("/usr/bin/python3 -m venv --without-pip " + venv).c_str()), 0);
  ASSERT_EQ(std::system(("chmod -R a+rX " + work_).c_str()), 0);
  write("train.py", "import os\nimport torch\n");
  const std::string alice = createAccount("alice");
  Json job = {{"name", "venv"},
              {"framework", "generic"},
              {"workdir", work_},
              {"env", {{"PATH", venv + "/bin:/usr/bin:/bin"}}},
              {"command", {"python3", "train.py"}}};
  Answer a = post("/v1/jobs", alice, {{"job", job}});
  EXPECT_EQ(a.status, 409) << a;
  EXPECT_TRUE(contains(a.message(), "the ranks' interpreter 'python3' (" + venv + "/bin/python3"))
      << a;
  EXPECT_TRUE(contains(a.message(), "cannot import 'torch' (train.py line 2)")) << a;
  EXPECT_TRUE(contains(a.message(), "/usr/bin/python3 has it")) << a;
}

}  // namespace
}  // namespace cohort::testing
