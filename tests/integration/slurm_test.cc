// The slurm backend against a real Slurm cluster: slurmctld and one slurmd per node, each node
// in its own network namespace with its own address (tests/slurm/cluster, started by ctest's
// fixture). Every rank really runs on another "host": its own network stack and hostname,
// reached over a bridge. The filesystem is shared, as on most clusters (home directories).
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <regex>
#include <set>

#include "harness.h"

namespace cohort::testing {
namespace {

// The cluster's environment file, written by `tests/slurm/cluster up`.
std::string stateDir() {
  const char* dir = std::getenv("COHORT_SLURM_STATE");
  return dir ? dir : "";
}

std::string slurmConf() { return stateDir() + "/slurm.conf"; }

class Slurm : public ::testing::Test {
 protected:
  void SetUp() override {
    if (stateDir().empty() || readText(slurmConf()).empty()) {
      GTEST_SKIP() << "no Slurm cluster: run through ctest (its fixture starts "
                      "tests/slurm/cluster), or set COHORT_SLURM_STATE";
    }
    ::setenv("SLURM_CONF", slurmConf().c_str(), 1);
    data_ = tempDir();
  }
  // A test that failed half-way (or a server's job, which outlives it) leaves nothing to the next:
  // the cluster is this suite's own.
  void TearDown() override {
    if (stateDir().empty()) return;
    (void)std::system("scancel --quiet --full --signal=KILL --state=RUNNING --user=root 2>/dev/null;"
                      " scancel --quiet --user=root 2>/dev/null");
    waitFor([] { return shell("squeue -h -t pd,r,cg -o '%i'").empty(); }, 20s);
  }

  std::vector<std::string> run(std::vector<std::string> args) {
    std::vector<std::string> all = {"run", "--backend", "slurm", "--data-root", data_};
    all.insert(all.end(), args.begin(), args.end());
    return all;
  }

  // Slurm's own word on a job: "COMPLETED 0:0" (squeue keeps ended jobs for MinJobAge).
  static std::string slurmState(const std::string& job) {
    std::string out = shell("squeue -h -t all -j " + job + " -o '%T'");
    return out.substr(0, out.find('\n'));
  }

  // Slurm's accounting of an ended job, as `sacct` prints it: "FAILED|7:0" (state, exit code).
  // The test cluster keeps it in a job completion file, which `sacct -c` reads.
  static std::string accounted(const std::string& job) {
    std::string out;
    waitFor([&] {
      out = std::string(trimmed(shell("sacct -c -n -P -j " + job + " -o State,ExitCode")));
      return !out.empty();
    }, 10s);
    return out;
  }

  static std::string shell(const std::string& command) { return shellOutput(command); }

  static std::string slurmJobOf(const std::string& err) {
    std::smatch m;
    return std::regex_search(err, m, std::regex("Slurm job ([0-9]+) submitted")) ? m[1].str() : "";
  }

  static std::string_view trimmed(const std::string& text) {
    std::string_view v(text);
    while (!v.empty() && (v.back() == '\n' || v.back() == ' ')) v.remove_suffix(1);
    return v;
  }

  std::string data_;
};

TEST_F(Slurm, RanksRunOnTheirOwnHostsWithRealAddresses) {
  auto r = runCohort(run({"--nodes", "2", "--nproc-per-node", "2", "--framework", "generic", "--",
                          "sh", "-c",
                          "echo \"addr $COHORT_RANK $(hostname) $COHORT_MASTER_ADDR "
                          "$COHORT_HOSTS $GLOO_SOCKET_IFNAME\""}),
                     120s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::set<std::string> hostnames;
  std::regex line("\\[worker/([0-9]) node([0-9])\\] addr ([0-9]) (\\S+) (\\S+) (\\S+) (\\S+)");
  int lines = 0;
  for (std::sregex_iterator it(r.out.begin(), r.out.end(), line), end; it != end; ++it, ++lines) {
    const std::smatch& m = *it;
    hostnames.insert(m[4]);
    EXPECT_EQ(m[5], "10.77.0.11") << "MASTER_ADDR is node 0's own address: " << m[0];
    const std::string hosts = m[6];
    EXPECT_EQ(hosts.find("127."), std::string::npos) << m[0];
    EXPECT_NE(hosts.find("10.77.0.11"), std::string::npos) << m[0];
    EXPECT_EQ(m[7], "eth0") << "the collectives get the node's interface: " << m[0];
  }
  EXPECT_EQ(lines, 4) << r.out;
  EXPECT_EQ(hostnames.size(), 2u) << "two hosts: " << r.out;
  const std::string job = slurmJobOf(r.err);
  ASSERT_FALSE(job.empty()) << r.err;
  EXPECT_EQ(slurmState(job), "COMPLETED");
  // The plan on record carries the nodes' real addresses, and the script is kept with the job.
  const std::string dir = onlyJobDir(data_);
  nlohmann::json plan = readJson(dir + "/plan.json");
  EXPECT_EQ(plan["nodes"][1]["host"], "10.77.0.12") << plan.dump();
  EXPECT_TRUE(contains(readText(dir + "/slurm.sbatch"), "#SBATCH --nodes=2"));
}

TEST_F(Slurm, TheDdpExampleTrainsAcrossTwoHosts) {
  const std::string example = sourceDir() + "/examples/pytorch/ddp.yaml";
  auto r = runCohort(run({"-f", example, "--hp", "epochs=3"}), 240s);
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex("held-out accuracy: ([0-9.]+)"))) << r.out;
  EXPECT_GT(std::stod(m[1]), 0.85) << r.out;
}

TEST_F(Slurm, PreloadedRanksTrainAcrossTwoHosts) {
  const std::string example = sourceDir() + "/examples/pytorch/ddp.yaml";
  auto r = runCohort(run({"-f", example, "--launcher", "preload", "--hp", "epochs=3"}), 240s);
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex("held-out accuracy: ([0-9.]+)"))) << r.out;
  EXPECT_GT(std::stod(m[1]), 0.85) << r.out;
  EXPECT_TRUE(contains(readText(onlyJobDir(data_) + "/plan.json"), "\"preload\": true"));
}

// The distinct node addresses in a job's plan on record.
std::set<std::string> planHosts(const std::string& job_dir) {
  std::set<std::string> hosts;
  const nlohmann::json plan = readJson(job_dir + "/plan.json");
  for (const auto& node : plan["nodes"]) hosts.insert(node["host"].get<std::string>());
  return hosts;
}

TEST_F(Slurm, TensorFlowParameterServersRunAcrossFourHosts) {
  // The example's environment, on a file system the nodes share (they are this machine's).
  if (!usePresetEnvironment("tensorflow", "tensorflow"))
    GTEST_SKIP() << "the tensorflow environment is not built";
  auto r = runCohort(run({"-f", sourceDir() + "/examples/tensorflow/ps.yaml"}), 300s);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "tensorflow ps ok")) << r.out;
  const std::string dir = onlyJobDir(data_);
  EXPECT_EQ(planHosts(dir).size(), 4u);
  // TF_CONFIG names every task by its own host's address.
  const std::string plan = readText(dir + "/plan.json");
  EXPECT_TRUE(contains(plan, "\\\"ps\\\":[\\\"10.77.0.14:")) << plan.substr(0, 4000);
}

TEST_F(Slurm, MindSporeDynamicClusterRunsAcrossTwoHosts) {
  if (!usePresetEnvironment("mindspore", "mindspore"))
    GTEST_SKIP() << "the mindspore environment is not built";
  auto r = runCohort(run({"-f", sourceDir() + "/examples/mindspore/train.yaml"}), 300s);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "[worker/0 node0] mindspore data-parallel ok")) << r.out;
  const std::string dir = onlyJobDir(data_);
  EXPECT_EQ(planHosts(dir).size(), 2u);
  EXPECT_TRUE(contains(readText(dir + "/plan.json"), "\"MS_SCHED_HOST\": \"10.77.0.11\""));
}

TEST_F(Slurm, ARankFailingOnTheLastNodeEndsTheJobOnEveryNode) {
  const std::string pids = data_ + "/pids";
  auto r = runCohort(run({"--nodes", "3", "--framework", "generic", "--", testRank(),
                          "pidfile=" + pids, "rank2:sleep=0.5", "rank2:echo=boom",
                          "rank2:exit=7", "sleep=60"}),
                     120s);
  EXPECT_EQ(r.exit_code, 7) << r.err;
  EXPECT_TRUE(contains(r.err, "root cause: worker/2 on node 2 exited with code 7")) << r.err;
  EXPECT_TRUE(contains(r.err, "| boom")) << r.err;
  for (pid_t pid : readPids(pids)) {
    EXPECT_TRUE(waitFor([&] { return processGone(pid); }, 5s)) << "rank " << pid << " survived";
  }
  // Slurm's accounting agrees with cohort: the batch job failed with the job's exit code.
  const std::string job = slurmJobOf(r.err);
  ASSERT_FALSE(job.empty()) << r.err;
  EXPECT_TRUE(waitFor([&] { return slurmState(job) == "FAILED"; }, 10s)) << slurmState(job);
  EXPECT_TRUE(contains(shell("squeue -h -t all -j " + job + " -o '%r'"), "NonZeroExitCode"));
  EXPECT_EQ(accounted(job), "FAILED|7:0");
}

TEST_F(Slurm, MpirunReachesEveryHostThroughSlurm) {
  if (std::system("mpirun --version >/dev/null 2>&1 && /usr/bin/python3 -c 'import mpi4py'") != 0) {
    GTEST_SKIP() << "Debian's openmpi-bin and python3-mpi4py are not installed";
  }
  auto r = runCohort(run({"-f", sourceDir() + "/examples/mpi/hello.yaml"}), 120s);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  // Two ranks on each host, numbered node by node as cohort numbers them.
  for (const char* line : {"rank 0/4 on n1", "rank 1/4 on n1", "rank 2/4 on n2", "rank 3/4 on n2"}) {
    EXPECT_TRUE(contains(r.out, line)) << line << "\n" << r.out;
  }
  EXPECT_TRUE(contains(r.out, ": sum 6")) << r.out;
  const std::string dir = onlyJobDir(data_);
  EXPECT_EQ(readText(dir + "/files/hostfile"), "10.77.0.11 slots=2\n10.77.0.12 slots=2\n");
}

TEST_F(Slurm, AKilledAgentAndACutNetworkAreEachNamed) {
  {
    CohortProcess cohort(run({"--nodes", "3", "--framework", "generic", "--", testRank(),
                              "echo=up", "sleep=60"}));
    // Node 2's agent, found in its network namespace (n3), killed with SIGKILL.
    pid_t agent = 0;
    ASSERT_TRUE(waitFor(
        [&] {
          std::istringstream in(shell("ip netns pids cohort-n3"));
          for (std::string p; in >> p;) {
            std::string cmd = readText("/proc/" + p + "/cmdline");
            if (cmd.find("exec") != std::string::npos &&
                cmd.find("--coordinator") != std::string::npos) {
              agent = std::atoi(p.c_str());
              return true;
            }
          }
          return false;
        },
        30s));
    ASSERT_TRUE(waitFor([&] { return contains(readText(onlyJobDir(data_) + "/logs/worker-2.log"), "up"); }, 30s));
    ::kill(agent, SIGKILL);
    RunResult r = cohort.wait(60s);
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_TRUE(contains(r.err, "node 2's agent was lost (n3 at 10.77.0.13: its connection closed)"))
        << r.err;
    // Slurm's accounting agrees with cohort (srun alone would say 137, the killed agent's).
    const std::string job = slurmJobOf(r.err);
    ASSERT_FALSE(job.empty()) << r.err;
    EXPECT_EQ(accounted(job), "FAILED|1:0");
  }
  {
    const std::string data = tempDir();
    CohortProcess cohort({"run", "--backend", "slurm", "--data-root", data, "--nodes", "2",
                          "--heartbeat-timeout", "2s", "--framework", "generic", "--", testRank(),
                          "echo=up", "sleep=60"});
    ASSERT_TRUE(waitFor([&] { return contains(readText(onlyJobDir(data) + "/logs/worker-1.log"), "up"); }, 60s));
    const std::string cluster = sourceDir() + "/tests/slurm/cluster";
    ASSERT_EQ(std::system((cluster + " link n2 down").c_str()), 0);
    RunResult r = cohort.wait(60s);
    EXPECT_EQ(std::system((cluster + " link n2 up").c_str()), 0);
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_TRUE(contains(r.err, "node 1's agent was lost (n2 at 10.77.0.12: no word from it in 2.0s"))
        << r.err;
    // The verdict is known: cohort returns without waiting for Slurm to give the node up.
    EXPECT_TRUE(contains(r.err, "is cancelled; Slurm ends it once it can reach every node again"))
        << r.err;
    EXPECT_TRUE(contains(r.err, "root cause: node 1's agent was lost")) << r.err;
  }
}

// Nodes n2.. see STATE/private as a directory of their own (tests/slurm/cluster): a job there has
// no shared filesystem past node 0. Each node gets the files cohort wrote for the ranks, and
// copies what its ranks saved itself.
std::string baseName(const std::string& path) { return path.substr(path.rfind('/') + 1); }
bool fileExists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

TEST_F(Slurm, NodesWithoutTheJobDirectoryGetItsFilesAndCopyTheirOwnOutputs) {
  const std::string root = stateDir() + "/private/" + baseName(data_);
  const std::string target = data_ + "/saved";
  const std::string f = data_ + "/job.yaml";
  std::ofstream(f) << "name: local-disks\nframework: mpi\nlauncher: direct\nworkdir: " << data_
                   << "\ncommand: [sh, -c, 'cp \"$COHORT_HOSTFILE\" \"$COHORT_OUTPUT_DIR/hosts-$COHORT_RANK\""
                      " && hostname > \"$COHORT_OUTPUT_DIR/from-$COHORT_RANK\"']\n"
                      "roles: {worker: {nodes: 3}}\n"
                      "outputs: [{source: output/, target: " << target << "}]\n";
  auto r = runCohort({"run", "--backend", "slurm", "--data-root", root, "-f", f}, 120s);
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  const std::string job = onlyJobDir(root);
  const std::string id = baseName(job);
  // Slurm picks the nodes (one that was just down may be left out): node i of the job is the
  // host the plan names, nN at 10.77.0.(10+N).
  std::vector<std::string> hosts, names;
  const nlohmann::json plan = readJson(job + "/plan.json");
  for (const auto& node : plan["nodes"]) {
    hosts.push_back(node["host"].get<std::string>());
    names.push_back(
        "n" + std::to_string(std::stoi(hosts.back().substr(hosts.back().rfind('.') + 1)) - 10));
  }
  ASSERT_EQ(hosts.size(), 3u);
  std::string hostfile;
  for (const std::string& host : hosts) hostfile += host + " slots=1\n";
  for (int rank = 0; rank < 3; ++rank) {
    const std::string n = std::to_string(rank);
    EXPECT_EQ(readText(target + "/from-" + n), names[rank] + "\n") << rank;
    EXPECT_EQ(readText(target + "/hosts-" + n), hostfile) << rank;
  }
  // Node 1's files stayed on node 1; the coordinator's job directory has node 0's only.
  EXPECT_TRUE(fileExists(job + "/output/from-0"));
  EXPECT_FALSE(fileExists(job + "/output/from-1"));
  const std::string node1 =
      stateDir() + "/tmp/" + names[1] + "/private/" + baseName(data_) + "/jobs/" + id;
  EXPECT_EQ(readText(node1 + "/output/from-1"), names[1] + "\n");
  EXPECT_EQ(readText(node1 + "/files/hostfile"), hostfile);
  nlohmann::json result = readJson(job + "/result.json");
  EXPECT_EQ(result["outputs"][0]["files"], 6) << result.dump();
  // The logs came over the network, as always.
  EXPECT_TRUE(fileExists(job + "/logs/worker-2.log"));
}

TEST_F(Slurm, CtrlCWhilePendingOrRunningCancelsTheSlurmJob) {
  // One job holds every node (--exclusive); the next waits in Slurm's queue, and says why.
  const std::string holder = data_ + "/holder.yaml";
  std::ofstream(holder) << "name: holder\nframework: generic\ncommand: [sleep, \"60\"]\n"
                           "roles: {worker: {nodes: 3}}\nslurm: {options: [--exclusive]}\n";
  CohortProcess running(run({"-f", holder}));
  ASSERT_TRUE(waitFor([&] { return contains(shell("squeue -h -o '%j %T'"), "holder RUNNING"); }, 30s));
  CohortProcess queued(run({"--name", "waiter", "--nodes", "2", "--framework", "generic", "--",
                            "true"}));
  ASSERT_TRUE(waitFor([&] { return contains(shell("squeue -h -o '%j %T %r'"), "waiter PENDING"); }, 30s));
  // The pending reason is said in cohort's words, once.
  sleep(2);
  ::kill(queued.pid(), SIGINT);
  RunResult q = queued.wait(30s);
  EXPECT_EQ(q.exit_code, 130) << q.err;
  EXPECT_TRUE(contains(q.err, "is pending: waiting for free nodes (Resources)")) << q.err;
  EXPECT_FALSE(contains(shell("squeue -h -o '%j'"), "waiter")) << "nothing left queued";
  ::kill(running.pid(), SIGINT);
  RunResult r = running.wait(30s);
  EXPECT_EQ(r.exit_code, 130) << r.err;
  EXPECT_TRUE(waitFor([] { return shell("pgrep -f '^sleep 60$'").empty(); }, 10s))
      << "a rank survived on a node";
  EXPECT_FALSE(contains(shell("squeue -h -o '%j %T'"), "holder")) << "the batch job ended";
}

TEST_F(Slurm, WhatSlurmRefusesIsSaidInItsOwnWordsAndNothingIsQueued) {
  auto bad_partition = runCohort(run({"--nodes", "2", "--framework", "generic", "-f",
                                      [&] {
                                        std::string f = data_ + "/p.yaml";
                                        std::ofstream(f) << "name: nopart\ncommand: [\"true\"]\n"
                                                            "slurm: {partition: nosuch}\n";
                                        return f;
                                      }()}));
  EXPECT_EQ(bad_partition.exit_code, 1) << bad_partition.err;
  EXPECT_TRUE(contains(bad_partition.err, "sbatch exited with code 1")) << bad_partition.err;
  EXPECT_TRUE(contains(bad_partition.err, "invalid partition")) << bad_partition.err;
  // sbatch takes a job its partition can never run; cohort does not wait for ever.
  auto too_many = runCohort(run({"--nodes", "9", "--framework", "generic", "--", "true"}));
  EXPECT_EQ(too_many.exit_code, 1) << too_many.err;
  EXPECT_TRUE(contains(too_many.err, "can never start: it asks for more nodes than its partition "
                                     "allows (PartitionNodeLimit); it is cancelled"))
      << too_many.err;
  EXPECT_EQ(shell("squeue -h -t pd -o '%j'"), "") << "nothing left queued";
  // A Slurm that cannot be reached (its controller's port is wrong): its client's own words,
  // and no job started.
  std::string conf = readText(slurmConf());
  conf = std::regex_replace(conf, std::regex("SlurmctldPort=[0-9]+"), "SlurmctldPort=1");
  std::ofstream(data_ + "/nowhere.conf") << conf;
  const std::string elsewhere = tempDir();
  CohortProcess unreachable({"run", "--backend", "slurm", "--data-root", elsewhere,
                             "--framework", "generic", "--", "true"},
                            {"SLURM_CONF=" + data_ + "/nowhere.conf"});
  RunResult u = unreachable.wait(90s);
  EXPECT_EQ(u.exit_code, 1) << u.err;
  EXPECT_TRUE(contains(u.err, "Unable to contact slurm controller")) << u.err;
  EXPECT_TRUE(contains(u.err, "is Slurm up")) << u.err;
  EXPECT_EQ(shell("ls " + elsewhere + "/jobs 2>/dev/null"), "")
      << "no job directory for a job never submitted";
}

TEST_F(Slurm, AServerHandsItsJobsToSlurmAndFindsThemAgainAfterARestart) {
  std::string why;
  auto server = startServer(&why, {"--backend", "slurm", "--no-isolate", "--single-user"});
  ASSERT_TRUE(server) << why;
  const std::string token = server->adminToken();
  const std::string root = server->dataRoot();
  std::string url = server->url();
  auto cli = [&](std::vector<std::string> args) {
    args.insert(args.begin() + 1, {"--server", url, "--token", token});
    return runCohort(args, 60s);
  };
  auto record = [&](const std::string& id) {
    return nlohmann::json::parse(cli({"status", id, "--json"}).out, nullptr, false)["job"];
  };
  const std::string gate = data_ + "/go";
  const std::string holder_file = data_ + "/holder.yaml";
  std::ofstream(holder_file) << "name: holder\nframework: generic\nworkdir: " << data_
                             << "\ncommand: [" << testRank() << ", echo=up, wait-file=" << gate
                             << "]\nroles: {worker: {nodes: 3}}\nslurm: {options: [--exclusive]}\n";
  RunResult held = cli({"submit", "-f", holder_file});
  ASSERT_EQ(held.exit_code, 0) << held.err;
  const std::string holder = std::string(trimmed(held.out));
  ASSERT_TRUE(waitFor([&] { return record(holder).value("state", "") == "running"; }, 60s));
  RunResult wait = cli({"submit", "--name", "waiter", "--nodes", "2", "--framework", "generic",
                        "--workdir", data_, "--", "true"});
  ASSERT_EQ(wait.exit_code, 0) << wait.err;
  const std::string waiter = std::string(trimmed(wait.out));
  // Slurm queues it, and the server says why, in cohort's words.
  ASSERT_TRUE(waitFor([&] { return contains(cli({"ps"}).out, "waiting for free nodes"); }, 30s))
      << cli({"ps"}).out;
  EXPECT_TRUE(contains(record(waiter).value("reason", ""), "is pending: waiting for free nodes"))
      << record(waiter).dump();
  // cohort stop cancels it in Slurm: nothing stays queued.
  EXPECT_EQ(cli({"stop", waiter}).exit_code, 0);
  EXPECT_TRUE(waitFor([&] { return record(waiter).value("state", "") == "stopped"; }, 30s))
      << record(waiter).dump();
  EXPECT_TRUE(waitFor([&] { return !contains(shell("squeue -h -o '%j'"), "waiter"); }, 10s));

  // The server goes away while the holder runs, and comes back on another port.
  ::kill(server->pid(), SIGTERM);
  ASSERT_TRUE(waitFor([&] { return processGone(server->pid()); }, 20s));
  server = startServer(&why, {"--backend", "slurm", "--no-isolate", "--single-user",
                              "--data-root", root});
  ASSERT_TRUE(server) << why;
  url = server->url();
  EXPECT_EQ(record(holder).value("state", ""), "running") << record(holder).dump();
  std::ofstream(gate) << "go\n";
  ASSERT_TRUE(waitFor([&] { return record(holder).value("state", "") == "succeeded"; }, 60s))
      << record(holder).dump();
  // Slurm's accounting agrees: the batch job completed.
  const std::string slurm_job = std::string(trimmed(shell("squeue -h -t all -n holder -o '%i' | sort -n | tail -1")));
  EXPECT_EQ(accounted(slurm_job), "COMPLETED|0:0");
  EXPECT_TRUE(contains(readText(root + "/jobs/" + holder + "/logs/worker-2.log"), "up"));
}

TEST_F(Slurm, PlanPrintsTheBatchScriptWithoutSubmitting) {
  const std::string f = data_ + "/job.yaml";
  std::ofstream(f) << "name: sized\nframework: generic\ncommand: [\"true\"]\n"
                      "roles: {worker: {nodes: 2, procs_per_node: 2, resources: {cpus: 1.5, "
                      "memory: 1Gi}}}\npolicy: {max_runtime: 1h, grace_period: 30s}\n"
                      "slurm: {partition: debug, options: [--exclusive]}\n";
  const std::string before = shell("squeue -h -t all | wc -l");
  auto r = runCohort({"plan", "-f", f, "--backend", "slurm", "--data-root", data_});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* line : {"#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=1",
                           "#SBATCH --cpus-per-task=3", "#SBATCH --mem=2048M",
                           "#SBATCH --time=62", "#SBATCH --partition=debug",
                           "#SBATCH --exclusive", "--kill-on-bad-exit=0",
                           "exec --coordinator 10.77.0.1:PORT"}) {
    EXPECT_TRUE(contains(r.out, line)) << line << "\n" << r.out;
  }
  EXPECT_EQ(shell("squeue -h -t all | wc -l"), before) << "plan submits nothing";
}

}  // namespace
}  // namespace cohort::testing
