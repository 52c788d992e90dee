// What environments decide without building anything: which requirements a server takes, how a
// lock file reads, content hashes, where a name is found among several stores, a node's copy,
// and the sandbox a confined build runs in. Builds with pip are tested in
// tests/integration/env_test.cc and server_test.cc.
#include "env/environments.h"

#include <gtest/gtest.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "env/confined_build.h"
#include "env/node_copy.h"
#include "util/fd.h"
#include "util/temp_dir_for_tests.h"

namespace cohort::env {
namespace {

// A saved environment as a build leaves it, without building one.
void fakeSaved(const std::string& store, const std::string& name, const std::string& from,
               const std::string& hash) {
  ASSERT_TRUE(makeDirs(store + "/" + name + "/venv/bin"));
  nlohmann::json def = {{"name", name},
                        {"from", from},
                        {"requirements", {"termcolor==3.3.0"}},
                        {"python_version", "3.11.2"},
                        {"hash", hash}};
  ASSERT_TRUE(writeFileAtomic(store + "/" + name + "/lock.txt", "termcolor==3.3.0\n", false));
  ASSERT_TRUE(writeFileAtomic(store + "/" + name + "/env.json", def.dump(), false));
}

TEST(Requirements, PackagesByNameAreTakenAndNothingElse) {
  for (const char* ok :
       {"termcolor", "termcolor==3.3.0", "requests[socks]>=2,<3", "Foo.Bar_baz ~= 1.4",
        "numpy; python_version < \"3.12\"", "x===1.0+local"}) {
    EXPECT_TRUE(checkRequirement(ok)) << ok;
  }
  for (const char* bad :
       {"file:///etc/passwd", "/tmp/pkg", "./pkg", "pkg @ file:///tmp/pkg.whl",
        "pkg @ https://example.invalid/p.whl", "-e .", "--index-url=http://x", "-r /etc/shadow",
        "git+https://x/y.git", "", "pkg==1.0 --hash=sha256:x", "pkg; python_version < '3' @ x"}) {
    auto r = checkRequirement(bad);
    EXPECT_FALSE(r) << bad;
    if (!r) {
      EXPECT_EQ(r.error().code, Code::kInvalidArgument);
      EXPECT_NE(r.error().message.find("URLs, paths and pip options are not taken"),
                std::string::npos);
    }
  }
  EXPECT_FALSE(checkRequirement("a" + std::string(300, 'b')));
}

TEST(LockFiles, PinsAreReadAndALineThatIsNotOneIsNamed) {
  auto pins = parseLock("# made by pip freeze\ntermcolor==3.3.0\n\n  six==1.17.0  \n");
  ASSERT_TRUE(pins) << pins.error().message;
  EXPECT_EQ(*pins, (std::vector<std::string>{"termcolor==3.3.0", "six==1.17.0"}));
  auto url = parseLock("six==1.17.0\nmine @ file:///home/alice/mine\n");
  ASSERT_FALSE(url);
  EXPECT_NE(url.error().message.find("line 2: 'mine @ file:///home/alice/mine' is not a pin"),
            std::string::npos)
      << url.error().message;
  EXPECT_FALSE(parseLock("-e git+https://x/y.git#egg=y\n"));
  EXPECT_FALSE(parseLock("six>=1\n"));
}

TEST(ContentHashes, FollowTheBaseTheRequirementsAndTheLockButNotTheOrderOfPins) {
  const std::string h = savedHash("base1", {"termcolor"}, {"termcolor==3.3.0", "six==1.17.0"});
  EXPECT_EQ(h.size(), 64u);
  EXPECT_EQ(h, savedHash("base1", {"termcolor"}, {"six==1.17.0", "termcolor==3.3.0"}));
  EXPECT_NE(h, savedHash("base2", {"termcolor"}, {"termcolor==3.3.0", "six==1.17.0"}));
  EXPECT_NE(h, savedHash("base1", {"termcolor", "six"}, {"termcolor==3.3.0", "six==1.17.0"}));
  EXPECT_NE(h, savedHash("base1", {"termcolor"}, {"termcolor==3.3.1", "six==1.17.0"}));
  EXPECT_NE(presetHash(*findPreset("pytorch")), presetHash(*findPreset("tensorflow")));
}

TEST(Stores, ANameIsFoundInTheFirstStoreThatHasItAndPresetsInTheLast) {
  TempDir own, team;
  fakeSaved(team.path(), "shared", "pytorch", "h-team");
  fakeSaved(team.path(), "both", "pytorch", "h-team-both");
  fakeSaved(own.path(), "both", "pytorch", "h-own-both");
  Store store({own.path(), team.path()});
  auto shared = store.get("shared");
  ASSERT_TRUE(shared) << shared.error().message;
  EXPECT_EQ(shared->store, team.path());
  EXPECT_EQ(shared->venv, team.path() + "/shared/venv");
  EXPECT_EQ(shared->hash, "h-team");
  auto both = store.get("both");
  ASSERT_TRUE(both);
  EXPECT_EQ(both->hash, "h-own-both");
  auto preset = store.get("pytorch");
  ASSERT_TRUE(preset);
  EXPECT_EQ(preset->dir, team.path() + "/pytorch");
  std::vector<std::string> names;
  for (const Environment& e : store.list()) names.push_back(e.name);
  EXPECT_EQ(names, (std::vector<std::string>{"system", "pytorch", "deepspeed", "jupyter",
                                             "tensorflow", "mindspore", "both", "shared"}));
  auto missing = store.get("nope");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, Code::kNotFound);
}

TEST(Stores, LayersGoDownToThePresetWithEachLayersLockAndStore) {
  TempDir own, team;
  // A preset counts as built once its env.json is there.
  ASSERT_TRUE(makeDirs(team.path() + "/pytorch"));
  ASSERT_TRUE(writeFileAtomic(team.path() + "/pytorch/env.json", "{\"name\": \"pytorch\"}", false));
  fakeSaved(team.path(), "teamenv", "pytorch", "h1");
  fakeSaved(own.path(), "mine", "teamenv", "h2");
  auto layers = Store({own.path(), team.path()}).layers("mine");
  ASSERT_TRUE(layers) << layers.error().message;
  ASSERT_EQ(layers->size(), 3u);
  EXPECT_EQ((*layers)[0].name, "pytorch");
  EXPECT_TRUE((*layers)[0].preset);
  EXPECT_EQ((*layers)[0].hash, presetHash(*findPreset("pytorch")));
  EXPECT_EQ((*layers)[1].name, "teamenv");
  EXPECT_EQ((*layers)[1].store, team.path());
  EXPECT_EQ((*layers)[2].store, own.path());
  EXPECT_EQ((*layers)[2].from, "teamenv");
  EXPECT_EQ((*layers)[2].lock, "termcolor==3.3.0\n");
  EXPECT_EQ((*layers)[2].hash, "h2");
  // A definition that names itself is not followed for ever.
  fakeSaved(own.path(), "loop", "loop", "h3");
  EXPECT_FALSE(Store({own.path()}).layers("loop"));
}

// `env create` killed mid-pip leaves its directory without env.json: list() shows it, get()
// says what it is, remove() takes it away, and not while a build of it holds its lock.
TEST(Stores, WhatAKilledBuildLeftIsListedAndRemoved) {
  TempDir own;
  ASSERT_TRUE(makeDirs(own.path() + "/half/venv/lib"));
  ASSERT_TRUE(writeFileAtomic(own.path() + "/half/venv/lib/big", std::string(4096, 'x'), false));
  ASSERT_TRUE(makeDirs(own.path() + "/pytorch/venv"));  // a preset's build, killed too
  Store store({own.path()});
  std::vector<Environment> all = store.list();
  auto half = std::find_if(all.begin(), all.end(), [](const Environment& e) { return e.name == "half"; });
  ASSERT_NE(half, all.end());
  EXPECT_TRUE(half->incomplete);
  EXPECT_FALSE(half->built);
  EXPECT_EQ(half->dir, own.path() + "/half");
  EXPECT_NE(half->summary.find("cohort env rm half"), std::string::npos) << half->summary;
  auto preset = store.get("pytorch");
  ASSERT_TRUE(preset);
  EXPECT_TRUE(preset->incomplete);
  EXPECT_FALSE(store.get("tensorflow")->incomplete);  // never built: nothing left
  auto got = store.get("half");
  ASSERT_FALSE(got);
  EXPECT_EQ(got.error().code, Code::kFailedPrecondition);
  EXPECT_NE(got.error().message.find("cohort env rm half"), std::string::npos);
  {
    // A build running now holds the lock: what it has made so far stays.
    UniqueFd lock(::open((own.path() + "/.half.lock").c_str(), O_RDONLY | O_CREAT, 0644));
    ASSERT_EQ(::flock(lock.get(), LOCK_EX), 0);
    auto busy = store.remove("half");
    ASSERT_FALSE(busy);
    EXPECT_EQ(busy.error().code, Code::kFailedPrecondition) << busy.error().message;
    EXPECT_TRUE(std::filesystem::exists(own.path() + "/half/venv/lib/big"));
  }
  ASSERT_TRUE(store.remove("half"));
  EXPECT_FALSE(std::filesystem::exists(own.path() + "/half"));
  ASSERT_TRUE(store.remove("pytorch"));
  EXPECT_FALSE(std::filesystem::exists(own.path() + "/pytorch"));
  for (const Environment& e : store.list()) EXPECT_FALSE(e.incomplete) << e.name;
}

TEST(Stores, WhatABuildWroteIsNotReadThroughALink) {
  TempDir dir("cohort-env-test");
  ASSERT_TRUE(writeFileAtomic(dir.path() + "/secret", "{\"hash\": \"x\"}", false, 0600));
  ASSERT_TRUE(makeDirs(dir.path() + "/linked"));
  ASSERT_EQ(::symlink((dir.path() + "/secret").c_str(), (dir.path() + "/linked/env.json").c_str()),
            0);
  auto read = readBuiltFile(dir.path() + "/linked/env.json", 1024);
  ASSERT_FALSE(read);
  EXPECT_EQ(read.error().code, Code::kInvalidArgument);
  EXPECT_FALSE(Store({dir.path()}).get("linked"));
  EXPECT_FALSE(readBuiltFile(dir.path() + "/secret", 4)) << "over the limit";
}

TEST(NodeCopies, ALayerThereWithThePlansHashIsUsedAsItIs) {
  TempDir store("cohort-env-test");
  fakeSaved(store.path(), "mine", "pytorch", "h-mine");
  ASSERT_TRUE(makeDirs(store.path() + "/pytorch"));
  // Built before environments had hashes: taken as it is.
  ASSERT_TRUE(writeFileAtomic(store.path() + "/pytorch/env.json", "{}", false));
  std::vector<plan::EnvironmentLayer> layers = {
      {"pytorch", store.path(), presetHash(*findPreset("pytorch")), true, "", {}, ""},
      {"mine",
       store.path(),
       "h-mine",
       false,
       "pytorch",
       {"termcolor==3.3.0"},
       "termcolor==3.3.0\n"}};
  auto copy = copyToNode(layers, "/bin/false", {}, nullptr);
  ASSERT_TRUE(copy) << copy.error().message;
  EXPECT_EQ(copy->found, 2);
  EXPECT_EQ(copy->built, 0);
  // One of another content is built again, and a build that fails says so.
  layers[1].hash = "h-other";
  auto again = copyToNode(layers, "/bin/false", {}, nullptr);
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code, Code::kUnavailable) << again.error().message;
  EXPECT_FALSE(std::filesystem::exists(store.path() + "/mine")) << "nothing usable is left";
}

// A node builds a layer it lacks once: the second job on the node finds the copy the first
// built (its env.json has the plan's hash) and builds nothing. The builder here is a script
// that leaves an environment as `cohort env create` would and counts its runs.
TEST(NodeCopies, ALayerBuiltOnTheNodeIsBuiltOnceAndFoundByTheNextJob) {
  TempDir store, tools;
  ASSERT_TRUE(makeDirs(store.path() + "/pytorch"));
  ASSERT_TRUE(writeFileAtomic(store.path() + "/pytorch/env.json", "{}", false));
  const std::string runs = tools.path() + "/runs", builder = tools.path() + "/cohort";
  ASSERT_TRUE(writeFileAtomic(
      builder,
      "#!/bin/sh\n"
      "# cohort env create NAME --from BASE ...: made in the first of COHORT_ENVS\n"
      "echo \"$*\" >> " +
          runs +
          "\n"
          "dir=\"${COHORT_ENVS%%:*}/$3\"\n"
          "mkdir -p \"$dir/venv/bin\" && echo building $3\n"
          "printf '{\"name\": \"%s\", \"hash\": \"h-mine\"}' \"$3\" > \"$dir/env.json\"\n",
      false, 0755));
  std::vector<plan::EnvironmentLayer> layers = {
      {"pytorch", store.path(), presetHash(*findPreset("pytorch")), true, "", {}, ""},
      {"mine",
       store.path(),
       "h-mine",
       false,
       "pytorch",
       {"termcolor==3.3.0"},
       "termcolor==3.3.0\n"}};
  std::vector<std::string> lines;
  auto first = copyToNode(layers, builder, {}, [&](const std::string& l) { lines.push_back(l); });
  ASSERT_TRUE(first) << first.error().message;
  EXPECT_EQ(first->built, 1);
  EXPECT_EQ(first->found, 1);
  EXPECT_NE(std::find(lines.begin(), lines.end(), "building mine"), lines.end());
  EXPECT_EQ(readFile(runs).value_or(""),
            "env create mine --from pytorch --pip termcolor==3.3.0 --lock " + store.path() +
                "/.mine.pins.txt\n")
      << "built from the plan's lock file";
  auto second = copyToNode(layers, builder, {}, nullptr);
  ASSERT_TRUE(second) << second.error().message;
  EXPECT_EQ(second->built, 0);
  EXPECT_EQ(second->found, 2);
  const std::string all_runs = readFile(runs).value_or("");
  EXPECT_EQ(std::count(all_runs.begin(), all_runs.end(), '\n'), 1) << "one build, then none";
  // A build that leaves another content than the plan's is refused, naming both hashes.
  layers[1].hash = "h-planned";
  auto other = copyToNode(layers, builder, {}, nullptr);
  ASSERT_FALSE(other);
  EXPECT_EQ(other.error().code, Code::kFailedPrecondition);
  EXPECT_NE(other.error().message.find("not as planned"), std::string::npos)
      << other.error().message;
}

TEST(ConfinedBuilds, OnlyTheEnvironmentsDirectoryIsWritableAndTheDataRootIsHidden) {
  Confinement how{2000001, 2000001, true, {"/srv/cohort"}};
  auto argv =
      sandboxArgv(how, {"/srv/cohort/account-envs/alice", "/srv/cohort/envs"},
                  "/srv/cohort/account-envs/alice/extra", {"/tmp/b/cohort", "env", "create"});
  auto at = [&](const std::vector<std::string>& seq) {
    return std::search(argv.begin(), argv.end(), seq.begin(), seq.end()) - argv.begin();
  };
  ASSERT_EQ(argv.front(), "/usr/bin/bwrap");
  EXPECT_LT(at({"--ro-bind", "/", "/"}), at({"--tmpfs", "/srv/cohort"}));
  EXPECT_LT(at({"--tmpfs", "/srv/cohort"}),
            at({"--ro-bind-try", "/srv/cohort/envs", "/srv/cohort/envs"}));
  EXPECT_LT(at({"--ro-bind-try", "/srv/cohort/envs", "/srv/cohort/envs"}),
            at({"--bind", "/srv/cohort/account-envs/alice/extra",
                "/srv/cohort/account-envs/alice/extra"}));
  EXPECT_LT(at({"--tmpfs", "/tmp"}), static_cast<long>(argv.size()));
  EXPECT_LT(at({"--tmpfs", "/tmp"}), at({"--ro-bind", "/tmp/b/cohort", "/tmp/b/cohort"}))
      << "cohort itself stays visible where /tmp is hidden";
  EXPECT_LT(at({"--unshare-pid"}), static_cast<long>(argv.size()));
  EXPECT_EQ(std::count(argv.begin(), argv.end(), "--bind"), 1) << "one writable place";
  EXPECT_EQ(argv[argv.size() - 4], "--");
}

// pip runs the packages' own code as the account: nothing of the server's environment reaches
// it but the tools' path, the locale and how pip reaches its index.
TEST(ConfinedBuilds, TheServersSecretsDoNotReachABuild) {
  for (const char* kept : {"PATH=/usr/bin:/bin", "LANG=C.UTF-8", "LC_ALL=C", "TZ=UTC",
                           "PIP_INDEX_URL=https://pypi.example/simple", "https_proxy=http://p:3128",
                           "SSL_CERT_FILE=/etc/ssl/certs/ca.pem"}) {
    EXPECT_TRUE(buildMayKeep(kept)) << kept;
  }
  for (const char* dropped : {"HF_TOKEN=hf_x", "GITHUB_TOKEN=ghp_x", "AWS_SECRET_ACCESS_KEY=k",
                              "COHORT_STORE=s3://b", "DATABASE_URL=postgres://u:p@h/db",
                              "LD_PRELOAD=/x.so", "PYTHONPATH=/root/lib", "HOME=/root"}) {
    EXPECT_FALSE(buildMayKeep(dropped)) << dropped;
  }
}

}  // namespace
}  // namespace cohort::env
