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

// An account's bucket: "OWNER@BUCKET", kept in the store's directory of that name, which no
// bucket of a store without accounts can have.
TEST(ParseLocation, AnOwnerNamesAnAccountsBucket) {
  auto theirs = parseLocation("store://alice@models/run1/");
  ASSERT_TRUE(theirs) << theirs.error().message;
  EXPECT_EQ(theirs->owner, "alice");
  EXPECT_EQ(theirs->bucket, "models");
  EXPECT_EQ(theirs->key, "run1");
  EXPECT_TRUE(theirs->trailing_slash);
  EXPECT_EQ(parseLocation("store://models/x")->owner, "");
  EXPECT_EQ(*resolve("store://alice@models/run1/a", "/data"), "/data/store/alice@models/run1/a");
  expectRefused("store://@models/x", "invalid account name ''");
  expectRefused("store://Alice@models/x", "invalid account name 'Alice'");
  expectRefused("store://bob@alice@models/x", "invalid bucket name");
  expectRefused("store://alice@/x", "no bucket");
  expectRefused("store://alice@ab/x", "invalid bucket name 'ab'");
  expectRefused("store://alice@models/../bob@models/x", "'..'");
  EXPECT_EQ(storeDirName("alice", "models"), "alice@models");
  EXPECT_EQ(storeDirName("", "models"), "models");
  EXPECT_TRUE(validStoreDirName("alice@models"));
  EXPECT_TRUE(validStoreDirName("models"));
  for (const char* bad : {"@models", "alice@", "a/b@models", "alice@mo/dels", "..", "alice@..",
                          "x@y@models", "Alice@models"}) {
    EXPECT_FALSE(validStoreDirName(bad)) << bad;
  }
  EXPECT_EQ(storeUri("alice@models", "a/b"), "store://alice@models/a/b");
  EXPECT_EQ(storeUri("models", ""), "store://models");
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
