#include "agent/strangers.h"

#include <gtest/gtest.h>

namespace cohort::agent {
namespace {

using Clock = Strangers::Clock;
using std::chrono::seconds;

TEST(Strangers, PastItsCapacityTheOldestSilentOneGoesFirst) {
  Strangers strangers(3, Millis(10000));
  const Clock::time_point t0{};
  EXPECT_TRUE(strangers.admit(1, t0).empty());
  EXPECT_TRUE(strangers.admit(2, t0 + seconds(1)).empty());
  EXPECT_TRUE(strangers.admit(3, t0 + seconds(2)).empty());
  strangers.saidHello(1);  // perhaps an agent, mid-handshake: kept while silent ones can go
  EXPECT_EQ(strangers.admit(4, t0 + seconds(3)), std::vector<uint64_t>{2});
  EXPECT_EQ(strangers.admit(5, t0 + seconds(3)), std::vector<uint64_t>{3});
  EXPECT_EQ(strangers.admit(6, t0 + seconds(3)), std::vector<uint64_t>{4});
  EXPECT_EQ(strangers.size(), 3u);
  strangers.saidHello(5);
  strangers.saidHello(6);
  EXPECT_EQ(strangers.admit(7, t0 + seconds(4)), std::vector<uint64_t>{1}) << "all greeted";
  EXPECT_EQ(strangers.size(), 3u);
}

TEST(Strangers, NoneOutlivesItsDeadline) {
  Strangers strangers(100, Millis(10000));
  const Clock::time_point t0{};
  EXPECT_FALSE(strangers.nextDeadline());
  (void)strangers.admit(1, t0);
  (void)strangers.admit(2, t0 + seconds(2));
  (void)strangers.admit(3, t0 + seconds(4));
  strangers.saidHello(2);
  EXPECT_EQ(*strangers.nextDeadline(), t0 + seconds(10));
  EXPECT_TRUE(strangers.expired(t0 + seconds(9)).empty());
  EXPECT_EQ(strangers.expired(t0 + seconds(10)), std::vector<uint64_t>{1});
  EXPECT_EQ(*strangers.nextDeadline(), t0 + seconds(12)) << "the greeted one's";
  strangers.forget(2);  // it proved the secret
  EXPECT_EQ(*strangers.nextDeadline(), t0 + seconds(14));
  EXPECT_EQ(strangers.expired(t0 + seconds(60)), std::vector<uint64_t>{3});
  EXPECT_EQ(strangers.size(), 0u);
  EXPECT_FALSE(strangers.nextDeadline());
}

TEST(Strangers, TheCapacityLeavesRoomForEveryNodeOfTheJob) {
  EXPECT_EQ(Strangers::capacityFor(1), 128u);
  EXPECT_EQ(Strangers::capacityFor(1000), 2000u);
}

}  // namespace
}  // namespace cohort::agent
