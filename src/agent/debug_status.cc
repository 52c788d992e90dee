#include "agent/debug_status.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <nlohmann/json.hpp>

#include "util/fd.h"
#include "util/json_limits.h"
#include "util/text.h"

namespace cohort::agent {

namespace {

bool oneOf(const std::string& value, std::initializer_list<const char*> words) {
  for (const char* w : words) {
    if (value == w) return true;
  }
  return false;
}

// What a person may be shown: UTF-8 without control characters, cut at a character boundary.
std::string printable(const std::string& text) {
  std::string out;
  for (char c : text) {
    const auto u = static_cast<unsigned char>(c);
    out.push_back(u < 0x20 || u == 0x7f ? ' ' : c);
  }
  while (out.size() > kMaxDebugWhereBytes || !validUtf8(out)) out.pop_back();
  return out;
}

}  // namespace

Result<DebugStatus> parseDebugStatus(std::string_view text) {
  auto bad = [](const std::string& why) {
    return fail(Code::kInvalidArgument, "debug status: " + why);
  };
  if (text.size() > kMaxDebugStatusBytes) return bad("too long");
  if (!checkJsonDepth(text, 1)) return bad("nested");
  const auto j = nlohmann::json::parse(text.begin(), text.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) return bad("not a JSON object");
  auto str = [&](const char* key) -> std::string {
    auto it = j.find(key);
    return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  DebugStatus s;
  s.state = str("state");
  s.reason = str("reason");
  if (!oneOf(s.state, {"waiting", "attached", "running"})) return bad("unknown state");
  if (!oneOf(s.reason, {"start", "breakpoint", "exception", "pdb"})) return bad("unknown reason");
  s.where = printable(str("where").substr(0, kMaxDebugWhereBytes + 4));
  auto count = [&](const char* key) -> int64_t {
    auto it = j.find(key);
    if (it == j.end() || !it->is_number_integer()) return 0;
    return it->is_number_unsigned()
               ? static_cast<int64_t>(std::min<uint64_t>(it->get<uint64_t>(), INT64_MAX))
               : it->get<int64_t>();
  };
  s.seq = count("seq");
  s.attaches = std::max<int64_t>(0, count("attaches"));
  return s;
}

Result<DebugStatus> readDebugStatus(const std::string& path, uid_t uid) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
  if (!fd.valid()) {
    if (errno == ENOENT) return fail(Code::kNotFound, "no debug status yet");
    return failErrno("open '" + path + "'");
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return failErrno("stat '" + path + "'");
  if (!S_ISREG(st.st_mode) || st.st_nlink != 1 ||
      (uid != static_cast<uid_t>(-1) && st.st_uid != uid)) {
    return fail(Code::kInvalidArgument, "debug status: '" + path + "' is not the rank's file");
  }
  char buf[kMaxDebugStatusBytes + 1];
  size_t got = 0;
  while (got < sizeof buf) {
    const ssize_t n = ::read(fd.get(), buf + got, sizeof buf - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  return parseDebugStatus(std::string_view(buf, got));
}

}  // namespace cohort::agent
