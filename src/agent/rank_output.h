// What happens to a rank's output: every byte goes to the rank's own log file; whole lines go,
// prefixed "[role/rank nodeN] ", to the merged console stream; the last few KiB are kept for the
// root-cause report. The console is written by its own thread through a bounded queue, so a
// slow terminal never blocks a rank (lines that do not fit are counted and reported as dropped;
// the log files always have everything).
// RankOutput is used by the loop thread only; Console is thread-safe.
#pragma once

#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "util/fd.h"
#include "util/result.h"

namespace cohort::agent {

class Console {
 public:
  explicit Console(int fd, size_t max_pending = 16u << 20);
  ~Console();  // writes what is queued, then stops the thread
  Console(const Console&) = delete;
  Console& operator=(const Console&) = delete;

  // Queues whole lines. Never blocks for long.
  void write(std::string text);

 private:
  void loop();
  void takeDropNotice();  // with mu_ held: queue the note about dropped lines, if any

  int fd_;
  size_t max_pending_;
  size_t atomic_limit_;  // 0: every write is atomic
  std::mutex mu_;
  std::condition_variable cv_;
  std::string pending_;
  size_t dropped_lines_ = 0;
  bool stop_ = false;
  std::thread thread_;
};

class RankOutput {
 public:
  // Opens (appends to) `log_file`. `console` may be null: nothing is echoed.
  static Result<RankOutput> open(const std::string& log_file, std::string prefix,
                                 Console* console);

  // Handles a chunk read from the rank's pipe.
  void consume(const char* data, size_t size);
  // Flushes a last line without a newline (at end of output).
  void finish();
  // The last `max_lines` lines of output.
  std::vector<std::string> tail(size_t max_lines) const;

 private:
  void emitLines(const char* data, size_t size);

  UniqueFd log_;
  std::string log_file_;
  bool log_failed_ = false;
  std::string prefix_;
  Console* console_ = nullptr;
  std::string partial_;
  std::string tail_;
};

}  // namespace cohort::agent
