#include "agent/rank_output.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <sstream>
#include <thread>

#include "util/fd.h"
#include "util/temp_dir_for_tests.h"

namespace cohort::agent {
namespace {

struct Pipe {
  int read_end, write_end;
  Pipe() {
    int fds[2];
    EXPECT_EQ(::pipe(fds), 0);
    read_end = fds[0];
    write_end = fds[1];
  }
  std::string drain() {
    ::close(write_end);
    std::string out;
    char buf[4096];
    for (ssize_t n; (n = ::read(read_end, buf, sizeof buf)) > 0;) out.append(buf, n);
    ::close(read_end);
    return out;
  }
};

TEST(Console, EveryDroppedLineIsAccountedForEvenAtTheEnd) {
  Pipe pipe;
  std::string shown;
  // The reader starts late, so the console must drop; it then reads until the end.
  std::thread reader([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    char buf[65536];
    for (ssize_t n; (n = ::read(pipe.read_end, buf, sizeof buf)) > 0;) shown.append(buf, n);
  });
  const int total = 200000;
  {
    Console console(pipe.write_end, 4096);
    for (int i = 0; i < total; ++i) console.write("line\n");
  }  // no line is written after the drops: only the shutdown can report them
  ::close(pipe.write_end);
  reader.join();
  ::close(pipe.read_end);
  long lines = 0, noted = 0;
  std::istringstream in(shown);
  for (std::string line; std::getline(in, line);) {
    if (line == "line") {
      ++lines;
    } else {
      ASSERT_EQ(line.rfind("[cohort] ", 0), 0u) << line;
      noted += std::stol(line.substr(9));
    }
  }
  EXPECT_GT(noted, 0) << "the console should have dropped lines";
  EXPECT_EQ(lines + noted, total);
}

TEST(RankOutput, PrefixesWholeLinesAcrossChunks) {
  Pipe pipe;
  {
    Console console(pipe.write_end);
    RankOutput out("[w/0 node0] ", &console);
    out.consume("hel", 3);
    out.consume("lo\nwor", 6);
    out.consume("ld\npartial", 10);
    out.finish();
  }
  EXPECT_EQ(pipe.drain(), "[w/0 node0] hello\n[w/0 node0] world\n[w/0 node0] partial\n");
}

TEST(RankOutput, LongLinesAreCutIntoPrefixedPiecesThatFitOnePipeWrite) {
  Pipe pipe;
  std::string long_line(10000, 'x');
  {
    Console console(pipe.write_end);
    RankOutput out("[w/0 node0] ", &console);
    std::string text = long_line + "\nshort\n";
    out.consume(text.data(), text.size());
  }
  std::string shown = pipe.drain();
  size_t pieces = 0;
  size_t xs = 0;
  for (size_t start = 0, nl; (nl = shown.find('\n', start)) != std::string::npos; start = nl + 1) {
    std::string line = shown.substr(start, nl - start);
    ASSERT_EQ(line.rfind("[w/0 node0] ", 0), 0u) << line.substr(0, 40);
    EXPECT_LE(line.size() + 1, static_cast<size_t>(PIPE_BUF));
    xs += std::count(line.begin(), line.end(), 'x');
    ++pieces;
  }
  EXPECT_EQ(xs, long_line.size());
  EXPECT_EQ(pieces, 4u);  // three pieces of the long line, then "short"
}

// torchrun's tee: "[default1]:text" is local rank 1's line, anything else torchrun's own.
TEST(TeeSplitter, HandsEachPrefixedLineToItsRankAndTheRestToTheLauncher) {
  std::vector<std::string> rank_lines[2];
  std::string own;
  TeeSplitter split("default", 2,
                    [&](size_t i, std::string_view line) { rank_lines[i].emplace_back(line); },
                    [&](std::string_view line) { own += line; });
  split.consume("[default1]:hel");
  split.consume("lo\n[default0]:cohort.log step=1 loss=0.5\nINFO: torchrun's own\n[def");
  split.consume("ault0]:Traceback (most recent call last):\n[default2]:not a rank of it\n");
  split.consume("[default]:no index\n[defaultx]:no digits\n[default0] no colon\n[default0]:");
  split.finish();
  ASSERT_EQ(rank_lines[1], std::vector<std::string>{"hello\n"});
  EXPECT_EQ(rank_lines[0], (std::vector<std::string>{"cohort.log step=1 loss=0.5\n",
                                                      "Traceback (most recent call last):\n"}));
  EXPECT_EQ(own,
            "INFO: torchrun's own\n[default2]:not a rank of it\n[default]:no index\n"
            "[defaultx]:no digits\n[default0] no colon\n");
}

// torchrun's tee writes what it read of a rank's log, also a line the rank has not ended yet,
// and the rest later after the marker again, maybe after another rank's line.
TEST(TeeSplitter, ALineTornByTorchrunsTeeIsJoinedBackForItsRank) {
  std::string to_rank[2];
  std::string own;
  TeeSplitter split("default", 2, [&](size_t i, std::string_view text) { to_rank[i] += text; },
                    [&](std::string_view line) { own += line; });
  split.consume("[default0]:held-out accuracy: 0.922[default0]:\n");
  split.consume("[default1]:epoch [default0]:saved model.pt\n[default1]:1 done\n");
  split.consume("[default1]:a [default7]: is not a marker of a rank\n");
  split.finish();
  EXPECT_EQ(to_rank[0], "held-out accuracy: 0.922\nsaved model.pt\n");
  EXPECT_EQ(to_rank[1], "epoch 1 done\na [default7]: is not a marker of a rank\n");
  EXPECT_EQ(own, "");
}

TEST(TeeSplitter, ALongLineGoesWhollyWhereItsFirstPieceWent) {
  std::string to_rank;
  std::string own;
  TeeSplitter split("default", 1, [&](size_t, std::string_view line) { to_rank += line; },
                    [&](std::string_view line) { own += line; });
  std::string long_line = "[default0]:" + std::string(3 * TeeSplitter::kMaxPiece, 'x') + "\n";
  for (size_t at = 0; at < long_line.size(); at += 1000) split.consume(long_line.substr(at, 1000));
  split.consume("after\n");
  EXPECT_EQ(to_rank, long_line.substr(11));
  EXPECT_EQ(own, "after\n");
}

TEST(LogFile, AppendsEveryByte) {
  TempDir dir("cohort-log");
  std::string path = dir.path() + "/rank.log";
  {
    auto log = LogFile::open(path);
    ASSERT_TRUE(log);
    log->append("hello\nwor");
    log->append(std::string_view("ld\0\xff", 4));
  }
  EXPECT_EQ(*readFile(path), std::string("hello\nworld\0\xff", 13));
}

TEST(LogFile, FullDiskIsReportedOnce) {
  // /dev/full fails every write with ENOSPC, as a full disk does.
  auto log = LogFile::open("/dev/full");
  ASSERT_TRUE(log);
  ::testing::internal::CaptureStderr();
  log->append("one\n");
  log->append("two\n");
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("writing /dev/full: write: No space left on device"), std::string::npos)
      << err;
  EXPECT_EQ(err.find("writing", err.find("writing") + 1), std::string::npos) << "said twice";
}

TEST(LogFile, DoesNotFollowALinkAtItsName) {
  TempDir dir("cohort-log");
  std::string target = dir.path() + "/elsewhere";
  std::string link = dir.path() + "/rank.log";
  ASSERT_EQ(::symlink(target.c_str(), link.c_str()), 0);
  EXPECT_FALSE(LogFile::open(link));
  EXPECT_NE(::access(target.c_str(), F_OK), 0) << "made through the link";
}

TEST(RankOutput, TailKeepsLastLines) {
  RankOutput out("", nullptr);
  std::string text;
  for (int i = 0; i < 100; ++i) text += "line " + std::to_string(i) + "\n";
  out.consume(text.data(), text.size());
  auto tail = out.tail(3);
  EXPECT_EQ(tail, (std::vector<std::string>{"line 97", "line 98", "line 99"}));
}

// close() returns with every queued line written (a coordinator whose process ends right after
// must not lose the last lines), and the console still works after it.
TEST(Console, CloseWritesEveryQueuedLineBeforeItReturns) {
  Pipe pipe;
  Console console(pipe.write_end);
  std::string expected;
  for (int i = 0; i < 1000; ++i) {
    const std::string line = "line " + std::to_string(i) + "\n";
    console.write(line);
    expected += line;
  }
  console.close();
  ASSERT_TRUE(setNonBlocking(pipe.read_end));
  std::string all;
  char buf[65536];
  for (ssize_t n; (n = ::read(pipe.read_end, buf, sizeof buf)) > 0;) all.append(buf, n);
  EXPECT_EQ(all, expected);
  console.write("after\n");
  console.close();
  all.clear();
  for (ssize_t n; (n = ::read(pipe.read_end, buf, sizeof buf)) > 0;) all.append(buf, n);
  EXPECT_EQ(all, "after\n");
}

TEST(Console, DropsWhenFullInsteadOfBlocking) {
  Pipe pipe;  // nobody reads while the lines are written: the pipe fills up
  std::string all;
  {
    Console console(pipe.write_end, 1024);
    for (int i = 0; i < 100000; ++i) console.write("a line that nobody reads yet\n");
    // Reaching here at all is the point: write() never blocked on the full pipe.
    // Now read, so the console can write the note about what it dropped.
    ASSERT_TRUE(setNonBlocking(pipe.read_end));
    char buf[65536];
    for (int i = 0; i < 200 && all.find("lines were not shown") == std::string::npos; ++i) {
      pollfd p{pipe.read_end, POLLIN, 0};
      ::poll(&p, 1, 10);
      ssize_t n = ::read(pipe.read_end, buf, sizeof buf);
      if (n > 0) all.append(buf, n);
      console.write("one more line\n");
    }
  }
  all += pipe.drain();
  EXPECT_NE(all.find("lines were not shown here"), std::string::npos);
}

}  // namespace
}  // namespace cohort::agent
