#include "storage/uri.h"

#include <gtest/gtest.h>

namespace cohort::storage {
namespace {

TEST(Resolve, StoreUriBecomesAPathUnderTheDataRoot) {
  EXPECT_EQ(*resolve("store://datasets/mnist/train.bin", "/data"),
            "/data/store/datasets/mnist/train.bin");
  EXPECT_EQ(*resolve("store://datasets", "/data"), "/data/store/datasets/");
  EXPECT_EQ(*resolve("store://datasets/", "/data/"), "/data/store/datasets/");
  EXPECT_EQ(*resolve("store://datasets/.", "/data/"), "/data/store/datasets/");
  EXPECT_EQ(*resolve("store://my.bucket-01/a", "/"), "/store/my.bucket-01/a");
}

TEST(Resolve, StorePathsAreNormalisedAndKeepATrailingSlash) {
  EXPECT_EQ(*resolve("store://abc//x/./y/", "/r"), "/r/store/abc/x/y/");
  EXPECT_EQ(*resolve("store://abc/x/y", "/r"), "/r/store/abc/x/y");
}

TEST(Resolve, LocalPathsAndFileUris) {
  EXPECT_EQ(*resolve("/abs/path", "/r"), "/abs/path");
  EXPECT_EQ(*resolve("rel/path", "/r"), "rel/path");
  EXPECT_EQ(*resolve("rel/path", "/r", "/home/me"), "/home/me/rel/path");
  EXPECT_EQ(*resolve("../up", "/r", "/home/me/"), "/home/me/../up");
  EXPECT_EQ(*resolve("file:///abs/path", "/r"), "/abs/path");
  EXPECT_EQ(*resolve("file://localhost/abs", "/r"), "/abs");
  EXPECT_EQ(*resolve("file://rel", "/r", "/cwd"), "/cwd/rel");
  EXPECT_EQ(*resolve("dir/", "/r"), "dir/");
}

void expectRefused(const std::string& uri, const std::string& why) {
  auto r = resolve(uri, "/data");
  ASSERT_FALSE(r) << uri << " resolved to " << *r;
  EXPECT_EQ(r.error().code, Code::kInvalidArgument) << uri;
  EXPECT_NE(r.error().message.find("'" + uri + "'"), std::string::npos)
      << "the message names the URI: " << r.error().message;
  EXPECT_NE(r.error().message.find(why), std::string::npos) << r.error().message;
}

TEST(Resolve, RefusesPathsThatLeaveTheBucket) {
  expectRefused("store://datasets/../other/x", "'..'");
  expectRefused("store://datasets/a/../../x", "'..'");
  expectRefused("store://datasets/..", "'..'");
  expectRefused("store://datasets/a/..", "'..'");
}

TEST(Resolve, RefusesEmptyAndInvalidBuckets) {
  expectRefused("store://", "no bucket");
  expectRefused("store:///etc/passwd", "no bucket");
  expectRefused("store://ab/x", "invalid bucket name 'ab'");
  expectRefused("store://Upper/x", "invalid bucket name");
  expectRefused("store://under_score/x", "invalid bucket name");
  expectRefused("store://..ab/x", "invalid bucket name");
  expectRefused("store://a..b/x", "invalid bucket name");
  expectRefused("store://-abc/x", "invalid bucket name");
  expectRefused("store://abc-/x", "invalid bucket name");
  expectRefused("store://" + std::string(64, 'a') + "/x", "invalid bucket name");
}

TEST(Resolve, RefusesUnknownSchemesAndEmptyUris) {
  expectRefused("s3://bucket/x", "unsupported scheme 's3'");
  expectRefused("http://host/x", "unsupported scheme");
  expectRefused("file://", "no path");
  EXPECT_FALSE(resolve("", "/data"));
}

TEST(Resolve, StoreNeedsAnAbsoluteDataRoot) {
  EXPECT_FALSE(resolve("store://abc/x", ""));
  EXPECT_FALSE(resolve("store://abc/x", "relative"));
}

TEST(BucketName, FollowsS3Rules) {
  EXPECT_TRUE(validBucketName("abc"));
  EXPECT_TRUE(validBucketName(std::string(63, 'a')));
  EXPECT_TRUE(validBucketName("a.b-c9"));
  EXPECT_FALSE(validBucketName("ab"));
  EXPECT_FALSE(validBucketName(std::string(64, 'a')));
  EXPECT_FALSE(validBucketName("a/b"));
  EXPECT_FALSE(validBucketName("abc."));
}

TEST(ParseLocation, SaysWhichKind) {
  auto store = parseLocation("store://runs/exp1/ckpt");
  ASSERT_TRUE(store);
  EXPECT_EQ(store->kind, Location::Kind::kStore);
  EXPECT_EQ(store->bucket, "runs");
  EXPECT_EQ(store->key, "exp1/ckpt");
  auto local = parseLocation("out/");
  ASSERT_TRUE(local);
  EXPECT_EQ(local->kind, Location::Kind::kLocal);
  EXPECT_EQ(local->path, "out/");
  EXPECT_TRUE(local->trailing_slash);
}

}  // namespace
}  // namespace cohort::storage
