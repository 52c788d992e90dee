// Nothing below a directory is reached through a link, with openat2 and without it.
#include "util/beneath.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "util/temp_dir_for_tests.h"

namespace cohort {
namespace {

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

using OpenFn = Result<UniqueFd> (*)(int, const std::string&, int);

class Beneath : public ::testing::TestWithParam<OpenFn> {
 protected:
  void SetUp() override {
    root_ = dir_.path() + "/root";
    std::filesystem::create_directories(root_ + "/a/b");
    std::ofstream(root_ + "/a/b/file") << "inside";
    std::ofstream(dir_.path() + "/secret") << "outside";
    std::filesystem::create_symlink(dir_.path() + "/secret", root_ + "/a/link-out");
    std::filesystem::create_symlink("b/file", root_ + "/a/link-in");
    std::filesystem::create_directory_symlink(dir_.path(), root_ + "/a/dir-link");
    fd_.reset(::open(root_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    ASSERT_TRUE(fd_.valid());
  }
  std::string read(const std::string& rel) {
    auto fd = GetParam()(fd_.get(), rel, O_RDONLY);
    if (!fd) return "ERROR " + fd.error().message;
    char buf[64];
    ssize_t n = ::read(fd->get(), buf, sizeof buf);
    return std::string(buf, n > 0 ? static_cast<size_t>(n) : 0);
  }
  TempDir dir_;
  std::string root_;
  UniqueFd fd_;
};

TEST_P(Beneath, OpensWhatIsBelowWithoutALink) {
  EXPECT_EQ(read("a/b/file"), "inside");
  EXPECT_EQ(read("./a//b/file"), "inside");
  auto dir = GetParam()(fd_.get(), "", O_RDONLY | O_DIRECTORY);
  EXPECT_TRUE(dir) << dir.error().message;
}

TEST_P(Beneath, RefusesEveryLinkAndNamesIt) {
  EXPECT_EQ(read("a/link-out"),
            "ERROR 'a/link-out' is a symbolic link; links are not followed here");
  // Even a link that stays inside.
  EXPECT_EQ(read("a/link-in"), "ERROR 'a/link-in' is a symbolic link; links are not followed here");
  EXPECT_EQ(read("a/dir-link/secret"),
            "ERROR 'a/dir-link' is a symbolic link; links are not followed here");
  auto path = GetParam()(fd_.get(), "a/link-out", O_PATH);
  EXPECT_FALSE(path) << "an O_PATH open of a link is a link too";
}

TEST_P(Beneath, RefusesWhatLeavesTheDirectory) {
  EXPECT_TRUE(contains(read("../secret"), "leaves the directory")) << read("../secret");
  EXPECT_TRUE(contains(read("a/../../secret"), "leaves the directory"));
  EXPECT_TRUE(contains(read("/etc/hostname"), "not a relative path"));
  EXPECT_TRUE(contains(read("/proc/self/fd/0"), "not a relative path"));
}

TEST_P(Beneath, SaysWhatIsMissing) {
  auto fd = GetParam()(fd_.get(), "a/none", O_RDONLY);
  ASSERT_FALSE(fd);
  EXPECT_EQ(fd.error().code, Code::kNotFound) << fd.error().message;
  auto file_as_dir = GetParam()(fd_.get(), "a/b/file/x", O_RDONLY);
  ASSERT_FALSE(file_as_dir);
  EXPECT_TRUE(contains(file_as_dir.error().message, "Not a directory"))
      << file_as_dir.error().message;
}

INSTANTIATE_TEST_SUITE_P(WithAndWithoutOpenat2, Beneath,
                         ::testing::Values(&openBeneath, &openBeneathByParts));

}  // namespace
}  // namespace cohort
