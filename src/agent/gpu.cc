#include "agent/gpu.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>

namespace cohort::agent {

namespace {

constexpr size_t kMaxRecords = 4096;
constexpr size_t kMaxOutput = 1 << 20;
constexpr int64_t kMiB = 1 << 20;

// The comma-separated fields of one line, without the spaces around them.
std::vector<std::string> fields(std::string_view line) {
  std::vector<std::string> out;
  for (std::string& f : split(line, ',')) {
    const size_t from = f.find_first_not_of(" \t\r");
    const size_t to = f.find_last_not_of(" \t\r");
    out.push_back(from == std::string::npos ? "" : f.substr(from, to - from + 1));
  }
  return out;
}

std::optional<int64_t> wholeNumber(const std::string& text) {
  if (text.empty() || text.size() > 18) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || *end != 0 || v < 0) return std::nullopt;
  return v;
}

std::optional<double> percent(const std::string& text) {
  if (text.empty() || text.size() > 32) return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (*end != 0 || !(v >= 0 && v <= 100)) return std::nullopt;
  return v;
}

bool plainUuid(const std::string& text) {
  return !text.empty() && text.size() <= 128 && std::all_of(text.begin(), text.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-';
  });
}

}  // namespace

std::vector<GpuDevice> parseGpuDevices(std::string_view csv) {
  std::vector<GpuDevice> out;
  for (const std::string& line : split(csv, '\n')) {
    if (out.size() == kMaxRecords) break;
    const std::vector<std::string> f = fields(line);
    if (f.size() != 5) continue;
    auto index = wholeNumber(f[0]);
    auto util = percent(f[2]);
    auto used = wholeNumber(f[3]);
    auto total = wholeNumber(f[4]);
    if (!index || !plainUuid(f[1]) || !util || !used || !total || *index > 65535) continue;
    out.push_back({static_cast<int>(*index), f[1], *util, *used * kMiB, *total * kMiB});
  }
  return out;
}

std::vector<GpuProcess> parseGpuProcesses(std::string_view csv) {
  std::vector<GpuProcess> out;
  for (const std::string& line : split(csv, '\n')) {
    if (out.size() == kMaxRecords) break;
    const std::vector<std::string> f = fields(line);
    if (f.size() != 3) continue;
    auto pid = wholeNumber(f[0]);
    auto used = wholeNumber(f[2]);
    if (!pid || *pid <= 0 || *pid > (1 << 30) || !plainUuid(f[1]) || !used) continue;
    out.push_back({static_cast<pid_t>(*pid), f[1], *used * kMiB});
  }
  return out;
}

std::map<pid_t, RankGpu> gpuUseByGroup(const std::vector<GpuDevice>& devices,
                                       const std::vector<GpuProcess>& processes,
                                       const std::map<pid_t, pid_t>& group_of) {
  std::map<std::string, double> utilization;
  for (const GpuDevice& d : devices) utilization[d.uuid] = d.utilization;
  std::map<pid_t, RankGpu> out;
  for (const GpuProcess& p : processes) {
    auto group = group_of.find(p.pid);
    if (group == group_of.end()) continue;  // not one of this node's ranks
    RankGpu& use = out[group->second];
    use.memory_bytes += p.memory_bytes;
    if (auto u = utilization.find(p.uuid); u != utilization.end()) {
      use.utilization = std::max(use.utilization, u->second);
    }
  }
  return out;
}

GpuSampler::GpuSampler(proc::EventLoop& loop, const std::string& path,
                       std::function<void()> on_reaped)
    : loop_(loop), on_reaped_(std::move(on_reaped)) {
  if (auto found = proc::findProgram("nvidia-smi", path, "/")) program_ = *found;
}

GpuSampler::~GpuSampler() {
  if (!query_) return;
  if (query_->out.valid()) loop_.remove(query_->out.get());
  if (query_->child.pidfd.valid()) {
    loop_.remove(query_->child.pidfd.get());
    ::kill(-query_->child.pid, SIGKILL);
    (void)proc::reap(query_->child.pidfd.get());
  }
}

void GpuSampler::poll() {
  if (program_.empty()) return;
  if (!query_) {
    start(0);
    return;
  }
  if (std::chrono::steady_clock::now() - query_->started < kDeadline) return;
  // Past its deadline: the query's whole process group goes (a wrapper's children too).
  ::kill(-query_->child.pid, SIGKILL);
  if (query_->exited) {  // something it started keeps the pipe open
    loop_.remove(query_->out.get());
    query_->out.reset();
    query_->ok = false;
    finishIfDone();
  }
}

void GpuSampler::start(int stage) {
  Query q;
  q.stage = stage;
  q.started = std::chrono::steady_clock::now();
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) < 0) {
    failed("pipe2 failed");
    return;
  }
  UniqueFd write_end(fds[1]);
  q.out.reset(fds[0]);
  proc::SpawnRequest req;
  req.argv = {program_,
              stage == 0 ? "--query-gpu=index,uuid,utilization.gpu,memory.used,memory.total"
                         : "--query-compute-apps=pid,gpu_uuid,used_memory",
              "--format=csv,noheader,nounits"};
  req.env = {"PATH=/usr/local/bin:/usr/bin:/bin"};
  req.cwd = "/";
  req.stdout_fd = write_end.get();
  auto child = proc::spawn(req);
  if (!child) {
    failed(child.error().message);
    return;
  }
  q.child = std::move(*child);
  query_ = std::move(q);
  auto watched = loop_.add(query_->out.get(), EPOLLIN, [this](uint32_t) { onOutput(); });
  if (watched) {
    watched = loop_.add(query_->child.pidfd.get(), EPOLLIN, [this](uint32_t) { onExit(); });
    if (!watched) loop_.remove(query_->out.get());
  }
  if (!watched) {
    ::kill(-query_->child.pid, SIGKILL);
    (void)proc::reap(query_->child.pidfd.get());
    failed(watched.error().message);
  }
}

void GpuSampler::onOutput() {
  if (!query_ || !query_->out.valid()) return;
  char buf[16384];
  for (;;) {
    const ssize_t n = ::read(query_->out.get(), buf, sizeof buf);
    if (n > 0) {
      if (query_->text.size() < kMaxOutput) query_->text.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    loop_.remove(query_->out.get());  // end of output, or a read error
    query_->out.reset();
    finishIfDone();
    return;
  }
}

void GpuSampler::onExit() {
  if (!query_ || !query_->child.pidfd.valid()) return;
  loop_.remove(query_->child.pidfd.get());
  auto status = proc::reap(query_->child.pidfd.get());
  query_->child.pidfd.reset();
  query_->exited = true;
  query_->ok = status && status->shellCode() == 0;
  if (!query_->ok) query_->text = status ? status->describe() : status.error().message;
  finishIfDone();
  if (on_reaped_) on_reaped_();
}

void GpuSampler::finishIfDone() {
  if (!query_ || !query_->exited || query_->out.valid()) return;
  if (!query_->ok) {
    std::string why = query_->text.substr(0, query_->text.find('\n'));
    query_.reset();
    failed(why.substr(0, 200));
    return;
  }
  const int stage = query_->stage;
  std::string text = std::move(query_->text);
  query_.reset();
  if (stage == 0) {
    devices_text_ = std::move(text);
    start(1);
    return;
  }
  latest_.emplace(parseGpuDevices(devices_text_), parseGpuProcesses(text));
  failures_ = 0;
}

void GpuSampler::failed(const std::string& why) {
  query_.reset();
  if (++failures_ < kFailuresToGiveUp) return;
  std::fprintf(stderr,
               "cohort exec: '%s' failed %d times in a row (%s): no GPU samples from now on\n",
               program_.c_str(), failures_, why.c_str());
  program_.clear();
  latest_.reset();
}

}  // namespace cohort::agent
