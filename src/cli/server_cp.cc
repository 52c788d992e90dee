#include "cli/server_cp.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <vector>

#include "util/fd.h"
#include "util/text.h"

namespace cohort::cli {

namespace {

using Json = nlohmann::json;

constexpr std::string_view kScheme = "server://";

struct StoreUri {
  std::string bucket;
  std::string key;  // "" for the bucket's top; no leading or trailing '/'
};

Result<StoreUri> parseServerUri(const std::string& uri) {
  std::string rest = uri.substr(kScheme.size());
  StoreUri out;
  size_t slash = rest.find('/');
  out.bucket = rest.substr(0, slash);
  if (slash != std::string::npos) out.key = rest.substr(slash + 1);
  while (!out.key.empty() && out.key.back() == '/') out.key.pop_back();
  if (out.bucket.empty()) {
    return fail(Code::kInvalidArgument, "'" + uri + "': expected server://BUCKET/PATH");
  }
  for (const std::string& part : split(out.key, '/')) {
    if (part == ".." || part == ".") {
      return fail(Code::kInvalidArgument, "'" + uri + "': '.' and '..' are not allowed");
    }
  }
  return out;
}

std::string apiPath(const StoreUri& u, const std::string& rel) {
  std::string path = "/v1/store/" + urlEncode(u.bucket);
  std::string key = u.key.empty() ? rel : rel.empty() ? u.key : u.key + "/" + rel;
  for (const std::string& part : split(key, '/')) {
    if (!part.empty()) path += "/" + urlEncode(part);
  }
  return path;
}

// Every regular file under `root` (links followed, as cohort cp does), relative to it.
Result<void> listLocal(const std::string& root, const std::string& rel,
                       std::vector<std::string>& out, int depth) {
  if (depth > 128) return fail(Code::kInvalidArgument, "'" + root + "': nested too deep");
  const std::string dir = rel.empty() ? root : root + "/" + rel;
  std::unique_ptr<DIR, int (*)(DIR*)> d(::opendir(dir.c_str()), ::closedir);
  if (!d) return failErrno("read the directory '" + dir + "'");
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d.get())) {
    std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) {
    const std::string child = rel.empty() ? name : rel + "/" + name;
    struct stat st {};
    if (::stat((root + "/" + child).c_str(), &st) != 0) {
      return failErrno("stat '" + root + "/" + child + "'");
    }
    if (S_ISDIR(st.st_mode)) {
      COHORT_TRY(listLocal(root, child, out, depth + 1));
    } else if (S_ISREG(st.st_mode)) {
      out.push_back(child);
    } else {
      return fail(Code::kInvalidArgument,
                  "'" + root + "/" + child + "' is not a file or a directory");
    }
  }
  return {};
}

void showProgress(bool progress, const std::string& line) {
  if (progress) std::fprintf(stderr, "\rcohort: cp: %s\x1b[K", line.c_str());
}

Result<ServerCopyStats> upload(ApiClient& api, const std::string& src, const std::string& dst,
                               bool progress) {
  COHORT_ASSIGN(StoreUri to, parseServerUri(dst));
  struct stat st {};
  if (::stat(src.c_str(), &st) != 0) return failErrno("'" + src + "'");
  std::vector<std::pair<std::string, std::string>> files;  // local path, key below `to`
  if (S_ISDIR(st.st_mode)) {
    std::vector<std::string> rels;
    COHORT_TRY(listLocal(src, "", rels, 0));
    for (const std::string& rel : rels) files.emplace_back(src + "/" + rel, rel);
  } else {
    std::string name = src.substr(src.rfind('/') + 1);
    // Like cohort cp: into DST when it ends in '/' (or names a bucket's top).
    const bool into = dst.back() == '/' || to.key.empty();
    files.emplace_back(src, into ? name : "");
  }
  ServerCopyStats stats;
  for (size_t i = 0; i < files.size(); ++i) {
    const auto& [path, rel] = files[i];
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd.valid()) return failErrno("open '" + path + "'");
    struct stat fst {};
    if (::fstat(fd.get(), &fst) != 0) return failErrno("stat '" + path + "'");
    showProgress(progress, std::to_string(i + 1) + "/" + std::to_string(files.size()) + " files, " +
                               formatSize(static_cast<double>(stats.bytes)));
    auto sent = api.sendFile("PUT", apiPath(to, rel), fd.get(), static_cast<uint64_t>(fst.st_size),
                             "application/octet-stream", {});
    if (!sent) return withContext(sent.error(), "copy '" + path + "'");
    ++stats.files;
    stats.bytes += fst.st_size;
  }
  return stats;
}

// A relative path from the server's listing, checked before anything is written with it.
bool safeRel(const std::string& rel) {
  if (rel.empty() || rel[0] == '/') return false;
  for (const std::string& part : split(rel, '/')) {
    if (part.empty() || part == "." || part == "..") return false;
  }
  return true;
}

Result<void> download1(ApiClient& api, const std::string& api_path, const std::string& target) {
  const std::string dir = target.substr(0, target.rfind('/'));
  COHORT_TRY(makeDirs(dir.empty() ? "/" : dir));
  std::string tmp = target + ".cohort-tmp-XXXXXX";
  UniqueFd fd(::mkostemp(tmp.data(), O_CLOEXEC));
  if (!fd.valid()) return failErrno("create '" + tmp + "'");
  std::string write_error;
  auto got = api.stream(
      api_path, {},
      [&](const char* data, size_t size) {
        auto w = writeAll(fd.get(), std::string_view(data, size));
        if (!w) write_error = w.error().message;
        return static_cast<bool>(w);
      },
      false);
  if (!got || !write_error.empty()) {
    ::unlink(tmp.c_str());
    if (!write_error.empty()) return fail(Code::kIo, "write '" + target + "': " + write_error);
    return tl::unexpected(got.error());
  }
  ::fchmod(fd.get(), 0644);
  if (::rename(tmp.c_str(), target.c_str()) != 0) {
    auto e = failErrno("rename to '" + target + "'");
    ::unlink(tmp.c_str());
    return e;
  }
  return {};
}

Result<ServerCopyStats> download(ApiClient& api, const std::string& src, const std::string& dst,
                                 bool progress) {
  COHORT_ASSIGN(StoreUri from, parseServerUri(src));
  ServerCopyStats stats;
  auto listing = api.call("GET", apiPath(from, ""), nullptr, {{"list", "1"}});
  if (!listing && listing.error().code != Code::kNotFound) {
    return withContext(listing.error(), "'" + src + "'");
  }
  const Json files = listing && listing->is_object() ? (*listing)["files"] : Json::array();
  if (!listing) {
    // Not a directory: one file, to DST or into it.
    struct stat st {};
    std::string target = dst;
    if ((::stat(dst.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) || dst.back() == '/') {
      target = (dst.back() == '/' ? dst : dst + "/") + from.key.substr(from.key.rfind('/') + 1);
    }
    auto one = download1(api, apiPath(from, ""), target);
    if (!one) return withContext(one.error(), "'" + src + "'");
    stats.files = 1;
    return stats;
  }
  if (!files.is_array()) return fail(Code::kInternal, "the store's listing is not a list");
  COHORT_TRY(makeDirs(dst));
  size_t i = 0;
  for (const Json& f : files) {
    const std::string rel = f.is_object() ? f.value("path", "") : "";
    if (!safeRel(rel)) {
      return fail(Code::kInvalidArgument, "'" + src + "': the server listed '" + rel +
                                              "', which would land outside '" + dst +
                                              "'; nothing more was written");
    }
    showProgress(progress, std::to_string(++i) + "/" + std::to_string(files.size()) + " files");
    auto one = download1(api, apiPath(from, rel), dst + "/" + rel);
    if (!one) return withContext(one.error(), "copy '" + rel + "'");
    ++stats.files;
    stats.bytes += f.value("size", int64_t{0});
  }
  return stats;
}

}  // namespace

bool isServerUri(const std::string& arg) { return startsWith(arg, kScheme); }

Result<ServerCopyStats> copyWithServer(ApiClient& api, const std::string& src,
                                       const std::string& dst, bool progress) {
  if (isServerUri(src) == isServerUri(dst)) {
    return fail(Code::kInvalidArgument,
                "copy between a local path and server://...: one of SRC and DST must be each");
  }
  auto stats =
      isServerUri(dst) ? upload(api, src, dst, progress) : download(api, src, dst, progress);
  if (progress) std::fputs("\r\x1b[K", stderr);
  return stats;
}

}  // namespace cohort::cli
