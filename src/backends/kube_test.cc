// Where the Kubernetes client finds its cluster and credentials (kube.h): kubeconfig files as
// kubectl reads them, and a pod's service account. The requests themselves are tested against a
// real API server (tests/integration/volcano_test.cc).
#include "backends/kube.h"

#include <gtest/gtest.h>

#include <map>

namespace cohort::backends::kube {
namespace {

// Files by path, for the parsers' reader.
struct Files {
  std::map<std::string, std::string> files;
  FileReader reader() const {
    return [this](const std::string& path) -> Result<std::string> {
      auto it = files.find(path);
      if (it == files.end()) return fail(Code::kNotFound, "No such file or directory");
      return it->second;
    };
  }
};

constexpr const char* kConfig = R"(apiVersion: v1
kind: Config
clusters:
- name: lab
  cluster:
    server: https://10.0.0.1:6443/
    certificate-authority-data: Q0EgUEVN
- name: other
  cluster:
    server: https://other:443
    certificate-authority: certs/other-ca.pem
    insecure-skip-tls-verify: true
users:
- name: alice
  user:
    token: abc123
- name: bob
  user:
    client-certificate: bob.crt
    client-key-data: S0VZ
- name: carol
  user:
    tokenFile: /var/run/carol-token
- name: cloud
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1beta1
      command: gke-gcloud-auth-plugin
contexts:
- name: lab-alice
  context: {cluster: lab, user: alice, namespace: research}
- name: other-bob
  context: {cluster: other, user: bob}
- name: lab-carol
  context: {cluster: lab, user: carol}
- name: cloud
  context: {cluster: lab, user: cloud}
- name: lost
  context: {cluster: nowhere, user: alice}
current-context: lab-alice
)";

Result<Config> parse(const std::string& context, const Files& files = {}) {
  return parseKubeconfig({{"/home/a/.kube/config", kConfig}}, context, files.reader());
}

TEST(Kubeconfig, CurrentContextGivesServerTokenAndNamespace) {
  auto config = parse("");
  ASSERT_TRUE(config) << config.error().message;
  EXPECT_EQ(config->server, "https://10.0.0.1:6443");
  EXPECT_EQ(config->ca_pem, "CA PEM");
  EXPECT_EQ(config->token, "abc123");
  EXPECT_EQ(config->namespace_name, "research");
  EXPECT_EQ(config->user, "alice");
  EXPECT_FALSE(config->insecure);
  EXPECT_NE(config->origin.find("context 'lab-alice'"), std::string::npos) << config->origin;
}

TEST(Kubeconfig, FilesItNamesAreRelativeToTheKubeconfig) {
  Files files;
  files.files["/home/a/.kube/certs/other-ca.pem"] = "OTHER CA";
  files.files["/home/a/.kube/bob.crt"] = "BOB CERT";
  auto config = parse("other-bob", files);
  ASSERT_TRUE(config) << config.error().message;
  EXPECT_EQ(config->ca_pem, "OTHER CA");
  EXPECT_EQ(config->cert_pem, "BOB CERT");
  EXPECT_EQ(config->key_pem, "KEY");
  EXPECT_TRUE(config->insecure);
  EXPECT_EQ(config->namespace_name, "default");
}

TEST(Kubeconfig, AFileItCannotReadIsNamed) {
  auto config = parse("other-bob");
  ASSERT_FALSE(config);
  EXPECT_EQ(config.error().code, Code::kNotFound);
  EXPECT_NE(config.error().message.find("/home/a/.kube/certs/other-ca.pem"), std::string::npos)
      << config.error().message;
}

TEST(Kubeconfig, TokenFileIsReadAgainForEachRequest) {
  Files files;
  files.files["/var/run/carol-token"] = "t0k3n\n";
  auto config = parse("lab-carol", files);
  ASSERT_TRUE(config) << config.error().message;
  EXPECT_EQ(config->token_file, "/var/run/carol-token");
  EXPECT_TRUE(config->token.empty());
}

TEST(Kubeconfig, AContextThatIsNotThereNamesTheOnesThatAre) {
  auto config = parse("prod");
  ASSERT_FALSE(config);
  EXPECT_EQ(config.error().code, Code::kInvalidArgument);
  EXPECT_NE(config.error().message.find("context 'prod' is not there"), std::string::npos)
      << config.error().message;
  EXPECT_NE(config.error().message.find("'lab-alice'"), std::string::npos);
}

TEST(Kubeconfig, AContextNamingAMissingClusterSaysWhich) {
  auto config = parse("lost");
  ASSERT_FALSE(config);
  EXPECT_NE(config.error().message.find("cluster 'nowhere'"), std::string::npos)
      << config.error().message;
}

TEST(Kubeconfig, ExecPluginsAreRefusedWithWhatToDo) {
  auto config = parse("cloud");
  ASSERT_FALSE(config);
  EXPECT_NE(config.error().message.find("exec plugin"), std::string::npos)
      << config.error().message;
  EXPECT_NE(config.error().message.find("user 'cloud'"), std::string::npos);
}

TEST(Kubeconfig, NoCurrentContextIsAnError) {
  auto config = parseKubeconfig({{"/k", "apiVersion: v1\nkind: Config\ncontexts: []\n"}}, "",
                                Files{}.reader());
  ASSERT_FALSE(config);
  EXPECT_NE(config.error().message.find("no current-context"), std::string::npos)
      << config.error().message;
}

TEST(Kubeconfig, MergedFilesFirstWins) {
  const std::string first = R"(apiVersion: v1
kind: Config
clusters:
- name: lab
  cluster: {server: "https://first:6443"}
current-context: mine
)";
  const std::string second = R"(apiVersion: v1
kind: Config
clusters:
- name: lab
  cluster: {server: "https://second:6443"}
users:
- name: me
  user: {token: secondtoken}
contexts:
- name: mine
  context: {cluster: lab, user: me}
- name: theirs
  context: {cluster: lab, user: me}
current-context: theirs
)";
  auto config = parseKubeconfig({{"/a", first}, {"/b", second}}, "", Files{}.reader());
  ASSERT_TRUE(config) << config.error().message;
  EXPECT_EQ(config->server, "https://first:6443");
  EXPECT_EQ(config->token, "secondtoken");
  EXPECT_NE(config->origin.find("'mine'"), std::string::npos);
}

TEST(Kubeconfig, MalformedInputIsAnErrorNotACrash) {
  for (const std::string text :
       {"[1, 2", "clusters: 5", "clusters: [{cluster: {}}]", "- a\n- b\n",
        "current-context: x\ncontexts: [{name: x, context: {cluster: [1]}}]",
        "current-context: x\ncontexts: [{name: x, context: {cluster: c}}]\n"
        "clusters: [{name: c, cluster: {server: ftp://x}}]",
        "current-context: x\ncontexts: [{name: x, context: {cluster: c}}]\n"
        "clusters: [{name: c, cluster: {server: 'https://x', certificate-authority-data: "
        "'#!'}}]"}) {
    auto config = parseKubeconfig({{"/k", text}}, "", Files{}.reader());
    EXPECT_FALSE(config) << text;
  }
}

TEST(InCluster, ServiceAccountGivesServerTokenFileAndNamespace) {
  Files files;
  files.files["/var/run/secrets/kubernetes.io/serviceaccount/token"] = "sa-token";
  files.files["/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"] = "SA CA";
  files.files["/var/run/secrets/kubernetes.io/serviceaccount/namespace"] = "training\n";
  auto env = [](const char* name) -> const char* {
    if (std::string(name) == "KUBERNETES_SERVICE_HOST") return "10.96.0.1";
    if (std::string(name) == "KUBERNETES_SERVICE_PORT") return "443";
    return nullptr;
  };
  auto config = inClusterConfig(env, files.reader());
  ASSERT_TRUE(config) << config.error().message;
  EXPECT_EQ(config->server, "https://10.96.0.1:443");
  EXPECT_EQ(config->ca_pem, "SA CA");
  EXPECT_EQ(config->namespace_name, "training");
  EXPECT_EQ(config->token_file, "/var/run/secrets/kubernetes.io/serviceaccount/token");
}

TEST(InCluster, OutsideAPodItIsNotFound) {
  auto config =
      inClusterConfig([](const char*) -> const char* { return nullptr; }, Files{}.reader());
  ASSERT_FALSE(config);
  EXPECT_EQ(config.error().code, Code::kNotFound);
}

TEST(ApiError, SaysWhoWasRefusedAndWhy) {
  Config config;
  config.server = "https://k:6443";
  config.user = "alice";
  config.origin = "kubeconfig '/k', context 'c'";
  Response unauthorized{401, R"({"kind":"Status","message":"Unauthorized","code":401})"};
  Error e = apiError(config, "create Volcano Job 'x'", unauthorized);
  EXPECT_EQ(e.code, Code::kUnauthenticated);
  EXPECT_NE(e.message.find("user 'alice'"), std::string::npos) << e.message;
  Response forbidden{
      403,
      R"({"kind":"Status","message":"jobs.batch.volcano.sh is forbidden: User \"alice\" cannot create resource \"jobs\" in API group \"batch.volcano.sh\" in the namespace \"default\"","code":403})"};
  e = apiError(config, "create Volcano Job 'x'", forbidden);
  EXPECT_EQ(e.code, Code::kPermissionDenied);
  EXPECT_NE(e.message.find("cannot create resource \"jobs\""), std::string::npos) << e.message;
  e = apiError(config, "get", Response{500, std::string("\x01\x02 broken", 9)});
  EXPECT_EQ(e.code, Code::kUnavailable);
  EXPECT_EQ(e.message.find('\x01'), std::string::npos);
}

TEST(ParseObject, RefusesWhatIsNotABoundedObject) {
  EXPECT_TRUE(parseObject(R"({"a": [1, 2]})", "x"));
  EXPECT_FALSE(parseObject("[1]", "x"));
  EXPECT_FALSE(parseObject("{\"a\": ", "x"));
  EXPECT_FALSE(parseObject(std::string(1000, '[') + std::string(1000, ']'), "x"));
  EXPECT_FALSE(parseObject("", "x"));
}

}  // namespace
}  // namespace cohort::backends::kube
