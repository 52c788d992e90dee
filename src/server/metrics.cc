#include "server/metrics.h"

#include <cmath>
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

namespace {

// The length of the UTF-8 sequence at `at`, or 0 when it is not one.
size_t utf8Length(std::string_view s, size_t at) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char c = byte(at);
  const size_t n = c >= 0xF0 && c <= 0xF4  ? 4
                   : c >= 0xE0 && c < 0xF0 ? 3
                   : c >= 0xC2 && c < 0xE0 ? 2
                                           : 0;
  if (n == 0 || at + n > s.size()) return 0;
  for (size_t i = 1; i < n; ++i) {
    if ((byte(at + i) & 0xC0) != 0x80) return 0;
  }
  const unsigned char next = byte(at + 1);
  if ((c == 0xE0 && next < 0xA0) || (c == 0xED && next >= 0xA0) || (c == 0xF0 && next < 0x90) ||
      (c == 0xF4 && next >= 0x90)) {
    return 0;  // overlong, a surrogate, or past U+10FFFF
  }
  return n;
}

// Bytes as the whole numbers they are (%.9g would round a GiB), other values as number() does.
std::string sampleValue(double v) {
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.0f", v);
    return buf;
  }
  return number(v);
}

}  // namespace

std::string escapeLabelValue(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (size_t i = 0; i < value.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(value[i]);
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c < 0x20 || c == 0x7F) {
      out += '?';
    } else if (c < 0x80) {
      out += static_cast<char>(c);
    } else if (size_t n = utf8Length(value, i); n > 0) {
      out.append(value.substr(i, n));
      i += n - 1;
    } else {
      out += '?';
    }
  }
  return out;
}

std::string renderJobMetrics(const std::vector<JobSeries>& jobs, size_t max_series) {
  struct Family {
    const char* name;
    const char* type;
    const char* help;
  };
  static constexpr Family kInfo = {
      "cohort_job_info", "gauge",
      "A job that runs or ended lately (1), by id, name, account and state."};
  static constexpr Family kRanks[] = {
      {"cohort_rank_cpu_seconds_total", "counter", "CPU time of a rank's processes."},
      {"cohort_rank_resident_memory_bytes", "gauge", "Resident memory of a rank's processes."},
      {"cohort_rank_gpu_utilization_percent", "gauge",
       "Utilisation of the busiest GPU a rank's processes are on."},
      {"cohort_rank_gpu_memory_bytes", "gauge", "GPU memory a rank's processes hold."},
  };
  auto header = [](const Family& f) {
    return std::string("# HELP ") + f.name + " " + f.help + "\n# TYPE " + f.name + " " + f.type +
           "\n";
  };
  auto jobLabels = [](const JobSeries& j) {
    return "job_id=\"" + escapeLabelValue(j.id) + "\",job_name=\"" + escapeLabelValue(j.name) +
           "\",account=\"" + escapeLabelValue(j.account) + "\"";
  };
  size_t series = 0;
  int64_t dropped = 0;
  std::string out = header(kInfo);
  for (const JobSeries& j : jobs) {
    if (series == max_series) {
      ++dropped;
      continue;
    }
    ++series;
    out += std::string(kInfo.name) + "{" + jobLabels(j) + ",state=\"" + escapeLabelValue(j.state) +
           "\"} 1\n";
  }
  for (size_t f = 0; f < std::size(kRanks); ++f) {
    std::string lines;
    for (const JobSeries& j : jobs) {
      const std::string labels = jobLabels(j);
      for (const JobSeries::Rank& r : j.ranks) {
        std::optional<double> value;
        if (f == 0 && r.cpu_seconds) value = *r.cpu_seconds;
        if (f == 1 && r.rss_bytes) value = static_cast<double>(*r.rss_bytes);
        if (f == 2 && r.gpu_util) value = *r.gpu_util;
        if (f == 3 && r.gpu_memory_bytes) value = static_cast<double>(*r.gpu_memory_bytes);
        if (!value) continue;
        if (series == max_series) {
          ++dropped;
          continue;
        }
        ++series;
        lines += std::string(kRanks[f].name) + "{" + labels + ",role=\"" +
                 escapeLabelValue(r.role) + "\",rank=\"" + std::to_string(r.rank) + "\",node=\"" +
                 std::to_string(r.node) + "\"} " + sampleValue(*value) + "\n";
      }
    }
    if (!lines.empty()) out += header(kRanks[f]) + lines;
  }
  out +=
      "# HELP cohort_job_series_dropped Per-job series left out: over the cap on series.\n"
      "# TYPE cohort_job_series_dropped gauge\n"
      "cohort_job_series_dropped " +
      std::to_string(dropped) + "\n";
  return out;
}

}  // namespace cohort::server
