#include "storage/local_files.h"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <climits>

#include "util/text.h"

namespace cohort::storage {

bool containedPath(const std::string& path) {
  if (path.empty() || path.find('\0') != std::string::npos) return false;
  for (const std::string& part : split(path, '/')) {
    if (part.empty() || part == "." || part == ".." || startsWith(part, kTmpPrefix)) return false;
  }
  return true;
}

Result<UniqueFd> anonymousFile(const std::string& dir) {
  UniqueFd fd(::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600));
  if (!fd.valid()) return failErrno("create a temporary file in '" + dir + "'");
  return fd;
}

std::string baseName(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  size_t slash = p.rfind('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

std::string dirName(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

Result<UniqueFd> openBeneath(const std::string& root, const std::string& rel, bool create) {
  UniqueFd dir(::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir.valid()) return failErrno("open the directory '" + root + "'");
  std::string at = root;
  for (const std::string& part : split(rel, '/')) {
    if (part.empty()) continue;
    at += "/" + part;
    if (create && ::mkdirat(dir.get(), part.c_str(), 0755) != 0 && errno != EEXIST) {
      return failErrno("create the directory '" + at + "'");
    }
    UniqueFd next(
        ::openat(dir.get(), part.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!next.valid()) {
      if (errno == ELOOP || errno == ENOTDIR) {
        return fail(Code::kInvalidArgument,
                    "'" + at +
                        "': a symbolic link or a file where a directory should be; "
                        "nothing is written through it (remove it and copy again)");
      }
      return failErrno("open the directory '" + at + "'");
    }
    dir = std::move(next);
  }
  return dir;
}

Result<UniqueFd> createTemporary(int dir, const std::string& name, std::string& tmp) {
  // The name must fit NAME_MAX with the prefix and "-" + 12 hex digits.
  const std::string kept = name.substr(0, NAME_MAX - kTmpPrefix.size() - 13);
  for (int attempt = 0;; ++attempt) {
    unsigned char bytes[6];
    if (::getrandom(bytes, sizeof bytes, 0) != static_cast<ssize_t>(sizeof bytes)) {
      return failErrno("getrandom");
    }
    tmp = std::string(kTmpPrefix) + kept + "-" + hexEncode(bytes, sizeof bytes);
    UniqueFd fd(
        ::openat(dir, tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644));
    if (fd.valid()) return fd;
    if (errno != EEXIST || attempt == 3) return failErrno("create '" + tmp + "'");
  }
}

}  // namespace cohort::storage
