// EventHub: who waits for what, so that streams are woken instead of polling. A follower of a
// job subscribes with a callback; `notify(job)` (from the job service, whenever new events or a
// new state of the job were stored) calls the callbacks of that job's subscribers, and changes
// to files in a watched directory (inotify: a log that grew, a file that appeared) call the
// callbacks of the subscribers watching it. The callbacks only wake a stream; they run on the
// notifying thread (or the HTTP loop, for inotify) and must be quick and must not call back into
// the hub. One inotify descriptor, read by the HTTP loop (`inotifyFd`, `readInotify`); many
// subscribers of one directory share one watch. Thread-safe: every method may be called from
// any thread.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "util/fd.h"
#include "util/result.h"

namespace cohort::server {

class EventHub {
 public:
  // Errors: kIo when inotify cannot be had.
  static Result<std::unique_ptr<EventHub>> create();

  // A subscription: unsubscribes (and drops its watch) when destroyed.
  class Subscription {
   public:
    ~Subscription();
    Subscription(const Subscription&) = delete;
    Subscription& operator=(const Subscription&) = delete;
    // Watches `dir` (replacing the directory watched before). When it does not exist yet, the
    // nearest existing parent up to `stop_at` is watched instead, so that its creation wakes
    // the subscriber, who then asks again. Returns the directory watched ("" when none).
    std::string watch(const std::string& dir, const std::string& stop_at);
    // Wakes the subscriber once, `after` from now (a long-poll's end, a keep-alive).
    void wakeAfter(std::chrono::milliseconds after);

   private:
    friend class EventHub;
    Subscription(EventHub& hub, uint64_t id) : hub_(hub), id_(id) {}
    EventHub& hub_;
    uint64_t id_;
  };

  std::unique_ptr<Subscription> subscribe(const std::string& job_id, std::function<void()> wake);
  void notify(const std::string& job_id);

  int inotifyFd() const { return inotify_.get(); }
  // Reads what the inotify descriptor holds and wakes the watchers (the HTTP loop calls it).
  void readInotify();
  // A timerfd that fires at the earliest wakeAfter deadline; readTimer wakes those due.
  int timerFd() const { return timer_.get(); }
  void readTimer();

  size_t subscribers() const;  // for tests and metrics
  size_t watches() const;

 private:
  EventHub() = default;
  void unsubscribe(uint64_t id);
  std::string watch(uint64_t id, const std::string& dir, const std::string& stop_at);
  void unwatch(uint64_t id);  // holding mu_
  void wakeAt(uint64_t id, std::chrono::steady_clock::time_point when);
  void arm();  // holding mu_

  struct Sub {
    std::string job_id;
    std::function<void()> wake;
    int wd = -1;
  };
  UniqueFd inotify_;
  UniqueFd timer_;
  std::multimap<std::chrono::steady_clock::time_point, uint64_t> deadlines_;
  mutable std::mutex mu_;
  uint64_t next_id_ = 1;
  std::map<uint64_t, Sub> subs_;
  std::map<std::string, std::set<uint64_t>> by_job_;
  std::map<int, std::set<uint64_t>> by_wd_;
};

}  // namespace cohort::server
