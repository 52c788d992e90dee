#include "storage/copy.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <optional>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include <xxhash.h>

#include "storage/local_files.h"
#include "util/fd.h"
#include "util/text.h"

namespace cohort::storage {

namespace {

// One buffer per worker. 1 MiB stays in a core's L2 cache, so hashing and writing a chunk read
// it from there; 4 MiB measured 30-50% more CPU time for large files.
constexpr size_t kBufferSize = size_t{1} << 20;
constexpr int64_t kLargeFile = int64_t{8} << 20;  // copied first, read with readahead
constexpr int kMaxCopyWorkers = 256;
constexpr auto kProgressInterval = std::chrono::milliseconds(100);

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::string joinPath(const std::string& dir, const std::string& name) {
  if (name.empty()) return dir;
  return dir == "/" ? "/" + name : dir + "/" + name;
}

// "data/" -> "data", "/" stays.
std::string trimSlashes(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

bool sameMtime(const timespec& src, const timespec& dst) {
  if (src.tv_sec != dst.tv_sec) return false;
  // A destination file system without sub-second times keeps whole seconds.
  return src.tv_nsec == dst.tv_nsec || dst.tv_nsec == 0;
}

tl::unexpected<Error> failCopy(const std::string& file, const std::string& what, int err) {
  return failErrno("copy '" + file + "': " + what, err);
}

// A directory of the source tree and its counterpart under dst.
struct DirEntry {
  std::string src;
  std::string dst;
  struct stat st {};     // of the source directory
  bool created = false;  // made by this copy
};

constexpr size_t kNoDir = static_cast<size_t>(-1);

struct FileEntry {
  std::string src;
  std::string dst;
  struct stat st {};     // of the source file (links followed)
  size_t dir = kNoDir;   // index of its directory in Tree::dirs (kNoDir: a single-file copy)
  bool fresh = false;    // its destination directory was created by this copy: nothing to skip
};

struct Tree {
  std::vector<DirEntry> dirs;  // parents before children; dirs[0] is the root
  std::vector<FileEntry> files;
  int64_t bytes = 0;
  bool refuse_links = false;  // CopyOptions::refuse_links
};

// Why an untrusted source's entry is refused, or "" when it may be copied.
std::string sourceRefusal(const struct stat& st) {
  if (S_ISLNK(st.st_mode)) {
    return "a symbolic link: only regular files and directories are copied from what a job "
           "or an account named, never what a link points to (copy the file itself there)";
  }
  if (S_ISREG(st.st_mode) && st.st_nlink > 1) {
    return "a file with " + std::to_string(st.st_nlink) +
           " hard links: only files with one name are copied from what a job or an account "
           "named (copy it instead)";
  }
  if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) {
    return "not a regular file or directory (socket, FIFO or device)";
  }
  return "";
}

// Lists `dir` (a source directory, already in tree.dirs) and everything below it, following
// symbolic links. `ancestors` holds the directories from the root down to `dir`.
Result<void> walkDir(size_t dir_index, std::vector<std::pair<dev_t, ino_t>>& ancestors,
                     std::vector<std::string>& ancestor_paths, Tree& tree) {
  const std::string src_dir = tree.dirs[dir_index].src;
  const std::string dst_dir = tree.dirs[dir_index].dst;
  UniqueFd fd(::open(src_dir.c_str(),
                     O_RDONLY | O_DIRECTORY | O_CLOEXEC | (tree.refuse_links ? O_NOFOLLOW : 0)));
  if (!fd.valid()) return failCopy(src_dir, "open directory", errno);
  if (tree.refuse_links) {
    struct stat now {};
    const struct stat& listed = tree.dirs[dir_index].st;
    if (::fstat(fd.get(), &now) < 0 || now.st_ino != listed.st_ino || now.st_dev != listed.st_dev) {
      return fail(Code::kInvalidArgument, "copy '" + src_dir + "': changed while it was copied");
    }
  }
  DIR* listing = ::fdopendir(fd.get());
  if (!listing) return failCopy(src_dir, "open directory", errno);
  fd.release();
  std::unique_ptr<DIR, int (*)(DIR*)> closer(listing, ::closedir);
  std::vector<std::string> names;
  errno = 0;
  while (dirent* entry = ::readdir(listing)) {
    std::string_view name = entry->d_name;
    if (name == "." || name == ".." || startsWith(name, kTmpPrefix)) continue;
    names.emplace_back(name);
  }
  if (errno != 0) return failCopy(src_dir, "read directory", errno);
  std::sort(names.begin(), names.end());

  std::vector<size_t> subdirs;
  for (const std::string& name : names) {
    std::string path = joinPath(src_dir, name);
    struct stat st {};
    if (tree.refuse_links) {
      if (::fstatat(::dirfd(listing), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) < 0) {
        if (errno == ENOENT) continue;
        return failCopy(path, "stat", errno);
      }
      if (std::string why = sourceRefusal(st); !why.empty()) {
        return fail(Code::kInvalidArgument, "copy '" + path + "': " + why);
      }
    } else if (::fstatat(::dirfd(listing), name.c_str(), &st, 0) < 0) {
      int err = errno;
      struct stat link {};
      bool is_link = ::fstatat(::dirfd(listing), name.c_str(), &link, AT_SYMLINK_NOFOLLOW) == 0 &&
                     S_ISLNK(link.st_mode);
      if (err == ENOENT && is_link) {
        return fail(Code::kInvalidArgument, "copy '" + path + "': dangling symbolic link");
      }
      if (err == ENOENT) continue;  // deleted while we were listing
      if (err == ELOOP) {
        return fail(Code::kInvalidArgument, "copy '" + path + "': symbolic link loop");
      }
      return failCopy(path, "stat", err);
    }
    if (S_ISREG(st.st_mode)) {
      tree.files.push_back(FileEntry{path, joinPath(dst_dir, name), st, dir_index, false});
      tree.bytes += st.st_size;
    } else if (S_ISDIR(st.st_mode)) {
      for (size_t i = 0; i < ancestors.size(); ++i) {
        if (ancestors[i] == std::make_pair(st.st_dev, st.st_ino)) {
          return fail(Code::kInvalidArgument, "copy '" + path +
                                                  "': symbolic link loop: it leads back to '" +
                                                  ancestor_paths[i] + "'");
        }
      }
      subdirs.push_back(tree.dirs.size());
      tree.dirs.push_back(DirEntry{path, joinPath(dst_dir, name), st, false});
    } else {
      return fail(Code::kInvalidArgument,
                  "copy '" + path + "': not a regular file or directory (socket, FIFO or device)");
    }
  }
  closer.reset();
  for (size_t sub : subdirs) {
    ancestors.emplace_back(tree.dirs[sub].st.st_dev, tree.dirs[sub].st.st_ino);
    ancestor_paths.push_back(tree.dirs[sub].src);
    COHORT_TRY(walkDir(sub, ancestors, ancestor_paths, tree));
    ancestors.pop_back();
    ancestor_paths.pop_back();
  }
  return {};
}

// Removes the temporary files an interrupted copy left in `dir`: all of them, or only those of
// the file `name` when it is not empty.
void removeLeftovers(const std::string& dir, const std::string& name) {
  DIR* listing = ::opendir(dir.c_str());
  if (!listing) return;
  std::string prefix = std::string(kTmpPrefix) + name;
  if (!name.empty()) prefix += "-";
  std::vector<std::string> leftovers;
  while (dirent* entry = ::readdir(listing)) {
    if (startsWith(entry->d_name, prefix)) leftovers.emplace_back(entry->d_name);
  }
  for (const std::string& leftover : leftovers) {
    // A copy under way holds a lock on its temporary file (createTemporary): another copy into
    // the same directory (another node's, say) is not a leftover.
    UniqueFd fd(::openat(::dirfd(listing), leftover.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
    if (fd.valid() && ::flock(fd.get(), LOCK_EX | LOCK_NB) < 0) continue;
    ::unlinkat(::dirfd(listing), leftover.c_str(), 0);
  }
  ::closedir(listing);
}

// The absolute, symlink-free form of `path`, which need not exist: its longest existing prefix
// is resolved and the rest appended lexically.
std::string canonicalPath(const std::string& path) {
  std::string existing = path;
  std::vector<std::string> rest;
  for (;;) {
    if (char* real = ::realpath(existing.c_str(), nullptr)) {
      std::string out = real;
      std::free(real);
      for (auto it = rest.rbegin(); it != rest.rend(); ++it) {
        if (*it == "..") {
          out = dirName(out);
        } else if (!it->empty() && *it != ".") {
          out = joinPath(out, *it);
        }
      }
      return out;
    }
    if (existing == "." || existing == "/") return path;  // cannot resolve: compare as given
    size_t slash = existing.rfind('/');
    if (slash == std::string::npos) {
      rest.push_back(existing);
      existing = ".";
    } else {
      rest.push_back(existing.substr(slash + 1));
      existing = slash == 0 ? "/" : existing.substr(0, slash);
    }
  }
}

// One copy in progress: the work list, the counters the workers share and the first error.
class CopyJob {
 public:
  CopyJob(const CopyOptions& options, Tree tree) : options_(options), tree_(std::move(tree)) {
    // Large files first, largest first, so that no worker ends alone on a big one. Then the
    // small ones taking one file from each directory in turn: creating and renaming a file
    // locks its directory, so workers in different directories do not wait for each other.
    std::vector<std::vector<size_t>> by_dir;  // files are listed directory by directory
    for (size_t i = 0; i < tree_.files.size(); ++i) {
      if (tree_.files[i].st.st_size >= kLargeFile) {
        order_.push_back(i);
      } else if (by_dir.empty() || tree_.files[by_dir.back().back()].dir != tree_.files[i].dir) {
        by_dir.push_back({i});
      } else {
        by_dir.back().push_back(i);
      }
    }
    std::stable_sort(order_.begin(), order_.end(), [&](size_t a, size_t b) {
      return tree_.files[a].st.st_size > tree_.files[b].st.st_size;
    });
    for (size_t round = 0; !by_dir.empty(); ++round) {
      size_t kept = 0;  // directories with files left after this round
      for (size_t d = 0; d < by_dir.size(); ++d) {
        order_.push_back(by_dir[d][round]);
        if (round + 1 >= by_dir[d].size()) continue;
        if (kept != d) by_dir[kept] = std::move(by_dir[d]);
        ++kept;
      }
      by_dir.resize(kept);
    }
  }

  Tree& tree() { return tree_; }

  // Runs the workers and reports progress from this thread until they are done.
  Result<CopyStats> run(Clock::time_point start, CopyStats stats) {
    const int workers =
        static_cast<int>(std::min<size_t>(static_cast<size_t>(options_.workers), order_.size()));
    std::vector<std::thread> threads;
    threads.reserve(static_cast<size_t>(workers));
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (int i = 0; i < workers; ++i) {
        // std::thread reports a refused thread (EAGAIN) by throwing: go on with fewer workers.
        try {
          threads.emplace_back([this] { work(); });
        } catch (const std::system_error& e) {
          if (threads.empty()) {
            return fail(Code::kIo, std::string("copy: start a worker: ") + e.what());
          }
          break;
        }
        ++running_;
      }
    }
    {
      std::unique_lock<std::mutex> lock(mu_);
      while (running_ > 0) {
        if (cv_.wait_for(lock, kProgressInterval, [this] { return running_ == 0; })) break;
        if (options_.progress) {
          lock.unlock();
          options_.progress(progress(start));
          lock.lock();
        }
      }
    }
    for (std::thread& t : threads) t.join();
    if (error_) return tl::unexpected<Error>(*error_);
    stats.files_copied = files_copied_;
    stats.files_skipped = files_skipped_;
    stats.bytes_copied = bytes_copied_;
    if (options_.progress) options_.progress(progress(start));
    return stats;
  }

 private:
  // What one worker owns: its buffer and hash state, reused for every file.
  struct Worker {
    std::unique_ptr<char[]> buffer{new char[kBufferSize]};
    std::unique_ptr<XXH3_state_t, XXH_errorcode (*)(XXH3_state_t*)> hash{XXH3_createState(),
                                                                          XXH3_freeState};
  };

  CopyProgress progress(Clock::time_point start) const {
    CopyProgress p;
    p.files_done = files_copied_ + files_skipped_;
    p.files_total = static_cast<int64_t>(tree_.files.size());
    p.bytes_done = bytes_done_;
    p.bytes_total = tree_.bytes;
    p.bytes_copied = bytes_copied_;
    p.seconds = secondsSince(start);
    return p;
  }

  bool stopping() const {
    return stop_.load(std::memory_order_relaxed) ||
           (options_.cancel && options_.cancel->load(std::memory_order_relaxed));
  }

  void work() {
    Worker worker;
    if (!worker.hash) {
      recordError(Error{Code::kInternal, "copy: out of memory for a hash state"});
    }
    while (!stopping()) {
      size_t n = next_.fetch_add(1);
      if (n >= order_.size()) break;
      const FileEntry& file = tree_.files[order_[n]];
      auto copied = copyFile(file, worker);
      if (!copied) {
        recordError(copied.error());
        break;
      }
      (*copied ? files_copied_ : files_skipped_).fetch_add(1);
    }
    if (options_.cancel && options_.cancel->load() && !stop_.load()) {
      recordError(Error{Code::kFailedPrecondition, "copy interrupted"});
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (--running_ == 0) cv_.notify_all();
  }

  void recordError(const Error& error) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!error_) error_ = error;
    stop_ = true;
  }

  // Hashes `bytes` zeros (a hole's).
  static void hashZeros(Worker& worker, int64_t bytes) {
    static const std::vector<char> zeros(kBufferSize, 0);
    for (int64_t left = bytes; left > 0;) {
      const size_t n = static_cast<size_t>(std::min<int64_t>(left, kBufferSize));
      XXH3_64bits_update(worker.hash.get(), zeros.data(), n);
      left -= static_cast<int64_t>(n);
    }
  }

  // Streams `fd` from its start through the hash; returns the byte count and hash. The holes of
  // a sparse file are hashed as the zeros they read as, without reading them.
  Result<std::pair<int64_t, XXH64_hash_t>> hashFile(int fd, Worker& worker, const char* what) {
    XXH3_64bits_reset(worker.hash.get());
    struct stat st {};
    const bool sparse = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
                        static_cast<int64_t>(st.st_blocks) * 512 < st.st_size;
    int64_t total = 0;
    for (;;) {
      size_t want = kBufferSize;
      if (sparse) {
        const off_t data = ::lseek(fd, total, SEEK_DATA);
        if (data < 0 && errno != ENXIO) return failErrno(what);
        // Past the last data: the rest up to the size is a hole (a file that grows meanwhile
        // is read on from there as any other).
        const int64_t next = data < 0 ? std::max<int64_t>(total, st.st_size) : data;
        if (next > total) {
          hashZeros(worker, next - total);
          total = next;
        }
        const off_t hole = ::lseek(fd, total, SEEK_HOLE);
        if (hole > total) want = static_cast<size_t>(std::min<int64_t>(hole - total, kBufferSize));
      }
      ssize_t n = ::pread(fd, worker.buffer.get(), want, total);
      if (n < 0) {
        if (errno == EINTR) continue;
        return failErrno(what);
      }
      if (n == 0) break;
      XXH3_64bits_update(worker.hash.get(), worker.buffer.get(), static_cast<size_t>(n));
      total += n;
    }
    return std::make_pair(total, XXH3_64bits_digest(worker.hash.get()));
  }

  Result<XXH64_hash_t> hashPath(const std::string& path, Worker& worker) {
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd.valid()) return failErrno("open '" + path + "'");
    COHORT_ASSIGN(auto counted, hashFile(fd.get(), worker, "read"));
    return counted.second;
  }

  // Sets the destination's mode and times from the source when they differ.
  Result<void> fixAttributes(const FileEntry& file, const struct stat& dst) {
    if ((dst.st_mode & 07777) != (file.st.st_mode & 07777) &&
        ::chmod(file.dst.c_str(), file.st.st_mode & 07777) < 0) {
      return failCopy(file.src, "chmod '" + file.dst + "'", errno);
    }
    if (dst.st_mtim.tv_sec != file.st.st_mtim.tv_sec ||
        dst.st_mtim.tv_nsec != file.st.st_mtim.tv_nsec) {
      timespec times[2] = {file.st.st_atim, file.st.st_mtim};
      if (::utimensat(AT_FDCWD, file.dst.c_str(), times, AT_SYMLINK_NOFOLLOW) < 0) {
        return failCopy(file.src, "set times of '" + file.dst + "'", errno);
      }
    }
    return {};
  }

  // True when the destination already holds this file (fixing its mode and times if needed).
  Result<bool> identical(const FileEntry& file, Worker& worker) {
    struct stat dst {};
    if (::lstat(file.dst.c_str(), &dst) < 0) {
      if (errno == ENOENT) return false;
      return failCopy(file.src, "stat '" + file.dst + "'", errno);
    }
    if (S_ISDIR(dst.st_mode)) {
      return fail(Code::kInvalidArgument,
                  "copy '" + file.src + "': the destination '" + file.dst + "' is a directory");
    }
    if (!S_ISREG(dst.st_mode) || dst.st_size != file.st.st_size) return false;
    if (!options_.checksum) {
      if (!sameMtime(file.st.st_mtim, dst.st_mtim)) return false;
      if ((dst.st_mode & 07777) != (file.st.st_mode & 07777)) {
        struct stat same_times = dst;
        same_times.st_mtim = file.st.st_mtim;
        COHORT_TRY(fixAttributes(file, same_times));
      }
      return true;
    }
    auto dst_hash = hashPath(file.dst, worker);
    if (!dst_hash) return withContext(dst_hash.error(), "copy '" + file.src + "'");
    auto src_hash = hashPath(file.src, worker);
    if (!src_hash) return withContext(src_hash.error(), "copy '" + file.src + "'");
    if (*dst_hash != *src_hash) return false;
    COHORT_TRY(fixAttributes(file, dst));
    return true;
  }

  // Creates the temporary file next to `dst`.
  Result<std::pair<UniqueFd, std::string>> createTemporary(const FileEntry& file) {
    // The name must fit NAME_MAX with the prefix and "-" + 16 hex digits.
    std::string name = baseName(file.dst);
    name = name.substr(0, NAME_MAX - kTmpPrefix.size() - 17);
    for (int attempt = 0;; ++attempt) {
      uint64_t random = 0;
      if (::getrandom(&random, sizeof random, 0) != sizeof random) random ^= ::rand();
      char hex[17];
      std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(random));
      std::string tmp = joinPath(dirName(file.dst), std::string(kTmpPrefix) + name + "-" + hex);
      UniqueFd fd(::open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
      if (fd.valid()) {
        // Locked while it is written, so that another copy's cleanup leaves it alone; one that
        // took it for a leftover just before has unlinked it: then make another.
        struct stat mine {}, named {};
        if (::flock(fd.get(), LOCK_EX) == 0 && ::fstat(fd.get(), &mine) == 0 &&
            ::lstat(tmp.c_str(), &named) == 0 && mine.st_ino == named.st_ino &&
            mine.st_dev == named.st_dev) {
          return std::make_pair(std::move(fd), std::move(tmp));
        }
        if (attempt == 3) return failCopy(file.src, "create '" + tmp + "'", EAGAIN);
        continue;
      }
      if (errno != EEXIST || attempt == 3) return failCopy(file.src, "create '" + tmp + "'", errno);
    }
  }

  // Copies one file unless it is identical at the destination. Returns whether it copied.
  Result<bool> copyFile(const FileEntry& file, Worker& worker) {
    if (!file.fresh) {
      COHORT_ASSIGN(bool same, identical(file, worker));
      if (same) {
        bytes_done_ += file.st.st_size;
        return false;
      }
    }
    UniqueFd in(::open(file.src.c_str(),
                       O_RDONLY | O_CLOEXEC | (tree_.refuse_links ? O_NOFOLLOW | O_NONBLOCK : 0)));
    if (!in.valid()) return failCopy(file.src, "open", errno);
    if (tree_.refuse_links) {
      struct stat now {};
      if (::fstat(in.get(), &now) < 0 || now.st_ino != file.st.st_ino ||
          now.st_dev != file.st.st_dev || !S_ISREG(now.st_mode) || now.st_nlink > 1) {
        return fail(Code::kInvalidArgument,
                    "copy '" + file.src + "': changed while it was copied");
      }
    }
    if (file.st.st_size >= kLargeFile) ::posix_fadvise(in.get(), 0, 0, POSIX_FADV_SEQUENTIAL);
    COHORT_ASSIGN(auto created, createTemporary(file));
    auto& [out, tmp] = created;
    auto written = writeVerified(file, in.get(), out.get(), worker);
    // Its lock (createTemporary) holds through a second descriptor until the rename: closing
    // `out` first is where a late write error shows.
    UniqueFd lock(::dup(out.get()));
    if (written && ::close(out.release()) < 0) written = failCopy(file.src, "write", errno);
    if (written && ::rename(tmp.c_str(), file.dst.c_str()) < 0) {
      written = failCopy(file.src, "rename to '" + file.dst + "'", errno);
    }
    if (!written) {
      out.reset();
      ::unlink(tmp.c_str());
      return tl::unexpected<Error>(written.error());
    }
    return true;
  }

  // Copies `in` to `out` hashing the bytes, reads `out` back and compares, then sets the mode
  // and times. Leaves `out` open. A sparse file stays sparse: its holes are skipped, not
  // written as zeros (an 8 GiB file of holes takes nothing, and no time, to copy).
  Result<void> writeVerified(const FileEntry& file, int in, int out, Worker& worker) {
    XXH3_64bits_reset(worker.hash.get());
    int64_t total = 0;
    const bool sparse = static_cast<int64_t>(file.st.st_blocks) * 512 < file.st.st_size;
    const int64_t size = file.st.st_size;
    for (;;) {
      if (stopping()) return fail(Code::kFailedPrecondition, "copy interrupted");
      size_t want = kBufferSize;
      if (sparse) {
        // Where the next data is: the hole before it is hashed as the zeros it reads as, and
        // left a hole in the copy.
        off_t data = ::lseek(in, total, SEEK_DATA);
        if (data < 0 && errno != ENXIO) return failCopy(file.src, "seek", errno);
        const int64_t next = data < 0 ? size : std::max<int64_t>(data, total);
        if (next > total) {
          hashZeros(worker, next - total);
          if (::lseek(out, next, SEEK_SET) < 0) return failCopy(file.src, "seek", errno);
          total = next;
        }
        if (total >= size) {
          if (::ftruncate(out, size) < 0) return failCopy(file.src, "truncate", errno);
          break;
        }
        off_t hole = ::lseek(in, total, SEEK_HOLE);
        if (hole > total) want = static_cast<size_t>(std::min<int64_t>(hole - total, kBufferSize));
      }
      ssize_t n = sparse ? ::pread(in, worker.buffer.get(), want, total)
                         : ::read(in, worker.buffer.get(), want);
      if (n < 0) {
        if (errno == EINTR) continue;
        return failCopy(file.src, "read", errno);
      }
      if (n == 0) break;
      XXH3_64bits_update(worker.hash.get(), worker.buffer.get(), static_cast<size_t>(n));
      auto w =
          writer_.write(out, std::string_view(worker.buffer.get(), static_cast<size_t>(n)), total);
      if (!w) return withContext(w.error(), "copy '" + file.src + "'");
      total += n;
      bytes_done_ += n;
      bytes_copied_ += n;
    }
    const XXH64_hash_t expected = XXH3_64bits_digest(worker.hash.get());
    auto read_back = hashFile(out, worker, "read back");
    if (!read_back) return withContext(read_back.error(), "copy '" + file.src + "'");
    if (read_back->first != total) {
      return fail(Code::kIo, "copy '" + file.src + "': verify: wrote " + std::to_string(total) +
                                 " bytes, read back " + std::to_string(read_back->first));
    }
    if (read_back->second != expected) {
      return fail(Code::kIo, "copy '" + file.src + "': verify: the checksum of '" + file.dst +
                                 "' as written differs from the source's");
    }
    if (::fchmod(out, file.st.st_mode & 07777) < 0) return failCopy(file.src, "chmod", errno);
    timespec times[2] = {file.st.st_atim, file.st.st_mtim};
    if (::futimens(out, times) < 0) return failCopy(file.src, "set times", errno);
    return {};
  }

  const CopyOptions& options_;
  FileWriter& writer_ = options_.writer ? *options_.writer : directWriter();
  Tree tree_;
  std::vector<size_t> order_;  // indices into tree_.files, in copy order
  std::atomic<size_t> next_{0};
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> files_copied_{0}, files_skipped_{0}, bytes_done_{0}, bytes_copied_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  int running_ = 0;  // guarded by mu_
  std::optional<Error> error_;  // guarded by mu_
};

// Creates the destination directories of a tree copy (dirs[0], dst itself, is made by the
// caller), refusing to write through symbolic links, and cleans up leftovers of earlier runs.
Result<void> prepareDirectories(Tree& tree, CopyStats& stats) {
  std::vector<bool> fresh(tree.dirs.size(), false);
  fresh[0] = tree.dirs[0].created;
  if (!fresh[0]) removeLeftovers(tree.dirs[0].dst, "");
  for (size_t i = 1; i < tree.dirs.size(); ++i) {
    DirEntry& dir = tree.dirs[i];
    if (::mkdir(dir.dst.c_str(), (dir.st.st_mode & 07777) | 0700) == 0) {
      dir.created = true;
      fresh[i] = true;
      ++stats.dirs_created;
      continue;
    }
    if (errno != EEXIST) return failCopy(dir.src, "create directory '" + dir.dst + "'", errno);
    struct stat st {};
    if (::lstat(dir.dst.c_str(), &st) < 0) {
      return failCopy(dir.src, "stat '" + dir.dst + "'", errno);
    }
    if (S_ISLNK(st.st_mode)) {
      return fail(Code::kInvalidArgument, "copy '" + dir.src + "': the destination '" + dir.dst +
                                              "' is a symbolic link; not writing through it");
    }
    if (!S_ISDIR(st.st_mode)) {
      return fail(Code::kInvalidArgument, "copy '" + dir.src + "': the destination '" + dir.dst +
                                              "' exists and is not a directory");
    }
    removeLeftovers(dir.dst, "");
  }
  for (FileEntry& file : tree.files) file.fresh = fresh[file.dir];
  return {};
}

// Sets the directories' modes and times, children first (creating files changed their mtime).
// dst itself only when this copy created it.
Result<void> finishDirectories(const Tree& tree) {
  for (size_t i = tree.dirs.size(); i-- > 0;) {
    const DirEntry& dir = tree.dirs[i];
    if (i == 0 && !dir.created) continue;
    if (::chmod(dir.dst.c_str(), dir.st.st_mode & 07777) < 0) {
      return failCopy(dir.src, "chmod '" + dir.dst + "'", errno);
    }
    timespec times[2] = {dir.st.st_atim, dir.st.st_mtim};
    if (::utimensat(AT_FDCWD, dir.dst.c_str(), times, 0) < 0) {
      return failCopy(dir.src, "set times of '" + dir.dst + "'", errno);
    }
  }
  return {};
}

// Lists a file source: one file, to dst or into dst.
Result<Tree> planFileCopy(const std::string& src, const struct stat& src_st,
                          const std::string& dst_arg) {
  std::string dst = trimSlashes(dst_arg);
  struct stat st {};
  bool into = dst_arg.back() == '/' || (::stat(dst.c_str(), &st) == 0 && S_ISDIR(st.st_mode));
  std::string target = into ? joinPath(dst, baseName(src)) : dst;
  if (auto made = makeDirs(dirName(target)); !made) {
    return withContext(made.error(), "copy '" + src + "'");
  }
  if (::stat(target.c_str(), &st) == 0 && st.st_dev == src_st.st_dev &&
      st.st_ino == src_st.st_ino) {
    return fail(Code::kInvalidArgument,
                "copy '" + src + "': '" + target + "' is the same file");
  }
  removeLeftovers(dirName(target), baseName(target));
  Tree tree;
  tree.files.push_back(FileEntry{src, target, src_st, kNoDir, false});
  tree.bytes = src_st.st_size;
  return tree;
}

// Lists a directory source and creates dst.
Result<Tree> planTreeCopy(const std::string& src, const struct stat& src_st,
                          const std::string& dst_arg, CopyStats& stats, bool refuse_links) {
  std::string dst = trimSlashes(dst_arg);
  std::string src_real = canonicalPath(src);
  std::string dst_real = canonicalPath(dst);
  if (dst_real == src_real || src_real == "/" || startsWith(dst_real, src_real + "/")) {
    return fail(Code::kInvalidArgument,
                "copy '" + src + "': the destination '" + dst + "' is inside the source");
  }
  Tree tree;
  tree.refuse_links = refuse_links;
  tree.dirs.push_back(DirEntry{src, dst, src_st, false});
  std::vector<std::pair<dev_t, ino_t>> ancestors = {{src_st.st_dev, src_st.st_ino}};
  std::vector<std::string> ancestor_paths = {src};
  COHORT_TRY(walkDir(0, ancestors, ancestor_paths, tree));

  struct stat st {};
  if (::stat(dst.c_str(), &st) == 0) {
    if (!S_ISDIR(st.st_mode)) {
      return fail(Code::kInvalidArgument,
                  "copy '" + src + "': the destination '" + dst + "' is not a directory");
    }
  } else if (errno == ENOENT) {
    if (auto made = makeDirs(dirName(dst)); !made) {
      return withContext(made.error(), "copy '" + src + "'");
    }
    if (::mkdir(dst.c_str(), (src_st.st_mode & 07777) | 0700) == 0) {
      tree.dirs[0].created = true;
      ++stats.dirs_created;
    } else if (errno != EEXIST || ::stat(dst.c_str(), &st) < 0 || !S_ISDIR(st.st_mode)) {
      // EEXIST: another copy into the same place (another node's) made it first; fine.
      return failCopy(src, "create directory '" + dst + "'", errno);
    }
  } else {
    return failCopy(src, "stat '" + dst + "'", errno);
  }
  COHORT_TRY(prepareDirectories(tree, stats));
  return tree;
}

}  // namespace

FileWriter& directWriter() {
  struct Direct final : FileWriter {
    Result<void> write(int fd, std::string_view data, int64_t) override {
      return writeAll(fd, data);
    }
  };
  static Direct direct;
  return direct;
}

Result<CopyStats> copyTree(const std::string& src_arg, const std::string& dst_arg,
                           const CopyOptions& options) {
  const auto start = Clock::now();
  if (options.workers < 1 || options.workers > kMaxCopyWorkers) {
    return fail(Code::kInvalidArgument, "copy: workers must be 1 to " +
                                            std::to_string(kMaxCopyWorkers) + ", got " +
                                            std::to_string(options.workers));
  }
  if (src_arg.empty() || dst_arg.empty()) {
    return fail(Code::kInvalidArgument, "copy: empty source or destination");
  }
  const std::string src = trimSlashes(src_arg);
  struct stat src_st {};
  if (::stat(src.c_str(), &src_st) < 0) return failErrno("copy: source '" + src + "'");
  if (options.refuse_links) {
    if (::lstat(src.c_str(), &src_st) < 0) return failErrno("copy: source '" + src + "'");
    if (std::string why = sourceRefusal(src_st); !why.empty()) {
      return fail(Code::kInvalidArgument, "copy '" + src + "': " + why);
    }
  }
  CopyStats stats;
  Tree tree;
  if (S_ISREG(src_st.st_mode)) {
    COHORT_ASSIGN(tree, planFileCopy(src, src_st, dst_arg));
  } else if (S_ISDIR(src_st.st_mode)) {
    COHORT_ASSIGN(tree, planTreeCopy(src, src_st, dst_arg, stats, options.refuse_links));
  } else {
    return fail(Code::kInvalidArgument,
                "copy: source '" + src + "' is not a regular file or directory");
  }
  tree.refuse_links = options.refuse_links;
  CopyJob job(options, std::move(tree));
  COHORT_ASSIGN(stats, job.run(start, stats));
  COHORT_TRY(finishDirectories(job.tree()));
  stats.seconds = secondsSince(start);
  return stats;
}

}  // namespace cohort::storage
