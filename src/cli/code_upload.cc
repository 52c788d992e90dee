#include "cli/code_upload.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "storage/archive.h"
#include "util/fd.h"
#include "util/text.h"

namespace cohort::cli {

namespace {

constexpr int64_t kShowProgressFrom = int64_t{8} << 20;

// An unnamed file in $TMPDIR (or /tmp), gone when closed.
Result<UniqueFd> scratchFile() {
  const char* tmp = std::getenv("TMPDIR");
  std::string dir = tmp && *tmp ? tmp : "/tmp";
  UniqueFd fd(::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600));
  if (fd.valid()) return fd;
  std::string path = dir + "/cohort-upload-XXXXXX";
  fd = UniqueFd(::mkostemp(path.data(), O_CLOEXEC));
  if (!fd.valid()) return failErrno("create a temporary file in '" + dir + "'");
  ::unlink(path.c_str());
  return fd;
}

}  // namespace

Result<std::string> uploadWorkdir(ApiClient& api, const std::string& workdir,
                                  const CodeUploadOptions& options) {
  COHORT_ASSIGN(storage::IgnoreRules rules, storage::IgnoreRules::forTree(workdir));
  const std::string rules_note = rules.source().empty()
                                     ? "add a .cohortignore (gitignore patterns) to the workdir"
                                     : "add patterns to " + rules.source();
  storage::ArchiveLimits limits;
  limits.max_bytes = options.max_bytes;
  auto listing = storage::listTree(workdir, rules, limits);
  if (!listing) {
    if (listing.error().code == Code::kTooLarge) {
      return fail(Code::kTooLarge, listing.error().message + ": leave files out (" + rules_note +
                                       "; put data in the store and name it in inputs), or "
                                       "raise the limit with --max-upload SIZE (the server "
                                       "takes up to its own --max-upload, 1Gi by default)");
    }
    return tl::unexpected(listing.error());
  }
  COHORT_ASSIGN(UniqueFd file, scratchFile());
  COHORT_TRY(storage::writeArchive(workdir, *listing, file.get()));
  struct stat st {};
  if (::fstat(file.get(), &st) != 0) return failErrno("stat the archive");
  const uint64_t size = static_cast<uint64_t>(st.st_size);

  const bool live =
      !options.quiet && ::isatty(STDERR_FILENO) && static_cast<int64_t>(size) >= kShowProgressFrom;
  auto last = std::chrono::steady_clock::now();
  auto progress = [&](uint64_t sent) {
    if (!live) return;
    auto now = std::chrono::steady_clock::now();
    if (sent < size && now - last < std::chrono::milliseconds(100)) return;
    last = now;
    std::fprintf(stderr, "\rcohort: uploading the workdir: %s of %s (%d%%)\x1b[K",
                 formatSize(static_cast<double>(sent)).c_str(),
                 formatSize(static_cast<double>(size)).c_str(),
                 static_cast<int>(size ? sent * 100 / size : 100));
    std::fflush(stderr);
  };
  auto answer =
      api.sendFile("POST", "/v1/uploads", file.get(), size, "application/x-tar", progress);
  if (live) std::fputs("\r\x1b[K", stderr);
  if (!answer) return withContext(answer.error(), "upload of the workdir '" + workdir + "'");
  if (!answer->is_object() || !(*answer)["id"].is_string()) {
    return fail(Code::kInternal, "POST /v1/uploads: the answer has no upload id");
  }
  if (!options.quiet) {
    std::fprintf(
        stderr, "cohort: uploaded the workdir %s (%lld files, %s%s)\n", workdir.c_str(),
        static_cast<long long>(listing->files),
        formatSize(static_cast<double>(listing->bytes)).c_str(),
        rules.source().empty() ? "" : (", without what " + rules.source() + " names").c_str());
  }
  return (*answer)["id"].get<std::string>();
}

}  // namespace cohort::cli
