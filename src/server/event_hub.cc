#include "server/event_hub.h"

#include <sys/inotify.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <vector>

namespace cohort::server {

namespace {
constexpr uint32_t kWatchMask =
    IN_MODIFY | IN_CREATE | IN_MOVED_TO | IN_CLOSE_WRITE | IN_DELETE_SELF | IN_MOVE_SELF;
}

Result<std::unique_ptr<EventHub>> EventHub::create() {
  std::unique_ptr<EventHub> hub(new EventHub());
  hub->inotify_.reset(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
  if (!hub->inotify_.valid()) return failErrno("inotify_init1");
  hub->timer_.reset(::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
  if (!hub->timer_.valid()) return failErrno("timerfd_create");
  return hub;
}

EventHub::Subscription::~Subscription() { hub_.unsubscribe(id_); }

std::string EventHub::Subscription::watch(const std::string& dir, const std::string& stop_at) {
  return hub_.watch(id_, dir, stop_at);
}

void EventHub::Subscription::wakeAfter(std::chrono::milliseconds after) {
  hub_.wakeAt(id_, std::chrono::steady_clock::now() + after);
}

void EventHub::arm() {
  itimerspec spec{};
  if (!deadlines_.empty()) {
    auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                  deadlines_.begin()->first.time_since_epoch())
                  .count();
    if (ns <= 0) ns = 1;
    spec.it_value.tv_sec = static_cast<time_t>(ns / 1000000000);
    spec.it_value.tv_nsec = static_cast<long>(ns % 1000000000);
    if (spec.it_value.tv_sec == 0 && spec.it_value.tv_nsec == 0) spec.it_value.tv_nsec = 1;
  }
  ::timerfd_settime(timer_.get(), TFD_TIMER_ABSTIME, &spec, nullptr);
}

void EventHub::wakeAt(uint64_t id, std::chrono::steady_clock::time_point when) {
  std::lock_guard lock(mu_);
  if (!subs_.count(id)) return;
  bool earliest = deadlines_.empty() || when < deadlines_.begin()->first;
  deadlines_.emplace(when, id);
  if (earliest) arm();
}

void EventHub::readTimer() {
  uint64_t expirations;
  ssize_t r = ::read(timer_.get(), &expirations, sizeof expirations);
  (void)r;
  std::vector<std::function<void()>> wakes;
  {
    std::lock_guard lock(mu_);
    auto now = std::chrono::steady_clock::now();
    while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
      auto it = subs_.find(deadlines_.begin()->second);
      if (it != subs_.end()) wakes.push_back(it->second.wake);
      deadlines_.erase(deadlines_.begin());
    }
    arm();
  }
  for (auto& w : wakes) w();
}

std::unique_ptr<EventHub::Subscription> EventHub::subscribe(const std::string& job_id,
                                                             std::function<void()> wake) {
  std::lock_guard lock(mu_);
  uint64_t id = next_id_++;
  subs_[id] = Sub{job_id, std::move(wake), -1};
  by_job_[job_id].insert(id);
  return std::unique_ptr<Subscription>(new Subscription(*this, id));
}

void EventHub::unwatch(uint64_t id) {
  auto it = subs_.find(id);
  if (it == subs_.end() || it->second.wd < 0) return;
  int wd = it->second.wd;
  it->second.wd = -1;
  auto w = by_wd_.find(wd);
  if (w == by_wd_.end()) return;
  w->second.erase(id);
  if (w->second.empty()) {
    by_wd_.erase(w);
    ::inotify_rm_watch(inotify_.get(), wd);
  }
}

void EventHub::unsubscribe(uint64_t id) {
  std::lock_guard lock(mu_);
  unwatch(id);
  auto it = subs_.find(id);
  if (it == subs_.end()) return;
  auto j = by_job_.find(it->second.job_id);
  if (j != by_job_.end()) {
    j->second.erase(id);
    if (j->second.empty()) by_job_.erase(j);
  }
  subs_.erase(it);
  for (auto d = deadlines_.begin(); d != deadlines_.end();) {
    d = d->second == id ? deadlines_.erase(d) : std::next(d);
  }
}

std::string EventHub::watch(uint64_t id, const std::string& dir, const std::string& stop_at) {
  std::lock_guard lock(mu_);
  unwatch(id);
  auto it = subs_.find(id);
  if (it == subs_.end()) return {};
  std::string d = dir;
  while (!d.empty()) {
    int wd = ::inotify_add_watch(inotify_.get(), d.c_str(), kWatchMask | IN_ONLYDIR);
    if (wd >= 0) {
      it->second.wd = wd;
      by_wd_[wd].insert(id);
      return d;
    }
    if (errno != ENOENT && errno != ENOTDIR) return {};
    if (d == stop_at || d.size() <= stop_at.size()) return {};
    size_t slash = d.rfind('/');
    if (slash == std::string::npos || slash == 0) return {};
    d.resize(slash);
  }
  return {};
}

void EventHub::notify(const std::string& job_id) {
  std::vector<std::function<void()>> wakes;
  {
    std::lock_guard lock(mu_);
    auto j = by_job_.find(job_id);
    if (j == by_job_.end()) return;
    for (uint64_t id : j->second) wakes.push_back(subs_[id].wake);
  }
  for (auto& w : wakes) w();
}

void EventHub::readInotify() {
  alignas(inotify_event) char buf[16 << 10];
  std::set<int> touched;
  for (;;) {
    ssize_t n = ::read(inotify_.get(), buf, sizeof buf);
    if (n <= 0) break;
    for (ssize_t at = 0; at < n;) {
      const auto* e = reinterpret_cast<const inotify_event*>(buf + at);
      touched.insert(e->wd);
      at += static_cast<ssize_t>(sizeof(inotify_event) + e->len);
    }
  }
  std::vector<std::function<void()>> wakes;
  {
    std::lock_guard lock(mu_);
    for (int wd : touched) {
      auto w = by_wd_.find(wd);
      if (w == by_wd_.end()) continue;
      for (uint64_t id : w->second) wakes.push_back(subs_[id].wake);
    }
  }
  for (auto& w : wakes) w();
}

size_t EventHub::subscribers() const {
  std::lock_guard lock(mu_);
  return subs_.size();
}

size_t EventHub::watches() const {
  std::lock_guard lock(mu_);
  return by_wd_.size();
}

}  // namespace cohort::server
