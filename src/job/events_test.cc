#include "job/events.h"

#include <gtest/gtest.h>

#include <random>

#include "job/layout.h"
#include "job/state.h"

namespace cohort::job {
namespace {

TEST(Events, EveryKindRoundTrips) {
  Event exit;
  exit.t = 1700000000123456789;
  exit.kind = EventKind::kRankExit;
  exit.attempt = 1;
  exit.name = "worker/3";
  exit.role = "worker";
  exit.role_rank = 3;
  exit.rank = 3;
  exit.node = 1;
  exit.code = 2;
  exit.by_cohort = true;
  exit.exit_time = 1700000000000000000;
  auto back = decodeEvent(encodeEvent(exit));
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(back->name, "worker/3");
  EXPECT_EQ(back->attempt, 1);
  EXPECT_EQ(back->node, 1);
  EXPECT_EQ(back->code, 2);
  EXPECT_TRUE(back->by_cohort);
  EXPECT_EQ(back->exit_time, exit.exit_time);
  EXPECT_EQ(encodeEvent(*back), encodeEvent(exit));

  Event state = stateEvent(5, "failed", "worker/0 exited with code 1");
  state.exit_code = 1;
  auto s = decodeEvent(encodeEvent(state));
  ASSERT_TRUE(s);
  EXPECT_EQ(s->state, "failed");
  EXPECT_EQ(s->exit_code, 1);
  EXPECT_EQ(s->reason, "worker/0 exited with code 1");

  Event out;
  out.kind = EventKind::kOutput;
  out.t = 9;
  out.source = "/j/output";
  out.target = "/store/m";
  out.files = 3;
  out.bytes = 1024;
  auto o = decodeEvent(encodeEvent(out));
  ASSERT_TRUE(o);
  EXPECT_EQ(o->target, "/store/m");
  EXPECT_EQ(o->bytes, 1024);

  Event oom = exit;
  oom.signal = 9;
  oom.memory_limit = 512 << 20;
  auto killed = decodeEvent(encodeEvent(oom));
  ASSERT_TRUE(killed) << killed.error().message;
  EXPECT_EQ(killed->memory_limit, 512 << 20);
  EXPECT_EQ(encodeEvent(*killed), encodeEvent(oom));
  EXPECT_EQ(encodeEvent(exit).find("memory_limit"), std::string::npos);

  Event limits;
  limits.kind = EventKind::kLimits;
  limits.t = 10;
  limits.node = 2;
  limits.warning = "cgroup '/sys/fs/cgroup' has no memory controller";
  auto l = decodeEvent(encodeEvent(limits));
  ASSERT_TRUE(l) << l.error().message;
  EXPECT_EQ(l->kind, EventKind::kLimits);
  EXPECT_EQ(l->node, 2);
  EXPECT_EQ(l->warning, limits.warning);
  auto old = decodeEvent(R"({"t":10,"event":"limits","node":2,"error":"no cgroup"})");
  ASSERT_TRUE(old) << old.error().message;
  EXPECT_EQ(old->warning, "no cgroup") << "a record from before it was a warning";
}

TEST(Events, WrongTypesAreRefusedWithTheFieldNamed) {
  // The line that crashed the server when a job appended it to its own events file.
  auto e = decodeEvent(R"({"t":"x"})");
  ASSERT_FALSE(e);
  EXPECT_NE(e.error().message.find("'t' must be an integer"), std::string::npos)
      << e.error().message;
  for (const char* line :
       {R"({"t":1})", R"({"t":1,"event":"nonsense"})", R"({"t":1,"event":"state"})",
        R"({"t":1,"event":"state","state":"hacked"})",
        R"({"t":1,"event":"state","state":"running","attempt":"0"})",
        R"({"t":1,"event":"rank_exit","code":1e400})",
        R"({"t":1,"event":"rank_exit","rank":99999999999})",
        R"({"t":1,"event":"output","output":"x"})", R"({"t":1.5,"event":"state"})", "[1,2]",
        "not json", "", "{"}) {
    EXPECT_FALSE(decodeEvent(line)) << line;
  }
}

TEST(Events, DeepOrHugeLinesAreRefusedUnparsed) {
  std::string deep(100000, '[');
  EXPECT_FALSE(decodeEvent(deep));
  std::string nested = R"({"t":1,"event":"output","output":{"source":{"a":{"b":1}}}})";
  EXPECT_FALSE(decodeEvent(nested));
  std::string huge = R"({"t":1,"event":"state","state":"running","reason":")" +
                     std::string(kMaxEventBytes, 'x') + "\"}";
  EXPECT_FALSE(decodeEvent(huge));
}

TEST(Events, InvalidUtf8IsReplacedWhenEncoded) {
  Event e = stateEvent(1, "failed", std::string("bad \xff\xfe byte"));
  std::string line = encodeEvent(e);
  auto back = decodeEvent(line);
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(back->state, "failed");
}

// Random bytes and mutations of real events: the codec returns a value or an error, never
// throws, never crashes, and what it accepts encodes to something it accepts again.
TEST(Events, FuzzedLinesNeverThrow) {
  std::vector<std::string> seeds;
  Event exit;
  exit.kind = EventKind::kRankExit;
  exit.name = "worker/1";
  seeds.push_back(encodeEvent(exit));
  seeds.push_back(encodeEvent(stateEvent(3, "running")));
  Event out;
  out.kind = EventKind::kOutput;
  out.source = "a";
  seeds.push_back(encodeEvent(out));
  Event staged;
  staged.kind = EventKind::kStaged;
  staged.seconds = 1.5;
  seeds.push_back(encodeEvent(staged));
  std::mt19937 rng(20261201);
  const std::string alphabet = "{}[]\",:0123456789-eE.tfnulrsaxyz\\ \xff\xc3";
  int accepted = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string line;
    if (i % 4 == 0) {
      size_t len = rng() % 200;
      for (size_t k = 0; k < len; ++k) line.push_back(static_cast<char>(rng() % 256));
    } else {
      line = seeds[rng() % seeds.size()];
      int edits = 1 + static_cast<int>(rng() % 6);
      for (int k = 0; k < edits && !line.empty(); ++k) {
        size_t at = rng() % line.size();
        switch (rng() % 3) {
          case 0: line[at] = alphabet[rng() % alphabet.size()]; break;
          case 1: line.erase(at, 1 + rng() % 4); break;
          default: line.insert(at, 1, alphabet[rng() % alphabet.size()]); break;
        }
      }
    }
    Result<Event> e = Event{};
    EXPECT_NO_THROW(e = decodeEvent(line)) << line;
    if (e) {
      ++accepted;
      EXPECT_TRUE(decodeEvent(encodeEvent(*e))) << line;
    }
  }
  EXPECT_GT(accepted, 0);  // the mutations do reach the typed checks
}

TEST(JobStates, OneListWithThreeFinalStates) {
  int final_states = 0;
  for (const std::string& s : kJobStates) final_states += isFinalState(s);
  EXPECT_EQ(final_states, 3);
  EXPECT_TRUE(isJobState("restarting"));
  EXPECT_FALSE(isJobState("runing"));
}

TEST(Layout, EveryPathIsInsideTheJobDirectory) {
  Layout l = Layout::of("/d", "j1");
  EXPECT_EQ(l.dir(), "/d/jobs/j1");
  EXPECT_EQ(l.rankTableFile(), "/d/jobs/j1/files/rank_table.json");
  EXPECT_EQ(l.logFile("worker-3"), "/d/jobs/j1/logs/worker-3.log");
  EXPECT_EQ(l.nodeWorkDir(2), "/d/jobs/j1/work/node2");
}

}  // namespace
}  // namespace cohort::job

namespace cohort::job {
namespace {

TEST(JobResults, AFinalRecordIsReadAndAnythingElseRefused) {
  auto r = decodeResult(R"({"state":"failed","exit_code":3,"reason":"worker/1 exited with code 3",
                            "attempts":2,"root_cause":{"rank":1,"tail":["boom"]}})");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->state, "failed");
  EXPECT_EQ(r->exit_code, 3);
  EXPECT_EQ(r->attempts, 2);
  EXPECT_EQ(r->root_cause_json, R"({"rank":1,"tail":["boom"]})");
  for (const char* text : {R"({"state":"running"})", R"({"state":"failed","exit_code":"1"})",
                           R"({"state":"failed","root_cause":[1]})", "[]", "",
                           R"({"state":"failed","root_cause":{"a":{"b":{"c":{"d":1}}}}})"}) {
    EXPECT_FALSE(decodeResult(text)) << text;
  }
}

}  // namespace
}  // namespace cohort::job
