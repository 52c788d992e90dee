#include "agent/staging.h"

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <tuple>

#include "env/node_copy.h"
#include "storage/dir_store.h"
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

// The stores a node's inputs come from, handed to the work done as the ranks' user: an object
// store (s3://, store:// in S3) for each input that names one, and the store on disk's bucket
// for each input in it when the work is done by a process of the account's own (which cannot
// read the store's files: the caller reads them for it, account/as_account.h).
struct Grants {
  std::vector<std::unique_ptr<storage::ObjectStore>> owned;
  std::vector<account::StoreGrant> list;

  int add(std::unique_ptr<storage::ObjectStore> store, const std::string& key, bool write) {
    list.push_back({store.get(), key, write});
    owned.push_back(std::move(store));
    return static_cast<int>(list.size()) - 1;
  }
};

// Where one side of a copy is, for the work: a local path, or a key of a granted store.
Result<std::pair<std::string, int>> side(const std::string& path, const plan::InStore& in_store,
                                         bool as_worker, bool write, Grants& grants) {
  if (as_worker && !in_store.empty()) {
    const std::string name = "store://" + in_store.bucket_dir.substr(in_store.bucket_dir.rfind('/') + 1);
    return std::pair{in_store.key, grants.add(storage::makeDirStore(in_store.bucket_dir, name),
                                              in_store.key, write)};
  }
  COHORT_ASSIGN(storage::Place place, placeOf(path));
  if (place.local()) return std::pair{place.path, -1};
  std::string key = place.key;
  return std::pair{key, grants.add(std::move(place.store), key, write)};
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

account::Identity ranksIdentity(const plan::NodePlan& node) {
  if (node.ranks.empty()) return {};
  return {node.ranks.front().uid, node.ranks.front().gid};
}

Result<void> removeScratchDirs(const plan::NodePlan& node) {
  if (node.scratch_dirs.empty()) return {};
  COHORT_TRY(account::runAs(ranksIdentity(node), account::Remove{node.scratch_dirs}, {}));
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
  // starts. Without it the ranks would find another python3. (Looked at by this process only
  // where it is the ranks' own user: it would tell an account what is where it may not look.)
  const account::Identity who = ranksIdentity(node);
  for (const plan::RankPlan& rank : node.ranks) {
    if (account::needsWorker(who)) break;
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
  // The work directory, the job's own /tmp and the rest, and every input: made, read and
  // written as the ranks' user (account/as_account.h).
  const bool as_worker = account::needsWorker(who);
  account::StageInputs work{node.work_dir, node.scratch_dirs, {}};
  Grants grants;
  for (const plan::StagedInput& in : node.inputs) {
    account::Input input;
    input.target = in.target;
    input.link = in.link;
    input.beneath = in.beneath;
    if (in.link) {
      // A link's target: the caller's to check where it is not the account's (its own store);
      // below an input root the work checks it as the account.
      input.source = in.source;
      struct stat st{};
      if (in.beneath.empty() && ::stat(in.source.c_str(), &st) < 0) {
        return failErrno("input '" + in.source + "'");
      }
    } else {
      auto where = side(in.source, in.store, as_worker, false, grants);
      if (!where) return withContext(where.error(), "input '" + in.source + "'");
      std::tie(input.source, input.store) = *where;
    }
    work.inputs.push_back(std::move(input));
  }
  COHORT_ASSIGN(account::Done done, account::runAs(who, work, grants.list));
  StagingResult result;
  result.files = done.files;
  result.bytes = done.bytes;
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

Result<Copied> copyOutput(const plan::OutputPlan& output, const account::Identity& as) {
  Grants grants;
  COHORT_ASSIGN(auto to, side(output.target, output.store, account::needsWorker(as), true, grants));
  COHORT_ASSIGN(account::Done done,
                account::runAs(as, account::CopyOutput{output.source, to.first, to.second},
                               grants.list));
  return Copied{done.files, done.bytes};
}

}  // namespace cohort::agent
