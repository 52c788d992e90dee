// A Volcano Job's objects in cohort's words (volcano_status.h), from objects shaped as Volcano's
// controller and scheduler and the kubelet write them.
#include "backends/volcano_status.h"

#include <gtest/gtest.h>

namespace cohort::backends {
namespace {

using Json = nlohmann::json;

Json job(const std::string& phase) {
  return {{"metadata", {{"name", "ddp"}}}, {"status", {{"state", {{"phase", phase}}}}}};
}

Json pod(const std::string& name, const Json& status) {
  return {{"metadata", {{"name", name}, {"uid", "uid-" + name}}}, {"status", status}};
}

// A pod the scheduler placed on a node.
Json bound(const std::string& name, const Json& status) {
  Json p = pod(name, status);
  p["spec"] = {{"nodeName", "node-1"}};
  return p;
}

Json unschedulable(const std::string& message) {
  return {{"phase", "Pending"},
          {"conditions",
           {{{"type", "PodScheduled"},
             {"status", "False"},
             {"reason", "Unschedulable"},
             {"message", message}}}}};
}

Json running() {
  return {{"phase", "Running"},
          {"containerStatuses", {{{"name", "c"}, {"state", {{"running", {{"startedAt", "t"}}}}}}}}};
}

Json terminated(int code) {
  return {
      {"phase", code == 0 ? "Succeeded" : "Failed"},
      {"containerStatuses",
       {{{"name", "c"}, {"state", {{"terminated", {{"exitCode", code}, {"reason", "Error"}}}}}}}}};
}

Json waitingFor(const std::string& reason, const std::string& message) {
  return {{"phase", "Pending"},
          {"conditions", {{{"type", "PodScheduled"}, {"status", "True"}}}},
          {"containerStatuses",
           {{{"name", "c"},
             {"image", "registry.example.com/train:1"},
             {"state", {{"waiting", {{"reason", reason}, {"message", message}}}}}}}}};
}

constexpr const char* kGang =
    "3/5 tasks in gang unschedulable: pod group is not ready, 5 Pending, 5 minAvailable; "
    "Pending: 3 Unschedulable, 2 Schedulable";

TEST(VolcanoView, AGangThatDoesNotFitSaysHowManyPodsCanBeScheduledAndWhy) {
  Json podgroup = {{"status",
                    {{"phase", "Inqueue"},
                     {"conditions",
                      {{{"type", "Unschedulable"},
                        {"status", "True"},
                        {"reason", "NotEnoughResources"},
                        {"message", kGang}}}}}}};
  Json pods = {
      pod("ddp-coordinator-0", unschedulable(kGang)), pod("ddp-worker-0", unschedulable(kGang)),
      pod("ddp-worker-2", unschedulable("0/3 nodes are unavailable: 3 Insufficient cpu."))};
  VolcanoView v = volcanoView(job("Pending"), podgroup, pods, "ddp-coordinator-0");
  EXPECT_FALSE(v.final);
  EXPECT_EQ(v.waiting,
            "waiting for the gang: 2 of 5 pods can be scheduled (ddp-worker-2: 0/3 nodes are "
            "unavailable: 3 Insufficient cpu)");
  EXPECT_FALSE(v.coordinator_started);
}

TEST(VolcanoView, PodsNotPlacedYetWaitForTheScheduler) {
  Json pods = {pod("ddp-worker-0", {{"phase", "Pending"}})};
  EXPECT_EQ(volcanoView(job("Pending"), nullptr, pods, "c").waiting,
            "waiting for Volcano's scheduler to place the pods");
}

TEST(VolcanoView, BeforeThePodsExistItSaysWhatItWaitsFor) {
  EXPECT_EQ(volcanoView(Json::object(), nullptr, Json::array(), "x").waiting,
            "waiting for Volcano to take the Job (is its controller running?)");
  EXPECT_EQ(
      volcanoView(job("Pending"), {{"status", {{"phase", "Pending"}}}}, Json::array(), "x").waiting,
      "waiting for Volcano to admit the gang to its queue");
}

TEST(VolcanoView, AnImageThatCannotBePulledIsSaidAndABadOneBreaksTheJob) {
  Json pods = {bound("ddp-worker-0", waitingFor("ImagePullBackOff", "Back-off pulling image"))};
  VolcanoView v = volcanoView(job("Pending"), nullptr, pods, "ddp-coordinator-0");
  EXPECT_EQ(v.waiting,
            "pod ddp-worker-0: its image registry.example.com/train:1 cannot be pulled "
            "(ImagePullBackOff: Back-off pulling image)");
  EXPECT_TRUE(v.broken.empty());
  pods = {bound("ddp-worker-0",
                waitingFor("CreateContainerConfigError", "secret \"ddp-secret\" not found"))};
  v = volcanoView(job("Pending"), nullptr, pods, "ddp-coordinator-0");
  EXPECT_EQ(v.broken,
            "pod ddp-worker-0 cannot start: CreateContainerConfigError: secret \"ddp-secret\" not "
            "found");
}

TEST(VolcanoView, ARunningGangWaitsForNothing) {
  Json pods = {pod("ddp-coordinator-0", running()), pod("ddp-worker-0", running())};
  VolcanoView v = volcanoView(job("Running"), nullptr, pods, "ddp-coordinator-0");
  EXPECT_TRUE(v.waiting.empty());
  EXPECT_TRUE(v.coordinator_started);
  EXPECT_EQ(v.coordinator_uid, "uid-ddp-coordinator-0");
  EXPECT_FALSE(v.coordinator_exit);
  EXPECT_EQ(v.pods, 2);
}

TEST(VolcanoView, TheEndCarriesTheCoordinatorsExitCode) {
  Json pods = {pod("ddp-coordinator-0", terminated(3)), pod("ddp-worker-0", terminated(3))};
  VolcanoView v = volcanoView(job("Aborted"), nullptr, pods, "ddp-coordinator-0");
  EXPECT_TRUE(v.final);
  ASSERT_TRUE(v.coordinator_exit);
  EXPECT_EQ(*v.coordinator_exit, 3);
  EXPECT_TRUE(v.coordinator_gone.empty());
}

// A coordinator pod whose command cannot run (the image lacks cohort) ends with 127 and never
// says the job's end: its end says what that code means.
TEST(VolcanoView, ACoordinatorThatCouldNotRunSaysWhatItsExitCodeMeans) {
  Json status = terminated(127);
  status["containerStatuses"][0]["state"]["terminated"]["reason"] = "StartError";
  status["containerStatuses"][0]["state"]["terminated"]["message"] =
      "exec: \"cohort\": executable file not found in $PATH";
  Json pods = {pod("ddp-coordinator-0", status)};
  VolcanoView v = volcanoView(job("Failed"), nullptr, pods, "ddp-coordinator-0");
  ASSERT_TRUE(v.coordinator_exit);
  EXPECT_EQ(*v.coordinator_exit, 127);
  EXPECT_EQ(v.coordinator_end,
            "its container ended with exit code 127 (StartError: exec: \"cohort\": executable "
            "file not found in $PATH): its command was not found: the image needs `cohort` on "
            "its PATH (and what the job's command needs)");
  EXPECT_EQ(coordinatorEndWords(137, "OOMKilled", ""),
            "its container ended with exit code 137 (OOMKilled): it was killed (SIGKILL: out of "
            "memory, or the pod was deleted)");
  EXPECT_EQ(coordinatorEndWords(3, "Error", ""), "its container ended with exit code 3");
}

TEST(VolcanoView, AnEvictedCoordinatorSaysSo) {
  Json evicted = {{"phase", "Failed"},
                  {"reason", "Evicted"},
                  {"message", "The node was low on resource: memory."}};
  VolcanoView v = volcanoView(job("Aborted"), nullptr, Json{pod("ddp-coordinator-0", evicted)},
                              "ddp-coordinator-0");
  EXPECT_FALSE(v.coordinator_exit);
  EXPECT_EQ(v.coordinator_gone,
            "its pod ddp-coordinator-0 failed (Evicted): The node was low on resource: memory");
  v = volcanoView(job("Aborted"), nullptr, Json::array(), "ddp-coordinator-0");
  EXPECT_EQ(v.coordinator_gone, "its pod ddp-coordinator-0 is gone");
}

TEST(VolcanoView, ObjectsOfTheWrongShapeAreFieldsNotSet) {
  for (const Json& odd :
       {Json(5), Json("x"), Json::array({1, "a", nullptr}),
        Json{{"status", {{"state", {{"phase", 7}}}}}}, Json{{"status", {{"conditions", "no"}}}}}) {
    VolcanoView v = volcanoView(odd, odd, odd, "c");
    EXPECT_FALSE(v.final);
    EXPECT_FALSE(v.coordinator_exit);
  }
  Json pods = {
      pod("c", {{"containerStatuses", {{{"state", {{"terminated", {{"exitCode", "x"}}}}}}}}})};
  EXPECT_FALSE(volcanoView(job("Failed"), nullptr, pods, "c").coordinator_exit);
}

TEST(GangWords, ReadsVolcanosGangMessage) {
  EXPECT_EQ(gangWords(kGang), "2 of 5 pods can be scheduled");
  EXPECT_EQ(gangWords("1/1 tasks in gang unschedulable: pod group is not ready, 1 Pending"),
            "0 of 1 pods can be scheduled");
  EXPECT_EQ(gangWords("0/3 nodes are unavailable: 3 Insufficient cpu."), "");
  EXPECT_EQ(gangWords("9/3 tasks in gang unschedulable"), "");
  EXPECT_EQ(gangWords(""), "");
}

}  // namespace
}  // namespace cohort::backends
