#include "backends/ssh_hosts.h"

#include <gtest/gtest.h>

namespace cohort::backends {
namespace {

spec::JobSpec oneRole() {
  spec::JobSpec s = spec::defaultSpec();
  s.command = {"python3", "train.py"};
  return s;
}

TEST(SshHosts, HostListTakesNamesAndSlots) {
  auto hosts = parseHostList("h1,user@h2:4, 10.0.0.3");
  ASSERT_TRUE(hosts) << hosts.error().message;
  ASSERT_EQ(hosts->size(), 3u);
  EXPECT_EQ((*hosts)[0].name, "h1");
  EXPECT_EQ((*hosts)[0].slots, 0);
  EXPECT_EQ((*hosts)[1].name, "user@h2");
  EXPECT_EQ((*hosts)[1].slots, 4);
  EXPECT_EQ((*hosts)[2].name, "10.0.0.3");
}

TEST(SshHosts, HostThatLooksLikeAnOptionIsRefused) {
  auto hosts = parseHostList("h1,-oProxyCommand=touch /tmp/x");
  ASSERT_FALSE(hosts);
  EXPECT_NE(hosts.error().message.find("ssh would read it as an option"), std::string::npos);
  EXPECT_FALSE(parseHostList("h1,h 2"));
  EXPECT_FALSE(parseHostList("h1,"));
  EXPECT_FALSE(parseHostList("h1:0"));
}

TEST(SshHosts, RepeatedHostIsRefused) {
  auto hosts = parseHostList("h1,h1");
  ASSERT_FALSE(hosts);
  EXPECT_NE(hosts.error().message.find("named twice"), std::string::npos);
}

TEST(SshHosts, HostfileReadsMpirunAndDeepSpeedForm) {
  auto hosts = parseHostfile("# two GPU boxes\nworker-1 slots=8\n\nworker-2 slots=8 max_slots=8\n"
                             "10.0.0.3   # no slots\n",
                             "hosts.txt");
  ASSERT_TRUE(hosts) << hosts.error().message;
  ASSERT_EQ(hosts->size(), 3u);
  EXPECT_EQ((*hosts)[0].slots, 8);
  EXPECT_EQ((*hosts)[1].name, "worker-2");
  EXPECT_EQ((*hosts)[2].slots, 0);
}

TEST(SshHosts, HostfileErrorNamesFileAndLine) {
  auto hosts = parseHostfile("a slots=2\nb cpus=2\n", "hosts.txt");
  ASSERT_FALSE(hosts);
  EXPECT_EQ(hosts.error().message.rfind("hosts.txt:2: ", 0), 0u) << hosts.error().message;
  auto empty = parseHostfile("# nothing\n\n", "hosts.txt");
  ASSERT_FALSE(empty);
  EXPECT_NE(empty.error().message.find("names no host"), std::string::npos);
}

TEST(SshHosts, HostsMeanSsh) {
  EXPECT_EQ(*chooseBackend("", spec::Backend::kLocal, true), spec::Backend::kSsh);
  EXPECT_EQ(*chooseBackend("ssh", spec::Backend::kLocal, true), spec::Backend::kSsh);
  // A job file that says slurm is overridden by hosts given on the command line.
  EXPECT_EQ(*chooseBackend("", spec::Backend::kSlurm, true), spec::Backend::kSsh);
}

TEST(SshHosts, HostsWithAnotherBackendFlagAreRefused) {
  auto b = chooseBackend("slurm", spec::Backend::kLocal, true);
  ASSERT_FALSE(b);
  EXPECT_NE(b.error().message.find("give one or the other"), std::string::npos);
}

TEST(SshHosts, SshWithoutHostsIsRefused) {
  auto flag = chooseBackend("ssh", spec::Backend::kLocal, false);
  ASSERT_FALSE(flag);
  EXPECT_NE(flag.error().message.find("--backend ssh needs the hosts"), std::string::npos);
  auto file = chooseBackend("", spec::Backend::kSsh, false);
  ASSERT_FALSE(file);
  EXPECT_NE(file.error().message.find("backend: ssh needs the hosts"), std::string::npos);
}

TEST(SshHosts, WithoutHostsTheBackendIsTheFlagsOrTheFiles) {
  EXPECT_EQ(*chooseBackend("", spec::Backend::kSlurm, false), spec::Backend::kSlurm);
  EXPECT_EQ(*chooseBackend("local", spec::Backend::kSlurm, false), spec::Backend::kLocal);
  EXPECT_FALSE(chooseBackend("pbs", spec::Backend::kLocal, false));
}

TEST(SshHosts, OneNodePerHostAndSlotsAsProcesses) {
  spec::JobSpec s = oneRole();
  ASSERT_TRUE(placeNodesOnHosts(s, {{"a", 2}, {"b", 2}, {"c", 2}}, false, false));
  EXPECT_EQ(s.roles[0].nodes, 3);
  EXPECT_EQ(s.roles[0].procs_per_node, 2);
}

TEST(SshHosts, NodesFlagTakesTheFirstHosts) {
  spec::JobSpec s = oneRole();
  s.roles[0].nodes = 2;
  ASSERT_TRUE(placeNodesOnHosts(s, {{"a", 0}, {"b", 0}, {"c", 0}}, true, false));
  EXPECT_EQ(s.roles[0].nodes, 2);
  EXPECT_EQ(s.roles[0].procs_per_node, 1);
}

TEST(SshHosts, MoreNodesThanHostsIsRefused) {
  spec::JobSpec s = oneRole();
  s.roles[0].nodes = 3;
  auto placed = placeNodesOnHosts(s, {{"a", 0}, {"b", 0}}, true, false);
  ASSERT_FALSE(placed);
  EXPECT_NE(placed.error().message.find("3 nodes and 2 host(s)"), std::string::npos);
}

TEST(SshHosts, ProcessesOverAHostsSlotsAreRefused) {
  spec::JobSpec s = oneRole();
  s.roles[0].procs_per_node = 4;
  auto placed = placeNodesOnHosts(s, {{"a", 4}, {"b", 2}}, false, true);
  ASSERT_FALSE(placed);
  EXPECT_NE(placed.error().message.find("host 'b' has 2 slot(s)"), std::string::npos);
}

TEST(SshHosts, DifferentSlotsNeedAProcessCount) {
  spec::JobSpec s = oneRole();
  auto placed = placeNodesOnHosts(s, {{"a", 4}, {"b", 2}}, false, false);
  ASSERT_FALSE(placed);
  EXPECT_NE(placed.error().message.find("--nproc-per-node"), std::string::npos);
  spec::JobSpec given = oneRole();
  given.roles[0].procs_per_node = 2;
  EXPECT_TRUE(placeNodesOnHosts(given, {{"a", 4}, {"b", 2}}, false, true));
}

TEST(SshHosts, AutoProcessesAreRefused) {
  spec::JobSpec s = oneRole();
  s.roles[0].procs_per_node = spec::kAutoProcs;
  auto placed = placeNodesOnHosts(s, {{"a", 0}}, false, true);
  ASSERT_FALSE(placed);
  EXPECT_NE(placed.error().message.find("auto"), std::string::npos);
}

TEST(SshHosts, SshCommandSplitsLikeAShell) {
  auto words = splitSshCommand("ssh -p 2222 -i '/keys/my key' -o \"User=ml\"");
  ASSERT_TRUE(words);
  EXPECT_EQ(*words, (std::vector<std::string>{"ssh", "-p", "2222", "-i", "/keys/my key",
                                               "-o", "User=ml"}));
  EXPECT_FALSE(splitSshCommand("ssh -i 'unclosed"));
  EXPECT_FALSE(splitSshCommand("   "));
}

TEST(SshHosts, ProbeAnswerIsReadPastABanner) {
  auto p = parseProbe("Welcome to the lab!\ncohort-probe 1\nfrom 10.88.0.1\nmachine x86_64\n"
                      "binary no\npython /usr/bin/python3\nanswer {\"missing\": []}\n"
                      "cohort-probe end\n");
  ASSERT_TRUE(p) << p.error().message;
  EXPECT_EQ(p->from, "10.88.0.1");
  EXPECT_EQ(p->machine, "x86_64");
  EXPECT_FALSE(p->has_binary);
  EXPECT_EQ(p->python, "/usr/bin/python3");
  EXPECT_EQ(p->python_answer, "{\"missing\": []}");
}

TEST(SshHosts, ProbeWithoutPythonOrCutShort) {
  auto p = parseProbe("cohort-probe 1\nfrom 10.88.0.1\nbinary yes\npython none\ncohort-probe end\n");
  ASSERT_TRUE(p);
  EXPECT_TRUE(p->python_asked);
  EXPECT_EQ(p->python, "");
  EXPECT_TRUE(p->has_binary);
  EXPECT_FALSE(parseProbe("cohort-probe 1\nfrom 10.88.0.1\n"));
  EXPECT_FALSE(parseProbe("fish: Unknown command\n"));
}

TEST(SshHosts, AgentScriptKeepsTheSecretOffTheCommandLine) {
  AgentScript a;
  a.hash = "ab12";
  a.job_dir = "/data/it's/jobs/j1";
  a.coordinator = "10.88.0.1:4000";
  a.node = 1;
  a.interface = "eth0";
  const std::string s = agentScript(a);
  EXPECT_NE(s.find("IFS= read -r s"), std::string::npos);
  EXPECT_NE(s.find("COHORT_JOB_SECRET=\"$s\" \"$b\" exec --coordinator 10.88.0.1:4000 --node 1 "
                   "--interface eth0"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("d='/data/it'\\''s/jobs/j1'"), std::string::npos) << s;
  // Its own job directory goes however the script ends; the coordinator's is left alone.
  EXPECT_NE(s.find("if [ ! -e \"$d/mark\" ]"), std::string::npos);
  EXPECT_NE(s.find("rm -rf \"$m\""), std::string::npos);
  EXPECT_NE(s.find("snapshot unpack"), std::string::npos);
  a.snapshot = false;
  EXPECT_EQ(agentScript(a).find("snapshot unpack"), std::string::npos);
}

TEST(SshHosts, CapacityIsTheSlotsElseTheCpus) {
  const std::string said = "Welcome!\ncohort-capacity 1\ncpus 16\nmemory_kib 2048\ngpus 2\n"
                           "cohort-capacity end\n";
  auto c = parseCapacity(said, 0);
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->cpus, 16);
  EXPECT_EQ(c->memory_bytes, 2048 * 1024);
  EXPECT_EQ(c->gpus, 2);
  EXPECT_EQ(parseCapacity(said, 4)->cpus, 4);
  auto none = parseCapacity("cohort-capacity 1\ncpus \nmemory_kib\ngpus 0\ncohort-capacity end\n", 0);
  ASSERT_TRUE(none);
  EXPECT_EQ(none->cpus, 1);
  EXPECT_EQ(none->gpus, 0);
  EXPECT_FALSE(parseCapacity("cohort-capacity 1\ncpus 4\n", 0));  // cut short
  EXPECT_NE(capacityScript().find("cohort-capacity end"), std::string::npos);
}

TEST(SshHosts, HostExitsAreNamed) {
  EXPECT_EQ(describeHostExit("h2", 255, "ssh: connect to host h2 port 22: Connection refused\n"),
            "host h2: ssh could not reach it or log in: ssh: connect to host h2 port 22: "
            "Connection refused");
  EXPECT_NE(describeHostExit("h2", kNoJobDirExit, "").find("--data-root"), std::string::npos);
  EXPECT_NE(describeHostExit("h2", 3, "").find("exited with 3"), std::string::npos);
}

}  // namespace
}  // namespace cohort::backends
