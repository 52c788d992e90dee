#include "util/fd.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <utility>

namespace cohort {

UniqueFd& UniqueFd::operator=(UniqueFd&& other) noexcept {
  if (this != &other) reset(other.release());
  return *this;
}

int UniqueFd::release() {
  int fd = fd_;
  fd_ = -1;
  return fd;
}

void UniqueFd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

Result<void> setNonBlocking(int fd) {
  int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) return failErrno("fcntl");
  return {};
}

Result<void> writeAll(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) {
        pollfd p{fd, POLLOUT, 0};
        ::poll(&p, 1, 1000);
        continue;
      }
      return failErrno("write");
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return {};
}

void raiseFileLimit() {
  rlimit files{};
  if (::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &files);
  }
}

bool readNextChunk(int fd, int64_t& offset, std::string& out) {
  out.resize(1 << 16);
  ssize_t n = ::pread(fd, out.data(), out.size(), offset);
  out.resize(n > 0 ? static_cast<size_t>(n) : 0);
  if (n <= 0) return false;
  offset += n;
  return true;
}

Result<std::string> readFile(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return failErrno("open '" + path + "'");
  std::string out;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      return failErrno("read '" + path + "'");
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

Result<void> makeDirs(const std::string& path) {
  std::string prefix;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    prefix = path.substr(0, pos);
    if (prefix.empty()) continue;
    if (::mkdir(prefix.c_str(), 0755) < 0 && errno != EEXIST) {
      return failErrno("create '" + prefix + "'");
    }
  }
  return {};
}

Result<void> writeFileAtomic(const std::string& path, std::string_view content, bool durable,
                             mode_t mode) {
  return PreparedFile(path, mode).commit(content, durable);
}

Result<PreparedFile> PreparedFile::create(const std::string& path, mode_t mode) {
  PreparedFile file(path, mode);
  const size_t slash = path.rfind('/');
  const std::string dir =
      slash == std::string::npos ? "." : path.substr(0, std::max<size_t>(slash, 1));
  file.fd_.reset(::open(dir.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, mode));
  // EOPNOTSUPP: a filesystem without unnamed files; the file is then made by commit().
  if (!file.fd_.valid() && errno != EOPNOTSUPP && errno != EISDIR) {
    return failErrno("make a file in '" + dir + "'");
  }
  return file;
}

Result<void> PreparedFile::commit(std::string_view content, bool durable) {
  if (committed_) return fail(Code::kFailedPrecondition, "'" + path_ + "' is written already");
  committed_ = true;
  // One temporary name per thread: two threads may write the same file at once.
  const std::string tmp =
      path_ + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(::gettid());
  ::unlink(tmp.c_str());  // left by a crash of an earlier process with this pid
  UniqueFd fd = std::move(fd_);
  bool named = !fd.valid();
  if (named) {
    fd.reset(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode_));
    if (!fd.valid()) return failErrno("create '" + tmp + "'");
  }
  // Whatever fails, no file is left under the temporary name.
  auto failed = [&](const std::string& what, int err) -> Result<void> {
    if (named) ::unlink(tmp.c_str());
    return failErrno(what, err);
  };
  // An unnamed file is still reachable through /proc/<pid>/fd: what anyone wrote there goes.
  if (!named && ::ftruncate(fd.get(), 0) < 0) return failErrno("write '" + path_ + "'");
  if (auto r = writeAll(fd.get(), content); !r) {
    if (named) ::unlink(tmp.c_str());
    return withContext(r.error(), "'" + path_ + "'");
  }
  if (durable && ::fsync(fd.get()) < 0) return failed("write '" + path_ + "'", errno);
  if (!named) {
    // The name comes last: from here on the file is whole.
    const std::string self = "/proc/self/fd/" + std::to_string(fd.get());
    if (::linkat(AT_FDCWD, self.c_str(), AT_FDCWD, tmp.c_str(), AT_SYMLINK_FOLLOW) < 0) {
      return failErrno("name '" + tmp + "'");
    }
    named = true;
  }
  if (::close(fd.release()) < 0) return failed("write '" + path_ + "'", errno);
  if (::rename(tmp.c_str(), path_.c_str()) < 0) return failed("rename to '" + path_ + "'", errno);
  return {};
}

}  // namespace cohort
