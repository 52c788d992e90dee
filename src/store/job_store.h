// JobStore: everything `cohort server` must not forget, in one SQLite database (WAL mode,
// synchronous=FULL): accounts, hashed tokens, jobs, each job's events, buckets and shares.
// A write returns only once it is on disk. Concurrent writers are group-committed: callers that
// arrive while a transaction is being committed are joined into the next one, so many
// submissions share one fsync. Reads run on a connection per calling thread and never wait for a
// writer (WAL).
//
// The schema is versioned with `PRAGMA user_version`; `open` applies every migration the file
// has not seen yet, in order, in one transaction, and refuses a file from a newer cohort.
// Thread-safe: every method may be called from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "job/state.h"
#include "util/result.h"

namespace cohort::store {

// What one account may hold and do at once, as its admin set it (cohort accounts quota);
// absent: the server's default (server/quotas.h).
struct Quotas {
  std::optional<int64_t> bytes;         // in the data root: store, uploads, jobs, environments
  std::optional<int64_t> inodes;        // files, directories and links there
  std::optional<int64_t> queued_jobs;   // jobs waiting in the queue
  std::optional<int64_t> uploads;       // uploads being received or waiting for their job
  std::optional<int64_t> followers;     // streams followed at once (events, logs)
  std::optional<int64_t> max_priority;  // the highest priority it may give its jobs
};

struct Account {
  std::string name;
  bool admin = false;
  std::optional<int64_t> max_gpus;        // quota; absent: unlimited
  std::optional<int64_t> max_cpu_millis;  // quota in millicores; absent: unlimited
  int64_t created = 0;                    // unix nanos
  int64_t number = 0;  // 1, 2, ... in the order accounts were made, never reused: the offset of
                       // the account's ranks' Unix identity in the server's range
  Quotas quotas;
};

struct Token {
  int64_t id = 0;
  std::string account;
  std::string label;
  std::string hash;  // hex SHA-256 of the token; the token itself is never stored
  int64_t created = 0;
};

// The job states are job::kJobStates (src/job/state.h): one list for every module.
using job::isFinalState;
using job::kJobStates;

struct Job {
  std::string id;  // unique, chosen by the server
  std::string account;
  std::string name;
  std::string state;  // queued, starting, staging, running, restarting, stopping, succeeded,
                      // failed, stopped
  int priority = 0;
  std::string framework;
  int ranks = 0;           // world size
  int64_t cpu_millis = 0;  // what the whole gang holds while it runs
  int64_t memory_bytes = 0;
  int64_t gpus = 0;
  std::optional<int64_t> max_runtime_ms;
  std::string spec_json;  // the submitted job file as JSON
  int64_t submitted = 0;  // unix nanos; 0 = not yet
  int64_t started = 0;
  int64_t ended = 0;
  std::optional<int> exit_code;
  std::string reason;           // why it ended or is stopping
  std::string root_cause_json;  // "" when none
  int attempts = 0;
  std::string job_dir;            // "" until it starts
  std::string backend = "local";  // where it runs (src/backends)
  std::string handle;             // the backend's own, opaque: how it finds the job again; ""
                                  // until it starts
  int64_t events_seq = 0;         // the coordinator's events ingested: 1..events_seq
  std::string report_hash;        // SHA-256 (hex) of the credential its coordinator reports with
};

struct Event {
  int64_t seq = 0;   // 1, 2, ... per job, assigned by the store
  int64_t time = 0;  // unix nanos
  std::string json;  // one JSON object, as the coordinator or the server wrote it
};

struct JobFilter {
  std::optional<std::string> account;  // absent: every account
  std::vector<std::string> states;     // empty: every state
  int limit = 1000;                    // newest first (by submitted, then id)
};

// An account's bucket: its name is the owner's own (another account may have one of the same
// name); `dir` is its directory in the store (storage/uri.h's storeDirName, "OWNER@NAME"; a
// bucket made before buckets belonged to accounts keeps "NAME").
struct Bucket {
  std::string owner;
  std::string name;
  std::string dir;
  int64_t created = 0;
};

struct Share {
  int64_t id = 0;
  std::string bucket;
  std::string prefix;  // path inside the bucket, "" for all of it; no leading '/'
  std::string owner;   // the bucket's owner
  std::string grantee;
  std::string access;  // "read" or "write"
  int64_t created = 0;
};

class JobStore {
 public:
  // Opens (creating it and its directory's file if needed) the database at `path` and migrates
  // it. Errors: kIo when the file cannot be opened or written, kFailedPrecondition when its
  // schema is newer than this cohort knows.
  static Result<std::unique_ptr<JobStore>> open(const std::string& path);
  ~JobStore();
  JobStore(const JobStore&) = delete;
  JobStore& operator=(const JobStore&) = delete;

  int schemaVersion() const;

  // Accounts. createAccount: kAlreadyExists when the name is taken.
  Result<void> createAccount(const Account& account);
  Result<Account> account(const std::string& name);  // kNotFound
  Result<std::vector<Account>> accounts();           // by name
  // Sets every quota of `name` to `quotas` (absent ones go back to the server's default).
  // Errors: kNotFound.
  Result<void> setQuotas(const std::string& name, const Quotas& quotas);
  // How many of `account`'s jobs are in any of `states`.
  Result<int64_t> countJobs(const std::string& account, const std::vector<std::string>& states);

  // Tokens. addToken returns the new id; tokenByHash: kNotFound. deleteToken: kNotFound.
  Result<int64_t> addToken(const std::string& account, const std::string& hash,
                           const std::string& label);
  Result<Token> tokenByHash(const std::string& hash);
  Result<Token> token(int64_t id);
  Result<std::vector<Token>> tokens(const std::optional<std::string>& account);  // by id
  Result<void> deleteToken(int64_t id);

  // Jobs. insertJob: kAlreadyExists for a taken id. updateJob writes every field of the row
  // with `job.id` (kNotFound when there is none). deleteJob removes the job and its events.
  Result<void> insertJob(const Job& job);
  Result<Job> job(const std::string& id);  // kNotFound
  Result<std::vector<Job>> jobs(const JobFilter& filter);
  Result<void> updateJob(const Job& job);
  Result<void> deleteJob(const std::string& id);
  // Jobs in any of `states`, oldest first (by submitted, then id); for the server's start-up.
  Result<std::vector<Job>> jobsInStates(const std::vector<std::string>& states);
  // Counts per state, for /metrics.
  Result<std::vector<std::pair<std::string, int64_t>>> countJobsByState();

  // Events. Appends `events` (their seq is assigned). kNotFound for no job.
  Result<void> appendEvents(const std::string& job_id, const std::vector<Event>& events);
  // The coordinator's events, numbered by the coordinator: `events[i]` is its event first + i.
  // In one transaction, appends those after the job's events_seq (an event with empty json
  // only counts: it was refused) and advances events_seq past them; a batch that starts after
  // a gap appends nothing. So a batch sent twice, or after a restart, is ingested once. Returns
  // events_seq after the call and which events were new. kNotFound for no job.
  struct Ingested {
    int64_t events_seq = 0;
    size_t taken = 0;     // the batch's last `taken` events were new (refused ones included)
    size_t appended = 0;  // of those, the ones stored
  };
  Result<Ingested> ingestEvents(const std::string& job_id, int64_t first,
                                const std::vector<Event>& events);
  Result<std::vector<Event>> events(const std::string& job_id);  // by seq

  // Buckets, each an account's own. claimBucket makes `owner`'s bucket `name`, kept in `dir`,
  // unless it has one, and returns it (with the directory it had); kAlreadyExists when another
  // bucket has `dir`. bucket: std::nullopt when `owner` has none of that name.
  Result<Bucket> claimBucket(const std::string& owner, const std::string& name,
                             const std::string& dir);
  Result<std::optional<Bucket>> bucket(const std::string& owner, const std::string& name);
  Result<std::vector<Bucket>> buckets(const std::string& owner);  // by name

  // Shares. addShare returns the new id. shares(account): those it owns or was granted, by id.
  // sharesFor: the shares of `owner`'s `bucket` granted to `grantee`.
  Result<int64_t> addShare(const Share& share);
  Result<Share> share(int64_t id);  // kNotFound
  Result<std::vector<Share>> shares(const std::string& account);
  Result<std::vector<Share>> sharesFor(const std::string& owner, const std::string& bucket,
                                       const std::string& grantee);
  Result<void> deleteShare(int64_t id);

 private:
  struct Impl;
  explicit JobStore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace cohort::store
