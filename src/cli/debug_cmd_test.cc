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
  auto runs = [](const std::string&) { return true; };
  auto merged = mergeLaunch(existing, vscodeLaunch("j1", kTargets, "", ""), "j1", runs);
  ASSERT_TRUE(merged) << merged.error().message;
  std::vector<std::string> names;
  for (const auto& c : (*merged)["configurations"]) names.push_back(c["name"]);
  EXPECT_EQ(names, (std::vector<std::string>{"Python: Current File", "cohort: j2 worker/0",
                                             "cohort: j1 worker/1", "cohort: j1 worker/3"}));
  EXPECT_FALSE(mergeLaunch("[1, 2]", vscodeLaunch("j1", kTargets, "", ""), "j1", runs));
  EXPECT_FALSE(mergeLaunch("{", vscodeLaunch("j1", kTargets, "", ""), "j1", runs));
  EXPECT_FALSE(
      mergeLaunch(std::string(1000, '['), vscodeLaunch("j1", kTargets, "", ""), "j1", runs));
}

// Every old job's entries would pile up: those of a job that ended go, each job asked once; the
// user's own configurations and compounds stay.
TEST(VsCodeLaunch, MergingDropsTheConfigurationsOfJobsThatEnded) {
  const std::string existing = R"({
    "version": "0.2.0",
    "configurations": [
      {"name": "Python: Current File", "type": "debugpy", "request": "launch"},
      {"name": "cohort: old-1 worker/0", "type": "debugpy", "request": "attach"},
      {"name": "cohort: old-1 worker/1", "type": "debugpy", "request": "attach"},
      {"name": "cohort: live-2 worker/0", "type": "debugpy", "request": "attach"},
      {"name": "cohort:old-3", "type": "debugpy", "request": "attach"}
    ],
    "compounds": [
      {"name": "cohort: old-1 every paused rank", "configurations": []},
      {"name": "mine", "configurations": ["Python: Current File"]}
    ]})";
  std::vector<std::string> asked;
  auto runs = [&](const std::string& job) {
    asked.push_back(job);
    return job == "live-2";
  };
  auto merged = mergeLaunch(existing, vscodeLaunch("j1", Json::array({kTargets[0]}), "", ""),
                            "j1", runs);
  ASSERT_TRUE(merged) << merged.error().message;
  std::vector<std::string> names;
  for (const auto& c : (*merged)["configurations"]) names.push_back(c["name"]);
  EXPECT_EQ(names, (std::vector<std::string>{"Python: Current File", "cohort: live-2 worker/0",
                                             "cohort:old-3", "cohort: j1 worker/1"}));
  EXPECT_EQ(asked, (std::vector<std::string>{"old-1", "live-2"}));
  ASSERT_EQ((*merged)["compounds"].size(), 1u);
  EXPECT_EQ((*merged)["compounds"][0]["name"], "mine");

  // The last old job gone and no compound of ours: no empty "compounds" is left behind.
  auto alone = mergeLaunch(R"({"configurations": [], "compounds": [
      {"name": "cohort: old-1 every paused rank", "configurations": []}]})",
                           vscodeLaunch("j1", Json::array({kTargets[0]}), "", ""), "j1", runs);
  ASSERT_TRUE(alone);
  EXPECT_FALSE(alone->contains("compounds")) << alone->dump();
}

}  // namespace
}  // namespace cohort::cli
