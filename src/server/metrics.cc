#include "server/metrics.h"

#include <cstdio>

namespace cohort::server {

namespace {

std::string number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

std::string withLabels(const std::string& labels, const std::string& more) {
  if (labels.empty()) return "{" + more + "}";
  return "{" + labels + "," + more + "}";
}

}  // namespace

void Histogram::observe(double seconds) {
  std::lock_guard lock(mu_);
  for (size_t i = 0; i < kBounds.size(); ++i) {
    if (seconds <= kBounds[i]) ++counts_[i];
  }
  ++count_;
  sum_ += seconds;
}

std::string Histogram::render(const std::string& name, const std::string& labels) const {
  std::lock_guard lock(mu_);
  std::string out;
  for (size_t i = 0; i < kBounds.size(); ++i) {
    out += name + "_bucket" + withLabels(labels, "le=\"" + number(kBounds[i]) + "\"") + " " +
           std::to_string(counts_[i]) + "\n";
  }
  out += name + "_bucket" + withLabels(labels, "le=\"+Inf\"") + " " + std::to_string(count_) + "\n";
  std::string plain = labels.empty() ? "" : "{" + labels + "}";
  out += name + "_sum" + plain + " " + number(sum_) + "\n";
  out += name + "_count" + plain + " " + std::to_string(count_) + "\n";
  return out;
}

void HttpMetrics::record(const std::string& method, const std::string& route, int status,
                         double seconds) {
  {
    std::lock_guard lock(mu_);
    ++requests_[{method, route, status}];
  }
  Histogram* h;
  {
    std::lock_guard lock(mu_);
    h = &latency_[route];  // std::map nodes never move
  }
  h->observe(seconds);
}

std::string HttpMetrics::render() const {
  std::lock_guard lock(mu_);
  std::string out =
      "# HELP cohort_http_requests_total API requests by method, route and status.\n"
      "# TYPE cohort_http_requests_total counter\n";
  for (const auto& [key, n] : requests_) {
    const auto& [method, route, status] = key;
    out += "cohort_http_requests_total{method=\"" + method + "\",route=\"" + route +
           "\",status=\"" + std::to_string(status) + "\"} " + std::to_string(n) + "\n";
  }
  out +=
      "# HELP cohort_http_request_duration_seconds API request latency by route.\n"
      "# TYPE cohort_http_request_duration_seconds histogram\n";
  for (const auto& [route, h] : latency_) {
    out += h.render("cohort_http_request_duration_seconds", "route=\"" + route + "\"");
  }
  return out;
}

}  // namespace cohort::server
