// A rank's debug status file is written by the job's code: every way it can be wrong is no
// status, never a crash, a hang or a path followed out of the rank's area.
#include "agent/debug_status.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

namespace cohort::agent {
namespace {

class DebugStatusFile : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/cohort-debug-status-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::system(("rm -rf '" + dir_ + "'").c_str()); }
  std::string write(const std::string& name, const std::string& text) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    return path;
  }
  std::string dir_;
};

TEST(DebugStatus, ParsesWhatTheBootstrapWrites) {
  auto s = parseDebugStatus(
      R"({"state": "waiting", "reason": "breakpoint", "where": "train.py:3", "seq": 2, "pid": 9})");
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_EQ(s->state, "waiting");
  EXPECT_EQ(s->reason, "breakpoint");
  EXPECT_EQ(s->where, "train.py:3");
  EXPECT_EQ(s->seq, 2);
  EXPECT_EQ(s->attaches, 0) << "an older bootstrap's file has no count";
  auto counted = parseDebugStatus(R"({"state": "running", "reason": "start", "attaches": 3})");
  ASSERT_TRUE(counted);
  EXPECT_EQ(counted->attaches, 3);
  auto negative = parseDebugStatus(R"({"state": "running", "reason": "start", "attaches": -5})");
  ASSERT_TRUE(negative);
  EXPECT_EQ(negative->attaches, 0);
}

TEST(DebugStatus, RefusesAnythingElse) {
  for (const std::string& text :
       {std::string(""), std::string("[]"), std::string("{"), std::string("\"waiting\""),
        std::string(R"({"state": "asleep", "reason": "start"})"),
        std::string(R"({"state": "waiting", "reason": "because"})"),
        std::string(R"({"state": ["waiting"], "reason": "start"})"),
        std::string(R"({"state": "waiting", "reason": "start", "x": [[1]]})"),
        std::string(5000, ' ') + R"({"state": "waiting", "reason": "start"})",
        std::string(100000, '[')}) {
    EXPECT_FALSE(parseDebugStatus(text)) << text.substr(0, 80);
  }
}

TEST(DebugStatus, WhereIsCutAndCleanedForAPerson) {
  std::string where(1000, 'a');
  where[3] = '\n';
  where[4] = '\x1b';
  auto s = parseDebugStatus(R"({"state": "attached", "reason": "exception", "where": ")" + where +
                            "\"}");
  ASSERT_FALSE(s) << "a control character in JSON text is not JSON";
  s = parseDebugStatus(
      R"({"state": "attached", "reason": "exception", "where": "a\nb\u001bc\u00e9)" +
      std::string(500, 'x') + "\"}");
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_LE(s->where.size(), kMaxDebugWhereBytes);
  EXPECT_EQ(s->where.substr(0, 5), "a b c");
}

TEST_F(DebugStatusFile, ReadsAPlainFileOnly) {
  const std::string ok = write("status", R"({"state": "attached", "reason": "start"})");
  auto s = readDebugStatus(ok);
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_EQ(s->state, "attached");
  EXPECT_EQ(readDebugStatus(dir_ + "/none").error().code, Code::kNotFound);

  ASSERT_EQ(::symlink(ok.c_str(), (dir_ + "/link").c_str()), 0);
  EXPECT_FALSE(readDebugStatus(dir_ + "/link")) << "a link is never followed";
  ASSERT_EQ(::link(ok.c_str(), (dir_ + "/hard").c_str()), 0);
  EXPECT_FALSE(readDebugStatus(dir_ + "/hard")) << "a file with a second name may be anyone's";
  ::unlink((dir_ + "/hard").c_str());
  ASSERT_EQ(::mkfifo((dir_ + "/fifo").c_str(), 0600), 0);
  EXPECT_FALSE(readDebugStatus(dir_ + "/fifo")) << "a fifo with no writer must not block";
  EXPECT_FALSE(readDebugStatus(dir_)) << "a directory";
  EXPECT_FALSE(readDebugStatus(ok, ::getuid() + 1)) << "another identity's file";
  EXPECT_TRUE(readDebugStatus(ok, ::getuid()));
  const std::string big = write("big", std::string(1 << 20, ' '));
  EXPECT_FALSE(readDebugStatus(big));
}

}  // namespace
}  // namespace cohort::agent
