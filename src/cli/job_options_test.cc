#include "cli/job_options.h"

#include <gtest/gtest.h>

#include <regex>
#include <sstream>

namespace cohort::cli {
namespace {

// cohort submit picks its own flags out of the job's with jobFlagTakesValue: every flag the
// help shows with a value ("--nodes N") must be one that takes a value, and the others not.
TEST(JobFlags, EveryFlagInTheHelpTakesAValueExactlyWhenTheHelpShowsOne) {
  std::istringstream help(jobFlagsHelp("run"));
  const std::regex line(R"(^  (?:(-\w), )?(--[a-z_-]+)( [A-Z][A-Z|=a-z,\[\]]*)?\s)");
  int seen = 0;
  for (std::string text; std::getline(help, text);) {
    std::smatch m;
    if (!std::regex_search(text, m, line)) continue;
    ++seen;
    const bool shown_with_value = m[3].matched;
    EXPECT_EQ(jobFlagTakesValue(m[2]), shown_with_value) << text;
    if (m[1].matched) {
      EXPECT_EQ(jobFlagTakesValue(m[1]), shown_with_value) << text;
    }
  }
  EXPECT_GT(seen, 20);
}

Result<spec::JobSpec> specOf(std::vector<std::string> args) {
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  auto options = parseJobOptions("run", static_cast<int>(argv.size()), argv.data(), 0);
  if (!options) return tl::unexpected(options.error());
  return buildSpec(*options);
}

TEST(JobFlags, PreloadChoosesThePreloadLauncherWithItsModules) {
  auto s = specOf({"--preload", "torch,numpy", "--", "python3", "train.py"});
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_EQ(s->launcher, spec::Launcher::kPreload);
  EXPECT_EQ(s->preload, (std::vector<std::string>{"torch", "numpy"}));
  EXPECT_TRUE(s->preload_given);

  s = specOf({"--preload", "torch,", "--", "python3", "train.py"});
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().message.rfind("--preload: preload[1]: '' is not", 0), 0u)
      << s.error().message;
  s = specOf({"--preload=", "--", "python3", "train.py"});  // not taken for no flag at all
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().message.rfind("--preload: names no module", 0), 0u) << s.error().message;
  s = specOf({"--launcher", "direct", "--preload", "torch", "--", "python3", "train.py"});
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("this command gives --launcher direct"), std::string::npos)
      << s.error().message;
}

// A job that names none is named after its script, whatever the command looks like, and the
// name always passes validation.
TEST(JobFlags, EveryCommandGivesAValidJobName) {
  using V = std::vector<std::string>;
  EXPECT_EQ(nameFromCommand(V{"python3", "ddp.py"}), "ddp");
  EXPECT_EQ(nameFromCommand(V{"./bin/hello"}), "hello");
  EXPECT_EQ(nameFromCommand(V{"python3", "-m", "pkg.train"}), "pkg");
  EXPECT_EQ(nameFromCommand(V{"sleep", "0.5"}), "sleep");  // a number is no script
  EXPECT_EQ(nameFromCommand(V{"sh", "-c", "cd /data/set-1 && python3 train.py --lr 0.1"}),
            "train");
  EXPECT_EQ(nameFromCommand(V{"env", "A=b.c", "my prog!.sh"}), "prog");
  EXPECT_EQ(nameFromCommand(V{"+++"}), "job");
  EXPECT_EQ(nameFromCommand(V{}), "job");
  const std::string shell =
      "for i in 1 2 3; do echo $i; done; " + std::string(100, 'x') + ".sh; echo done";
  EXPECT_EQ(nameFromCommand(V{"sh", "-c", shell}), std::string(kDerivedNameBytes, 'x'));
  for (const V& command : {V{"sh", "-c", shell}, V{"sh", "-c", "echo 'a   b' && exit 3"},
                           V{"/usr/bin/env", "--", "my-tool_v2.3"}, V{"a---b", "-.-"}}) {
    V args = {"--"};
    args.insert(args.end(), command.begin(), command.end());
    auto s = specOf(args);
    ASSERT_TRUE(s) << s.error().message;
    EXPECT_LE(s->name.size(), kDerivedNameBytes) << s->name;
  }
}

// `cohort run job.yaml` would take the job file for the command and fail on a program missing
// from PATH; it is told where the job file goes.
TEST(JobFlags, AJobFileGivenAsTheCommandIsPointedToDashF) {
  for (const char* name : {"job.yaml", "sub/job.yml", "job.json"}) {
    auto s = specOf({"--nodes", "2", name});
    ASSERT_FALSE(s) << name;
    EXPECT_EQ(s.error().message, std::string("'") + name +
                                     "' looks like a job file: give it "
                                     "with -f " +
                                     name +
                                     " (a command whose first word is a file "
                                     "of that name goes after --)");
  }
  auto s = specOf({"--", "job.yaml"});
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_EQ(s->command, (std::vector<std::string>{"job.yaml"}));
  s = specOf({"python3", "make.yaml"});  // only the first word of the command
  ASSERT_TRUE(s) << s.error().message;
}

// --cpus, --memory and --gpus are each process's resources, the job's one role's.
TEST(JobFlags, ResourceFlagsSetTheRolesResourcesPerProcess) {
  auto s = specOf({"--nodes", "2", "--nproc-per-node", "2", "--cpus", "0.5", "--memory", "2Gi",
                   "--gpus", "0", "--", "python3", "train.py"});
  ASSERT_TRUE(s) << s.error().message;
  ASSERT_EQ(s->roles.size(), 1u);
  EXPECT_EQ(s->roles[0].resources.cpus, 0.5);
  EXPECT_TRUE(s->roles[0].resources.cpus_given);
  EXPECT_EQ(s->roles[0].resources.memory_bytes, 2LL << 30);
  EXPECT_EQ(s->roles[0].resources.gpus, 0);

  for (const auto& [args, message] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--cpus", "0"}, "--cpus: expected a positive number of CPUs per process"},
           {{"--cpus", "lots"}, "--cpus: expected a positive number of CPUs per process"},
           {{"--memory", "2 apples"}, "--memory: expected a size per process"},
           {{"--gpus", "-1"}, "--gpus: expected a number of GPUs per process"},
           {{"--cpus", "5000"}, "--cpus"}}) {
    std::vector<std::string> words = args;
    words.insert(words.end(), {"--", "python3", "train.py"});
    s = specOf(words);
    ASSERT_FALSE(s) << args[0] << " " << args[1];
    EXPECT_EQ(s.error().message.rfind(message, 0), 0u) << s.error().message;
  }
}

Result<JobOptions> optionsOf(std::vector<std::string> args) {
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  return parseJobOptions("run", static_cast<int>(argv.size()), argv.data(), 0);
}

TEST(TorchrunFlags, BothSpellingsOfItsOwnFlagsAreCohorts) {
  auto s = specOf({"--nnodes", "2", "--nproc_per_node=3", "--max_restarts", "1", "--master-port",
                   "29500", "--", "python3", "train.py"});
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_EQ(s->roles[0].nodes, 2);
  EXPECT_EQ(s->roles[0].procs_per_node, 3);
  EXPECT_EQ(s->policy.max_restarts, 1);
  EXPECT_EQ(s->env, (spec::KeyValues{{"MASTER_PORT", "29500"}}));
  s = specOf({"--nproc-per-node", "gpu", "--", "python3", "train.py"});
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_EQ(s->roles[0].procs_per_node, spec::kAutoProcs);
}

TEST(TorchrunFlags, OnesThatMeanNothingHereAreTakenWithANote) {
  auto o = optionsOf({"--standalone", "--rdzv-backend", "c10d", "--tee=3", "--log_dir", "/tmp/x",
                      "--", "python3", "train.py"});
  ASSERT_TRUE(o) << o.error().message;
  EXPECT_EQ(o->command, (std::vector<std::string>{"python3", "train.py"}));
  ASSERT_EQ(o->notes.size(), 4u);
  EXPECT_EQ(o->notes[0].rfind("--standalone changes nothing: cohort's coordinator is", 0), 0u)
      << o->notes[0];
  EXPECT_EQ(o->notes[3].rfind("--log_dir changes nothing: every rank's whole output", 0), 0u)
      << o->notes[3];
}

TEST(TorchrunFlags, OnesCohortCannotHonourAreRefusedWithWhatToUse) {
  auto o = optionsOf({"--rdzv_endpoint", "10.0.0.1:29400", "--", "python3", "train.py"});
  ASSERT_FALSE(o);
  EXPECT_EQ(o.error().message.rfind("--rdzv_endpoint: torchrun's flag has no place in cohort run", 0),
            0u)
      << o.error().message;
  EXPECT_NE(o.error().message.find("--env MASTER_PORT=N"), std::string::npos) << o.error().message;
  o = optionsOf({"--local-ranks-filter", "0", "--", "python3", "train.py"});
  ASSERT_FALSE(o);
  EXPECT_NE(o.error().message.find("--log-ranks RANKS"), std::string::npos) << o.error().message;
}

TEST(TorchrunFlags, AnUnknownFlagNamesTheNearestKnownOne) {
  auto o = optionsOf({"--nproc-per-nod", "2", "--", "python3", "train.py"});
  ASSERT_FALSE(o);
  EXPECT_EQ(o.error().message,
            "run: unknown flag '--nproc-per-nod': did you mean --nproc-per-node? (see cohort run "
            "--help)");
  o = optionsOf({"--frobnicate", "--", "python3", "train.py"});
  ASSERT_FALSE(o);
  EXPECT_EQ(o.error().message, "run: unknown flag '--frobnicate' (see cohort run --help)");
}

}  // namespace
}  // namespace cohort::cli
