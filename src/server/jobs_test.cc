// JobService::report, the server's side of a coordinator's reports, against a real store:
// who may report, each numbered event taken once, malformed events refused, the result recorded
// only after every event. (The whole path, a real coordinator reporting to a real server across
// a restart, is in tests/integration/server_test.cc.)
#include "server/jobs.h"

#include <stdlib.h>

#include <filesystem>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "job/events.h"
#include "sched/clock.h"
#include "server/tokens.h"
#include "util/text.h"

namespace cohort::server {
namespace {

using Json = nlohmann::json;

class Report : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/cohort-jobs-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    auto store = store::JobStore::open(dir_ + "/server/cohort.db");
    ASSERT_TRUE(store) << store.error().message;
    store_ = std::move(*store);
    JobServiceOptions options;
    options.data_root = dir_;
    options.cohort_bin = "/bin/false";
    options.identities.single_user = true;
    auto service = JobService::create(*store_, options, clock_);
    ASSERT_TRUE(service) << service.error().message;
    service_ = std::move(*service);
    // A job that runs, as the service records one it started.
    store::Job job;
    job.id = "j";
    job.account = "admin";
    job.name = "j";
    job.state = "starting";
    job.ranks = 1;
    job.report_hash = sha256Hex("the-token");
    ASSERT_TRUE(store_->insertJob(job));
  }
  void TearDown() override {
    service_.reset();
    store_.reset();
    std::filesystem::remove_all(dir_);
  }

  static std::string line(const job::Event& e) { return job::encodeEvent(e); }
  static std::string body(int64_t seq, const std::vector<std::string>& events,
                          const std::string& extra = "") {
    std::string b = "{\"seq\":" + std::to_string(seq) + ",\"events\":[";
    for (size_t i = 0; i < events.size(); ++i) b += (i ? "," : "") + events[i];
    return b + "]" + extra + "}";
  }
  std::vector<std::string> storedKinds() {
    std::vector<std::string> kinds;
    auto events = store_->events("j");
    for (const store::Event& e : *events) {
      Json j = Json::parse(e.json);
      kinds.push_back(j.value("event", "") + ":" + j.value("state", ""));
    }
    return kinds;
  }

  std::string dir_;
  sched::SystemClock clock_;
  std::unique_ptr<store::JobStore> store_;
  std::unique_ptr<JobService> service_;
};

TEST_F(Report, OnlyTheJobsOwnTokenMayReport) {
  for (const std::string token : {"", "wrong", "the-token "}) {
    auto r = service_->report("j", token, body(1, {}));
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, Code::kUnauthenticated) << token;
  }
  // A job that does not exist answers the same: nothing tells a stranger which ids exist.
  auto r = service_->report("nope", "the-token", body(1, {}));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Code::kUnauthenticated);
  EXPECT_TRUE(service_->report("j", "the-token", body(1, {})));
}

TEST_F(Report, EachEventIsTakenOnceAndItsStateApplied) {
  const std::string running = line(job::stateEvent(10, "running"));
  const std::string exit = [] {
    job::Event e;
    e.t = 11;
    e.kind = job::EventKind::kRankExit;
    e.name = "worker/0";
    e.attempt = 0;
    e.node = 0;
    return job::encodeEvent(e);
  }();
  auto a = service_->report("j", "the-token", body(1, {running}));
  ASSERT_TRUE(a) << a.error().message;
  EXPECT_EQ(a->events_seq, 1);
  EXPECT_EQ(store_->job("j")->state, "running");
  EXPECT_EQ(store_->job("j")->attempts, 1);
  // The answer was lost: the coordinator sends the batch again, with one more.
  a = service_->report("j", "the-token", body(1, {running, exit}));
  EXPECT_EQ(a->events_seq, 2);
  // After a gap: nothing, and where to resume.
  a = service_->report("j", "the-token", body(9, {exit}));
  EXPECT_EQ(a->events_seq, 2);
  EXPECT_EQ(storedKinds(), (std::vector<std::string>{"state:running", "rank_exit:"}));
}

TEST_F(Report, MalformedEventsAreRefusedButCountedAndBadReportsNamed) {
  ::testing::internal::CaptureStderr();
  auto a = service_->report("j", "the-token",
                            body(1, {R"({"t":"x"})", R"({"event":"nonsense"})",
                                     line(job::stateEvent(3, "running"))}));
  std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(a) << a.error().message;
  EXPECT_EQ(a->events_seq, 3);
  EXPECT_EQ(storedKinds(), (std::vector<std::string>{"state:running"}));
  EXPECT_NE(err.find("refused"), std::string::npos) << err;
  for (const std::string& bad :
       {std::string("[]"), std::string("{\"events\":[]}"), std::string("{\"seq\":0,\"events\":[]}"),
        std::string("{\"seq\":1,\"events\":{}}"), std::string(100000, '['), std::string("{")}) {
    auto r = service_->report("j", "the-token", bad);
    ASSERT_FALSE(r) << bad.substr(0, 40);
    EXPECT_EQ(r.error().code, Code::kInvalidArgument) << bad.substr(0, 40);
  }
}

TEST_F(Report, TheResultIsRecordedOnlyAfterEveryEvent) {
  const std::string result =
      R"(,"result":{"state":"failed","exit_code":3,"reason":"rank 0 exited 3","attempts":1})";
  const std::string e1 = line(job::stateEvent(1, "running"));
  const std::string e2 = line(job::stateEvent(2, "failed", "rank 0 exited 3"));
  // Events 1 and 2 with the result, but the server lacks 1: nothing is recorded.
  auto a = service_->report("j", "the-token", body(2, {e2}, result));
  ASSERT_TRUE(a);
  EXPECT_FALSE(a->result);
  EXPECT_EQ(store_->job("j")->state, "starting");
  a = service_->report("j", "the-token", body(1, {e1, e2}, result));
  ASSERT_TRUE(a);
  EXPECT_TRUE(a->result);
  store::Job job = *store_->job("j");
  EXPECT_EQ(job.state, "failed");
  EXPECT_EQ(job.exit_code, 3);
  EXPECT_EQ(job.reason, "rank 0 exited 3");
  EXPECT_NE(job.ended, 0);
  // Sent again (the answer was lost): the same answer, nothing changes.
  a = service_->report("j", "the-token", body(1, {e1, e2}, result));
  EXPECT_TRUE(a->result);
  EXPECT_EQ(a->events_seq, 2);
  EXPECT_EQ(store_->job("j")->ended, job.ended);
}

}  // namespace
}  // namespace cohort::server
