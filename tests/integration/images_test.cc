// Image environments with the real binary, podman's storage and a real image: the one
// tests/images/build makes from a Debian root file system (python3, python3-torch,
// python3-sklearn, and /etc/cohort-test-image, which nothing else has). A ctest fixture builds
// it (label "images") and leaves its reference in the file $COHORT_TEST_IMAGE_FILE.
//
// The ranks run in the image (a gloo job, the PyTorch example), their supervision holds as it
// does without one (fail-fast, a stop signal reaching the process inside, the grace period,
// Ctrl-C: no process, no mount, no container left), and bad input is refused before anything
// starts.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>

#include "harness.h"

namespace cohort::testing {
namespace {

void expectAllGone(const std::vector<pid_t>& pids) {
  for (pid_t pid : pids) {
    EXPECT_TRUE(waitFor([&] { return processGone(pid); }, 5s)) << "process " << pid << " survived";
    if (!processGone(pid)) ::kill(pid, SIGKILL);
  }
}

// The processes (but this one) whose working directory is `dir` or below it.
std::vector<pid_t> processesIn(const std::string& dir) {
  std::vector<pid_t> out;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.empty() || !std::isdigit(static_cast<unsigned char>(name[0]))) continue;
    std::error_code ec;
    const std::string cwd = std::filesystem::read_symlink(entry.path() / "cwd", ec).string();
    const pid_t pid = std::atoi(name.c_str());
    if (!ec && pid != ::getpid() && (cwd == dir || cwd.rfind(dir + "/", 0) == 0) &&
        !processGone(pid)) {
      out.push_back(pid);
    }
  }
  return out;
}

// What the process table and podman say is left: nothing of the job whose workdir is `workdir`.
void expectNothingOfTheJobLeft(const std::string& workdir) {
  std::vector<pid_t> left;
  EXPECT_TRUE(waitFor([&] { return (left = processesIn(workdir)).empty(); }, 5s))
      << left.size()
      << " process(es) left: " << shellOutput("ps -o pid,args -p " + std::to_string(left.front()));
  EXPECT_EQ(shellOutput("podman ps -a --format '{{.Names}}' 2>/dev/null"), "");
  EXPECT_EQ(shellOutput("pgrep -x conmon"), "");
  // The ranks' mounts (an overlay whose writable layer is /tmp/upper where it was made) were in
  // namespaces of their own: none is on the host.
  EXPECT_EQ(shellOutput("grep 'upperdir=/tmp/upper' /proc/self/mountinfo"), "");
}

class Images : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* file = std::getenv("COHORT_TEST_IMAGE_FILE");
    image_ = file ? std::string(trim(readText(file))) : "";
    if (image_.empty()) {
      GTEST_SKIP() << "no test image: tests/images/build did not run (ctest -L images runs it "
                      "first, as the fixture images_build)";
    }
    root_ = tempDir();
    work_ = tempDir();
  }
  std::string_view trim(std::string_view s) {
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.remove_suffix(1);
    return s;
  }
  void write(const std::string& name, const std::string& text) {
    std::ofstream(work_ + "/" + name) << text;
  }
  std::vector<std::string> run(std::vector<std::string> args) {
    args.insert(args.begin(), {"run", "--data-root", root_, "--workdir", work_, "--image", image_});
    return args;
  }
  std::string image_, root_, work_;
};

TEST_F(Images, ATwoRankGlooJobRunsInTheImagesPython) {
  ASSERT_FALSE(std::filesystem::exists("/etc/cohort-test-image")) << "the host must not have it";
  write("allreduce.py", R"(import os, sys
import torch
import torch.distributed as dist
dist.init_process_group("gloo")
t = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(t)
marker = open("/etc/cohort-test-image").read().strip()
print("sum", t.item(), "in", marker, os.environ["COHORT_TEST_IMAGE"], sys.executable,
      os.environ["COHORT_RANK"], os.environ["WORLD_SIZE"], os.environ["COHORT_IMAGE"], flush=True)
open(os.path.join(os.environ["COHORT_OUTPUT_DIR"], "rank%s" % os.environ["RANK"]), "w").write("ok")
)");
  RunResult r = CohortProcess(run({"--nodes", "2", "--", "python3", "allreduce.py"})).wait(180s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string tag = image_.substr(image_.rfind(':') + 1);
  for (int rank = 0; rank < 2; ++rank) {
    const std::string line = "[worker/" + std::to_string(rank) + " node" + std::to_string(rank) +
                             "] sum 3.0 in " + tag + " " + tag + " /usr/bin/python3 " +
                             std::to_string(rank) + " 2 " + image_;
    EXPECT_TRUE(contains(r.out, line)) << line << "\n" << r.out;
    // The job's output directory is the one the ranks wrote.
    EXPECT_EQ(readText(onlyJobDir(root_) + "/output/rank" + std::to_string(rank)), "ok");
  }
  EXPECT_EQ(readJson(onlyJobDir(root_) + "/result.json")["state"], "succeeded");
  expectNothingOfTheJobLeft(work_);
}

TEST_F(Images, ThePyTorchExampleTrainsInTheImage) {
  const std::string example = sourceDir() + "/examples/pytorch";
  RunResult r = CohortProcess({"run", "--data-root", root_, "-f", example + "/ddp.yaml",
                               "--nproc-per-node", "1", "--image", image_})
                    .wait(300s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "[worker/0 node0]")) << r.out;
  EXPECT_TRUE(contains(r.out, "accuracy")) << r.out;
}

TEST_F(Images, AFailingRankIsTheRootCauseAndTheOthersAreStopped) {
  write("fail.py", R"(import os, sys, time
open(os.path.join(os.getcwd(), "pid%s" % os.environ["RANK"]), "w").write(str(os.getpid()))
if os.environ["RANK"] == "1":
    time.sleep(1)
    print("about to fail in", open("/etc/cohort-test-image").read().strip(), flush=True)
    sys.exit(7)
time.sleep(120)
)");
  RunResult r = CohortProcess(run({"--nodes", "2", "--", "python3", "fail.py"})).wait(120s);
  EXPECT_EQ(r.exit_code, 7) << r.err;
  EXPECT_TRUE(contains(r.err, "root cause: worker/1 on node 1 exited with code 7")) << r.err;
  EXPECT_TRUE(contains(r.err, "| about to fail in")) << r.err;
  EXPECT_TRUE(contains(r.err, "1 rank(s) were stopped by cohort")) << r.err;
  std::vector<pid_t> pids;
  for (const char* f : {"/pid0", "/pid1"}) pids.push_back(std::atoi(readText(work_ + f).c_str()));
  expectAllGone(pids);
  expectNothingOfTheJobLeft(work_);
}

TEST_F(Images, TheStopSignalReachesTheProcessInsideAndTheGracePeriodEndsInSigkill) {
  // Rank 0 saves on policy.stop_signal (SIGUSR1 here); rank 1 ignores it and is killed after
  // the grace period; rank 1's child left with setsid goes with the job too.
  write("stop.py", R"(import os, signal, subprocess, sys, time
rank = os.environ["RANK"]
def saved(sig, frame):
    print("rank", rank, "got", signal.Signals(sig).name, "and saved", flush=True)
    sys.exit(0)
if rank == "0":
    signal.signal(signal.SIGUSR1, saved)
else:
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    child = subprocess.Popen(["sleep", "300"], start_new_session=True)
    open("escaped", "w").write(str(child.pid))
open("pid" + rank, "w").write(str(os.getpid()))
print("rank", rank, "ready", flush=True)
time.sleep(300)
)");
  write("job.yaml",
        "name: stops\nframework: pytorch\ncommand: [python3, stop.py]\n"
        "roles: {worker: {nodes: 2}}\npolicy: {stop_signal: SIGUSR1, grace_period: 2s}\n");
  CohortProcess cohort({"run", "--data-root", root_, "-f", work_ + "/job.yaml", "--workdir", work_,
                        "--image", image_});
  ASSERT_TRUE(waitFor(
      [&] {
        return std::filesystem::exists(work_ + "/pid0") &&
               std::filesystem::exists(work_ + "/pid1") &&
               std::filesystem::exists(work_ + "/escaped");
      },
      60s));
  ::kill(cohort.pid(), SIGINT);  // Ctrl-C
  RunResult r = cohort.wait(60s);
  EXPECT_EQ(r.exit_code, 130) << r.err;
  EXPECT_TRUE(contains(r.out, "[worker/0 node0] rank 0 got SIGUSR1 and saved")) << r.out;
  std::map<int, nlohmann::json> exits;
  for (const auto& e : readJsonLines(onlyJobDir(root_) + "/events.jsonl")) {
    if (e["event"] == "rank_exit") exits[e["rank"].get<int>()] = e;
  }
  EXPECT_EQ(exits[0]["code"], 0) << exits[0];
  EXPECT_EQ(exits[1]["signal"], SIGKILL) << exits[1];
  std::vector<pid_t> pids;
  for (const char* f : {"/pid0", "/pid1", "/escaped"}) {
    pids.push_back(std::atoi(readText(work_ + f).c_str()));
  }
  expectAllGone(pids);
  expectNothingOfTheJobLeft(work_);
}

// An image built on the test image with podman build (a custom image, as a managed service's
// are made): its layers stack, and what the top layer deletes is gone. --isolation chroot: the
// build's RUN needs no container runtime (crun refuses this machine's hybrid cgroups).
TEST_F(Images, AnImageBuiltOnAnotherRunsWithEveryLayer) {
  const std::string derived = "localhost/cohort-test-derived:" + std::to_string(::getpid());
  write("Containerfile",
        "FROM " + image_ + "\nRUN echo custom > /etc/custom-marker && rm /etc/cohort-test-image\n");
  ASSERT_EQ(
      std::system(("podman build -q --isolation chroot -t " + derived + " " + work_ + " >/dev/null")
                      .c_str()),
      0);
  write("layers.py",
        "import os\nprint('custom:', open('/etc/custom-marker').read().strip(),"
        " 'base marker there:', os.path.exists('/etc/cohort-test-image'))\n");
  RunResult r = CohortProcess({"run", "--data-root", root_, "--workdir", work_, "--image", derived,
                               "--", "python3", "layers.py"})
                    .wait(120s);
  (void)std::system(("podman rmi " + derived + " >/dev/null 2>&1").c_str());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "[worker/0 node0] custom: custom base marker there: False")) << r.out;
}

TEST_F(Images, PlanShowsTheImageAndTheCommandARankRuns) {
  RunResult r = runCohort({"plan", "--data-root", root_, "--workdir", work_, "--image", image_,
                           "--", "python3", "-c", "pass"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "image: " + image_ + " (")) << r.out;
  EXPECT_TRUE(contains(r.out, " env exec --image " + image_ + " --layer /")) << r.out;
  EXPECT_TRUE(contains(r.out, " -- python3 -c pass")) << r.out;
  EXPECT_TRUE(contains(r.out, "COHORT_IMAGE=" + image_)) << r.out;
}

TEST_F(Images, EnvListsShowsAndExecsTheImage) {
  RunResult ls = runCohort({"env", "ls", "--data-root", root_});
  ASSERT_EQ(ls.exit_code, 0) << ls.err;
  EXPECT_TRUE(contains(ls.out, image_ + " image ")) << ls.out;
  RunResult show = runCohort({"env", "show", image_, "--json", "--data-root", root_});
  ASSERT_EQ(show.exit_code, 0) << show.err;
  nlohmann::json shown = nlohmann::json::parse(show.out);
  EXPECT_EQ(shown["kind"], "image");
  EXPECT_FALSE(shown["layers"].empty());
  // A person's way in: the current directory is bound in.
  std::ofstream(work_ + "/hello.txt") << "from the host";
  const std::string cmd = "cd " + work_ + " && " + std::string(COHORT_BIN) + " env exec --image " +
                          image_ +
                          " -- python3 -c \"print(open('hello.txt').read(), "
                          "open('/etc/cohort-test-image').read().strip())\"";
  EXPECT_EQ(shellOutput(cmd), "from the host " + image_.substr(image_.rfind(':') + 1) + "\n");
}

TEST_F(Images, AnImageThatIsNotThereFailsBeforeAnyRankStarts) {
  const std::string missing = "localhost/cohort-no-such-image:1";
  RunResult r = runCohort({"run", "--data-root", root_, "--workdir", work_, "--image", missing,
                           "--", "python3", "-c", "open('ran', 'w')"},
                          120s);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "environment: image '" + missing +
                                  "' is not in podman's storage (podman images) and podman pull " +
                                  missing + " failed:\n  Error: "))
      << r.err;
  EXPECT_FALSE(std::filesystem::exists(work_ + "/ran"));
  EXPECT_FALSE(std::filesystem::exists(root_ + "/jobs")) << "no job was started";
}

TEST_F(Images, APodmanThatIsNotInstalledIsSaidSo) {
  RunResult r = CohortProcess({"run", "--data-root", root_, "--workdir", work_, "--image", image_,
                               "--", "/usr/bin/python3", "-c", "open('ran', 'w')"},
                              {"PATH=/nonexistent"})
                    .wait(60s);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "podman is not installed: apt-get install podman")) << r.err;
  EXPECT_FALSE(std::filesystem::exists(work_ + "/ran"));
  EXPECT_FALSE(std::filesystem::exists(root_ + "/jobs")) << "no job was started";
}

TEST_F(Images, WhatIsNotAReferenceOrNotInTheImageIsRefused) {
  RunResult bad = runCohort({"run", "--data-root", root_, "--workdir", work_, "--image",
                             "Not/A:ref:at:all", "--", "python3", "-c", "pass"});
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_TRUE(contains(bad.err, "'Not/A:ref:at:all' is not an image reference")) << bad.err;
  RunResult absent = runCohort({"run", "--data-root", root_, "--workdir", work_, "--image", image_,
                                "--", "python4", "-c", "pass"});
  EXPECT_EQ(absent.exit_code, 2) << absent.err;
  EXPECT_TRUE(contains(absent.err, "'python4' is not on the image's PATH")) << absent.err;
  EXPECT_FALSE(std::filesystem::exists(root_ + "/jobs")) << "no job was started";
}

// On the Slurm test cluster (tests/slurm/cluster: one network namespace per node, a shared file
// system, jobs as root), each node's agent runs its ranks in the image as it does locally.
TEST_F(Images, ASlurmJobRunsInTheImageOnEveryNode) {
  const char* state = std::getenv("COHORT_SLURM_STATE");
  if (!state || readText(std::string(state) + "/slurm.conf").empty()) {
    GTEST_SKIP() << "no Slurm cluster: ctest runs this test with the slurm fixture";
  }
  ::setenv("SLURM_CONF", (std::string(state) + "/slurm.conf").c_str(), 1);
  write("where.py", R"(import os, socket
import torch.distributed as dist
dist.init_process_group("gloo")
print("rank", dist.get_rank(), "of", dist.get_world_size(), "on", socket.gethostname(), "in",
      open("/etc/cohort-test-image").read().strip(), flush=True)
)");
  RunResult r =
      CohortProcess(run({"--backend", "slurm", "--nodes", "2", "--", "python3", "where.py"}))
          .wait(240s);
  (void)std::system("scancel --quiet --user=root 2>/dev/null");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string tag = image_.substr(image_.rfind(':') + 1);
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_TRUE(std::regex_search(
        r.out, std::regex("rank " + std::to_string(rank) + " of 2 on n[0-9]+ in " + tag)))
        << r.out;
  }
}

}  // namespace
}  // namespace cohort::testing
