#include "agent/reporter.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "http/client.h"
#include "job/events.h"
#include "util/fd.h"
#include "util/text.h"

namespace cohort::agent {

namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kMaxBatchEvents = 512;
constexpr size_t kMaxBatchBytes = 1u << 20;  // well under the server's 4 MiB for a body
constexpr Millis kFirstBackoff{50};
constexpr Millis kMaxBackoff{2000};
constexpr Millis kProgressReportEvery{1000};  // at most one report for progress alone per second

}  // namespace

namespace {

// The first line of `path`. Errors: kIo naming the file (also when it is empty).
Result<std::string> firstLine(const std::string& path) {
  COHORT_ASSIGN(std::string text, readFile(path));
  text = text.substr(0, text.find('\n'));
  if (text.empty()) return fail(Code::kIo, "'" + path + "' is empty");
  return text;
}

// The server's key pin, report.url's "pin sha256//..." line ("" when none).
std::string pinLine(const std::string& path) {
  auto text = readFile(path);
  if (!text) return "";
  for (const std::string& line : split(*text, '\n')) {
    if (line.rfind("pin ", 0) == 0) return line.substr(4);
  }
  return "";
}

}  // namespace

Result<ReportTarget> reportTarget(const job::Layout& layout, const std::string& job_id) {
  ReportTarget target;
  target.url_file = layout.reportUrlFile();
  target.job_id = job_id;
  COHORT_ASSIGN(target.server, firstLine(target.url_file));
  target.pin = pinLine(target.url_file);
  const std::string token_file = layout.reportTokenFile();
  COHORT_ASSIGN(target.token, firstLine(token_file));
  if (::unlink(token_file.c_str()) != 0) return failErrno("remove '" + token_file + "'");
  return target;
}

Reporter::Reporter(ReportTarget target) : target_(std::move(target)) {}

void Reporter::start() {
  if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
}

Reporter::~Reporter() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Reporter::event(std::string line) {
  {
    std::lock_guard lock(mu_);
    events_.push_back(std::move(line));
  }
  cv_.notify_all();
}

void Reporter::progress(std::string json) {
  {
    std::lock_guard lock(mu_);
    progress_ = std::move(json);
  }
  cv_.notify_all();
}

void Reporter::result(std::string json) {
  {
    std::lock_guard lock(mu_);
    result_ = std::move(json);
  }
  cv_.notify_all();
}

bool Reporter::drain(Millis linger, const std::function<std::string()>& give_up) {
  start();
  std::unique_lock lock(mu_);
  auto done = [&] {
    return stop_ || (acked_ == static_cast<int64_t>(events_.size()) &&
                     (result_.empty() || result_acked_));
  };
  const auto until = Clock::now() + linger;
  std::string why;
  while (!done() && Clock::now() < until && why.empty()) {
    cv_.wait_until(lock, std::min(until, Clock::now() + Millis(200)), done);
    if (!done() && give_up) why = give_up();
  }
  if (done() && !stop_) return true;
  if (why.empty()) why = last_error_.empty() ? "it gave up" : last_error_;
  std::fprintf(stderr,
               "cohort: the server at %s has events 1-%lld of %zu%s (%s); the rest stay in the "
               "job's events file\n",
               target_.server.c_str(), static_cast<long long>(acked_), events_.size(),
               result_.empty() || result_acked_ ? "" : " and not the result", why.c_str());
  return false;
}

void Reporter::loop() {
  std::unique_lock lock(mu_);
  Millis backoff = kFirstBackoff;
  Clock::time_point last_progress{};
  while (!stop_) {
    const bool events = acked_ < static_cast<int64_t>(events_.size());
    const bool result = !result_.empty() && !result_acked_ && !events;
    const bool progress = !progress_.empty();
    if (!events && !result && !progress) {
      cv_.wait(lock);
      continue;
    }
    if (!events && !result && Clock::now() - last_progress < kProgressReportEvery) {
      cv_.wait_until(lock, last_progress + kProgressReportEvery);
      continue;
    }
    if (progress) last_progress = Clock::now();
    if (sendOnce(lock)) {
      backoff = kFirstBackoff;
      cv_.notify_all();  // drain() may be waiting
      continue;
    }
    if (stop_) break;
    cv_.wait_for(lock, backoff, [&] { return stop_; });
    backoff = std::min(kMaxBackoff, backoff * 2);
  }
}

bool Reporter::sendOnce(std::unique_lock<std::mutex>& lock) {
  // The body, built under the lock from what is pending, sent without it.
  const int64_t first = acked_ + 1;
  std::string body = "{\"seq\":" + std::to_string(first) + ",\"events\":[";
  size_t count = 0;
  for (size_t i = static_cast<size_t>(acked_); i < events_.size(); ++i) {
    if (count == kMaxBatchEvents || (count > 0 && body.size() + events_[i].size() > kMaxBatchBytes))
      break;
    if (count++) body += ',';
    body += events_[i];
  }
  body += ']';
  const bool all_events = static_cast<size_t>(acked_) + count == events_.size();
  const bool with_result = all_events && !result_.empty() && !result_acked_;
  if (with_result) body += ",\"result\":" + result_;
  std::string progress = std::move(progress_);
  progress_.clear();
  if (!progress.empty()) body += ",\"progress\":" + progress;
  body += '}';
  const std::string server = target_.server;
  const std::string pin = target_.pin;
  lock.unlock();

  http::Request request;
  request.pin = pin;
  request.method = "POST";
  request.url = server + "/v1/jobs/" + target_.job_id + "/report";
  request.headers = {"Authorization: Bearer " + target_.token, "Content-Type: application/json"};
  request.body = std::move(body);
  request.stall_timeout_s = 30;
  auto answer = http::perform(request);
  std::string error;
  int64_t events_seq = -1;
  bool result_recorded = false;
  if (!answer) {
    error = "reporting needs " + answer.error().message;
  } else if (!answer->error.empty()) {
    error = (answer->too_large ? "it sent " : "cannot reach it: ") + answer->error;
  } else if (answer->status != 200) {
    error = "it answered " + std::to_string(answer->status) + ": " +
            answer->body.substr(0, 300);
  } else {
    auto j = nlohmann::json::parse(answer->body, nullptr, false);
    auto seq = j.is_object() ? j.find("events_seq") : j.end();
    if (seq == j.end() || !seq->is_number_integer()) {
      error = "its answer has no events_seq";
    } else {
      events_seq = seq->get<int64_t>();
      auto r = j.find("result");
      result_recorded = r != j.end() && r->is_boolean() && r->get<bool>();
    }
  }

  lock.lock();
  if (events_seq < 0) {
    if (last_error_ != error) {
      std::fprintf(stderr, "cohort: reporting to the server at %s: %s; retrying\n",
                   target_.server.c_str(), error.c_str());
    }
    last_error_ = error;
    // A restarted server may listen elsewhere: it says where in report.url.
    if (auto now = firstLine(target_.url_file); now && *now != target_.server) {
      std::fprintf(stderr, "cohort: the server is now at %s\n", now->c_str());
      target_.server = *now;
      target_.pin = pinLine(target_.url_file);
      last_error_.clear();
    }
    if (!progress.empty() && progress_.empty()) progress_ = std::move(progress);
    return false;
  }
  if (!last_error_.empty()) {
    std::fprintf(stderr, "cohort: reporting to the server at %s again\n", target_.server.c_str());
    last_error_.clear();
  }
  // The server says what it has: after a gap (a server restored from an older database) the
  // next report starts where it stands.
  acked_ = std::clamp<int64_t>(events_seq, 0, static_cast<int64_t>(events_.size()));
  if (with_result && result_recorded) result_acked_ = true;
  return true;
}

Result<void> reportRefusal(const job::Layout& layout, const std::string& job_id,
                           std::optional<ReportTarget> target, const std::string& reason,
                           int exit_code, Millis linger,
                           const std::function<std::string()>& give_up) {
  if (!target) {
    COHORT_ASSIGN(ReportTarget read, reportTarget(layout, job_id));
    target = std::move(read);
  }
  // What the record has already (a coordinator that failed after it began), numbered as the
  // server numbers it: the refusal comes after it.
  std::vector<std::string> lines;
  UniqueFd events(::open(layout.eventsFile().c_str(),
                         O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0644));
  if (!events.valid()) return failErrno("open '" + layout.eventsFile() + "'");
  std::string text, chunk;
  int64_t offset = 0;
  while (text.size() < (64u << 20) && readNextChunk(events.get(), offset, chunk)) text += chunk;
  for (const std::string& line : split(text, '\n')) {
    if (!line.empty()) lines.push_back(line);
  }
  job::Event end = job::stateEvent(nowUnixNanos(), "failed", reason);
  end.exit_code = exit_code;
  const std::string line = job::encodeEvent(end);
  COHORT_TRY(writeAll(events.get(), line + "\n"));
  lines.push_back(line);
  const nlohmann::json result = {{"job_id", job_id},    {"state", "failed"},
                                 {"exit_code", exit_code}, {"reason", reason},
                                 {"attempts", 0},          {"outputs", nlohmann::json::array()},
                                 {"duration_s", 0}};
  const std::string json = result.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
  COHORT_TRY(writeFileAtomic(layout.resultFile(), json + "\n"));
  Reporter reporter(std::move(*target));
  for (std::string& l : lines) reporter.event(std::move(l));
  reporter.result(json);
  reporter.drain(linger, give_up);
  return {};
}

}  // namespace cohort::agent
