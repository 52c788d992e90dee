// `cohort cp` end to end: a local -> store -> local round trip through the real binary, the
// re-run that skips, and the errors a user sees (missing source, unsafe URI, full disk).
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include "harness.h"

namespace cohort::testing {
namespace {

namespace fs = std::filesystem;

// A temporary directory removed at the end of the test.
struct ScratchDir {
  std::string path = tempDir();
  std::string mount;
  ~ScratchDir() {
    if (!mount.empty()) ::umount2(mount.c_str(), MNT_DETACH);
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

void writeFile(const std::string& path, const std::string& content) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << content;
}

// Every file (path -> content, compared byte for byte) and directory ("dir/") below `dir`.
std::map<std::string, std::string> tree(const std::string& dir) {
  std::map<std::string, std::string> out;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec);
       it != fs::recursive_directory_iterator(); it.increment(ec)) {
    std::string rel = fs::relative(it->path(), dir).string();
    out[it->is_directory() ? rel + "/" : rel] = it->is_directory() ? "" : readText(it->path());
  }
  return out;
}

void makeDataset(const std::string& dir) {
  std::mt19937 rng(1);
  for (int i = 0; i < 40; ++i) {
    std::string data(rng() % 50000, '\0');
    for (char& c : data) c = static_cast<char>(rng());
    writeFile(dir + "/shard" + std::to_string(i % 4) + "/part" + std::to_string(i) + ".bin", data);
  }
  writeFile(dir + "/labels.txt", "0 1 2 3\n");
  fs::create_directories(dir + "/empty/nested");
  ::chmod((dir + "/labels.txt").c_str(), 0600);
}

TEST(Cp, LocalToStoreToLocalRoundTripIsByteForByte) {
  ScratchDir scratch;
  const std::string src = scratch.path + "/dataset", root = scratch.path + "/root";
  makeDataset(src);

  auto up = runCohort({"cp", "--data-root", root, src, "store://datasets/mnist"});
  ASSERT_EQ(up.exit_code, 0) << up.err;
  EXPECT_NE(up.err.find("cohort: copied 41 files ("), std::string::npos) << up.err;
  EXPECT_NE(up.err.find("; 0 skipped"), std::string::npos) << up.err;
  EXPECT_EQ(tree(root + "/store/datasets/mnist"), tree(src));

  auto down = runCohort({"cp", "--workers", "3", "--data-root", root,
                         "store://datasets/mnist/", scratch.path + "/back"});
  ASSERT_EQ(down.exit_code, 0) << down.err;
  EXPECT_EQ(tree(scratch.path + "/back"), tree(src));
  struct stat st {};
  ASSERT_EQ(::stat((scratch.path + "/back/labels.txt").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);

  // The same copy again skips everything; the data root may come from the environment.
  auto again = CohortProcess({"cp", src, "store://datasets/mnist"}, {"COHORT_DATA_ROOT=" + root})
                   .wait();
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_NE(again.err.find("cohort: copied 0 files (0 B)"), std::string::npos) << again.err;
  EXPECT_NE(again.err.find("; 41 skipped"), std::string::npos) << again.err;

  auto quiet = runCohort({"cp", "-q", "--checksum", "--data-root", root, src + "/labels.txt",
                          "store://datasets/labels/"});
  ASSERT_EQ(quiet.exit_code, 0) << quiet.err;
  EXPECT_EQ(quiet.err, "");
  EXPECT_EQ(quiet.out, "");
  EXPECT_EQ(readText(root + "/store/datasets/labels/labels.txt"), "0 1 2 3\n");
}

TEST(Cp, MissingSourceFailsNamingIt) {
  ScratchDir scratch;
  auto r = runCohort({"cp", scratch.path + "/no-such-dir", scratch.path + "/dst"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "cohort: error: copy: source '" + scratch.path +
                       "/no-such-dir': No such file or directory\n");
  EXPECT_FALSE(fs::exists(scratch.path + "/dst"));
}

TEST(Cp, UnsafeStoreUriIsBadUsage) {
  ScratchDir scratch;
  writeFile(scratch.path + "/f", "x");
  auto r = runCohort({"cp", "--data-root", scratch.path, scratch.path + "/f",
                      "store://datasets/../../etc/x"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("cohort: error: cp: location 'store://datasets/../../etc/x': '..' is not "
                       "allowed"),
            std::string::npos)
      << r.err;
  EXPECT_FALSE(fs::exists(scratch.path + "/store"));
}

TEST(Cp, BadUsageExitsTwo) {
  EXPECT_EQ(runCohort({"cp", "only-one"}).exit_code, 2);
  EXPECT_EQ(runCohort({"cp", "--workers", "0", "a", "b"}).exit_code, 2);
  auto r = runCohort({"cp", "--frobnicate", "a", "b"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("unknown flag '--frobnicate'"), std::string::npos) << r.err;
}

TEST(Cp, HelpDescribesTheFlags) {
  auto r = runCohort({"cp", "--help"});
  EXPECT_EQ(r.exit_code, 0);
  for (const char* flag : {"--workers", "--checksum", "--data-root", "store://"}) {
    EXPECT_NE(r.out.find(flag), std::string::npos) << flag;
  }
}

TEST(Cp, FullDiskFailsNamingTheFile) {
  ScratchDir scratch;
  if (::geteuid() != 0) GTEST_SKIP() << "mounting a small tmpfs needs root";
  std::string small = scratch.path + "/small";
  fs::create_directories(small);
  if (::mount("tmpfs", small.c_str(), "tmpfs", 0, "size=1m") != 0) {
    GTEST_SKIP() << "cannot mount a 1 MiB tmpfs here: " << std::strerror(errno);
  }
  scratch.mount = small;
  writeFile(scratch.path + "/big.bin", std::string(3 << 20, 'x'));
  auto r = runCohort({"cp", scratch.path + "/big.bin", small + "/big.bin"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "cohort: error: copy '" + scratch.path +
                       "/big.bin': write: No space left on device\n");
  EXPECT_EQ(tree(small), (std::map<std::string, std::string>{})) << "no partial or temporary file";
}

}  // namespace
}  // namespace cohort::testing
