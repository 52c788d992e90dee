// The volcano backend against a real Kubernetes API server (kube-apiserver v1.33 with etcd, and
// Volcano's Job CRD: tests/kube/cluster, started by ctest's fixture): cohort's Kubernetes client
// and the rendered Volcano Jobs, judged by the API server itself (authentication, RBAC, strict
// validation against Volcano's schema, watches).
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "backends/kube.h"
#include "harness.h"

namespace cohort::testing {
namespace {

using Json = nlohmann::json;
namespace kube = backends::kube;

std::string stateDir() {
  const char* dir = std::getenv("COHORT_KUBE_STATE");
  return dir ? dir : "";
}

// A value of the cluster's env file (tests/kube/cluster up).
std::string clusterEnv(const std::string& name) {
  const std::string env = readText(stateDir() + "/env");
  const std::string key = "export " + name + "=";
  const size_t at = env.find(key);
  if (at == std::string::npos) return "";
  const size_t end = env.find('\n', at);
  return env.substr(at + key.size(), end - at - key.size());
}

constexpr const char* kImage = "registry.example.com/cohort/train:0.1.0";

class Kube : public ::testing::Test {
 protected:
  void SetUp() override {
    if (stateDir().empty() || clusterEnv("COHORT_KUBE_SERVER").empty()) {
      GTEST_SKIP() << "no Kubernetes API server: run through ctest (its fixture starts "
                      "tests/kube/cluster), or set COHORT_KUBE_STATE";
    }
    ::setenv("KUBECONFIG", clusterEnv("KUBECONFIG").c_str(), 1);
    auto config = kube::loadConfig();
    ASSERT_TRUE(config) << config.error().message;
    auto client = kube::Client::create(*config);
    ASSERT_TRUE(client) << client.error().message;
    client_ = std::move(*client);
    // A namespace of the test's own, gone with it.
    namespace_ = "t-" + std::to_string(::getpid()) + "-" + std::to_string(++counter_);
    auto made = client_->call(
        "POST", "/api/v1/namespaces", "create namespace",
        {{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", namespace_}}}});
    ASSERT_TRUE(made) << made.error().message;
  }

  void TearDown() override {
    if (client_) {
      (void)client_->call("DELETE", "/api/v1/namespaces/" + namespace_, "delete namespace");
    }
  }

  // The same server with another user's credentials.
  std::unique_ptr<kube::Client> clientAs(const std::string& token) {
    kube::Config config = client_->config();
    config.token = token;
    config.user = "someone";
    auto client = kube::Client::create(config);
    EXPECT_TRUE(client);
    return client ? std::move(*client) : nullptr;
  }

  static bool volcanoCrd() { return clusterEnv("COHORT_KUBE_VOLCANO_CRD") == "1"; }

  std::unique_ptr<kube::Client> client_;
  std::string namespace_;
  static inline int counter_ = 0;
};

#define REQUIRE_VOLCANO_CRD()                                                                  \
  if (!volcanoCrd())                                                                           \
  GTEST_SKIP() << "the API server has no Volcano Job CRD (../shared/reference/volcano/ "       \
                  "batch.volcano.sh_jobs.yaml beside the source tree is missing): the checks " \
                  "of Volcano Jobs against the server did not run"

Json configMap(const std::string& name) {
  return {{"apiVersion", "v1"},
          {"kind", "ConfigMap"},
          {"metadata", {{"name", name}}},
          {"data", {{"k", "v"}}}};
}

TEST_F(Kube, ClientCreatesGetsListsPatchesAndDeletes) {
  const std::string path = "/api/v1/namespaces/" + namespace_ + "/configmaps";
  auto made = client_->call("POST", path, "create", configMap("one"));
  ASSERT_TRUE(made) << made.error().message;
  EXPECT_EQ((*made)["metadata"]["name"], "one");
  auto got = client_->call("GET", path + "/one", "get");
  ASSERT_TRUE(got) << got.error().message;
  EXPECT_EQ((*got)["data"]["k"], "v");
  auto patched = client_->call("PATCH", path + "/one", "patch", {{"data", {{"k", "w"}}}},
                               "application/merge-patch+json");
  ASSERT_TRUE(patched) << patched.error().message;
  EXPECT_EQ((*patched)["data"]["k"], "w");
  auto listed = client_->call("GET", path, "list");
  ASSERT_TRUE(listed) << listed.error().message;
  EXPECT_EQ((*listed)["items"].size(), 1u);
  auto again = client_->call("POST", path, "create configmap 'one'", configMap("one"));
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code, Code::kAlreadyExists) << again.error().message;
  EXPECT_TRUE(client_->call("DELETE", path + "/one", "delete"));
  auto gone = client_->call("GET", path + "/one", "get configmap 'one'");
  ASSERT_FALSE(gone);
  EXPECT_EQ(gone.error().code, Code::kNotFound);
  EXPECT_TRUE(contains(gone.error().message, "\"one\" not found")) << gone.error().message;
}

TEST_F(Kube, ClientCertificateAuthenticates) {
  const std::string pair = clusterEnv("COHORT_KUBE_CERT_USER");
  kube::Config config = client_->config();
  config.token.clear();
  config.cert_pem = readText(pair.substr(0, pair.find(':')));
  config.key_pem = readText(pair.substr(pair.find(':') + 1));
  auto client = kube::Client::create(config);
  ASSERT_TRUE(client);
  auto listed = (*client)->call("GET", "/api/v1/namespaces/" + namespace_ + "/configmaps", "list");
  EXPECT_TRUE(listed) << listed.error().message;
}

TEST_F(Kube, RefusalsSayWhoAndWhat) {
  auto stranger = clientAs("not-a-token");
  auto denied =
      stranger->call("GET", "/api/v1/namespaces/" + namespace_ + "/configmaps", "list configmaps");
  ASSERT_FALSE(denied);
  EXPECT_EQ(denied.error().code, Code::kUnauthenticated);
  EXPECT_TRUE(contains(denied.error().message, "user 'someone'")) << denied.error().message;

  auto nobody = clientAs(clusterEnv("COHORT_KUBE_NOBODY_TOKEN"));
  auto forbidden = nobody->call("POST", "/api/v1/namespaces/" + namespace_ + "/configmaps",
                                "create configmap", configMap("x"));
  ASSERT_FALSE(forbidden);
  EXPECT_EQ(forbidden.error().code, Code::kPermissionDenied);
  EXPECT_TRUE(contains(forbidden.error().message, "cannot create resource \"configmaps\""))
      << forbidden.error().message;
  EXPECT_TRUE(contains(forbidden.error().message, namespace_)) << forbidden.error().message;
}

TEST_F(Kube, AnApiThatIsNotServedSaysVolcanoIsNotInstalled) {
  auto missing =
      client_->call("POST", "/apis/batch.volcano.sh/v1alpha9/namespaces/" + namespace_ + "/jobs",
                    "create Volcano Job 'x'", configMap("x"));
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, Code::kNotFound);
  EXPECT_TRUE(contains(missing.error().message, "Volcano is not installed on this cluster"))
      << missing.error().message;
}

TEST_F(Kube, AnUnreachableServerIsNamed) {
  kube::Config config = client_->config();
  config.server = "https://127.0.0.1:1";
  auto client = kube::Client::create(config);
  ASSERT_TRUE(client);
  auto got = (*client)->call("GET", "/api/v1/namespaces", "list namespaces");
  ASSERT_FALSE(got);
  EXPECT_EQ(got.error().code, Code::kUnavailable);
  EXPECT_TRUE(contains(got.error().message, "https://127.0.0.1:1")) << got.error().message;
}

TEST_F(Kube, WatchStreamsEventsAsTheyHappen) {
  const std::string path = "/api/v1/namespaces/" + namespace_ + "/configmaps";
  auto listed = client_->call("GET", path, "list");
  ASSERT_TRUE(listed);
  const std::string version = (*listed)["metadata"].value("resourceVersion", "");
  std::atomic<bool> stop{false};
  std::vector<std::string> seen;
  std::thread watcher([&] {
    auto status = client_->stream(
        path + "?watch=1&resourceVersion=" + version + "&timeoutSeconds=30",
        [&](std::string_view line) {
          auto event = kube::parseObject(line, "watch event");
          if (!event) return true;
          seen.push_back((*event)["type"].get<std::string>() + " " +
                         (*event)["object"]["metadata"]["name"].get<std::string>());
          return seen.size() < 2;
        },
        &stop, Millis(60000));
    EXPECT_TRUE(status) << status.error().message;
  });
  ASSERT_TRUE(client_->call("POST", path, "create", configMap("a")));
  ASSERT_TRUE(client_->call("DELETE", path + "/a", "delete"));
  if (!waitFor([&] { return seen.size() >= 2; }, 20s)) stop = true;
  watcher.join();
  EXPECT_EQ(seen, (std::vector<std::string>{"ADDED a", "DELETED a"}));
}

// Every example job's rendering, submitted to the API server with strict validation (a dry run:
// nothing is stored): the server's own verdict on each field, beside the offline check.
TEST_F(Kube, EveryExampleRenderingPassesStrictServerValidation) {
  REQUIRE_VOLCANO_CRD();
  int checked = 0;
  for (const auto& entry :
       std::filesystem::recursive_directory_iterator(sourceDir() + "/examples")) {
    if (entry.path().extension() != ".yaml") continue;
    RunResult plan = runCohort(
        {"plan", "--backend", "volcano", "--json", "--image", kImage, "-f", entry.path().string()});
    if (plan.exit_code != 0) continue;  // not a job file (as the golden test skips it)
    Json job = Json::parse(plan.out, nullptr, false);
    ASSERT_TRUE(job.is_object()) << entry.path() << ": " << plan.out;
    auto dry = client_->call("POST",
                             "/apis/batch.volcano.sh/v1alpha1/namespaces/" + namespace_ +
                                 "/jobs?dryRun=All&fieldValidation=Strict",
                             "create " + entry.path().string(), job);
    EXPECT_TRUE(dry) << dry.error().message;
    ++checked;
  }
  EXPECT_GE(checked, 6);
  // A field Volcano does not know is refused, so the check above can fail.
  RunResult plan = runCohort({"plan", "--backend", "volcano", "--json", "--image", kImage, "-f",
                              sourceDir() + "/examples/pytorch/ddp.yaml"});
  Json job = Json::parse(plan.out, nullptr, false);
  ASSERT_TRUE(job.is_object()) << plan.err;
  job["spec"]["tasks"][0]["replicaz"] = 1;
  auto refused = client_->call("POST",
                               "/apis/batch.volcano.sh/v1alpha1/namespaces/" + namespace_ +
                                   "/jobs?dryRun=All&fieldValidation=Strict",
                               "create", job);
  ASSERT_FALSE(refused);
  EXPECT_TRUE(contains(refused.error().message, "strict decoding error"))
      << refused.error().message;
}

}  // namespace
}  // namespace cohort::testing
