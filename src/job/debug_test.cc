#include "job/debug.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace cohort::job {
namespace {

Event debugEvent(int rank, const std::string& state, int attempt = 0) {
  Event e;
  e.kind = EventKind::kDebug;
  e.t = 1000 + rank;
  e.attempt = attempt;
  e.name = "worker/" + std::to_string(rank);
  e.rank = rank;
  e.node = rank / 2;
  e.state = state;
  e.reason = "start";
  e.address = "127.0.0.1:" + std::to_string(41000 + rank);
  return e;
}

Event exitOf(int rank, int attempt = 0) {
  Event e;
  e.kind = EventKind::kRankExit;
  e.attempt = attempt;
  e.rank = rank;
  return e;
}

TEST(DebugTargets, TheLatestWordOfEachRankThatHasNotExited) {
  std::vector<Event> events = {stateEvent(1, "running"),
                               debugEvent(1, "waiting"),
                               debugEvent(2, "waiting"),
                               debugEvent(3, "waiting"),
                               debugEvent(1, "attached"),
                               debugEvent(2, "running"),
                               exitOf(3)};
  auto targets = debugTargets(events);
  ASSERT_EQ(targets.size(), 1u);
  EXPECT_EQ(targets[0].name, "worker/1");
  EXPECT_EQ(targets[0].state, "attached");
  EXPECT_EQ(targets[0].address, "127.0.0.1:41001");
  auto json = nlohmann::json::parse(debugTargetsJson(targets));
  EXPECT_EQ(json["ranks"][0]["host"], "127.0.0.1");
  EXPECT_EQ(json["ranks"][0]["port"], 41001);
  EXPECT_EQ(json["ranks"][0]["node"], 0);
}

TEST(DebugTargets, NoneAfterTheEndOrFromAnEarlierAttempt) {
  std::vector<Event> ended = {debugEvent(0, "waiting"), stateEvent(2, "failed")};
  EXPECT_TRUE(debugTargets(ended).empty());
  Event restart = stateEvent(3, "restarting");
  restart.attempt = 1;
  std::vector<Event> restarted = {debugEvent(0, "waiting"), restart, debugEvent(1, "waiting", 1),
                                  debugEvent(2, "waiting", 0)};
  auto targets = debugTargets(restarted);
  ASSERT_EQ(targets.size(), 1u);
  EXPECT_EQ(targets[0].rank, 1);
  EXPECT_EQ(targets[0].attempt, 1);
}

TEST(DebugTargets, TheEventRoundTripsAndRefusesUnknownStates) {
  Event e = debugEvent(5, "waiting");
  e.where = "ValueError: x at train.py:9";
  auto back = decodeEvent(encodeEvent(e));
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(back->kind, EventKind::kDebug);
  EXPECT_EQ(back->where, e.where);
  EXPECT_EQ(back->address, e.address);
  EXPECT_EQ(back->state, "waiting");
  e.state = "dancing";
  EXPECT_FALSE(decodeEvent(encodeEvent(e)));
}

}  // namespace
}  // namespace cohort::job
