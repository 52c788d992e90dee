#include "proc/tmpfs.h"

#include "util/fd.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace cohort::proc {

namespace {

// Whether this thread has a mount namespace of its own (mountTmpfs's first call made it).
thread_local bool own_namespace = false;

}  // namespace

Result<void> mountTmpfs(const std::vector<std::string>& dirs, int64_t bytes, int uid, int gid) {
  if (dirs.empty()) return {};
  if (!own_namespace) {
    // This thread only (the others keep sharing the process's, which is the machine's).
    if (::unshare(CLONE_NEWNS) != 0) {
      const int err = errno;
      return fail(err == EPERM ? Code::kPermissionDenied : Code::kIo,
                  std::string("make a mount namespace for the job's /tmp and /dev/shm: ") +
                      std::strerror(err));
    }
    own_namespace = true;
    // The copy shares the machine's mounts' propagation: without this, what we mount below a
    // shared mount (systemd makes / one) would appear on the machine too.
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_SLAVE, nullptr) != 0) {
      return failErrno("keep the job's mounts out of the machine's mount namespace");
    }
  }
  std::string options = "mode=0700";
  if (uid >= 0) options += ",uid=" + std::to_string(uid);
  if (gid >= 0) options += ",gid=" + std::to_string(gid);
  if (bytes > 0) options += ",size=" + std::to_string(bytes);
  for (const std::string& dir : dirs) {
    // The directory is in the account's work directory: mounted through a descriptor opened
    // without following a link, so that a link put in its place cannot send the mount elsewhere.
    open_how how{};
    how.flags = O_PATH | O_DIRECTORY | O_CLOEXEC;
    how.resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
    UniqueFd at(static_cast<int>(::syscall(SYS_openat2, AT_FDCWD, dir.c_str(), &how, sizeof how)));
    if (!at.valid()) {
      return failErrno("open '" + dir + "' for the job's memory (without following links)");
    }
    const std::string target = "/proc/self/fd/" + std::to_string(at.get());
    if (::mount("tmpfs", target.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, options.c_str()) != 0) {
      const int err = errno;
      return fail(err == EPERM ? Code::kPermissionDenied : Code::kIo,
                  "mount memory of the job's own on '" + dir + "': " + std::strerror(err));
    }
  }
  return {};
}

void unmountTmpfs(const std::vector<std::string>& dirs) {
  if (!own_namespace) return;
  for (const std::string& dir : dirs) (void)::umount2(dir.c_str(), MNT_DETACH | UMOUNT_NOFOLLOW);
}

}  // namespace cohort::proc
