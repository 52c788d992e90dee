// GPU use per rank, from nvidia-smi: each GPU's utilisation and memory
// (`--query-gpu=index,uuid,utilization.gpu,memory.used,memory.total`) and each process's memory on
// it (`--query-compute-apps=pid,gpu_uuid,used_memory`), mapped to ranks by process group (a rank
// and what it starts). The parsers are pure and take what nvidia-smi printed as untrusted text.
// GpuSampler runs nvidia-smi from the agent's loop thread without ever waiting for it: a query
// is started, its output and exit come through the loop, one that runs over its deadline is
// killed at the next poll, and where nvidia-smi is not on PATH (looked up once) or keeps failing
// the sampler does nothing. Not thread-safe: it belongs to the loop thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "proc/event_loop.h"
#include "proc/spawn.h"
#include "util/fd.h"
#include "util/text.h"

namespace cohort::agent {

struct GpuDevice {
  int index = 0;
  std::string uuid;
  double utilization = 0;  // percent
  int64_t memory_used_bytes = 0;
  int64_t memory_total_bytes = 0;
};

struct GpuProcess {
  pid_t pid = 0;
  std::string uuid;  // of the GPU it uses
  int64_t memory_bytes = 0;
};

// Lines of `--format=csv,noheader,nounits` output; a line that is not one record ("[N/A]",
// "[Not Supported]", an error message) is skipped. At most 4,096 records.
std::vector<GpuDevice> parseGpuDevices(std::string_view csv);
std::vector<GpuProcess> parseGpuProcesses(std::string_view csv);

// What one rank uses: its processes' memory on every GPU together, and the utilisation of the
// busiest GPU it is on (nvidia-smi gives no per-process utilisation).
struct RankGpu {
  double utilization = 0;
  int64_t memory_bytes = 0;
};

// By process group leader (`group_of` maps each pid of the node's ranks to its group).
std::map<pid_t, RankGpu> gpuUseByGroup(const std::vector<GpuDevice>& devices,
                                       const std::vector<GpuProcess>& processes,
                                       const std::map<pid_t, pid_t>& group_of);

class GpuSampler {
 public:
  static constexpr Millis kDeadline{5000};  // one query; nvidia-smi can hang on a sick driver
  static constexpr int kFailuresToGiveUp = 3;

  // Looks nvidia-smi up on `path` (a PATH value) once. `on_reaped` runs on the loop after each
  // nvidia-smi process it started was reaped (the agent reaps the orphans it held back then).
  GpuSampler(proc::EventLoop& loop, const std::string& path, std::function<void()> on_reaped);
  ~GpuSampler();
  GpuSampler(const GpuSampler&) = delete;
  GpuSampler& operator=(const GpuSampler&) = delete;

  bool available() const { return !program_.empty(); }
  // Starts a pair of queries if none runs; kills one past kDeadline. Returns at once.
  void poll();
  // The latest complete pair of answers, if any.
  const std::optional<std::pair<std::vector<GpuDevice>, std::vector<GpuProcess>>>& latest() const {
    return latest_;
  }
  // Whether `pid` is an nvidia-smi this sampler started and has not reaped yet.
  bool owns(pid_t pid) const { return query_ && query_->child.pid == pid; }

 private:
  struct Query {
    int stage = 0;  // 0: devices, 1: processes
    proc::Child child;
    UniqueFd out;
    std::string text;
    bool exited = false;
    bool ok = false;
    std::chrono::steady_clock::time_point started;
  };
  void start(int stage);
  void onOutput();
  void onExit();
  void finishIfDone();
  void failed(const std::string& why);

  proc::EventLoop& loop_;
  std::string program_;  // empty: none, or given up
  std::function<void()> on_reaped_;
  std::optional<Query> query_;
  std::string devices_text_;
  int failures_ = 0;
  std::optional<std::pair<std::vector<GpuDevice>, std::vector<GpuProcess>>> latest_;
};

}  // namespace cohort::agent
