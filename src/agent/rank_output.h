// What happens to a rank's output: the node agent ships every byte to the coordinator, which
// appends it to the rank's own log file (LogFile); on the agent, whole lines go, prefixed
// "[role/rank nodeN] ", to the merged console stream, and the last few KiB are kept for the
// root-cause report (RankOutput). The console is written by its own thread through a bounded
// queue, so a slow terminal never blocks a rank (lines that do not fit are counted and reported
// as dropped; the log files always have everything). The thread starts with the first write: a
// process that has written nothing yet has no other thread (the coordinator forks its agents).
// RankOutput and LogFile are used by one thread only; Console is thread-safe.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "util/fd.h"
#include "util/result.h"

namespace cohort::agent {

class Console {
 public:
  explicit Console(int fd, size_t max_pending = 16u << 20);
  ~Console() { close(); }

  // Writes what is queued (and the note of lines dropped, if any), then stops the thread: every
  // line is out when it returns. A later write starts it again.
  void close();
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
  // `console` may be null: nothing is echoed. `on_line`, when given, sees every whole line
  // (without its newline; a line longer than 64 KiB in pieces), echoed or not.
  RankOutput(std::string prefix, Console* console,
             std::function<void(std::string_view)> on_line = nullptr)
      : prefix_(std::move(prefix)), console_(console), on_line_(std::move(on_line)) {}

  // Handles a chunk read from the rank's pipe.
  void consume(const char* data, size_t size);
  // Flushes a last line without a newline (at end of output).
  void finish();
  // The last `max_lines` lines of output.
  std::vector<std::string> tail(size_t max_lines) const;

 private:
  void emitLines(const char* data, size_t size);

  std::string prefix_;
  Console* console_ = nullptr;
  std::function<void(std::string_view)> on_line_;
  std::string partial_;
  std::string tail_;
};

// The output of a launcher that tees its ranks' lines into its own, each prefixed
// "[<name><i>]:" (torchrun's --tee, with its role's name): each line, "\n" included, goes to
// `on_rank(i, text)` without the prefix when i is one of its `ranks`, else to `on_own(line)`.
// A marker inside a rank's line starts a piece of that marker's rank (torchrun writes a line a
// rank has not ended yet, then the rest after another marker): on_rank gets pieces, not always
// whole lines. A line longer than kMaxPiece goes in pieces, all of them where its first went.
class TeeSplitter {
 public:
  static constexpr size_t kMaxPiece = 64 * 1024;

  TeeSplitter(std::string name, size_t ranks,
              std::function<void(size_t, std::string_view)> on_rank,
              std::function<void(std::string_view)> on_own)
      : name_(std::move(name)),
        ranks_(ranks),
        on_rank_(std::move(on_rank)),
        on_own_(std::move(on_own)) {}

  // Handles a chunk of the launcher's output.
  void consume(std::string_view bytes);
  // Hands on a last line without a newline (at end of output).
  void finish();

 private:
  void emit(bool line_ends);
  std::optional<std::pair<size_t, size_t>> markerAt(std::string_view text, size_t at) const;

  std::string name_;
  size_t ranks_;
  std::function<void(size_t, std::string_view)> on_rank_;
  std::function<void(std::string_view)> on_own_;
  std::string partial_;
  bool continuing_ = false;  // partial_ continues a line whose first piece went to `to_`
  int64_t to_ = -1;          // that piece's rank, or -1: the launcher's own
};

// A rank's log file, appended to. Never follows a link at its name. A write that fails is said
// once on stderr (the rest of the job goes on).
class LogFile {
 public:
  static Result<LogFile> open(const std::string& path);
  void append(std::string_view data);

 private:
  UniqueFd fd_;
  std::string path_;
  bool failed_ = false;
};

}  // namespace cohort::agent
