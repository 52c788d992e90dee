// The S3 client's pure parts: URIs, part sizes, which etags can be checked, request signatures
// (AWS's published examples), and where the configuration comes from (environment, ~/.aws).
// Requests are tested against a real S3 server in tests/integration/s3_test.cc.
#include "storage/s3.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>

namespace cohort::storage {
namespace {

namespace fs = std::filesystem;

TEST(S3Uri, NamesABucketAndAKey) {
  auto u = parseS3Uri("s3://datasets/mnist/train/");
  ASSERT_TRUE(u);
  EXPECT_EQ(u->bucket, "datasets");
  EXPECT_EQ(u->key, "mnist/train/");
  EXPECT_EQ(parseS3Uri("s3://datasets")->key, "");
  for (const char* bad : {"s3://", "s3://UPPER/x", "s3://ab/x", "s3://b_x/y", "s3://bkt/a/../b",
                          "s3://bkt/a//b", "s3://bkt/./b", "store://bkt/x"}) {
    EXPECT_FALSE(parseS3Uri(bad)) << bad;
  }
}

TEST(S3Parts, AreEightMebibytesUntilTenThousandWouldNotDo) {
  EXPECT_EQ(partSize(1), kPartSize);
  EXPECT_EQ(partSize(int64_t{10000} * kPartSize), kPartSize);
  const int64_t huge = int64_t{200} << 30;  // 200 GiB
  const int64_t part = partSize(huge);
  EXPECT_GT(part, kPartSize);
  EXPECT_EQ(part % (1 << 20), 0);
  EXPECT_LE((huge + part - 1) / part, 10000);
}

TEST(S3Etags, ThoseCohortCanRecomputeAreChecked) {
  auto made = makeS3Store(S3Config{"http://127.0.0.1:1", "us-east-1", "k", "s", ""}, "bkt");
  ASSERT_TRUE(made) << made.error().message;
  auto& store = *made;
  const std::string md5 = "0123456789abcdef0123456789abcdef";
  EXPECT_TRUE(store->checkable({"k", 100, md5}));
  EXPECT_FALSE(store->checkable({"k", 100, md5 + "-1"}));
  EXPECT_TRUE(store->checkable({"k", (20 << 20), md5 + "-3"}));
  EXPECT_FALSE(store->checkable({"k", (20 << 20), md5 + "-4"})) << "other part sizes";
  EXPECT_FALSE(store->checkable({"k", 100, "not-an-md5"}));
  EXPECT_EQ(store->uri("a/b"), "s3://bkt/a/b");
}

// The examples of AWS's documentation of Signature Version 4 for S3 ("Examples: signature
// calculations"), with its example credentials.
TEST(S3Signature, MatchesAwsPublishedExamples) {
  S3Config aws;
  aws.access_key = "AKIAIOSFODNN7EXAMPLE";
  aws.secret_key = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
  const std::string empty = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
  const std::string date = "20130524T000000Z";
  EXPECT_EQ(signV4(aws, "GET", "https://examplebucket.s3.amazonaws.com/test.txt",
                   {{"Host", "examplebucket.s3.amazonaws.com"},
                    {"Range", "bytes=0-9"},
                    {"x-amz-content-sha256", empty},
                    {"x-amz-date", date}},
                   empty, date),
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/"
            "aws4_request, SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, "
            "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
  // A listing: the query's parameters in order, the path "/".
  EXPECT_EQ(signV4(aws, "GET", "https://examplebucket.s3.amazonaws.com/?max-keys=2&prefix=J",
                   {{"host", "examplebucket.s3.amazonaws.com"},
                    {"x-amz-date", date},
                    {"x-amz-content-sha256", empty}},
                   empty, date),
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/"
            "aws4_request, SignedHeaders=host;x-amz-content-sha256;x-amz-date, "
            "Signature=34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7");
}

class S3Environment : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/cohort-s3env-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    home_ = tmpl;
    for (const char* v : kVars) {
      if (const char* old = std::getenv(v)) saved_.emplace_back(v, old);
      ::unsetenv(v);
    }
    ::setenv("HOME", home_.c_str(), 1);
  }
  void TearDown() override {
    for (const char* v : kVars) ::unsetenv(v);
    for (auto& [name, value] : saved_) ::setenv(name.c_str(), value.c_str(), 1);
    fs::remove_all(home_);
  }
  void write(const std::string& rel, const std::string& text) {
    fs::create_directories(fs::path(home_ + "/" + rel).parent_path());
    std::ofstream(home_ + "/" + rel) << text;
  }
  static constexpr const char* kVars[] = {"HOME",
                                          "AWS_ACCESS_KEY_ID",
                                          "AWS_SECRET_ACCESS_KEY",
                                          "AWS_SESSION_TOKEN",
                                          "AWS_PROFILE",
                                          "AWS_REGION",
                                          "AWS_DEFAULT_REGION",
                                          "AWS_ENDPOINT_URL",
                                          "AWS_ENDPOINT_URL_S3",
                                          "AWS_SHARED_CREDENTIALS_FILE",
                                          "AWS_CONFIG_FILE"};
  std::string home_;
  std::vector<std::pair<std::string, std::string>> saved_;
};

TEST_F(S3Environment, VariablesComeFirst) {
  ::setenv("AWS_ACCESS_KEY_ID", "AKID", 1);
  ::setenv("AWS_SECRET_ACCESS_KEY", "SECRET", 1);
  ::setenv("AWS_REGION", "eu-west-3", 1);
  ::setenv("AWS_ENDPOINT_URL", "http://10.0.0.5:7070/", 1);
  ::setenv("AWS_CA_BUNDLE", "/etc/team-ca.pem", 1);
  write(".aws/credentials", "[default]\naws_access_key_id = other\naws_secret_access_key = x\n");
  auto c = s3ConfigFromEnvironment();
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->access_key, "AKID");
  EXPECT_EQ(c->secret_key, "SECRET");
  EXPECT_EQ(c->region, "eu-west-3");
  EXPECT_EQ(c->endpoint, "http://10.0.0.5:7070");
  EXPECT_EQ(c->ca_bundle, "/etc/team-ca.pem");
}

TEST_F(S3Environment, AProfileGivesKeysRegionAndEndpoint) {
  write(".aws/credentials",
        "# team keys\n[default]\naws_access_key_id=d\naws_secret_access_key=ds\n"
        "[team]\naws_access_key_id = tk\naws_secret_access_key = ts\naws_session_token = tt\n");
  write(".aws/config", "[profile team]\nregion = ap-south-1\nendpoint_url = https://s3.lab\n");
  ::setenv("AWS_PROFILE", "team", 1);
  auto c = s3ConfigFromEnvironment();
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->access_key, "tk");
  EXPECT_EQ(c->secret_key, "ts");
  EXPECT_EQ(c->session_token, "tt");
  EXPECT_EQ(c->region, "ap-south-1");
  EXPECT_EQ(c->endpoint, "https://s3.lab");
  ::unsetenv("AWS_PROFILE");
  auto d = s3ConfigFromEnvironment();
  ASSERT_TRUE(d);
  EXPECT_EQ(d->access_key, "d");
  EXPECT_EQ(d->region, "us-east-1");
  EXPECT_EQ(d->endpoint, "");
}

TEST_F(S3Environment, MissingOrWrongSettingsAreNamed) {
  auto none = s3ConfigFromEnvironment();
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error().code, Code::kUnauthenticated);
  EXPECT_NE(none.error().message.find("AWS_ACCESS_KEY_ID"), std::string::npos);
  ::setenv("AWS_PROFILE", "nope", 1);
  auto profile = s3ConfigFromEnvironment();
  ASSERT_FALSE(profile);
  EXPECT_NE(profile.error().message.find("'nope'"), std::string::npos) << profile.error().message;
  ::unsetenv("AWS_PROFILE");
  ::setenv("AWS_ACCESS_KEY_ID", "a", 1);
  ::setenv("AWS_SECRET_ACCESS_KEY", "b", 1);
  ::setenv("AWS_ENDPOINT_URL", "ftp://x", 1);
  auto endpoint = s3ConfigFromEnvironment();
  ASSERT_FALSE(endpoint);
  EXPECT_NE(endpoint.error().message.find("AWS_ENDPOINT_URL"), std::string::npos);
  ::unsetenv("AWS_ENDPOINT_URL");
  ::setenv("AWS_REGION", "us-east-1/../x", 1);
  EXPECT_FALSE(s3ConfigFromEnvironment());
}

}  // namespace
}  // namespace cohort::storage
