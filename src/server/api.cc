#include "server/api.h"

namespace cohort::server {

int httpStatus(Code code) {
  switch (code) {
    case Code::kInvalidArgument:
      return 400;
    case Code::kUnauthenticated:
      return 401;
    case Code::kPermissionDenied:
      return 403;
    case Code::kNotFound:
      return 404;
    case Code::kAlreadyExists:
    case Code::kFailedPrecondition:
      return 409;
    case Code::kTooLarge:
      return 413;
    case Code::kResourceExhausted:
      return 429;
    case Code::kUnavailable:
      return 503;
    case Code::kDeadlineExceeded:
      return 504;
    case Code::kIo:
    case Code::kInternal:
      return 500;
  }
  return 500;
}

// JSON text; a string that is not valid UTF-8 (a path sent so) has its bad bytes replaced.
std::string dumpJson(const Json& body) {
  return body.dump(-1, ' ', false, Json::error_handler_t::replace);
}

void writeError(Response& res, const Error& e) {
  res.status = httpStatus(e.code);
  Json body = {
      {"error",
       {{"code", e.code == Code::kIo ? "internal" : codeName(e.code)}, {"message", e.message}}}};
  res.setContent(dumpJson(body) + "\n", "application/json");
}

Response errorResponse(const Error& e) {
  Response res;
  writeError(res, e);
  return res;
}

void writeJson(Response& res, int status, const Json& body) {
  res.status = status;
  res.setContent(dumpJson(body) + "\n", "application/json");
}

// `text` for a message: bytes that are not printable ASCII as \xNN.
std::string printable(std::string_view text) {
  std::string out;
  for (unsigned char c : text) {
    if (c >= 0x20 && c < 0x7f) {
      out.push_back(static_cast<char>(c));
    } else {
      char hex[5];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    }
  }
  return out;
}

bool validUtf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    uint32_t cp = n == 1 ? c : c & (0x7f >> n);
    for (size_t k = 1; k < n; ++k) {
      unsigned char d = static_cast<unsigned char>(s[i + k]);
      if ((d >> 6) != 2) return false;
      cp = (cp << 6) | (d & 0x3f);
    }
    if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) ||
        cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) {
      return false;
    }
    i += n;
  }
  return true;
}

// A store:// path the server can hold: valid UTF-8, names of at most 255 bytes.
Result<void> checkStorePath(const std::string& bucket, const std::string& key) {
  const std::string uri = "store://" + bucket + "/" + key;
  if (!validUtf8(uri)) {
    return fail(Code::kInvalidArgument, printable(uri) + ": the path is not valid UTF-8");
  }
  if (uri.size() > kMaxStorePath) {
    return fail(Code::kInvalidArgument, uri.substr(0, 64) + "...: the path is over " +
                                            std::to_string(kMaxStorePath) + " bytes");
  }
  for (const std::string& part : split(key, '/')) {
    if (part.size() > kMaxStoreName) {
      return fail(Code::kInvalidArgument, uri + ": the name '" + part.substr(0, 32) +
                                              "...' is over " + std::to_string(kMaxStoreName) +
                                              " bytes (" + std::to_string(part.size()) + ")");
    }
  }
  return {};
}

Json isoOrNull(int64_t nanos) { return nanos ? Json(isoTime(nanos)) : Json(nullptr); }

// The first `max` bytes of the regular file at `path`, never through a link (a job's files are
// written by code the server does not trust), with its modification time in unix nanoseconds
// in `mtime`; nothing when it is not there or not a regular file.
std::optional<std::string> readJobFile(const std::string& path, size_t max, int64_t* mtime) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
  struct stat st {};
  if (!fd.valid() || ::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
  if (mtime) *mtime = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  std::string text(std::min(static_cast<size_t>(st.st_size), max), '\0');
  const ssize_t n = ::pread(fd.get(), text.data(), text.size(), 0);
  text.resize(n > 0 ? static_cast<size_t>(n) : 0);
  return text;
}

// A log's query (a job's, a build's): `offset`, the bytes to skip (0 when absent), and
// `follow`, whether to stream what is appended.
Result<int64_t> offsetParameter(const Request& req) {
  if (!req.hasParam("offset")) return int64_t{0};
  auto n = parseInt64(req.param("offset"));
  if (!n || *n < 0) return fail(Code::kInvalidArgument, "offset: expected bytes >= 0");
  return *n;
}

bool followParameter(const Request& req) {
  const std::string follow = req.param("follow");
  return follow == "1" || follow == "true";
}

Result<Json> jsonBody(const Request& req, const std::set<std::string>& known) {
  if (req.body.size() > kMaxJsonBody) {
    return fail(Code::kTooLarge, "the request body is over 4 MiB");
  }
  // nlohmann's parser recurses once per level: a deep body would overflow the stack.
  COHORT_TRY(checkJsonDepth(req.body));
  Json body = Json::parse(req.body, nullptr, false);
  if (body.is_discarded()) return fail(Code::kInvalidArgument, "the body is not valid JSON");
  if (!body.is_object()) return fail(Code::kInvalidArgument, "the body must be a JSON object");
  for (const auto& [key, value] : body.items()) {
    if (!known.count(key)) {
      std::string list;
      for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
      return fail(Code::kInvalidArgument, "unknown field '" + key + "' (known: " + list + ")");
    }
  }
  return body;
}


Result<int64_t> idParam(const std::string& text, const std::string& what) {
  auto n = parseInt64(text);
  if (!n) return fail(Code::kNotFound, what + " '" + text + "' not found");
  return *n;
}

// A relative path inside a directory: no "..", no absolute path, no empty parts.
Result<std::string> containedPath(const std::string& path) {
  if (path.empty()) return std::string();
  if (path[0] == '/' || path.find('\0') != std::string::npos) {
    return fail(Code::kInvalidArgument, "path '" + path + "' must be relative");
  }
  for (const std::string& part : split(path, '/')) {
    if (part == "..") {
      return fail(Code::kInvalidArgument, "path '" + path + "' must not contain '..'");
    }
  }
  return path;
}

// Files under `dir`, recursively, relative to it; symbolic links are not followed.
Json listFiles(const std::string& dir) {
  Json files = Json::array();
  std::error_code ec;
  std::filesystem::recursive_directory_iterator it(dir, ec), end;
  std::vector<std::pair<std::string, uintmax_t>> found;
  for (; !ec && it != end; it.increment(ec)) {
    if (!it->is_regular_file(ec) || it->is_symlink(ec)) continue;
    found.emplace_back(std::filesystem::relative(it->path(), dir, ec).string(), it->file_size(ec));
  }
  std::sort(found.begin(), found.end());
  for (const auto& [path, size] : found) files.push_back({{"path", path}, {"size", size}});
  return files;
}

// Serves a regular file under `root`. The job's ranks own what is below `root` and may swap a
// directory for a link while this runs, so the kernel resolves the path (openat2 with
// RESOLVE_BENEATH): no link, `..` or race leads out of `root`.
Result<void> sendFile(Response& res, const std::string& root, const std::string& relative,
                      const std::string& what) {
  UniqueFd dir(::open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!dir.valid()) return fail(Code::kNotFound, what + " not found");
  open_how how{};
  how.flags = O_RDONLY | O_CLOEXEC | O_NONBLOCK;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
  int fd = static_cast<int>(::syscall(SYS_openat2, dir.get(), relative.c_str(), &how, sizeof how));
  if (fd < 0) return fail(Code::kNotFound, what + " not found");
  auto file = std::make_shared<UniqueFd>(fd);
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return fail(Code::kNotFound, what + " not found");
  res.status = 200;
  res.content_type = "application/octet-stream";
  res.file = file;
  res.file_size = static_cast<uint64_t>(st.st_size);
  return {};
}

Json accountJson(const store::Account& a) {
  return {{"name", a.name},
          {"admin", a.admin},
          {"max_gpus", a.max_gpus ? Json(*a.max_gpus) : Json(nullptr)},
          {"max_cpus",
           a.max_cpu_millis ? Json(static_cast<double>(*a.max_cpu_millis) / 1000) : Json(nullptr)},
          {"created", isoOrNull(a.created)}};
}

Json shareJson(const store::Share& s) {
  return {{"id", s.id},         {"prefix", sharedUri(s)},
          {"owner", s.owner},   {"with", s.grantee},
          {"access", s.access}, {"created", isoOrNull(s.created)}};
}

Json tokenJson(const store::Token& t) {
  return {
      {"id", t.id}, {"account", t.account}, {"label", t.label}, {"created", isoOrNull(t.created)}};
}


}  // namespace cohort::server
