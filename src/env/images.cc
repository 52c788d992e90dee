#include "env/images.h"

#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "env/tools.h"
#include "proc/spawn.h"
#include "util/json_reader.h"
#include "util/text.h"

namespace cohort::env {

namespace {

using Json = nlohmann::json;

constexpr Millis kAsk{120000};  // inspect, images, rmi

// A tool's failure in its own words: its stderr (or stdout), trimmed, one line per line.
std::string wordsOf(const proc::Captured& out) {
  return std::string(trim(out.err.empty() ? out.out : out.err));
}

Result<ImageInfo> infoFrom(const Json& j, const std::string& ref) {
  ImageInfo info;
  info.ref = ref;
  info.id = j.value("Id", "");
  info.names = stringItems(j.value("RepoTags", Json::array()));
  info.digests = stringItems(j.value("RepoDigests", Json::array()));
  info.created = j.value("Created", "");
  if (j.contains("Size") && j["Size"].is_number_integer()) info.size = j["Size"].get<int64_t>();
  const Json config = j.value("Config", Json::object());
  for (const std::string& kv :
       stringItems(config.is_object() ? config.value("Env", Json::array()) : Json::array())) {
    const size_t eq = kv.find('=');
    if (eq != std::string::npos && eq > 0)
      info.env.emplace_back(kv.substr(0, eq), kv.substr(eq + 1));
  }
  const Json driver = j.value("GraphDriver", Json::object());
  const std::string name = driver.is_object() ? driver.value("Name", "") : "";
  const Json data = driver.is_object() ? driver.value("Data", Json::object()) : Json::object();
  if (name != "overlay" || !data.is_object() || !data.contains("UpperDir")) {
    return fail(Code::kFailedPrecondition,
                "image '" + ref + "': podman keeps it in its '" + name +
                    "' storage; cohort runs images from podman's overlay storage (the default: "
                    "driver = \"overlay\" in /etc/containers/storage.conf)");
  }
  info.layers.push_back(data.value("UpperDir", ""));
  for (const std::string& lower : split(data.value("LowerDir", ""), ':')) {
    if (!lower.empty()) info.layers.push_back(lower);
  }
  if (info.id.empty() || info.layers.front().empty()) {
    return fail(Code::kInternal, "image '" + ref + "': podman image inspect gave no id or layers");
  }
  return info;
}

// Whether the top layer that has `path` (absolute, inside the image) has it as a file, link or
// directory rather than as a whiteout (a character device 0/0: deleted in that layer).
bool inLayers(const std::vector<std::string>& layers, const std::string& path) {
  for (const std::string& layer : layers) {
    struct stat st {};
    if (::lstat((layer + path).c_str(), &st) != 0) continue;
    return !(S_ISCHR(st.st_mode) && st.st_rdev == makedev(0, 0));
  }
  return false;
}

}  // namespace

Result<std::string> findPodman() {
  const char* path = std::getenv("PATH");
  auto found = proc::findProgram("podman", path ? path : "/usr/bin:/bin", "/");
  if (!found) {
    return fail(Code::kFailedPrecondition, "podman is not installed: apt-get install podman");
  }
  return *found;
}

Result<ImageInfo> inspectImage(const std::string& ref) {
  COHORT_ASSIGN(std::string podman, findPodman());
  COHORT_ASSIGN(proc::Captured out, runQuietly({podman, "image", "inspect", "--", ref}, kAsk));
  if (out.status.shellCode() != 0) {
    const std::string words = wordsOf(out);
    const bool bad = words.find("invalid reference format") != std::string::npos ||
                     words.find("repository name must") != std::string::npos;
    return fail(bad ? Code::kInvalidArgument : Code::kNotFound, "image '" + ref + "': " + words);
  }
  Json all = Json::parse(out.out, nullptr, false);
  if (!all.is_array() || all.empty() || !all[0].is_object()) {
    return fail(Code::kInternal, "image '" + ref + "': podman image inspect printed no image");
  }
  return infoFrom(all[0], ref);
}

Result<ImageInfo> findOrPullImage(const std::string& ref, const Progress& progress) {
  auto found = inspectImage(ref);
  if (found || found.error().code != Code::kNotFound) return found;
  COHORT_ASSIGN(std::string podman, findPodman());
  if (progress) progress("image " + ref + " is not in podman's storage: podman pull " + ref);
  auto pulled = runShowing({podman, "pull", "--", ref}, progress);
  if (!pulled) {
    // podman's own verdict: its "Error: ..." lines (the progress before them was shown).
    std::string words;
    for (const std::string& line : split(pulled.error().message, '\n')) {
      if (startsWith(trim(line), "Error: ")) words += "\n  " + std::string(trim(line));
    }
    return fail(Code::kNotFound, "image '" + ref + "' is not in podman's storage (podman images) " +
                                     "and podman pull " + ref +
                                     " failed:" + (words.empty() ? pulled.error().message : words));
  }
  return inspectImage(ref);
}

std::vector<ImageInfo> localImages() {
  std::vector<ImageInfo> out;
  auto podman = findPodman();
  if (!podman) return out;
  auto listed = runQuietly({*podman, "images", "--format", "json"}, kAsk);
  if (!listed || listed->status.shellCode() != 0) return out;
  Json all = Json::parse(listed->out, nullptr, false);
  if (!all.is_array()) return out;
  for (const Json& j : all) {
    if (!j.is_object()) continue;
    ImageInfo info;
    info.id = j.value("Id", "");
    info.names = stringItems(j.value("Names", Json::array()));
    info.digests = stringItems(j.value("RepoDigests", Json::array()));
    if (j.contains("Size") && j["Size"].is_number_integer()) info.size = j["Size"].get<int64_t>();
    if (j.contains("CreatedAt") && j["CreatedAt"].is_string()) info.created = j["CreatedAt"];
    info.ref = info.names.empty() ? info.id.substr(0, 12) : info.names.front();
    out.push_back(std::move(info));
  }
  return out;
}

Result<void> removeImage(const std::string& ref) {
  COHORT_ASSIGN(std::string podman, findPodman());
  COHORT_ASSIGN(proc::Captured out, runQuietly({podman, "rmi", "--", ref}, kAsk));
  if (out.status.shellCode() != 0) {
    const std::string words = wordsOf(out);
    return fail(words.find("image not known") != std::string::npos ? Code::kNotFound
                                                                   : Code::kFailedPrecondition,
                "image '" + ref + "': " + words);
  }
  return {};
}

std::vector<std::pair<std::string, std::string>> imageVariables(const ImageInfo& image) {
  std::vector<std::pair<std::string, std::string>> out;
  bool path = false;
  for (const auto& [key, value] : image.env) {
    path = path || key == "PATH";
    out.emplace_back(key, value);
  }
  if (!path) out.emplace(out.begin(), "PATH", kDefaultImagePath);
  out.emplace_back("COHORT_IMAGE", image.ref);
  return out;
}

Result<std::string> findInImage(const ImageInfo& image, const std::string& program,
                                const std::string& path, const std::string& workdir) {
  auto missing = [&](const std::string& where) {
    return fail(Code::kNotFound, "'" + program + "' is not " + where + " in image " + image.ref);
  };
  if (program.find('/') != std::string::npos) {
    if (program[0] != '/') {
      const std::string there = workdir + "/" + program;
      if (::access(there.c_str(), X_OK) == 0) return there;
      return fail(Code::kNotFound,
                  "'" + program + "' is not an executable in the workdir '" + workdir + "'");
    }
    if (startsWith(program, workdir + "/") && ::access(program.c_str(), X_OK) == 0) return program;
    if (inLayers(image.layers, program)) return program;
    return missing("there");
  }
  for (const std::string& dir : split(path, ':')) {
    if (dir.empty() || dir[0] != '/') continue;
    const std::string candidate = (dir == "/" ? "" : dir) + "/" + program;
    if (inLayers(image.layers, candidate)) return candidate;
  }
  return missing("on the image's PATH (" + path + ")");
}

}  // namespace cohort::env
