// Reporter: how a coordinator pushes its job's record to `cohort server` (POST
// /v1/jobs/{id}/report, docs/server-api.md), wherever the coordinator runs; the job directory's
// report.url says where the server is (re-read when it cannot be reached: a restarted server may
// listen elsewhere) and report.token holds the job's credential. The events file is
// the outbox: each event gets the next number (1, 2, ...) as it is written, and a thread of the
// reporter's own sends, in order, what the server has not acknowledged, with the job's report
// credential; it retries with backoff while the server is away (restarted, unreachable,
// overloaded). The server ingests each number once, so a dropped connection or a restart of the
// server loses nothing and ingests nothing twice. The latest progress snapshot rides with the
// next report; the result goes once every event is acknowledged. Thread-safe.
#pragma once

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "job/layout.h"
#include "util/result.h"
#include "util/text.h"

namespace cohort::agent {

struct ReportTarget {
  std::string url_file;  // report.url
  std::string server;    // what it said last: "http://host:port" (or https://)
  std::string pin;       // with https: the server's public key ("sha256//..."), report.url's
                         // second line "pin sha256//..."
  std::string job_id;
  std::string token;     // the job's report credential
};

// The target of the job in `layout`: report.url's server, and report.token's credential, whose
// file is removed so that nothing started after the coordinator (agents, ranks) finds it.
// Errors: kIo naming the file.
Result<ReportTarget> reportTarget(const job::Layout& layout, const std::string& job_id);

// Sends from a thread of its own, which start() starts: what comes before waits for it. The
// coordinator starts it once its agents are launched, so that it forks them from a process that
// has no other thread.
class Reporter {
 public:
  explicit Reporter(ReportTarget target);
  ~Reporter();  // stops the thread; what was not acknowledged stays in the events file
  Reporter(const Reporter&) = delete;
  Reporter& operator=(const Reporter&) = delete;

  // Starts sending; once is enough, more do nothing.
  void start();

  // The next event, as the events file has it (one JSON object). Its number is the count of
  // events so far.
  void event(std::string line);
  // The job's latest progress (a JSON object); replaces one not yet sent.
  void progress(std::string json);
  // The job's result (result.json's object): sent after the last event.
  void result(std::string json);

  // Starts sending when it has not, then waits until the server has every event and the
  // result, or `linger` passes, or `give_up`
  // (asked every fifth of a second, when given) says to stop waiting: a stop signal. Returns
  // false, having said why on stderr, when it gave up.
  bool drain(Millis linger, const std::function<std::string()>& give_up = {});

 private:
  void loop();
  // One POST of what is pending. Returns false when it did not reach the server.
  bool sendOnce(std::unique_lock<std::mutex>& lock);

  ReportTarget target_;  // its server may change (loop thread, under mu_)
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> events_;  // every event; events_[i] is number i + 1
  int64_t acked_ = 0;                // the server has events 1..acked_
  std::string progress_;             // not yet sent; "" when none
  std::string result_;
  bool result_acked_ = false;
  bool stop_ = false;
  std::string last_error_;
  std::thread thread_;
};

// A job its coordinator refused before it could run it (an input it could not read, a job file
// it could not plan, a port it could not lease, a listener it could not open): the refusal is
// the job's end, and the server hears it with its cause rather than finding the coordinator gone
// without a word. It is written to the job's record (a final "failed" state event with `reason`
// and `exit_code`, after whatever events the record has, and result.json) and reported with the
// events before it, waiting for the server at most `linger` or until `give_up` says to stop (see
// Reporter::drain). `target`: the report target when the caller already took it; else it is
// read from the job directory. Errors: kIo when the record cannot be written or the target
// read; false from the server's side is said on stderr by the reporter.
Result<void> reportRefusal(const job::Layout& layout, const std::string& job_id,
                           std::optional<ReportTarget> target, const std::string& reason,
                           int exit_code, Millis linger,
                           const std::function<std::string()>& give_up = {});

}  // namespace cohort::agent
