#include "util/fd.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace cohort {
namespace {

namespace fs = std::filesystem;

class PreparedFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/cohort-fd-test.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  size_t entries() const {
    return static_cast<size_t>(
        std::distance(fs::directory_iterator(dir_), fs::directory_iterator{}));
  }
  std::string dir_;
};

TEST_F(PreparedFileTest, IsNotThereUntilCommittedThenWhole) {
  const std::string path = dir_ + "/result.json";
  auto file = PreparedFile::create(path);
  ASSERT_TRUE(file) << file.error().message;
  EXPECT_FALSE(fs::exists(path));
  EXPECT_EQ(entries(), 0u) << "nothing has a name before the commit";
  ASSERT_TRUE(file->commit("{\"state\": \"succeeded\"}\n"));
  EXPECT_EQ(*readFile(path), "{\"state\": \"succeeded\"}\n");
  EXPECT_EQ(entries(), 1u) << "no temporary file is left";
  auto again = file->commit("{}");
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code, Code::kFailedPrecondition);
  EXPECT_EQ(*readFile(path), "{\"state\": \"succeeded\"}\n");
}

TEST_F(PreparedFileTest, OneNeverCommittedLeavesNothing) {
  {
    auto file = PreparedFile::create(dir_ + "/result.json");
    ASSERT_TRUE(file);
    PreparedFile moved = std::move(*file);
    EXPECT_EQ(entries(), 0u) << "an unnamed file until the commit";
  }
  EXPECT_EQ(entries(), 0u);
}

// What another process puts under the temporary name, or under the name itself, while the file
// waits is never what the commit puts in place.
TEST_F(PreparedFileTest, AFilePlantedUnderItsTemporaryNameIsNotWhatIsCommitted) {
  const std::string path = dir_ + "/result.json";
  auto file = PreparedFile::create(path);
  ASSERT_TRUE(file);
  const std::string tmp =
      path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(::gettid());
  {
    std::ofstream(tmp) << "{\"state\": \"forged\"}\n";
    std::ofstream(path) << "{\"state\": \"forged\"}\n";
  }
  // And through /proc/self/fd, into the unnamed file itself: more than the commit writes.
  for (const auto& entry : fs::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    const std::string target = fs::read_symlink(entry.path(), ec).string();
    if (target.rfind(dir_ + "/#", 0) == 0) {
      std::ofstream(entry.path()) << std::string(4096, 'x');
    }
  }
  ASSERT_TRUE(file->commit("{\"state\": \"failed\"}\n"));
  EXPECT_EQ(*readFile(path), "{\"state\": \"failed\"}\n");
  EXPECT_EQ(entries(), 1u);
}

TEST_F(PreparedFileTest, WithoutUnnamedFilesItIsMadeAtTheCommit) {
  const std::string path = dir_ + "/plan.json";
  PreparedFile file(path);  // what writeFileAtomic does
  EXPECT_EQ(entries(), 0u);
  ASSERT_TRUE(file.commit("{}\n", /*durable=*/false));
  EXPECT_EQ(*readFile(path), "{}\n");
  EXPECT_EQ(entries(), 1u);
}

TEST_F(PreparedFileTest, ARenameThatFailsLeavesNoTemporaryFile) {
  const std::string path = dir_ + "/result.json";
  fs::create_directory(path);  // a directory where the file should go
  fs::create_directory(path + "/x");
  auto file = PreparedFile::create(path);
  ASSERT_TRUE(file);
  auto written = file->commit("{}");
  ASSERT_FALSE(written);
  EXPECT_NE(written.error().message.find("rename to '" + path + "'"), std::string::npos)
      << written.error().message;
  EXPECT_EQ(entries(), 1u) << "only the directory";
}

}  // namespace
}  // namespace cohort
