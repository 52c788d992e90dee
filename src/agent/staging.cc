#include "agent/staging.h"

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "env/node_copy.h"
#include "job/layout.h"
#include "storage/copy.h"
#include "storage/place.h"
#include "storage/transfer.h"
#include "util/fd.h"
#include "util/text.h"

namespace cohort::agent {

namespace {

// Where an input comes from or an output goes: a path, or an object store (s3://, or store://
// kept in S3), which every node reaches itself with the credentials of its environment. A store
// on disk is a path here: the coordinator resolved it.
Result<storage::Place> placeOf(const std::string& uri) {
  return storage::openPlace(uri, /*data_root=*/"");
}

// A sandboxed job's own /tmp and the rest (NodePlan::scratch_dirs), empty and for the ranks'
// user alone. One that is there already is not this job's (a name taken on the machine's
// /dev/shm): refused rather than used.
Result<void> makeScratchDirs(const plan::NodePlan& node) {
  for (const std::string& dir : node.scratch_dirs) {
    COHORT_TRY(makeDirs(dir.substr(0, dir.rfind('/'))));
    if (::mkdir(dir.c_str(), 0700) != 0) return failErrno("create '" + dir + "'");
    if (!node.ranks.empty() && node.ranks.front().uid >= 0 &&
        ::lchown(dir.c_str(), node.ranks.front().uid, node.ranks.front().gid) < 0) {
      return failErrno("chown '" + dir + "'");
    }
  }
  return {};
}

// The cohort binary this agent runs: what builds a saved environment as the ranks' user.
std::string selfBinary() {
  char path[4096];
  ssize_t n = ::readlink("/proc/self/exe", path, sizeof path - 1);
  return n > 0 ? std::string(path, static_cast<size_t>(n)) : std::string("cohort");
}

// How a saved environment is built on this node: as the ranks' user, and in a sandbox when they
// run in one, with the data root (every job of this data root, a server's records) hidden.
env::Confinement buildConfinement(const plan::NodePlan& node) {
  env::Confinement how;
  if (node.ranks.empty()) return how;
  how.uid = node.ranks.front().uid;
  how.gid = node.ranks.front().gid;
  how.sandbox = node.ranks.front().sandboxed;
  // <data root>/jobs/<id>/work/node<i>
  std::filesystem::path root = std::filesystem::path(node.work_dir);
  for (int up = 0; up < 4 && root.has_parent_path(); ++up) root = root.parent_path();
  if (root.has_parent_path() && root != "/") how.hide.push_back(root.string());
  return how;
}

}  // namespace

Result<void> removeScratchDirs(const plan::NodePlan& node) {
  for (const std::string& dir : node.scratch_dirs) {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);  // a link is removed, not followed
    if (ec) return fail(Code::kIo, "remove '" + dir + "': " + ec.message());
  }
  return {};
}

Result<StagingResult> stageInputs(const plan::NodePlan& node) {
  auto start = std::chrono::steady_clock::now();
  // The job's environment was built where the job was submitted; a node of a cluster sees it
  // there through a file system they share, or has a copy of its own from an earlier job, or
  // builds one now, at the same path, as the ranks' user (env/node_copy.h).
  if (!node.environment.empty()) {
    auto copied = env::copyToNode(
        node.environment, selfBinary(), buildConfinement(node),
        [](const std::string& line) { std::fprintf(stderr, "cohort exec: %s\n", line.c_str()); });
    if (!copied) {
      return fail(copied.error().code, "environment on node " + std::to_string(node.node) + " (" +
                                           node.host + "): " + copied.error().message);
    }
  }
  // A virtual environment the job names itself (VIRTUAL_ENV in its env): there, or no rank
  // starts. Without it the ranks would find another python3.
  for (const plan::RankPlan& rank : node.ranks) {
    for (const auto& [key, venv] : rank.env) {
      if (key != "VIRTUAL_ENV" || ::access((venv + "/bin/python").c_str(), X_OK) == 0) continue;
      return fail(Code::kFailedPrecondition,
                  "environment: " + venv + " is not on node " + std::to_string(node.node) + " (" +
                      node.host +
                      "): keep it on a file system every node shares (COHORT_ENVS), or name a "
                      "cohort environment (environment: NAME), which a node builds itself");
    }
  }
  // An image's layers were found in podman's storage where the job was submitted; each rank
  // mounts them, as root (env/image_exec.h).
  if (node.image) {
    const std::string where = " on node " + std::to_string(node.node) + " (" + node.host + ")";
    if (::geteuid() != 0) {
      return fail(Code::kFailedPrecondition,
                  "environment: image " + node.image->ref + ": its ranks run as root" + where +
                      ", and this node's agent runs as uid " + std::to_string(::geteuid()));
    }
    for (const std::string& layer : node.image->layers) {
      if (::access(layer.c_str(), R_OK | X_OK) == 0) continue;
      return fail(Code::kFailedPrecondition,
                  "environment: image " + node.image->ref + " is not" + where + ": its layer " +
                      layer + " is missing: podman pull " + node.image->ref +
                      " on every node, or keep podman's storage on a file system they share");
    }
  }
  COHORT_TRY(makeDirs(node.work_dir));
  COHORT_TRY(makeScratchDirs(node));
  StagingResult result;
  for (const plan::StagedInput& in : node.inputs) {
    COHORT_TRY(makeDirs(in.target.substr(0, in.target.rfind('/'))));
    if (in.link) {
      struct stat st{};
      if (::stat(in.source.c_str(), &st) < 0) return failErrno("input '" + in.source + "'");
      if (::symlink(in.source.c_str(), in.target.c_str()) < 0) {
        return failErrno("link '" + in.target + "' to '" + in.source + "'");
      }
      ++result.files;
      continue;
    }
    auto copied = [&]() -> Result<storage::CopyStats> {
      COHORT_ASSIGN(storage::Place from, placeOf(in.source));
      if (from.local()) return storage::copyTree(from.path, in.target);
      return storage::download(*from.store, from.key, in.target);
    }();
    if (!copied) return withContext(copied.error(), "input '" + in.source + "'");
    result.files += copied->files_copied + copied->files_skipped;
    result.bytes += copied->bytes_copied;
  }
  // Ranks that run as a user of their own may write beside their inputs (not into them).
  if (!node.ranks.empty() && node.ranks.front().uid >= 0 &&
      ::lchown(node.work_dir.c_str(), node.ranks.front().uid, node.ranks.front().gid) < 0) {
    return failErrno("chown '" + node.work_dir + "'");
  }
  result.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

bool sharesJobDir(const std::string& job_dir, const std::string& mark) {
  auto found = readFile(job::Layout(job_dir).markFile());
  return found && !mark.empty() && trim(*found) == mark;
}

Result<void> prepareOwnJobDir(const std::string& job_dir, const plan::NodePlan& node) {
  const job::Layout layout(job_dir);
  for (const std::string& dir : {layout.filesDir(), layout.logsDir(), layout.outputDir()}) {
    COHORT_TRY(makeDirs(dir));
  }
  // As on the coordinator's machine: the ranks' own user may write their outputs.
  if (!node.ranks.empty() && node.ranks.front().uid >= 0 &&
      ::lchown(layout.outputDir().c_str(), node.ranks.front().uid, node.ranks.front().gid) < 0) {
    return failErrno("chown '" + layout.outputDir() + "'");
  }
  return {};
}

Result<void> writeJobFile(const std::string& job_dir, const std::string& path,
                          const std::string& content) {
  const std::string dir = job::Layout(job_dir).filesDir() + "/";
  if (!startsWith(path, dir) || path.find("/..") != std::string::npos ||
      path.find("/./") != std::string::npos) {
    return fail(Code::kInvalidArgument, "a generated file outside '" + dir + "': '" + path + "'");
  }
  COHORT_TRY(makeDirs(path.substr(0, path.rfind('/'))));
  return writeFileAtomic(path, content, /*durable=*/false);
}

Result<Copied> copyOutput(const plan::OutputPlan& output) {
  storage::CopyStats copied;
  COHORT_ASSIGN(storage::Place to, placeOf(output.target));
  if (!to.local()) {
    storage::TransferOptions untrusted;
    untrusted.refuse_links = true;
    COHORT_ASSIGN(copied, storage::upload(output.source, *to.store, to.key, untrusted));
  } else {
    storage::CopyOptions untrusted;
    untrusted.refuse_links = true;
    COHORT_ASSIGN(copied, storage::copyTree(output.source, to.path, untrusted));
  }
  return Copied{copied.files_copied + copied.files_skipped, copied.bytes_copied};
}

}  // namespace cohort::agent
