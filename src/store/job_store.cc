#include "store/job_store.h"

#include <sqlite3.h>

#include <condition_variable>
#include <deque>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <string_view>
#include <system_error>
#include <utility>

#include "util/text.h"

namespace cohort::store {
namespace {

// The schema, one step per version: step i takes a file from user_version i to i + 1. Append
// new steps; never edit one that has shipped.
constexpr const char* kMigrations[] = {
    R"sql(
CREATE TABLE accounts(
  name TEXT PRIMARY KEY NOT NULL,
  admin INTEGER NOT NULL,
  max_gpus INTEGER,
  max_cpu_millis INTEGER,
  created INTEGER NOT NULL
);
CREATE TABLE tokens(
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  account TEXT NOT NULL,
  label TEXT NOT NULL,
  hash TEXT NOT NULL,
  created INTEGER NOT NULL
);
CREATE UNIQUE INDEX tokens_hash ON tokens(hash);
CREATE TABLE jobs(
  id TEXT PRIMARY KEY NOT NULL,
  account TEXT NOT NULL,
  name TEXT NOT NULL,
  state TEXT NOT NULL,
  priority INTEGER NOT NULL,
  framework TEXT NOT NULL,
  ranks INTEGER NOT NULL,
  cpu_millis INTEGER NOT NULL,
  memory_bytes INTEGER NOT NULL,
  gpus INTEGER NOT NULL,
  max_runtime_ms INTEGER,
  spec_json TEXT NOT NULL,
  submitted INTEGER NOT NULL,
  started INTEGER NOT NULL,
  ended INTEGER NOT NULL,
  exit_code INTEGER,
  reason TEXT NOT NULL,
  root_cause_json TEXT NOT NULL,
  attempts INTEGER NOT NULL,
  job_dir TEXT NOT NULL,
  coordinator_pid INTEGER NOT NULL,
  coordinator_start INTEGER NOT NULL,
  events_offset INTEGER NOT NULL
);
CREATE INDEX jobs_account_submitted ON jobs(account, submitted);
CREATE INDEX jobs_state ON jobs(state);
CREATE TABLE events(
  job_id TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
  seq INTEGER NOT NULL,
  time INTEGER NOT NULL,
  json TEXT NOT NULL,
  PRIMARY KEY(job_id, seq)
) WITHOUT ROWID;
CREATE TABLE buckets(
  name TEXT PRIMARY KEY NOT NULL,
  owner TEXT NOT NULL,
  created INTEGER NOT NULL
);
CREATE TABLE shares(
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  bucket TEXT NOT NULL,
  prefix TEXT NOT NULL,
  owner TEXT NOT NULL,
  grantee TEXT NOT NULL,
  access TEXT NOT NULL,
  created INTEGER NOT NULL
);
CREATE INDEX shares_bucket_grantee ON shares(bucket, grantee);
CREATE INDEX shares_owner ON shares(owner);
)sql",
    // Each account gets a number of its own, never reused: its ranks' Unix identity.
    R"sql(
ALTER TABLE accounts ADD COLUMN number INTEGER NOT NULL DEFAULT 0;
UPDATE accounts SET number = rowid;
CREATE UNIQUE INDEX accounts_number ON accounts(number);
)sql",
    // A job's row names its backend and holds the backend's opaque handle, not pid columns.
    R"sql(
ALTER TABLE jobs ADD COLUMN backend TEXT NOT NULL DEFAULT 'local';
ALTER TABLE jobs ADD COLUMN handle TEXT NOT NULL DEFAULT '';
UPDATE jobs SET handle = json_object('pid', coordinator_pid, 'start', coordinator_start,
                                     'gpus', json_array())
  WHERE coordinator_pid != 0;
ALTER TABLE jobs DROP COLUMN coordinator_pid;
ALTER TABLE jobs DROP COLUMN coordinator_start;
)sql",
    // Coordinators push their events, numbered, with a credential of their job's own.
    R"sql(
ALTER TABLE jobs RENAME COLUMN events_offset TO events_seq;
UPDATE jobs SET events_seq = 0;
ALTER TABLE jobs ADD COLUMN report_hash TEXT NOT NULL DEFAULT '';
)sql",
    // Each account's quotas as its admin set them; NULL: the server's default.
    R"sql(
ALTER TABLE accounts ADD COLUMN quota_bytes INTEGER;
ALTER TABLE accounts ADD COLUMN quota_inodes INTEGER;
ALTER TABLE accounts ADD COLUMN quota_queued_jobs INTEGER;
ALTER TABLE accounts ADD COLUMN quota_uploads INTEGER;
ALTER TABLE accounts ADD COLUMN quota_followers INTEGER;
ALTER TABLE accounts ADD COLUMN quota_max_priority INTEGER;
)sql",
    // Buckets belong to accounts: each account has its own names, and a bucket has a directory
    // in the store. One made before keeps the directory of its name, and its owner.
    R"sql(
CREATE TABLE account_buckets(
  owner TEXT NOT NULL,
  name TEXT NOT NULL,
  dir TEXT NOT NULL,
  created INTEGER NOT NULL,
  PRIMARY KEY(owner, name)
) WITHOUT ROWID;
INSERT INTO account_buckets(owner, name, dir, created)
  SELECT owner, name, name, created FROM buckets;
DROP TABLE buckets;
ALTER TABLE account_buckets RENAME TO buckets;
CREATE UNIQUE INDEX buckets_dir ON buckets(dir);
DROP INDEX shares_bucket_grantee;
CREATE INDEX shares_bucket_grantee ON shares(owner, bucket, grantee);
)sql",
};
constexpr int kSchemaVersion = static_cast<int>(std::size(kMigrations));

// At most this many callers' writes share one transaction, which bounds a caller's latency.
constexpr size_t kMaxBatch = 1024;
constexpr int kBusyTimeoutMs = 5000;


// The canonical code for an SQLite result code (extended codes are on).
Code codeFor(int rc) {
  switch (rc) {
    case SQLITE_CONSTRAINT_PRIMARYKEY:
    case SQLITE_CONSTRAINT_UNIQUE:
      return Code::kAlreadyExists;
    case SQLITE_CONSTRAINT_FOREIGNKEY:
      return Code::kNotFound;
    default:
      break;
  }
  switch (rc & 0xff) {
    case SQLITE_CONSTRAINT:
    case SQLITE_TOOBIG:
    case SQLITE_MISMATCH:
      return Code::kInvalidArgument;
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return Code::kUnavailable;
    case SQLITE_MISUSE:
    case SQLITE_RANGE:
      return Code::kInternal;
    default:  // IOERR, FULL, CANTOPEN, READONLY, CORRUPT, NOTADB, PERM, NOMEM, ERROR, ...
      return Code::kIo;
  }
}

}  // namespace

// One open SQLite connection and its prepared statements. Used by one thread at a time.
// Outside the anonymous namespace: JobStore::Impl, a class the header names, holds them.
class Conn {
 public:
  Conn(std::string path, sqlite3* db) : path_(std::move(path)), db_(db) {}
  ~Conn() {
    for (auto& [sql, stmt] : statements_) sqlite3_finalize(stmt);
    sqlite3_close_v2(db_);
  }
  Conn(const Conn&) = delete;
  Conn& operator=(const Conn&) = delete;

  sqlite3* db() const { return db_; }

  // "database '<path>': <sqlite's message>" with the code that fits `rc`.
  tl::unexpected<Error> failure(int rc) const {
    return fail(codeFor(rc), "database '" + path_ + "': " + sqlite3_errmsg(db_));
  }

  // The cached statement for `sql` (one statement), prepared on first use.
  Result<sqlite3_stmt*> statement(std::string_view sql) {
    auto it = statements_.find(sql);
    if (it != statements_.end()) return it->second;
    sqlite3_stmt* stmt = nullptr;
    int rc = sqlite3_prepare_v3(db_, sql.data(), static_cast<int>(sql.size()),
                                SQLITE_PREPARE_PERSISTENT, &stmt, nullptr);
    if (rc != SQLITE_OK) return failure(rc);
    statements_.emplace(std::string(sql), stmt);
    return stmt;
  }

  // Runs one or more statements without caching them (migrations, pragmas).
  Result<void> execute(const char* sql) {
    int rc = sqlite3_exec(db_, sql, nullptr, nullptr, nullptr);
    if (rc != SQLITE_OK) return failure(rc);
    return {};
  }

 private:
  std::string path_;
  sqlite3* db_;
  std::map<std::string, sqlite3_stmt*, std::less<>> statements_;
};

namespace {

// A cached statement in use: binds parameters, steps, reads columns, and resets the statement
// (ending its read snapshot) when it goes out of scope.
class Query {
 public:
  Query(Conn& conn, sqlite3_stmt* stmt) : conn_(&conn), stmt_(stmt) {}
  ~Query() {
    if (stmt_ != nullptr) {
      sqlite3_reset(stmt_);
      sqlite3_clear_bindings(stmt_);
    }
  }
  Query(Query&& other) noexcept
      : conn_(other.conn_), stmt_(std::exchange(other.stmt_, nullptr)), param_(other.param_) {}
  Query& operator=(Query&&) = delete;

  // Binds the next parameter (1, 2, ... in call order).
  Query& bind(int64_t value) {
    sqlite3_bind_int64(stmt_, ++param_, value);
    return *this;
  }
  Query& bind(const std::string& value) {
    sqlite3_bind_text(stmt_, ++param_, value.data(), static_cast<int>(value.size()),
                      SQLITE_TRANSIENT);
    return *this;
  }
  Query& bind(std::optional<int64_t> value) {
    if (value) return bind(*value);
    sqlite3_bind_null(stmt_, ++param_);
    return *this;
  }
  Query& bind(std::optional<int> value) {
    return bind(value ? std::optional<int64_t>(*value) : std::nullopt);
  }
  Query& bind(int value) { return bind(static_cast<int64_t>(value)); }
  Query& bind(bool value) { return bind(static_cast<int64_t>(value ? 1 : 0)); }
  Query& bind(const char* value) { return bind(std::string(value)); }

  // true: a row is ready; false: done.
  Result<bool> step() {
    int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    return conn_->failure(rc);
  }
  // Steps a statement that returns no rows.
  Result<void> run() {
    COHORT_ASSIGN(bool row, step());
    (void)row;
    return {};
  }

  int64_t integer(int column) const { return sqlite3_column_int64(stmt_, column); }
  std::optional<int64_t> optionalInteger(int column) const {
    if (sqlite3_column_type(stmt_, column) == SQLITE_NULL) return std::nullopt;
    return integer(column);
  }
  std::string text(int column) const {
    const auto* data = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, column));
    int size = sqlite3_column_bytes(stmt_, column);
    return data == nullptr ? std::string() : std::string(data, static_cast<size_t>(size));
  }

 private:
  Conn* conn_;
  sqlite3_stmt* stmt_;
  int param_ = 0;
};

Result<Query> prepare(Conn& conn, std::string_view sql) {
  COHORT_ASSIGN(sqlite3_stmt * stmt, conn.statement(sql));
  return Query(conn, stmt);
}

Result<std::unique_ptr<Conn>> openConnection(const std::string& path, int flags) {
  sqlite3* db = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &db, flags | SQLITE_OPEN_NOMUTEX, nullptr);
  if (db == nullptr) return fail(Code::kIo, "database '" + path + "': out of memory");
  auto conn = std::make_unique<Conn>(path, db);
  if (rc != SQLITE_OK) return conn->failure(rc);
  sqlite3_extended_result_codes(db, 1);
  sqlite3_busy_timeout(db, kBusyTimeoutMs);
  return conn;
}

// Column lists and row readers, kept beside each other so the indexes match.
constexpr std::string_view kJobColumns =
    "id, account, name, state, priority, framework, ranks, cpu_millis, memory_bytes, gpus, "
    "max_runtime_ms, spec_json, submitted, started, ended, exit_code, reason, root_cause_json, "
    "attempts, job_dir, backend, handle, events_seq, report_hash";

Job readJob(const Query& q) {
  Job job;
  job.id = q.text(0);
  job.account = q.text(1);
  job.name = q.text(2);
  job.state = q.text(3);
  job.priority = static_cast<int>(q.integer(4));
  job.framework = q.text(5);
  job.ranks = static_cast<int>(q.integer(6));
  job.cpu_millis = q.integer(7);
  job.memory_bytes = q.integer(8);
  job.gpus = q.integer(9);
  job.max_runtime_ms = q.optionalInteger(10);
  job.spec_json = q.text(11);
  job.submitted = q.integer(12);
  job.started = q.integer(13);
  job.ended = q.integer(14);
  if (auto code = q.optionalInteger(15)) job.exit_code = static_cast<int>(*code);
  job.reason = q.text(16);
  job.root_cause_json = q.text(17);
  job.attempts = static_cast<int>(q.integer(18));
  job.job_dir = q.text(19);
  job.backend = q.text(20);
  job.handle = q.text(21);
  job.events_seq = q.integer(22);
  job.report_hash = q.text(23);
  return job;
}

// Binds every column but id, in kJobColumns order.
void bindJobFields(Query& q, const Job& job) {
  q.bind(job.account).bind(job.name).bind(job.state).bind(job.priority).bind(job.framework);
  q.bind(job.ranks).bind(job.cpu_millis).bind(job.memory_bytes).bind(job.gpus);
  q.bind(job.max_runtime_ms).bind(job.spec_json).bind(job.submitted).bind(job.started);
  q.bind(job.ended).bind(job.exit_code).bind(job.reason).bind(job.root_cause_json);
  q.bind(job.attempts).bind(job.job_dir).bind(job.backend).bind(job.handle);
  q.bind(job.events_seq).bind(job.report_hash);
}

constexpr const char* kAccountSelect =
    "SELECT name, admin, max_gpus, max_cpu_millis, created, number, quota_bytes, quota_inodes, "
    "quota_queued_jobs, quota_uploads, quota_followers, quota_max_priority FROM accounts";

Account readAccount(const Query& q) {
  return Account{.name = q.text(0),
                 .admin = q.integer(1) != 0,
                 .max_gpus = q.optionalInteger(2),
                 .max_cpu_millis = q.optionalInteger(3),
                 .created = q.integer(4),
                 .number = q.integer(5),
                 .quotas = {.bytes = q.optionalInteger(6),
                            .inodes = q.optionalInteger(7),
                            .queued_jobs = q.optionalInteger(8),
                            .uploads = q.optionalInteger(9),
                            .followers = q.optionalInteger(10),
                            .max_priority = q.optionalInteger(11)}};
}

constexpr const char* kTokenSelect = "SELECT id, account, label, hash, created FROM tokens";

Token readToken(const Query& q) {
  return Token{.id = q.integer(0),
               .account = q.text(1),
               .label = q.text(2),
               .hash = q.text(3),
               .created = q.integer(4)};
}

constexpr const char* kBucketSelect = "SELECT owner, name, dir, created FROM buckets";

Bucket readBucket(const Query& q) {
  return Bucket{.owner = q.text(0), .name = q.text(1), .dir = q.text(2), .created = q.integer(3)};
}

constexpr const char* kShareSelect =
    "SELECT id, bucket, prefix, owner, grantee, access, created FROM shares";

Share readShare(const Query& q) {
  return Share{.id = q.integer(0),
               .bucket = q.text(1),
               .prefix = q.text(2),
               .owner = q.text(3),
               .grantee = q.text(4),
               .access = q.text(5),
               .created = q.integer(6)};
}

// Every row of a query, read by `read`.
template <class T, class Read>
Result<std::vector<T>> allRows(Query& q, Read read) {
  std::vector<T> rows;
  while (true) {
    COHORT_ASSIGN(bool row, q.step());
    if (!row) break;
    rows.push_back(read(q));
  }
  return rows;
}

// "?, ?, ?" for n parameters.
std::string placeholders(size_t n) {
  std::string out;
  for (size_t i = 0; i < n; ++i) out += i == 0 ? "?" : ", ?";
  return out;
}

}  // namespace

// The writer connection with its group commit, and a pool of read-only connections.
//
// Group commit (LevelDB's writer queue): a caller queues its write and waits. The caller at the
// front of the queue is the leader: it takes every queued write (up to kMaxBatch), runs them in
// one BEGIN IMMEDIATE ... COMMIT on the writer connection, each inside its own SAVEPOINT so a
// failing write is undone alone, then hands every caller its result and wakes the next front.
// Callers that arrive while a leader commits form the next batch, so they share one fsync.
//
// Reads borrow a connection from the pool (opening one when none is free), so every thread that
// is reading at a moment has its own connection, and give it back when done; the pool is
// bounded by the number of concurrent readers, not by the number of threads ever seen.
struct JobStore::Impl {
  using WriteFn = std::function<Result<void>(Conn&)>;

  struct Writer {
    const WriteFn* fn = nullptr;
    Result<void> result;
    bool done = false;
    std::condition_variable cv;
  };

  std::string path;
  std::unique_ptr<Conn> writer;

  std::mutex write_mu;
  std::deque<Writer*> writers;  // guarded by write_mu

  std::mutex read_mu;
  std::vector<std::unique_ptr<Conn>> idle_readers;  // guarded by read_mu

  // Runs `fn` in a write transaction (possibly shared with other callers); returns once the
  // transaction is durable, with fn's error, or the transaction's if it failed to commit.
  Result<void> write(const WriteFn& fn) {
    Writer self;
    self.fn = &fn;
    std::unique_lock lock(write_mu);
    writers.push_back(&self);
    while (!self.done && writers.front() != &self) self.cv.wait(lock);
    if (self.done) return std::move(self.result);

    // Leader: the queue's first kMaxBatch entries, starting with self.
    std::vector<Writer*> batch(
        writers.begin(),
        writers.begin() + static_cast<std::ptrdiff_t>(std::min(writers.size(), kMaxBatch)));
    lock.unlock();
    commitBatch(batch);
    lock.lock();
    for (Writer* w : batch) {
      writers.pop_front();
      w->done = true;
      if (w != &self) w->cv.notify_one();
    }
    if (!writers.empty()) writers.front()->cv.notify_one();
    return std::move(self.result);
  }

  // Runs every write of `batch` in one transaction and sets each writer's result.
  void commitBatch(const std::vector<Writer*>& batch) {
    auto fail_all = [&](const Error& error) {
      for (Writer* w : batch) w->result = tl::unexpected<Error>(error);
    };
    if (auto begun = runCached("BEGIN IMMEDIATE"); !begun) return fail_all(begun.error());
    for (Writer* w : batch) {
      if (auto r = runCached("SAVEPOINT write"); !r) {
        w->result = r;
        continue;
      }
      w->result = (*w->fn)(*writer);
      if (sqlite3_get_autocommit(writer->db()) != 0) {
        // A disk or memory error rolled the whole transaction back: every write is lost.
        return fail_all(w->result
                            ? Error{Code::kIo, "database '" + path + "': transaction rolled back"}
                            : w->result.error());
      }
      if (!w->result) (void)runCached("ROLLBACK TO write");
      (void)runCached("RELEASE write");
    }
    if (auto committed = runCached("COMMIT"); !committed) {
      if (sqlite3_get_autocommit(writer->db()) == 0) (void)writer->execute("ROLLBACK");
      for (Writer* w : batch) {
        if (w->result) w->result = committed;
      }
    }
  }

  Result<void> runCached(const char* sql) {
    COHORT_ASSIGN(Query q, prepare(*writer, sql));
    return q.run();
  }

  // Runs `fn(Conn&)` on a read-only connection of this thread's own for the call.
  template <class Fn>
  auto read(Fn fn) -> decltype(fn(std::declval<Conn&>())) {
    std::unique_ptr<Conn> conn;
    {
      std::lock_guard lock(read_mu);
      if (!idle_readers.empty()) {
        conn = std::move(idle_readers.back());
        idle_readers.pop_back();
      }
    }
    if (!conn) {
      COHORT_ASSIGN(conn, openConnection(path, SQLITE_OPEN_READONLY));
    }
    auto result = fn(*conn);
    std::lock_guard lock(read_mu);
    idle_readers.push_back(std::move(conn));
    return result;
  }
};

JobStore::JobStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

JobStore::~JobStore() = default;

namespace {

// Applies the pragmas and every missing migration on the writer connection.
Result<void> migrate(Conn& conn, const std::string& path) {
  // journal_mode answers with the mode it ended up in; a file system without shared memory
  // support stays in another mode, and reads would then wait for writers.
  {
    COHORT_ASSIGN(Query q, prepare(conn, "PRAGMA journal_mode=WAL"));
    COHORT_ASSIGN(bool row, q.step());
    if (!row || q.text(0) != "wal") {
      return fail(Code::kIo, "database '" + path +
                                 "': cannot use write-ahead logging (journal "
                                 "mode '" +
                                 (row ? q.text(0) : std::string()) + "')");
    }
  }
  COHORT_TRY(conn.execute("PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON"));

  COHORT_TRY(conn.execute("BEGIN IMMEDIATE"));
  auto applied = [&]() -> Result<void> {
    int64_t version = 0;
    {
      COHORT_ASSIGN(Query q, prepare(conn, "PRAGMA user_version"));
      COHORT_ASSIGN(bool row, q.step());
      if (row) version = q.integer(0);
    }
    if (version > kSchemaVersion) {
      return fail(Code::kFailedPrecondition,
                  "database '" + path + "' has schema version " + std::to_string(version) +
                      "; this cohort knows up to " + std::to_string(kSchemaVersion) +
                      ": upgrade cohort");
    }
    if (version == kSchemaVersion) return {};
    for (int64_t v = version; v < kSchemaVersion; ++v) {
      COHORT_TRY(conn.execute(kMigrations[v]));
    }
    std::string set_version = "PRAGMA user_version=" + std::to_string(kSchemaVersion);
    COHORT_TRY(conn.execute(set_version.c_str()));
    return {};
  }();
  if (!applied) {
    (void)conn.execute("ROLLBACK");
    return applied;
  }
  return conn.execute("COMMIT");
}

}  // namespace

Result<std::unique_ptr<JobStore>> JobStore::open(const std::string& path) {
  std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(parent, ec);
    if (ec) {
      return fail(Code::kIo, "database '" + path + "': create directory '" + parent.string() +
                                 "': " + ec.message());
    }
  }
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  COHORT_ASSIGN(impl->writer, openConnection(path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE));
  COHORT_TRY(migrate(*impl->writer, path));
  return std::unique_ptr<JobStore>(new JobStore(std::move(impl)));
}

int JobStore::schemaVersion() const { return kSchemaVersion; }

// Accounts.

Result<void> JobStore::createAccount(const Account& account) {
  auto result = impl_->write([&](Conn& c) -> Result<void> {
    COHORT_ASSIGN(Query q, prepare(c,
                                   "INSERT INTO accounts(name, admin, max_gpus, max_cpu_millis, "
                                   "created, number) VALUES(?, ?, ?, ?, ?, "
                                   "(SELECT COALESCE(MAX(number), 0) + 1 FROM accounts))"));
    q.bind(account.name).bind(account.admin).bind(account.max_gpus).bind(account.max_cpu_millis);
    q.bind(account.created != 0 ? account.created : nowUnixNanos());
    return q.run();
  });
  if (!result && result.error().code == Code::kAlreadyExists) {
    return fail(Code::kAlreadyExists, "account '" + account.name + "' already exists");
  }
  return result;
}

Result<Account> JobStore::account(const std::string& name) {
  return impl_->read([&](Conn& c) -> Result<Account> {
    COHORT_ASSIGN(Query q, prepare(c, std::string(kAccountSelect) + " WHERE name = ?"));
    q.bind(name);
    COHORT_ASSIGN(bool row, q.step());
    if (!row) return fail(Code::kNotFound, "account '" + name + "' not found");
    return readAccount(q);
  });
}

Result<std::vector<Account>> JobStore::accounts() {
  return impl_->read([&](Conn& c) -> Result<std::vector<Account>> {
    COHORT_ASSIGN(Query q, prepare(c, std::string(kAccountSelect) + " ORDER BY name"));
    return allRows<Account>(q, readAccount);
  });
}

Result<void> JobStore::setQuotas(const std::string& name, const Quotas& quotas) {
  bool found = false;
  COHORT_TRY(impl_->write([&](Conn& c) -> Result<void> {
    COHORT_ASSIGN(Query q, prepare(c,
                                   "UPDATE accounts SET quota_bytes = ?, quota_inodes = ?, "
                                   "quota_queued_jobs = ?, quota_uploads = ?, quota_followers = ?, "
                                   "quota_max_priority = ? WHERE name = ?"));
    q.bind(quotas.bytes).bind(quotas.inodes).bind(quotas.queued_jobs).bind(quotas.uploads);
    q.bind(quotas.followers).bind(quotas.max_priority).bind(name);
    COHORT_TRY(q.run());
    found = sqlite3_changes(c.db()) > 0;
    return {};
  }));
  if (!found) return fail(Code::kNotFound, "account '" + name + "' not found");
  return {};
}

Result<int64_t> JobStore::countJobs(const std::string& account,
                                    const std::vector<std::string>& states) {
  return impl_->read([&](Conn& c) -> Result<int64_t> {
    std::string sql = "SELECT COUNT(*) FROM jobs WHERE account = ?";
    if (!states.empty()) {
      sql += " AND state IN (?";
      for (size_t i = 1; i < states.size(); ++i) sql += ", ?";
      sql += ")";
    }
    COHORT_ASSIGN(Query q, prepare(c, sql));
    q.bind(account);
    for (const std::string& state : states) q.bind(state);
    COHORT_ASSIGN(bool row, q.step());
    return row ? q.integer(0) : int64_t{0};
  });
}

// Tokens.

Result<int64_t> JobStore::addToken(const std::string& account, const std::string& hash,
                                   const std::string& label) {
  int64_t id = 0;
  auto result = impl_->write([&](Conn& c) -> Result<void> {
    COHORT_ASSIGN(Query q, prepare(c,
                                   "INSERT INTO tokens(account, label, hash, created) "
                                   "VALUES(?, ?, ?, ?)"));
    q.bind(account).bind(label).bind(hash).bind(nowUnixNanos());
    COHORT_TRY(q.run());
    id = sqlite3_last_insert_rowid(c.db());
    return {};
  });
  if (!result) {
    if (result.error().code == Code::kAlreadyExists) {
      return fail(Code::kAlreadyExists, "a token with this hash already exists");
    }
    return tl::unexpected<Error>(result.error());
  }
  return id;
}

Result<Token> JobStore::tokenByHash(const std::string& hash) {
  return impl_->read([&](Conn& c) -> Result<Token> {
    COHORT_ASSIGN(Query q, prepare(c, std::string(kTokenSelect) + " WHERE hash = ?"));
    q.bind(hash);
    COHORT_ASSIGN(bool row, q.step());
    // The hash is a credential: it is not repeated in the message.
    if (!row) return fail(Code::kNotFound, "token not found");
    return readToken(q);
  });
}

Result<Token> JobStore::token(int64_t id) {
  return impl_->read([&](Conn& c) -> Result<Token> {
    COHORT_ASSIGN(Query q, prepare(c, std::string(kTokenSelect) + " WHERE id = ?"));
    q.bind(id);
    COHORT_ASSIGN(bool row, q.step());
    if (!row) return fail(Code::kNotFound, "token " + std::to_string(id) + " not found");
    return readToken(q);
  });
}

Result<std::vector<Token>> JobStore::tokens(const std::optional<std::string>& account) {
  return impl_->read([&](Conn& c) -> Result<std::vector<Token>> {
    if (!account) {
      COHORT_ASSIGN(Query q, prepare(c, std::string(kTokenSelect) + " ORDER BY id"));
      return allRows<Token>(q, readToken);
    }
    COHORT_ASSIGN(Query q,
                  prepare(c, std::string(kTokenSelect) + " WHERE account = ? ORDER BY id"));
    q.bind(*account);
    return allRows<Token>(q, readToken);
  });
}

Result<void> JobStore::deleteToken(int64_t id) {
  return impl_->write([&](Conn& c) -> Result<void> {
    COHORT_ASSIGN(Query q, prepare(c, "DELETE FROM tokens WHERE id = ?"));
    q.bind(id);
    COHORT_TRY(q.run());
    if (sqlite3_changes(c.db()) == 0) {
      return fail(Code::kNotFound, "token " + std::to_string(id) + " not found");
    }
    return {};
  });
}

// Jobs.

Result<void> JobStore::insertJob(const Job& job) {
  auto result = impl_->write([&](Conn& c) -> Result<void> {
    static const std::string sql =
        "INSERT INTO jobs(" + std::string(kJobColumns) + ") VALUES(" + placeholders(24) + ")";
    COHORT_ASSIGN(Query q, prepare(c, sql));
    q.bind(job.id);
    bindJobFields(q, job);
    return q.run();
  });
  if (!result && result.error().code == Code::kAlreadyExists) {
    return fail(Code::kAlreadyExists, "job '" + job.id + "' already exists");
  }
  return result;
}

Result<Job> JobStore::job(const std::string& id) {
  return impl_->read([&](Conn& c) -> Result<Job> {
    static const std::string sql = "SELECT " + std::string(kJobColumns) + " FROM jobs WHERE id = ?";
    COHORT_ASSIGN(Query q, prepare(c, sql));
    q.bind(id);
    COHORT_ASSIGN(bool row, q.step());
    if (!row) return fail(Code::kNotFound, "job '" + id + "' not found");
    return readJob(q);
  });
}

Result<std::vector<Job>> JobStore::jobs(const JobFilter& filter) {
  std::string sql = "SELECT " + std::string(kJobColumns) + " FROM jobs";
  std::string where;
  if (filter.account) where += " WHERE account = ?";
  if (!filter.states.empty()) {
    where += where.empty() ? " WHERE " : " AND ";
    where += "state IN (" + placeholders(filter.states.size()) + ")";
  }
  sql += where + " ORDER BY submitted DESC, id DESC LIMIT ?";
  return impl_->read([&](Conn& c) -> Result<std::vector<Job>> {
    COHORT_ASSIGN(Query q, prepare(c, sql));
    if (filter.account) q.bind(*filter.account);
    for (const auto& state : filter.states) q.bind(state);
    q.bind(filter.limit);
    return allRows<Job>(q, readJob);
  });
}

Result<void> JobStore::updateJob(const Job& job) {
  return impl_->write([&](Conn& c) -> Result<void> {
    static const std::string sql = [] {
      std::string s = "UPDATE jobs SET ";
      std::string_view columns = kJobColumns.substr(kJobColumns.find(',') + 2);  // all but id
      bool first = true;
      while (!columns.empty()) {
        size_t comma = columns.find(',');
        s += (first ? "" : ", ") + std::string(columns.substr(0, comma)) + " = ?";
        first = false;
        columns = comma == std::string_view::npos ? "" : columns.substr(comma + 2);
      }
      return s + " WHERE id = ?";
    }();
    COHORT_ASSIGN(Query q, prepare(c, sql));
    bindJobFields(q, job);
    q.bind(job.id);
    COHORT_TRY(q.run());
    if (sqlite3_changes(c.db()) == 0) {
      return fail(Code::kNotFound, "job '" + job.id + "' not found");
    }
    return {};
  });
}

Result<void> JobStore::deleteJob(const std::string& id) {
  return impl_->write([&](Conn& c) -> Result<void> {
    // Events go with it: events.job_id references jobs(id) ON DELETE CASCADE.
    COHORT_ASSIGN(Query q, prepare(c, "DELETE FROM jobs WHERE id = ?"));
    q.bind(id);
    COHORT_TRY(q.run());
    if (sqlite3_changes(c.db()) == 0) {
      return fail(Code::kNotFound, "job '" + id + "' not found");
    }
    return {};
  });
}

Result<std::vector<Job>> JobStore::jobsInStates(const std::vector<std::string>& states) {
  if (states.empty()) return std::vector<Job>{};
  std::string sql = "SELECT " + std::string(kJobColumns) + " FROM jobs WHERE state IN (" +
                    placeholders(states.size()) + ") ORDER BY submitted, id";
  return impl_->read([&](Conn& c) -> Result<std::vector<Job>> {
    COHORT_ASSIGN(Query q, prepare(c, sql));
    for (const auto& state : states) q.bind(state);
    return allRows<Job>(q, readJob);
  });
}

Result<std::vector<std::pair<std::string, int64_t>>> JobStore::countJobsByState() {
  using Counts = std::vector<std::pair<std::string, int64_t>>;
  return impl_->read([&](Conn& c) -> Result<Counts> {
    COHORT_ASSIGN(Query q,
                  prepare(c, "SELECT state, COUNT(*) FROM jobs GROUP BY state ORDER BY state"));
    return allRows<std::pair<std::string, int64_t>>(
        q, [](const Query& r) { return std::make_pair(r.text(0), r.integer(1)); });
  });
}

// Events.

namespace {

Result<void> requireJob(Conn& c, const std::string& job_id) {
  COHORT_ASSIGN(Query q, prepare(c, "SELECT 1 FROM jobs WHERE id = ?"));
  q.bind(job_id);
  COHORT_ASSIGN(bool row, q.step());
  if (!row) return fail(Code::kNotFound, "job '" + job_id + "' not found");
  return {};
}

// Appends `events` (those with json) after the job's last seq. Returns how many.
Result<size_t> insertEvents(Conn& c, const std::string& job_id, const Event* events,
                            size_t count) {
  int64_t last = 0;
  {
    COHORT_ASSIGN(Query q, prepare(c, "SELECT MAX(seq) FROM events WHERE job_id = ?"));
    q.bind(job_id);
    COHORT_ASSIGN(bool row, q.step());
    if (row) last = q.integer(0);  // NULL (no events) reads as 0
  }
  size_t appended = 0;
  for (size_t i = 0; i < count; ++i) {
    if (events[i].json.empty()) continue;
    COHORT_ASSIGN(Query q,
                  prepare(c, "INSERT INTO events(job_id, seq, time, json) VALUES(?, ?, ?, ?)"));
    q.bind(job_id).bind(++last).bind(events[i].time).bind(events[i].json);
    COHORT_TRY(q.run());
    ++appended;
  }
  return appended;
}

}  // namespace

Result<void> JobStore::appendEvents(const std::string& job_id, const std::vector<Event>& events) {
  return impl_->write([&](Conn& c) -> Result<void> {
    COHORT_TRY(requireJob(c, job_id));
    COHORT_TRY(insertEvents(c, job_id, events.data(), events.size()));
    return {};
  });
}

Result<JobStore::Ingested> JobStore::ingestEvents(const std::string& job_id, int64_t first,
                                                  const std::vector<Event>& events) {
  Ingested out;
  COHORT_TRY(impl_->write([&](Conn& c) -> Result<void> {
    out = Ingested{};
    {
      COHORT_ASSIGN(Query q, prepare(c, "SELECT events_seq FROM jobs WHERE id = ?"));
      q.bind(job_id);
      COHORT_ASSIGN(bool row, q.step());
      if (!row) return fail(Code::kNotFound, "job '" + job_id + "' not found");
      out.events_seq = q.integer(0);
    }
    const int64_t end = first + static_cast<int64_t>(events.size());  // one past the batch
    if (first < 1 || first > out.events_seq + 1 || end <= out.events_seq + 1) return {};
    const size_t skip = static_cast<size_t>(out.events_seq + 1 - first);
    out.taken = events.size() - skip;
    COHORT_ASSIGN(out.appended, insertEvents(c, job_id, events.data() + skip, events.size() - skip));
    COHORT_ASSIGN(Query q, prepare(c, "UPDATE jobs SET events_seq = ? WHERE id = ?"));
    q.bind(end - 1).bind(job_id);
    COHORT_TRY(q.run());
    out.events_seq = end - 1;
    return {};
  }));
  return out;
}

Result<std::vector<Event>> JobStore::events(const std::string& job_id) {
  return impl_->read([&](Conn& c) -> Result<std::vector<Event>> {
    COHORT_ASSIGN(Query q,
                  prepare(c, "SELECT seq, time, json FROM events WHERE job_id = ? ORDER BY seq"));
    q.bind(job_id);
    return allRows<Event>(q, [](const Query& r) {
      return Event{.seq = r.integer(0), .time = r.integer(1), .json = r.text(2)};
    });
  });
}

// Buckets.

Result<Bucket> JobStore::claimBucket(const std::string& owner, const std::string& name,
                                     const std::string& dir) {
  Bucket bucket;
  COHORT_TRY(impl_->write([&](Conn& c) -> Result<void> {
    {
      COHORT_ASSIGN(Query q, prepare(c,
                                     "INSERT INTO buckets(owner, name, dir, created) "
                                     "VALUES(?, ?, ?, ?) ON CONFLICT(owner, name) DO NOTHING"));
      q.bind(owner).bind(name).bind(dir).bind(nowUnixNanos());
      COHORT_TRY(q.run());
    }
    COHORT_ASSIGN(Query q,
                  prepare(c, std::string(kBucketSelect) + " WHERE owner = ? AND name = ?"));
    q.bind(owner).bind(name);
    COHORT_ASSIGN(bool row, q.step());
    if (!row) return fail(Code::kInternal, "bucket '" + name + "' vanished while claimed");
    bucket = readBucket(q);
    return {};
  }));
  return bucket;
}

Result<std::optional<Bucket>> JobStore::bucket(const std::string& owner, const std::string& name) {
  return impl_->read([&](Conn& c) -> Result<std::optional<Bucket>> {
    COHORT_ASSIGN(Query q,
                  prepare(c, std::string(kBucketSelect) + " WHERE owner = ? AND name = ?"));
    q.bind(owner).bind(name);
    COHORT_ASSIGN(bool row, q.step());
    if (!row) return std::optional<Bucket>();
    return std::optional<Bucket>(readBucket(q));
  });
}

Result<std::vector<Bucket>> JobStore::buckets(const std::string& owner) {
  return impl_->read([&](Conn& c) -> Result<std::vector<Bucket>> {
    COHORT_ASSIGN(Query q,
                  prepare(c, std::string(kBucketSelect) + " WHERE owner = ? ORDER BY name"));
    q.bind(owner);
    return allRows<Bucket>(q, readBucket);
  });
}

// Shares.

Result<int64_t> JobStore::addShare(const Share& share) {
  int64_t id = 0;
  COHORT_TRY(impl_->write([&](Conn& c) -> Result<void> {
    COHORT_ASSIGN(Query q, prepare(c,
                                   "INSERT INTO shares(bucket, prefix, owner, grantee, access, "
                                   "created) VALUES(?, ?, ?, ?, ?, ?)"));
    q.bind(share.bucket).bind(share.prefix).bind(share.owner).bind(share.grantee);
    q.bind(share.access).bind(share.created != 0 ? share.created : nowUnixNanos());
    COHORT_TRY(q.run());
    id = sqlite3_last_insert_rowid(c.db());
    return {};
  }));
  return id;
}

Result<Share> JobStore::share(int64_t id) {
  return impl_->read([&](Conn& c) -> Result<Share> {
    COHORT_ASSIGN(Query q, prepare(c, std::string(kShareSelect) + " WHERE id = ?"));
    q.bind(id);
    COHORT_ASSIGN(bool row, q.step());
    if (!row) return fail(Code::kNotFound, "share " + std::to_string(id) + " not found");
    return readShare(q);
  });
}

Result<std::vector<Share>> JobStore::shares(const std::string& account) {
  return impl_->read([&](Conn& c) -> Result<std::vector<Share>> {
    COHORT_ASSIGN(Query q, prepare(c, std::string(kShareSelect) +
                                          " WHERE owner = ? OR grantee = ? ORDER BY id"));
    q.bind(account).bind(account);
    return allRows<Share>(q, readShare);
  });
}

Result<std::vector<Share>> JobStore::sharesFor(const std::string& owner, const std::string& bucket,
                                               const std::string& grantee) {
  return impl_->read([&](Conn& c) -> Result<std::vector<Share>> {
    COHORT_ASSIGN(Query q, prepare(c, std::string(kShareSelect) +
                                          " WHERE owner = ? AND bucket = ? AND grantee = ? "
                                          "ORDER BY id"));
    q.bind(owner).bind(bucket).bind(grantee);
    return allRows<Share>(q, readShare);
  });
}

Result<void> JobStore::deleteShare(int64_t id) {
  return impl_->write([&](Conn& c) -> Result<void> {
    COHORT_ASSIGN(Query q, prepare(c, "DELETE FROM shares WHERE id = ?"));
    q.bind(id);
    COHORT_TRY(q.run());
    if (sqlite3_changes(c.db()) == 0) {
      return fail(Code::kNotFound, "share " + std::to_string(id) + " not found");
    }
    return {};
  });
}

}  // namespace cohort::store
