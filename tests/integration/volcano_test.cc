// The volcano backend against a real Kubernetes API server (kube-apiserver v1.33 with etcd, and
// Volcano's Job CRD: tests/kube/cluster, started by ctest's fixture). Real: the API server (its
// authentication, RBAC, strict validation against Volcano's schema, watches, pod logs through
// the kubelet endpoint), cohort's client, rendering, submission, following, cancelling and
// recovery, and every process of the job: coordinator and agents in pods of their own (network,
// PID, mount and UTS namespaces), ranks of real frameworks. Played by tests/kube/volcano_sim:
// Volcano's controller and scheduler, the kubelets and the garbage collector (docs/volcano.md).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>

#include "../versitygw.h"
#include "backends/kube.h"
#include "harness.h"

extern "C" char** environ;

namespace cohort::testing {
namespace {

using Json = nlohmann::json;
namespace kube = backends::kube;

std::string stateDir() {
  const char* dir = std::getenv("COHORT_KUBE_STATE");
  return dir ? dir : "";
}

// A value of the cluster's env file (tests/kube/cluster up).
std::string clusterEnv(const std::string& name) {
  const std::string env = readText(stateDir() + "/env");
  const std::string key = "export " + name + "=";
  const size_t at = env.find(key);
  if (at == std::string::npos) return "";
  const size_t end = env.find('\n', at);
  return env.substr(at + key.size(), end - at - key.size());
}

constexpr const char* kImage = "registry.example.com/cohort/train:0.1.0";

class Kube : public ::testing::Test {
 protected:
  void SetUp() override {
    if (stateDir().empty() || clusterEnv("COHORT_KUBE_SERVER").empty()) {
      GTEST_SKIP() << "no Kubernetes API server: run through ctest (its fixture starts "
                      "tests/kube/cluster), or set COHORT_KUBE_STATE";
    }
    ::setenv("KUBECONFIG", clusterEnv("KUBECONFIG").c_str(), 1);
    auto config = kube::loadConfig();
    ASSERT_TRUE(config) << config.error().message;
    auto client = kube::Client::create(*config);
    ASSERT_TRUE(client) << client.error().message;
    client_ = std::move(*client);
    // A namespace of the test's own, gone with it.
    namespace_ = "t-" + std::to_string(::getpid()) + "-" + std::to_string(++counter_);
    auto made = client_->call(
        "POST", "/api/v1/namespaces", "create namespace",
        {{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", namespace_}}}});
    ASSERT_TRUE(made) << made.error().message;
  }

  void TearDown() override {
    if (client_) {
      (void)client_->call("DELETE", "/api/v1/namespaces/" + namespace_, "delete namespace");
    }
  }

  // The same server with another user's credentials.
  std::unique_ptr<kube::Client> clientAs(const std::string& token) {
    kube::Config config = client_->config();
    config.token = token;
    config.user = "someone";
    auto client = kube::Client::create(config);
    EXPECT_TRUE(client);
    return client ? std::move(*client) : nullptr;
  }

  static bool volcanoCrd() { return clusterEnv("COHORT_KUBE_VOLCANO_CRD") == "1"; }

  std::unique_ptr<kube::Client> client_;
  std::string namespace_;
  static inline int counter_ = 0;
};

#define REQUIRE_VOLCANO_CRD()                                                                  \
  if (!volcanoCrd())                                                                           \
  GTEST_SKIP() << "the API server has no Volcano Job CRD (../shared/reference/volcano/ "       \
                  "batch.volcano.sh_jobs.yaml beside the source tree is missing): the checks " \
                  "of Volcano Jobs against the server did not run"

Json configMap(const std::string& name) {
  return {{"apiVersion", "v1"},
          {"kind", "ConfigMap"},
          {"metadata", {{"name", name}}},
          {"data", {{"k", "v"}}}};
}

TEST_F(Kube, ClientCreatesGetsListsPatchesAndDeletes) {
  const std::string path = "/api/v1/namespaces/" + namespace_ + "/configmaps";
  auto made = client_->call("POST", path, "create", configMap("one"));
  ASSERT_TRUE(made) << made.error().message;
  EXPECT_EQ((*made)["metadata"]["name"], "one");
  auto got = client_->call("GET", path + "/one", "get");
  ASSERT_TRUE(got) << got.error().message;
  EXPECT_EQ((*got)["data"]["k"], "v");
  auto patched = client_->call("PATCH", path + "/one", "patch", {{"data", {{"k", "w"}}}},
                               "application/merge-patch+json");
  ASSERT_TRUE(patched) << patched.error().message;
  EXPECT_EQ((*patched)["data"]["k"], "w");
  auto listed = client_->call("GET", path, "list");
  ASSERT_TRUE(listed) << listed.error().message;
  EXPECT_EQ((*listed)["items"].size(), 1u);
  auto again = client_->call("POST", path, "create configmap 'one'", configMap("one"));
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code, Code::kAlreadyExists) << again.error().message;
  EXPECT_TRUE(client_->call("DELETE", path + "/one", "delete"));
  auto gone = client_->call("GET", path + "/one", "get configmap 'one'");
  ASSERT_FALSE(gone);
  EXPECT_EQ(gone.error().code, Code::kNotFound);
  EXPECT_TRUE(contains(gone.error().message, "\"one\" not found")) << gone.error().message;
}

TEST_F(Kube, ClientCertificateAuthenticates) {
  const std::string pair = clusterEnv("COHORT_KUBE_CERT_USER");
  kube::Config config = client_->config();
  config.token.clear();
  config.cert_pem = readText(pair.substr(0, pair.find(':')));
  config.key_pem = readText(pair.substr(pair.find(':') + 1));
  auto client = kube::Client::create(config);
  ASSERT_TRUE(client);
  auto listed = (*client)->call("GET", "/api/v1/namespaces/" + namespace_ + "/configmaps", "list");
  EXPECT_TRUE(listed) << listed.error().message;
}

TEST_F(Kube, RefusalsSayWhoAndWhat) {
  auto stranger = clientAs("not-a-token");
  auto denied =
      stranger->call("GET", "/api/v1/namespaces/" + namespace_ + "/configmaps", "list configmaps");
  ASSERT_FALSE(denied);
  EXPECT_EQ(denied.error().code, Code::kUnauthenticated);
  EXPECT_TRUE(contains(denied.error().message, "user 'someone'")) << denied.error().message;

  auto nobody = clientAs(clusterEnv("COHORT_KUBE_NOBODY_TOKEN"));
  auto forbidden = nobody->call("POST", "/api/v1/namespaces/" + namespace_ + "/configmaps",
                                "create configmap", configMap("x"));
  ASSERT_FALSE(forbidden);
  EXPECT_EQ(forbidden.error().code, Code::kPermissionDenied);
  EXPECT_TRUE(contains(forbidden.error().message, "cannot create resource \"configmaps\""))
      << forbidden.error().message;
  EXPECT_TRUE(contains(forbidden.error().message, namespace_)) << forbidden.error().message;
}

TEST_F(Kube, AnApiThatIsNotServedSaysVolcanoIsNotInstalled) {
  auto missing =
      client_->call("POST", "/apis/batch.volcano.sh/v1alpha9/namespaces/" + namespace_ + "/jobs",
                    "create Volcano Job 'x'", configMap("x"));
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, Code::kNotFound);
  EXPECT_TRUE(contains(missing.error().message, "Volcano is not installed on this cluster"))
      << missing.error().message;
}

TEST_F(Kube, AnUnreachableServerIsNamed) {
  kube::Config config = client_->config();
  config.server = "https://127.0.0.1:1";
  auto client = kube::Client::create(config);
  ASSERT_TRUE(client);
  auto got = (*client)->call("GET", "/api/v1/namespaces", "list namespaces");
  ASSERT_FALSE(got);
  EXPECT_EQ(got.error().code, Code::kUnavailable);
  EXPECT_TRUE(contains(got.error().message, "https://127.0.0.1:1")) << got.error().message;
}

TEST_F(Kube, WatchStreamsEventsAsTheyHappen) {
  const std::string path = "/api/v1/namespaces/" + namespace_ + "/configmaps";
  auto listed = client_->call("GET", path, "list");
  ASSERT_TRUE(listed);
  const std::string version = (*listed)["metadata"].value("resourceVersion", "");
  std::atomic<bool> stop{false};
  std::vector<std::string> seen;
  std::thread watcher([&] {
    auto status = client_->stream(
        path + "?watch=1&resourceVersion=" + version + "&timeoutSeconds=30",
        [&](std::string_view line) {
          auto event = kube::parseObject(line, "watch event");
          if (!event) return true;
          seen.push_back((*event)["type"].get<std::string>() + " " +
                         (*event)["object"]["metadata"]["name"].get<std::string>());
          return seen.size() < 2;
        },
        &stop, Millis(60000));
    EXPECT_TRUE(status) << status.error().message;
  });
  ASSERT_TRUE(client_->call("POST", path, "create", configMap("a")));
  ASSERT_TRUE(client_->call("DELETE", path + "/a", "delete"));
  if (!waitFor([&] { return seen.size() >= 2; }, 20s)) stop = true;
  watcher.join();
  EXPECT_EQ(seen, (std::vector<std::string>{"ADDED a", "DELETED a"}));
}

// Every example job's rendering, submitted to the API server with strict validation (a dry run:
// nothing is stored): the server's own verdict on each field, beside the offline check.
TEST_F(Kube, EveryExampleRenderingPassesStrictServerValidation) {
  REQUIRE_VOLCANO_CRD();
  int checked = 0;
  for (const auto& entry :
       std::filesystem::recursive_directory_iterator(sourceDir() + "/examples")) {
    if (entry.path().extension() != ".yaml") continue;
    RunResult plan = runCohort(
        {"plan", "--backend", "volcano", "--json", "--image", kImage, "-f", entry.path().string()});
    if (plan.exit_code != 0) continue;  // not a job file (as the golden test skips it)
    Json job = Json::parse(plan.out, nullptr, false);
    ASSERT_TRUE(job.is_object()) << entry.path() << ": " << plan.out;
    auto dry = client_->call("POST",
                             "/apis/batch.volcano.sh/v1alpha1/namespaces/" + namespace_ +
                                 "/jobs?dryRun=All&fieldValidation=Strict",
                             "create " + entry.path().string(), job);
    EXPECT_TRUE(dry) << dry.error().message;
    ++checked;
  }
  EXPECT_GE(checked, 6);
  // A field Volcano does not know is refused, so the check above can fail.
  RunResult plan = runCohort({"plan", "--backend", "volcano", "--json", "--image", kImage, "-f",
                              sourceDir() + "/examples/pytorch/ddp.yaml"});
  Json job = Json::parse(plan.out, nullptr, false);
  ASSERT_TRUE(job.is_object()) << plan.err;
  job["spec"]["tasks"][0]["replicaz"] = 1;
  auto refused = client_->call("POST",
                               "/apis/batch.volcano.sh/v1alpha1/namespaces/" + namespace_ +
                                   "/jobs?dryRun=All&fieldValidation=Strict",
                               "create", job);
  ASSERT_FALSE(refused);
  EXPECT_TRUE(contains(refused.error().message, "strict decoding error"))
      << refused.error().message;
}

// ------------------------------------------------------------------------ jobs through Volcano

// A process of the test's own with stdout and stderr in files, read while it runs.
class Spawned {
 public:
  Spawned(const std::vector<std::string>& argv, const std::vector<std::string>& env = {}) {
    dir_ = tempDir();
    std::vector<std::string> a = argv;
    std::vector<char*> args;
    for (auto& x : a) args.push_back(x.data());
    args.push_back(nullptr);
    std::vector<std::string> e;
    for (char** v = environ; *v; ++v) e.emplace_back(*v);
    for (const std::string& extra : env) {
      const size_t eq = extra.find('=');
      std::erase_if(
          e, [&](const std::string& v) { return v.compare(0, eq + 1, extra, 0, eq + 1) == 0; });
      e.push_back(extra);
    }
    std::vector<char*> envp;
    for (auto& x : e) envp.push_back(x.data());
    envp.push_back(nullptr);
    const int out = ::open((dir_ + "/out").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    const int err = ::open((dir_ + "/err").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(out, 1);
      ::dup2(err, 2);
      ::setpgid(0, 0);
      ::execve(args[0], args.data(), envp.data());
      _exit(127);
    }
    ::close(out);
    ::close(err);
  }
  ~Spawned() {
    if (pid_ > 0 && !done_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  std::string out() const { return readText(dir_ + "/out"); }
  std::string err() const { return readText(dir_ + "/err"); }
  void signal(int sig) const { ::kill(pid_, sig); }
  // Its exit code (128+N for signal N); -1 when it did not end within `limit` (then killed).
  int wait(std::chrono::milliseconds limit) {
    int status = 0;
    const bool ended =
        waitFor([&] { return ::waitpid(pid_, &status, WNOHANG) == pid_; }, limit, 20ms);
    if (!ended) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
    }
    done_ = true;
    if (!ended) return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

 private:
  std::string dir_;
  pid_t pid_ = -1;
  bool done_ = false;
};

std::string binDir() {
  const std::string bin = COHORT_BIN;
  return bin.substr(0, bin.rfind('/'));
}

// Volcano, the kubelets and the garbage collector for one namespace (tests/kube/volcano_sim),
// its pods' image this host with `workdir` as its working directory and cohort on PATH.
class Sim {
 public:
  Sim(const std::string& ns, const std::string& workdir,
      const std::vector<std::string>& extra = {}) {
    std::vector<std::string> argv = {"/usr/bin/python3", sourceDir() + "/tests/kube/volcano_sim",
                                     "--state",          stateDir(),
                                     "--namespace",      ns,
                                     "--workdir",        workdir};
    argv.insert(argv.end(), extra.begin(), extra.end());
    const char* path = std::getenv("PATH");
    process_ = std::make_unique<Spawned>(
        argv, std::vector<std::string>{"PATH=" + binDir() + ":" + (path ? path : "/usr/bin:/bin")});
    ready_ = waitFor([&] { return contains(process_->out(), "ready"); }, 30s);
  }
  ~Sim() {
    process_->signal(SIGTERM);
    EXPECT_NE(process_->wait(60s), -1) << "volcano_sim did not stop";
  }
  bool ready() const { return ready_; }
  std::string log() const { return process_->err(); }

 private:
  std::unique_ptr<Spawned> process_;
  bool ready_ = false;
};

class Volcano : public Kube {
 protected:
  void SetUp() override {
    Kube::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    if (!volcanoCrd()) {
      GTEST_SKIP() << "the API server has no Volcano Job CRD (../shared/reference/volcano/ "
                      "batch.volcano.sh_jobs.yaml beside the source tree is missing): jobs "
                      "through Volcano did not run";
    }
  }
  void TearDown() override {
    sim_.reset();
    Kube::TearDown();
  }

  void startSim(const std::string& workdir, const std::vector<std::string>& extra = {}) {
    sim_ = std::make_unique<Sim>(namespace_, workdir, extra);
    ASSERT_TRUE(sim_->ready()) << sim_->log();
  }

  std::vector<std::string> run(std::vector<std::string> args) {
    std::vector<std::string> all = {COHORT_BIN,    "run",      "--backend", "volcano",
                                    "--namespace", namespace_, "--image",   kImage};
    all.insert(all.end(), args.begin(), args.end());
    return all;
  }

  Result<Json> get(const std::string& path) { return client_->call("GET", path, "get " + path); }
  std::string jobsPath() const {
    return "/apis/batch.volcano.sh/v1alpha1/namespaces/" + namespace_ + "/jobs";
  }
  std::string phaseOf(const std::string& job) {
    auto j = get(jobsPath() + "/" + job);
    return j ? (*j)["status"]["state"].value("phase", "") : "gone";
  }
  size_t count(const std::string& path) {
    auto j = get(path);
    return j && (*j)["items"].is_array() ? (*j)["items"].size() : 0;
  }
  // Nothing of the job `name` is left: no Job, Secret or pod.
  void expectNothingLeftOf(const std::string& name) {
    EXPECT_TRUE(waitFor([&] { return phaseOf(name) == "gone"; }, 30s)) << phaseOf(name);
    EXPECT_EQ(count("/api/v1/namespaces/" + namespace_ + "/secrets"), 0u);
    EXPECT_TRUE(
        waitFor([&] { return count("/api/v1/namespaces/" + namespace_ + "/pods") == 0; }, 60s))
        << sim_->log();
  }

  std::unique_ptr<Sim> sim_;
};

// Whether a process whose command line contains `marker` runs on this machine.
bool processWith(const std::string& marker) {
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string pid = entry.path().filename();
    if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
    if (pid == std::to_string(::getpid())) continue;
    if (contains(readText(entry.path().string() + "/cmdline"), marker)) return true;
  }
  return false;
}

TEST_F(Volcano, PyTorchDdpExampleTrainsAcrossPodsAndSucceeds) {
  REQUIRE("/usr/bin/python3 -c 'import torch'",
          "PyTorch (python3-torch) is not installed: the "
          "DDP example did not run");
  startSim(sourceDir() + "/examples/pytorch");
  Spawned cohort(run({"-f", sourceDir() + "/examples/pytorch/ddp.yaml"}));
  const int code = cohort.wait(240s);
  EXPECT_EQ(code, 0) << cohort.err() << sim_->log();
  EXPECT_TRUE(contains(cohort.out(), "[worker/0 node0] held-out accuracy")) << cohort.out();
  EXPECT_TRUE(contains(cohort.out(), "[worker/3 node1]")) << "four ranks, two per pod";
  EXPECT_TRUE(contains(cohort.err(), "Volcano Job " + namespace_ + "/digits-ddp")) << cohort.err();
  EXPECT_TRUE(contains(cohort.err(), "succeeded")) << cohort.err();
  // The ended Job stays for kubectl get vcjob; its Secret does not.
  EXPECT_TRUE(waitFor([&] { return phaseOf("digits-ddp") == "Completed"; }, 30s));
  EXPECT_EQ(count("/api/v1/namespaces/" + namespace_ + "/secrets"), 0u);
  // Ranks reached each other between pods: at their pods' addresses, named as Volcano's svc
  // plugin names them.
  EXPECT_TRUE(contains(sim_->log(), "pod digits-ddp-worker-1 at 10.78.0.")) << sim_->log();
}

TEST_F(Volcano, AFailingRankGivesItsRootCauseAndExitCode) {
  startSim("/tmp");
  Spawned cohort(run({"--name", "fails", "--nodes", "2", "--grace-period", "3s", "--", "/bin/sh",
                      "-c", "if [ $COHORT_RANK = 1 ]; then echo boom >&2; exit 3; fi; sleep 60"}));
  EXPECT_EQ(cohort.wait(120s), 3) << cohort.err() << sim_->log();
  EXPECT_TRUE(contains(cohort.err(), "root cause: worker/1 on node 1 exited with code 3"))
      << cohort.err();
  EXPECT_TRUE(contains(cohort.err(), "| boom")) << cohort.err();
  EXPECT_TRUE(waitFor([&] { return phaseOf("fails") == "Aborted"; }, 30s)) << phaseOf("fails");
}

TEST_F(Volcano, AGangThatCannotBeScheduledSaysWhyAndCtrlCLeavesNothing) {
  startSim("/tmp", {"--nodes", "3", "--node-cpus", "8"});
  const std::string file = tempDir() + "/big.yaml";
  std::ofstream(file) << "name: big\ncommand: [/bin/sh, -c, 'sleep 1']\n"
                         "roles: {worker: {nodes: 4, procs_per_node: 1, resources: {cpus: 6}}}\n";
  Spawned cohort(run({"-f", file}));
  EXPECT_TRUE(waitFor([&] { return contains(cohort.err(), "Insufficient cpu"); }, 60s))
      << cohort.err() << sim_->log();
  EXPECT_TRUE(contains(cohort.err(),
                       "waiting for the gang: 4 of 5 pods can be scheduled (big-worker-3: 0/3 "
                       "nodes are unavailable: 3 Insufficient cpu)"))
      << cohort.err();
  cohort.signal(SIGINT);
  EXPECT_EQ(cohort.wait(60s), 130) << cohort.err();
  expectNothingLeftOf("big");
}

TEST_F(Volcano, CtrlCStopsTheRanksGracefullyAndLeavesNothing) {
  startSim("/tmp");
  const std::string marker = "cohort-test-" + namespace_;
  Spawned cohort(
      run({"--name", "sleeper", "--nodes", "2", "--grace-period", "5s", "--", "/bin/sh", "-c",
           "trap 'echo got TERM; exit 0' TERM; : " + marker + "; sleep 300 & wait"}));
  EXPECT_TRUE(waitFor([&] { return contains(cohort.err(), "process(es) started"); }, 60s))
      << cohort.err() << sim_->log();
  EXPECT_TRUE(processWith(marker));
  cohort.signal(SIGINT);
  EXPECT_EQ(cohort.wait(90s), 130) << cohort.err();
  EXPECT_TRUE(contains(cohort.out(), "got TERM")) << "the ranks were told: " << cohort.out();
  EXPECT_TRUE(contains(cohort.err(), "stopped")) << cohort.err();
  expectNothingLeftOf("sleeper");
  EXPECT_TRUE(waitFor([&] { return !processWith(marker); }, 30s)) << "a rank outlived its job";
}

// TensorFlow's parameter-server jobs (roles ps and worker, the managed service's convention):
// each task gets TF_CONFIG with every task's pod address and --task_name/--task_index; the job
// ends when the worker task completes, the ps pods stopped (they never end by themselves).
TEST_F(Volcano, TensorFlowPsWorkerEndsWhenTheWorkerTaskCompletes) {
  const std::string dir = tempDir();
  std::ofstream(dir + "/task.py")
      << "import json, os, sys, time\n"
         "tf = json.loads(os.environ['TF_CONFIG'])\n"
         "name = [a for a in sys.argv if a.startswith('--task_name=')][0].split('=')[1]\n"
         "print('task', name, tf['task']['type'], tf['task']['index'], 'ps', "
         "','.join(tf['cluster']['ps']),\n"
         "      'worker', ','.join(tf['cluster']['worker']), flush=True)\n"
         "time.sleep(600 if name == 'ps' else 2)\n";
  std::ofstream(dir + "/ps.yaml") << "name: tf-ps\nframework: tensorflow\n"
                                     "command: [/usr/bin/python3, task.py]\n"
                                     "roles: {ps: {nodes: 1}, worker: {nodes: 2}}\n"
                                     "policy: {grace_period: 3s}\n";
  startSim(dir);
  Spawned cohort(run({"-f", dir + "/ps.yaml"}));
  EXPECT_EQ(cohort.wait(120s), 0) << cohort.err() << sim_->log();
  const std::string out = cohort.out();
  EXPECT_TRUE(contains(out, "task worker worker 1 ps 10.78.0.")) << out;
  EXPECT_TRUE(contains(out, "task ps ps 0")) << out;
  EXPECT_TRUE(waitFor([&] { return phaseOf("tf-ps") == "Completed"; }, 90s))
      << phaseOf("tf-ps") << sim_->log();
}

// MPI's hostfile and MindSpore's scheduler address name the pods, as cohort's plan made them
// inside the coordinator's pod from the addresses its agents reported.
TEST_F(Volcano, MpiAndMindSporeWiringNameThePods) {
  startSim("/tmp");
  Spawned mpi(run({"--name", "mpi", "--framework", "mpi", "--launcher", "direct", "--nodes", "2",
                   "--nproc-per-node", "2", "--", "/bin/sh", "-c",
                   "[ $COHORT_RANK = 0 ] && cat $COHORT_HOSTFILE; true"}));
  EXPECT_EQ(mpi.wait(120s), 0) << mpi.err();
  EXPECT_TRUE(std::regex_search(mpi.out(),
                                std::regex(R"(10\.78\.0\.\d+ slots=2\n.*10\.78\.0\.\d+ slots=2)")))
      << mpi.out();
  Spawned ms(
      run({"--name", "ms", "--framework", "mindspore", "--nodes", "2", "--", "/bin/sh", "-c",
           "echo role=$MS_ROLE sched=$MS_SCHED_HOST:$MS_SCHED_PORT workers=$MS_WORKER_NUM"}));
  EXPECT_EQ(ms.wait(120s), 0) << ms.err();
  EXPECT_TRUE(std::regex_search(ms.out(),
                                std::regex(R"(role=MS_WORKER sched=10\.78\.0\.\d+:\d+ workers=2)")))
      << ms.out();
}

// A kubeconfig like the cluster's, with `from` replaced by `to`.
std::string kubeconfigWith(const std::string& from, const std::string& to) {
  std::string text = readText(clusterEnv("KUBECONFIG"));
  const size_t at = text.find(from);
  if (at != std::string::npos) text.replace(at, from.size(), to);
  const std::string path = tempDir() + "/kubeconfig";
  std::ofstream(path) << text;
  return path;
}

TEST_F(Volcano, WrongConfigurationsAndRefusalsAreClearAndLeaveNothing) {
  const std::vector<std::string> job = {"--name", "refused", "--", "/bin/true"};
  struct Case {
    std::string what, kubeconfig, says;
  } cases[] = {
      {"no kubeconfig", "/nonexistent/kubeconfig", "KUBECONFIG names no file that exists"},
      {"a bad context",
       kubeconfigWith("current-context: cohort-test", "current-context: elsewhere"),
       "context 'elsewhere' is not there (contexts: 'cohort-test')"},
      {"a token the server does not know",
       kubeconfigWith(clusterEnv("COHORT_KUBE_ADMIN_TOKEN"), "not-a-token"),
       "does not accept the credentials of user 'admin'"},
      {"a user RBAC grants nothing",
       kubeconfigWith(clusterEnv("COHORT_KUBE_ADMIN_TOKEN"),
                      clusterEnv("COHORT_KUBE_NOBODY_TOKEN")),
       "cannot list resource \"jobs\" in API group \"batch.volcano.sh\""},
  };
  for (const Case& c : cases) {
    Spawned cohort(run(job), {"KUBECONFIG=" + c.kubeconfig});
    EXPECT_EQ(cohort.wait(60s), 2) << c.what << ": " << cohort.err();
    EXPECT_TRUE(contains(cohort.err(), c.says)) << c.what << ": " << cohort.err();
  }
  // No image: refused before the cluster is asked anything.
  Spawned no_image({COHORT_BIN, "run", "--backend", "volcano", "--namespace", namespace_, "--name",
                    "refused", "--", "/bin/true"});
  EXPECT_EQ(no_image.wait(60s), 2) << no_image.err();
  EXPECT_TRUE(contains(no_image.err(),
                       "environment: the volcano backend runs every pod in a "
                       "container image, and the job names none"))
      << no_image.err();
  // A Job of that name that is not cohort's: refused, and its Secret is not left behind.
  Json taken = Json::parse(runCohort({"plan", "--backend", "volcano", "--json", "--image", kImage,
                                      "--name", "taken", "--", "/bin/true"})
                               .out,
                           nullptr, false);
  ASSERT_TRUE(taken.is_object());
  taken["metadata"]["labels"].erase("app.kubernetes.io/managed-by");
  ASSERT_TRUE(client_->call("POST", jobsPath(), "create", taken));
  Spawned again(run({"--name", "taken", "--", "/bin/true"}));
  EXPECT_EQ(again.wait(60s), 2) << again.err();
  EXPECT_TRUE(contains(again.err(), "a Volcano Job 'taken' in namespace '" + namespace_ +
                                        "' already exists (not started, not made by cohort)"))
      << again.err();
  EXPECT_EQ(count("/api/v1/namespaces/" + namespace_ + "/secrets"), 0u);
  EXPECT_EQ(phaseOf("refused"), "gone");
}

// Over TLS, as a server that pods reach from other machines must be: the coordinator in its pod
// verifies the server's self-signed certificate by the pin in the job's Secret.
TEST_F(Volcano, TheServerFindsARunningJobAgainAfterARestart) {
  startSim("/tmp");
  std::string why;
  const std::vector<std::string> flags = {"--backend",     "volcano",      "--namespace",
                                          namespace_,      "--single-user", "--no-isolate",
                                          "--tls-self-signed"};
  std::vector<std::string> first = flags;
  first.insert(first.end(), {"--listen", clusterEnv("COHORT_KUBE_HOST_ADDR") + ":0"});
  auto server = startServer(&why, first);
  ASSERT_TRUE(server) << why;
  const std::string url = server->url();
  ASSERT_TRUE(url.rfind("https://", 0) == 0) << url;
  const std::string token = server->adminToken();
  const std::string ca = server->dataRoot() + "/server/tls/cert.pem";
  const std::string dir = tempDir();
  std::ofstream(dir + "/job.yaml") << "name: long\ncommand: [/bin/sh, -c, 'for i in 1 2 3 4 5 6 7 "
                                      "8; do echo tick $i; sleep 1; done']\n"
                                      "workdir: /tmp\nbackend: volcano\nenvironment: {image: "
                                   << kImage << "}\nroles: {worker: {nodes: 2}}\n";
  RunResult submitted = runCohort(
      {"submit", "--server", url, "--token", token, "--ca", ca, "--no-upload", "-f", dir + "/job.yaml"});
  ASSERT_EQ(submitted.exit_code, 0) << submitted.err;
  const std::string id = std::string(submitted.out.substr(0, submitted.out.find('\n')));
  ASSERT_TRUE(waitFor(
      [&] {
        return contains(readText(server->dataRoot() + "/jobs/" + id + "/console.log"), "tick 2");
      },
      60s))
      << server->log() << sim_->log();
  const std::string root = server->dataRoot();
  const std::string port = url.substr(url.rfind(':') + 1);
  server.reset();  // SIGTERM: the server stops, its jobs go on
  std::vector<std::string> again = flags;
  again.insert(again.end(),
               {"--listen", clusterEnv("COHORT_KUBE_HOST_ADDR") + ":" + port, "--data-root", root});
  server = startServer(&why, again);
  ASSERT_TRUE(server) << why;
  EXPECT_TRUE(contains(server->log(), "still running (Volcano Job " + namespace_ + "/long)"))
      << server->log();
  RunResult followed =
      runCohort({"logs", "-f", id, "--server", url, "--token", token, "--ca", ca}, 120s);
  EXPECT_EQ(followed.exit_code, 0) << followed.err;
  RunResult status =
      runCohort({"status", id, "--server", url, "--token", token, "--ca", ca, "--json"});
  EXPECT_TRUE(contains(status.out, "\"state\": \"succeeded\"") ||
              contains(status.out, "\"state\":\"succeeded\""))
      << status.out << server->log();
  RunResult logs = runCohort({"logs", id, "--server", url, "--token", token, "--ca", ca});
  EXPECT_TRUE(contains(logs.out, "tick 8")) << logs.out;
  EXPECT_TRUE(contains(logs.out, "tick 1")) << "the log copied on where it stopped: " << logs.out;
}

}  // namespace
}  // namespace cohort::testing

namespace cohort::testing {
namespace {

// A server whose store is in S3 runs Volcano jobs whose inputs and outputs are store://: the pods
// have no file system of the server's, so every node stages from S3 and writes to it itself,
// with the store handed to them in the job's Secret; the ranks never see it.
// (The admin's buckets are admin@NAME under the store's prefix.)
TEST_F(Volcano, AServersStoreInS3IsWhereItsPodsStageFromAndCopyTo) {
  const std::string bin = COHORT_BIN;
  const std::string gw = Versitygw::find({bin.substr(0, bin.rfind('/'))});
  if (gw.empty()) GTEST_SKIP() << "versitygw is not installed (scripts/test builds it)";
  startSim("/tmp");
  const std::string host = clusterEnv("COHORT_KUBE_HOST_ADDR");
  const std::string served = tempDir();
  std::filesystem::create_directories(served + "/srv");
  Versitygw s3(gw, served, served + ".log", host);  // where the pods reach it
  ASSERT_TRUE(s3.up()) << readText(served + ".log");
  const std::vector<std::string> aws = {
      std::string("AWS_ACCESS_KEY_ID=") + kS3Key, std::string("AWS_SECRET_ACCESS_KEY=") + kS3Secret,
      "AWS_ENDPOINT_URL=" + s3.endpoint(), "AWS_SHARED_CREDENTIALS_FILE=/nonexistent",
      "AWS_CONFIG_FILE=/nonexistent"};
  for (const std::string& kv : aws) {
    ::setenv(kv.substr(0, kv.find('=')).c_str(), kv.substr(kv.find('=') + 1).c_str(), 1);
  }
  std::string why;
  auto server =
      startServer(&why, {"--backend", "volcano", "--namespace", namespace_, "--single-user",
                         "--no-isolate", "--store", "s3://srv/cohort", "--listen", host + ":0",
                         "--insecure-http"});
  for (const std::string& kv : aws) ::unsetenv(kv.substr(0, kv.find('=')).c_str());
  ASSERT_TRUE(server) << why;
  const std::vector<std::string> as = {"COHORT_SERVER=" + server->url(),
                                       "COHORT_TOKEN=" + server->adminToken()};
  const std::string data = tempDir();
  std::ofstream(data + "/digits.txt") << "one two three\n";
  RunResult up = CohortProcess({"cp", "-q", data, "server://datasets/words"}, as).wait(60s);
  ASSERT_EQ(up.exit_code, 0) << up.err;

  const std::string dir = tempDir();
  std::ofstream(dir + "/job.yaml")
      << "name: staged\nworkdir: /tmp\nbackend: volcano\nenvironment: {image: " << kImage
      << "}\nroles: {worker: {nodes: 2}}\n"
         "command: [/bin/sh, -c, 'wc -w < $COHORT_WORK_DIR/data/digits.txt > "
         "$COHORT_OUTPUT_DIR/words-$RANK.txt; "
         "env | grep -c -e COHORT_STORE -e AWS_ > $COHORT_OUTPUT_DIR/seen-$RANK.txt; true']\n"
         "inputs: [{source: store://datasets/words, target: data}]\n"
         "outputs: [{source: output/, target: 'store://models/{job}/'}]\n";
  RunResult submitted =
      CohortProcess({"submit", "--no-upload", "--wait", "-f", dir + "/job.yaml"}, as).wait(180s);
  ASSERT_EQ(submitted.exit_code, 0) << submitted.err << server->log() << sim_->log();
  const std::string id = submitted.out.substr(0, submitted.out.find('\n'));
  for (const char* rank : {"0", "1"}) {
    EXPECT_EQ(readText(served + "/srv/cohort/admin@models/" + id + "/words-" + rank + ".txt"), "3\n")
        << "rank " << rank << " staged the input from S3 and its node copied the output there";
    EXPECT_EQ(readText(served + "/srv/cohort/admin@models/" + id + "/seen-" + rank + ".txt"), "0\n")
        << "the store's settings reached rank " << rank;
  }
  EXPECT_FALSE(contains(server->log(), kS3Secret));
}

}  // namespace
}  // namespace cohort::testing
