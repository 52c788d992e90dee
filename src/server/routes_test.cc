// The route table's path patterns: what each kind of capture matches, and that matching costs
// one pass whatever the path holds (a path of a million bytes is matched, not recursed over).
#include "server/routes.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace cohort::server {
namespace {

std::vector<std::string> capturesOf(const char* pattern, const std::string& path) {
  std::vector<std::string> captures;
  if (!PathPattern(pattern).match(path, captures)) return {"<no match>"};
  return captures;
}

using V = std::vector<std::string>;
const V kNo = {"<no match>"};

TEST(PathPattern, LiteralsMatchExactly) {
  EXPECT_EQ(capturesOf("/v1/jobs", "/v1/jobs"), V{});
  EXPECT_EQ(capturesOf("/v1/jobs", "/v1/jobs/"), kNo);
  EXPECT_EQ(capturesOf("/v1/jobs", "/v1/job"), kNo);
  EXPECT_EQ(capturesOf("/v1/jobs", "/v1/jobsx"), kNo);
  EXPECT_EQ(capturesOf("/v1/jobs", "/v1"), kNo);
  EXPECT_EQ(capturesOf("/v1/jobs", "v1/jobs"), kNo);
  EXPECT_EQ(capturesOf("/v1/jobs", ""), kNo);
}

TEST(PathPattern, ASegmentCaptureTakesOneNonEmptySegment) {
  EXPECT_EQ(capturesOf("/v1/jobs/{id}", "/v1/jobs/a-1"), V{"a-1"});
  EXPECT_EQ(capturesOf("/v1/jobs/{id}", "/v1/jobs/"), kNo);
  EXPECT_EQ(capturesOf("/v1/jobs/{id}", "/v1/jobs/a/b"), kNo);
  EXPECT_EQ(capturesOf("/v1/jobs/{id}/logs", "/v1/jobs/a/logs"), V{"a"});
  EXPECT_EQ(capturesOf("/v1/jobs/{id}/logs", "/v1/jobs//logs"), kNo);
  EXPECT_EQ(capturesOf("/v1/jobs/{id}/logs", "/v1/jobs/a/logs/"), kNo);
}

TEST(PathPattern, ARestCaptureTakesTheRestSlashesIncluded) {
  EXPECT_EQ(capturesOf("/v1/jobs/{id}/outputs/{path+}", "/v1/jobs/j/outputs/a/b.pt"),
            (V{"j", "a/b.pt"}));
  EXPECT_EQ(capturesOf("/v1/jobs/{id}/outputs/{path+}", "/v1/jobs/j/outputs/"), kNo);
  EXPECT_EQ(capturesOf("/v1/jobs/{id}/outputs/{path+}", "/v1/jobs/j/outputs"), kNo);
  // {x*}: the rest may be empty, and then the slash before it too.
  EXPECT_EQ(capturesOf("/v1/store/{bucket}/{path*}", "/v1/store/b"), (V{"b", ""}));
  EXPECT_EQ(capturesOf("/v1/store/{bucket}/{path*}", "/v1/store/b/"), (V{"b", ""}));
  EXPECT_EQ(capturesOf("/v1/store/{bucket}/{path*}", "/v1/store/b/x//y"), (V{"b", "x//y"}));
  EXPECT_EQ(capturesOf("/v1/store/{bucket}/{path*}", "/v1/store/"), kNo);
}

TEST(PathPattern, LiteralsMayFollowARestCapture) {
  EXPECT_EQ(capturesOf("/v1/environments/{name+}/log", "/v1/environments/a/log"), V{"a"});
  EXPECT_EQ(capturesOf("/v1/environments/{name+}/log", "/v1/environments/a/b/log"),
            V{"a/b"});
  EXPECT_EQ(capturesOf("/v1/environments/{name+}/log", "/v1/environments/log"), kNo);
  EXPECT_EQ(capturesOf("/v1/environments/{name+}/log", "/v1/environments/alog"), kNo);
  EXPECT_EQ(capturesOf("/v1/environments/{name+}", "/v1/environments/../x"), V{"../x"});
}

TEST(PathPattern, NamesShowCapturesAsTheDocumentDoes) {
  EXPECT_EQ(PathPattern("/v1/store/{bucket}/{path*}").name(), "/v1/store/{bucket}/{path}");
  EXPECT_EQ(PathPattern("/v1/environments/{name+}/log").name(), "/v1/environments/{name}/log");
}

TEST(PathPattern, AHugePathIsMatchedInOnePass) {
  // libstdc++'s std::regex recursed once per byte here and overflowed the stack.
  const std::string huge = "/v1/jobs/" + std::string(4 << 20, 'a');
  std::vector<std::string> captures;
  EXPECT_TRUE(PathPattern("/v1/jobs/{id}").match(huge, captures));
  EXPECT_EQ(captures.at(0).size(), size_t{4} << 20);
  EXPECT_TRUE(PathPattern("/v1/store/{bucket}/{path*}").match("/v1/store/b/" + huge, captures));
  EXPECT_FALSE(PathPattern("/v1/environments/{name+}/log").match(huge, captures));
}

TEST(RouteTable, TheFirstRouteOfTheMethodWinsAndOtherMethodsAreKnown) {
  RouteTable<int> table;
  table.add({"GET", "/v1/environments/{name+}/log"}, 1);
  table.add({"GET", "/v1/environments/{name+}"}, 2);
  table.add({"PUT", "/v1/environments/{name+}"}, 3);
  std::vector<std::string> captures;
  bool known = false;
  EXPECT_EQ(table.match("GET", "/v1/environments/e/log", captures)->handler, 1);
  EXPECT_EQ(table.match("GET", "/v1/environments/e", captures)->handler, 2);
  EXPECT_EQ(table.match("PUT", "/v1/environments/e", captures)->handler, 3);
  EXPECT_EQ(table.match("DELETE", "/v1/environments/e", captures, &known), nullptr);
  EXPECT_TRUE(known);
  EXPECT_EQ(table.match("GET", "/v1/nothing", captures, &known), nullptr);
  EXPECT_FALSE(known);
}

}  // namespace
}  // namespace cohort::server
