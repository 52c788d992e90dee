// The ObjectStore contract (storage/object_store.h), one test body for each store: a directory
// (DirStore), S3 itself (versitygw, a real S3 server that checks every signature, started by the
// suite; without it these instances skip and say so), and a bucket of the store kept in S3
// (what `cohort server --store s3://...` serves: storage/place.h). Then the transfer engine
// (storage/transfer.h) over each, which must not care which store it is, and an interrupted
// copy between stores, played by a wrapper around the destination.
#include "storage/object_store.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include "storage/dir_store.h"
#include "storage/local_files.h"
#include "storage/place.h"
#include "storage/s3.h"
#include "storage/transfer.h"
#include "tests/versitygw.h"

namespace cohort::storage {
namespace {

namespace fs = std::filesystem;
using testing::kS3Key;
using testing::kS3Secret;
using testing::Versitygw;

std::string randomBytes(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::string data(n, '\0');
  for (char& c : data) c = static_cast<char>(rng());
  return data;
}

// `data` in an unlinked file, to put from.
UniqueFd fileWith(const std::string& data) {
  auto fd = anonymousFile("/tmp");
  EXPECT_TRUE(fd) << fd.error().message;
  EXPECT_TRUE(writeAll(fd->get(), data));
  return std::move(*fd);
}

std::string readAll(int fd, int64_t size) {
  std::string data(static_cast<size_t>(size), '\0');
  if (size > 0 && ::pread(fd, data.data(), data.size(), 0) != size) return "<short read>";
  return data;
}

void writeFile(const std::string& path, const std::string& content) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << content;
}

std::map<std::string, std::string> filesBelow(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    std::ifstream in(e.path(), std::ios::binary);
    out[fs::relative(e.path(), dir).string()] = std::string(std::istreambuf_iterator<char>(in), {});
  }
  return out;
}

const std::string kBig = randomBytes((int64_t{2} << 23) + 12345, 7);  // three 8 MiB parts

// Odd names: '+', spaces, unicode; an empty object; one of three parts.
const std::map<std::string, std::string>& oddObjects() {
  static const std::map<std::string, std::string> objects = {
      {"small.txt", "hello\n"},
      {"odd keys/a+b c.txt", "plus and space\n"},
      {"odd keys/\xc3\xbc"
       "ber caf\xc3\xa9.txt",
       "unicode\n"},
      {"empty", ""},
      {"big/weights.bin", kBig},
  };
  return objects;
}

class Stores : public ::testing::TestWithParam<std::string> {
 protected:
  static void SetUpTestSuite() {
    const std::string gw =
        Versitygw::find({COHORT_BUILD_DIR, std::string(COHORT_SOURCE_DIR) + "/build"});
    if (gw.empty()) return;
    served_ = new std::string(fs::temp_directory_path() /
                              ("cohort-stores-" + std::to_string(::getpid())));
    fs::create_directories(*served_ + "/served");
    gw_ = new Versitygw(gw, *served_ + "/served", *served_ + "/versitygw.log");
  }
  static void TearDownTestSuite() {
    delete gw_;
    gw_ = nullptr;
    if (served_) fs::remove_all(*served_);
    delete served_;
    served_ = nullptr;
  }

  void SetUp() override {
    if (GetParam() != "directory" && !gw_) {
      GTEST_SKIP() << "versitygw not found (scripts/test installs it into build/go-bin with go "
                      "install; or set COHORT_VERSITYGW): the contract did not run against S3";
    }
    if (gw_) {
      ASSERT_TRUE(gw_->up()) << "versitygw did not start";
    }
    work_ = fs::temp_directory_path() /
            ("cohort-store-test-" + std::to_string(::getpid()) + "-" + std::to_string(++count_));
    fs::create_directories(work_);
    store_ = make("one");
  }
  void TearDown() override {
    if (!work_.empty()) fs::remove_all(work_);
  }

  static S3Config config() {
    S3Config c;
    c.endpoint = gw_->endpoint();
    c.access_key = kS3Key;
    c.secret_key = kS3Secret;
    return c;
  }

  // A fresh store of this test's kind; `name` tells two of one test apart.
  std::unique_ptr<ObjectStore> make(const std::string& name, std::string kind = "") {
    if (kind.empty()) kind = GetParam();
    const std::string bucket = "t" + std::to_string(count_) + "-" + name;
    if (kind == "directory") return makeDirStore(work_ + "/dir/" + bucket, "store://" + bucket);
    fs::create_directories(*served_ + "/served/" + bucket);  // versitygw: a directory is a bucket
    if (kind == "s3") {
      auto s3 = makeS3Store(config(), bucket);
      EXPECT_TRUE(s3) << s3.error().message;
      return std::move(*s3);
    }
    StoreSite site;
    site.s3 = config();
    site.s3_bucket = bucket;
    site.s3_prefix = "site/";
    auto in_s3 = openBucket(site, "data");
    EXPECT_TRUE(in_s3) << in_s3.error().message;
    return std::move(*in_s3);
  }

  std::string put(ObjectStore& store, const std::string& key, const std::string& data) {
    UniqueFd fd = fileWith(data);
    auto etag = store.put(key, fd.get(), static_cast<int64_t>(data.size()), nullptr);
    EXPECT_TRUE(etag) << key << ": " << etag.error().message;
    return etag ? *etag : "";
  }

  std::string get(ObjectStore& store, const std::string& key, int64_t offset, int64_t length) {
    auto fd = anonymousFile("/tmp");
    EXPECT_TRUE(fd);
    auto got = store.getRange(key, fd->get(), offset, length);
    EXPECT_TRUE(got) << key << ": " << got.error().message;
    std::string all = readAll(fd->get(), offset + length);
    return all.substr(static_cast<size_t>(offset));
  }

  static Versitygw* gw_;
  static std::string* served_;
  static int count_;
  std::string work_;
  std::unique_ptr<ObjectStore> store_;
};

Versitygw* Stores::gw_ = nullptr;
std::string* Stores::served_ = nullptr;
int Stores::count_ = 0;

INSTANTIATE_TEST_SUITE_P(Each, Stores, ::testing::Values("directory", "s3", "store-in-s3"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name) c = c == '-' ? '_' : c;
                           return name;
                         });

TEST_P(Stores, ObjectsGoInWholeAndComeBackByteForByte) {
  for (const auto& [key, data] : oddObjects()) {
    UniqueFd fd = fileWith(data);
    auto expected = contentTag(fd.get(), static_cast<int64_t>(data.size()));
    ASSERT_TRUE(expected);
    EXPECT_EQ(put(*store_, key, data), *expected) << key;
    auto head = store_->head(key);
    ASSERT_TRUE(head) << key << ": " << head.error().message;
    EXPECT_EQ(head->key, key);
    EXPECT_EQ(head->size, static_cast<int64_t>(data.size()));
    EXPECT_EQ(head->etag, *expected) << key;
    EXPECT_TRUE(store_->checkable(*head)) << key;
    EXPECT_EQ(get(*store_, key, 0, head->size), data) << key;
    auto opened = store_->open(key, "/tmp");
    ASSERT_TRUE(opened) << opened.error().message;
    EXPECT_EQ(readAll(opened->fd.get(), opened->info.size), data) << key;
  }
  EXPECT_EQ(store_->head("big/weights.bin")->etag.substr(33), "3");  // in three parts
  // A range from the middle of the large one, across a part's end.
  const int64_t at = (int64_t{8} << 20) - 100;
  EXPECT_EQ(get(*store_, "big/weights.bin", at, 1000), kBig.substr(static_cast<size_t>(at), 1000));

  auto all = store_->list("");
  ASSERT_TRUE(all) << all.error().message;
  std::vector<std::string> keys;
  for (const ObjectInfo& o : *all) keys.push_back(o.key);
  std::vector<std::string> expected;
  for (const auto& [key, data] : oddObjects()) expected.push_back(key);
  EXPECT_EQ(keys, expected);  // in key order
  auto odd = store_->list("odd keys/");
  ASSERT_TRUE(odd);
  EXPECT_EQ(odd->size(), 2u);
  auto plain = store_->list("odd");  // a plain string prefix, not only whole names
  ASSERT_TRUE(plain);
  EXPECT_EQ(plain->size(), 2u);
}

TEST_P(Stores, AMissingKeyIsNotFoundAndAMissingPrefixEmpty) {
  put(*store_, "there", "x");
  EXPECT_EQ(store_->head("not/there").error().code, Code::kNotFound);
  auto fd = anonymousFile("/tmp");
  EXPECT_EQ(store_->getRange("not/there", fd->get(), 0, 1).error().code, Code::kNotFound);
  EXPECT_EQ(store_->open("not/there", "/tmp").error().code, Code::kNotFound);
  auto none = store_->list("not/");
  ASSERT_TRUE(none) << none.error().message;
  EXPECT_TRUE(none->empty());
}

TEST_P(Stores, AnInterruptedPutLeavesTheObjectBefore) {
  const std::string before = put(*store_, "model.bin", "version 1");
  std::atomic<bool> cancel{false};
  UniqueFd fd = fileWith(kBig);
  auto put = store_->put("model.bin", fd.get(), static_cast<int64_t>(kBig.size()), &cancel,
                         [&](int64_t) { cancel = true; });  // after the first part
  ASSERT_FALSE(put);
  EXPECT_EQ(put.error().code, Code::kFailedPrecondition) << put.error().message;
  EXPECT_EQ(store_->head("model.bin")->etag, before);
  EXPECT_EQ(get(*store_, "model.bin", 0, 9), "version 1");
  auto new_key = store_->put("fresh.bin", fd.get(), static_cast<int64_t>(kBig.size()), &cancel);
  EXPECT_FALSE(new_key);
  EXPECT_EQ(store_->head("fresh.bin").error().code, Code::kNotFound);
  if (GetParam() == "directory") {
    for (auto& e : fs::recursive_directory_iterator(work_)) {
      EXPECT_NE(e.path().filename().string().rfind(".cohort-tmp-", 0), 0u) << e.path();
    }
  }
}

TEST_P(Stores, CopyInCopiesInsideTheServiceOrSaysItCannot) {
  put(*store_, "small.txt", "hello\n");
  put(*store_, "big.bin", kBig);
  auto other = make("two");
  for (const char* key : {"small.txt", "big.bin"}) {
    auto source = store_->head(key);
    ASSERT_TRUE(source);
    auto copied = other->copyIn(*store_, *source, std::string("copy/") + key, nullptr);
    ASSERT_TRUE(copied) << copied.error().message;
    if (GetParam() == "directory") {
      EXPECT_FALSE(*copied) << "a directory store streams";
      continue;
    }
    ASSERT_TRUE(*copied) << "one endpoint, one key: the service copies";
    EXPECT_EQ(**copied, source->etag) << key << ": the etag an upload of the bytes has";
    EXPECT_EQ(other->head(std::string("copy/") + key)->etag, source->etag);
    EXPECT_EQ(get(*other, std::string("copy/") + key, 0, source->size),
              std::string(key) == "big.bin" ? kBig : "hello\n");
  }
  // Another kind of store: nothing the service can do.
  auto dir = make("three", "directory");
  auto source = store_->head("small.txt");
  if (GetParam() != "directory") {
    auto copied = dir->copyIn(*store_, *source, "x", nullptr);
    ASSERT_TRUE(copied);
    EXPECT_FALSE(*copied);
  }
}

TEST_P(Stores, TransfersDoNotCareWhichStoreItIs) {
  const std::string tree = work_ + "/tree";
  for (const auto& [key, data] : oddObjects()) writeFile(tree + "/" + key, data);
  auto up = upload(tree, *store_, "run1");
  ASSERT_TRUE(up) << up.error().message;
  EXPECT_EQ(up->files_copied, 5);
  auto again = upload(tree, *store_, "run1");
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_EQ(again->files_skipped, 5);

  auto down = download(*store_, "run1", work_ + "/back");
  ASSERT_TRUE(down) << down.error().message;
  EXPECT_EQ(filesBelow(work_ + "/back"), filesBelow(tree));

  // Between two stores of this kind, then into a directory store, and again: all skipped.
  auto other = make("two");
  for (int run = 0; run < 2; ++run) {
    auto copied = copyObjects(*store_, "run1", *other, "copied/");
    ASSERT_TRUE(copied) << copied.error().message;
    EXPECT_EQ(run == 0 ? copied->files_copied : copied->files_skipped, 5) << run;
  }
  auto dir = make("three", "directory");
  auto across = copyObjects(*other, "copied/", *dir, "");
  ASSERT_TRUE(across) << across.error().message;
  EXPECT_EQ(across->files_copied, 5);
  auto back = download(*dir, "", work_ + "/across");
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(filesBelow(work_ + "/across"), filesBelow(tree));
}

// Cancels the copy as the first part of a large object is copied or stored: an interruption.
class Interrupting final : public ObjectStore {
 public:
  Interrupting(ObjectStore& inner, std::atomic<bool>& cancel) : inner_(inner), cancel_(cancel) {}
  std::string uri(const std::string& key) const override { return inner_.uri(key); }
  Result<std::vector<ObjectInfo>> list(const std::string& p) override { return inner_.list(p); }
  Result<ObjectInfo> head(const std::string& key) override { return inner_.head(key); }
  Result<Fetched> getRange(const std::string& key, int fd, int64_t at, int64_t n) override {
    return inner_.getRange(key, fd, at, n);
  }
  Result<std::string> etagOf(int fd, int64_t size) const override {
    return inner_.etagOf(fd, size);
  }
  bool checkable(const ObjectInfo& o) const override { return inner_.checkable(o); }
  Result<std::string> put(const std::string& key, int fd, int64_t size, const std::atomic<bool>*,
                          const PartDone&) override {
    return inner_.put(key, fd, size, &cancel_, [this](int64_t) { cancel_ = true; });
  }
  Result<std::optional<std::string>> copyIn(ObjectStore& from, const ObjectInfo& object,
                                            const std::string& key, const std::atomic<bool>*,
                                            const PartDone&) override {
    return inner_.copyIn(from, object, key, &cancel_, [this](int64_t) { cancel_ = true; });
  }

 private:
  ObjectStore& inner_;
  std::atomic<bool>& cancel_;
};

TEST_P(Stores, AnInterruptedCopyLeavesNoHalfObjectAndARerunFinishes) {
  put(*store_, "ckpt/model.bin", kBig);
  put(*store_, "ckpt/config.json", "{}");
  int n = 0;
  for (const std::string& kind : {GetParam(), std::string("directory")}) {
    auto other = make("to-" + std::to_string(++n), kind);
    std::atomic<bool> cancel{false};
    Interrupting interrupting(*other, cancel);
    TransferOptions one;
    one.workers = 1;
    auto cut = copyObjects(*store_, "ckpt", interrupting, "ckpt", one);
    ASSERT_FALSE(cut) << kind;
    EXPECT_EQ(cut.error().message, "interrupted") << kind;
    EXPECT_EQ(other->head("ckpt/model.bin").error().code, Code::kNotFound) << kind;
    auto rerun = copyObjects(*store_, "ckpt", *other, "ckpt");
    ASSERT_TRUE(rerun) << kind << ": " << rerun.error().message;
    EXPECT_EQ(get(*other, "ckpt/model.bin", 0, static_cast<int64_t>(kBig.size())), kBig);
  }
}

// The buckets of the server's store, on disk or in S3, hold only keys that stay inside them.
TEST_P(Stores, ABucketOfTheStoreRefusesKeysThatWouldLeaveIt) {
  if (GetParam() == "s3") GTEST_SKIP() << "S3 itself takes any key: it has no directories";
  const std::vector<std::string> keys = {
      "../escape",     "a/../../escape",           "a//b", "./a", "a/.", "",
      ".cohort-tmp-x", std::string("nul\0byte", 8)};
  for (const std::string& key : keys) {
    UniqueFd fd = fileWith("x");
    auto put = store_->put(key, fd.get(), 1, nullptr);
    ASSERT_FALSE(put) << "'" << key << "'";
    EXPECT_EQ(put.error().code, Code::kInvalidArgument) << put.error().message;
    EXPECT_FALSE(store_->head(key)) << key;
  }
  EXPECT_FALSE(fs::exists(work_ + "/dir/escape"));
  EXPECT_FALSE(fs::exists(work_ + "/escape"));
}

TEST(DirStore, ALinkBelowTheRootIsNoObjectAndNothingIsWrittenThroughIt) {
  const std::string root =
      fs::temp_directory_path() / ("cohort-dirstore-" + std::to_string(::getpid()));
  fs::remove_all(root);
  writeFile(root + "/outside/secret.txt", "secret");
  writeFile(root + "/bucket/real.txt", "real");
  fs::create_symlink(root + "/outside/secret.txt", root + "/bucket/leak.txt");
  fs::create_directory_symlink(root + "/outside", root + "/bucket/dir");
  auto store = makeDirStore(root + "/bucket", "store://bucket");
  auto all = store->list("");
  ASSERT_TRUE(all) << all.error().message;
  ASSERT_EQ(all->size(), 1u);
  EXPECT_EQ(all->front().key, "real.txt");
  EXPECT_EQ(store->head("leak.txt").error().code, Code::kNotFound);
  EXPECT_EQ(store->head("dir/secret.txt").error().code, Code::kNotFound);
  UniqueFd fd = fileWith("overwritten");
  auto through = store->put("dir/secret.txt", fd.get(), 11, nullptr);
  ASSERT_FALSE(through);
  EXPECT_EQ(through.error().code, Code::kFailedPrecondition) << through.error().message;
  std::ifstream secret(root + "/outside/secret.txt");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(secret), {}), "secret");
  fs::remove_all(root);
}

}  // namespace
}  // namespace cohort::storage
