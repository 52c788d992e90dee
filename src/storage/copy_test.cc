#include "storage/copy.h"

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "util/fd.h"

namespace cohort::storage {
namespace {

namespace fs = std::filesystem;

// A fresh directory per test, removed afterwards.
class CopyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/cohort-copy-test-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    root_ = pattern;
    src_ = root_ + "/src";
    dst_ = root_ + "/dst";
    ASSERT_EQ(::mkdir(src_.c_str(), 0755), 0);
  }
  void TearDown() override {
    if (!mount_.empty()) ::umount2(mount_.c_str(), MNT_DETACH);
    std::error_code ec;
    fs::remove_all(root_, ec);
  }

  std::string root_, src_, dst_, mount_;
};

void writeFile(const std::string& path, const std::string& content, mode_t mode = 0644) {
  fs::create_directories(fs::path(path).parent_path());
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode));
  ASSERT_TRUE(fd.valid()) << path;
  ASSERT_TRUE(writeAll(fd.get(), content)) << path;
  ASSERT_EQ(::fchmod(fd.get(), mode), 0);
}

std::string readText(const std::string& path) {
  auto text = readFile(path);
  return text ? *text : "<missing " + path + ">";
}

std::string randomBytes(std::mt19937_64& rng, size_t size) {
  std::string out(size, '\0');
  for (char& c : out) c = static_cast<char>(rng());
  return out;
}

bool exists(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

struct stat statOf(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return st;
}

void setMtime(const std::string& path, int64_t sec, int64_t nsec) {
  timespec times[2] = {{sec, nsec}, {sec, nsec}};
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, 0), 0) << path;
}

// A short form of a file's content that prints well when a comparison fails.
std::string digest(const std::string& content) {
  if (content.size() <= 64) return content;
  return "<" + std::to_string(content.size()) + " bytes, hash " +
         std::to_string(std::hash<std::string>()(content)) + ">";
}

// Regular files (relative path -> digest of the content) and directories ("dir/") below `dir`,
// links not followed (a link shows as "-> target").
std::map<std::string, std::string> listTree(const std::string& dir) {
  std::map<std::string, std::string> out;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec);
       it != fs::recursive_directory_iterator(); it.increment(ec)) {
    std::string rel = fs::relative(it->path(), dir).string();
    if (it->is_symlink()) {
      out[rel] = "-> " + fs::read_symlink(it->path()).string();
    } else if (it->is_directory()) {
      out[rel + "/"] = "";
    } else {
      out[rel] = digest(readText(it->path().string()));
    }
  }
  return out;
}

std::vector<std::string> temporaryFiles(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& [rel, content] : listTree(dir)) {
    if (fs::path(rel).filename().string().rfind(".cohort-tmp-", 0) == 0) out.push_back(rel);
  }
  return out;
}

// A tree with nested and empty directories, small files and files larger than the copy buffer.
int makeTree(const std::string& src) {
  std::mt19937_64 rng(42);
  int files = 0;
  for (int d = 0; d < 5; ++d) {
    for (int f = 0; f < 20; ++f) {
      std::string path = src + "/d" + std::to_string(d) + "/sub/f" + std::to_string(f) + ".bin";
      writeFile(path, randomBytes(rng, rng() % 70000));
      ++files;
    }
  }
  writeFile(src + "/top.txt", "top\n");
  writeFile(src + "/empty.txt", "");
  writeFile(src + "/big/nine-mib.bin", randomBytes(rng, (9 << 20) + 17));
  writeFile(src + "/big/five-mib.bin", randomBytes(rng, (5 << 20) + 3));
  files += 4;
  fs::create_directories(src + "/empty-dir");
  fs::create_directories(src + "/d0/empty/deeper-empty");
  return files;
}

TEST_F(CopyTest, CopiesATreeWithNestedAndEmptyDirectories) {
  int files = makeTree(src_);
  auto stats = copyTree(src_, dst_);
  ASSERT_TRUE(stats) << stats.error().message;
  EXPECT_EQ(listTree(dst_), listTree(src_));
  EXPECT_EQ(stats->files_copied, files);
  EXPECT_EQ(stats->files_skipped, 0);
  // dst, d0..d4, d0..d4/sub, big, empty-dir, d0/empty, d0/empty/deeper-empty
  EXPECT_EQ(stats->dirs_created, 1 + 5 + 5 + 1 + 1 + 2);
  EXPECT_GT(stats->bytes_copied, 14 << 20);
  EXPECT_TRUE(temporaryFiles(dst_).empty());
}

// Nodes without a shared job directory copy their outputs into one target at the same time:
// neither may fail on the other's directories, nor take the other's files in flight for
// leftovers of an interrupted copy.
TEST_F(CopyTest, CopiesIntoOneTargetAtTheSameTimeBothArrive) {
  for (int side = 0; side < 2; ++side) {
    for (int f = 0; f < 40; ++f) {
      writeFile(src_ + "/s" + std::to_string(side) + "/sub/f" + std::to_string(side) + "-" +
                    std::to_string(f),
                std::string(20000 + f, static_cast<char>('a' + side)));
    }
  }
  for (int round = 0; round < 20; ++round) {
    const std::string target = dst_ + "/round" + std::to_string(round);
    std::atomic<int> failed{0};
    std::string why[2];
    std::thread copies[2];
    for (int side = 0; side < 2; ++side) {
      copies[side] = std::thread([&, side] {
        auto copied = copyTree(src_ + "/s" + std::to_string(side), target, {});
        if (!copied) {
          why[side] = copied.error().message;
          ++failed;
        }
      });
    }
    for (std::thread& t : copies) t.join();
    ASSERT_EQ(failed.load(), 0) << why[0] << why[1];
    EXPECT_EQ(listTree(target).size(), 81u) << "sub/ and both sides' 40 files";
    EXPECT_TRUE(temporaryFiles(target).empty());
  }
}

TEST_F(CopyTest, CopiesIntoAnExistingDirectoryWithOneWorker) {
  makeTree(src_);
  fs::create_directories(dst_);
  writeFile(dst_ + "/unrelated.txt", "mine");
  ASSERT_EQ(::chmod(dst_.c_str(), 01777), 0);
  CopyOptions options;
  options.workers = 1;
  auto stats = copyTree(src_ + "/", dst_ + "/", options);
  ASSERT_TRUE(stats) << stats.error().message;
  auto expected = listTree(src_);
  expected["unrelated.txt"] = "mine";
  EXPECT_EQ(listTree(dst_), expected);
  EXPECT_EQ(statOf(dst_).st_mode & 07777, 01777u) << "an existing dst keeps its own mode";
}

TEST_F(CopyTest, PreservesModesAndModificationTimes) {
  writeFile(src_ + "/private.key", "k", 0600);
  writeFile(src_ + "/run.sh", "#!/bin/sh\n", 0755);
  writeFile(src_ + "/ro/data.txt", "d", 0444);
  ASSERT_EQ(::chmod((src_ + "/ro").c_str(), 0550), 0);
  setMtime(src_ + "/private.key", 1600000000, 123456789);
  setMtime(src_ + "/run.sh", 1500000000, 1);
  setMtime(src_ + "/ro/data.txt", 1400000000, 999999999);
  setMtime(src_ + "/ro", 1300000000, 5);
  auto stats = copyTree(src_, dst_);
  ASSERT_TRUE(stats) << stats.error().message;
  for (const char* rel : {"/private.key", "/run.sh", "/ro/data.txt", "/ro"}) {
    struct stat s = statOf(src_ + rel), d = statOf(dst_ + rel);
    EXPECT_EQ(d.st_mode & 07777, s.st_mode & 07777) << rel;
    EXPECT_EQ(d.st_mtim.tv_sec, s.st_mtim.tv_sec) << rel;
    EXPECT_EQ(d.st_mtim.tv_nsec, s.st_mtim.tv_nsec) << rel;
  }
  EXPECT_EQ(statOf(dst_ + "/ro").st_mode & 07777, 0550u);
}

// An 8 GiB output that is mostly holes (a checkpoint preallocated, a sparse index): the copy
// keeps the holes, so that it takes what the source takes and no time to write zeros.
TEST_F(CopyTest, ASparseFileStaysSparseAndReadsTheSame) {
  const int64_t size = int64_t{8} << 30;
  {
    UniqueFd fd(::open((src_ + "/sparse.bin").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
    ASSERT_TRUE(fd.valid());
    ASSERT_EQ(::ftruncate(fd.get(), size), 0);
    // Data at the start, in the middle and just before a hole at the end.
    for (int64_t at : {int64_t{0}, int64_t{3} << 30, size - (int64_t{1} << 20) - 4096}) {
      const std::string data = "data at " + std::to_string(at);
      ASSERT_EQ(::pwrite(fd.get(), data.data(), data.size(), at),
                static_cast<ssize_t>(data.size()));
    }
  }
  const struct stat source = statOf(src_ + "/sparse.bin");
  if (source.st_blocks * 512 >= size) GTEST_SKIP() << "this file system keeps no holes";
  auto stats = copyTree(src_, dst_);
  ASSERT_TRUE(stats) << stats.error().message;
  const struct stat copy = statOf(dst_ + "/sparse.bin");
  EXPECT_EQ(copy.st_size, size);
  EXPECT_LE(copy.st_blocks * 512, std::max<int64_t>(source.st_blocks * 512, 1 << 20))
      << "the holes were written as zeros";
  UniqueFd a(::open((src_ + "/sparse.bin").c_str(), O_RDONLY | O_CLOEXEC));
  UniqueFd b(::open((dst_ + "/sparse.bin").c_str(), O_RDONLY | O_CLOEXEC));
  for (int64_t at : {int64_t{0}, int64_t{3} << 30, size - (int64_t{1} << 20) - 4096,
                     int64_t{1} << 30, size - 64}) {
    char x[64] = {}, y[64] = {1};
    ASSERT_EQ(::pread(a.get(), x, sizeof x, at), 64);
    ASSERT_EQ(::pread(b.get(), y, sizeof y, at), 64);
    EXPECT_EQ(std::string(x, 64), std::string(y, 64)) << "at " << at;
  }
  // Checked again on a second run: the same file, by content, is skipped.
  auto again = copyTree(src_, dst_);
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_EQ(again->files_skipped, 1);
}

TEST_F(CopyTest, SecondRunSkipsIdenticalFiles) {
  int files = makeTree(src_);
  ASSERT_TRUE(copyTree(src_, dst_));
  auto again = copyTree(src_, dst_);
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_EQ(again->files_copied, 0);
  EXPECT_EQ(again->files_skipped, files);
  EXPECT_EQ(again->bytes_copied, 0);
  EXPECT_EQ(again->dirs_created, 0);

  writeFile(src_ + "/top.txt", "top, changed\n");
  auto third = copyTree(src_, dst_);
  ASSERT_TRUE(third) << third.error().message;
  EXPECT_EQ(third->files_copied, 1);
  EXPECT_EQ(third->files_skipped, files - 1);
  EXPECT_EQ(readText(dst_ + "/top.txt"), "top, changed\n");
}

TEST_F(CopyTest, QuickCheckCopiesASameSizeFileWhoseMtimeChanged) {
  writeFile(src_ + "/a", "old!");
  ASSERT_TRUE(copyTree(src_, dst_));
  writeFile(src_ + "/a", "new!");
  setMtime(src_ + "/a", 1700000000, 0);
  auto again = copyTree(src_, dst_);
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_EQ(again->files_copied, 1);
  EXPECT_EQ(readText(dst_ + "/a"), "new!");
}

// A disk that stores each file's first byte with a bit flipped, as a bad disk or a buggy file
// system would.
class CorruptingWriter final : public FileWriter {
 public:
  Result<void> write(int fd, std::string_view data, int64_t offset) override {
    if (offset != 0 || data.empty()) return directWriter().write(fd, data, offset);
    std::string changed(data);
    changed[0] = static_cast<char>(changed[0] ^ 1);
    return directWriter().write(fd, changed, offset);
  }
};

// A disk that fills up after `capacity` bytes (all files together): the write that crosses it
// stores what fits and fails with ENOSPC, and so does every one after it.
class FillingWriter final : public FileWriter {
 public:
  explicit FillingWriter(int64_t capacity) : capacity_(capacity) {}
  Result<void> write(int fd, std::string_view data, int64_t offset) override {
    const int64_t before = written_.fetch_add(static_cast<int64_t>(data.size()));
    const int64_t room = std::max<int64_t>(0, capacity_ - before);
    if (room >= static_cast<int64_t>(data.size())) return directWriter().write(fd, data, offset);
    COHORT_TRY(directWriter().write(fd, data.substr(0, static_cast<size_t>(room)), offset));
    return failErrno("write", ENOSPC);
  }

 private:
  const int64_t capacity_;
  std::atomic<int64_t> written_{0};
};

TEST_F(CopyTest, VerificationCatchesWhatTheDiskGotWrong) {
  writeFile(src_ + "/weights.bin", "0123456789");
  CorruptingWriter disk;
  CopyOptions options;
  options.writer = &disk;
  auto stats = copyTree(src_, dst_, options);
  ASSERT_FALSE(stats);
  EXPECT_EQ(stats.error().code, Code::kIo);
  EXPECT_EQ(stats.error().message.rfind("copy '" + src_ + "/weights.bin': verify: ", 0), 0u)
      << stats.error().message;
  EXPECT_FALSE(exists(dst_ + "/weights.bin"));
  EXPECT_TRUE(temporaryFiles(dst_).empty());
}

TEST_F(CopyTest, QuickCheckFixesAModeThatChanged) {
  writeFile(src_ + "/a", "a", 0644);
  ASSERT_TRUE(copyTree(src_, dst_));
  ASSERT_EQ(::chmod((src_ + "/a").c_str(), 0600), 0);
  auto again = copyTree(src_, dst_);
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_EQ(again->files_skipped, 1);
  EXPECT_EQ(statOf(dst_ + "/a").st_mode & 07777, 0600u);
}

TEST_F(CopyTest, ChecksumFindsSameSizeSameMtimeDifferentContent) {
  writeFile(src_ + "/model.bin", "AAAAAAAA");
  writeFile(src_ + "/same.bin", "same");
  setMtime(src_ + "/model.bin", 1600000000, 0);
  ASSERT_TRUE(copyTree(src_, dst_));
  writeFile(dst_ + "/model.bin", "BBBBBBBB");
  setMtime(dst_ + "/model.bin", 1600000000, 0);

  auto quick = copyTree(src_, dst_);
  ASSERT_TRUE(quick) << quick.error().message;
  EXPECT_EQ(quick->files_copied, 0) << "the quick check cannot see it";
  EXPECT_EQ(readText(dst_ + "/model.bin"), "BBBBBBBB");

  CopyOptions options;
  options.checksum = true;
  auto checked = copyTree(src_, dst_, options);
  ASSERT_TRUE(checked) << checked.error().message;
  EXPECT_EQ(checked->files_copied, 1);
  EXPECT_EQ(checked->files_skipped, 1);
  EXPECT_EQ(readText(dst_ + "/model.bin"), "AAAAAAAA");
}

TEST_F(CopyTest, ChecksumSkipsSameContentAndFixesItsTimes) {
  writeFile(src_ + "/a", "content");
  setMtime(src_ + "/a", 1600000000, 7);
  fs::create_directories(dst_);
  writeFile(dst_ + "/a", "content");
  CopyOptions options;
  options.checksum = true;
  auto stats = copyTree(src_, dst_, options);
  ASSERT_TRUE(stats) << stats.error().message;
  EXPECT_EQ(stats->files_skipped, 1);
  EXPECT_EQ(statOf(dst_ + "/a").st_mtim.tv_sec, 1600000000);
  EXPECT_EQ(statOf(dst_ + "/a").st_mtim.tv_nsec, 7);
}

TEST_F(CopyTest, ReRunAfterAnInterruptionFinishesAndRemovesTemporaryFiles) {
  int files = makeTree(src_);
  ASSERT_TRUE(copyTree(src_, dst_));
  // What a killed run leaves: some files missing, a temporary file with half of one, one
  // directory not created yet.
  ASSERT_EQ(::unlink((dst_ + "/d1/sub/f3.bin").c_str()), 0);
  ASSERT_EQ(::unlink((dst_ + "/big/nine-mib.bin").c_str()), 0);
  writeFile(dst_ + "/big/.cohort-tmp-nine-mib.bin-0123456789abcdef", "half");
  writeFile(dst_ + "/.cohort-tmp-top.txt-00000000deadbeef", "t");
  fs::remove_all(dst_ + "/d4");

  auto stats = copyTree(src_, dst_);
  ASSERT_TRUE(stats) << stats.error().message;
  EXPECT_EQ(stats->files_copied, 2 + 20);
  EXPECT_EQ(stats->files_skipped, files - 22);
  EXPECT_EQ(listTree(dst_), listTree(src_));
  EXPECT_TRUE(temporaryFiles(dst_).empty());
}

TEST_F(CopyTest, TemporaryFilesInTheSourceAreNotCopied) {
  writeFile(src_ + "/a", "a");
  writeFile(src_ + "/.cohort-tmp-b-0123", "junk");
  auto stats = copyTree(src_, dst_);
  ASSERT_TRUE(stats) << stats.error().message;
  EXPECT_EQ(stats->files_copied, 1);
  EXPECT_FALSE(exists(dst_ + "/.cohort-tmp-b-0123"));
}

TEST_F(CopyTest, InjectedFullDiskFailsNamingTheFileAndLeavesNoPartialFile) {
  makeTree(src_);
  FillingWriter disk(3 << 20);
  CopyOptions options;
  options.workers = 4;
  options.writer = &disk;
  auto stats = copyTree(src_, dst_, options);
  ASSERT_FALSE(stats);
  EXPECT_EQ(stats.error().code, Code::kIo);
  const std::string& message = stats.error().message;
  EXPECT_NE(message.find(": write: No space left on device"), std::string::npos) << message;
  // "copy '<source file>': ..."
  ASSERT_EQ(message.rfind("copy '" + src_ + "/", 0), 0u) << message;
  std::string failed = message.substr(6, message.find('\'', 6) - 6);
  EXPECT_TRUE(exists(failed)) << "names a source file: " << message;
  EXPECT_FALSE(exists(dst_ + failed.substr(src_.size())))
      << "the failed file has no final name: " << message;
  EXPECT_TRUE(temporaryFiles(dst_).empty());
  // Whatever has a final name is complete.
  for (const auto& [rel, content] : listTree(dst_)) {
    if (rel.back() != '/') {
      EXPECT_EQ(content, digest(readText(src_ + "/" + rel))) << rel;
    }
  }
  // And the next run finishes the job.
  auto again = copyTree(src_, dst_);
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_EQ(listTree(dst_), listTree(src_));
}

TEST_F(CopyTest, RealFullDiskFailsNamingTheFileAndLeavesNoPartialFile) {
  if (::geteuid() != 0) GTEST_SKIP() << "mounting a small tmpfs needs root";
  mount_ = root_ + "/small";
  ASSERT_EQ(::mkdir(mount_.c_str(), 0755), 0);
  if (::mount("tmpfs", mount_.c_str(), "tmpfs", 0, "size=1m") != 0) {
    std::string why = std::strerror(errno);
    mount_.clear();
    GTEST_SKIP() << "cannot mount a 1 MiB tmpfs here: " << why;
  }
  std::mt19937_64 rng(7);
  for (int i = 0; i < 12; ++i) {
    writeFile(src_ + "/part" + std::to_string(i) + ".bin", randomBytes(rng, 256 << 10));
  }
  std::string dst = mount_ + "/dst";
  CopyOptions options;
  options.workers = 3;
  auto stats = copyTree(src_, dst, options);
  ASSERT_FALSE(stats) << "3 MiB fit into a 1 MiB tmpfs?";
  const std::string& message = stats.error().message;
  EXPECT_NE(message.find("No space left on device"), std::string::npos) << message;
  ASSERT_EQ(message.rfind("copy '" + src_ + "/part", 0), 0u) << message;
  std::string failed = message.substr(6, message.find('\'', 6) - 6);
  EXPECT_FALSE(exists(dst + failed.substr(src_.size()))) << message;
  EXPECT_TRUE(temporaryFiles(dst).empty());
  for (const auto& [rel, content] : listTree(dst)) {
    EXPECT_EQ(content, digest(readText(src_ + "/" + rel))) << rel;
  }
}

TEST_F(CopyTest, CancelStopsWithoutLeavingTemporaryFiles) {
  makeTree(src_);
  std::atomic<bool> cancel{true};
  CopyOptions options;
  options.cancel = &cancel;
  auto stats = copyTree(src_, dst_, options);
  ASSERT_FALSE(stats);
  EXPECT_EQ(stats.error().code, Code::kFailedPrecondition);
  EXPECT_NE(stats.error().message.find("interrupted"), std::string::npos);
  EXPECT_TRUE(temporaryFiles(dst_).empty());
}

TEST_F(CopyTest, FileSourceCopiesToOrIntoTheDestination) {
  writeFile(root_ + "/one.txt", "one", 0640);
  auto to = copyTree(root_ + "/one.txt", root_ + "/new/name.txt");
  ASSERT_TRUE(to) << to.error().message;
  EXPECT_EQ(readText(root_ + "/new/name.txt"), "one");
  EXPECT_EQ(statOf(root_ + "/new/name.txt").st_mode & 07777, 0640u);

  fs::create_directories(dst_);
  auto into = copyTree(root_ + "/one.txt", dst_);
  ASSERT_TRUE(into) << into.error().message;
  EXPECT_EQ(readText(dst_ + "/one.txt"), "one");

  auto slash = copyTree(root_ + "/one.txt", root_ + "/made/");
  ASSERT_TRUE(slash) << slash.error().message;
  EXPECT_EQ(readText(root_ + "/made/one.txt"), "one");

  auto again = copyTree(root_ + "/one.txt", dst_);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->files_skipped, 1);
}

TEST_F(CopyTest, SymlinksToFilesAndDirectoriesAreFollowed) {
  writeFile(root_ + "/outside/file.txt", "outside");
  writeFile(root_ + "/outside/dir/inner.txt", "inner");
  ASSERT_EQ(::symlink("../outside/file.txt", (src_ + "/link.txt").c_str()), 0);
  ASSERT_EQ(::symlink((root_ + "/outside/dir").c_str(), (src_ + "/linkdir").c_str()), 0);
  auto stats = copyTree(src_, dst_);
  ASSERT_TRUE(stats) << stats.error().message;
  struct stat st {};
  ASSERT_EQ(::lstat((dst_ + "/link.txt").c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(readText(dst_ + "/link.txt"), "outside");
  ASSERT_EQ(::lstat((dst_ + "/linkdir").c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(readText(dst_ + "/linkdir/inner.txt"), "inner");
}

TEST_F(CopyTest, SymlinkLoopIsRefusedBeforeAnythingIsWritten) {
  writeFile(src_ + "/a/b/file.txt", "x");
  ASSERT_EQ(::symlink("../..", (src_ + "/a/b/back").c_str()), 0);
  auto stats = copyTree(src_, dst_);
  ASSERT_FALSE(stats);
  EXPECT_EQ(stats.error().code, Code::kInvalidArgument);
  EXPECT_NE(stats.error().message.find("copy '" + src_ + "/a/b/back': symbolic link loop"),
            std::string::npos)
      << stats.error().message;
  EXPECT_FALSE(exists(dst_));
}

TEST_F(CopyTest, SelfReferencingAndDanglingLinksAreErrors) {
  ASSERT_EQ(::symlink("self", (src_ + "/self").c_str()), 0);
  auto loop = copyTree(src_, dst_);
  ASSERT_FALSE(loop);
  EXPECT_NE(loop.error().message.find("'" + src_ + "/self': symbolic link loop"),
            std::string::npos)
      << loop.error().message;
  ASSERT_EQ(::unlink((src_ + "/self").c_str()), 0);
  ASSERT_EQ(::symlink("nowhere", (src_ + "/dangling").c_str()), 0);
  auto dangling = copyTree(src_, dst_);
  ASSERT_FALSE(dangling);
  EXPECT_NE(dangling.error().message.find("'" + src_ + "/dangling': dangling symbolic link"),
            std::string::npos)
      << dangling.error().message;
}

TEST_F(CopyTest, NeverWritesThroughASymlinkInTheDestination) {
  writeFile(src_ + "/sub/file.txt", "x");
  fs::create_directories(dst_);
  fs::create_directories(root_ + "/elsewhere");
  ASSERT_EQ(::symlink((root_ + "/elsewhere").c_str(), (dst_ + "/sub").c_str()), 0);
  auto stats = copyTree(src_, dst_);
  ASSERT_FALSE(stats);
  EXPECT_NE(stats.error().message.find("is a symbolic link"), std::string::npos)
      << stats.error().message;
  EXPECT_TRUE(listTree(root_ + "/elsewhere").empty());
}

TEST_F(CopyTest, ASymlinkWhereAFileGoesIsReplacedNotFollowed) {
  writeFile(src_ + "/file.txt", "new");
  writeFile(root_ + "/victim.txt", "keep");
  fs::create_directories(dst_);
  ASSERT_EQ(::symlink((root_ + "/victim.txt").c_str(), (dst_ + "/file.txt").c_str()), 0);
  auto stats = copyTree(src_, dst_);
  ASSERT_TRUE(stats) << stats.error().message;
  EXPECT_EQ(readText(root_ + "/victim.txt"), "keep");
  EXPECT_EQ(listTree(dst_), listTree(src_));
}

TEST_F(CopyTest, RefusesADestinationInsideTheSource) {
  writeFile(src_ + "/a", "a");
  auto inside = copyTree(src_, src_ + "/backup");
  ASSERT_FALSE(inside);
  EXPECT_NE(inside.error().message.find("inside the source"), std::string::npos);
  EXPECT_FALSE(copyTree(src_, src_));
  EXPECT_FALSE(exists(src_ + "/backup"));
}

TEST_F(CopyTest, MissingSourceIsNotFound) {
  auto stats = copyTree(root_ + "/missing", dst_);
  ASSERT_FALSE(stats);
  EXPECT_EQ(stats.error().code, Code::kNotFound);
  EXPECT_EQ(stats.error().message,
            "copy: source '" + root_ + "/missing': No such file or directory");
}

TEST_F(CopyTest, TypeMismatchesAreErrors) {
  writeFile(src_ + "/x", "file in src");
  fs::create_directories(dst_ + "/x");
  auto file_onto_dir = copyTree(src_, dst_);
  ASSERT_FALSE(file_onto_dir);
  EXPECT_NE(file_onto_dir.error().message.find("is a directory"), std::string::npos)
      << file_onto_dir.error().message;

  writeFile(root_ + "/plain", "p");
  auto dir_onto_file = copyTree(src_, root_ + "/plain");
  ASSERT_FALSE(dir_onto_file);
  EXPECT_NE(dir_onto_file.error().message.find("is not a directory"), std::string::npos);
}

TEST_F(CopyTest, ProgressEndsAtTheTotalsOnTheCallingThread) {
  int files = makeTree(src_);
  std::vector<CopyProgress> seen;
  bool other_thread = false;
  const auto caller = std::this_thread::get_id();
  CopyOptions options;
  options.progress = [&](const CopyProgress& p) {
    other_thread |= std::this_thread::get_id() != caller;
    seen.push_back(p);
  };
  auto stats = copyTree(src_, dst_, options);
  ASSERT_TRUE(stats) << stats.error().message;
  ASSERT_FALSE(seen.empty());
  EXPECT_FALSE(other_thread);
  EXPECT_EQ(seen.back().files_done, files);
  EXPECT_EQ(seen.back().files_total, files);
  EXPECT_EQ(seen.back().bytes_done, seen.back().bytes_total);
  EXPECT_EQ(seen.back().bytes_copied, stats->bytes_copied);
  for (size_t i = 1; i < seen.size(); ++i) EXPECT_GE(seen[i].bytes_done, seen[i - 1].bytes_done);
}

TEST_F(CopyTest, RefusesBadWorkerCounts) {
  CopyOptions options;
  options.workers = 0;
  auto stats = copyTree(src_, dst_, options);
  ASSERT_FALSE(stats);
  EXPECT_EQ(stats.error().code, Code::kInvalidArgument);
}

}  // namespace
}  // namespace cohort::storage

namespace cohort::storage {
namespace {

// A job's output/ is copied out by cohort, which may read what the job cannot: a link there
// must never take the copy to another account's files or the server's.
TEST_F(CopyTest, UntrustedSourceRefusesLinksAndSpecialFilesAndNamesThem) {
  writeFile(root_ + "/secret", "admin token");
  writeFile(src_ + "/model.pt", "weights");
  ASSERT_EQ(::symlink((root_ + "/secret").c_str(), (src_ + "/loot").c_str()), 0);
  CopyOptions untrusted;
  untrusted.refuse_links = true;
  auto copied = copyTree(src_, dst_, untrusted);
  ASSERT_FALSE(copied);
  EXPECT_NE(copied.error().message.find("loot': a symbolic link"), std::string::npos)
      << copied.error().message;
  EXPECT_FALSE(exists(dst_ + "/loot"));

  ASSERT_EQ(::unlink((src_ + "/loot").c_str()), 0);
  ASSERT_EQ(::mkdir((src_ + "/sub").c_str(), 0755), 0);
  ASSERT_EQ(::symlink(root_.c_str(), (src_ + "/sub/up").c_str()), 0);
  copied = copyTree(src_, dst_, untrusted);
  ASSERT_FALSE(copied);
  EXPECT_NE(copied.error().message.find("sub/up': a symbolic link"), std::string::npos);

  ASSERT_EQ(::unlink((src_ + "/sub/up").c_str()), 0);
  ASSERT_EQ(::link((root_ + "/secret").c_str(), (src_ + "/sub/hard").c_str()), 0);
  copied = copyTree(src_, dst_, untrusted);
  ASSERT_FALSE(copied);
  EXPECT_NE(copied.error().message.find("2 hard links"), std::string::npos)
      << copied.error().message;

  ASSERT_EQ(::unlink((src_ + "/sub/hard").c_str()), 0);
  ASSERT_EQ(::mkfifo((src_ + "/sub/fifo").c_str(), 0644), 0);  // would block a reader forever
  copied = copyTree(src_, dst_, untrusted);
  ASSERT_FALSE(copied);
  EXPECT_NE(copied.error().message.find("FIFO"), std::string::npos);

  ASSERT_EQ(::unlink((src_ + "/sub/fifo").c_str()), 0);
  copied = copyTree(src_, dst_, untrusted);
  ASSERT_TRUE(copied) << copied.error().message;
  EXPECT_EQ(readText(dst_ + "/model.pt"), "weights");
}

TEST_F(CopyTest, UntrustedSourceThatIsItselfALinkIsRefused) {
  writeFile(root_ + "/secret", "admin token");
  ASSERT_EQ(::symlink((root_ + "/secret").c_str(), (root_ + "/out").c_str()), 0);
  CopyOptions untrusted;
  untrusted.refuse_links = true;
  auto copied = copyTree(root_ + "/out", dst_, untrusted);
  ASSERT_FALSE(copied);
  EXPECT_NE(copied.error().message.find("a symbolic link"), std::string::npos);
  EXPECT_FALSE(exists(dst_));
}

}  // namespace
}  // namespace cohort::storage
