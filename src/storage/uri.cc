#include "storage/uri.h"

#include <cctype>
#include <vector>

#include "util/text.h"

namespace cohort::storage {

namespace {

constexpr std::string_view kStoreScheme = "store://";
constexpr std::string_view kFileScheme = "file://";

bool isLowerAlnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

// The length of a "scheme://" prefix, or 0 when `uri` has none.
size_t schemeLength(const std::string& uri) {
  if (uri.empty() || !std::isalpha(static_cast<unsigned char>(uri[0]))) return 0;
  size_t i = 1;
  while (i < uri.size() && (std::isalnum(static_cast<unsigned char>(uri[i])) || uri[i] == '+' ||
                            uri[i] == '-' || uri[i] == '.')) {
    ++i;
  }
  return uri.compare(i, 3, "://") == 0 ? i + 3 : 0;
}

tl::unexpected<Error> badUri(const std::string& uri, const std::string& why) {
  return fail(Code::kInvalidArgument, "location '" + uri + "': " + why);
}

}  // namespace

bool validBucketName(const std::string& name) {
  if (name.size() < 3 || name.size() > 63) return false;
  if (!isLowerAlnum(name.front()) || !isLowerAlnum(name.back())) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    if (!isLowerAlnum(c) && c != '.' && c != '-') return false;
    if (c == '.' && i > 0 && name[i - 1] == '.') return false;
  }
  return true;
}

bool validAccountName(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    if (!isLowerAlnum(c) && c != '-' && c != '_') return false;
  }
  return name[0] != '-' && name[0] != '_';
}

std::string storeDirName(const std::string& owner, const std::string& bucket) {
  return owner.empty() ? bucket : owner + "@" + bucket;
}

bool validStoreDirName(const std::string& name) {
  const size_t at = name.find('@');
  if (at == std::string::npos) return validBucketName(name);
  return validAccountName(name.substr(0, at)) && validBucketName(name.substr(at + 1));
}

std::string storeUri(const std::string& dir, const std::string& key) {
  return std::string(kStoreScheme) + dir + (key.empty() ? "" : "/" + key);
}

Result<Location> parseLocation(const std::string& uri) {
  if (uri.empty()) return fail(Code::kInvalidArgument, "location '': empty");
  Location loc;
  size_t scheme = schemeLength(uri);
  if (scheme == 0) {
    loc.path = uri;
    loc.trailing_slash = uri.back() == '/';
    return loc;
  }
  if (uri.compare(0, kFileScheme.size(), kFileScheme) == 0) {
    std::string path = uri.substr(kFileScheme.size());
    if (startsWith(path, "localhost/")) path = path.substr(std::string_view("localhost").size());
    if (path.empty()) return badUri(uri, "no path after 'file://'");
    loc.path = path;
    loc.trailing_slash = path.back() == '/';
    return loc;
  }
  if (uri.compare(0, kStoreScheme.size(), kStoreScheme) != 0) {
    return badUri(uri, "unsupported scheme '" + uri.substr(0, scheme - 3) +
                           "' (use a local path, file:// or store://bucket/path)");
  }
  std::string rest = uri.substr(kStoreScheme.size());
  size_t slash = rest.find('/');
  loc.kind = Location::Kind::kStore;
  loc.bucket = rest.substr(0, slash);
  if (const size_t at = loc.bucket.find('@'); at != std::string::npos) {
    loc.owner = loc.bucket.substr(0, at);
    loc.bucket = loc.bucket.substr(at + 1);
    if (!validAccountName(loc.owner)) {
      return badUri(uri, "invalid account name '" + loc.owner +
                             "' before '@' (expected store://OWNER@BUCKET/path)");
    }
  }
  if (loc.bucket.empty()) return badUri(uri, "no bucket (expected store://bucket/path)");
  if (!validBucketName(loc.bucket)) {
    return badUri(uri, "invalid bucket name '" + loc.bucket +
                           "' (3-63 characters: a-z, 0-9, '.', '-'; starting and ending with a "
                           "letter or digit)");
  }
  std::vector<std::string> parts;
  if (slash != std::string::npos) {
    for (const std::string& part : split(rest.substr(slash + 1), '/')) {
      if (part.empty() || part == ".") continue;
      if (part == "..") return badUri(uri, "'..' is not allowed in a store path");
      parts.push_back(part);
    }
  }
  loc.key = join(parts, "/");
  loc.trailing_slash = loc.key.empty() || uri.back() == '/';  // a bucket is a directory
  return loc;
}

Result<std::string> resolve(const std::string& uri, const std::string& data_root,
                            const std::string& cwd) {
  COHORT_ASSIGN(Location loc, parseLocation(uri));
  if (loc.kind == Location::Kind::kLocal) {
    if (loc.path[0] == '/' || cwd.empty()) return loc.path;
    return (cwd.back() == '/' ? cwd : cwd + "/") + loc.path;
  }
  if (data_root.empty() || data_root[0] != '/') {
    return badUri(uri, "the data root '" + data_root + "' is not an absolute path");
  }
  std::string root = data_root;
  while (root.size() > 1 && root.back() == '/') root.pop_back();
  std::string path = (root == "/" ? "" : root) + "/store/" + storeDirName(loc.owner, loc.bucket);
  if (!loc.key.empty()) path += "/" + loc.key;
  if (loc.trailing_slash) path += "/";
  return path;
}

}  // namespace cohort::storage
