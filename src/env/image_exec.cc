#include "env/image_exec.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "env/images.h"
#include "util/fd.h"
#include "util/text.h"

namespace cohort::env {

namespace {

// Where the new root is put together, in this process's own mount namespace: a tmpfs mounted
// over /tmp there (the host's /tmp is untouched) holds the writable layer and the mount point.
constexpr const char* kScratch = "/tmp";
constexpr const char* kOldRoot = "/.cohort-old-root";

bool validPath(const std::string& path) {
  if (path.size() < 2 || path[0] != '/') return false;
  for (const std::string& part : split(path.substr(1), '/')) {
    if (part.empty() || part == "." || part == "..") return false;
  }
  return true;
}

std::string fdPath(int fd) { return "/proc/self/fd/" + std::to_string(fd); }

// mkdir -p `path` (absolute) in the current root; a missing last component is made as a file
// when `file` (a mount point for a file).
Result<void> makeMountPoint(const std::string& path, bool file) {
  std::string at;
  const std::vector<std::string> parts = split(path.substr(1), '/');
  for (size_t i = 0; i < parts.size(); ++i) {
    at += "/" + parts[i];
    if (i + 1 == parts.size() && file) {
      UniqueFd made(::open(at.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
      if (!made.valid() && errno != EISDIR) return failErrno("make the mount point '" + at + "'");
      continue;
    }
    if (::mkdir(at.c_str(), 0755) < 0 && errno != EEXIST) {
      return failErrno("make the mount point '" + at + "'");
    }
  }
  return {};
}

Result<void> mountOrFail(const char* source, const std::string& target, const char* type,
                         unsigned long flags, const char* data, const std::string& what) {
  if (::mount(source, target.c_str(), type, flags, data) < 0) return failErrno("mount " + what);
  return {};
}

// Binds what `fd` names at `target` (in the new root), read-only when asked.
Result<void> bindAt(int fd, const std::string& target, bool read_only, bool file) {
  COHORT_TRY(makeMountPoint(target, file));
  COHORT_TRY(mountOrFail(fdPath(fd).c_str(), target, nullptr, MS_BIND | MS_REC, nullptr,
                         "'" + target + "'"));
  if (read_only) {
    COHORT_TRY(mountOrFail(nullptr, target, nullptr,
                           MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, nullptr,
                           "'" + target + "' read-only"));
  }
  return {};
}

std::string hostName() {
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  return name;
}

}  // namespace

Result<ImageExec> parseImageExec(const std::vector<std::string>& args) {
  ImageExec e;
  size_t i = 0;
  for (; i < args.size() && args[i] != "--"; ++i) {
    const std::string& flag = args[i];
    auto value = [&]() -> Result<std::string> {
      if (i + 1 >= args.size() || args[i + 1] == "--") {
        return fail(Code::kInvalidArgument, flag + ": needs a value");
      }
      return args[++i];
    };
    if (flag == "--image") {
      COHORT_ASSIGN(e.image, value());
    } else if (flag == "--layer") {
      COHORT_ASSIGN(std::string layer, value());
      if (!validPath(layer)) {
        return fail(Code::kInvalidArgument, "--layer: '" + layer + "' is not an absolute path");
      }
      e.layers.push_back(layer);
    } else if (flag == "--bind" || flag == "--ro-bind") {
      COHORT_ASSIGN(std::string path, value());
      if (!validPath(path)) {
        return fail(Code::kInvalidArgument,
                    flag + ": '" + path +
                        "' is not an absolute path below '/' (without '.' or '..' parts)");
      }
      (flag == "--bind" ? e.binds : e.ro_binds).push_back(path);
    } else if (flag == "--unset") {
      COHORT_ASSIGN(std::string var, value());
      e.unset.push_back(var);
    } else {
      return fail(Code::kInvalidArgument, "'" + flag + "': not a flag of cohort env exec");
    }
  }
  if (e.image.empty()) return fail(Code::kInvalidArgument, "--image: name the image");
  if (i + 1 >= args.size()) {
    return fail(Code::kInvalidArgument, "name the command after '--': cohort env exec --image " +
                                            e.image + " -- python3 ...");
  }
  e.argv.assign(args.begin() + static_cast<long>(i) + 1, args.end());
  return e;
}

std::vector<ImageBind> bindOrder(const ImageExec& e) {
  std::vector<ImageBind> out;
  auto add = [&](const std::string& path, bool read_only) {
    for (ImageBind& b : out) {
      if (b.path == path) {
        b.read_only = b.read_only && read_only;
        return;
      }
    }
    out.push_back({path, read_only});
  };
  for (const std::string& p : e.binds) add(p, false);
  for (const std::string& p : e.ro_binds) add(p, true);
  std::stable_sort(out.begin(), out.end(), [](const ImageBind& a, const ImageBind& b) {
    return std::count(a.path.begin(), a.path.end(), '/') <
           std::count(b.path.begin(), b.path.end(), '/');
  });
  return out;
}

Result<void> execInImage(const ImageExec& given) {
  ImageExec e = given;
  if (e.layers.empty()) {
    COHORT_ASSIGN(ImageInfo info, inspectImage(e.image));
    e.layers = info.layers;
    for (const auto& [key, value] : imageVariables(info)) ::setenv(key.c_str(), value.c_str(), 1);
  }
  char cwd_buf[4096];
  if (!::getcwd(cwd_buf, sizeof cwd_buf)) return failErrno("getcwd");
  const std::string cwd = cwd_buf;
  if (e.binds.empty() && e.ro_binds.empty() && cwd != "/") e.binds.push_back(cwd);
  if (::geteuid() != 0) {
    return fail(Code::kPermissionDenied,
                "image " + e.image +
                    ": running in an image needs root (cohort mounts the image's layers from "
                    "podman's storage in a mount namespace of the rank's own)");
  }
  for (const std::string& layer : e.layers) {
    struct stat st {};
    if (::stat(layer.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      return fail(Code::kNotFound,
                  "image " + e.image + ": its layer " + layer + " is not on this machine (" +
                      hostName() + "): podman pull " + e.image +
                      " here, or keep podman's storage on a file system every node shares");
    }
  }
  if (::unshare(CLONE_NEWNS) < 0) return failErrno("image " + e.image + ": unshare the mounts");
  COHORT_TRY(mountOrFail(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr, "'/' private"));

  // Everything taken from the host, opened before anything is mounted over it; the new root
  // reaches it through these descriptors (closed when the command executes).
  std::vector<UniqueFd> held;
  auto open = [&](const std::string& path, bool directory) -> Result<int> {
    UniqueFd fd(::open(path.c_str(), O_PATH | O_CLOEXEC | (directory ? O_DIRECTORY : 0)));
    if (!fd.valid()) return failErrno("image " + e.image + ": open '" + path + "'");
    held.push_back(std::move(fd));
    return held.back().get();
  };
  std::string lower;
  for (const std::string& layer : e.layers) {
    COHORT_ASSIGN(int fd, open(layer, true));
    lower += (lower.empty() ? "" : ":") + fdPath(fd);
  }
  struct Bound {
    int fd;
    std::string target;
    bool read_only;
    bool file;
  };
  std::vector<Bound> bound;
  for (const ImageBind& b : bindOrder(e)) {
    struct stat st {};
    if (::stat(b.path.c_str(), &st) != 0)
      return failErrno("image " + e.image + ": '" + b.path + "'");
    COHORT_ASSIGN(int fd, open(b.path, false));
    bound.push_back({fd, b.path, b.read_only, !S_ISDIR(st.st_mode)});
  }
  COHORT_ASSIGN(int dev, open("/dev", true));
  COHORT_ASSIGN(int sys, open("/sys", true));
  std::vector<Bound> etc;  // the host's network names
  for (const char* file : {"/etc/hosts", "/etc/resolv.conf", "/etc/hostname"}) {
    if (::access(file, R_OK) != 0) continue;
    COHORT_ASSIGN(int fd, open(file, false));
    etc.push_back({fd, file, true, true});
  }

  // The root: the image's layers under a writable layer kept in memory.
  COHORT_TRY(mountOrFail("tmpfs", kScratch, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0700",
                         "the image's writable layer"));
  const std::string scratch = kScratch, root = scratch + "/root";
  for (const std::string& dir : {scratch + "/upper", scratch + "/work", root}) {
    if (::mkdir(dir.c_str(), 0755) < 0) return failErrno("mkdir '" + dir + "'");
  }
  const std::string options =
      "lowerdir=" + lower + ",upperdir=" + scratch + "/upper,workdir=" + scratch + "/work";
  COHORT_TRY(mountOrFail("overlay", root, "overlay", MS_NOSUID | MS_NODEV, options.c_str(),
                         "the image " + e.image + " (overlay of its layers)"));
  if (::mkdir((root + kOldRoot).c_str(), 0700) < 0) return failErrno("mkdir the old root's place");
  if (::syscall(SYS_pivot_root, root.c_str(), (root + kOldRoot).c_str()) < 0) {
    return failErrno("image " + e.image + ": pivot_root");
  }
  if (::chdir("/") < 0) return failErrno("chdir '/'");

  COHORT_TRY(makeMountPoint("/proc", false));
  COHORT_TRY(
      mountOrFail("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr, "/proc"));
  COHORT_TRY(bindAt(dev, "/dev", false, false));
  COHORT_TRY(bindAt(sys, "/sys", true, false));
  for (const Bound& b : etc) COHORT_TRY(bindAt(b.fd, b.target, b.read_only, b.file));
  for (const Bound& b : bound) COHORT_TRY(bindAt(b.fd, b.target, b.read_only, b.file));
  if (::umount2(kOldRoot, MNT_DETACH) < 0) return failErrno("detach the host's root");
  ::rmdir(kOldRoot);
  held.clear();

  if (::chdir(cwd.c_str()) < 0) {
    return failErrno("image " + e.image + ": chdir '" + cwd + "' (not bound in)");
  }
  for (const std::string& var : e.unset) ::unsetenv(var.c_str());
  std::vector<char*> argv;
  for (const std::string& a : e.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  ::execvp(argv[0], argv.data());
  const int err = errno;
  return fail(err == ENOENT ? Code::kNotFound : Code::kIo,
              "exec '" + e.argv[0] + "' in image " + e.image + ": " + std::strerror(err));
}

}  // namespace cohort::env
