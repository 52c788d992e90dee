// Prometheus text-format metrics: a latency histogram and the server's counters. Histogram is
// thread-safe (one mutex; observations are a few additions).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

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

}  // namespace cohort::server
