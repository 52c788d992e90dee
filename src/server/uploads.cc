#include "server/uploads.h"

#include <dirent.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>
#include <filesystem>
#include <functional>
#include <memory>

#include "job/layout.h"
#include "util/fd.h"
#include "util/text.h"

namespace cohort::server {

namespace {

constexpr std::string_view kIdPrefix = "up-";
constexpr size_t kIdHexDigits = 24;

bool validId(const std::string& id) {
  if (id.size() != kIdPrefix.size() + kIdHexDigits || !startsWith(id, kIdPrefix)) return false;
  for (size_t i = kIdPrefix.size(); i < id.size(); ++i) {
    char c = id[i];
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

// A directory of root's that the account's own process (and no other account's) may pass
// through: mode 0710 with the account's group, or 0700 where the server gives accounts no
// identity of their own.
Result<void> makeDirFor(const std::string& path, const account::Identity& as) {
  if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) {
    return failErrno("create '" + path + "'");
  }
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return fail(Code::kIo, "'" + path + "' is not a directory");
  }
  if (account::needsWorker(as) &&
      (::lchown(path.c_str(), ::geteuid(), as.gid) != 0 || ::chmod(path.c_str(), 0710) != 0)) {
    return failErrno("give '" + path + "' to gid " + std::to_string(as.gid));
  }
  return {};
}

// Where a new upload is extracted, as the account: in a directory of its own, under a name no
// job can take. Made empty, the account's; its tree is `partial + "/tree"`.
Result<std::string> makePartial(const std::string& dir, const std::string& id,
                                const account::Identity& as) {
  const std::string partial = dir + "/.partial-" + id;
  if (::mkdir(partial.c_str(), 0700) != 0) return failErrno("create '" + partial + "'");
  if (account::needsWorker(as) && ::lchown(partial.c_str(), as.uid, as.gid) != 0) {
    auto err = failErrno("give '" + partial + "' to uid " + std::to_string(as.uid));
    ::rmdir(partial.c_str());
    return err;
  }
  return partial;
}

// The extracted tree named as the upload, once the work is done: a directory (what the account's
// process left there is checked, never followed), renamed by this process.
Result<void> publish(const std::string& partial, const std::string& final_path) {
  const std::string tree = partial + "/tree";
  struct stat st {};
  if (::lstat(tree.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return fail(Code::kIo, "the upload's tree is not a directory");
  }
  if (::rename(tree.c_str(), final_path.c_str()) != 0) return failErrno("rename '" + tree + "'");
  return {};
}

void removeAs(const std::string& path, const account::Identity& as) {
  (void)account::runAs(as, account::Remove{{path}}, {});
  std::error_code ec;
  std::filesystem::remove_all(path, ec);  // what is left: this process's own (the partial dir)
}

// Removes the account's expired uploads (and extractions a crash left), as the account `as`;
// returns how many wait. Without `as`, only counts them.
int sweep(const std::string& dir, const account::Identity* as) {
  std::unique_ptr<DIR, int (*)(DIR*)> d(::opendir(dir.c_str()), ::closedir);
  if (!d) return 0;
  const time_t now = ::time(nullptr);
  const auto lifetime = std::chrono::duration_cast<std::chrono::seconds>(kUploadLifetime).count();
  int waiting = 0;
  while (dirent* ent = ::readdir(d.get())) {
    const std::string name = ent->d_name;
    if (name == "." || name == "..") continue;
    const std::string path = dir + "/" + name;
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) continue;
    if (now - st.st_mtime < lifetime) {
      if (validId(name)) ++waiting;
      continue;
    }
    if (as) removeAs(path, *as);
  }
  return waiting;
}

// A new upload of `account`: `extract` (done as the account) fills the tree it is given, which
// then becomes the upload. A job finds a whole upload or none.
Result<Upload> place(const std::string& data_root, const std::string& account,
                     const account::Identity& as,
                     const std::function<Result<account::Done>(const std::string&)>& extract) {
  const std::string root = job::uploadsDir(data_root);
  if (::mkdir(root.c_str(), 0711) != 0 && errno != EEXIST) return failErrno("create '" + root + "'");
  const std::string dir = root + "/" + account;
  COHORT_TRY(makeDirFor(dir, as));
  (void)sweep(dir, &as);  // how many may wait is the account's uploads quota (server/quotas.h)
  Upload upload;
  COHORT_ASSIGN(std::string hex, randomHex(kIdHexDigits / 2));
  upload.id = std::string(kIdPrefix) + hex;
  COHORT_ASSIGN(std::string partial, makePartial(dir, upload.id, as));
  auto done = extract(partial + "/tree");
  Result<void> published = done ? publish(partial, dir + "/" + upload.id)
                                : Result<void>(tl::unexpected<Error>(done.error()));
  removeAs(partial, as);
  if (!published) return tl::unexpected<Error>(published.error());
  upload.stats = {done->files, done->dirs, done->links, done->bytes};
  return upload;
}

}  // namespace

Result<Upload> receiveUploadFile(const std::string& data_root, const std::string& account,
                                 const account::Identity& as, int fd,
                                 const storage::ArchiveLimits& limits) {
  if (::lseek(fd, 0, SEEK_SET) != 0) return failErrno("lseek the upload");
  return place(data_root, account, as, [&](const std::string& dest) {
    return account::runAs(as, account::Extract{dest, limits}, {}, fd);
  });
}

int waitingUploads(const std::string& data_root, const std::string& account) {
  return sweep(job::uploadsDir(data_root) + "/" + account, nullptr);
}

Result<Upload> receiveUpload(const std::string& data_root, const std::string& account,
                             const account::Identity& as, std::string_view archive,
                             const storage::ArchiveLimits& limits) {
  UniqueFd fd(::memfd_create("cohort-upload", MFD_CLOEXEC));
  if (!fd.valid()) return failErrno("memfd_create");
  COHORT_TRY(writeAll(fd.get(), archive));
  if (::lseek(fd.get(), 0, SEEK_SET) != 0) return failErrno("lseek");
  return place(data_root, account, as, [&](const std::string& dest) {
    return account::runAs(as, account::Extract{dest, limits}, {}, fd.get());
  });
}

Result<Upload> uploadTree(const std::string& data_root, const std::string& account,
                          const account::Identity& as, const std::string& dir,
                          const storage::ArchiveLimits& limits) {
  return place(data_root, account, as, [&](const std::string& dest) {
    return account::runAs(as, account::Snapshot{dir, dest, limits}, {});
  });
}

Result<std::string> pendingUpload(const std::string& data_root, const std::string& account,
                                  const std::string& id) {
  if (!validId(id)) {
    return fail(Code::kInvalidArgument,
                "code: '" + id + "' is not an upload id (POST /v1/uploads answers one: up-...)");
  }
  const std::string path = job::uploadsDir(data_root) + "/" + account + "/" + id;
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return fail(Code::kNotFound,
                "code: upload '" + id +
                    "' not found: each upload runs one job, and one that no job used within an "
                    "hour is removed; upload the code again");
  }
  return path;
}

}  // namespace cohort::server
