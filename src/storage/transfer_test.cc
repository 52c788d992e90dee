// The transfer engine against an in-memory ObjectStore, and faults injected by a wrapper around
// it (a store that stops taking bytes, one that hands back other bytes, one with hostile keys),
// also between two stores. The contract of the real stores: storage/object_store_test.cc.
// The real S3 client is tested against a real S3 server in tests/integration/s3_test.cc.
#include "storage/transfer.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "storage/crc64.h"

namespace cohort::storage {
namespace {

namespace fs = std::filesystem;

std::string readAll(int fd, int64_t size) {
  std::string data(static_cast<size_t>(size), '\0');
  if (size > 0 && ::pread(fd, data.data(), data.size(), 0) != size) return "";
  return data;
}

// Objects in memory; the etag is the XXH3-64 of the bytes. With `keeps_crc`, the store also
// gives each object's CRC-64/NVME, as S3 services do.
class MemoryStore : public ObjectStore {
 public:
  bool keeps_crc = false;
  std::string uri(const std::string& key) const override { return "mem://b/" + key; }
  Result<std::vector<ObjectInfo>> list(const std::string& prefix) override {
    std::lock_guard lock(mu_);
    std::vector<ObjectInfo> out;
    for (auto& [key, data] : objects_) {
      if (key.rfind(prefix, 0) == 0)
        out.push_back({key, static_cast<int64_t>(data.size()), tag(data)});
    }
    return out;
  }
  Result<ObjectInfo> head(const std::string& key) override {
    std::lock_guard lock(mu_);
    auto found = objects_.find(key);
    if (found == objects_.end()) return fail(Code::kNotFound, uri(key) + ": no such object");
    return ObjectInfo{key, static_cast<int64_t>(found->second.size()), tag(found->second),
                      crcOf(found->second)};
  }
  Result<Fetched> getRange(const std::string& key, int fd, int64_t offset,
                           int64_t length) override {
    std::string data;
    std::optional<uint64_t> whole;
    {
      std::lock_guard lock(mu_);
      const std::string& object = objects_.at(key);
      data = object.substr(static_cast<size_t>(offset), static_cast<size_t>(length));
      if (offset == 0 && data.size() == object.size()) whole = crcOf(object);
    }
    if (::pwrite(fd, data.data(), data.size(), offset) != static_cast<ssize_t>(data.size())) {
      return fail(Code::kIo, "pwrite");
    }
    return Fetched{crc64nvme(0, data.data(), data.size()), whole};
  }
  Result<std::string> etagOf(int fd, int64_t size) const override {
    ++files_hashed_;
    return tag(readAll(fd, size));
  }
  bool checkable(const ObjectInfo&) const override { return true; }
  Result<std::string> put(const std::string& key, int fd, int64_t size, const std::atomic<bool>*,
                          const std::function<void(int64_t)>& = {}) override {
    std::string data = readAll(fd, size);
    std::lock_guard lock(mu_);
    ++puts_;
    objects_[key] = data;
    return tag(data);
  }

  static std::string tag(const std::string& data) {
    return std::to_string(XXH3_64bits(data.data(), data.size()));
  }
  std::optional<uint64_t> crcOf(const std::string& data) const {
    if (!keeps_crc) return std::nullopt;
    return crc64nvme(0, data.data(), data.size());
  }
  std::map<std::string, std::string> objects_;
  int puts_ = 0;
  mutable std::atomic<int> files_hashed_{0};  // files read again for their etag
  std::mutex mu_;
};

// Faults, around a store: puts that fail (as on a cut connection), reads that flip a byte on
// the way (the CRC of the range is of what arrived, as a real store's is).
class FaultyStore : public MemoryStore {
 public:
  bool fail_puts = false;
  bool corrupt_reads = false;
  Result<std::string> put(const std::string& key, int fd, int64_t size,
                          const std::atomic<bool>* cancel,
                          const std::function<void(int64_t)>& sent = {}) override {
    if (fail_puts) return fail(Code::kUnavailable, uri(key) + ": connection reset by peer");
    return MemoryStore::put(key, fd, size, cancel, sent);
  }
  Result<Fetched> getRange(const std::string& key, int fd, int64_t offset,
                           int64_t length) override {
    COHORT_ASSIGN(Fetched fetched, MemoryStore::getRange(key, fd, offset, length));
    if (corrupt_reads && length > 0) {
      char c = 0;
      if (::pread(fd, &c, 1, offset) != 1) return fail(Code::kIo, "pread");
      c ^= 1;
      if (::pwrite(fd, &c, 1, offset) != 1) return fail(Code::kIo, "pwrite");
      std::string arrived(static_cast<size_t>(length), '\0');
      if (::pread(fd, arrived.data(), arrived.size(), offset) != length) {
        return fail(Code::kIo, "pread");
      }
      fetched.crc = crc64nvme(0, arrived.data(), arrived.size());
    }
    return fetched;
  }
};

class Transfer : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/cohort-transfer-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  void write(const std::string& rel, const std::string& content) {
    fs::create_directories(fs::path(dir_ + "/" + rel).parent_path());
    std::ofstream(dir_ + "/" + rel, std::ios::binary) << content;
  }
  std::map<std::string, std::string> files(const std::string& rel) {
    std::map<std::string, std::string> out;
    for (auto& e : fs::recursive_directory_iterator(dir_ + "/" + rel)) {
      if (!e.is_regular_file()) continue;
      std::ifstream in(e.path(), std::ios::binary);
      out[fs::relative(e.path(), dir_ + "/" + rel).string()] =
          std::string(std::istreambuf_iterator<char>(in), {});
    }
    return out;
  }
  std::string dir_;
};

TEST_F(Transfer, ATreeRoundTripsAndASecondUploadSkipsEverything) {
  std::mt19937 rng(3);
  std::string big((20 << 20) + 5, '\0');
  for (char& c : big) c = static_cast<char>(rng());
  write("src/a.txt", "alpha");
  write("src/sub/b.txt", "beta");
  write("src/big.bin", big);
  write("src/.cohort-tmp-x-123", "left over");
  MemoryStore store;
  auto up = upload(dir_ + "/src", store, "run/");
  ASSERT_TRUE(up) << up.error().message;
  EXPECT_EQ(up->files_copied, 3);
  EXPECT_EQ(store.objects_.count("run/a.txt"), 1u);
  EXPECT_EQ(store.objects_.count("run/sub/b.txt"), 1u);
  EXPECT_EQ(store.objects_.count("run/.cohort-tmp-x-123"), 0u) << "a temporary file was sent";

  auto again = upload(dir_ + "/src", store, "run");
  ASSERT_TRUE(again);
  EXPECT_EQ(again->files_copied, 0);
  EXPECT_EQ(again->files_skipped, 3);
  EXPECT_EQ(store.puts_, 3);

  auto down = download(store, "run", dir_ + "/back");
  ASSERT_TRUE(down) << down.error().message;
  auto want = files("src");
  want.erase(".cohort-tmp-x-123");
  EXPECT_EQ(files("back"), want);
  auto twice = download(store, "run", dir_ + "/back");
  ASSERT_TRUE(twice);
  EXPECT_EQ(twice->files_skipped, 3);
}

// A store over a slow network: each range or part of a large object takes a while.
class SlowStore : public MemoryStore {
 public:
  static constexpr int64_t kPart = int64_t{8} << 20;
  Result<Fetched> getRange(const std::string& key, int fd, int64_t offset,
                           int64_t length) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    return MemoryStore::getRange(key, fd, offset, length);
  }
  Result<std::string> put(const std::string& key, int fd, int64_t size,
                          const std::atomic<bool>* cancel,
                          const std::function<void(int64_t)>& sent = {}) override {
    for (int64_t at = 0; at < size; at += kPart) {
      std::this_thread::sleep_for(std::chrono::milliseconds(150));
      if (sent) sent(std::min(kPart, size - at));
    }
    return MemoryStore::put(key, fd, size, cancel);
  }
};

// One large file: its progress moves while it is on its way, not only once it is whole.
TEST_F(Transfer, ALargeFilesProgressMovesWhileItMoves) {
  const int64_t size = (40 << 20) + 3;
  write("src/big.bin", std::string(static_cast<size_t>(size), 'x'));
  SlowStore store;
  for (const bool up : {true, false}) {
    SCOPED_TRACE(up ? "upload" : "download");
    std::vector<int64_t> seen;
    TransferOptions options;
    options.progress = [&](const CopyProgress& p) {
      EXPECT_EQ(p.bytes_total, size);
      seen.push_back(p.bytes_done);
    };
    auto moved = up ? upload(dir_ + "/src/big.bin", store, "big.bin", options)
                    : download(store, "big.bin", dir_ + "/back.bin", options);
    ASSERT_TRUE(moved) << moved.error().message;
    ASSERT_FALSE(seen.empty());
    EXPECT_EQ(seen.back(), size) << "every byte is counted once";
    EXPECT_TRUE(std::any_of(seen.begin(), seen.end(), [&](int64_t b) { return b > 0 && b < size; }))
        << "no report while the file was on its way";
    EXPECT_TRUE(std::is_sorted(seen.begin(), seen.end()));
  }
}

TEST_F(Transfer, AFailedPutNamesTheFileAndStoresNothing) {
  write("src/a.txt", "alpha");
  FaultyStore store;
  store.fail_puts = true;
  auto up = upload(dir_ + "/src", store, "run");
  ASSERT_FALSE(up);
  EXPECT_NE(up.error().message.find("a.txt"), std::string::npos) << up.error().message;
  EXPECT_NE(up.error().message.find("connection reset"), std::string::npos);
  EXPECT_TRUE(store.objects_.empty());
}

// A small object and one of several parts, checked against the store's CRC-64/NVME where it
// keeps one (the CRCs of the ranges as they arrived, combined: the file is not read again),
// else against the etag.
TEST_F(Transfer, BytesThatDoNotMatchTheObjectNeverReachTheirFinalName) {
  for (const bool keeps_crc : {false, true}) {
    for (const size_t size : {size_t{100000}, (size_t{20} << 20) + 7}) {
      SCOPED_TRACE(std::to_string(size) + (keeps_crc ? " with CRCs" : " with etags only"));
      FaultyStore store;
      store.keeps_crc = keeps_crc;
      write("src/model.pt", std::string(size, 'm'));
      ASSERT_TRUE(upload(dir_ + "/src/model.pt", store, "m/model.pt"));
      store.files_hashed_ = 0;
      ASSERT_TRUE(download(store, "m/model.pt", dir_ + "/good.pt")) << "untouched, it passes";
      EXPECT_EQ(store.files_hashed_, keeps_crc ? 0 : 1);
      store.corrupt_reads = true;
      auto down = download(store, "m/model.pt", dir_ + "/model.pt");
      ASSERT_FALSE(down);
      EXPECT_EQ(down.error().code, Code::kIo);
      EXPECT_NE(down.error().message.find("do not match"), std::string::npos)
          << down.error().message;
      EXPECT_NE(down.error().message.find(keeps_crc ? "CRC-64/NVME" : "etag"), std::string::npos)
          << down.error().message;
      EXPECT_FALSE(fs::exists(dir_ + "/model.pt"));
    }
  }
  for (auto& e : fs::directory_iterator(dir_)) {
    EXPECT_EQ(e.path().filename().string().rfind(".cohort-tmp-", 0), std::string::npos);
  }
}

TEST_F(Transfer, KeysThatWouldLeaveTheDestinationAreRefusedBeforeAnythingIsWritten) {
  for (const std::string& key :
       std::vector<std::string>{"p/../../escape", "p/a//b", "p/./x", "p/.cohort-tmp-y",
                                std::string("p/nul\0/../../x", 14)}) {
    MemoryStore store;
    store.objects_["p/fine"] = "ok";
    store.objects_[key] = "hostile";
    auto down = download(store, "p", dir_ + "/out");
    ASSERT_FALSE(down) << key;
    EXPECT_EQ(down.error().code, Code::kInvalidArgument) << key;
    if (key.find('\0') == std::string::npos) {
      EXPECT_NE(down.error().message.find(key), std::string::npos) << down.error().message;
    }
    EXPECT_FALSE(fs::exists(dir_ + "/out/fine")) << key;
    EXPECT_FALSE(fs::exists(dir_ + "/escape"));
  }
}

TEST_F(Transfer, ACopyBetweenStoresRefusesKeysThatWouldLeaveItsPrefixBeforeCopyingAny) {
  for (const std::string& key :
       std::vector<std::string>{"p/../../escape", "p/a//b", "p/./x", "p/.cohort-tmp-y",
                                std::string("p/nul\0/../../x", 14)}) {
    MemoryStore from, to;
    from.objects_["p/fine"] = "ok";
    from.objects_[key] = "hostile";
    auto copied = copyObjects(from, "p", to, "q");
    ASSERT_FALSE(copied) << key;
    EXPECT_EQ(copied.error().code, Code::kInvalidArgument) << key;
    EXPECT_TRUE(to.objects_.empty()) << key;
  }
}

TEST_F(Transfer, ACopyBetweenStoresIsCheckedAndARerunSkipsWhatIsThere) {
  FaultyStore from;
  from.objects_["p/a"] = "alpha";
  from.objects_["p/sub/b"] = std::string((9 << 20) + 7, 'b');  // fetched in two ranges
  MemoryStore to;
  from.corrupt_reads = true;
  auto bad = copyObjects(from, "p", to, "q/");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("do not match"), std::string::npos) << bad.error().message;
  EXPECT_TRUE(to.objects_.empty()) << "nothing stored from bytes that do not match";
  from.corrupt_reads = false;
  auto copied = copyObjects(from, "p", to, "q/");
  ASSERT_TRUE(copied) << copied.error().message;
  EXPECT_EQ(copied->files_copied, 2);
  EXPECT_EQ(to.objects_.at("q/sub/b"), from.objects_.at("p/sub/b"));
  const int puts = to.puts_;
  auto again = copyObjects(from, "p", to, "q/");
  ASSERT_TRUE(again);
  EXPECT_EQ(again->files_skipped, 2);
  EXPECT_EQ(to.puts_, puts);
  // One object: to its key, or into a prefix.
  ASSERT_TRUE(copyObjects(from, "p/a", to, "one/named"));
  ASSERT_TRUE(copyObjects(from, "p/a", to, "into/"));
  EXPECT_EQ(to.objects_.at("one/named"), "alpha");
  EXPECT_EQ(to.objects_.at("into/a"), "alpha");
}

TEST_F(Transfer, NothingIsWrittenThroughALinkBelowTheDestination) {
  fs::create_directories(dir_ + "/out");
  fs::create_directories(dir_ + "/elsewhere");
  fs::create_directory_symlink(dir_ + "/elsewhere", dir_ + "/out/sub");
  MemoryStore store;
  store.objects_["p/sub/x"] = "through the link";
  auto down = download(store, "p", dir_ + "/out");
  ASSERT_FALSE(down);
  EXPECT_NE(down.error().message.find("symbolic link"), std::string::npos) << down.error().message;
  EXPECT_TRUE(fs::is_empty(dir_ + "/elsewhere"));
}

TEST_F(Transfer, NothingThereIsNamed) {
  MemoryStore store;
  auto down = download(store, "nothing/here", dir_ + "/out");
  ASSERT_FALSE(down);
  EXPECT_EQ(down.error().code, Code::kNotFound);
  EXPECT_NE(down.error().message.find("mem://b/nothing/here"), std::string::npos);
  auto up = upload(dir_ + "/missing", store, "x");
  ASSERT_FALSE(up);
  EXPECT_EQ(up.error().code, Code::kNotFound);
}

TEST_F(Transfer, AFileGoesToTheKeyOrIntoAPrefix) {
  write("f.txt", "f");
  MemoryStore store;
  ASSERT_TRUE(upload(dir_ + "/f.txt", store, "k/named"));
  ASSERT_TRUE(upload(dir_ + "/f.txt", store, "k/"));
  EXPECT_EQ(store.objects_.count("k/named"), 1u);
  EXPECT_EQ(store.objects_.count("k/f.txt"), 1u);
  fs::create_directories(dir_ + "/into");
  ASSERT_TRUE(download(store, "k/named", dir_ + "/into"));
  EXPECT_TRUE(fs::exists(dir_ + "/into/named"));
}

}  // namespace
}  // namespace cohort::storage
