#include "cli/debug_cmd.h"

#include <gtest/gtest.h>

namespace cohort::cli {
namespace {

using Json = nlohmann::json;

const Json kTargets = Json::parse(R"([
  {"name": "worker/1", "rank": 1, "node": 0, "host": "127.0.0.1", "port": 41001},
  {"name": "worker/3", "rank": 3, "node": 1, "host": "127.0.0.1", "port": 41003}])");

TEST(VsCodeLaunch, OneAttachConfigurationPerRankAndACompound) {
  auto launch = vscodeLaunch("j1", kTargets, "", "");
  ASSERT_EQ(launch["configurations"].size(), 2u);
  const auto& c = launch["configurations"][1];
  EXPECT_EQ(c["name"], "cohort: j1 worker/3");
  EXPECT_EQ(c["request"], "attach");
  EXPECT_EQ(c["type"], "debugpy");
  EXPECT_EQ(c["connect"]["port"], 41003);
  EXPECT_EQ(c["connect"]["host"], "127.0.0.1");
  EXPECT_FALSE(c.contains("pathMappings")) << "a local job runs the files the IDE has open";
  ASSERT_EQ(launch["compounds"].size(), 1u);
  EXPECT_EQ(launch["compounds"][0]["configurations"].size(), 2u);
}

TEST(VsCodeLaunch, ARemoteJobMapsTheLocalRootToItsWorkdir) {
  auto launch = vscodeLaunch("j1", Json::array({kTargets[0]}), "", "/srv/jobs/j1/work/code");
  const auto& maps = launch["configurations"][0]["pathMappings"];
  ASSERT_EQ(maps.size(), 1u);
  EXPECT_EQ(maps[0]["localRoot"], "${workspaceFolder}");
  EXPECT_EQ(maps[0]["remoteRoot"], "/srv/jobs/j1/work/code");
  EXPECT_FALSE(launch.contains("compounds"));
}

TEST(VsCodeLaunch, MergingKeepsOtherConfigurationsAndReplacesThisJobs) {
  const std::string existing = R"({
    // a comment, as VS Code allows
    "version": "0.2.0",
    "configurations": [
      {"name": "Python: Current File", "type": "debugpy", "request": "launch"},
      {"name": "cohort: j1 worker/9", "type": "debugpy", "request": "attach"},
      {"name": "cohort: j2 worker/0", "type": "debugpy", "request": "attach"}
    ]})";
  auto merged = mergeLaunch(existing, vscodeLaunch("j1", kTargets, "", ""), "j1");
  ASSERT_TRUE(merged) << merged.error().message;
  std::vector<std::string> names;
  for (const auto& c : (*merged)["configurations"]) names.push_back(c["name"]);
  EXPECT_EQ(names, (std::vector<std::string>{"Python: Current File", "cohort: j2 worker/0",
                                             "cohort: j1 worker/1", "cohort: j1 worker/3"}));
  EXPECT_FALSE(mergeLaunch("[1, 2]", vscodeLaunch("j1", kTargets, "", ""), "j1"));
  EXPECT_FALSE(mergeLaunch("{", vscodeLaunch("j1", kTargets, "", ""), "j1"));
  EXPECT_FALSE(mergeLaunch(std::string(1000, '['), vscodeLaunch("j1", kTargets, "", ""), "j1"));
}

}  // namespace
}  // namespace cohort::cli
