#include "storage/archive.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <system_error>

#include "storage/local_files.h"
#include "util/fd.h"
#include "util/text.h"

namespace cohort::storage {

namespace {

constexpr size_t kBlock = 512;
constexpr size_t kNameField = 100;
constexpr size_t kPrefixField = 155;
constexpr size_t kMaxPath = 4096;
constexpr size_t kMaxComponent = 255;

// --- patterns ---

// fnmatch-like: `*` and `?` stay within one path component, `**` crosses them (`**/`: zero or
// more directories), `[...]` a class (`[!...]` negated), `\` quotes the next character.
bool globMatch(std::string_view p, std::string_view s) {
  size_t pi = 0, si = 0;
  while (pi < p.size()) {
    char c = p[pi];
    if (c == '*') {
      if (pi + 1 < p.size() && p[pi + 1] == '*') {
        size_t rest = pi + 2;
        if (rest < p.size() && p[rest] == '/') {
          std::string_view tail = p.substr(rest + 1);
          if (globMatch(tail, s.substr(si))) return true;
          for (size_t k = si; k < s.size(); ++k) {
            if (s[k] == '/' && globMatch(tail, s.substr(k + 1))) return true;
          }
          return false;
        }
        std::string_view tail = p.substr(rest);
        for (size_t k = si; k <= s.size(); ++k) {
          if (globMatch(tail, s.substr(k))) return true;
        }
        return false;
      }
      std::string_view tail = p.substr(pi + 1);
      for (size_t k = si; k <= s.size(); ++k) {
        if (globMatch(tail, s.substr(k))) return true;
        if (k < s.size() && s[k] == '/') break;
      }
      return false;
    }
    if (si >= s.size()) return false;
    if (c == '?') {
      if (s[si] == '/') return false;
      ++pi, ++si;
      continue;
    }
    if (c == '[') {
      size_t end = pi + 1;
      if (end < p.size() && (p[end] == '!' || p[end] == '^')) ++end;
      if (end < p.size() && p[end] == ']') ++end;
      while (end < p.size() && p[end] != ']') ++end;
      if (end < p.size()) {
        size_t i = pi + 1;
        bool negate = p[i] == '!' || p[i] == '^';
        if (negate) ++i;
        bool found = false;
        for (bool first = true; i < end; ++i, first = false) {
          if (!first && p[i] == ']') break;
          if (i + 2 < end && p[i + 1] == '-') {
            found |= s[si] >= p[i] && s[si] <= p[i + 2];
            i += 2;
          } else {
            found |= s[si] == p[i];
          }
        }
        if (found == negate || s[si] == '/') return false;
        pi = end + 1, ++si;
        continue;
      }
    }
    if (c == '\\' && pi + 1 < p.size()) c = p[++pi];
    if (s[si] != c) return false;
    ++pi, ++si;
  }
  return si == s.size();
}

std::string joinRel(const std::string& dir, const std::string& name) {
  return dir.empty() ? name : dir + "/" + name;
}

// A link target stays inside the tree when it is relative, its `..` come only first, and they
// climb no higher than the tree's top from the link's directory (`depth` directories down).
// Later `..` would be resolved from wherever an earlier component (maybe a link) leads, which
// no look at the text can bound; leading ones climb real directories only.
std::string linkProblem(const std::string& target, size_t depth) {
  if (target.empty()) return "its target is empty";
  if (target[0] == '/') return "its target '" + target + "' is an absolute path";
  size_t up = 0;
  bool below = false;
  for (const std::string& part : split(target, '/')) {
    if (part.empty() || part == ".") continue;
    if (part == "..") {
      if (below) return "its target '" + target + "' has '..' after a name";
      if (++up > depth) return "its target '" + target + "' leads out of the workdir";
    } else {
      below = true;
    }
  }
  return "";
}

// --- ustar headers ---

// `width - 1` octal digits, zero-padded, then NUL (values that do not fit are checked before).
void putOctal(char* field, size_t width, uint64_t value) {
  field[width - 1] = '\0';
  for (size_t i = width - 1; i-- > 0; value >>= 3) field[i] = static_cast<char>('0' + (value & 7));
}

void putString(char* field, size_t width, const std::string& value) {
  std::memcpy(field, value.data(), std::min(width, value.size()));
}

unsigned headerSum(const unsigned char* h) {
  unsigned sum = 0;
  for (size_t i = 0; i < kBlock; ++i) sum += (i >= 148 && i < 156) ? ' ' : h[i];
  return sum;
}

// Splits `rel` into ustar's prefix and name fields. Errors: kInvalidArgument.
Result<std::pair<std::string, std::string>> ustarName(const std::string& rel) {
  if (rel.size() <= kNameField) return std::pair<std::string, std::string>{"", rel};
  for (size_t k = rel.find('/'); k != std::string::npos; k = rel.find('/', k + 1)) {
    if (k <= kPrefixField && rel.size() - k - 1 <= kNameField && rel.size() - k - 1 > 0) {
      return std::pair<std::string, std::string>{rel.substr(0, k), rel.substr(k + 1)};
    }
  }
  return fail(Code::kInvalidArgument,
              "'" + rel +
                  "': the path is too long for a ustar archive (at most 255 bytes, and "
                  "a '/' within the first 155 with at most 100 after it): rename it, or "
                  "leave it out with .cohortignore");
}

std::string header(const TreeEntry& e) {
  std::string h(kBlock, '\0');
  auto name = ustarName(e.rel);  // checked by listTree
  putString(h.data(), kNameField, name ? name->second : e.rel);
  putOctal(h.data() + 100, 8,
           e.kind == TreeEntry::Kind::kDir ? 0755 : (e.mode & 0111 ? 0755 : 0644));
  putOctal(h.data() + 108, 8, 0);
  putOctal(h.data() + 116, 8, 0);
  putOctal(h.data() + 124, 12,
           e.kind == TreeEntry::Kind::kFile ? static_cast<uint64_t>(e.size) : 0);
  putOctal(h.data() + 136, 12, static_cast<uint64_t>(std::max<int64_t>(e.mtime, 0)));
  h[156] = e.kind == TreeEntry::Kind::kFile ? '0' : e.kind == TreeEntry::Kind::kDir ? '5' : '2';
  if (e.kind == TreeEntry::Kind::kLink) putString(h.data() + 157, kNameField, e.target);
  std::memcpy(h.data() + 257,
              "ustar\0"
              "00",
              8);
  if (name) putString(h.data() + 345, kPrefixField, name->first);
  putOctal(h.data() + 148, 7, headerSum(reinterpret_cast<unsigned char*>(h.data())));
  h[155] = ' ';
  return h;
}

// --- listing ---

struct Lister {
  const std::string& root;
  const IgnoreRules& rules;
  const ArchiveLimits& limits;
  TreeListing out;

  Result<void> walk(const std::string& rel, size_t depth) {
    const std::string dir = rel.empty() ? root : root + "/" + rel;
    if (depth > kMaxDepth) {
      return fail(Code::kInvalidArgument, "'" + dir + "': directories nested deeper than " +
                                              std::to_string(kMaxDepth) + " levels");
    }
    std::unique_ptr<DIR, int (*)(DIR*)> d(::opendir(dir.c_str()), ::closedir);
    if (!d) return failErrno("read the directory '" + dir + "'");
    std::vector<std::string> names;
    errno = 0;
    while (dirent* ent = ::readdir(d.get())) {
      std::string name = ent->d_name;
      if (name != "." && name != "..") names.push_back(std::move(name));
    }
    std::sort(names.begin(), names.end());
    for (const std::string& name : names) {
      const std::string child = joinRel(rel, name);
      const std::string path = root + "/" + child;
      struct stat st {};
      if (::lstat(path.c_str(), &st) != 0) return failErrno("stat '" + path + "'");
      const bool is_dir = S_ISDIR(st.st_mode);
      if (rules.ignored(child, is_dir)) continue;
      COHORT_TRY(ustarName(child));
      TreeEntry e;
      e.rel = child;
      e.mode = st.st_mode & 07777;
      e.mtime = st.st_mtim.tv_sec;
      if (S_ISREG(st.st_mode)) {
        e.kind = TreeEntry::Kind::kFile;
        e.size = st.st_size;
        if (e.size >= (int64_t{1} << 33)) {
          return fail(Code::kTooLarge, "'" + path +
                                           "' is over 8 GiB, more than a ustar archive "
                                           "holds: put it in the store and name it in "
                                           "inputs, and leave it out with .cohortignore");
        }
        out.bytes += e.size;
        ++out.files;
      } else if (is_dir) {
        e.kind = TreeEntry::Kind::kDir;
      } else if (S_ISLNK(st.st_mode)) {
        e.kind = TreeEntry::Kind::kLink;
        char buf[PATH_MAX];
        ssize_t n = ::readlink(path.c_str(), buf, sizeof buf);
        if (n < 0) return failErrno("read the link '" + path + "'");
        e.target.assign(buf, static_cast<size_t>(n));
        std::string why = linkProblem(e.target, depth);
        if (why.empty() && e.target.size() > kNameField) why = "its target is over 100 bytes";
        if (!why.empty()) {
          return fail(Code::kInvalidArgument,
                      "the link '" + path + "' cannot be uploaded: " + why +
                          " (the server refuses links that lead out of the workdir): leave it "
                          "out with .cohortignore, or copy what it points to into the workdir");
        }
      } else {
        return fail(Code::kInvalidArgument, "'" + path +
                                                "' is a socket, FIFO or device, which cannot be "
                                                "uploaded: leave it out with .cohortignore");
      }
      out.entries.push_back(e);
      if (static_cast<int64_t>(out.entries.size()) > limits.max_entries) {
        return fail(Code::kTooLarge, "the workdir '" + root + "' holds over " +
                                         std::to_string(limits.max_entries) +
                                         " files and directories to upload");
      }
      if (is_dir) COHORT_TRY(walk(child, depth + 1));
    }
    return {};
  }
};

// --- extraction ---

struct Extractor {
  std::string_view archive;
  const std::string& dest;
  const ArchiveLimits& limits;
  UniqueFd root;
  ExtractStats stats;
  int64_t entries = 0;

  static Error refuse(const std::string& entry, const std::string& why) {
    return Error{Code::kInvalidArgument, "archive entry '" + entry + "': " + why};
  }

  // The entry's path components. Errors: absolute, '..', too long or deep.
  Result<std::vector<std::string>> components(const std::string& name) {
    if (name.empty()) return tl::unexpected(refuse(name, "the entry has no name"));
    if (name[0] == '/') {
      return tl::unexpected(refuse(name,
                                   "absolute paths are refused: an archive's paths are "
                                   "relative to the workdir"));
    }
    if (name.size() > kMaxPath) {
      return tl::unexpected(refuse(name.substr(0, 64) + "...", "the path is over 4096 bytes"));
    }
    std::vector<std::string> parts;
    for (std::string& part : split(name, '/')) {
      if (part.empty() || part == ".") continue;
      if (part == "..") {
        return tl::unexpected(
            refuse(name, "'..' is refused in a path: every entry must stay inside the workdir"));
      }
      if (part.size() > kMaxComponent) {
        return tl::unexpected(refuse(name, "a name is over 255 bytes"));
      }
      parts.push_back(std::move(part));
    }
    if (parts.size() > kMaxDepth) {
      return tl::unexpected(
          refuse(name, "nested deeper than " + std::to_string(kMaxDepth) + " directories"));
    }
    return parts;
  }

  // The directory that holds the entry, made where missing, reached without following a link.
  Result<UniqueFd> parentOf(const std::string& name, const std::vector<std::string>& parts) {
    UniqueFd dir(::fcntl(root.get(), F_DUPFD_CLOEXEC, 0));
    if (!dir.valid()) return failErrno("dup");
    std::string walked;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      walked = joinRel(walked, parts[i]);
      if (::mkdirat(dir.get(), parts[i].c_str(), 0755) == 0) {
        ++stats.dirs;
      } else if (errno != EEXIST) {
        return failErrno("create '" + dest + "/" + walked + "'");
      }
      UniqueFd next(
          ::openat(dir.get(), parts[i].c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!next.valid()) {
        if (errno == ELOOP || errno == ENOTDIR) {
          return tl::unexpected(refuse(name, "'" + walked +
                                                 "' is a link or a file, not a directory: "
                                                 "nothing is written through a link"));
        }
        return failErrno("open '" + dest + "/" + walked + "'");
      }
      ::fchmod(next.get(), 0755);
      dir = std::move(next);
    }
    return dir;
  }

  Result<void> file(const std::string& name, const std::vector<std::string>& parts,
                    std::string_view data, uint32_t mode, int64_t mtime) {
    COHORT_ASSIGN(UniqueFd dir, parentOf(name, parts));
    UniqueFd fd(::openat(dir.get(), parts.back().c_str(),
                         O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!fd.valid()) {
      if (errno == EEXIST) {
        return tl::unexpected(refuse(name,
                                     "it is in the archive twice (or is also a directory "
                                     "or a link there)"));
      }
      return failErrno("create '" + dest + "/" + name + "'");
    }
    COHORT_TRY(writeAll(fd.get(), data));
    if (::fchmod(fd.get(), (mode & 0111) ? 0755 : 0644) != 0) {
      return failErrno("chmod '" + dest + "/" + name + "'");
    }
    const timespec times[2] = {{mtime, 0}, {mtime, 0}};
    (void)::futimens(fd.get(), times);
    ++stats.files;
    stats.bytes += static_cast<int64_t>(data.size());
    return {};
  }

  Result<void> directory(const std::string& name, const std::vector<std::string>& parts) {
    if (parts.empty()) return {};  // "./": the workdir itself
    COHORT_ASSIGN(UniqueFd dir, parentOf(name, parts));
    if (::mkdirat(dir.get(), parts.back().c_str(), 0755) == 0) {
      ++stats.dirs;
    } else if (errno != EEXIST) {
      return failErrno("create '" + dest + "/" + name + "'");
    }
    UniqueFd made(
        ::openat(dir.get(), parts.back().c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!made.valid()) {
      return tl::unexpected(refuse(name,
                                   "it is a directory here and a file or a link elsewhere "
                                   "in the archive"));
    }
    ::fchmod(made.get(), 0755);
    return {};
  }

  Result<void> link(const std::string& name, const std::vector<std::string>& parts,
                    const std::string& target) {
    if (std::string why = linkProblem(target, parts.size() - 1); !why.empty()) {
      return tl::unexpected(
          refuse(name, "the link is refused: " + why + " (links must point inside the workdir)"));
    }
    COHORT_ASSIGN(UniqueFd dir, parentOf(name, parts));
    if (::symlinkat(target.c_str(), dir.get(), parts.back().c_str()) != 0) {
      if (errno == EEXIST) return tl::unexpected(refuse(name, "it is in the archive twice"));
      return failErrno("create the link '" + dest + "/" + name + "'");
    }
    ++stats.links;
    return {};
  }

  Result<void> run() {
    root = UniqueFd(::open(dest.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!root.valid()) return failErrno("open '" + dest + "'");
    ::fchmod(root.get(), 0755);
    size_t off = 0;
    while (true) {
      if (archive.size() - off < kBlock) {
        return fail(Code::kInvalidArgument,
                    off == 0 ? std::string("the archive is empty: expected a ustar archive")
                             : "the archive is cut off after " + std::to_string(off) +
                                   " bytes (no end-of-archive blocks)");
      }
      const auto* h = reinterpret_cast<const unsigned char*>(archive.data() + off);
      if (std::all_of(h, h + kBlock, [](unsigned char c) { return c == 0; })) return {};
      const std::string at = "the header at byte " + std::to_string(off);
      auto octal = [&](size_t at_field, size_t width) -> std::optional<uint64_t> {
        uint64_t v = 0;
        size_t i = at_field, end = at_field + width;
        while (i < end && h[i] == ' ') ++i;
        bool digits = false;
        for (; i < end && h[i] >= '0' && h[i] <= '7'; ++i) {
          if (v >> 60) return std::nullopt;
          v = v * 8 + (h[i] - '0');
          digits = true;
        }
        for (; i < end; ++i) {
          if (h[i] != ' ' && h[i] != '\0') return std::nullopt;
        }
        return digits ? std::optional<uint64_t>(v) : std::optional<uint64_t>(0);
      };
      auto sum = octal(148, 8);
      if (!sum || *sum != headerSum(h)) {
        return fail(Code::kInvalidArgument, at + " has a wrong checksum: this is not a tar "
                                                 "archive, or a damaged one");
      }
      const bool posix = std::memcmp(h + 257,
                                     "ustar\0"
                                     "00",
                                     8) == 0;
      const bool gnu = std::memcmp(h + 257, "ustar  \0", 8) == 0;
      if (!posix && !gnu) {
        return fail(Code::kInvalidArgument,
                    at + " is not ustar: write the archive with tar --format=ustar");
      }
      auto text = [&](size_t at_field, size_t width) {
        const char* s = reinterpret_cast<const char*>(h) + at_field;
        return std::string(s, strnlen(s, width));
      };
      std::string name = text(0, kNameField);
      if (posix) {
        std::string prefix = text(345, kPrefixField);
        if (!prefix.empty()) name = prefix + "/" + name;
      }
      const char type = static_cast<char>(h[156]);
      auto size = octal(124, 12);
      if (!size) {
        return fail(Code::kInvalidArgument, "archive entry '" + name +
                                                "': its size is not an octal number (sizes over "
                                                "8 GiB are not accepted)");
      }
      off += kBlock;
      if (*size > archive.size() - off) {
        return fail(Code::kInvalidArgument, "the archive is cut off inside the entry '" + name +
                                                "' (it says " + std::to_string(*size) + " bytes, " +
                                                std::to_string(archive.size() - off) +
                                                " are left)");
      }
      const std::string_view data = archive.substr(off, *size);
      off += (*size + kBlock - 1) / kBlock * kBlock;
      if (off > archive.size()) off = archive.size();
      if (++entries > limits.max_entries) {
        return fail(Code::kTooLarge, "the archive holds over " +
                                         std::to_string(limits.max_entries) +
                                         " entries, this server's limit");
      }
      switch (type) {
        case 'x':
        case 'g':
        case 'L':
        case 'K':
          return tl::unexpected(refuse(name,
                                       "extended (pax or GNU) headers are not accepted: "
                                       "write the archive with tar --format=ustar, whose "
                                       "names are at most 255 bytes"));
        case '1':
          return tl::unexpected(refuse(name, "hard links are refused: archive the file itself"));
        case '3':
        case '4':
          return tl::unexpected(refuse(name, "device files are refused"));
        case '6':
          return tl::unexpected(refuse(name, "FIFOs are refused"));
        default:
          break;
      }
      COHORT_ASSIGN(std::vector<std::string> parts, components(name));
      if (type == '5') {
        COHORT_TRY(directory(name, parts));
        continue;
      }
      if (parts.empty()) return tl::unexpected(refuse(name, "the entry has no name"));
      if (type == '2') {
        COHORT_TRY(link(name, parts, text(157, kNameField)));
        continue;
      }
      if (type != '0' && type != '\0' && type != '7') {
        return tl::unexpected(refuse(name, std::string("entries of type '") + type +
                                               "' are refused (only files, directories and "
                                               "links are accepted)"));
      }
      if (stats.bytes + static_cast<int64_t>(*size) > limits.max_bytes) {
        return fail(Code::kTooLarge, "the archive's files hold over " +
                                         formatSize(static_cast<double>(limits.max_bytes)) +
                                         ", this server's limit (at '" + name + "')");
      }
      uint32_t mode = static_cast<uint32_t>(octal(100, 8).value_or(0644));
      int64_t mtime = static_cast<int64_t>(octal(136, 12).value_or(0));
      COHORT_TRY(file(name, parts, data, mode, mtime));
    }
  }
};

}  // namespace

IgnoreRules IgnoreRules::fromText(std::string_view text, std::string source) {
  IgnoreRules rules;
  rules.source_ = std::move(source);
  for (const std::string& raw : split(text, '\n')) {
    std::string line = raw;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    while (!line.empty() && line.back() == ' ' &&
           !(line.size() >= 2 && line[line.size() - 2] == '\\')) {
      line.pop_back();
    }
    if (line.empty() || line[0] == '#') continue;
    Rule r;
    if (line[0] == '!') {
      r.negate = true;
      line.erase(0, 1);
    } else if (line[0] == '\\' && line.size() > 1 && (line[1] == '#' || line[1] == '!')) {
      line.erase(0, 1);
    }
    if (!line.empty() && line.back() == '/') {
      r.dir_only = true;
      line.pop_back();
    }
    if (line.find('/') != std::string::npos) {
      r.anchored = true;
      if (line[0] == '/') line.erase(0, 1);
    }
    if (line.empty()) continue;
    r.pattern = line;
    rules.rules_.push_back(std::move(r));
  }
  return rules;
}

Result<IgnoreRules> IgnoreRules::forTree(const std::string& root) {
  for (const char* name : {".cohortignore", ".gitignore"}) {
    const std::string path = root + "/" + name;
    auto text = readFile(path);
    if (text) return fromText(*text, path);
    if (text.error().code != Code::kNotFound) return tl::unexpected(text.error());
  }
  return IgnoreRules();
}

bool IgnoreRules::ignored(const std::string& rel, bool is_dir) const {
  if (rel == ".git" || startsWith(rel, ".git/")) return true;
  const size_t slash = rel.rfind('/');
  const std::string_view base =
      slash == std::string::npos ? std::string_view(rel) : std::string_view(rel).substr(slash + 1);
  bool out = false;
  for (const Rule& r : rules_) {
    if (r.dir_only && !is_dir) continue;
    if (out != r.negate) continue;  // it could not change the answer
    if (globMatch(r.pattern, r.anchored ? std::string_view(rel) : base)) out = !r.negate;
  }
  return out;
}

Result<TreeListing> listTree(const std::string& root, const IgnoreRules& rules,
                             const ArchiveLimits& limits) {
  struct stat st {};
  if (::stat(root.c_str(), &st) != 0) return failErrno("the workdir '" + root + "'");
  if (!S_ISDIR(st.st_mode)) {
    return fail(Code::kInvalidArgument, "the workdir '" + root + "' is not a directory");
  }
  Lister lister{root, rules, limits, {}};
  COHORT_TRY(lister.walk("", 0));
  TreeListing& out = lister.out;
  if (out.bytes > limits.max_bytes) {
    std::vector<const TreeEntry*> files;
    for (const TreeEntry& e : out.entries) {
      if (e.kind == TreeEntry::Kind::kFile) files.push_back(&e);
    }
    std::sort(files.begin(), files.end(),
              [](const TreeEntry* a, const TreeEntry* b) { return a->size > b->size; });
    std::string biggest;
    for (size_t i = 0; i < files.size() && i < 3; ++i) {
      biggest += (i ? ", " : "") + files[i]->rel + " (" +
                 formatSize(static_cast<double>(files[i]->size)) + ")";
    }
    return fail(Code::kTooLarge, "the workdir '" + root + "' holds " +
                                     formatSize(static_cast<double>(out.bytes)) + " in " +
                                     std::to_string(out.files) + " files to upload, over the " +
                                     formatSize(static_cast<double>(limits.max_bytes)) +
                                     " limit; the biggest: " + biggest);
  }
  return std::move(lister.out);
}

Result<void> writeArchive(const std::string& root, const TreeListing& listing, int fd,
                          const std::function<void(int64_t)>& progress) {
  static const std::string kZeros(2 * kBlock, '\0');
  std::vector<char> buf(size_t{1} << 20);
  int64_t written = 0;
  for (const TreeEntry& e : listing.entries) {
    COHORT_TRY(writeAll(fd, header(e)));
    if (e.kind != TreeEntry::Kind::kFile) continue;
    const std::string path = root + "/" + e.rel;
    UniqueFd in(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
    if (!in.valid()) return failErrno("open '" + path + "'");
    int64_t left = e.size;
    while (left > 0) {
      ssize_t n =
          ::read(in.get(), buf.data(),
                 static_cast<size_t>(std::min<int64_t>(left, static_cast<int64_t>(buf.size()))));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return failErrno("read '" + path + "'");
      if (n == 0) {
        return fail(Code::kInvalidArgument,
                    "'" + path + "' got shorter while it was archived: submit again");
      }
      COHORT_TRY(writeAll(fd, std::string_view(buf.data(), static_cast<size_t>(n))));
      left -= n;
    }
    if (size_t pad = static_cast<size_t>(e.size) % kBlock) {
      COHORT_TRY(writeAll(fd, std::string_view(kZeros.data(), kBlock - pad)));
    }
    written += e.size;
    if (progress) progress(written);
  }
  return writeAll(fd, kZeros);
}

Result<ExtractStats> extractArchive(std::string_view archive, const std::string& dest,
                                    const ArchiveLimits& limits) {
  if (::mkdir(dest.c_str(), 0755) != 0) return failErrno("create '" + dest + "'");
  Extractor x{archive, dest, limits, {}, {}, 0};
  auto done = x.run();
  if (!done) {
    std::error_code ec;
    std::filesystem::remove_all(dest, ec);  // removes links, never what they point to
    return tl::unexpected(done.error());
  }
  return x.stats;
}

}  // namespace cohort::storage
