#include "agent/hang.h"

#include <gtest/gtest.h>

namespace cohort::agent {
namespace {

const char* kAllReduce =
    "Process 4242: /usr/bin/python3 train.py\n"
    "Python v3.11.2 (/usr/bin/python3.11)\n"
    "\n"
    "Thread 4242 (idle): \"MainThread\"\n"
    "    all_reduce (torch/distributed/distributed_c10d.py:1536)\n"
    "    <module> (train.py:10)\n";

RankStack rank(int r, char state, std::string frames) {
  RankStack s;
  s.rank = r;
  s.label = "worker/" + std::to_string(r) + " on node " + std::to_string(r / 2);
  s.state = state;
  s.frames = std::move(frames);
  return s;
}

TEST(FramesOfPySpy, KeepsFramesAndThreadsWithoutIds) {
  EXPECT_EQ(framesOfPySpy(kAllReduce),
            "Thread \"MainThread\"\n"
            "    all_reduce (torch/distributed/distributed_c10d.py:1536)\n"
            "    <module> (train.py:10)\n");
  std::string other = kAllReduce;
  other.replace(other.find("4242 (idle)"), 11, "9999 (active+gil)");
  EXPECT_EQ(framesOfPySpy(other), framesOfPySpy(kAllReduce))
      << "the same place, another pid, seen busy for an instant";
  EXPECT_EQ(framesOfPySpy("Thread 7 (idle)\n    f (a.py:1)\n"), "Thread\n    f (a.py:1)\n");
}

// A preloaded rank runs its script from the template's code: its stack is shown as a directly
// launched rank's, from the script's first frame.
TEST(FramesOfPySpy, LeavesOutAPreloadedRanksTemplateFrames) {
  const std::string preloaded = std::string(kAllReduce) +
                                "    become_rank (<cohort preload template>:151)\n"
                                "    run_rank (<cohort preload template>:180)\n"
                                "    <module> (<cohort preload template>:322)\n"
                                "    <module> (<string>:1)\n";
  EXPECT_EQ(framesOfPySpy(preloaded), framesOfPySpy(kAllReduce));
  EXPECT_EQ(framesOfPySpy("Thread 7 (idle)\n    <module> (<string>:1)\n"),
            "Thread\n    <module> (<string>:1)\n")
      << "the script's own code run from a string is its";
}

TEST(Diagnose, AStoppedRankIsNamedFirst) {
  const std::string waiting = framesOfPySpy(kAllReduce);
  HangReport r = diagnose(
      {rank(0, 'S', waiting), rank(1, 'S', waiting), rank(2, 'T', ""), rank(3, 'S', waiting)});
  EXPECT_EQ(r.laggards,
            "worker/2 on node 1 is stopped (SIGSTOP, or a debugger holds it): the "
            "others wait for it");
  EXPECT_NE(r.text.find("worker/0 on node 0, worker/1 on node 0, worker/3 on node 1 (3 rank(s), "
                        "sleeping):\nThread \"MainThread\"\n    all_reduce"),
            std::string::npos)
      << r.text;
  EXPECT_NE(r.text.find("worker/2 on node 1 (1 rank(s), stopped):\n    (no stack: unknown)"),
            std::string::npos)
      << r.text;
}

TEST(Diagnose, TheRankWhoseStackIsNotTheOthersIsElsewhere) {
  const std::string waiting = framesOfPySpy(kAllReduce);
  const std::string sleeping =
      "Thread \"MainThread\"\n    slow (train.py:4)\n"
      "    <module> (train.py:9)\n";
  HangReport r = diagnose({rank(0, 'S', waiting), rank(1, 'S', sleeping), rank(2, 'S', waiting),
                           rank(3, 'S', waiting)});
  EXPECT_EQ(r.laggards,
            "worker/1 on node 0 is elsewhere (at slow (train.py:4)) while 3 other "
            "rank(s) wait at all_reduce (torch/distributed/distributed_c10d.py:1536)");
}

TEST(Diagnose, NobodyStandsOutWhenAllWaitAlikeOrHalvesDiffer) {
  const std::string a = "    f (a.py:1)\n";
  const std::string b = "    g (b.py:2)\n";
  EXPECT_EQ(diagnose({rank(0, 'S', a), rank(1, 'S', a)}).laggards, "");
  EXPECT_EQ(diagnose({rank(0, 'S', a), rank(1, 'S', b)}).laggards, "");
  EXPECT_EQ(diagnose({rank(0, 'S', a), rank(1, 'S', a), rank(2, 'S', b), rank(3, 'S', b)}).laggards,
            "");
}

TEST(Diagnose, ARankInUninterruptibleSleepIsNamed) {
  EXPECT_NE(diagnose({rank(0, 'D', ""), rank(1, 'S', "")})
                .laggards.find("worker/0 on node 0 is in uninterruptible sleep"),
            std::string::npos);
}

TEST(Diagnose, ManyRanksAreCountedNotListed) {
  std::vector<RankStack> stacks;
  for (int r = 0; r < 64; ++r) stacks.push_back(rank(r, 'S', "    f (a.py:1)\n"));
  HangReport rep = diagnose(stacks);
  EXPECT_NE(rep.text.find("worker/7 on node 3 and 56 more (64 rank(s), sleeping)"),
            std::string::npos)
      << rep.text;
}

}  // namespace
}  // namespace cohort::agent
