#include "storage/transfer.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "storage/crc64.h"
#include "storage/local_files.h"
#include "util/fd.h"
#include "util/text.h"

namespace cohort::storage {

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kMaxTransferWorkers = 256;
constexpr int kRangeThreads = 4;  // ranges of one large object fetched at once

// One file or object to move, and what is at the other side already.
struct Item {
  std::string local;  // path
  std::string key;    // copyObjects: the destination's
  ObjectInfo object;  // copyObjects: the source object
  int64_t size = 0;   // the source's size
  std::optional<ObjectInfo> remote;
  dev_t dev = 0;  // upload: the file listed (checked again when opened, with refuse_links)
  ino_t ino = 0;
  std::string root, rel;  // download: `local` is root/rel; nothing below root goes through a link
};

// Why a file of an untrusted tree is not copied ("" when it may be).
std::string outputRefusal(const struct stat& st) {
  if (S_ISLNK(st.st_mode)) return "a symbolic link (outputs may not hold links)";
  if (S_ISREG(st.st_mode) && st.st_nlink > 1) {
    return "a file with more than one hard link (outputs may not hold hard links)";
  }
  if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) {
    return "not a regular file or a directory (sockets, FIFOs and devices are not copied)";
  }
  return "";
}

struct Progress {
  std::atomic<int64_t> files_done{0}, bytes_done{0}, bytes_copied{0}, files_copied{0};
};

bool endsWithSlash(const std::string& s) { return !s.empty() && s.back() == '/'; }

// Runs `move` on every item with `workers` threads, reporting progress from this thread.
Result<CopyStats> runAll(std::vector<Item>& items, const TransferOptions& options,
                         const std::function<Result<bool>(Item&, Progress&)>& move) {
  const auto start = Clock::now();
  Progress progress;
  int64_t bytes_total = 0;
  for (const Item& item : items) bytes_total += item.size;
  std::atomic<size_t> next{0};
  std::mutex mu;
  std::condition_variable cv;
  std::optional<Error> first_error;
  const int workers = std::min<int>(options.workers, static_cast<int>(items.size()));
  int running = workers;  // guarded by mu
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < workers; ++t) {
    threads.emplace_back([&] {
      for (size_t i; !stop.load() && (i = next.fetch_add(1)) < items.size();) {
        if (options.cancel && options.cancel->load()) {
          std::lock_guard lock(mu);
          if (!first_error) first_error = Error{Code::kFailedPrecondition, "interrupted"};
          stop = true;
          break;
        }
        Result<bool> skipped = move(items[i], progress);
        if (!skipped) {
          std::lock_guard lock(mu);
          if (!first_error) first_error = skipped.error();
          stop = true;
          break;
        }
        progress.files_done++;
        if (*skipped) progress.bytes_done += items[i].size;
      }
      std::lock_guard lock(mu);
      --running;
      cv.notify_all();
    });
  }
  auto report = [&] {
    if (!options.progress) return;
    CopyProgress p;
    p.files_done = progress.files_done;
    p.files_total = static_cast<int64_t>(items.size());
    p.bytes_done = progress.bytes_done;
    p.bytes_total = bytes_total;
    p.bytes_copied = progress.bytes_copied;
    p.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    options.progress(p);
  };
  {
    std::unique_lock lock(mu);
    while (running > 0) {
      cv.wait_for(lock, std::chrono::milliseconds(100));
      lock.unlock();
      report();
      lock.lock();
    }
  }
  for (auto& t : threads) t.join();
  report();
  if (first_error) return tl::unexpected<Error>(*first_error);
  CopyStats stats;
  stats.files_copied = progress.files_copied;
  stats.files_skipped = static_cast<int64_t>(items.size()) - progress.files_copied;
  stats.bytes_copied = progress.bytes_copied;
  stats.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return stats;
}

// ---- upload ----------------------------------------------------------------------------------

// The files below `root`/`rel`, in name order. Links are followed (a loop is an error) unless
// `refuse_links`, which refuses them and everything outputRefusal() names.
Result<void> walk(const std::string& root, const std::string& rel, bool refuse_links,
                  std::vector<std::pair<dev_t, ino_t>>& ancestors, std::vector<Item>& out) {
  if (ancestors.size() > kMaxDepth) {
    return fail(Code::kInvalidArgument,
                "'" + root + "': nested deeper than " + std::to_string(kMaxDepth) + " directories");
  }
  const std::string dir = rel.empty() ? root : root + "/" + rel;
  UniqueFd fd(
      ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | (refuse_links ? O_NOFOLLOW : 0)));
  struct stat now {};
  if (!fd.valid() || ::fstat(fd.get(), &now) != 0)
    return failErrno("open the directory '" + dir + "'");
  if (now.st_dev != ancestors.back().first || now.st_ino != ancestors.back().second) {
    return fail(Code::kInvalidArgument, "copy '" + dir + "': changed while it was copied");
  }
  DIR* listing = ::fdopendir(fd.get());
  if (!listing) return failErrno("read the directory '" + dir + "'");
  fd.release();
  std::unique_ptr<DIR, int (*)(DIR*)> d(listing, ::closedir);
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d.get())) {
    std::string name = e->d_name;
    if (name == "." || name == ".." || name.rfind(kTmpPrefix, 0) == 0) continue;
    names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) {
    const std::string child = rel.empty() ? name : rel + "/" + name;
    const std::string path = root + "/" + child;
    struct stat st {};
    if (::fstatat(::dirfd(listing), name.c_str(), &st, refuse_links ? AT_SYMLINK_NOFOLLOW : 0) !=
        0) {
      if (errno == ENOENT && !refuse_links) {
        return fail(Code::kInvalidArgument, "'" + path + "': a dangling symbolic link");
      }
      return failErrno("stat '" + path + "'");
    }
    if (refuse_links) {
      if (std::string why = outputRefusal(st); !why.empty()) {
        return fail(Code::kInvalidArgument, "copy '" + path + "': " + why);
      }
    }
    if (S_ISDIR(st.st_mode)) {
      for (const auto& [dev, ino] : ancestors) {
        if (dev == st.st_dev && ino == st.st_ino) {
          return fail(Code::kInvalidArgument,
                      "'" + path + "': a symbolic link loop (it leads back to a directory above)");
        }
      }
      ancestors.emplace_back(st.st_dev, st.st_ino);
      COHORT_TRY(walk(root, child, refuse_links, ancestors, out));
      ancestors.pop_back();
    } else if (S_ISREG(st.st_mode)) {
      Item item;
      item.local = path;
      item.key = child;  // relative for now; the caller puts the prefix in front
      item.size = st.st_size;
      item.dev = st.st_dev;
      item.ino = st.st_ino;
      out.push_back(std::move(item));
    } else {
      return fail(Code::kInvalidArgument,
                  "'" + path +
                      "': not a regular file or a directory (sockets, FIFOs and "
                      "devices are not copied)");
    }
  }
  return {};
}

Result<bool> uploadOne(ObjectStore& store, Item& item, Progress& progress,
                       const TransferOptions& options) {
  UniqueFd fd(::open(item.local.c_str(),
                     O_RDONLY | O_CLOEXEC | (options.refuse_links ? O_NOFOLLOW | O_NONBLOCK : 0)));
  if (!fd.valid()) return failErrno("copy '" + item.local + "': open");
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return failErrno("copy '" + item.local + "': stat");
  if (options.refuse_links &&
      (st.st_dev != item.dev || st.st_ino != item.ino || !outputRefusal(st).empty())) {
    return fail(Code::kInvalidArgument, "copy '" + item.local + "': changed while it was copied");
  }
  const int64_t size = st.st_size;
  auto local_etag = [&]() -> Result<std::string> {
    auto tag = store.etagOf(fd.get(), size);
    if (!tag) return withContext(tag.error(), "copy '" + item.local + "'");
    return tag;
  };
  if (item.remote && item.remote->size == size && store.checkable(*item.remote)) {
    COHORT_ASSIGN(std::string tag, local_etag());
    if (tag == item.remote->etag) return true;
  }
  // A large file's parts count as they are stored, so that its progress moves.
  std::atomic<int64_t> counted{0};
  auto stored = store.put(item.key, fd.get(), size, options.cancel, [&](int64_t bytes) {
    counted += bytes;
    progress.bytes_done += bytes;
  });
  if (!stored) {
    if (stored.error().message == "interrupted") return tl::unexpected<Error>(stored.error());
    return withContext(stored.error(), "copy '" + item.local + "' to " + store.uri(item.key));
  }
  progress.bytes_copied += size;
  progress.bytes_done += size - counted.load();
  progress.files_copied++;
  return false;
}

// ---- download --------------------------------------------------------------------------------

// Fetches the `object.size` bytes of `object` into `fd`, to check with checkFetched: one
// request, or for a large object its CRC-64/NVME from the store (a HEAD, where the listing
// gave none) and ranges by several threads, their CRCs combined, each range given to
// `arrived` as it is in.
Result<Fetched> fetch(ObjectStore& store, const ObjectInfo& object, int fd,
                      const TransferOptions& options, const std::function<void(int64_t)>& arrived) {
  const std::string& key = object.key;
  const int64_t size = object.size;
  const int64_t part = kPartSize;
  if (size <= part) return store.getRange(key, fd, 0, size);
  Fetched fetched;
  fetched.object_crc = object.crc64;
  if (!fetched.object_crc) {
    COHORT_ASSIGN(ObjectInfo now, store.head(key));
    if (now.size == size && (now.etag == object.etag || object.etag.empty())) {
      fetched.object_crc = now.crc64;
    }
  }
  const int64_t ranges = (size + part - 1) / part;
  std::vector<uint64_t> crcs(static_cast<size_t>(ranges));
  std::atomic<int64_t> next{0};
  std::mutex mu;
  std::optional<Error> first_error;
  auto worker = [&] {
    for (int64_t i; (i = next.fetch_add(1)) < ranges;) {
      if (options.cancel && options.cancel->load()) return;
      {
        std::lock_guard lock(mu);
        if (first_error) return;
      }
      const int64_t at = i * part;
      auto got = store.getRange(key, fd, at, std::min(part, size - at));
      if (!got) {
        std::lock_guard lock(mu);
        if (!first_error) first_error = got.error();
        return;
      }
      crcs[static_cast<size_t>(i)] = got->crc;
      arrived(std::min(part, size - at));
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < std::min<int64_t>(ranges, kRangeThreads); ++t) threads.emplace_back(worker);
  for (auto& t : threads) t.join();
  if (options.cancel && options.cancel->load()) {
    return fail(Code::kFailedPrecondition, "interrupted");
  }
  if (first_error) return tl::unexpected<Error>(*first_error);
  for (int64_t i = 0; i < ranges; ++i) {
    fetched.crc = crc64nvmeCombine(fetched.crc, crcs[static_cast<size_t>(i)],
                                   std::min(part, size - i * part));
  }
  return fetched;
}

Result<bool> downloadOne(ObjectStore& store, Item& item, Progress& progress,
                         const TransferOptions& options) {
  const std::string& remote_etag = item.remote->etag;
  const bool checkable = store.checkable(*item.remote);
  struct stat st {};
  if (::lstat(item.local.c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_size == item.size &&
      checkable) {
    UniqueFd existing(::open(item.local.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
    if (existing.valid()) {
      auto tag = store.etagOf(existing.get(), item.size);
      if (tag && *tag == remote_etag) return true;
    }
  }
  const size_t slash = item.rel.rfind('/');
  const std::string name = slash == std::string::npos ? item.rel : item.rel.substr(slash + 1);
  COHORT_ASSIGN(UniqueFd dir,
                openBeneath(item.root, slash == std::string::npos ? "" : item.rel.substr(0, slash),
                            /*create=*/true));
  std::string tmp;
  auto created = createTemporary(dir.get(), name, tmp);
  if (!created) {
    return withContext(created.error(),
                       "copy " + store.uri(item.key) + " into '" + dirName(item.local) + "'");
  }
  UniqueFd fd = std::move(*created);
  std::atomic<int64_t> fetched{0};  // a large file's ranges, counted as they arrive
  auto result = [&]() -> Result<void> {
    if (::ftruncate(fd.get(), item.size) != 0) {
      return failErrno("copy " + store.uri(item.key) + " to '" + item.local + "': write");
    }
    const std::string what = "copy " + store.uri(item.key) + " to '" + item.local + "'";
    auto got = fetch(store, *item.remote, fd.get(), options, [&](int64_t bytes) {
      fetched += bytes;
      progress.bytes_done += bytes;
    });
    if (!got) {
      if (got.error().message == "interrupted") return tl::unexpected<Error>(got.error());
      return withContext(got.error(), what);
    }
    auto checked = checkFetched(store, *item.remote, fd.get(), *got);
    if (!checked) return withContext(checked.error(), what);
    if (::renameat(dir.get(), tmp.c_str(), dir.get(), name.c_str()) != 0) {
      return failErrno("copy " + store.uri(item.key) + ": rename into '" + item.local + "'");
    }
    return {};
  }();
  if (!result) {
    ::unlinkat(dir.get(), tmp.c_str(), 0);
    return tl::unexpected<Error>(result.error());
  }
  progress.bytes_copied += item.size;
  progress.bytes_done += item.size - fetched.load();
  progress.files_copied++;
  return false;
}

// Copies one object between stores: inside the service when the two stores can, else through
// an unlinked temporary file (checked against the source's etag, then stored and compared).
Result<bool> copyOne(ObjectStore& from, ObjectStore& to, Item& item, Progress& progress,
                     const TransferOptions& options) {
  const ObjectInfo& source = item.object;
  if (item.remote && item.remote->size == source.size && !source.etag.empty() &&
      item.remote->etag == source.etag) {
    return true;
  }
  const std::string what = "copy " + from.uri(source.key) + " to " + to.uri(item.key);
  auto failed = [&](const Error& e) -> tl::unexpected<Error> {
    if (e.message == "interrupted") return tl::unexpected<Error>(e);
    return withContext(e, what);
  };
  std::atomic<int64_t> counted{0};  // a large object's parts or ranges, counted as they move
  auto count = [&](int64_t bytes) {
    counted += bytes;
    progress.bytes_done += bytes;
  };
  auto inside = to.copyIn(from, source, item.key, options.cancel, count);
  if (!inside) return failed(inside.error());
  if (*inside) {
    const std::string& etag = **inside;
    if (from.checkable(source) && to.checkable(ObjectInfo{item.key, source.size, etag}) &&
        etag != source.etag) {
      return fail(Code::kIo, what + ": the copy's etag " + etag + " is not the source's (" +
                                 source.etag + ")");
    }
  } else {
    auto streamed = [&]() -> Result<std::string> {
      const char* tmpdir = std::getenv("TMPDIR");
      COHORT_ASSIGN(UniqueFd file, anonymousFile(tmpdir && *tmpdir ? tmpdir : "/tmp"));
      const int fd = file.get();
      if (::ftruncate(fd, source.size) != 0) return failErrno("write a temporary file");
      COHORT_ASSIGN(Fetched fetched, fetch(from, source, fd, options, count));
      COHORT_TRY(checkFetched(from, source, fd, fetched));
      return to.put(item.key, fd, source.size, options.cancel);  // which checks what it stored
    }();
    if (!streamed) return failed(streamed.error());
  }
  progress.bytes_copied += source.size;
  progress.bytes_done += source.size - counted.load();
  progress.files_copied++;
  return false;
}

// The relative path an object under `prefix` lands at, or an error when it would not stay
// below the destination.
Result<std::string> safeRelative(const ObjectStore& store, const std::string& key,
                                 const std::string& prefix) {
  std::string rel = key.substr(prefix.size());
  if (rel.find('\0') != std::string::npos) {
    return fail(Code::kInvalidArgument,
                store.uri(prefix) + ": a key under it holds a NUL byte and cannot be a file name");
  }
  if (!containedPath(rel)) {
    return fail(Code::kInvalidArgument, store.uri(key) + ": this key has an empty, '.', '..' or '" +
                                            std::string(kTmpPrefix) +
                                            "' part and cannot be copied under a prefix");
  }
  return rel;
}

// What is under `prefix` of `store` already: each item's `remote`, by its key.
Result<void> findRemote(ObjectStore& store, const std::string& prefix, std::vector<Item>& items) {
  COHORT_ASSIGN(std::vector<ObjectInfo> there, store.list(prefix));
  std::map<std::string, ObjectInfo> by_key;
  for (ObjectInfo& o : there) by_key.emplace(o.key, std::move(o));
  for (Item& item : items) {
    if (auto found = by_key.find(item.key); found != by_key.end()) item.remote = found->second;
  }
  return {};
}

// What a download of `key` fetches: the object named so, or everything under "<key>/".
struct Found {
  bool single = false;
  std::string prefix;
  std::vector<ObjectInfo> objects;
};

Result<Found> find(ObjectStore& store, const std::string& key) {
  Found found;
  if (!key.empty() && !endsWithSlash(key)) {
    auto one = store.head(key);
    if (one) {
      found.single = true;
      found.objects.push_back(std::move(*one));
      return found;
    }
    if (one.error().code != Code::kNotFound) return tl::unexpected<Error>(one.error());
  }
  found.prefix = key.empty() || endsWithSlash(key) ? key : key + "/";
  COHORT_ASSIGN(found.objects, store.list(found.prefix));
  if (found.objects.empty()) {
    return fail(Code::kNotFound, store.uri(key) + ": no such object, and no objects under " +
                                     store.uri(found.prefix));
  }
  return found;
}

}  // namespace

Result<void> checkSource(ObjectStore& store, const std::string& key) {
  COHORT_TRY(find(store, key));
  return {};
}

Result<CopyStats> upload(const std::string& local, ObjectStore& store, const std::string& key,
                         const TransferOptions& options) {
  if (options.workers < 1 || options.workers > kMaxTransferWorkers) {
    return fail(Code::kInvalidArgument, "workers must be 1 to 256");
  }
  struct stat st {};
  if (::stat(local.c_str(), &st) != 0) {
    if (errno == ENOENT) return fail(Code::kNotFound, "'" + local + "': no such file or directory");
    return failErrno("stat '" + local + "'");
  }
  std::vector<Item> items;
  std::string prefix;
  if (options.refuse_links) {
    struct stat own {};
    if (::lstat(local.c_str(), &own) != 0) return failErrno("stat '" + local + "'");
    if (std::string why = outputRefusal(own); !why.empty()) {
      return fail(Code::kInvalidArgument, "copy '" + local + "': " + why);
    }
  }
  if (S_ISREG(st.st_mode)) {
    Item item;
    item.local = local;
    item.key = key.empty() || endsWithSlash(key) ? key + baseName(local) : key;
    item.size = st.st_size;
    item.dev = st.st_dev;
    item.ino = st.st_ino;
    items.push_back(std::move(item));
    prefix = items.front().key;
  } else if (S_ISDIR(st.st_mode)) {
    std::vector<std::pair<dev_t, ino_t>> ancestors{{st.st_dev, st.st_ino}};
    COHORT_TRY(walk(local, "", options.refuse_links, ancestors, items));
    prefix = key.empty() || endsWithSlash(key) ? key : key + "/";
    for (Item& item : items) item.key = prefix + item.key;
  } else {
    return fail(Code::kInvalidArgument, "'" + local + "': not a regular file or a directory");
  }
  COHORT_TRY(findRemote(store, prefix, items));
  return runAll(items, options, [&](Item& item, Progress& progress) {
    return uploadOne(store, item, progress, options);
  });
}

Result<CopyStats> download(ObjectStore& store, const std::string& key, const std::string& local,
                           const TransferOptions& options) {
  if (options.workers < 1 || options.workers > kMaxTransferWorkers) {
    return fail(Code::kInvalidArgument, "workers must be 1 to 256");
  }
  COHORT_ASSIGN(Found found, find(store, key));
  std::vector<Item> items;
  if (found.single) {
    struct stat st {};
    bool into = endsWithSlash(local) || (::stat(local.c_str(), &st) == 0 && S_ISDIR(st.st_mode));
    std::string name = baseName(key);
    if (into && name.rfind(kTmpPrefix, 0) == 0) {
      return fail(Code::kInvalidArgument,
                  store.uri(key) + ": a name cohort keeps for its temporary files");
    }
    ObjectInfo& one = found.objects.front();
    Item item;
    item.local = into ? (endsWithSlash(local) ? local : local + "/") + name : local;
    item.root = dirName(item.local);
    item.rel = baseName(item.local);
    item.key = key;
    item.size = one.size;
    item.remote = std::move(one);
    COHORT_TRY(makeDirs(items.emplace_back(std::move(item)).root));
  } else {
    std::string root = local;
    while (root.size() > 1 && root.back() == '/') root.pop_back();
    for (ObjectInfo& o : found.objects) {
      if (endsWithSlash(o.key) && o.size == 0) continue;  // a "folder" marker
      COHORT_ASSIGN(std::string rel, safeRelative(store, o.key, found.prefix));
      Item item;
      item.local = root + "/" + rel;
      item.root = root;
      item.rel = rel;
      item.key = o.key;
      item.size = o.size;
      item.remote = std::move(o);
      items.push_back(std::move(item));
    }
    COHORT_TRY(makeDirs(root));
  }
  return runAll(items, options, [&](Item& item, Progress& progress) {
    return downloadOne(store, item, progress, options);
  });
}

Result<CopyStats> copyObjects(ObjectStore& from, const std::string& from_key, ObjectStore& to,
                              const std::string& to_key, const TransferOptions& options) {
  if (options.workers < 1 || options.workers > kMaxTransferWorkers) {
    return fail(Code::kInvalidArgument, "workers must be 1 to 256");
  }
  COHORT_ASSIGN(Found found, find(from, from_key));
  const bool into = to_key.empty() || endsWithSlash(to_key);
  std::vector<Item> items;
  std::string prefix;  // what is listed at the destination
  if (found.single) {
    Item item;
    item.key = into ? to_key + baseName(from_key) : to_key;
    item.object = std::move(found.objects.front());
    item.size = item.object.size;
    prefix = item.key;
    items.push_back(std::move(item));
  } else {
    prefix = into ? to_key : to_key + "/";
    for (ObjectInfo& o : found.objects) {
      if (endsWithSlash(o.key) && o.size == 0) continue;  // a "folder" marker
      COHORT_ASSIGN(std::string rel, safeRelative(from, o.key, found.prefix));
      Item item;
      item.key = prefix + rel;
      item.size = o.size;
      item.object = std::move(o);
      items.push_back(std::move(item));
    }
  }
  COHORT_TRY(findRemote(to, prefix, items));
  return runAll(items, options, [&](Item& item, Progress& progress) {
    return copyOne(from, to, item, progress, options);
  });
}

}  // namespace cohort::storage
