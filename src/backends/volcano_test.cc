// The Volcano Job rendering (volcano.h), pinned by golden files and checked against Volcano's
// own CustomResourceDefinition.
//
// Golden files: tests/golden/volcano/<example>.yaml, one per example job file, compared exactly.
// After a deliberate change to the rendering, COHORT_UPDATE_GOLDEN=1 build/unit_tests
// --gtest_filter='Volcano*' writes them again; review the diff before committing it.
//
// Volcano's CRD (batch.volcano.sh_jobs.yaml, with the Job's openAPIV3Schema) is not part of the
// project: the tests look for it beside the source tree, in ../shared/reference/volcano/, and skip
// the schema checks, saying so, when it is not there.
#include "backends/volcano.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "backends/openapi_schema.h"
#include "plan/plan.h"

namespace cohort::backends {
namespace {

using Json = nlohmann::json;

// Every rendering in these tests: fixed, so that no machine's path, time or random id gets in.
constexpr const char* kImage = "registry.example.com/cohort/train:0.1.0";
constexpr const char* kJobId = "job-20260101-000000-abcdef";

std::string readFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

spec::JobSpec parse(const std::string& yaml) {
  auto spec = spec::parseJobFile(yaml, "job.yaml");
  EXPECT_TRUE(spec) << spec.error().message;
  return spec ? *spec : spec::JobSpec{};
}

// The spec as `cohort plan --backend volcano --image kImage` makes it, without the file system.
spec::JobSpec forVolcano(spec::JobSpec spec) {
  spec.backend = spec::Backend::kVolcano;
  spec.environment.clear();
  spec.image = kImage;
  return spec;
}

Result<Json> render(const spec::JobSpec& spec) {
  plan::PlanContext ctx;
  ctx.job_id = kJobId;
  ctx.job_dir = "/data/jobs/" + std::string(kJobId);
  ctx.workdir = "/work";
  ctx.nodes_share_machine = false;
  COHORT_ASSIGN(plan::Plan plan, plan::makePlan(spec, ctx));
  return volcanoJob(spec, plan);
}

Json renderOk(const std::string& yaml) {
  auto job = render(forVolcano(parse(yaml)));
  EXPECT_TRUE(job) << job.error().message;
  return job ? *job : Json();
}

const Json& taskNamed(const Json& job, const std::string& name) {
  for (const Json& t : job["spec"]["tasks"]) {
    if (t["name"] == name) return t;
  }
  static const Json none;
  ADD_FAILURE() << "no task " << name << " in " << job.dump(2);
  return none;
}

// The Job's schema from Volcano's CRD; null when the CRD is not beside the source tree.
const Json& volcanoJobSchema() {
  static const Json schema = [] {
    const std::string path = std::string(COHORT_EXAMPLES_DIR) +
                             "/../../shared/reference/volcano/batch.volcano.sh_jobs.yaml";
    if (!std::filesystem::exists(path)) return Json();
    auto crd = parseYamlDocument(readFile(path));
    EXPECT_TRUE(crd) << path << ": " << crd.error().message;
    return crd ? (*crd)["spec"]["versions"][0]["schema"]["openAPIV3Schema"] : Json();
  }();
  return schema;
}

#define REQUIRE_VOLCANO_CRD()                                                              \
  if (volcanoJobSchema().is_null())                                                        \
  GTEST_SKIP() << "Volcano's CRD (../shared/reference/volcano/batch.volcano.sh_jobs.yaml " \
                  "beside the source tree) is not here: the check of renderings against "  \
                  "Volcano's Job schema did not run"

std::string violations(const Json& job) {
  std::string out;
  for (const SchemaViolation& v : validateKubernetesObject(job, volcanoJobSchema())) {
    out += describe(v) + "\n";
  }
  return out;
}

// Every example job file that parses, by its path under examples/ ("pytorch/ddp").
std::vector<std::pair<std::string, spec::JobSpec>> examples() {
  std::vector<std::pair<std::string, spec::JobSpec>> out;
  const std::filesystem::path root(COHORT_EXAMPLES_DIR);
  for (const auto& entry : std::filesystem::recursive_directory_iterator(root)) {
    if (entry.path().extension() != ".yaml") continue;
    auto spec = spec::parseJobFile(readFile(entry.path()), entry.path().filename());
    if (!spec) continue;
    std::string name = std::filesystem::relative(entry.path(), root).replace_extension().string();
    out.emplace_back(name, forVolcano(*spec));
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  return out;
}

TEST(VolcanoJob, EveryExampleMatchesItsGoldenFile) {
  const auto all = examples();
  ASSERT_GE(all.size(), 5u)
      << "examples/ should hold the PyTorch, TensorFlow, MindSpore and MPI jobs";
  for (const auto& [name, spec] : all) {
    auto job = render(spec);
    ASSERT_TRUE(job) << name << ": " << job.error().message;
    std::string file = name;
    std::replace(file.begin(), file.end(), '/', '_');
    const std::string path = std::string(COHORT_GOLDEN_DIR) + "/volcano/" + file + ".yaml";
    const std::string actual = manifestYaml(*job);
    if (std::getenv("COHORT_UPDATE_GOLDEN")) {
      std::filesystem::create_directories(std::filesystem::path(path).parent_path());
      std::ofstream(path) << actual;
      continue;
    }
    ASSERT_TRUE(std::filesystem::exists(path))
        << "missing golden file " << path << " (run with COHORT_UPDATE_GOLDEN=1)";
    EXPECT_EQ(readFile(path), actual) << "golden file " << path << " differs";
  }
}

TEST(VolcanoJob, EveryExampleValidatesAgainstVolcanosCrd) {
  REQUIRE_VOLCANO_CRD();
  for (const auto& [name, spec] : examples()) {
    auto job = render(spec);
    ASSERT_TRUE(job) << name << ": " << job.error().message;
    EXPECT_EQ(violations(*job), "") << name;
    // What kubectl reads is the YAML: it must be the same document.
    auto read_back = parseYamlDocument(manifestYaml(*job));
    ASSERT_TRUE(read_back) << read_back.error().message;
    EXPECT_EQ(*read_back, *job) << name;
  }
}

TEST(VolcanoJob, AnUnknownFieldInARenderingIsRefusedByTheCrd) {
  REQUIRE_VOLCANO_CRD();
  Json job = renderOk("name: x\ncommand: [python3, train.py]\n");
  job["spec"]["tasks"][1]["template"]["spec"]["containers"][0]["foo"] = "bar";
  job["spec"]["minAvailable"] = "all";
  EXPECT_EQ(violations(job),
            "spec.minAvailable: expected an integer, got a string\n"
            "spec.tasks[1].template.spec.containers[0].foo: unknown field\n");
}

TEST(VolcanoJob, OneTaskPerRoleWithAPodPerNodeAndTheCoordinatorGangScheduled) {
  Json job = renderOk(
      "name: ddp\ncommand: [python3, train.py]\n"
      "roles: {worker: {nodes: 3, procs_per_node: 2}}\n");
  EXPECT_EQ(job["apiVersion"], "batch.volcano.sh/v1alpha1");
  EXPECT_EQ(job["kind"], "Job");
  EXPECT_EQ(job["spec"]["schedulerName"], "volcano");
  EXPECT_EQ(job["spec"]["minAvailable"], 4) << "3 agents and the coordinator, all or none";
  EXPECT_EQ(job["spec"]["plugins"], Json::parse(R"({"svc": [], "env": []})"));
  ASSERT_EQ(job["spec"]["tasks"].size(), 2u);
  const Json& coordinator = taskNamed(job, "coordinator");
  EXPECT_EQ(coordinator["replicas"], 1);
  const Json& worker = taskNamed(job, "worker");
  EXPECT_EQ(worker["replicas"], 3);
  const Json& pod = worker["template"]["spec"];
  EXPECT_EQ(pod["restartPolicy"], "Never");
  EXPECT_EQ(pod["containers"][0]["image"], kImage);
  EXPECT_EQ(pod["containers"][0]["command"][2],
            "exec cohort exec --coordinator \"$COHORT_COORDINATOR\" --node \"$VC_TASK_INDEX\"");
  EXPECT_EQ(pod["containers"][0]["env"][0]["value"], "ddp-coordinator-0.ddp:7070")
      << "the agents dial the coordinator's pod by the svc plugin's name";
  EXPECT_EQ(job.dump().find("COHORT_JOB_SECRET\",\"value\":"), std::string::npos)
      << "the secret comes from a Kubernetes Secret, never in the manifest";
  EXPECT_EQ(pod["containers"][0]["env"][1]["valueFrom"]["secretKeyRef"]["name"], "ddp-secret");
}

TEST(VolcanoJob, LaterRolesNumberTheirNodesAfterTheEarlierOnes) {
  Json job = renderOk(
      "name: tf\nframework: tensorflow\ncommand: [python3, ps.py]\n"
      "roles: {ps: {nodes: 2}, worker: {nodes: 3}}\n");
  EXPECT_EQ(taskNamed(job, "ps")["template"]["spec"]["containers"][0]["command"][2],
            "exec cohort exec --coordinator \"$COHORT_COORDINATOR\" --node \"$VC_TASK_INDEX\"");
  EXPECT_EQ(taskNamed(job, "worker")["template"]["spec"]["containers"][0]["command"][2],
            "exec cohort exec --coordinator \"$COHORT_COORDINATOR\" --node $((2 + VC_TASK_INDEX))");
}

TEST(VolcanoJob, TensorFlowPsWorkerCompletesOnlyWhenTheWorkerTaskCompletes) {
  Json job = renderOk(
      "name: tf\nframework: tensorflow\ncommand: [python3, ps.py]\n"
      "roles: {ps: {nodes: 1}, worker: {nodes: 2}}\n");
  EXPECT_EQ(taskNamed(job, "worker")["policies"],
            Json::parse(R"([{"event": "TaskCompleted", "action": "CompleteJob"}])"));
  EXPECT_FALSE(taskNamed(job, "ps").contains("policies")) << "ps never completes by itself";
  EXPECT_FALSE(taskNamed(job, "coordinator").contains("policies"));
}

TEST(VolcanoJob, SeveralKeyRolesCompleteTheJobThroughTheCoordinator) {
  Json job = renderOk(
      "name: two\ncommand: [python3, train.py]\n"
      "roles: {trainer: {nodes: 1}, evaluator: {nodes: 1}}\n");
  EXPECT_FALSE(taskNamed(job, "trainer").contains("policies"));
  EXPECT_FALSE(taskNamed(job, "evaluator").contains("policies"));
  EXPECT_EQ(taskNamed(job, "coordinator")["policies"],
            Json::parse(R"([{"event": "TaskCompleted", "action": "CompleteJob"}])"))
      << "Volcano cannot wait for two tasks; the coordinator ends once both succeeded";
}

TEST(VolcanoJob, NoRestartsAbortsTheJobWhenAPodFails) {
  Json job = renderOk("name: x\ncommand: [python3, train.py]\npolicy: {max_restarts: 0}\n");
  EXPECT_EQ(job["spec"]["maxRetry"], 0);
  EXPECT_EQ(job["spec"]["policies"], Json::parse(R"([{"event": "PodFailed", "action": "AbortJob"},
                                                      {"event": "PodEvicted", "action": "AbortJob"}])"));
}

TEST(VolcanoJob, RestartsAreCohortsInTheSamePodsNeverVolcanos) {
  Json job = renderOk("name: x\ncommand: [python3, train.py]\npolicy: {max_restarts: 3}\n");
  EXPECT_EQ(job["spec"]["maxRetry"], 0) << "one coordinator, one record: Volcano never restarts";
  EXPECT_EQ(job["spec"]["policies"], Json::parse(R"([{"event": "PodFailed", "action": "AbortJob"},
                            {"event": "PodEvicted", "action": "AbortJob"}])"));
  EXPECT_NE(job.dump().find("max_restarts\\\":3"), std::string::npos)
      << "the coordinator restarts the ranks: the job file it gets keeps max_restarts";
}

TEST(VolcanoJob, StoppedPodsGetTheGracePeriodAndMore) {
  Json job = renderOk("name: x\ncommand: [python3, train.py]\npolicy: {grace_period: 20s}\n");
  EXPECT_EQ(taskNamed(job, "worker")["template"]["spec"]["terminationGracePeriodSeconds"],
            20 + kAgentGraceS);
  EXPECT_EQ(taskNamed(job, "coordinator")["template"]["spec"]["terminationGracePeriodSeconds"],
            20 + kCoordinatorGraceS);
}

TEST(VolcanoJob, TheSecretHoldsWhatThePodsReadAndOnlyThat) {
  Json job = renderOk("name: x\ncommand: [python3, train.py]\n");
  Json secret = volcanoSecret(job, "s3cr3t", std::nullopt);
  EXPECT_EQ(secret["metadata"]["name"], "x-secret");
  EXPECT_EQ(secret["stringData"], Json::parse(R"({"secret": "s3cr3t"})"));
  EXPECT_EQ(secret["metadata"]["labels"], job["metadata"]["labels"]);
  Json reported = volcanoSecret(job, "s3cr3t", VolcanoReport{"http://10.0.0.1:8600", "tok", ""});
  EXPECT_EQ(reported["stringData"]["report-url"], "http://10.0.0.1:8600");
  EXPECT_EQ(reported["stringData"]["report-token"], "tok");
  EXPECT_FALSE(reported["stringData"].contains("report-pin"));
  // A server with TLS: the pin its coordinator verifies the server's certificate by.
  Json pinned =
      volcanoSecret(job, "s3cr3t", VolcanoReport{"https://10.0.0.1:8600", "tok", "sha256//AAAA"});
  EXPECT_EQ(pinned["stringData"]["report-pin"], "sha256//AAAA");
  // A server's store in S3: its variables, and nothing else its environment holds.
  Json stored = volcanoSecret(job, "s3cr3t", std::nullopt,
                              {{"COHORT_STORE", "s3://b/p"},
                               {"COHORT_STORE_SECRET_ACCESS_KEY", "k"},
                               {"AWS_SECRET_ACCESS_KEY", "not passed"}});
  EXPECT_EQ(stored["stringData"], Json::parse(R"({"secret": "s3cr3t", "COHORT_STORE": "s3://b/p",
                                                  "COHORT_STORE_SECRET_ACCESS_KEY": "k"})"));
  // The manifest names the keys, never their values; the coordinator and every agent read the
  // store's, the ranks never see them (the agents keep them back).
  const std::string text = job.dump();
  EXPECT_NE(text.find("\"report-token\""), std::string::npos);
  EXPECT_EQ(text.find("s3cr3t"), std::string::npos);
  for (const char* task : {"coordinator", "worker"}) {
    const Json& env = taskNamed(job, task)["template"]["spec"]["containers"][0]["env"];
    bool store = false;
    for (const Json& v : env) store = store || v["name"] == "COHORT_STORE_SECRET_ACCESS_KEY";
    EXPECT_TRUE(store) << task;
  }
}

TEST(VolcanoJob, ResourcesSizeEachPodForItsNodesRanks) {
  Json job = renderOk(
      "name: g\ncommand: [python3, train.py]\n"
      "roles: {worker: {nodes: 2, procs_per_node: 4, resources: {gpus: 1, cpus: 1.5, memory: "
      "3Gi}}}\n");
  EXPECT_EQ(taskNamed(job, "worker")["template"]["spec"]["containers"][0]["resources"],
            Json::parse(R"({"requests": {"cpu": "6", "memory": "12Gi"},
                            "limits": {"cpu": "6", "memory": "12Gi", "nvidia.com/gpu": "4"}})"));
  Json unbounded = renderOk(
      "name: u\ncommand: [python3, train.py]\n"
      "roles: {worker: {procs_per_node: 3}}\n");
  EXPECT_EQ(taskNamed(unbounded, "worker")["template"]["spec"]["containers"][0]["resources"],
            Json::parse(R"({"requests": {"cpu": "3"}})"))
      << "cpus not given: what the scheduler counts, no limit";
}

TEST(VolcanoJob, AscendNpusForRankTableJobsOrWhenAsked) {
  Json ms = renderOk(
      "name: ms\nframework: mindspore\nmode: rank_table\ncommand: [python3, train.py]\n"
      "roles: {worker: {nodes: 2, procs_per_node: 8, resources: {gpus: 1}}}\n");
  EXPECT_EQ(taskNamed(ms, "worker")["template"]["spec"]["containers"][0]["resources"]["limits"],
            Json::parse(R"({"huawei.com/Ascend910": "8"})"));
  Json asked = renderOk(
      "name: pt\ncommand: [python3, train.py]\nvolcano: {device_resource: huawei.com/Ascend910}\n"
      "roles: {worker: {resources: {gpus: 2}}}\n");
  EXPECT_EQ(taskNamed(asked, "worker")["template"]["spec"]["containers"][0]["resources"]["limits"],
            Json::parse(R"({"huawei.com/Ascend910": "2"})"));
}

TEST(VolcanoJob, QueueAndPriorityClassComeFromTheJobFile) {
  Json job = renderOk(
      "name: q\ncommand: [python3, train.py]\n"
      "volcano: {queue: research, priority_class: high-priority}\n");
  EXPECT_EQ(job["spec"]["queue"], "research");
  EXPECT_EQ(job["spec"]["priorityClassName"], "high-priority");
  Json plain = renderOk("name: q\ncommand: [python3, train.py]\n");
  EXPECT_FALSE(plain["spec"].contains("queue")) << "the cluster's default queue";
  EXPECT_FALSE(plain["spec"].contains("priorityClassName"));
  auto bad =
      spec::parseJobFile("name: q\ncommand: [x]\nvolcano: {queue: Research_1}\n", "job.yaml");
  ASSERT_TRUE(bad);
  auto refused = spec::validate(*bad);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("volcano.queue"), std::string::npos)
      << refused.error().message;
}

TEST(VolcanoJob, ANameThatIsNotDns1123BecomesAValidOne) {
  Json job = renderOk("name: My_Big.Job--v2_\ncommand: [python3, train.py]\n");
  EXPECT_EQ(job["metadata"]["name"], "my-big-job-v2");
  EXPECT_EQ(job["metadata"]["labels"]["cohort/job-name"], "my-big-job-v2");
  EXPECT_EQ(job["metadata"]["annotations"]["cohort/job-id"], kJobId);
  Json digit = renderOk("name: 2024-run\ncommand: [python3, train.py]\n");
  EXPECT_EQ(digit["metadata"]["name"], "job-2024-run") << "a Service name starts with a letter";
  // The longest pod name, <job>-<task>-<index>, is a host name: at most 63 characters.
  Json longest = renderOk("name: " + std::string(63, 'a') +
                          "\ncommand: [python3, train.py]\n"
                          "roles: {Parameter_Servers_Of_Many: {nodes: 12}}\n");
  const std::string name = longest["metadata"]["name"];
  EXPECT_EQ(taskNamed(longest, "parameter-servers-of")["replicas"], 12);
  EXPECT_EQ((name + "-parameter-servers-of-11").size(), 63u) << name;
  EXPECT_EQ(dnsLabel("--", 63, "job"), "job");
  EXPECT_EQ(dnsLabel("A.B", 63, "job"), "a-b");
}

TEST(VolcanoJob, RolesWhoseTaskNamesCollideAreRefused) {
  auto job =
      render(forVolcano(parse("name: x\ncommand: [python3, t.py]\n"
                              "roles: {Worker: {}, worker: {}}\n")));
  ASSERT_FALSE(job);
  EXPECT_NE(job.error().message.find("rename the role"), std::string::npos) << job.error().message;
  auto coordinator =
      render(forVolcano(parse("name: x\ncommand: [python3, t.py]\n"
                              "roles: {coordinator: {}}\n")));
  ASSERT_FALSE(coordinator);
  EXPECT_NE(coordinator.error().message.find("cohort's coordinator"), std::string::npos);
}

TEST(VolcanoJob, NoImageIsRefusedNamingTheField) {
  spec::JobSpec spec = forVolcano(parse("name: x\ncommand: [python3, t.py]\n"));
  spec.image.clear();
  spec.environment = "pytorch";
  auto job = render(spec);
  ASSERT_FALSE(job);
  EXPECT_EQ(job.error().code, Code::kInvalidArgument);
  EXPECT_NE(job.error().message.find("environment: {image: REF}"), std::string::npos)
      << job.error().message;
  EXPECT_NE(job.error().message.find("'pytorch' is an environment of this machine"),
            std::string::npos)
      << job.error().message;
}

TEST(VolcanoJob, TheImageComesFromTheEnvironmentField) {
  auto spec = spec::parseJobFile(
      "name: x\ncommand: [python3, t.py]\nbackend: volcano\n"
      "environment: {image: 'ghcr.io/lab/train:1.2'}\n",
      "job.yaml");
  ASSERT_TRUE(spec) << spec.error().message;
  EXPECT_EQ(spec->image, "ghcr.io/lab/train:1.2");
  EXPECT_TRUE(spec::validate(*spec));
  auto again = spec::parseJobFile(spec::toJobFile(*spec), "job.json");
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_EQ(again->image, spec->image) << "the job file a server stores keeps the image";
  spec->backend = spec::Backend::kLocal;
  EXPECT_TRUE(spec::validate(*spec)) << "locally each rank runs in the image (plan/container.cc)";
}

TEST(VolcanoJob, YamlQuotesWhatWouldReadAsAnotherType) {
  const Json doc = Json::parse(R"({"a": "1", "b": "true", "c": "500m", "d": "plain-word",
                                   "e": "", "f": 7, "g": [], "h": {}, "i": "x: y", "j": "no"})");
  const std::string yaml = manifestYaml(doc);
  EXPECT_NE(yaml.find("a: \"1\""), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("d: plain-word"), std::string::npos) << yaml;
  auto back = parseYamlDocument(yaml);
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(*back, doc) << yaml;
}

}  // namespace
}  // namespace cohort::backends
