#include "env/node_copy.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "util/fd.h"

namespace cohort::env {

namespace {

constexpr Millis kNodeBuildTimeout{3600000};

// The content hash of the environment built at `dir` ("" when it has none: one built before
// environments had hashes), or nothing when none is built there.
std::optional<std::string> builtHash(const std::string& dir) {
  auto text = readBuiltFile(dir + "/env.json", 1 << 20);
  if (!text) return std::nullopt;
  auto def = nlohmann::json::parse(*text, nullptr, false);
  if (!def.is_object()) return std::nullopt;
  auto hash = def.find("hash");
  return hash != def.end() && hash->is_string() ? hash->get<std::string>() : std::string();
}

bool present(const plan::EnvironmentLayer& layer) {
  auto hash = builtHash(layer.store + "/" + layer.name);
  return hash && (hash->empty() || *hash == layer.hash);
}

// Held while this node builds one content hash.
Result<UniqueFd> lockHash(const std::string& store, const std::string& hash) {
  const std::string path = store + "/.stage-" + hash.substr(0, 32) + ".lock";
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644));
  if (!fd.valid()) return failErrno("open '" + path + "'");
  while (::flock(fd.get(), LOCK_EX) < 0) {
    if (errno != EINTR) return failErrno("lock '" + path + "'");
  }
  return fd;
}

// The store directory on this node. One made here for a saved environment of a user of its own
// (a server's account) is that user's group's only, as on the server.
Result<void> makeStore(const plan::EnvironmentLayer& layer, const Confinement& how) {
  struct stat st {};
  if (::stat(layer.store.c_str(), &st) == 0) return {};
  COHORT_TRY(makeDirs(layer.store));
  if (!layer.preset && how.uid >= 0 &&
      (::chown(layer.store.c_str(), 0, static_cast<gid_t>(how.gid)) != 0 ||
       ::chmod(layer.store.c_str(), 0750) != 0)) {
    return failErrno("give '" + layer.store + "' to gid " + std::to_string(how.gid));
  }
  return {};
}

}  // namespace

Result<NodeCopy> copyToNode(const std::vector<plan::EnvironmentLayer>& layers,
                            const std::string& cohort_bin, const Confinement& how,
                            const Progress& progress) {
  NodeCopy copy;
  for (size_t i = 0; i < layers.size(); ++i) {
    const plan::EnvironmentLayer& layer = layers[i];
    const std::string dir = layer.store + "/" + layer.name;
    if (present(layer)) {
      ++copy.found;
      continue;
    }
    COHORT_TRY(makeStore(layer, how));
    COHORT_ASSIGN(UniqueFd held, lockHash(layer.store, layer.hash));
    if (present(layer)) {  // another job on this node built it meanwhile
      ++copy.found;
      continue;
    }
    if (progress) progress("building environment " + layer.name + " in " + dir);
    if (layer.preset) {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);  // another build of it: not this one's
      auto built = Store({layer.store}).ensureBuilt(layer.name, progress);
      if (!built) return tl::unexpected<Error>(built.error());
    } else {
      // It finds its base in the stores of the layers below it; the preset at the bottom last.
      ConfinedBuild build{{layer.store}, layer.name, layer.from, layer.requirements, layer.lock};
      for (size_t below = i; below-- > 0;) {
        const std::string& store = layers[below].store;
        build.stores.erase(std::remove(build.stores.begin() + 1, build.stores.end(), store),
                           build.stores.end());
        build.stores.push_back(store);
      }
      COHORT_TRY(buildConfined(cohort_bin, build, how, kNodeBuildTimeout, progress));
    }
    auto hash = builtHash(dir);
    if (!hash || *hash != layer.hash) {
      return fail(Code::kFailedPrecondition,
                  "environment " + layer.name + " was built in " + dir +
                      ", but not as planned: its content hash is " +
                      (hash ? hash->substr(0, 12) : std::string("missing")) + ", not " +
                      layer.hash.substr(0, 12) + " (a preset of another cohort version?)");
    }
    ++copy.built;
  }
  return copy;
}

}  // namespace cohort::env
