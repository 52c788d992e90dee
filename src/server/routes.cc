#include "server/routes.h"

#include <cstdio>
#include <cstdlib>

namespace cohort::server {

namespace {

[[noreturn]] void badPattern(std::string_view pattern, const char* why) {
  std::fprintf(stderr, "cohort: route pattern '%.*s': %s\n", static_cast<int>(pattern.size()),
               pattern.data(), why);
  std::abort();
}

// The segments of `path` after its leading '/', as views ("" for an empty one).
std::vector<std::string_view> segments(std::string_view path) {
  std::vector<std::string_view> out;
  if (path.empty() || path[0] != '/') return out;
  size_t start = 1;
  for (;;) {
    const size_t slash = path.find('/', start);
    if (slash == std::string_view::npos) {
      out.push_back(path.substr(start));
      return out;
    }
    out.push_back(path.substr(start, slash - start));
    start = slash + 1;
  }
}

}  // namespace

PathPattern::PathPattern(std::string_view pattern) {
  if (pattern.empty() || pattern[0] != '/') badPattern(pattern, "must start with '/'");
  for (std::string_view seg : segments(pattern)) {
    const bool capture = seg.size() >= 2 && seg.front() == '{' && seg.back() == '}';
    if (!capture) {
      if (seg.find_first_of("{}") != std::string_view::npos) {
        badPattern(pattern, "a capture must be a whole segment");
      }
      if (rest_) {
        tail_.emplace_back(seg);
      } else {
        head_.push_back(Segment{std::string(seg), false});
      }
      name_ += "/" + std::string(seg);
      continue;
    }
    std::string_view inner = seg.substr(1, seg.size() - 2);
    const char last = inner.empty() ? '\0' : inner.back();
    if (last == '+' || last == '*') {
      if (rest_) badPattern(pattern, "at most one rest capture");
      rest_ = true;
      rest_may_be_empty_ = last == '*';
      inner.remove_suffix(1);
    } else if (rest_) {
      badPattern(pattern, "only literal segments may follow a rest capture");
    } else {
      head_.push_back(Segment{"", true});
    }
    if (inner.empty()) badPattern(pattern, "a capture needs a name");
    name_ += "/{" + std::string(inner) + "}";
  }
  if (rest_may_be_empty_ && !tail_.empty()) {
    badPattern(pattern, "a {x*} capture must come last");
  }
}

bool PathPattern::match(std::string_view path, std::vector<std::string>& captures) const {
  captures.clear();
  if (path.empty() || path[0] != '/') return false;
  // Walks the head's segments one '/' at a time: each step looks at the next segment only.
  size_t at = 1;  // where the next segment starts
  for (size_t i = 0; i < head_.size(); ++i) {
    size_t end = path.find('/', at);
    const bool last_in_path = end == std::string_view::npos;
    if (last_in_path) end = path.size();
    const std::string_view seg = path.substr(at, end - at);
    const bool last_in_pattern = i + 1 == head_.size();
    if (head_[i].capture ? seg.empty() : seg != head_[i].literal) return false;
    if (head_[i].capture) captures.emplace_back(seg);
    if (last_in_path) {
      // The path ends here: a match when the pattern does too, or only an empty rest is left.
      if (!last_in_pattern) return false;
      if (!rest_) return true;
      if (!rest_may_be_empty_) return false;
      captures.emplace_back();
      return true;
    }
    at = end + 1;
    if (last_in_pattern && !rest_) return false;  // more path than pattern
  }
  if (!rest_) return head_.empty() && path.size() == 1;  // "/" only for the pattern "/"
  std::string_view rest = path.substr(at);
  // The literal segments after the rest capture, from the end.
  for (size_t i = tail_.size(); i-- > 0;) {
    const std::string& lit = tail_[i];
    if (rest.size() < lit.size() + 1 || rest.substr(rest.size() - lit.size()) != lit ||
        rest[rest.size() - lit.size() - 1] != '/') {
      return false;
    }
    rest.remove_suffix(lit.size() + 1);
  }
  if (rest.empty() && !rest_may_be_empty_) return false;
  captures.emplace_back(rest);
  return true;
}

}  // namespace cohort::server
