// What reaches a rank's environment: the user's own shell's on their machine, and on a server
// nothing of the server's but cohort's base and the plan's variables.
#include "agent/rank_env.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace cohort::agent {
namespace {

std::string valueOf(const std::vector<std::string>& env, const std::string& name) {
  std::string found = "<unset>";
  int seen = 0;
  for (const std::string& entry : env) {
    if (entry.compare(0, name.size() + 1, name + "=") == 0) {
      found = entry.substr(name.size() + 1);
      ++seen;
    }
  }
  EXPECT_LE(seen, 1) << name << " is set " << seen << " times";
  return found;
}

const std::vector<std::string_view> kServerEnvironment = {
    "PATH=/root/.pyenv/shims:/usr/sbin:/usr/bin", "HOME=/root", "HF_TOKEN=hf_secret",
    "GITHUB_TOKEN=ghp_secret", "LD_PRELOAD=/opt/evil.so", "COHORT_JOB_SECRET=abc",
    "COHORT_STORE=s3://b", "COHORT_STORE_SECRET_KEY=k", "COHORT_ENVS=/srv/envs",
    "CUDA_VISIBLE_DEVICES=", "LANG=de_DE.UTF-8"};

plan::RankPlan rank(bool sandboxed, int uid) {
  plan::RankPlan r;
  r.sandboxed = sandboxed;
  r.uid = uid;
  r.gid = uid;
  r.env = {{"COHORT_RANK", "0"},
           {"COHORT_WORK_DIR", "/data/jobs/j1/work/node0"},
           {"COHORT_RESTART_COUNT", "0"},
           {"OMP_NUM_THREADS", "1"}};
  return r;
}

TEST(RankEnvironment, AUsersOwnRankInheritsTheirEnvironmentButNotTheJobsSecretOrTheStore) {
  auto env = rankEnvironment(rank(false, -1), 2, kServerEnvironment);
  EXPECT_EQ(valueOf(env, "HF_TOKEN"), "hf_secret");
  EXPECT_EQ(valueOf(env, "PATH"), "/root/.pyenv/shims:/usr/sbin:/usr/bin");
  EXPECT_EQ(valueOf(env, "COHORT_JOB_SECRET"), "<unset>");
  EXPECT_EQ(valueOf(env, "COHORT_STORE"), "<unset>");
  EXPECT_EQ(valueOf(env, "COHORT_STORE_SECRET_KEY"), "<unset>");
  EXPECT_EQ(valueOf(env, "COHORT_RESTART_COUNT"), "2");
  EXPECT_EQ(valueOf(env, "OMP_NUM_THREADS"), "1");
}

TEST(RankEnvironment, ASandboxedRankGetsNothingOfTheServersEnvironment) {
  for (const auto& r : {rank(true, -1), rank(true, 2000001), rank(false, 2000001)}) {
    auto env = rankEnvironment(r, 0, kServerEnvironment);
    for (const char* name : {"HF_TOKEN", "GITHUB_TOKEN", "LD_PRELOAD", "COHORT_JOB_SECRET",
                             "COHORT_STORE", "COHORT_STORE_SECRET_KEY", "COHORT_ENVS"}) {
      EXPECT_EQ(valueOf(env, name), "<unset>") << name;
    }
    EXPECT_EQ(valueOf(env, "PATH"), "/usr/local/bin:/usr/bin:/bin");
    EXPECT_EQ(valueOf(env, "HOME"), "/data/jobs/j1/work/node0");
    EXPECT_EQ(valueOf(env, "LANG"), "C.UTF-8");
    EXPECT_EQ(valueOf(env, "TERM"), "dumb");
    // The server gave the job no GPU: CUDA sees none.
    EXPECT_EQ(valueOf(env, "CUDA_VISIBLE_DEVICES"), "");
    EXPECT_EQ(valueOf(env, "COHORT_RANK"), "0");
    EXPECT_EQ(valueOf(env, "OMP_NUM_THREADS"), "1");
  }
}

TEST(RankEnvironment, TheJobsOwnVariablesWinOverTheBase) {
  plan::RankPlan r = rank(true, 2000001);
  r.env.push_back({"PATH", "/venv/bin:/usr/bin"});
  r.env.push_back({"HOME", "/home/me"});
  r.env.push_back({"LD_PRELOAD", "/work/mine.so"});  // its own: it applies inside the sandbox
  r.env.push_back({"CUDA_VISIBLE_DEVICES", "1"});
  auto env = rankEnvironment(r, 0, kServerEnvironment);
  EXPECT_EQ(valueOf(env, "PATH"), "/venv/bin:/usr/bin");
  EXPECT_EQ(valueOf(env, "HOME"), "/home/me");
  EXPECT_EQ(valueOf(env, "LD_PRELOAD"), "/work/mine.so");
  EXPECT_EQ(valueOf(env, "CUDA_VISIBLE_DEVICES"), "1");
}

TEST(RankEnvironment, WithoutAWorkDirectoryHomeIsTheRoot) {
  plan::RankPlan r;
  r.sandboxed = true;
  auto env = rankEnvironment(r, 0, {});
  EXPECT_EQ(valueOf(env, "HOME"), "/");
  EXPECT_EQ(valueOf(env, "CUDA_VISIBLE_DEVICES"), "<unset>");
}

}  // namespace
}  // namespace cohort::agent
