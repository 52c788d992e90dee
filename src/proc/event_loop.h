// EventLoop: one epoll set that calls a callback when a file descriptor is ready. The node agent
// and the coordinator each run one on their main thread, over pidfds, a signalfd, timerfds,
// sockets and the ranks' output pipes; nothing polls. Timer wraps a timerfd, SignalFd a signalfd.
// Single-threaded: every method must be called from the loop's thread.
#pragma once

#include <signal.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <unordered_map>

#include "util/fd.h"
#include "util/result.h"
#include "util/text.h"

namespace cohort::proc {

class EventLoop {
 public:
  using Callback = std::function<void(uint32_t events)>;

  static Result<std::unique_ptr<EventLoop>> create();

  // Watches `fd` (not owned) for `events` (EPOLLIN, ...). The callback may add or remove fds.
  Result<void> add(int fd, uint32_t events, Callback callback);
  // Watches an added `fd` for `events` instead (EPOLLIN | EPOLLOUT while a socket has bytes to
  // write, say); nothing for an fd not added. Errors: kIo from epoll_ctl.
  Result<void> modify(int fd, uint32_t events);
  void remove(int fd);

  // Runs until quit() is called. Errors: kIo when epoll_wait fails.
  Result<void> run();
  void quit() { running_ = false; }

 private:
  EventLoop() = default;
  UniqueFd epoll_;
  std::unordered_map<int, std::shared_ptr<Callback>> callbacks_;
  bool running_ = false;
};

// A one-shot monotonic timer on a timerfd.
class Timer {
 public:
  static Result<Timer> create();
  void arm(Millis after);
  void disarm();
  int fd() const { return fd_.get(); }
  void consume();  // read the expiry count after the fd became readable

 private:
  UniqueFd fd_;
};

// Blocks `signals` for the whole process (call before any thread starts) and reads them from a
// signalfd.
class SignalFd {
 public:
  static Result<SignalFd> create(std::initializer_list<int> signals);
  int fd() const { return fd_.get(); }
  // The next pending signal number, or 0 when none.
  int next();

 private:
  UniqueFd fd_;
};

}  // namespace cohort::proc
