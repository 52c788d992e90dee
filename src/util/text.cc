#include "util/text.h"

#include <sys/random.h>

#include <cerrno>

#include <charconv>
#include <cstdio>
#include <ctime>

namespace cohort {

namespace {

// "'" + text + "'" + rest, built by appending: `"'" + std::string(text)` inserts at the front,
// which GCC 12's -Wrestrict misreads in optimised builds.
std::string quoted(std::string_view text, std::string_view rest) {
  std::string out;
  out.reserve(text.size() + rest.size() + 2);
  out += '\'';
  out += text;
  out += '\'';
  out += rest;
  return out;
}

// Reads a leading unsigned decimal (with optional fraction) from `text`.
bool readNumber(std::string_view& text, double& value) {
  size_t i = 0;
  while (i < text.size() && ((text[i] >= '0' && text[i] <= '9') || text[i] == '.')) ++i;
  if (i == 0) return false;
  std::string digits(text.substr(0, i));
  char* end = nullptr;
  value = std::strtod(digits.c_str(), &end);
  if (end != digits.c_str() + digits.size()) return false;
  text.remove_prefix(i);
  return true;
}

}  // namespace

Result<Millis> parseDuration(std::string_view text) {
  auto bad = [&] {
    return fail(Code::kInvalidArgument,
                quoted(text, " is not a duration (examples: 500ms, 30s, 15m, 2h, 1h30m)"));
  };
  std::string_view rest = text;
  if (rest.empty()) return bad();
  double total_ms = 0;
  bool bare = true;
  while (!rest.empty()) {
    double value = 0;
    if (!readNumber(rest, value)) return bad();
    size_t u = 0;
    while (u < rest.size() && rest[u] >= 'a' && rest[u] <= 'z') ++u;
    std::string_view unit = rest.substr(0, u);
    rest.remove_prefix(u);
    double scale = 0;
    if (unit.empty()) {
      if (!bare || !rest.empty()) return bad();
      scale = 1000;
    } else if (unit == "ms") {
      scale = 1;
    } else if (unit == "s") {
      scale = 1000;
    } else if (unit == "m") {
      scale = 60e3;
    } else if (unit == "h") {
      scale = 3600e3;
    } else if (unit == "d") {
      scale = 86400e3;
    } else {
      return bad();
    }
    bare = false;
    total_ms += value * scale;
    // Checked as it grows, so that the conversion below can never overflow.
    if (!(total_ms <= static_cast<double>(kMaxDuration.count()))) {
      return fail(Code::kInvalidArgument,
                  quoted(text, " is longer than " + std::to_string(kMaxDuration.count() / 86400000) +
                                   " days, the longest duration cohort takes"));
    }
  }
  return Millis(static_cast<int64_t>(total_ms + 0.5));
}

std::string formatSize(double bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  while (bytes >= 1024 && unit < 4) {
    bytes /= 1024;
    ++unit;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, unit == 0 || bytes >= 100 ? "%.0f %s" : "%.1f %s", bytes,
                kUnits[unit]);
  return buf;
}

std::string formatDuration(Millis d) {
  char buf[64];
  int64_t ms = d.count();
  if (ms < 60000) {
    std::snprintf(buf, sizeof buf, "%.1fs", static_cast<double>(ms) / 1000);
  } else if (ms < 3600000) {
    std::snprintf(buf, sizeof buf, "%lldm%02llds", static_cast<long long>(ms / 60000),
                  static_cast<long long>(ms / 1000 % 60));
  } else {
    std::snprintf(buf, sizeof buf, "%lldh%02lldm", static_cast<long long>(ms / 3600000),
                  static_cast<long long>(ms / 60000 % 60));
  }
  return buf;
}

Result<int64_t> parseBytes(std::string_view text) {
  auto bad = [&] {
    return fail(Code::kInvalidArgument,
                quoted(text, " is not a size (examples: 512Mi, 2Gi, 1G, 1000)"));
  };
  std::string_view rest = text;
  double value = 0;
  if (!readNumber(rest, value)) return bad();
  static const struct {
    const char* unit;
    double scale;
  } kUnits[] = {{"", 1},         {"k", 1e3},          {"K", 1e3},          {"M", 1e6},
                {"G", 1e9},      {"T", 1e12},         {"Ki", 1024.0},      {"Mi", 1048576.0},
                {"Gi", 1073741824.0}, {"Ti", 1099511627776.0}};
  for (const auto& u : kUnits) {
    if (rest != u.unit) continue;
    const double bytes = value * u.scale;
    if (!(bytes < 0x1p62)) {  // 4 EiB: any larger value would not fit in int64_t
      return fail(Code::kInvalidArgument, quoted(text, " is larger than 4 EiB"));
    }
    return static_cast<int64_t>(bytes);
  }
  return bad();
}

Result<std::set<int>> parseRankList(std::string_view text) {
  std::set<int> ranks;
  if (text == "all" || text.empty()) return ranks;
  for (const std::string& part : split(text, ',')) {
    auto dash = part.find('-');
    auto first = parseInt(part.substr(0, dash));
    auto last = dash == std::string::npos ? first : parseInt(part.substr(dash + 1));
    if (!first || !last || *first < 0 || *last < *first) {
      return fail(Code::kInvalidArgument,
                  quoted(text, " is not a rank list (examples: all, 0, 0,2-3)"));
    }
    if (*last > kMaxRankNumber) {
      return fail(Code::kInvalidArgument,
                  quoted(text, " names rank " + std::to_string(*last) + "; ranks go up to " +
                                   std::to_string(kMaxRankNumber)));
    }
    for (int r = *first; r <= *last; ++r) ranks.insert(r);
  }
  return ranks;
}

namespace {

template <typename Int>
Result<Int> parseInteger(std::string_view text) {
  Int value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec == std::errc::result_out_of_range && ptr == text.data() + text.size()) {
    return fail(Code::kInvalidArgument, quoted(text, " is out of range"));
  }
  if (ec != std::errc() || ptr != text.data() + text.size() || text.empty()) {
    return fail(Code::kInvalidArgument, quoted(text, " is not an integer"));
  }
  return value;
}

}  // namespace

std::string hexEncode(const unsigned char* data, size_t size) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(size * 2);
  for (size_t i = 0; i < size; ++i) {
    out += kHex[data[i] >> 4];
    out += kHex[data[i] & 15];
  }
  return out;
}

Result<std::string> randomHex(size_t bytes) {
  std::vector<unsigned char> data(bytes);
  size_t got = 0;
  while (got < bytes) {
    ssize_t n = ::getrandom(data.data() + got, bytes - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return failErrno("getrandom");
    got += static_cast<size_t>(n);
  }
  return hexEncode(data.data(), bytes);
}

Result<double> parseCpus(std::string_view text) {
  std::string_view rest = text;
  double value = 0;
  if (!readNumber(rest, value) || !rest.empty()) {
    return fail(Code::kInvalidArgument, quoted(text, " is not a number of CPUs (examples: 4, 0.5)"));
  }
  return value;
}

Result<int> parseInt(std::string_view text) { return parseInteger<int>(text); }
Result<int64_t> parseInt64(std::string_view text) { return parseInteger<int64_t>(text); }

bool validUtf8(std::string_view text) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const auto* end = p + text.size();
  while (p < end) {
    const unsigned c = *p;
    if (c < 0x80) {
      ++p;
      continue;
    }
    int more = 0;
    unsigned code = 0, min = 0;
    if ((c & 0xe0) == 0xc0) {
      more = 1, code = c & 0x1f, min = 0x80;
    } else if ((c & 0xf0) == 0xe0) {
      more = 2, code = c & 0x0f, min = 0x800;
    } else if ((c & 0xf8) == 0xf0) {
      more = 3, code = c & 0x07, min = 0x10000;
    } else {
      return false;
    }
    if (end - p <= more) return false;
    for (int i = 1; i <= more; ++i) {
      if ((p[i] & 0xc0) != 0x80) return false;
      code = (code << 6) | (p[i] & 0x3f);
    }
    if (code < min || code > 0x10ffff || (code >= 0xd800 && code <= 0xdfff)) return false;
    p += more + 1;
  }
  return true;
}

std::vector<std::string> split(std::string_view text, char sep) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (;;) {
    size_t pos = text.find(sep, start);
    parts.emplace_back(text.substr(start, pos - start));
    if (pos == std::string_view::npos) break;
    start = pos + 1;
  }
  return parts;
}

std::string join(const std::vector<std::string>& parts, std::string_view sep) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i) out += sep;
    out += parts[i];
  }
  return out;
}

bool startsWith(std::string_view text, std::string_view prefix) {
  return text.substr(0, prefix.size()) == prefix;
}

std::string_view trim(std::string_view s) {
  auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  return s;
}

std::string shellQuote(std::string_view word) {
  bool plain = !word.empty();
  for (char c : word) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              std::string_view("-_./=:,+@%").find(c) != std::string_view::npos;
    if (!ok) plain = false;
  }
  if (plain) return std::string(word);
  std::string out = "'";
  for (char c : word) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

int64_t nowUnixNanos() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

std::string isoTime(int64_t unix_nanos) {
  time_t secs = static_cast<time_t>(unix_nanos / 1000000000);
  tm utc{};
  gmtime_r(&secs, &utc);
  char buf[48];
  size_t n = std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &utc);
  std::snprintf(buf + n, sizeof buf - n, ".%03dZ", static_cast<int>(unix_nanos / 1000000 % 1000));
  return buf;
}

std::string urlEncode(std::string_view text, bool keep_slash) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : text) {
    bool keep = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                c == '-' || c == '_' || c == '.' || c == '~' || (keep_slash && c == '/');
    if (keep) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

Result<std::string> base64Decode(std::string_view text) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::string out;
  uint32_t bits = 0;
  int have = 0;
  bool padding = false;
  for (char c : text) {
    if (c == '\n' || c == '\r' || c == ' ' || c == '\t') continue;
    if (c == '=') {
      padding = true;
      continue;
    }
    const int v = value(c);
    if (v < 0 || padding) return fail(Code::kInvalidArgument, "not base64");
    bits = (bits << 6) | static_cast<uint32_t>(v);
    have += 6;
    if (have >= 8) {
      have -= 8;
      out += static_cast<char>((bits >> have) & 0xff);
    }
  }
  if (have >= 6) return fail(Code::kInvalidArgument, "not base64 (truncated)");
  return out;
}

}  // namespace cohort
