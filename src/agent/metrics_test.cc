#include "agent/metrics.h"

#include <gtest/gtest.h>

namespace cohort::agent {
namespace {

TEST(MetricLine, ARecordHasItsStepAndValuesInOrder) {
  auto r = parseMetricLine("cohort.log step=120 loss=0.4187 accuracy=0.912 lr=1e-3\r");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->step, 120);
  ASSERT_EQ(r->values.size(), 3u);
  EXPECT_EQ(r->values[0].first, "loss");
  EXPECT_DOUBLE_EQ(r->values[2].second, 0.001);
  EXPECT_EQ(metricJson(5, 3, *r),
            "{\"t\":5,\"rank\":3,\"step\":120,\"loss\":0.4187,\"accuracy\":0.912,\"lr\":0.001}");
  auto nan = parseMetricLine("cohort.log loss=nan");
  ASSERT_TRUE(nan);
  EXPECT_FALSE(nan->step);
  EXPECT_EQ(metricJson(1, 0, *nan), "{\"t\":1,\"rank\":0,\"loss\":null}");
}

TEST(MetricLine, AnythingElseIsNotARecord) {
  for (const char* line :
       {"loss=0.5", "cohort.log", "cohort.log step=3", "cohort.log loss", "cohort.log loss=abc",
        "cohort.log loss=0.5x", "cohort.log 9x=1", "cohort.log a\"b=1", "cohort.log step=1.5 a=1",
        "cohort.log a=1 a=2", "cohort.log rank=1", "cohort.log t=1", "cohort.log step=1 step=2 a=1",
        "cohort.log a=1e999999", " cohort.log a=1", "cohort.logx a=1"}) {
    EXPECT_FALSE(parseMetricLine(line)) << line;
  }
  std::string many = "cohort.log";
  for (int i = 0; i < 65; ++i) many += " k" + std::to_string(i) + "=1";
  EXPECT_FALSE(parseMetricLine(many));
  EXPECT_FALSE(parseMetricLine("cohort.log " + std::string(65, 'k') + "=1"));
}

}  // namespace
}  // namespace cohort::agent
