#include "account/file_work.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "storage/copy.h"
#include "storage/transfer.h"
#include "util/beneath.h"
#include "util/fd.h"
#include "util/text.h"

namespace cohort::account {

namespace {

using Json = nlohmann::json;

template <class... Fs>
struct Overloaded : Fs... {
  using Fs::operator()...;
};
template <class... Fs>
Overloaded(Fs...) -> Overloaded<Fs...>;

Json limitsJson(const storage::ArchiveLimits& l) {
  return {{"max_bytes", l.max_bytes}, {"max_entries", l.max_entries}};
}

// Typed reading of a decoded request: every field checked, nothing thrown.
class Reader {
 public:
  explicit Reader(const Json& j) : j_(j) {}
  bool ok() const { return ok_; }
  const std::string& error() const { return error_; }

  std::string str(const char* key) {
    auto it = j_.find(key);
    if (it == j_.end() || !it->is_string()) return bad(key), std::string();
    return it->get<std::string>();
  }
  int64_t num(const char* key) {
    auto it = j_.find(key);
    if (it == j_.end() || !it->is_number_integer()) return bad(key), 0;
    return it->get<int64_t>();
  }
  bool flag(const char* key) {
    auto it = j_.find(key);
    if (it == j_.end() || !it->is_boolean()) return bad(key), false;
    return it->get<bool>();
  }
  std::vector<std::string> strs(const char* key) {
    std::vector<std::string> out;
    auto it = j_.find(key);
    if (it == j_.end() || !it->is_array()) return bad(key), out;
    for (const Json& v : *it) {
      if (!v.is_string()) return bad(key), out;
      out.push_back(v.get<std::string>());
    }
    return out;
  }
  const Json* array(const char* key) {
    auto it = j_.find(key);
    if (it == j_.end() || !it->is_array()) return bad(key), nullptr;
    return &*it;
  }
  storage::ArchiveLimits limits() {
    storage::ArchiveLimits l;
    auto it = j_.find("limits");
    if (it == j_.end() || !it->is_object()) return bad("limits"), l;
    Reader r(*it);
    l.max_bytes = r.num("max_bytes");
    l.max_entries = r.num("max_entries");
    if (!r.ok()) bad("limits");
    return l;
  }

 private:
  void bad(const char* key) {
    if (ok_) error_ = std::string("the field '") + key + "' is missing or of the wrong type";
    ok_ = false;
  }
  const Json& j_;
  bool ok_ = true;
  std::string error_;
};

Result<int> storeIndex(int64_t index) {
  if (index < -1 || index > 1024) return fail(Code::kInvalidArgument, "a store index out of range");
  return static_cast<int>(index);
}

Result<storage::ObjectStore*> storeAt(const std::vector<storage::ObjectStore*>& stores,
                                      int index) {
  if (index < 0 || static_cast<size_t>(index) >= stores.size() || !stores[index]) {
    return fail(Code::kInternal, "no store " + std::to_string(index) + " was handed in");
  }
  return stores[index];
}

// A local input of a server's job: `source` below `beneath`, which the admin listed; opened with
// no link followed (so that a link named, or on the way, is refused by name), then copied with
// links refused.
Result<void> checkBeneath(const Input& in) {
  const std::string& root = in.beneath;
  const std::string top = root == "/" ? root : root + "/";
  if (!startsWith(in.source, top) && in.source != root) {
    return fail(Code::kInvalidArgument, "'" + in.source + "' is not below '" + root + "'");
  }
  UniqueFd dir(::open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!dir.valid()) return failErrno("open '" + root + "'");
  const std::string rel = in.source.size() > top.size() ? in.source.substr(top.size()) : "";
  auto opened = openBeneath(dir.get(), rel, O_PATH);
  if (!opened) {
    Error e = opened.error();
    if (e.code == Code::kInvalidArgument) e.message = "'" + top + e.message.substr(1);
    return tl::unexpected<Error>(e);
  }
  struct stat st {};
  if (::fstat(opened->get(), &st) != 0) return failErrno("stat '" + in.source + "'");
  if (S_ISREG(st.st_mode) && st.st_nlink > 1) {
    return fail(Code::kInvalidArgument,
                "'" + in.source + "' has " + std::to_string(st.st_nlink) +
                    " hard links; a file with other names is not copied here");
  }
  return {};
}

Result<Done> stage(const StageInputs& w, const std::vector<storage::ObjectStore*>& stores) {
  Done done;
  COHORT_TRY(makeDirs(w.work_dir));
  for (const std::string& dir : w.dirs) {
    COHORT_TRY(makeDirs(dir.substr(0, dir.rfind('/'))));
    if (::mkdir(dir.c_str(), 0700) != 0) return failErrno("create '" + dir + "'");
  }
  for (const Input& in : w.inputs) {
    std::string what = "input '" + in.source + "'";
    if (in.store >= 0) {
      COHORT_ASSIGN(storage::ObjectStore * store, storeAt(stores, in.store));
      what = "input '" + store->uri(in.source) + "'";
    }
    auto one = [&]() -> Result<void> {
      COHORT_TRY(makeDirs(in.target.substr(0, in.target.rfind('/'))));
      if (in.store < 0 && !in.beneath.empty()) COHORT_TRY(checkBeneath(in));
      if (in.link) {
        if (in.store >= 0) return fail(Code::kInternal, "a link to a store's key");
        if (::symlink(in.source.c_str(), in.target.c_str()) < 0) {
          return failErrno("link '" + in.target + "' to '" + in.source + "'");
        }
        ++done.files;
        return {};
      }
      storage::CopyStats copied;
      if (in.store >= 0) {
        COHORT_ASSIGN(storage::ObjectStore * store, storeAt(stores, in.store));
        COHORT_ASSIGN(copied, storage::download(*store, in.source, in.target));
      } else {
        storage::CopyOptions options;
        options.refuse_links = !in.beneath.empty();
        COHORT_ASSIGN(copied, storage::copyTree(in.source, in.target, options));
      }
      done.files += copied.files_copied + copied.files_skipped;
      done.bytes += copied.bytes_copied;
      return {};
    }();
    if (!one) return withContext(one.error(), what);
  }
  return done;
}

Result<Done> copyOutput(const CopyOutput& w, const std::vector<storage::ObjectStore*>& stores) {
  storage::CopyStats copied;
  if (w.store >= 0) {
    COHORT_ASSIGN(storage::ObjectStore * store, storeAt(stores, w.store));
    storage::TransferOptions untrusted;
    untrusted.refuse_links = true;
    COHORT_ASSIGN(copied, storage::upload(w.source, *store, w.target, untrusted));
  } else {
    storage::CopyOptions untrusted;
    untrusted.refuse_links = true;
    COHORT_ASSIGN(copied, storage::copyTree(w.source, w.target, untrusted));
  }
  return Done{copied.files_copied + copied.files_skipped, copied.bytes_copied};
}

Result<Done> extractFrom(int fd, const std::string& dest, const storage::ArchiveLimits& limits) {
  struct stat st {};
  if (fd < 0 || ::fstat(fd, &st) != 0) return failErrno("the archive");
  const size_t size = static_cast<size_t>(st.st_size);
  void* data = size ? ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0) : nullptr;
  if (size && data == MAP_FAILED) return failErrno("map the archive");
  auto extracted = storage::extractArchive(
      std::string_view(static_cast<const char*>(data), size), dest, limits);
  if (size) ::munmap(data, size);
  if (!extracted) return tl::unexpected<Error>(extracted.error());
  return Done{extracted->files, extracted->bytes, extracted->dirs, extracted->links};
}

Result<Done> snapshot(const Snapshot& w) {
  COHORT_ASSIGN(storage::TreeListing listing,
                storage::listTree(w.from, storage::IgnoreRules::fromText(""), w.limits));
  UniqueFd fd(::memfd_create("cohort-code", MFD_CLOEXEC));
  if (!fd.valid()) return failErrno("memfd_create");
  COHORT_TRY(storage::writeArchive(w.from, listing, fd.get()));
  return extractFrom(fd.get(), w.dest, w.limits);
}

Result<Done> remove(const Remove& w) {
  for (const std::string& path : w.paths) {
    std::error_code ec;
    if (!w.contents_only) {
      std::filesystem::remove_all(path, ec);  // a link is removed, not followed
      if (ec) return fail(Code::kIo, "remove '" + path + "': " + ec.message());
      continue;
    }
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) continue;
    for (const auto& entry : std::filesystem::directory_iterator(path, ec)) {
      std::filesystem::remove_all(entry.path(), ec);
      if (ec) return fail(Code::kIo, "remove '" + entry.path().string() + "': " + ec.message());
    }
    if (ec) return fail(Code::kIo, "list '" + path + "': " + ec.message());
  }
  return Done{};
}

}  // namespace

const char* describe(const Work& work) {
  return std::visit(Overloaded{[](const StageInputs&) { return "stage the inputs"; },
                               [](const CopyOutput&) { return "copy an output"; },
                               [](const Extract&) { return "extract the upload"; },
                               [](const Snapshot&) { return "copy the code"; },
                               [](const Remove&) { return "remove the job's files"; }},
                    work);
}

std::string encodeWork(const Work& work) {
  Json j = std::visit(
      Overloaded{
          [](const StageInputs& w) {
            Json inputs = Json::array();
            for (const Input& in : w.inputs) {
              inputs.push_back({{"source", in.source},
                                {"store", in.store},
                                {"beneath", in.beneath},
                                {"target", in.target},
                                {"link", in.link}});
            }
            return Json{{"op", "stage"},
                        {"work_dir", w.work_dir},
                        {"dirs", w.dirs},
                        {"inputs", std::move(inputs)}};
          },
          [](const CopyOutput& w) {
            return Json{{"op", "output"},
                        {"source", w.source},
                        {"target", w.target},
                        {"store", w.store}};
          },
          [](const Extract& w) {
            return Json{{"op", "extract"}, {"dest", w.dest}, {"limits", limitsJson(w.limits)}};
          },
          [](const Snapshot& w) {
            return Json{{"op", "snapshot"},
                        {"from", w.from},
                        {"dest", w.dest},
                        {"limits", limitsJson(w.limits)}};
          },
          [](const Remove& w) {
            return Json{{"op", "remove"}, {"paths", w.paths}, {"contents_only", w.contents_only}};
          }},
      work);
  return j.dump();
}

Result<Work> decodeWork(std::string_view text) {
  Json j = Json::parse(text, nullptr, false);
  if (!j.is_object()) return fail(Code::kInvalidArgument, "a request that is not a JSON object");
  Reader r(j);
  const std::string op = r.str("op");
  Work work;
  if (op == "stage") {
    StageInputs w;
    w.work_dir = r.str("work_dir");
    w.dirs = r.strs("dirs");
    if (const Json* inputs = r.array("inputs")) {
      for (const Json& item : *inputs) {
        if (!item.is_object()) return fail(Code::kInvalidArgument, "an input that is not an object");
        Reader ir(item);
        Input in;
        in.source = ir.str("source");
        COHORT_ASSIGN(in.store, storeIndex(ir.num("store")));
        in.beneath = ir.str("beneath");
        in.target = ir.str("target");
        in.link = ir.flag("link");
        if (!ir.ok()) return fail(Code::kInvalidArgument, "input: " + ir.error());
        w.inputs.push_back(std::move(in));
      }
    }
    work = std::move(w);
  } else if (op == "output") {
    CopyOutput w;
    w.source = r.str("source");
    w.target = r.str("target");
    COHORT_ASSIGN(w.store, storeIndex(r.num("store")));
    work = std::move(w);
  } else if (op == "extract") {
    Extract w;
    w.dest = r.str("dest");
    w.limits = r.limits();
    work = std::move(w);
  } else if (op == "snapshot") {
    Snapshot w;
    w.from = r.str("from");
    w.dest = r.str("dest");
    w.limits = r.limits();
    work = std::move(w);
  } else if (op == "remove") {
    work = Remove{r.strs("paths"), r.flag("contents_only")};
  } else {
    return fail(Code::kInvalidArgument, "an unknown request '" + op + "'");
  }
  if (!r.ok()) return fail(Code::kInvalidArgument, op + ": " + r.error());
  return work;
}

Result<Done> perform(const Work& work, const std::vector<storage::ObjectStore*>& stores,
                     int archive_fd) {
  return std::visit(
      Overloaded{[&](const StageInputs& w) { return stage(w, stores); },
                 [&](const CopyOutput& w) { return copyOutput(w, stores); },
                 [&](const Extract& w) { return extractFrom(archive_fd, w.dest, w.limits); },
                 [&](const Snapshot& w) { return snapshot(w); },
                 [&](const Remove& w) { return remove(w); }},
      work);
}

}  // namespace cohort::account
