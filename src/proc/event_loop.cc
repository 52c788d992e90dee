#include "proc/event_loop.h"

#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

namespace cohort::proc {

Result<std::unique_ptr<EventLoop>> EventLoop::create() {
  std::unique_ptr<EventLoop> loop(new EventLoop());
  loop->epoll_.reset(::epoll_create1(EPOLL_CLOEXEC));
  if (!loop->epoll_.valid()) return failErrno("epoll_create1");
  return loop;
}

Result<void> EventLoop::add(int fd, uint32_t events, Callback callback) {
  epoll_event ev{};
  ev.events = events;
  ev.data.fd = fd;
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) < 0) return failErrno("epoll_ctl add");
  callbacks_[fd] = std::make_shared<Callback>(std::move(callback));
  return {};
}

Result<void> EventLoop::modify(int fd, uint32_t events) {
  if (!callbacks_.count(fd)) return {};
  epoll_event ev{};
  ev.events = events;
  ev.data.fd = fd;
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, fd, &ev) < 0) return failErrno("epoll_ctl mod");
  return {};
}

void EventLoop::remove(int fd) {
  if (callbacks_.erase(fd)) ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, nullptr);
}

Result<void> EventLoop::run() {
  running_ = true;
  std::vector<epoll_event> events(256);
  while (running_) {
    int n = ::epoll_wait(epoll_.get(), events.data(), static_cast<int>(events.size()), -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      return failErrno("epoll_wait");
    }
    for (int i = 0; i < n && running_; ++i) {
      auto it = callbacks_.find(events[i].data.fd);
      if (it == callbacks_.end()) continue;  // removed by an earlier callback
      auto callback = it->second;            // keep alive while it runs
      (*callback)(events[i].events);
    }
  }
  return {};
}

Result<Timer> Timer::create() {
  Timer t;
  t.fd_.reset(::timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK));
  if (!t.fd_.valid()) return failErrno("timerfd_create");
  return t;
}

void Timer::arm(Millis after) {
  itimerspec spec{};
  int64_t ms = std::max<int64_t>(after.count(), 1);
  spec.it_value.tv_sec = ms / 1000;
  spec.it_value.tv_nsec = (ms % 1000) * 1000000;
  ::timerfd_settime(fd_.get(), 0, &spec, nullptr);
}

void Timer::disarm() {
  itimerspec spec{};
  ::timerfd_settime(fd_.get(), 0, &spec, nullptr);
}

void Timer::consume() {
  uint64_t count = 0;
  ssize_t n = ::read(fd_.get(), &count, sizeof count);
  (void)n;
}

Result<SignalFd> SignalFd::create(std::initializer_list<int> signals) {
  sigset_t set;
  sigemptyset(&set);
  for (int s : signals) sigaddset(&set, s);
  if (::sigprocmask(SIG_BLOCK, &set, nullptr) < 0) return failErrno("sigprocmask");
  SignalFd sfd;
  sfd.fd_.reset(::signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK));
  if (!sfd.fd_.valid()) return failErrno("signalfd");
  return sfd;
}

int SignalFd::next() {
  signalfd_siginfo info{};
  ssize_t n = ::read(fd_.get(), &info, sizeof info);
  if (n != sizeof info) return 0;
  return static_cast<int>(info.ssi_signo);
}

}  // namespace cohort::proc
