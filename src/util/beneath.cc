#include "util/beneath.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

#include "util/text.h"

namespace cohort {

namespace {

long openat2Call(int dir_fd, const char* path, int flags) {
  open_how how{};
  how.flags = static_cast<uint64_t>(flags) | O_CLOEXEC;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  return ::syscall(SYS_openat2, dir_fd, path, &how, sizeof how);
}

// The first part of `rel` below `dir_fd` that is a symbolic link, or "" (for a message).
std::string firstLink(int dir_fd, const std::vector<std::string>& parts) {
  UniqueFd at(::fcntl(dir_fd, F_DUPFD_CLOEXEC, 0));
  std::string walked;
  for (const std::string& part : parts) {
    walked += (walked.empty() ? "" : "/") + part;
    struct stat st {};
    if (::fstatat(at.get(), part.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return "";
    if (S_ISLNK(st.st_mode)) return walked;
    UniqueFd next(::openat(at.get(), part.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC));
    if (!next.valid()) return "";
    at = std::move(next);
  }
  return "";
}

Result<UniqueFd> openIn(int dir_fd, const std::string& rel, int flags, bool by_parts) {
  if (flags & O_CREAT) return fail(Code::kInternal, "openBeneath does not create");
  std::vector<std::string> parts;
  for (const std::string& part : split(rel, '/')) {
    if (part.empty() || part == ".") continue;
    if (part == "..") {
      return fail(Code::kInvalidArgument, "'" + rel + "' leaves the directory it is taken in");
    }
    parts.push_back(part);
  }
  if (!rel.empty() && rel[0] == '/') {
    return fail(Code::kInvalidArgument, "'" + rel + "' is not a relative path");
  }
  const std::string path = parts.empty() ? "." : join(parts, "/");
  auto refused = [&](int err) -> Result<UniqueFd> {
    if (err == ELOOP || err == EXDEV || err == ENOTDIR) {
      const std::string link = firstLink(dir_fd, parts);
      if (!link.empty()) {
        return fail(Code::kInvalidArgument,
                    "'" + link + "' is a symbolic link; links are not followed here");
      }
      if (err != ENOTDIR) {
        return fail(Code::kInvalidArgument,
                    "'" + rel + "' leads through a link; links are not followed here");
      }
    }
    return failErrno("open '" + rel + "'", err);
  };
  if (!by_parts) {
    long fd = openat2Call(dir_fd, path.c_str(), flags);
    if (fd < 0) return refused(errno);
    return UniqueFd(static_cast<int>(fd));
  }
  // Part by part: a directory each, without following it, then the last part with `flags`.
  UniqueFd at(::fcntl(dir_fd, F_DUPFD_CLOEXEC, 0));
  if (!at.valid()) return failErrno("dup");
  if (parts.empty()) {
    UniqueFd self(::openat(at.get(), ".", flags | O_CLOEXEC));
    if (!self.valid()) return refused(errno);
    return self;
  }
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    UniqueFd next(
        ::openat(at.get(), parts[i].c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!next.valid()) return refused(errno);
    at = std::move(next);
  }
  UniqueFd last(::openat(at.get(), parts.back().c_str(), flags | O_NOFOLLOW | O_CLOEXEC));
  if (!last.valid()) return refused(errno);
  struct stat st {};
  if ((flags & O_PATH) && ::fstat(last.get(), &st) == 0 && S_ISLNK(st.st_mode)) return refused(ELOOP);
  return last;
}

}  // namespace

bool haveOpenat2() {
  static const bool have = [] {
    long fd = openat2Call(AT_FDCWD, "/", O_PATH);
    if (fd >= 0) ::close(static_cast<int>(fd));
    return fd >= 0 || errno != ENOSYS;
  }();
  return have;
}

Result<UniqueFd> openBeneath(int dir_fd, const std::string& rel, int flags) {
  return openIn(dir_fd, rel, flags, !haveOpenat2());
}

Result<UniqueFd> openBeneathByParts(int dir_fd, const std::string& rel, int flags) {
  return openIn(dir_fd, rel, flags, true);
}

}  // namespace cohort
