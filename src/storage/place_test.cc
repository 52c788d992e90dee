// Where a URI's data is (storage/place.h): the store of a data root on disk or, handed down by
// a server in its jobs' environment, in S3; and which side of a copy is a path or a store.
#include "storage/place.h"

#include <gtest/gtest.h>
#include <stdlib.h>

namespace cohort::storage {
namespace {

// Sets the COHORT_STORE* variables for one test and removes them after it.
class Site : public ::testing::Test {
 protected:
  void TearDown() override { clear(); }
  static void clear() {
    for (const char* name : {"COHORT_STORE", "COHORT_STORE_ENDPOINT", "COHORT_STORE_REGION",
                             "COHORT_STORE_CA_BUNDLE", "COHORT_STORE_ACCESS_KEY_ID",
                             "COHORT_STORE_SECRET_ACCESS_KEY", "COHORT_STORE_SESSION_TOKEN"}) {
      ::unsetenv(name);
    }
  }
};

TEST_F(Site, WithoutTheServersVariablesTheStoreIsTheDataRootsDirectory) {
  auto site = storeSite("/srv/cohort");
  ASSERT_TRUE(site) << site.error().message;
  EXPECT_FALSE(site->inS3());
  EXPECT_EQ(site->dir, "/srv/cohort/store");
  EXPECT_TRUE(siteVariables(*site).empty());
  EXPECT_EQ(storeSite("relative/root").error().code, Code::kInvalidArgument);

  auto path = openPlace("store://datasets/mnist/", "/srv/cohort");
  ASSERT_TRUE(path) << path.error().message;
  EXPECT_TRUE(path->local());
  EXPECT_EQ(path->path, "/srv/cohort/store/datasets/mnist/");
  EXPECT_EQ(openPlace("data/x", "/srv/cohort", "/work")->path, "/work/data/x");
  EXPECT_EQ(openPlace("store://datasets/../etc", "/srv").error().code, Code::kInvalidArgument);
  EXPECT_EQ(openPlace("s3://Not_A_Bucket/x", "/srv").error().code, Code::kInvalidArgument);
}

TEST_F(Site, AServerHandsItsStoreInS3ToItsJobsAndRanksNeverSeeIt) {
  StoreSite site;
  site.s3_bucket = "team";
  site.s3_prefix = "cohort/";
  site.s3.endpoint = "http://10.0.0.5:7070";
  site.s3.region = "eu-west-1";
  site.s3.access_key = "AKIDEXAMPLE";
  site.s3.secret_key = "wJalrXUtnFEMI";
  EXPECT_EQ(site.describe(), "s3://team/cohort");
  for (const auto& [name, value] : siteVariables(site)) {
    EXPECT_TRUE(isSiteVariable(name)) << name;
    ::setenv(name.c_str(), value.c_str(), 1);
  }
  EXPECT_FALSE(isSiteVariable("AWS_SECRET_ACCESS_KEY"));
  EXPECT_FALSE(isSiteVariable("COHORT_JOB_ID"));

  auto handed = storeSite("/srv/cohort");
  ASSERT_TRUE(handed) << handed.error().message;
  EXPECT_TRUE(handed->inS3());
  EXPECT_EQ(handed->s3_bucket, "team");
  EXPECT_EQ(handed->s3_prefix, "cohort/");
  EXPECT_EQ(handed->s3.endpoint, "http://10.0.0.5:7070");
  EXPECT_EQ(handed->s3.region, "eu-west-1");
  EXPECT_EQ(handed->s3.access_key, "AKIDEXAMPLE");
  EXPECT_EQ(handed->s3.secret_key, "wJalrXUtnFEMI");
  EXPECT_EQ(handed->describe().find("wJalr"), std::string::npos);

  // store:// is then a bucket of that site, named as the job named it.
  auto place = openPlace("store://datasets//mnist/./train/", "/srv/cohort");
  if (!place && place.error().code == Code::kFailedPrecondition) {
    GTEST_SKIP() << "libcurl is not installed: " << place.error().message;
  }
  ASSERT_TRUE(place) << place.error().message;
  ASSERT_FALSE(place->local());
  EXPECT_EQ(place->key, "mnist/train/");
  EXPECT_EQ(place->store->uri("mnist/a.bin"), "store://datasets/mnist/a.bin");
}

TEST_F(Site, AHandedSiteWithoutCredentialsOrWithABadUriIsRefused) {
  ::setenv("COHORT_STORE", "s3://team/cohort", 1);
  auto bare = storeSite("/srv");
  ASSERT_FALSE(bare);
  EXPECT_EQ(bare.error().code, Code::kUnauthenticated);
  EXPECT_NE(bare.error().message.find("COHORT_STORE_SECRET_ACCESS_KEY"), std::string::npos);
  ::setenv("COHORT_STORE", "s3://Bad_Bucket/x", 1);
  auto bad = storeSite("/srv");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, Code::kInvalidArgument);
  EXPECT_NE(bad.error().message.find("COHORT_STORE"), std::string::npos) << bad.error().message;
}

}  // namespace
}  // namespace cohort::storage
