#include "store/job_store.h"

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

namespace cohort::store {
namespace {

namespace fs = std::filesystem;

// A fresh directory per test, removed afterwards.
class JobStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/cohort-store-test-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    root_ = pattern;
    path_ = root_ + "/state/cohort.db";
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }

  std::unique_ptr<JobStore> openStore() {
    auto store = JobStore::open(path_);
    EXPECT_TRUE(store) << store.error().message;
    return store ? std::move(*store) : nullptr;
  }

  std::string root_, path_;
};

// Runs `sql` on the file with a connection of the test's own; returns the first column of the
// first row as an integer (0 when there is none).
int64_t rawQuery(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  EXPECT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  sqlite3_stmt* stmt = nullptr;
  EXPECT_EQ(sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt, nullptr), SQLITE_OK)
      << sqlite3_errmsg(db);
  int64_t value = 0;
  int rc = sqlite3_step(stmt);
  if (rc == SQLITE_ROW) value = sqlite3_column_int64(stmt, 0);
  EXPECT_TRUE(rc == SQLITE_ROW || rc == SQLITE_DONE) << sqlite3_errmsg(db);
  sqlite3_finalize(stmt);
  sqlite3_close(db);
  return value;
}

Job minimalJob(const std::string& id, const std::string& account = "alice",
               int64_t submitted = 0, const std::string& state = "queued") {
  Job job;
  job.id = id;
  job.account = account;
  job.name = "train";
  job.state = state;
  job.submitted = submitted;
  return job;
}

Job fullJob(const std::string& id) {
  Job job;
  job.id = id;
  job.account = "alice";
  job.name = "digits-ddp";
  job.state = "running";
  job.priority = -3;
  job.framework = "pytorch";
  job.ranks = 4;
  job.cpu_millis = 16000;
  job.memory_bytes = int64_t{64} << 30;
  job.gpus = 8;
  job.max_runtime_ms = 3'600'000;
  job.spec_json = R"({"name":"digits-ddp","ranks":4})";
  job.submitted = 1'700'000'000'000'000'001;
  job.started = 1'700'000'000'000'000'002;
  job.ended = 1'700'000'000'000'000'003;
  job.exit_code = 0;  // present but zero: must not read back as absent
  job.reason = "rank 3 exited 1";
  job.root_cause_json = R"({"rank":3})";
  job.attempts = 2;
  job.job_dir = "/var/lib/cohort/jobs/" + id;
  job.backend = "local";
  job.handle = R"({"pid":4242,"start":987654321})";
  job.events_seq = 1234;
  job.report_hash = "ab12";
  return job;
}

void expectSameJob(const Job& a, const Job& b) {
  EXPECT_EQ(a.id, b.id);
  EXPECT_EQ(a.account, b.account);
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.state, b.state);
  EXPECT_EQ(a.priority, b.priority);
  EXPECT_EQ(a.framework, b.framework);
  EXPECT_EQ(a.ranks, b.ranks);
  EXPECT_EQ(a.cpu_millis, b.cpu_millis);
  EXPECT_EQ(a.memory_bytes, b.memory_bytes);
  EXPECT_EQ(a.gpus, b.gpus);
  EXPECT_EQ(a.max_runtime_ms, b.max_runtime_ms);
  EXPECT_EQ(a.spec_json, b.spec_json);
  EXPECT_EQ(a.submitted, b.submitted);
  EXPECT_EQ(a.started, b.started);
  EXPECT_EQ(a.ended, b.ended);
  EXPECT_EQ(a.exit_code, b.exit_code);
  EXPECT_EQ(a.reason, b.reason);
  EXPECT_EQ(a.root_cause_json, b.root_cause_json);
  EXPECT_EQ(a.attempts, b.attempts);
  EXPECT_EQ(a.job_dir, b.job_dir);
  EXPECT_EQ(a.backend, b.backend);
  EXPECT_EQ(a.handle, b.handle);
  EXPECT_EQ(a.events_seq, b.events_seq);
  EXPECT_EQ(a.report_hash, b.report_hash);
}

std::vector<std::string> idsOf(const std::vector<Job>& jobs) {
  std::vector<std::string> ids;
  for (const auto& job : jobs) ids.push_back(job.id);
  return ids;
}

TEST(FinalState, OnlySucceededFailedAndStoppedAreFinal) {
  EXPECT_TRUE(isFinalState("succeeded"));
  EXPECT_TRUE(isFinalState("failed"));
  EXPECT_TRUE(isFinalState("stopped"));
  for (const char* state : {"queued", "starting", "staging", "running", "restarting", "stopping"}) {
    EXPECT_FALSE(isFinalState(state)) << state;
  }
}

// Schema and migrations.

TEST_F(JobStoreTest, OpenCreatesTheFileAndItsDirectoryAtTheCurrentSchemaVersion) {
  auto store = openStore();
  ASSERT_TRUE(store);
  EXPECT_GE(store->schemaVersion(), 1);
  EXPECT_TRUE(fs::exists(path_));
  EXPECT_EQ(rawQuery(path_, "PRAGMA user_version"), store->schemaVersion());
  EXPECT_EQ(rawQuery(path_, "SELECT COUNT(*) FROM sqlite_master WHERE type = 'index' AND name IN "
                            "('tokens_hash', 'jobs_account_submitted', 'jobs_state', "
                            "'shares_bucket_grantee')"),
            4);
}

TEST_F(JobStoreTest, MigratesAnEmptyFile) {
  fs::create_directories(fs::path(path_).parent_path());
  std::ofstream(path_).close();
  ASSERT_EQ(fs::file_size(path_), 0u);
  auto store = openStore();
  ASSERT_TRUE(store);
  EXPECT_EQ(rawQuery(path_, "PRAGMA user_version"), store->schemaVersion());
  EXPECT_TRUE(store->createAccount(Account{.name = "alice"}));
}

TEST_F(JobStoreTest, ReopeningKeepsDataAndDoesNotMigrateAgain) {
  {
    auto store = openStore();
    ASSERT_TRUE(store);
    ASSERT_TRUE(store->createAccount(Account{.name = "alice", .created = 5}));
    ASSERT_TRUE(store->insertJob(fullJob("j1")));
    ASSERT_TRUE(store->appendEvents("j1", {Event{.time = 7, .json = "{}"}}));
  }
  auto store = openStore();
  ASSERT_TRUE(store);
  auto account = store->account("alice");
  ASSERT_TRUE(account) << account.error().message;
  EXPECT_EQ(account->created, 5);
  auto job = store->job("j1");
  ASSERT_TRUE(job) << job.error().message;
  expectSameJob(*job, fullJob("j1"));
  auto events = store->events("j1");
  ASSERT_TRUE(events);
  EXPECT_EQ(events->size(), 1u);
}

TEST_F(JobStoreTest, RefusesAFileFromANewerCohort) {
  { ASSERT_TRUE(openStore()); }
  rawQuery(path_, "PRAGMA user_version = 99");
  auto store = JobStore::open(path_);
  ASSERT_FALSE(store);
  EXPECT_EQ(store.error().code, Code::kFailedPrecondition);
  EXPECT_EQ(store.error().message, "database '" + path_ +
                                       "' has schema version 99; this cohort knows up to 6: "
                                       "upgrade cohort");
  EXPECT_EQ(rawQuery(path_, "PRAGMA user_version"), 99);
}

TEST_F(JobStoreTest, AFileThatIsNotADatabaseIsAnIoError) {
  fs::create_directories(fs::path(path_).parent_path());
  std::ofstream(path_) << std::string(4096, 'x');
  auto store = JobStore::open(path_);
  ASSERT_FALSE(store);
  EXPECT_EQ(store.error().code, Code::kIo);
  EXPECT_NE(store.error().message.find("database '" + path_ + "': "), std::string::npos)
      << store.error().message;
}

TEST_F(JobStoreTest, ADirectoryThatCannotBeCreatedIsAnIoError) {
  std::ofstream(root_ + "/file") << "not a directory";
  auto store = JobStore::open(root_ + "/file/cohort.db");
  ASSERT_FALSE(store);
  EXPECT_EQ(store.error().code, Code::kIo);
}

// Accounts.

TEST_F(JobStoreTest, AccountsRoundTripWithAndWithoutQuotas) {
  auto store = openStore();
  ASSERT_TRUE(store);
  Account bob{.name = "bob", .admin = true, .max_gpus = 8, .max_cpu_millis = 0, .created = 11};
  Account alice{.name = "alice", .created = 12};
  ASSERT_TRUE(store->createAccount(bob));
  ASSERT_TRUE(store->createAccount(alice));

  auto got = store->account("bob");
  ASSERT_TRUE(got) << got.error().message;
  EXPECT_EQ(got->name, "bob");
  EXPECT_TRUE(got->admin);
  EXPECT_EQ(got->max_gpus, std::optional<int64_t>(8));
  EXPECT_EQ(got->max_cpu_millis, std::optional<int64_t>(0));
  EXPECT_EQ(got->created, 11);

  auto all = store->accounts();
  ASSERT_TRUE(all);
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].name, "alice");  // by name
  EXPECT_FALSE((*all)[0].admin);
  EXPECT_EQ((*all)[0].max_gpus, std::nullopt);
  EXPECT_EQ((*all)[0].max_cpu_millis, std::nullopt);
  EXPECT_EQ((*all)[0].created, 12);
  EXPECT_EQ((*all)[1].name, "bob");
}

TEST_F(JobStoreTest, ATakenAccountNameIsAlreadyExistsAndAMissingOneNotFound) {
  auto store = openStore();
  ASSERT_TRUE(store);
  ASSERT_TRUE(store->createAccount(Account{.name = "alice", .max_gpus = 1}));
  auto again = store->createAccount(Account{.name = "alice", .max_gpus = 99});
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code, Code::kAlreadyExists);
  EXPECT_EQ(again.error().message, "account 'alice' already exists");
  EXPECT_EQ(store->account("alice")->max_gpus, std::optional<int64_t>(1));

  auto missing = store->account("carol");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, Code::kNotFound);
  EXPECT_EQ(missing.error().message, "account 'carol' not found");
}

// Tokens.

TEST_F(JobStoreTest, TokensRoundTripAndListByAccount) {
  auto store = openStore();
  ASSERT_TRUE(store);
  auto a1 = store->addToken("alice", "hash-a1", "laptop");
  auto b1 = store->addToken("bob", "hash-b1", "");
  auto a2 = store->addToken("alice", "hash-a2", "ci");
  ASSERT_TRUE(a1 && b1 && a2);
  EXPECT_LT(*a1, *b1);
  EXPECT_LT(*b1, *a2);

  auto token = store->tokenByHash("hash-a2");
  ASSERT_TRUE(token) << token.error().message;
  EXPECT_EQ(token->id, *a2);
  EXPECT_EQ(token->account, "alice");
  EXPECT_EQ(token->label, "ci");
  EXPECT_EQ(token->hash, "hash-a2");
  EXPECT_GT(token->created, 0);

  auto by_id = store->token(*b1);
  ASSERT_TRUE(by_id);
  EXPECT_EQ(by_id->hash, "hash-b1");
  EXPECT_EQ(by_id->label, "");

  auto alices = store->tokens("alice");
  ASSERT_TRUE(alices);
  ASSERT_EQ(alices->size(), 2u);
  EXPECT_EQ((*alices)[0].id, *a1);
  EXPECT_EQ((*alices)[1].id, *a2);
  auto all = store->tokens(std::nullopt);
  ASSERT_TRUE(all);
  EXPECT_EQ(all->size(), 3u);

  auto duplicate = store->addToken("bob", "hash-a1", "again");
  ASSERT_FALSE(duplicate);
  EXPECT_EQ(duplicate.error().code, Code::kAlreadyExists);
}

TEST_F(JobStoreTest, DeleteTokenMakesItsHashNotFound) {
  auto store = openStore();
  ASSERT_TRUE(store);
  auto id = store->addToken("alice", "hash", "laptop");
  ASSERT_TRUE(id);
  ASSERT_TRUE(store->tokenByHash("hash"));
  ASSERT_TRUE(store->deleteToken(*id));

  auto gone = store->tokenByHash("hash");
  ASSERT_FALSE(gone);
  EXPECT_EQ(gone.error().code, Code::kNotFound);
  EXPECT_EQ(store->token(*id).error().code, Code::kNotFound);
  auto again = store->deleteToken(*id);
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code, Code::kNotFound);
  // Ids are not reused after a delete.
  auto next = store->addToken("alice", "hash2", "");
  ASSERT_TRUE(next);
  EXPECT_GT(*next, *id);
}

// Jobs.

TEST_F(JobStoreTest, JobsRoundTripEveryFieldWithOptionalsPresentAndAbsent) {
  auto store = openStore();
  ASSERT_TRUE(store);
  Job full = fullJob("full");
  Job minimal = minimalJob("minimal");
  ASSERT_TRUE(store->insertJob(full));
  ASSERT_TRUE(store->insertJob(minimal));

  auto got_full = store->job("full");
  ASSERT_TRUE(got_full) << got_full.error().message;
  expectSameJob(*got_full, full);
  auto got_minimal = store->job("minimal");
  ASSERT_TRUE(got_minimal) << got_minimal.error().message;
  expectSameJob(*got_minimal, minimal);
  EXPECT_EQ(got_minimal->max_runtime_ms, std::nullopt);
  EXPECT_EQ(got_minimal->exit_code, std::nullopt);
}

TEST_F(JobStoreTest, UpdateJobWritesEveryField) {
  auto store = openStore();
  ASSERT_TRUE(store);
  ASSERT_TRUE(store->insertJob(minimalJob("j")));
  Job changed = fullJob("j");
  ASSERT_TRUE(store->updateJob(changed));
  expectSameJob(*store->job("j"), changed);

  // And back: optionals become absent again.
  Job cleared = minimalJob("j", "bob");
  ASSERT_TRUE(store->updateJob(cleared));
  expectSameJob(*store->job("j"), cleared);
}

TEST_F(JobStoreTest, JobIdConflictsAndMissingJobsAreReported) {
  auto store = openStore();
  ASSERT_TRUE(store);
  ASSERT_TRUE(store->insertJob(minimalJob("j")));
  auto again = store->insertJob(fullJob("j"));
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code, Code::kAlreadyExists);
  EXPECT_EQ(again.error().message, "job 'j' already exists");
  expectSameJob(*store->job("j"), minimalJob("j"));

  auto missing = store->job("nope");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, Code::kNotFound);
  EXPECT_EQ(missing.error().message, "job 'nope' not found");
  EXPECT_EQ(store->updateJob(minimalJob("nope")).error().code, Code::kNotFound);
  EXPECT_EQ(store->deleteJob("nope").error().code, Code::kNotFound);
  EXPECT_EQ(store->appendEvents("nope", {Event{.json = "{}"}}).error().code, Code::kNotFound);
  EXPECT_EQ(rawQuery(path_, "SELECT COUNT(*) FROM events"), 0);
}

TEST_F(JobStoreTest, DeleteJobRemovesItsEvents) {
  auto store = openStore();
  ASSERT_TRUE(store);
  ASSERT_TRUE(store->insertJob(minimalJob("j")));
  ASSERT_TRUE(store->insertJob(minimalJob("other")));
  ASSERT_TRUE(store->appendEvents("j", {Event{.json = "{}"}, Event{.json = "{}"}}));
  ASSERT_TRUE(store->appendEvents("other", {Event{.json = "{}"}}));
  ASSERT_TRUE(store->deleteJob("j"));

  EXPECT_EQ(store->job("j").error().code, Code::kNotFound);
  EXPECT_EQ(rawQuery(path_, "SELECT COUNT(*) FROM events WHERE job_id = 'j'"), 0);
  EXPECT_EQ(store->events("other")->size(), 1u);

  // A new job under the same id starts its events afresh.
  ASSERT_TRUE(store->insertJob(minimalJob("j")));
  ASSERT_TRUE(store->appendEvents("j", {Event{.json = "{}"}}));
  auto events = store->events("j");
  ASSERT_TRUE(events);
  ASSERT_EQ(events->size(), 1u);
  EXPECT_EQ((*events)[0].seq, 1);
}

TEST_F(JobStoreTest, JobsFilterByAccountAndStatesNewestFirstUpToTheLimit) {
  auto store = openStore();
  ASSERT_TRUE(store);
  ASSERT_TRUE(store->insertJob(minimalJob("a1", "alice", 100, "succeeded")));
  ASSERT_TRUE(store->insertJob(minimalJob("a2", "alice", 300, "running")));
  ASSERT_TRUE(store->insertJob(minimalJob("a3", "alice", 200, "queued")));
  ASSERT_TRUE(store->insertJob(minimalJob("a4", "alice", 300, "queued")));  // ties a2: by id
  ASSERT_TRUE(store->insertJob(minimalJob("b1", "bob", 250, "running")));

  auto all = store->jobs(JobFilter{});
  ASSERT_TRUE(all) << all.error().message;
  EXPECT_EQ(idsOf(*all), (std::vector<std::string>{"a4", "a2", "b1", "a3", "a1"}));

  auto alices = store->jobs(JobFilter{.account = "alice"});
  ASSERT_TRUE(alices);
  EXPECT_EQ(idsOf(*alices), (std::vector<std::string>{"a4", "a2", "a3", "a1"}));

  auto active = store->jobs(JobFilter{.states = {"running", "queued"}});
  ASSERT_TRUE(active);
  EXPECT_EQ(idsOf(*active), (std::vector<std::string>{"a4", "a2", "b1", "a3"}));

  auto alice_running = store->jobs(JobFilter{.account = "alice", .states = {"running"}});
  ASSERT_TRUE(alice_running);
  EXPECT_EQ(idsOf(*alice_running), (std::vector<std::string>{"a2"}));

  auto newest_two = store->jobs(JobFilter{.limit = 2});
  ASSERT_TRUE(newest_two);
  EXPECT_EQ(idsOf(*newest_two), (std::vector<std::string>{"a4", "a2"}));

  auto nobody = store->jobs(JobFilter{.account = "carol"});
  ASSERT_TRUE(nobody);
  EXPECT_TRUE(nobody->empty());
}

TEST_F(JobStoreTest, JobsInStatesAreOldestFirstAndCountsArePerState) {
  auto store = openStore();
  ASSERT_TRUE(store);
  ASSERT_TRUE(store->insertJob(minimalJob("x", "alice", 300, "running")));
  ASSERT_TRUE(store->insertJob(minimalJob("w", "bob", 300, "queued")));
  ASSERT_TRUE(store->insertJob(minimalJob("y", "alice", 100, "staging")));
  ASSERT_TRUE(store->insertJob(minimalJob("z", "alice", 50, "failed")));

  auto live = store->jobsInStates({"queued", "staging", "running"});
  ASSERT_TRUE(live) << live.error().message;
  EXPECT_EQ(idsOf(*live), (std::vector<std::string>{"y", "w", "x"}));
  auto none = store->jobsInStates({});
  ASSERT_TRUE(none);
  EXPECT_TRUE(none->empty());

  auto counts = store->countJobsByState();
  ASSERT_TRUE(counts);
  using Counts = std::vector<std::pair<std::string, int64_t>>;
  EXPECT_EQ(*counts, (Counts{{"failed", 1}, {"queued", 1}, {"running", 1}, {"staging", 1}}));
}

// Events.

TEST_F(JobStoreTest, AppendEventsNumbersFromOneAcrossCalls) {
  auto store = openStore();
  ASSERT_TRUE(store);
  ASSERT_TRUE(store->insertJob(minimalJob("j")));
  ASSERT_TRUE(store->insertJob(minimalJob("other")));
  ASSERT_TRUE(store->appendEvents(
      "j", {Event{.seq = 77, .time = 10, .json = R"({"a":1})"}, Event{.time = 11, .json = "{}"}}));
  ASSERT_TRUE(store->appendEvents("other", {Event{.time = 5, .json = "{}"}}));
  ASSERT_TRUE(store->appendEvents("j", {Event{.time = 12, .json = R"({"b":2})"}}));
  EXPECT_EQ(store->job("j")->events_seq, 0);  // the server's own events are not the coordinator's

  auto events = store->events("j");
  ASSERT_TRUE(events) << events.error().message;
  ASSERT_EQ(events->size(), 3u);
  EXPECT_EQ((*events)[0].seq, 1);
  EXPECT_EQ((*events)[0].time, 10);
  EXPECT_EQ((*events)[0].json, R"({"a":1})");
  EXPECT_EQ((*events)[1].seq, 2);
  EXPECT_EQ((*events)[1].time, 11);
  EXPECT_EQ((*events)[2].seq, 3);
  EXPECT_EQ((*events)[2].json, R"({"b":2})");
  auto other = store->events("other");
  ASSERT_TRUE(other);
  ASSERT_EQ(other->size(), 1u);
  EXPECT_EQ((*other)[0].seq, 1);
  EXPECT_TRUE(store->events("nope")->empty());
}

TEST_F(JobStoreTest, IngestTakesEachCoordinatorEventOnceAndNothingAfterAGap) {
  auto store = openStore();
  ASSERT_TRUE(store);
  ASSERT_TRUE(store->insertJob(minimalJob("j")));
  auto e = [](const char* json) { return Event{.time = 1, .json = json}; };
  auto got = store->ingestEvents("j", 1, {e(R"({"n":1})"), e(R"({"n":2})")});
  ASSERT_TRUE(got) << got.error().message;
  EXPECT_EQ(got->events_seq, 2);
  EXPECT_EQ(got->appended, 2u);
  // Sent again after a lost answer, with one more: only the new one goes in.
  got = store->ingestEvents("j", 1, {e(R"({"n":1})"), e(R"({"n":2})"), e(R"({"n":3})")});
  EXPECT_EQ(got->events_seq, 3);
  EXPECT_EQ(got->taken, 1u);
  EXPECT_EQ(got->appended, 1u);
  // A batch after a gap, and one wholly ingested: nothing, and the seq to resend from.
  got = store->ingestEvents("j", 5, {e(R"({"n":5})")});
  EXPECT_EQ(got->events_seq, 3);
  EXPECT_EQ(got->appended, 0u);
  got = store->ingestEvents("j", 2, {e(R"({"n":2})")});
  EXPECT_EQ(got->appended, 0u);
  // A refused event (no json) counts but is not stored.
  got = store->ingestEvents("j", 4, {Event{}, e(R"({"n":5})")});
  EXPECT_EQ(got->events_seq, 5);
  EXPECT_EQ(got->taken, 2u);
  EXPECT_EQ(got->appended, 1u);
  EXPECT_EQ(store->job("j")->events_seq, 5);
  auto events = store->events("j");
  ASSERT_TRUE(events);
  ASSERT_EQ(events->size(), 4u);
  EXPECT_EQ((*events)[3].json, R"({"n":5})");
  EXPECT_EQ(store->ingestEvents("nope", 1, {e("{}")}).error().code, Code::kNotFound);
}

TEST_F(JobStoreTest, ConcurrentAppendsToOneJobGetDistinctConsecutiveSeqs) {
  auto store = openStore();
  ASSERT_TRUE(store);
  ASSERT_TRUE(store->insertJob(minimalJob("j")));
  constexpr int kThreads = 8, kPerThread = 50;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        std::string json = std::to_string(t) + ":" + std::to_string(i);
        auto r = store->appendEvents("j", {Event{.json = json}, Event{.json = json}});
        EXPECT_TRUE(r) << r.error().message;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  auto events = store->events("j");
  ASSERT_TRUE(events);
  ASSERT_EQ(events->size(), size_t{2 * kThreads * kPerThread});
  for (size_t i = 0; i < events->size(); ++i) {
    EXPECT_EQ((*events)[i].seq, static_cast<int64_t>(i + 1));
    if (i % 2 == 1) {
      EXPECT_EQ((*events)[i].json, (*events)[i - 1].json);  // one call's events are adjacent
    }
  }
}

// Buckets and shares.

TEST_F(JobStoreTest, EachAccountHasBucketNamesOfItsOwn) {
  auto store = openStore();
  ASSERT_TRUE(store);
  EXPECT_EQ(*store->bucket("alice", "models"), std::nullopt);
  auto alices = store->claimBucket("alice", "models", "alice@models");
  ASSERT_TRUE(alices) << alices.error().message;
  EXPECT_EQ(alices->owner, "alice");
  EXPECT_EQ(alices->dir, "alice@models");
  // Bob's first write to a "models" makes his own, in a directory of its own.
  auto bobs = store->claimBucket("bob", "models", "bob@models");
  ASSERT_TRUE(bobs) << bobs.error().message;
  EXPECT_EQ(bobs->owner, "bob");
  EXPECT_EQ(bobs->dir, "bob@models");
  // Claiming again answers the bucket it has, with its directory.
  EXPECT_EQ(store->claimBucket("alice", "models", "elsewhere")->dir, "alice@models");
  // A directory is one bucket's.
  EXPECT_EQ(store->claimBucket("carol", "x-y", "alice@models").error().code,
            Code::kAlreadyExists);
  ASSERT_TRUE(store->claimBucket("alice", "archive", "alice@archive"));
  EXPECT_EQ(store->bucket("alice", "models")->value().dir, "alice@models");

  auto listed = store->buckets("alice");
  ASSERT_TRUE(listed);
  ASSERT_EQ(listed->size(), 2u);
  EXPECT_EQ((*listed)[0].name, "archive");  // by name
  EXPECT_EQ((*listed)[1].name, "models");
  EXPECT_EQ((*listed)[1].owner, "alice");
  EXPECT_GT((*listed)[1].created, 0);
  EXPECT_EQ(store->buckets("bob")->size(), 1u);
  EXPECT_TRUE(store->buckets("carol")->empty());
}

TEST_F(JobStoreTest, ConcurrentClaimsOfOneBucketAgreeOnOneDirectory) {
  auto store = openStore();
  ASSERT_TRUE(store);
  constexpr int kThreads = 8;
  std::vector<std::string> answers(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto bucket = store->claimBucket("alice", "shared", "dir" + std::to_string(t));
      ASSERT_TRUE(bucket) << bucket.error().message;
      answers[t] = bucket->dir;
    });
  }
  for (auto& thread : threads) thread.join();
  auto bucket = store->bucket("alice", "shared");
  ASSERT_TRUE(bucket && *bucket);
  for (const auto& answer : answers) EXPECT_EQ(answer, (*bucket)->dir);
}

// A file of schema version 5, when a bucket's name was the whole store's: each bucket becomes
// its owner's, in the directory it had; its shares stay.
TEST_F(JobStoreTest, BucketsOfAnOldFileBecomeTheirOwnersInTheirDirectories) {
  { ASSERT_TRUE(openStore()); }
  for (const char* sql : {
           "DROP TABLE buckets",
           "DROP INDEX shares_bucket_grantee",
           "CREATE TABLE buckets(name TEXT PRIMARY KEY NOT NULL, owner TEXT NOT NULL, "
           "created INTEGER NOT NULL)",
           "CREATE INDEX shares_bucket_grantee ON shares(bucket, grantee)",
           "INSERT INTO buckets VALUES('models', 'alice', 7)",
           "INSERT INTO buckets VALUES('data', 'bob', 8)",
           "INSERT INTO shares(bucket, prefix, owner, grantee, access, created) "
           "VALUES('models', 'run1', 'alice', 'bob', 'read', 9)",
           "PRAGMA user_version = 5",
       }) {
    rawQuery(path_, sql);
  }
  auto store = openStore();
  ASSERT_TRUE(store);
  EXPECT_GT(store->schemaVersion(), 5);
  auto models = store->bucket("alice", "models");
  ASSERT_TRUE(models && *models);
  EXPECT_EQ((*models)->dir, "models");
  EXPECT_EQ((*models)->created, 7);
  EXPECT_EQ(store->bucket("bob", "data")->value().dir, "data");
  EXPECT_EQ(*store->bucket("bob", "models"), std::nullopt);
  EXPECT_EQ(store->claimBucket("bob", "models", "bob@models")->dir, "bob@models");
  EXPECT_EQ(store->sharesFor("alice", "models", "bob")->size(), 1u);
  EXPECT_TRUE(store->sharesFor("bob", "models", "bob")->empty());
}

TEST_F(JobStoreTest, SharesRoundTripAndListByAccountAndByBucketAndGrantee) {
  auto store = openStore();
  ASSERT_TRUE(store);
  Share s1{.bucket = "models", .prefix = "run1/", .owner = "alice", .grantee = "bob",
           .access = "read", .created = 42};
  Share s2{.bucket = "models", .prefix = "", .owner = "alice", .grantee = "carol",
           .access = "write"};
  Share s3{.bucket = "data", .prefix = "x", .owner = "bob", .grantee = "alice", .access = "read"};
  Share s4{.bucket = "models", .prefix = "run2/", .owner = "alice", .grantee = "bob",
           .access = "write"};
  auto id1 = store->addShare(s1);
  auto id2 = store->addShare(s2);
  auto id3 = store->addShare(s3);
  auto id4 = store->addShare(s4);
  ASSERT_TRUE(id1 && id2 && id3 && id4);

  auto got = store->share(*id1);
  ASSERT_TRUE(got) << got.error().message;
  EXPECT_EQ(got->id, *id1);
  EXPECT_EQ(got->bucket, "models");
  EXPECT_EQ(got->prefix, "run1/");
  EXPECT_EQ(got->owner, "alice");
  EXPECT_EQ(got->grantee, "bob");
  EXPECT_EQ(got->access, "read");
  EXPECT_EQ(got->created, 42);
  EXPECT_EQ(store->share(*id2)->prefix, "");
  EXPECT_GT(store->share(*id2)->created, 0);

  auto ids = [](const std::vector<Share>& shares) {
    std::vector<int64_t> out;
    for (const auto& share : shares) out.push_back(share.id);
    return out;
  };
  EXPECT_EQ(ids(*store->shares("bob")), (std::vector<int64_t>{*id1, *id3, *id4}));
  EXPECT_EQ(ids(*store->shares("alice")), (std::vector<int64_t>{*id1, *id2, *id3, *id4}));
  EXPECT_EQ(ids(*store->sharesFor("alice", "models", "bob")), (std::vector<int64_t>{*id1, *id4}));
  EXPECT_TRUE(store->sharesFor("alice", "data", "bob")->empty());
  EXPECT_TRUE(store->sharesFor("bob", "models", "bob")->empty());

  ASSERT_TRUE(store->deleteShare(*id1));
  EXPECT_EQ(store->share(*id1).error().code, Code::kNotFound);
  EXPECT_EQ(store->deleteShare(*id1).error().code, Code::kNotFound);
  EXPECT_EQ(ids(*store->sharesFor("alice", "models", "bob")), (std::vector<int64_t>{*id4}));
}

// Concurrency.

TEST_F(JobStoreTest, ConcurrentWritersFromEightThreadsLoseNoRows) {
  auto store = openStore();
  ASSERT_TRUE(store);
  constexpr int kThreads = 8, kPerThread = 500;
  auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        auto r = store->insertJob(
            minimalJob("t" + std::to_string(t) + "-" + std::to_string(i), "alice", i));
        ASSERT_TRUE(r) << r.error().message;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("[ rate     ] %d threads: %d inserts in %.3f s = %.0f inserts/s\n", kThreads,
              kThreads * kPerThread, seconds, kThreads * kPerThread / seconds);

  auto all = store->jobs(JobFilter{.limit = -1});
  ASSERT_TRUE(all);
  std::set<std::string> ids;
  for (const auto& job : *all) ids.insert(job.id);
  EXPECT_EQ(ids.size(), size_t{kThreads * kPerThread});
  EXPECT_EQ(rawQuery(path_, "SELECT COUNT(*) FROM jobs"), kThreads * kPerThread);
}

TEST_F(JobStoreTest, SingleThreadInsertsEachCommitAndAreReadableAtOnce) {
  auto store = openStore();
  ASSERT_TRUE(store);
  constexpr int kCount = 500;
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kCount; ++i) {
    ASSERT_TRUE(store->insertJob(minimalJob("j" + std::to_string(i))));
  }
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("[ rate     ] 1 thread: %d inserts in %.3f s = %.0f inserts/s\n", kCount, seconds,
              kCount / seconds);
  for (int i = 0; i < kCount; ++i) ASSERT_TRUE(store->job("j" + std::to_string(i)));
}

TEST_F(JobStoreTest, AFailingWriteInABatchDoesNotUndoTheOthers) {
  auto store = openStore();
  ASSERT_TRUE(store);
  constexpr int kThreads = 8, kPerThread = 300, kSeeded = 50;
  for (int i = 0; i < kSeeded; ++i) {
    ASSERT_TRUE(store->insertJob(minimalJob("seed" + std::to_string(i))));
  }
  std::atomic<int> refused = 0;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        if (i % 2 == 0) {
          std::string id = "t" + std::to_string(t) + "-" + std::to_string(i);
          auto r = store->insertJob(minimalJob(id));
          ASSERT_TRUE(r) << r.error().message;
          // Readable from this thread as soon as the write returns.
          auto read = store->job(id);
          ASSERT_TRUE(read) << read.error().message;
        } else {
          auto r = store->insertJob(minimalJob("seed" + std::to_string(i % kSeeded)));
          ASSERT_FALSE(r);
          EXPECT_EQ(r.error().code, Code::kAlreadyExists);
          ++refused;
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(refused.load(), kThreads * kPerThread / 2);
  EXPECT_EQ(rawQuery(path_, "SELECT COUNT(*) FROM jobs"), kSeeded + kThreads * kPerThread / 2);
}

TEST_F(JobStoreTest, ReadsSeeTheCommittedStateWhileAnotherConnectionWrites) {
  auto store = openStore();
  ASSERT_TRUE(store);
  ASSERT_TRUE(store->insertJob(minimalJob("committed")));

  // Another connection holds the write lock with an uncommitted row.
  sqlite3* other = nullptr;
  ASSERT_EQ(sqlite3_open(path_.c_str(), &other), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(other,
                         "BEGIN IMMEDIATE; UPDATE jobs SET state = 'running' "
                         "WHERE id = 'committed'",
                         nullptr, nullptr, nullptr),
            SQLITE_OK)
      << sqlite3_errmsg(other);

  auto job = store->job("committed");
  ASSERT_TRUE(job) << job.error().message;
  EXPECT_EQ(job->state, "queued");  // the committed version
  auto jobs = store->jobs(JobFilter{});
  ASSERT_TRUE(jobs) << jobs.error().message;
  EXPECT_EQ(jobs->size(), 1u);

  sqlite3_exec(other, "ROLLBACK", nullptr, nullptr, nullptr);
  sqlite3_close(other);
}

}  // namespace
}  // namespace cohort::store
