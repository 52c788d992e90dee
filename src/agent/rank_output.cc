#include "agent/rank_output.h"

#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace cohort::agent {

namespace {
constexpr size_t kTailBytes = 8192;
// Longer lines are cut into pieces of this size on the console, so that a prefixed line always
// fits in one atomic pipe write (PIPE_BUF) and agents sharing a console never interleave.
constexpr size_t kMaxLine = PIPE_BUF - 256;
}  // namespace

Console::Console(int fd, size_t max_pending)
    : fd_(fd), max_pending_(max_pending), atomic_limit_(0), thread_() {
  // Several agents may share one console. Writes to a regular file or a terminal are atomic
  // whatever their size; writes to a pipe or socket only up to PIPE_BUF: cut at line ends there.
  struct stat st{};
  if (::fstat(fd, &st) == 0 && (S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode))) {
    atomic_limit_ = PIPE_BUF;
  }
}

void Console::close() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!thread_.joinable()) return;  // nothing was ever written, or dropped
    stop_ = true;
    takeDropNotice();  // lines dropped at the very end are reported too
  }
  cv_.notify_one();
  thread_.join();
  stop_ = false;
}

void Console::write(std::string text) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
    if (pending_.size() + text.size() > max_pending_) {
      dropped_lines_ += static_cast<size_t>(std::count(text.begin(), text.end(), '\n'));
      return;
    }
    takeDropNotice();
    if (pending_.empty()) {
      pending_ = std::move(text);
    } else {
      pending_ += text;
    }
  }
  cv_.notify_one();
}

void Console::takeDropNotice() {
  if (!dropped_lines_) return;
  pending_ += "[cohort] " + std::to_string(dropped_lines_) +
              " lines were not shown here because the console was slow; the rank log files "
              "have them\n";
  dropped_lines_ = 0;
}

void Console::loop() {
  std::string batch;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stop_ || !pending_.empty(); });
      if (pending_.empty() && stop_) return;
      batch.swap(pending_);
    }
    // A closed console only loses the echo, never the logs.
    std::string_view rest = batch;
    while (!rest.empty()) {
      size_t n = rest.size();
      if (atomic_limit_ && n > atomic_limit_) {
        size_t nl = rest.rfind('\n', atomic_limit_ - 1);
        n = nl == std::string_view::npos ? atomic_limit_ : nl + 1;
      }
      if (!writeAll(fd_, rest.substr(0, n))) break;
      rest.remove_prefix(n);
    }
    batch.clear();
  }
}

void RankOutput::consume(const char* data, size_t size) {
  tail_.append(data, size);
  if (tail_.size() > 2 * kTailBytes) tail_.erase(0, tail_.size() - kTailBytes);
  if (console_ || on_line_) emitLines(data, size);
}

Result<LogFile> LogFile::open(const std::string& path) {
  LogFile log;
  log.fd_.reset(
      ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0644));
  if (!log.fd_.valid()) return failErrno("open log file '" + path + "'");
  log.path_ = path;
  return log;
}

void LogFile::append(std::string_view data) {
  if (auto written = writeAll(fd_.get(), data); !written && !failed_) {
    // Say it once, loudly; the console echo and the root-cause tail still work.
    failed_ = true;
    std::fprintf(stderr, "cohort: writing %s: %s; this rank's log file is incomplete\n",
                 path_.c_str(), written.error().message.c_str());
  }
}

void RankOutput::emitLines(const char* data, size_t size) {
  std::string out;
  auto emit = [&](std::string_view line) {  // in pieces of at most kMaxLine, each prefixed
    do {
      std::string_view piece = line.substr(0, kMaxLine);
      if (on_line_) on_line_(piece);
      if (console_) {
        out += prefix_;
        out.append(piece);
        out += '\n';
      }
      line.remove_prefix(piece.size());
    } while (!line.empty());
  };
  const char* end = data + size;
  const char* line = data;
  for (const char* nl; (nl = static_cast<const char*>(std::memchr(line, '\n', end - line)));
       line = nl + 1) {
    if (partial_.empty()) {
      emit(std::string_view(line, nl - line));
    } else {
      partial_.append(line, nl);
      emit(partial_);
      partial_.clear();
    }
  }
  partial_.append(line, end);
  if (partial_.size() >= kMaxLine) {
    std::string_view whole(partial_);
    size_t keep = partial_.size() % kMaxLine;
    emit(whole.substr(0, partial_.size() - keep));
    partial_.erase(0, partial_.size() - keep);
  }
  if (!out.empty() && console_) console_->write(std::move(out));
}

void RankOutput::finish() {
  if (partial_.empty()) return;
  if (on_line_) on_line_(partial_);
  if (console_) console_->write(prefix_ + partial_ + "\n");
  partial_.clear();
}

void TeeSplitter::consume(std::string_view bytes) {
  while (!bytes.empty()) {
    const size_t nl = bytes.find('\n');
    const size_t take = nl == std::string_view::npos ? bytes.size() : nl + 1;
    partial_.append(bytes.substr(0, take));
    bytes.remove_prefix(take);
    if (nl != std::string_view::npos) {
      emit(true);
    } else if (partial_.size() >= kMaxPiece) {
      emit(false);
    }
  }
}

void TeeSplitter::finish() {
  if (!partial_.empty()) emit(true);
  continuing_ = false;
}

// "[" name digits "]:" at `at`, its index one of the ranks: that index and the marker's length.
std::optional<std::pair<size_t, size_t>> TeeSplitter::markerAt(std::string_view text,
                                                               size_t at) const {
  const size_t digits = at + 1 + name_.size();
  if (text.size() <= digits || text[at] != '[' || text.substr(at + 1, name_.size()) != name_) {
    return std::nullopt;
  }
  size_t end = digits;
  size_t index = 0;
  while (end < text.size() && end - digits < 6 && text[end] >= '0' && text[end] <= '9') {
    index = index * 10 + static_cast<size_t>(text[end] - '0');
    ++end;
  }
  if (end == digits || text.substr(end, 2) != "]:" || index >= ranks_) return std::nullopt;
  return std::make_pair(index, end + 2 - at);
}

void TeeSplitter::emit(bool line_ends) {
  std::string_view text = partial_;
  if (!continuing_) {
    to_ = -1;
    if (auto marker = markerAt(text, 0)) {
      to_ = static_cast<int64_t>(marker->first);
      text.remove_prefix(marker->second);
    }
  }
  if (to_ < 0) {
    on_own_(text);
  } else {
    // torchrun's tee reads each rank's log a line at a time and writes what it read with the
    // marker in front, also a line the rank has not ended yet (Python's print writes the text
    // and its newline apart), so one line of torchrun's can hold a piece of one rank's line
    // and then another marker with the rest of it, or another rank's line. Each piece goes to
    // its rank, whose output joins the pieces into lines.
    for (size_t from = 0, at = 0;; ++at) {
      at = text.find('[', at);
      std::optional<std::pair<size_t, size_t>> next;
      if (at != std::string_view::npos) next = markerAt(text, at);
      if (at == std::string_view::npos || next) {
        const size_t end = at == std::string_view::npos ? text.size() : at;
        if (end > from) on_rank_(static_cast<size_t>(to_), text.substr(from, end - from));
        if (!next) break;
        to_ = static_cast<int64_t>(next->first);
        from = at + next->second;
        at = from - 1;
      }
    }
  }
  continuing_ = !line_ends;
  partial_.clear();
}

std::vector<std::string> RankOutput::tail(size_t max_lines) const {
  std::vector<std::string> lines;
  size_t end = tail_.size();
  if (end && tail_[end - 1] == '\n') --end;
  while (lines.size() < max_lines && end > 0) {
    size_t start = tail_.rfind('\n', end - 1);
    start = start == std::string::npos ? 0 : start + 1;
    lines.push_back(tail_.substr(start, end - start));
    if (start == 0) break;
    end = start - 1;
  }
  std::reverse(lines.begin(), lines.end());
  return lines;
}

}  // namespace cohort::agent
