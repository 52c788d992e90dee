// `cohort cp` against a real S3 server that checks every signature: versitygw (its posix
// backend serves a directory: each directory under it is a bucket, each object a plain file),
// started by the suite on a loopback port. scripts/setup installs it into build/go-bin with
// `go install`; without it these tests skip and say so. A small TCP proxy in the test cuts
// connections mid-upload.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "harness.h"
#include "tests/integration/httplib.h"
#include "tests/versitygw.h"

namespace cohort::testing {
namespace {

namespace fs = std::filesystem;

constexpr const char* kKey = kS3Key;
constexpr const char* kSecret = kS3Secret;

void writeFile(const std::string& path, const std::string& content) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << content;
}

std::string randomBytes(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::string data(n, '\0');
  for (char& c : data) c = static_cast<char>(rng());
  return data;
}

// Every file below `dir` (relative path -> content).
std::map<std::string, std::string> files(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) out[fs::relative(e.path(), dir).string()] = readText(e.path());
  }
  return out;
}

// Five files with odd names ('+', spaces, unicode), an empty one and one of three parts.
void writeOddTree(const std::string& dir, unsigned seed) {
  writeFile(dir + "/small.txt", "hello s3\n");
  writeFile(dir + "/empty", "");
  writeFile(dir + "/odd keys/a+b c.txt", "plus and space\n");
  writeFile(dir +
                "/odd keys/\xc3\xbc"
                "ber caf\xc3\xa9.txt",
            "unicode\n");
  writeFile(dir + "/big/weights.bin", randomBytes((20 << 20) + 12345, seed));
}

// Forwards connections to `upstream`, cutting each after `cut_after` bytes from the client.
class CuttingProxy {
 public:
  CuttingProxy(int upstream, int64_t cut_after) : upstream_(upstream), cut_after_(cut_after) {
    listen_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(listen_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    socklen_t n = sizeof a;
    ::getsockname(listen_, reinterpret_cast<sockaddr*>(&a), &n);
    port_ = ntohs(a.sin_port);
    ::listen(listen_, 64);
    thread_ = std::thread([this] { run(); });
  }
  ~CuttingProxy() {
    stop_ = true;
    ::shutdown(listen_, SHUT_RDWR);
    thread_.join();
    ::close(listen_);
  }
  int port() const { return port_; }
  int cuts() const { return cuts_; }

 private:
  void run() {
    std::vector<std::thread> pipes;
    while (!stop_) {
      pollfd p{listen_, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      int client = ::accept4(listen_, nullptr, nullptr, SOCK_CLOEXEC);
      if (client < 0) continue;
      pipes.emplace_back([this, client] { pump(client); });
    }
    for (auto& t : pipes) t.join();
  }
  void pump(int client) {
    int server = dialLoopback(upstream_);
    int64_t sent = 0;
    char buf[65536];
    while (server >= 0 && !stop_) {
      pollfd p[2] = {{client, POLLIN, 0}, {server, POLLIN, 0}};
      if (::poll(p, 2, 100) <= 0) continue;
      if (p[0].revents) {
        ssize_t n = ::read(client, buf, sizeof buf);
        if (n <= 0) break;
        if (sent + n > cut_after_) {
          ++cuts_;
          break;
        }
        sent += n;
        if (::write(server, buf, static_cast<size_t>(n)) != n) break;
      }
      if (p[1].revents) {
        ssize_t n = ::read(server, buf, sizeof buf);
        if (n <= 0) break;
        if (::write(client, buf, static_cast<size_t>(n)) != n) break;
      }
    }
    ::close(client);
    if (server >= 0) ::close(server);
  }

  int upstream_;
  int64_t cut_after_;
  int listen_ = -1, port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> cuts_{0};
  std::thread thread_;
};

class S3 : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string gw =
        Versitygw::find({fs::path(COHORT_BIN).parent_path().string(), sourceDir() + "/build"});
    if (gw.empty()) return;
    root_ = new std::string(tempDir());
    fs::create_directories(*root_ + "/served/datasets");
    gw_ = new Versitygw(gw, *root_ + "/served", *root_ + "/versitygw.log");
    port_ = gw_->port();
  }
  static void TearDownTestSuite() {
    delete gw_;
    gw_ = nullptr;
    if (root_) fs::remove_all(*root_);
    delete root_;
    root_ = nullptr;
  }
  void SetUp() override {
    if (!root_) {
      GTEST_SKIP() << "versitygw not found (scripts/setup installs it into build/go-bin with "
                      "go install; or set COHORT_VERSITYGW): the s3:// tests did not run";
    }
    ASSERT_TRUE(gw_->up()) << "versitygw did not start:\n" << readText(*root_ + "/versitygw.log");
    work_ = tempDir();
  }
  void TearDown() override {
    if (!work_.empty()) fs::remove_all(work_);
  }

  static std::string endpoint(int port = 0) {
    return "http://127.0.0.1:" + std::to_string(port ? port : port_);
  }
  // `cohort cp` with the server's credentials (or `env` instead), and a home without ~/.aws.
  RunResult cp(const std::vector<std::string>& args, std::vector<std::string> env = {},
               int port = 0) {
    std::vector<std::string> all = {"cp", "-q"};
    all.insert(all.end(), args.begin(), args.end());
    if (env.empty()) {
      env = {std::string("AWS_ACCESS_KEY_ID=") + kKey,
             std::string("AWS_SECRET_ACCESS_KEY=") + kSecret};
    }
    env.push_back("AWS_ENDPOINT_URL=" + endpoint(port));
    env.push_back("HOME=" + work_);
    env.push_back("AWS_PROFILE=");
    env.push_back("COHORT_DATA_ROOT=" + work_ + "/data");
    CohortProcess p(all, env);
    return p.wait(120s);
  }
  static std::string served(const std::string& rel) { return *root_ + "/served/" + rel; }

  std::string work_;
  static std::string* root_;
  static Versitygw* gw_;
  static int port_;
};

std::string* S3::root_ = nullptr;
Versitygw* S3::gw_ = nullptr;
int S3::port_ = 0;

TEST_F(S3, ATreeGoesUpAndComesBackByteForByteWithOddKeysAndAMultipartFile) {
  const std::string src = work_ + "/src";
  writeOddTree(src, 7);
  for (int i = 0; i < 30; ++i) {
    writeFile(src + "/shards/s" + std::to_string(i), randomBytes(1000 + i * 37, i));
  }

  RunResult up = cp({src, "s3://datasets/run1"});
  ASSERT_EQ(up.exit_code, 0) << up.err;
  // What the server holds is what was sent, under the same names.
  EXPECT_EQ(files(served("datasets/run1")), files(src));

  RunResult down = cp({"s3://datasets/run1", work_ + "/back"});
  ASSERT_EQ(down.exit_code, 0) << down.err;
  EXPECT_EQ(files(work_ + "/back"), files(src));
  for (auto& e : fs::recursive_directory_iterator(work_ + "/back")) {
    EXPECT_EQ(e.path().filename().string().rfind(".cohort-tmp-", 0), std::string::npos)
        << "a temporary file was left: " << e.path();
  }

  // Run again: everything is there already, so nothing moves.
  std::vector<std::string> env = {std::string("AWS_ACCESS_KEY_ID=") + kKey,
                                  std::string("AWS_SECRET_ACCESS_KEY=") + kSecret};
  CohortProcess again({"cp", src, "s3://datasets/run1"},
                      {env[0], env[1], "AWS_ENDPOINT_URL=" + endpoint(), "HOME=" + work_});
  RunResult r = again.wait(60s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "copied 0 files")) << r.err;
  EXPECT_TRUE(contains(r.err, "35 skipped")) << r.err;

  // One file to a key, and one object to a file.
  ASSERT_EQ(cp({src + "/small.txt", "s3://datasets/one/renamed.txt"}).exit_code, 0);
  EXPECT_EQ(readText(served("datasets/one/renamed.txt")), "hello s3\n");
  ASSERT_EQ(cp({"s3://datasets/run1/big/weights.bin", work_ + "/w.bin"}).exit_code, 0);
  EXPECT_EQ(readText(work_ + "/w.bin"), readText(src + "/big/weights.bin"));
}

TEST_F(S3, WrongCredentialsAreRefusedInWordsWithoutTheSecret) {
  writeFile(work_ + "/f", "x");
  RunResult r =
      cp({work_ + "/f", "s3://datasets/f"},
         {std::string("AWS_ACCESS_KEY_ID=") + kKey, "AWS_SECRET_ACCESS_KEY=not-the-secret-at-all"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(contains(r.err, "refused the credentials")) << r.err;
  EXPECT_TRUE(contains(r.err, "AWS_SECRET_ACCESS_KEY")) << r.err;
  EXPECT_FALSE(contains(r.err + r.out, "not-the-secret-at-all")) << r.err;
  EXPECT_FALSE(fs::exists(served("datasets/f")));
}

TEST_F(S3, NoCredentialsSaysWhereTheyAreLookedFor) {
  writeFile(work_ + "/f", "x");
  RunResult r =
      cp({work_ + "/f", "s3://datasets/f"}, {"AWS_ACCESS_KEY_ID=", "AWS_SECRET_ACCESS_KEY="});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "no S3 credentials")) << r.err;
  EXPECT_TRUE(contains(r.err, ".aws/credentials")) << r.err;
}

TEST_F(S3, AProfileInTheCredentialsFileIsUsed) {
  writeFile(work_ + "/.aws/credentials", std::string("[team]\naws_access_key_id = ") + kKey +
                                             "\naws_secret_access_key = " + kSecret + "\n");
  writeFile(work_ + "/f", "from a profile");
  CohortProcess p({"cp", "-q", work_ + "/f", "s3://datasets/profiled/f"},
                  {"AWS_ACCESS_KEY_ID=", "AWS_SECRET_ACCESS_KEY=", "HOME=" + work_,
                   "AWS_ENDPOINT_URL=" + endpoint(), "AWS_PROFILE=team"});
  RunResult with_profile = p.wait(60s);
  ASSERT_EQ(with_profile.exit_code, 0) << with_profile.err;
  EXPECT_EQ(readText(served("datasets/profiled/f")), "from a profile");
}

TEST_F(S3, AMissingBucketAndAMissingKeyAreNamed) {
  writeFile(work_ + "/f", "x");
  RunResult r = cp({work_ + "/f", "s3://no-such-bucket/f"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(contains(r.err, "bucket 'no-such-bucket' does not exist")) << r.err;
  RunResult k = cp({"s3://datasets/not/there", work_ + "/out"});
  EXPECT_EQ(k.exit_code, 1);
  EXPECT_TRUE(contains(k.err, "s3://datasets/not/there: no such object")) << k.err;
  EXPECT_FALSE(fs::exists(work_ + "/out"));
}

TEST_F(S3, AConnectionCutMidUploadLeavesNoObjectAndARerunFinishes) {
  const std::string big = work_ + "/big.bin";
  writeFile(big, randomBytes((17 << 20), 3));
  {
    CuttingProxy proxy(port_, 3 << 20);  // every connection is cut after 3 MiB
    RunResult r = cp({big, "s3://datasets/cut/big.bin"}, {}, proxy.port());
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_TRUE(contains(r.err, "big.bin")) << r.err;
    EXPECT_GT(proxy.cuts(), 0);
  }
  EXPECT_FALSE(fs::exists(served("datasets/cut/big.bin")))
      << "an object under its final name after a failed upload";
  RunResult again = cp({big, "s3://datasets/cut/big.bin"});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(readText(served("datasets/cut/big.bin")), readText(big));
}

// versitygw keeps a CRC-64/NVME of every object (as AWS does): a download is checked against
// it, for a small object (one GET) and for a large one (ranges, their CRCs combined).
TEST_F(S3, AnObjectChangedOnTheServerIsRefusedOnTheWayDown) {
  for (const size_t size : {size_t{100000}, (size_t{20} << 20) + 7}) {
    SCOPED_TRACE(size);
    writeFile(work_ + "/f.bin", randomBytes(size, 5));
    ASSERT_EQ(cp({work_ + "/f.bin", "s3://datasets/rot/f.bin"}).exit_code, 0);
    ASSERT_EQ(cp({"s3://datasets/rot/f.bin", work_ + "/good.bin"}).exit_code, 0);
    EXPECT_EQ(readText(work_ + "/good.bin"), readText(work_ + "/f.bin"));
    // Bit rot behind the server's back: same size, other bytes, the old etag and CRC.
    {
      std::fstream f(served("datasets/rot/f.bin"), std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(static_cast<std::streamoff>(size - 500));
      f.put('\x5a');
    }
    RunResult r = cp({"s3://datasets/rot/f.bin", work_ + "/got.bin"});
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_TRUE(contains(r.err, "do not match")) << r.err;
    EXPECT_TRUE(contains(r.err, "CRC-64/NVME")) << r.err;
    EXPECT_FALSE(fs::exists(work_ + "/got.bin"));
    for (auto& e : fs::directory_iterator(work_)) {
      EXPECT_EQ(e.path().filename().string().rfind(".cohort-tmp-", 0), std::string::npos);
    }
  }
}

// `cohort run` with the credentials in its environment, over the test's own data root.
RunResult runJob(const std::string& work, const std::string& job_file, int port) {
  const std::string path = work + "/job.yaml";
  writeFile(path, job_file);
  CohortProcess p(
      {"run", "--data-root", work + "/data", "-f", path},
      {std::string("AWS_ACCESS_KEY_ID=") + kKey, std::string("AWS_SECRET_ACCESS_KEY=") + kSecret,
       "AWS_ENDPOINT_URL=http://127.0.0.1:" + std::to_string(port), "HOME=" + work});
  return p.wait(120s);
}

TEST_F(S3, AJobStagesAnS3InputOnEveryNodeAndWritesItsOutputsToS3) {
  writeFile(work_ + "/digits/a.txt", "alpha\n");
  writeFile(work_ + "/digits/sub/b.txt", "beta\n");
  ASSERT_EQ(cp({work_ + "/digits", "s3://datasets/digits"}).exit_code, 0);
  RunResult r = runJob(work_,
                       "name: s3job\ncommand: [" + testRank() +
                           ", work-file=data/sub/b.txt, rank0:output-file=model.txt]\n"
                           "inputs: [{source: s3://datasets/digits, target: data}]\n"
                           "outputs: [{source: output/, target: 's3://datasets/models/{job}/'}]\n"
                           "roles: {worker: {nodes: 2}}\n",
                       port_);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string dir = onlyJobDir(work_ + "/data");
  const std::string id = dir.substr(dir.rfind('/') + 1);
  EXPECT_EQ(readText(dir + "/work/node1/data/sub/b.txt"), "beta\n");
  EXPECT_EQ(readText(served("datasets/models/" + id + "/model.txt")), "rank 0\n");
  auto outputs = readJson(dir + "/result.json")["outputs"];
  ASSERT_EQ(outputs.size(), 1u);
  EXPECT_EQ(outputs[0]["target"], "s3://datasets/models/" + id + "/");
}

TEST_F(S3, AnInputThatIsNotThereStopsTheJobBeforeItStarts) {
  RunResult r = runJob(work_,
                       "name: s3missing\ncommand: [" + testRank() +
                           "]\n"
                           "inputs: [{source: s3://datasets/never/uploaded, target: data}]\n",
                       port_);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "inputs[0].source")) << r.err;
  EXPECT_TRUE(contains(r.err, "s3://datasets/never/uploaded: no such object")) << r.err;
  RunResult link = runJob(work_,
                          "name: s3link\ncommand: [" + testRank() +
                              "]\n"
                              "inputs: [{source: s3://datasets/x, target: data, mode: link}]\n",
                          port_);
  EXPECT_EQ(link.exit_code, 2) << link.err;
  EXPECT_TRUE(contains(link.err, "inputs[0].mode")) << link.err;
}

TEST_F(S3, ALinkAJobLeavesInItsOutputIsNotFollowedIntoTheBucket) {
  writeFile(work_ + "/secret.txt", "the agent's, not the job's\n");
  RunResult r = runJob(work_,
                       "name: s3leak\ncommand: [sh, -c, 'echo mine > $COHORT_OUTPUT_DIR/ok.txt; "
                       "ln -s " +
                           work_ +
                           "/secret.txt $COHORT_OUTPUT_DIR/leak.txt']\n"
                           "outputs: [{source: output/, target: 's3://datasets/leak/{job}/'}]\n",
                       port_);
  EXPECT_NE(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "leak.txt")) << r.err;
  EXPECT_TRUE(contains(r.err, "symbolic link")) << r.err;
  if (fs::exists(served("datasets/leak"))) {
    for (auto& e : fs::recursive_directory_iterator(served("datasets/leak"))) {
      EXPECT_NE(e.path().filename(), "leak.txt") << "the link was followed into the bucket";
    }
  }
}

TEST_F(S3, AServerRefusesS3DataItWouldReachWithItsOwnCredentials) {
  std::string why;
  auto server = startServer(&why);
  ASSERT_NE(server, nullptr) << why;
  httplib::Client c(server->url());
  const httplib::Headers auth = {{"Authorization", "Bearer " + server->adminToken()}};
  for (const char* field : {"inputs", "outputs"}) {
    nlohmann::json job = {{"name", "s3"}, {"workdir", work_}, {"command", {testRank()}}};
    if (std::string(field) == "inputs") {
      job["inputs"] = {{{"source", "s3://datasets/digits"}, {"target", "data"}}};
    } else {
      job["outputs"] = {{{"source", "output/"}, {"target", "s3://datasets/out/"}}};
    }
    auto a = c.Post("/v1/jobs", auth, nlohmann::json{{"job", job}}.dump(), "application/json");
    ASSERT_TRUE(a);
    EXPECT_EQ(a->status, 400) << a->body;
    EXPECT_TRUE(contains(a->body, std::string(field) + "[0]")) << a->body;
    EXPECT_TRUE(contains(a->body, "server's credentials")) << a->body;
  }
}

TEST_F(S3, AServerSideOrABadBucketNameAreUsageErrors) {
  RunResult server = cp({"s3://datasets/a", "server://datasets/b"});
  EXPECT_EQ(server.exit_code, 2);
  EXPECT_TRUE(contains(server.err, "the other side of a server:// copy is a local path"))
      << server.err;
  for (const char* bad : {"s3://Bad_Bucket/x", "s3://ab/x"}) {
    RunResult r = cp({bad, work_ + "/x"});
    EXPECT_EQ(r.exit_code, 2) << bad;
    EXPECT_TRUE(contains(r.err, "not a valid bucket name")) << r.err;
    RunResult both = cp({"s3://datasets/x", bad});
    EXPECT_EQ(both.exit_code, 2) << bad;
    EXPECT_TRUE(contains(both.err, "not a valid bucket name")) << both.err;
  }
  RunResult dots = cp({work_, "s3://datasets/a/../b"});
  EXPECT_EQ(dots.exit_code, 2);
  EXPECT_TRUE(contains(dots.err, "'..'")) << dots.err;
}

// s3:// to s3:// (two buckets of one endpoint: the service copies), then to and from store://.
TEST_F(S3, BucketToBucketCopiesInsideTheServiceAndARerunSkipsEverything) {
  fs::create_directories(served("archive"));
  const std::string src = work_ + "/src";
  writeOddTree(src, 11);
  ASSERT_EQ(cp({src, "s3://datasets/tree"}).exit_code, 0);

  RunResult across = cp({"s3://datasets/tree", "s3://archive/2026/tree"});
  ASSERT_EQ(across.exit_code, 0) << across.err;
  EXPECT_EQ(files(served("archive/2026/tree")), files(src));
  const std::vector<std::string> env = {std::string("AWS_ACCESS_KEY_ID=") + kKey,
                                        std::string("AWS_SECRET_ACCESS_KEY=") + kSecret,
                                        "AWS_ENDPOINT_URL=" + endpoint(), "HOME=" + work_};
  RunResult again =
      CohortProcess({"cp", "s3://datasets/tree", "s3://archive/2026/tree"}, env).wait(60s);
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_TRUE(contains(again.err, "copied 0 files")) << again.err;
  EXPECT_TRUE(contains(again.err, "5 skipped")) << again.err;

  // One object into a prefix; then through the store on disk and back to S3.
  ASSERT_EQ(cp({"s3://datasets/tree/small.txt", "s3://archive/one/"}).exit_code, 0);
  EXPECT_EQ(readText(served("archive/one/small.txt")), "hello s3\n");
  ASSERT_EQ(cp({"s3://archive/2026/tree", "store://kept/tree"}).exit_code, 0);
  EXPECT_EQ(files(work_ + "/data/store/kept/tree"), files(src));
  ASSERT_EQ(cp({"store://kept/tree", "s3://archive/back"}).exit_code, 0);
  EXPECT_EQ(files(served("archive/back")), files(src));
  for (const std::string& dir : {served("archive"), work_ + "/data/store"}) {
    for (auto& e : fs::recursive_directory_iterator(dir)) {
      EXPECT_EQ(e.path().filename().string().rfind(".cohort-tmp-", 0), std::string::npos)
          << e.path();
    }
  }
}

// ---- a server whose store is in S3 ----------------------------------------------------------

// The S3 settings of a server's environment, for `cohort server --store`: the key, `secret`,
// the endpoint (`port`, or versitygw's), and no ~/.aws files.
std::vector<std::string> serverS3Env(const std::string& secret, int port) {
  return {std::string("AWS_ACCESS_KEY_ID=") + kKey, "AWS_SECRET_ACCESS_KEY=" + secret,
          "AWS_ENDPOINT_URL=http://127.0.0.1:" + std::to_string(port),
          "AWS_SHARED_CREDENTIALS_FILE=/nonexistent", "AWS_CONFIG_FILE=/nonexistent"};
}

// Starts a server with `--store store` and `env` in its environment (set in this process for
// the fork, removed again after).
std::unique_ptr<ServerProcess> startWithStore(const std::string& store,
                                              const std::vector<std::string>& env,
                                              std::string* why) {
  for (const std::string& kv : env) {
    ::setenv(kv.substr(0, kv.find('=')).c_str(), kv.substr(kv.find('=') + 1).c_str(), 1);
  }
  auto server = startServer(why, {"--store", store});
  for (const std::string& kv : env) ::unsetenv(kv.substr(0, kv.find('=')).c_str());
  return server;
}

struct Api {
  std::string url;
  httplib::Result call(const std::string& method, const std::string& path, const std::string& token,
                       const std::string& body = "") const {
    httplib::Client c(url);
    c.set_read_timeout(60, 0);
    const httplib::Headers auth = {{"Authorization", "Bearer " + token}};
    if (method == "GET") return c.Get(path, auth);
    return c.Post(path, auth, body, "application/json");
  }
  std::string account(const std::string& admin, const std::string& name) const {
    auto r = call("POST", "/v1/accounts", admin, nlohmann::json{{"name", name}}.dump());
    EXPECT_TRUE(r && r->status == 201) << (r ? r->body : "no answer");
    return r && r->status == 201 ? nlohmann::json::parse(r->body).value("token", "") : "";
  }
  // The job's record once it ended.
  nlohmann::json waitFinal(const std::string& token, const std::string& id) const {
    nlohmann::json record;
    waitFor(
        [&] {
          auto r = call("GET", "/v1/jobs/" + id, token);
          if (!r || r->status != 200) return false;
          record = nlohmann::json::parse(r->body, nullptr, false);
          const std::string state = record.value("state", "");
          return state == "succeeded" || state == "failed" || state == "stopped";
        },
        120s, 100ms);
    return record;
  }
};

// Every regular file below `dir` holding `text`, relative to it.
std::vector<std::string> filesHolding(const std::string& dir, const std::string& text) {
  std::vector<std::string> found;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    if (it->is_regular_file(ec) && !it->is_symlink(ec) && contains(readText(it->path()), text)) {
      found.push_back(fs::relative(it->path(), dir).string());
    }
  }
  return found;
}

TEST_F(S3, AServerKeepsItsStoreInS3AndItsJobsUseItWithoutSeeingItsCredentials) {
  fs::create_directories(served("srv"));
  std::string why;
  auto server = startWithStore("s3://srv/cohort", serverS3Env(kSecret, port_), &why);
  ASSERT_NE(server, nullptr) << why;
  EXPECT_TRUE(contains(server->log(), "store s3://srv/cohort")) << server->log();
  const Api api{server->url()};
  const std::string alice = api.account(server->adminToken(), "alice");
  const std::string bob = api.account(server->adminToken(), "bob");
  auto as = [&](const std::string& token) {
    return std::vector<std::string>{"COHORT_SERVER=" + server->url(), "COHORT_TOKEN=" + token,
                                    "HOME=" + work_,
                                    "AWS_ACCESS_KEY_ID=", "AWS_SECRET_ACCESS_KEY="};
  };

  // cohort cp to the server and back: the objects are in S3, not on the server's disk.
  writeFile(work_ + "/digits/a.txt", "alpha\n");
  writeFile(work_ + "/digits/sub/b.txt", "beta\n");
  RunResult up =
      CohortProcess({"cp", "-q", work_ + "/digits", "server://datasets/digits"}, as(alice))
          .wait(60s);
  ASSERT_EQ(up.exit_code, 0) << up.err;
  EXPECT_EQ(readText(served("srv/cohort/alice@datasets/digits/sub/b.txt")), "beta\n");
  EXPECT_FALSE(fs::exists(server->dataRoot() + "/store/datasets"));
  RunResult down =
      CohortProcess({"cp", "-q", "server://datasets/digits", work_ + "/back"}, as(alice)).wait(60s);
  ASSERT_EQ(down.exit_code, 0) << down.err;
  EXPECT_EQ(files(work_ + "/back"), files(work_ + "/digits"));

  // A job stages a store:// input on its node and writes its output to store://; its ranks see
  // neither the server's AWS settings nor the store's.
  nlohmann::json job = {
      {"name", "s3store"},
      {"framework", "generic"},
      {"workdir", work_},
      {"command",
       {"/bin/sh", "-c",
        "env > $COHORT_OUTPUT_DIR/env.txt; cat $COHORT_WORK_DIR/data/sub/b.txt > "
        "$COHORT_OUTPUT_DIR/model.txt"}},
      {"inputs", {{{"source", "store://datasets/digits"}, {"target", "data"}}}},
      {"outputs", {{{"source", "output/"}, {"target", "store://models/{job}/"}}}}};
  auto submitted = api.call("POST", "/v1/jobs", alice, nlohmann::json{{"job", job}}.dump());
  ASSERT_TRUE(submitted && submitted->status == 201) << (submitted ? submitted->body : "");
  const std::string id = nlohmann::json::parse(submitted->body).value("id", "");
  nlohmann::json record = api.waitFinal(alice, id);
  ASSERT_EQ(record.value("state", ""), "succeeded") << record.dump() << "\n" << server->log();
  EXPECT_EQ(readText(served("srv/cohort/alice@models/" + id + "/model.txt")), "beta\n");
  const std::string env = readText(served("srv/cohort/alice@models/" + id + "/env.txt"));
  ASSERT_TRUE(contains(env, "COHORT_JOB_ID=" + id)) << env;
  for (const std::string& never : {std::string(kSecret), std::string(kKey),
                                   std::string("COHORT_STORE"), std::string("AWS_")}) {
    EXPECT_FALSE(contains(env, never)) << never << " in the rank's environment";
    EXPECT_EQ(filesHolding(server->dataRoot() + "/jobs/" + id, never == "AWS_" ? kSecret : never),
              std::vector<std::string>{})
        << never;
  }
  EXPECT_FALSE(contains(server->log(), kSecret));
  RunResult outputs =
      CohortProcess({"outputs", id, "download", work_ + "/outputs", "-q"}, as(alice)).wait(60s);
  ASSERT_EQ(outputs.exit_code, 0) << outputs.err;
  EXPECT_EQ(readText(work_ + "/outputs/model.txt"), "beta\n");

  // Another account: its own "datasets" is not alice's, and alice's answers 404, as input or
  // download, until she shares it.
  for (const std::string path : {"/v1/store/datasets/digits/a.txt",
                                  "/v1/store/alice@datasets/digits/a.txt"}) {
    auto theirs = api.call("GET", path, bob);
    ASSERT_TRUE(theirs);
    EXPECT_EQ(theirs->status, 404) << path << ": " << theirs->body;
    EXPECT_FALSE(contains(theirs->body, "alpha"));
  }
  EXPECT_EQ(api.call("GET", "/v1/store/models?list=1", bob)->status, 404);
  nlohmann::json bobs = job;
  bobs["name"] = "bob-reads";
  bobs.erase("outputs");
  auto refused = api.call("POST", "/v1/jobs", bob, nlohmann::json{{"job", bobs}}.dump());
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 404) << refused->body;
  EXPECT_TRUE(contains(refused->body, "inputs[0]")) << refused->body;
  auto share = api.call(
      "POST", "/v1/shares", alice,
      nlohmann::json{{"prefix", "store://datasets/digits"}, {"with", "bob"}, {"access", "read"}}
          .dump());
  ASSERT_TRUE(share && share->status == 201) << (share ? share->body : "");
  auto shared = api.call("GET", "/v1/store/alice@datasets/digits/a.txt", bob);
  ASSERT_TRUE(shared);
  EXPECT_EQ(shared->status, 200) << shared->body;
  EXPECT_EQ(shared->body, "alpha\n");

  // A link input needs a store on disk.
  nlohmann::json link = job;
  link["inputs"][0]["mode"] = "link";
  auto linked = api.call("POST", "/v1/jobs", alice, nlohmann::json{{"job", link}}.dump());
  ASSERT_TRUE(linked);
  EXPECT_EQ(linked->status, 400) << linked->body;
  EXPECT_TRUE(contains(linked->body, "link needs a store on disk")) << linked->body;
}

TEST_F(S3, AServerWhoseStoreCannotBeUsedRefusesToStartAndSaysWhy) {
  fs::create_directories(served("srv"));
  struct Case {
    std::string store;
    std::vector<std::string> env;
    std::string says;
  };
  const std::vector<Case> cases = {
      {"s3://srv/cohort", serverS3Env("not-the-secret-at-all", port_), "refused the credentials"},
      {"s3://no-such-bucket/cohort", serverS3Env(kSecret, port_),
       "bucket 'no-such-bucket' does not exist"},
      {"s3://srv/cohort", serverS3Env(kSecret, freeLoopbackPort()), "cannot reach the S3 service"},
      {"s3://Bad_Bucket/cohort", serverS3Env(kSecret, port_), "not a valid bucket name"},
      {"/srv/store", serverS3Env(kSecret, port_), "expected s3://BUCKET/PREFIX"},
      {"s3://srv/cohort",
       {"AWS_ACCESS_KEY_ID=", "AWS_SECRET_ACCESS_KEY=", "AWS_SHARED_CREDENTIALS_FILE=/nonexistent"},
       "no S3 credentials"},
  };
  for (const Case& c : cases) {
    const std::string root = work_ + "/root";
    RunResult r =
        CohortProcess(
            {"server", "--listen", "127.0.0.1:0", "--data-root", root, "--store", c.store}, c.env)
            .wait(60s);
    EXPECT_NE(r.exit_code, 0) << c.store << ": " << r.out;
    EXPECT_TRUE(contains(r.err, c.says)) << c.store << ": " << r.err;
    EXPECT_FALSE(contains(r.out, "listening")) << r.out;
    EXPECT_FALSE(contains(r.err + r.out, "not-the-secret-at-all"));
  }
}

}  // namespace
}  // namespace cohort::testing
