// Prometheus text-format metrics: a latency histogram and the server's counters, and the
// per-job gauges served to an admin (renderJobMetrics: pure). Histogram is thread-safe (one
// mutex; observations are a few additions).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

namespace cohort::server {

class Histogram {
 public:
  static constexpr std::array<double, 14> kBounds = {
      0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5};
  void observe(double seconds);
  // The histogram's lines for metric `name` with `labels` ("" or `route="/v1/jobs"`).
  std::string render(const std::string& name, const std::string& labels) const;

 private:
  mutable std::mutex mu_;
  std::array<int64_t, kBounds.size()> counts_{};
  int64_t count_ = 0;
  double sum_ = 0;
};

// API request counts and latencies, by method, route pattern and status.
class HttpMetrics {
 public:
  void record(const std::string& method, const std::string& route, int status, double seconds);
  std::string render() const;

 private:
  mutable std::mutex mu_;
  std::map<std::tuple<std::string, std::string, int>, int64_t> requests_;
  std::map<std::string, Histogram> latency_;  // by route
};

// A label value as the Prometheus text format wants it between double quotes: backslash,
// double quote and newline escaped; other control characters and bytes that are not UTF-8
// replaced by '?', so that no job name, however hostile, can end a line or a label early.
std::string escapeLabelValue(std::string_view value);

// What the per-job exposition shows of one job: who it is, and its ranks' latest samples.
struct JobSeries {
  std::string id, name, account, state;
  struct Rank {
    std::string role;
    int rank = 0;
    int node = 0;
    std::optional<double> cpu_seconds;
    std::optional<int64_t> rss_bytes;
    std::optional<double> gpu_util;  // percent
    std::optional<int64_t> gpu_memory_bytes;
  };
  std::vector<Rank> ranks;
};

// The per-job gauges in the text format: cohort_job_info for each job (labels job_id, job_name,
// account, state), and for each rank with a sample cohort_rank_cpu_seconds_total,
// cohort_rank_resident_memory_bytes, cohort_rank_gpu_utilization_percent and
// cohort_rank_gpu_memory_bytes (the job's labels and role, rank, node). At most `max_series`
// sample lines; cohort_job_series_dropped says how many more there were.
std::string renderJobMetrics(const std::vector<JobSeries>& jobs, size_t max_series);

}  // namespace cohort::server
