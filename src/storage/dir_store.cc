#include "storage/dir_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "storage/crc64.h"
#include "storage/local_files.h"
#include "util/text.h"

namespace cohort::storage {

namespace {

constexpr const char* kTagAttribute = "user.cohort.etag";
constexpr size_t kChunk = size_t{1} << 20;

// Copies `size` bytes of `from` (from offset 0) to `to`, in the kernel where it can. The holes
// of a sparse `from` stay holes in `to`.
Result<void> copyBytes(int from, int to, int64_t size, const std::atomic<bool>* cancel,
                       const PartDone& sent) {
  int64_t done = 0, reported = 0;
  std::string buffer;
  struct stat st {};
  const bool sparse = ::fstat(from, &st) == 0 && S_ISREG(st.st_mode) &&
                      static_cast<int64_t>(st.st_blocks) * 512 < std::min<int64_t>(size, st.st_size);
  while (done < size) {
    if (cancel && cancel->load()) return fail(Code::kFailedPrecondition, "interrupted");
    size_t want = static_cast<size_t>(std::min<int64_t>(size - done, kChunk));
    if (sparse) {
      const off_t data = ::lseek(from, done, SEEK_DATA);
      if (data < 0 && errno != ENXIO) return failErrno("seek");
      const int64_t next = data < 0 ? size : std::min<int64_t>(std::max<int64_t>(data, done), size);
      if (next > done) {
        if (::lseek(to, next, SEEK_SET) < 0) return failErrno("seek");
        done = next;
        if (done >= size) break;
      }
      const off_t hole = ::lseek(from, done, SEEK_HOLE);
      if (hole > done) want = static_cast<size_t>(std::min<int64_t>(hole - done, want));
    }
    loff_t in = done;
    ssize_t n = ::copy_file_range(from, &in, to, nullptr, want, 0);
    if (n < 0 && (errno == EXDEV || errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP)) {
      buffer.resize(want);
      n = ::pread(from, buffer.data(), want, done);
      if (n > 0) COHORT_TRY(writeAll(to, std::string_view(buffer.data(), static_cast<size_t>(n))));
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return failErrno("copy");
    if (n == 0) return fail(Code::kIo, "the source shrank while it was copied");
    done += n;
    if (sent && size > kPartSize && done - reported >= kPartSize) {
      sent(done - reported);
      reported = done;
    }
  }
  if (sent && size > kPartSize && done > reported) sent(done - reported);
  // A hole at the end: the size, without a block.
  if (sparse && ::ftruncate(to, size) != 0) return failErrno("truncate");
  return {};
}

class DirStore final : public ObjectStore {
 public:
  DirStore(std::string root, std::string name) : root_(std::move(root)), name_(std::move(name)) {}

  std::string uri(const std::string& key) const override {
    return name_ + (key.empty() ? "" : "/" + key);
  }

  Result<std::vector<ObjectInfo>> list(const std::string& prefix) override {
    const size_t slash = prefix.rfind('/');
    const std::string dir = slash == std::string::npos ? "" : prefix.substr(0, slash);
    if (!dir.empty() && !containedPath(dir)) {
      return fail(Code::kInvalidArgument, uri(prefix) + ": not a prefix of keys this store holds");
    }
    std::vector<ObjectInfo> out;
    UniqueFd root(::open(root_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!root.valid()) {
      if (errno == ENOENT) return out;  // a bucket nothing was put in yet
      return failErrno("list " + uri(prefix));
    }
    UniqueFd start(dir.empty() ? ::dup(root.get()) : openDir(root.get(), dir));
    if (!start.valid()) {
      if (errno == ENOENT || errno == ENOTDIR || errno == ELOOP) return out;  // nothing there
      return failErrno("list " + uri(prefix));
    }
    COHORT_TRY(walk(std::move(start), dir, prefix, 0, out));
    std::sort(out.begin(), out.end(),
              [](const ObjectInfo& a, const ObjectInfo& b) { return a.key < b.key; });
    return out;
  }

  Result<ObjectInfo> head(const std::string& key) override {
    COHORT_ASSIGN(Opened opened, openObject(key));
    return std::move(opened.info);
  }

  Result<Fetched> getRange(const std::string& key, int fd, int64_t offset,
                           int64_t length) override {
    COHORT_ASSIGN(Opened opened, openObject(key));
    Fetched fetched;
    std::string buffer(static_cast<size_t>(std::min<int64_t>(length, kChunk)), '\0');
    for (int64_t done = 0; done < length;) {
      const size_t want = static_cast<size_t>(std::min<int64_t>(length - done, kChunk));
      ssize_t n = ::pread(opened.fd.get(), buffer.data(), want, offset + done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return failErrno("read " + uri(key));
      if (n == 0) {
        return fail(Code::kIo, uri(key) + ": got " + std::to_string(done) + " of " +
                                   std::to_string(length) + " bytes");
      }
      for (ssize_t put = 0; put < n;) {
        ssize_t w =
            ::pwrite(fd, buffer.data() + put, static_cast<size_t>(n - put), offset + done + put);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) return failErrno(uri(key) + ": write");
        put += w;
      }
      fetched.crc = crc64nvme(fetched.crc, buffer.data(), static_cast<size_t>(n));
      done += n;
    }
    return fetched;
  }

  Result<std::string> etagOf(int fd, int64_t size) const override { return contentTag(fd, size); }
  bool checkable(const ObjectInfo& object) const override { return isContentTag(object); }

  Result<std::string> put(const std::string& key, int fd, int64_t size,
                          const std::atomic<bool>* cancel, const PartDone& sent) override {
    if (!containedPath(key)) return badKey(key);
    COHORT_TRY(makeDirs(root_));
    COHORT_ASSIGN(UniqueFd dir, makeParents(key));
    const std::string name = baseName(key);
    struct stat st {};
    if (::fstatat(dir.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode)) {
      return fail(Code::kFailedPrecondition, uri(key) + " is a directory");
    }
    std::string tmp;
    auto created = createTemporary(dir.get(), name, tmp);
    if (!created) return withContext(created.error(), "put " + uri(key));
    UniqueFd out = std::move(*created);
    auto stored = [&]() -> Result<std::string> {
      COHORT_TRY(copyBytes(fd, out.get(), size, cancel, sent));
      // Read back: what is in the file must be what the source holds.
      COHORT_ASSIGN(std::string expected, contentTag(fd, size));
      COHORT_ASSIGN(std::string written, contentTag(out.get(), size));
      struct stat now {};
      if (::fstat(out.get(), &now) != 0) return failErrno("stat");
      if (written != expected || now.st_size != size) {
        return fail(Code::kIo, "the file holds other bytes than were sent (read back " + written +
                                   ", expected " + expected + ")");
      }
      saveTag(out.get(), now, written);
      if (::fsync(out.get()) != 0) return failErrno("fsync");
      if (::renameat(dir.get(), tmp.c_str(), dir.get(), name.c_str()) != 0) {
        if (errno == EISDIR || errno == ENOTEMPTY || errno == EEXIST) {
          return fail(Code::kFailedPrecondition, "it is a directory");
        }
        return failErrno("rename");
      }
      return written;
    }();
    if (!stored) {
      ::unlinkat(dir.get(), tmp.c_str(), 0);
      if (stored.error().message == "interrupted") return stored;
      return withContext(stored.error(), "put " + uri(key));
    }
    return stored;
  }

  Result<Opened> open(const std::string& key, const std::string&) override {
    return openObject(key);
  }

 private:
  tl::unexpected<Error> badKey(const std::string& key) const {
    return fail(Code::kInvalidArgument,
                uri(key) +
                    ": not a key a directory can hold (an empty, '.' or '..' part, a NUL "
                    "byte, or a name starting with '" +
                    std::string(kTmpPrefix) + "')");
  }

  Result<UniqueFd> openRoot() const {
    UniqueFd root(::open(root_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (root.valid()) return root;
    if (errno == ENOENT) return fail(Code::kNotFound, uri("") + ": no such object");
    return failErrno("open " + uri(""));
  }

  // The directory `rel` below `root`, no link followed on the way (-1 and errno when not).
  static int openDir(int root, const std::string& rel) {
    open_how how{};
    how.flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC;
    how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
    return static_cast<int>(::syscall(SYS_openat2, root, rel.c_str(), &how, sizeof how));
  }

  // The directories of `key`, made where missing, each opened without following a link.
  Result<UniqueFd> makeParents(const std::string& key) const {
    UniqueFd dir(::open(root_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!dir.valid()) return failErrno("open " + uri(""));
    std::vector<std::string> parts = split(key, '/');
    parts.pop_back();
    std::string at;
    for (const std::string& part : parts) {
      at += (at.empty() ? "" : "/") + part;
      if (::mkdirat(dir.get(), part.c_str(), 0755) != 0 && errno != EEXIST) {
        return failErrno("put " + uri(key) + ": create " + uri(at));
      }
      UniqueFd next(
          ::openat(dir.get(), part.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!next.valid()) {
        if (errno == ENOTDIR || errno == ELOOP) {
          return fail(Code::kFailedPrecondition,
                      uri(at) + " is a file, so nothing can go under it");
        }
        return failErrno("put " + uri(key) + ": open " + uri(at));
      }
      dir = std::move(next);
    }
    return dir;
  }

  Result<Opened> openObject(const std::string& key) const {
    if (!containedPath(key)) return badKey(key);
    COHORT_ASSIGN(UniqueFd root, openRoot());
    open_how how{};
    how.flags = O_RDONLY | O_CLOEXEC | O_NONBLOCK;
    how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
    Opened opened;
    opened.fd = UniqueFd(
        static_cast<int>(::syscall(SYS_openat2, root.get(), key.c_str(), &how, sizeof how)));
    struct stat st {};
    if (!opened.fd.valid() || ::fstat(opened.fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
      if (opened.fd.valid() || errno == ENOENT || errno == ENOTDIR || errno == ELOOP ||
          errno == EXDEV) {
        return fail(Code::kNotFound, uri(key) + ": no such object");
      }
      return failErrno("open " + uri(key));
    }
    COHORT_ASSIGN(std::string etag, tagOf(opened.fd.get(), st, key));
    opened.info = ObjectInfo{key, st.st_size, std::move(etag)};
    return opened;
  }

  // The file's content tag: the one kept with it when it still fits its size and time.
  Result<std::string> tagOf(int fd, const struct stat& st, const std::string& key) const {
    char kept[256];
    ssize_t n = ::fgetxattr(fd, kTagAttribute, kept, sizeof kept - 1);
    if (n > 0) {
      kept[n] = '\0';
      long long size = 0, sec = 0, nsec = 0;
      char etag[128];
      if (std::sscanf(kept, "%lld %lld %lld %127s", &size, &sec, &nsec, etag) == 4 &&
          size == st.st_size && sec == st.st_mtim.tv_sec && nsec == st.st_mtim.tv_nsec) {
        return std::string(etag);
      }
    }
    auto tag = contentTag(fd, st.st_size);
    if (!tag) return withContext(tag.error(), uri(key));
    saveTag(fd, st, *tag);
    return tag;
  }

  // Best effort: a file system without user attributes computes the tag every time.
  static void saveTag(int fd, const struct stat& st, const std::string& etag) {
    const std::string value = std::to_string(st.st_size) + " " + std::to_string(st.st_mtim.tv_sec) +
                              " " + std::to_string(st.st_mtim.tv_nsec) + " " + etag;
    (void)::fsetxattr(fd, kTagAttribute, value.data(), value.size(), 0);
  }

  // The objects below the directory `dir` (the keys there start with `rel`), those whose key
  // starts with `prefix`. Links, and anything but files and directories, are not objects.
  Result<void> walk(UniqueFd dir, const std::string& rel, const std::string& prefix, int depth,
                    std::vector<ObjectInfo>& out) const {
    if (depth > kMaxDepth) {
      return fail(Code::kInvalidArgument,
                  uri(rel) + ": nested deeper than " + std::to_string(kMaxDepth) + " directories");
    }
    DIR* listing = ::fdopendir(dir.get());
    if (!listing) return failErrno("list " + uri(rel));
    dir.release();
    std::unique_ptr<DIR, int (*)(DIR*)> closer(listing, ::closedir);
    std::vector<std::string> names;
    errno = 0;
    while (dirent* e = ::readdir(listing)) {
      std::string name = e->d_name;
      if (name != "." && name != ".." && !startsWith(name, kTmpPrefix)) names.push_back(name);
    }
    for (const std::string& name : names) {
      const std::string key = rel.empty() ? name : rel + "/" + name;
      struct stat st {};
      if (::fstatat(::dirfd(listing), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
      if (S_ISDIR(st.st_mode)) {
        const std::string below = key + "/";
        if (!startsWith(below, prefix) && !startsWith(prefix, below)) continue;
        UniqueFd sub(::openat(::dirfd(listing), name.c_str(),
                              O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        if (!sub.valid()) continue;  // gone, or swapped for a link since
        COHORT_TRY(walk(std::move(sub), key, prefix, depth + 1, out));
      } else if (S_ISREG(st.st_mode) && startsWith(key, prefix)) {
        UniqueFd file(::openat(::dirfd(listing), name.c_str(),
                               O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
        if (!file.valid() || ::fstat(file.get(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
        COHORT_ASSIGN(std::string etag, tagOf(file.get(), st, key));
        out.push_back(ObjectInfo{key, st.st_size, std::move(etag)});
        if (static_cast<int64_t>(out.size()) > kMaxListed) {
          return fail(Code::kTooLarge, uri(prefix) + ": more than " + std::to_string(kMaxListed) +
                                           " objects under this prefix");
        }
      }
    }
    return {};
  }

  const std::string root_;
  const std::string name_;
};

}  // namespace

std::unique_ptr<ObjectStore> makeDirStore(std::string root, std::string name) {
  return std::make_unique<DirStore>(std::move(root), std::move(name));
}

}  // namespace cohort::storage
