#include "server/uploads.h"

#include <dirent.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>
#include <filesystem>
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

Result<void> makePrivateDir(const std::string& path) {
  if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) {
    return failErrno("create '" + path + "'");
  }
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return fail(Code::kIo, "'" + path + "' is not a directory");
  }
  return {};
}

// Removes the account's expired uploads (and extractions a crash left); returns how many wait.
int sweep(const std::string& dir) {
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
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  return waiting;
}

}  // namespace

Result<Upload> receiveUpload(const std::string& data_root, const std::string& account,
                             std::string_view archive, const storage::ArchiveLimits& limits) {
  const std::string root = job::uploadsDir(data_root);
  COHORT_TRY(makePrivateDir(root));
  const std::string dir = root + "/" + account;
  COHORT_TRY(makePrivateDir(dir));
  (void)sweep(dir);  // how many may wait is the account's uploads quota (server/quotas.h)
  Upload upload;
  COHORT_ASSIGN(std::string hex, randomHex(kIdHexDigits / 2));
  upload.id = std::string(kIdPrefix) + hex;
  // Extracted under a name no job can take, then renamed: a job finds a whole upload or none.
  const std::string partial = dir + "/.partial-" + upload.id;
  COHORT_ASSIGN(upload.stats, storage::extractArchive(archive, partial, limits));
  if (::rename(partial.c_str(), (dir + "/" + upload.id).c_str()) != 0) {
    auto err = failErrno("rename '" + partial + "'");
    std::error_code ec;
    std::filesystem::remove_all(partial, ec);
    return err;
  }
  return upload;
}

Result<Upload> receiveUploadFile(const std::string& data_root, const std::string& account,
                                 int fd, const storage::ArchiveLimits& limits) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return failErrno("stat the upload");
  const size_t size = static_cast<size_t>(st.st_size);
  if (size == 0) return receiveUpload(data_root, account, std::string_view(), limits);
  void* data = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  if (data == MAP_FAILED) return failErrno("map the upload");
  auto upload = receiveUpload(data_root, account,
                              std::string_view(static_cast<const char*>(data), size), limits);
  ::munmap(data, size);
  return upload;
}

int waitingUploads(const std::string& data_root, const std::string& account) {
  return sweep(job::uploadsDir(data_root) + "/" + account);
}

Result<Upload> uploadTree(const std::string& data_root, const std::string& account,
                          const std::string& dir, const storage::ArchiveLimits& limits) {
  COHORT_ASSIGN(storage::TreeListing listing,
                storage::listTree(dir, storage::IgnoreRules::fromText(""), limits));
  UniqueFd fd(::memfd_create("cohort-code", MFD_CLOEXEC));
  if (!fd.valid()) return failErrno("memfd_create");
  COHORT_TRY(storage::writeArchive(dir, listing, fd.get()));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return failErrno("stat the copy of '" + dir + "'");
  const size_t size = static_cast<size_t>(st.st_size);
  void* data = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd.get(), 0);
  if (data == MAP_FAILED) return failErrno("map the copy of '" + dir + "'");
  auto upload = receiveUpload(data_root, account,
                              std::string_view(static_cast<const char*>(data), size), limits);
  ::munmap(data, size);
  return upload;
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
