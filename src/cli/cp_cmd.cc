#include "cli/cp_cmd.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/client.h"
#include "cli/server_cp.h"
#include "storage/copy.h"
#include "storage/place.h"
#include "storage/s3.h"
#include "storage/transfer.h"
#include "storage/uri.h"
#include "util/text.h"

namespace cohort::cli {

namespace {

constexpr int kExitInterrupted = 128 + SIGINT;

}  // namespace

// The flags of cohort cp, each once with its help.
const std::vector<FlagSpec>& cpFlags() {
  static const std::vector<FlagSpec> kFlags = withServerFlags({
      {"--workers", "", "N", "files copied at once (default 8)"},
      {"--checksum", "", "",
       "compare content instead of size and modification time to decide what to skip"},
      {"--data-root", "", "DIR",
       "where store:// lives: DIR/store (default $COHORT_DATA_ROOT or ~/.cohort)"},
      {"--quiet", "-q", "", "no progress line and no summary on stderr"},
  });
  return kFlags;
}

std::string cpHelp() {
  return R"(cohort cp: copy files and directory trees in parallel, verifying every file

Usage: cohort cp [flags] SRC DST

SRC and DST are local paths (also file://PATH) or store://BUCKET/PATH, the embedded object
store under <data-root>/store/BUCKET/PATH, or server://BUCKET/PATH, that store on a cohort
server, reached with the login's token (cohort login, COHORT_SERVER/COHORT_TOKEN, or --server
and --token) and its access rules (the account's own buckets and what is shared with it); a
copy to or from a server sends every file (nothing is skipped) and keeps no modes or times.
Or s3://BUCKET/KEY on any S3-compatible service, with the credentials, region and endpoint
AWS's tools use (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION, AWS_ENDPOINT_URL,
AWS_PROFILE and ~/.aws/; never a flag); large files move in parts, several at once, objects
appear only whole, what is already there (same size and etag) is skipped, and modes and times
are not kept. The other side of an s3:// copy is local, store:// or s3:// too: between two
buckets of one endpoint the service copies each object itself (nothing passes through this
machine), else each object is streamed through a temporary file in $TMPDIR.

A directory SRC copies its contents into DST (like rsync -a SRC/ DST/), creating DST; a file
SRC copies to DST, or into DST when DST is a directory or ends in "/". Every file is written
under a temporary name, read back and checked (size and XXH3-64 checksum; an object against
its etag), then renamed into place, so DST never holds a partial file under its final name.
Permission bits and times are kept between local paths. Files already identical in DST (same
size and modification time; objects: same size and etag) are skipped: running the same
command again after an interruption or a failure finishes the copy. Symbolic links in SRC are
followed; a link loop is an error.

Flags:
)" + flagsHelp(cpFlags()) + R"(
Examples:
  cohort cp ./mnist store://datasets/mnist
  cohort cp ./mnist server://datasets/mnist     # into the store of the server you logged in to
  cohort cp store://datasets/mnist /tmp/mnist
  AWS_ENDPOINT_URL=http://10.0.0.5:7070 cohort cp ./mnist s3://datasets/mnist
  cohort cp s3://datasets/mnist s3://archive/2026/mnist   # inside the service
  cohort cp --checksum outputs/ store://runs/exp1/

Exit codes: 0 copied; 1 the copy failed (the message names the file and the cause); 2 bad
usage; 130 interrupted (run the same command again to finish).
)";
}

namespace {

std::atomic<bool> g_interrupted{false};

void onSignal(int) { g_interrupted.store(true); }

int usageError(const std::string& message) {
  std::fprintf(stderr, "cohort: error: cp: %s (see cohort cp --help)\n", message.c_str());
  return kExitUsage;
}

std::string formatSeconds(double seconds) {
  return formatDuration(Millis(static_cast<int64_t>(seconds * 1000)));
}

void printProgress(const storage::CopyProgress& p) {
  double rate = p.seconds > 0 ? static_cast<double>(p.bytes_copied) / p.seconds : 0;
  std::string eta = "?";
  if (rate > 0) eta = formatSeconds(static_cast<double>(p.bytes_total - p.bytes_done) / rate);
  std::fprintf(stderr, "\rcohort: cp: %lld/%lld files, %s/%s, %s/s, ETA %s\x1b[K",
               static_cast<long long>(p.files_done), static_cast<long long>(p.files_total),
               formatSize(static_cast<double>(p.bytes_done)).c_str(),
               formatSize(static_cast<double>(p.bytes_total)).c_str(), formatSize(rate).c_str(),
               eta.c_str());
  std::fflush(stderr);
}

struct CpArgs {
  storage::CopyOptions options;
  std::string data_root;
  std::vector<std::string> paths;
  Args server_flags;  // --server, --token, --ca: with server://
  bool quiet = false;
};

Result<CpArgs> parseCpArgs(int argc, char** argv) {
  COHORT_ASSIGN(Args parsed, parseArgs("cp", argc, argv, cpFlags()));
  CpArgs args;
  args.server_flags = parsed;
  args.paths = parsed.positional;
  args.quiet = parsed.has("--quiet");
  args.options.checksum = parsed.has("--checksum");
  if (parsed.has("--workers")) {
    std::string text = parsed.get("--workers");
    auto workers = parseInt(text);
    if (!workers || *workers < 1 || *workers > 256) {
      return fail(Code::kInvalidArgument, "cp: --workers: expected a number from 1 to 256, got '" +
                                              text + "' (see cohort cp --help)");
    }
    args.options.workers = *workers;
  }
  if (parsed.has("--data-root")) {
    args.data_root = parsed.get("--data-root");
    if (args.data_root.empty()) {
      return fail(Code::kInvalidArgument, "cp: --data-root is empty (see cohort cp --help)");
    }
  }
  return args;
}

// Runs `copy` with SIGINT and SIGTERM turned into its cancel request.
Result<storage::CopyStats> copyInterruptibly(
    const std::function<Result<storage::CopyStats>(const std::atomic<bool>*)>& copy) {
  struct sigaction action {};
  action.sa_handler = onSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  struct sigaction old_int {
  }, old_term{};
  ::sigaction(SIGINT, &action, &old_int);
  ::sigaction(SIGTERM, &action, &old_term);
  auto stats = copy(&g_interrupted);
  ::sigaction(SIGINT, &old_int, nullptr);
  ::sigaction(SIGTERM, &old_term, nullptr);
  return stats;
}

// The end of a copy: its error (and exit code) or its summary.
int finish(const Result<storage::CopyStats>& stats, bool quiet, bool live) {
  if (live) std::fputs("\r\x1b[K", stderr);
  if (!stats) {
    std::fprintf(stderr, "cohort: error: %s\n", stats.error().message.c_str());
    if (g_interrupted.load()) {
      std::fputs("cohort: run the same command again to finish the copy\n", stderr);
      return kExitInterrupted;
    }
    return kExitFailed;
  }
  if (!quiet) {
    double rate =
        stats->seconds > 0 ? static_cast<double>(stats->bytes_copied) / stats->seconds : 0;
    std::fprintf(stderr, "cohort: copied %lld %s (%s) in %s, %s/s; %lld skipped\n",
                 static_cast<long long>(stats->files_copied),
                 stats->files_copied == 1 ? "file" : "files",
                 formatSize(static_cast<double>(stats->bytes_copied)).c_str(),
                 formatSeconds(stats->seconds).c_str(), formatSize(rate).c_str(),
                 static_cast<long long>(stats->files_skipped));
  }
  return 0;
}

// cohort cp with a server:// side, through the server's API.
int copyServer(const CpArgs& args) {
  auto settings = resolveServerSettings(args.server_flags);
  if (!settings) return usageError(settings.error().message);
  ApiClient api(*settings);
  const bool live = !args.quiet && ::isatty(STDERR_FILENO);
  auto stats = copyWithServer(api, args.paths[0], args.paths[1], live);
  if (!stats) {
    std::fprintf(stderr, "cohort: error: cp: %s\n", stats.error().message.c_str());
    return exitCodeFor(stats.error());
  }
  if (!args.quiet) {
    std::fprintf(stderr, "cohort: copied %lld %s (%s) %s %s\n",
                 static_cast<long long>(stats->files), stats->files == 1 ? "file" : "files",
                 formatSize(static_cast<double>(stats->bytes)).c_str(),
                 isServerUri(args.paths[1]) ? "to" : "from", api.server().c_str());
  }
  return 0;
}

// cohort cp with a side in an object store (s3://, or store:// kept in S3): the transfer engine,
// which does not care which store it is.
int copyObjects(CpArgs& args, storage::Place& src, storage::Place& dst) {
  storage::TransferOptions options;
  options.workers = args.options.workers;
  const bool live = !args.quiet && ::isatty(STDERR_FILENO);
  if (live) options.progress = printProgress;
  auto stats = copyInterruptibly([&](const std::atomic<bool>* cancel) {
    options.cancel = cancel;
    if (src.local()) return storage::upload(src.path, *dst.store, dst.key, options);
    if (dst.local()) return storage::download(*src.store, src.key, dst.path, options);
    return storage::copyObjects(*src.store, src.key, *dst.store, dst.key, options);
  });
  return finish(stats, args.quiet, live);
}

}  // namespace

int cmdCp(int argc, char** argv) {
  auto args = parseCpArgs(argc, argv);
  if (!args) {
    std::fprintf(stderr, "cohort: error: %s\n", args.error().message.c_str());
    return kExitUsage;
  }
  if (args->paths.size() != 2) {
    return usageError("expected SRC and DST, got " + std::to_string(args->paths.size()) +
                      " path(s)");
  }
  if (isServerUri(args->paths[0]) || isServerUri(args->paths[1])) {
    if (storage::isS3Uri(args->paths[0]) || storage::isS3Uri(args->paths[1])) {
      return usageError("copy between '" + args->paths[0] + "' and '" + args->paths[1] +
                        "' is not supported: the other side of a server:// copy is a local "
                        "path; copy through a local directory");
    }
    return copyServer(*args);
  }
  const std::string data_root = dataRoot(args->data_root);
  storage::Place places[2];
  for (int i = 0; i < 2; ++i) {
    auto place = storage::openPlace(args->paths[static_cast<size_t>(i)], data_root);
    if (!place) {
      // A URI or configuration a person can fix is a usage error; a missing library is not.
      if (place.error().code == Code::kInvalidArgument ||
          place.error().code == Code::kUnauthenticated) {
        return usageError(place.error().message);
      }
      std::fprintf(stderr, "cohort: error: cp: %s\n", place.error().message.c_str());
      return kExitFailed;
    }
    places[i] = std::move(*place);
  }
  if (!places[0].local() || !places[1].local()) return copyObjects(*args, places[0], places[1]);
  const std::string resolved[2] = {places[0].path, places[1].path};

  const bool live = !args->quiet && ::isatty(STDERR_FILENO);
  if (live) args->options.progress = printProgress;
  auto stats = copyInterruptibly([&](const std::atomic<bool>* cancel) {
    args->options.cancel = cancel;
    return storage::copyTree(resolved[0], resolved[1], args->options);
  });
  return finish(stats, args->quiet, live);
}

}  // namespace cohort::cli
