#include "storage/archive.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "tests/tar_entry.h"
#include "util/fd.h"

namespace cohort::storage {
namespace {

namespace fs = std::filesystem;

class ArchiveTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/cohort-archive-test-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  void write(const std::string& rel, const std::string& content) {
    fs::create_directories(fs::path(dir_ + "/" + rel).parent_path());
    std::ofstream(dir_ + "/" + rel, std::ios::binary) << content;
  }
  std::string read(const std::string& path) {
    auto text = readFile(path);
    return text ? *text : "<missing: " + text.error().message + ">";
  }

  // The archive of the tree at `root`, as `cohort submit` writes it.
  std::string archiveOf(const std::string& root, const ArchiveLimits& limits = {}) {
    auto rules = IgnoreRules::forTree(root);
    EXPECT_TRUE(rules);
    auto listing = listTree(root, *rules, limits);
    EXPECT_TRUE(listing) << listing.error().message;
    if (!listing) return "";
    const std::string file = dir_ + "/archive.tar";
    UniqueFd fd(::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
    auto written = writeArchive(root, *listing, fd.get());
    EXPECT_TRUE(written) << written.error().message;
    return read(file);
  }

  std::string dir_;
};

using cohort::testing::tarEntry;
std::string entry(const std::string& name, char type, const std::string& content = "",
                  const std::string& link = "", const std::string& prefix = "") {
  return tarEntry(name, type, content, link, prefix);
}
const std::string kEnd = cohort::testing::tarEnd();

TEST_F(ArchiveTest, ATreeRoundTripsWithModesLinksAndIgnoreRules) {
  const std::string src = dir_ + "/src";
  write("src/train.py", "print('hi')\n");
  write("src/pkg/model.py", "x = 1\n");
  write("src/run.sh", "#!/bin/sh\n");
  ::chmod((src + "/run.sh").c_str(), 0775);
  write("src/data/big.bin", std::string(5000, 'b'));
  write("src/weights.bin", "w");
  write("src/keep.bin", "k");
  write("src/.git/HEAD", "ref");
  write("src/__pycache__/m.pyc", "c");
  write("src/.cohortignore", "# comment\ndata/\n*.bin\n!keep.bin\n__pycache__/\n");
  write("src/.gitignore", "train.py\n");  // not read: .cohortignore comes first
  fs::create_symlink("pkg/model.py", src + "/model_link.py");
  fs::create_directories(src + "/empty");
  const std::string archive = archiveOf(src);
  ASSERT_FALSE(archive.empty());
  const std::string out = dir_ + "/out";
  auto stats = extractArchive(archive, out, {});
  ASSERT_TRUE(stats) << stats.error().message;
  EXPECT_EQ(read(out + "/train.py"), "print('hi')\n");
  EXPECT_EQ(read(out + "/pkg/model.py"), "x = 1\n");
  EXPECT_EQ(read(out + "/keep.bin"), "k");
  EXPECT_EQ(read(out + "/model_link.py"), "x = 1\n");
  EXPECT_TRUE(fs::is_symlink(out + "/model_link.py"));
  EXPECT_TRUE(fs::is_directory(out + "/empty"));
  for (const char* gone : {"data", "weights.bin", ".git", "__pycache__"}) {
    EXPECT_FALSE(fs::exists(out + "/" + gone)) << gone;
  }
  struct stat st {};
  ASSERT_EQ(::stat((out + "/run.sh").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0755u);  // executable kept, group write dropped
  ASSERT_EQ(::stat((out + "/train.py").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0644u);
  EXPECT_EQ(stats->links, 1);
}

TEST_F(ArchiveTest, GitignoreIsUsedWithoutACohortignore) {
  write("src/a.py", "a");
  write("src/out/model.pt", "m");
  write("src/sub/b.log", "l");
  write("src/.gitignore", "/out\n*.log\n");
  auto stats = extractArchive(archiveOf(dir_ + "/src"), dir_ + "/out", {});
  ASSERT_TRUE(stats) << stats.error().message;
  EXPECT_TRUE(fs::exists(dir_ + "/out/a.py"));
  EXPECT_TRUE(fs::exists(dir_ + "/out/sub"));
  EXPECT_FALSE(fs::exists(dir_ + "/out/sub/b.log"));
  EXPECT_FALSE(fs::exists(dir_ + "/out/out"));
}

TEST(IgnoreRules, PatternsMatchAsGitignoreDoes) {
  IgnoreRules r =
      IgnoreRules::fromText("*.pyc\n/build\ndocs/*.md\n**/tmp/\ndata/\n!important.pyc\n");
  EXPECT_TRUE(r.ignored("a.pyc", false));
  EXPECT_TRUE(r.ignored("deep/er/b.pyc", false));
  EXPECT_FALSE(r.ignored("important.pyc", false));
  EXPECT_TRUE(r.ignored("build", true));
  EXPECT_FALSE(r.ignored("src/build", true));  // anchored
  EXPECT_TRUE(r.ignored("docs/x.md", false));
  EXPECT_FALSE(r.ignored("docs/sub/x.md", false));  // * stays within a name
  EXPECT_TRUE(r.ignored("a/b/tmp", true));
  EXPECT_TRUE(r.ignored("tmp", true));
  EXPECT_FALSE(r.ignored("tmp", false));  // tmp/ matches directories only
  EXPECT_TRUE(r.ignored("x/data", true));
  EXPECT_TRUE(r.ignored(".git", true));
  EXPECT_FALSE(r.ignored("train.py", false));
}

TEST_F(ArchiveTest, ALinkLeadingOutOfTheWorkdirIsRefusedBeforeUploading) {
  write("src/a.py", "a");
  fs::create_symlink("/etc/passwd", dir_ + "/src/passwd");
  auto listing = listTree(dir_ + "/src", IgnoreRules(), {});
  ASSERT_FALSE(listing);
  EXPECT_NE(listing.error().message.find("'" + dir_ + "/src/passwd' cannot be uploaded"),
            std::string::npos)
      << listing.error().message;
  EXPECT_NE(listing.error().message.find(".cohortignore"), std::string::npos);
  fs::remove(dir_ + "/src/passwd");
  fs::create_symlink("../../outside", dir_ + "/src/up");
  listing = listTree(dir_ + "/src", IgnoreRules(), {});
  ASSERT_FALSE(listing);
  EXPECT_NE(listing.error().message.find("leads out of the workdir"), std::string::npos);
}

TEST_F(ArchiveTest, AWorkdirOverTheLimitNamesItsSizeAndBiggestFiles) {
  write("src/small.py", "s");
  write("src/data/huge.bin", std::string(3000, 'x'));
  ArchiveLimits limits;
  limits.max_bytes = 1000;
  auto listing = listTree(dir_ + "/src", IgnoreRules(), limits);
  ASSERT_FALSE(listing);
  EXPECT_EQ(listing.error().code, Code::kTooLarge);
  EXPECT_NE(listing.error().message.find("over the 1000 B limit"), std::string::npos)
      << listing.error().message;
  EXPECT_NE(listing.error().message.find("data/huge.bin (2.9 KiB)"), std::string::npos)
      << listing.error().message;
}

TEST_F(ArchiveTest, LongNamesUseTheUstarPrefix) {
  const std::string deep =
      std::string(60, 'd') + "/" + std::string(60, 'e') + "/" + std::string(90, 'f') + ".py";
  write("src/" + deep, "long");
  auto stats = extractArchive(archiveOf(dir_ + "/src"), dir_ + "/out", {});
  ASSERT_TRUE(stats) << stats.error().message;
  EXPECT_EQ(read(dir_ + "/out/" + deep), "long");
  // A prefix written by another tool is read too.
  stats = extractArchive(entry("f.py", '0', "p", "", "pre/fix") + kEnd, dir_ + "/out2", {});
  ASSERT_TRUE(stats) << stats.error().message;
  EXPECT_EQ(read(dir_ + "/out2/pre/fix/f.py"), "p");
}

struct Hostile {
  const char* what;
  std::string archive;
  const char* message;
};

TEST_F(ArchiveTest, HostileArchivesAreRefusedNamingTheEntryAndLeaveNothing) {
  const std::vector<Hostile> cases = {
      {"absolute", entry("/tmp/evil", '0', "x") + kEnd, "'/tmp/evil': absolute paths are refused"},
      {"dot-dot", entry("a/../../evil", '0', "x") + kEnd, "'a/../../evil': '..' is refused"},
      {"link out", entry("l", '2', "", "../../etc") + kEnd, "leads out of the workdir"},
      {"absolute link", entry("l", '2', "", "/etc") + kEnd, "is an absolute path"},
      {"dot-dot after a name", entry("l", '2', "", "sub/../..") + kEnd, "'..' after a name"},
      {"through a link",
       entry("sub", '5') + entry("l", '2', "", "sub") + entry("l/f", '0', "x") + kEnd,
       "'l' is a link or a file, not a directory"},
      {"hard link", entry("h", '1', "", "a") + kEnd, "hard links are refused"},
      {"device", entry("d", '3') + kEnd, "device files are refused"},
      {"fifo", entry("p", '6') + kEnd, "FIFOs are refused"},
      {"pax", entry("pax", 'x', "30 path=" + std::string(20, 'a') + "\n") + kEnd,
       "extended (pax or GNU) headers"},
      {"duplicate", entry("f", '0', "1") + entry("f", '0', "2") + kEnd, "in the archive twice"},
      {"cut off", entry("f", '0', std::string(2000, 'x')).substr(0, 1024), "cut off inside"},
      {"no end", entry("f", '0', "x"), "cut off after"},
      {"not tar", std::string(1024, 'z'), "wrong checksum"},
      {"empty", "", "the archive is empty"},
  };
  for (const Hostile& c : cases) {
    const std::string out = dir_ + "/out";
    auto stats = extractArchive(c.archive, out, {});
    ASSERT_FALSE(stats) << c.what;
    EXPECT_NE(stats.error().message.find(c.message), std::string::npos)
        << c.what << ": " << stats.error().message;
    EXPECT_FALSE(fs::exists(out)) << c.what << ": the partial extraction was left";
  }
  EXPECT_FALSE(fs::exists("/tmp/evil"));
  EXPECT_FALSE(fs::exists(dir_ + "/evil"));
}

TEST_F(ArchiveTest, TotalsOverTheLimitsAreRefused) {
  ArchiveLimits limits;
  limits.max_bytes = 100;
  auto stats = extractArchive(
      entry("a", '0', std::string(60, 'a')) + entry("b", '0', std::string(60, 'b')) + kEnd,
      dir_ + "/out", limits);
  ASSERT_FALSE(stats);
  EXPECT_EQ(stats.error().code, Code::kTooLarge);
  EXPECT_NE(stats.error().message.find("this server's limit (at 'b')"), std::string::npos)
      << stats.error().message;
  limits = {};
  limits.max_entries = 2;
  stats = extractArchive(entry("a", '0') + entry("b", '0') + entry("c", '0') + kEnd, dir_ + "/out",
                         limits);
  ASSERT_FALSE(stats);
  EXPECT_NE(stats.error().message.find("over 2 entries"), std::string::npos);
  EXPECT_FALSE(fs::exists(dir_ + "/out"));
}

TEST_F(ArchiveTest, SetuidAndWorldWritableBitsAreDropped) {
  const std::string a = tarEntry("s", '0', "x", "", "", 06777);
  auto stats = extractArchive(a + kEnd, dir_ + "/out", {});
  ASSERT_TRUE(stats) << stats.error().message;
  struct stat st {};
  ASSERT_EQ(::stat((dir_ + "/out/s").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0755u);
}

}  // namespace
}  // namespace cohort::storage
