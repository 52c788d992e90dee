#include "account/as_account.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>

#include "proc/spawn.h"
#include "util/fd.h"
#include "util/packet.h"
#include "util/text.h"

namespace cohort::account {

namespace {

using Json = nlohmann::json;

// A message is one packet of the socket; listings are answered in pages that fit.
constexpr size_t kMaxMessage = 200 * 1024;
constexpr size_t kPageBytes = 128 * 1024;
constexpr size_t kMaxRequest = 64 << 20;
constexpr int kSocketFd = 3;

// The environment the worker starts with: cohort's, nothing of the caller's.
const std::vector<std::string> kWorkerEnvironment = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin",
                                                     "LANG=C.UTF-8"};

Result<void> sendMessage(int sock, const Json& message, int fd = -1) {
  const std::string text = message.dump();
  if (text.size() > kMaxMessage) return fail(Code::kInternal, "a message over the channel's limit");
  auto sent = sendPacket(sock, text, fd);
  if (!sent) return fail(Code::kIo, "send to the account worker's channel: " + sent.error().message);
  return {};
}

// The next message, and the descriptor that came with it (if any). Errors: kUnavailable when
// the other side is gone, kInvalidArgument for what is not a message.
Result<Json> receiveMessage(int sock, UniqueFd* fd) {
  auto got = receivePacket(sock, kMaxMessage, fd);
  if (!got) {
    if (got.error().code != Code::kIo) return tl::unexpected<Error>(got.error());
    return fail(Code::kIo, "receive from the account worker's channel: " + got.error().message);
  }
  Json j = Json::parse(*got, nullptr, false);
  if (!j.is_object()) return fail(Code::kInvalidArgument, "a message that is not a JSON object");
  return j;
}

Json errorJson(const Error& e) { return {{"code", codeName(e.code)}, {"message", e.message}}; }

Error errorFrom(const Json& j) {
  Error e{Code::kIo, "the account worker failed"};
  if (!j.is_object()) return e;
  if (auto m = j.find("message"); m != j.end() && m->is_string()) e.message = m->get<std::string>();
  if (auto c = j.find("code"); c != j.end() && c->is_string()) {
    for (int i = 0; i <= static_cast<int>(Code::kInternal); ++i) {
      if (*c == codeName(static_cast<Code>(i))) e.code = static_cast<Code>(i);
    }
  }
  return e;
}

Json infoJson(const storage::ObjectInfo& o) {
  Json j = {{"key", o.key}, {"size", o.size}, {"etag", o.etag}};
  if (o.crc64) j["crc64"] = *o.crc64;
  return j;
}

Result<storage::ObjectInfo> infoFrom(const Json& j) {
  if (!j.is_object() || !j.contains("key") || !j["key"].is_string() || !j.contains("size") ||
      !j["size"].is_number_integer() || !j.contains("etag") || !j["etag"].is_string()) {
    return fail(Code::kInvalidArgument, "an object's description is malformed");
  }
  storage::ObjectInfo o;
  o.key = j["key"].get<std::string>();
  o.size = j["size"].get<int64_t>();
  o.etag = j["etag"].get<std::string>();
  if (auto c = j.find("crc64"); c != j.end() && c->is_number_unsigned()) o.crc64 = c->get<uint64_t>();
  return o;
}

// ---- the worker's side: a store it reaches only by asking -----------------------------------

class Channel {
 public:
  explicit Channel(int sock) : sock_(sock) {}
  // One call at a time: the transfer engines call stores from several threads.
  Result<Json> call(const Json& request, int fd = -1) {
    std::lock_guard lock(mu_);
    COHORT_TRY(sendMessage(sock_, request, fd));
    COHORT_ASSIGN(Json answer, receiveMessage(sock_, nullptr));
    if (auto e = answer.find("error"); e != answer.end()) return tl::unexpected<Error>(errorFrom(*e));
    return answer;
  }
  int sock() const { return sock_; }

 private:
  int sock_;
  std::mutex mu_;
};

class RemoteStore final : public storage::ObjectStore {
 public:
  RemoteStore(Channel& channel, int index, std::string uri) : ch_(channel), index_(index) {
    while (!uri.empty() && uri.back() == '/') uri.pop_back();
    base_ = std::move(uri);
  }

  std::string uri(const std::string& key) const override {
    return key.empty() ? base_ : base_ + "/" + key;
  }

  Result<std::vector<storage::ObjectInfo>> list(const std::string& prefix) override {
    std::vector<storage::ObjectInfo> all;
    for (int64_t from = 0;;) {
      COHORT_ASSIGN(Json page, ch_.call({{"call", "list"},
                                         {"store", index_},
                                         {"prefix", prefix},
                                         {"from", from}}));
      if (!page.contains("objects") || !page["objects"].is_array()) {
        return fail(Code::kInvalidArgument, "a listing is malformed");
      }
      for (const Json& o : page["objects"]) {
        COHORT_ASSIGN(storage::ObjectInfo info, infoFrom(o));
        all.push_back(std::move(info));
      }
      from = static_cast<int64_t>(all.size());
      if (!page.value("more", false)) return all;
    }
  }

  Result<storage::ObjectInfo> head(const std::string& key) override {
    COHORT_ASSIGN(Json answer, ch_.call({{"call", "head"}, {"store", index_}, {"key", key}}));
    return infoFrom(answer.value("object", Json()));
  }

  Result<storage::Fetched> getRange(const std::string& key, int fd, int64_t offset,
                                    int64_t length) override {
    COHORT_ASSIGN(Json answer, ch_.call({{"call", "get"},
                                         {"store", index_},
                                         {"key", key},
                                         {"offset", offset},
                                         {"length", length}},
                                        fd));
    storage::Fetched fetched;
    if (auto c = answer.find("crc"); c != answer.end() && c->is_number_unsigned()) {
      fetched.crc = c->get<uint64_t>();
    }
    if (auto c = answer.find("object_crc"); c != answer.end() && c->is_number_unsigned()) {
      fetched.object_crc = c->get<uint64_t>();
    }
    return fetched;
  }

  Result<std::string> etagOf(int fd, int64_t size) const override {
    return storage::contentTag(fd, size);
  }
  bool checkable(const storage::ObjectInfo& object) const override {
    return storage::isContentTag(object);
  }

  Result<std::string> put(const std::string& key, int fd, int64_t size, const std::atomic<bool>*,
                          const storage::PartDone& sent) override {
    COHORT_ASSIGN(Json answer,
                  ch_.call({{"call", "put"}, {"store", index_}, {"key", key}, {"size", size}}, fd));
    if (sent) sent(size);
    auto etag = answer.find("etag");
    if (etag == answer.end() || !etag->is_string()) {
      return fail(Code::kInvalidArgument, "a put's answer is malformed");
    }
    return etag->get<std::string>();
  }

 private:
  Channel& ch_;
  int index_;
  std::string base_;
};

// ---- the caller's side: answering for the granted keys only ---------------------------------

bool granted(const StoreGrant& g, const std::string& key) {
  if (g.prefix.empty()) return true;
  if (g.prefix.back() == '/') return startsWith(key, g.prefix);
  return key == g.prefix || startsWith(key, g.prefix + "/");
}

class Server {
 public:
  Server(int sock, const std::vector<StoreGrant>& stores) : sock_(sock), stores_(stores) {}

  // Answers calls until the worker's last message, which it returns.
  Result<Json> serve() {
    for (;;) {
      UniqueFd fd;
      COHORT_ASSIGN(Json request, receiveMessage(sock_, &fd));
      if (request.contains("done") || request.contains("failed")) return request;
      Json answer;
      if (auto result = call(request, fd.get()); result) {
        answer = std::move(*result);
      } else {
        answer = {{"error", errorJson(result.error())}};
      }
      COHORT_TRY(sendMessage(sock_, answer));
    }
  }

 private:
  // One call of the worker's, answered (or refused) for the granted keys.
  Result<Json> call(const Json& r, int fd) {
    const std::string op = r.value("call", "");
    const auto index = r.find("store");
    if (index == r.end() || !index->is_number_integer() || index->get<int64_t>() < 0 ||
        index->get<int64_t>() >= static_cast<int64_t>(stores_.size())) {
      return fail(Code::kPermissionDenied, "no such store");
    }
    const StoreGrant& g = stores_[index->get<size_t>()];
    const std::string key = r.value(op == "list" ? "prefix" : "key", "");
    if (!granted(g, key)) {
      return fail(Code::kPermissionDenied,
                  g.store->uri(key) + ": not one of the keys this job may use");
    }
    if (op == "list") {
      const int64_t from = r.value("from", int64_t{0});
      auto& cached = listings_[{index->get<size_t>(), key}];
      if (from == 0) {
        COHORT_ASSIGN(cached, g.store->list(key));
      }
      Json objects = Json::array();
      size_t bytes = 0;
      size_t i = static_cast<size_t>(std::max<int64_t>(from, 0));
      for (; i < cached.size() && bytes < kPageBytes; ++i) {
        Json o = infoJson(cached[i]);
        bytes += o.dump().size() + 1;
        objects.push_back(std::move(o));
      }
      return Json{{"objects", std::move(objects)}, {"more", i < cached.size()}};
    }
    if (op == "head") {
      COHORT_ASSIGN(storage::ObjectInfo info, g.store->head(key));
      return Json{{"object", infoJson(info)}};
    }
    if (op == "get") {
      if (fd < 0) return fail(Code::kInvalidArgument, "get: no file to write to");
      COHORT_ASSIGN(storage::Fetched fetched,
                    g.store->getRange(key, fd, r.value("offset", int64_t{0}),
                                      r.value("length", int64_t{0})));
      Json answer = {{"crc", fetched.crc}};
      if (fetched.object_crc) answer["object_crc"] = *fetched.object_crc;
      return answer;
    }
    if (op == "put") {
      if (!g.write) return fail(Code::kPermissionDenied, g.store->uri(key) + ": read-only here");
      if (fd < 0) return fail(Code::kInvalidArgument, "put: no file to read from");
      COHORT_ASSIGN(std::string etag,
                    g.store->put(key, fd, r.value("size", int64_t{0}), nullptr));
      return Json{{"etag", etag}};
    }
    return fail(Code::kInvalidArgument, "an unknown call '" + op + "'");
  }

  int sock_;
  const std::vector<StoreGrant>& stores_;
  std::map<std::pair<size_t, std::string>, std::vector<storage::ObjectInfo>> listings_;
};

std::string selfExecutable() {
  char path[4096];
  ssize_t n = ::readlink("/proc/self/exe", path, sizeof path - 1);
  return n > 0 ? std::string(path, static_cast<size_t>(n)) : std::string("/proc/self/exe");
}

Result<std::string> readAll(int fd) {
  std::string text;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return failErrno("read the request");
    if (n == 0) return text;
    text.append(buf, static_cast<size_t>(n));
    if (text.size() > kMaxRequest) return fail(Code::kTooLarge, "a request over 64 MiB");
  }
}

}  // namespace

bool needsWorker(const Identity& who) {
  if (who.own()) return false;
  return (who.uid >= 0 && static_cast<uid_t>(who.uid) != ::geteuid()) ||
         (who.gid >= 0 && static_cast<gid_t>(who.gid) != ::getegid());
}

Result<Done> runAs(const Identity& who, const Work& work, const std::vector<StoreGrant>& stores,
                   int archive_fd) {
  if (!needsWorker(who)) {
    std::vector<storage::ObjectStore*> direct;
    for (const StoreGrant& g : stores) direct.push_back(g.store);
    return perform(work, direct, archive_fd);
  }
  const std::string what = std::string(describe(work)) + " as uid " + std::to_string(who.uid);
  Json store_list = Json::array();
  for (const StoreGrant& g : stores) store_list.push_back({{"uri", g.store->uri("")}});
  const std::string request =
      Json{{"work", encodeWork(work)}, {"stores", std::move(store_list)}}.dump();
  UniqueFd request_fd(::memfd_create("cohort-account-request", MFD_CLOEXEC));
  if (!request_fd.valid()) return failErrno("memfd_create");
  COHORT_TRY(writeAll(request_fd.get(), request));
  if (::lseek(request_fd.get(), 0, SEEK_SET) != 0) return failErrno("lseek");
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) {
    return failErrno("socketpair");
  }
  UniqueFd mine(pair[0]), theirs(pair[1]);

  proc::SpawnRequest req;
  req.argv = {selfExecutable(), "account-worker"};
  req.env = kWorkerEnvironment;
  req.cwd = "/";
  req.stdin_fd = request_fd.get();
  req.fd3 = theirs.get();
  req.uid = who.uid;
  req.gid = who.gid;
  req.no_new_privs = true;
  auto child = proc::spawn(req);
  if (!child) return withContext(child.error(), what);
  theirs.reset();
  request_fd.reset();

  Result<Json> last = [&]() -> Result<Json> {
    if (std::holds_alternative<Extract>(work)) {
      COHORT_TRY(sendMessage(mine.get(), {{"archive", true}}, archive_fd));
    }
    Server server(mine.get(), stores);
    return server.serve();
  }();
  mine.reset();
  auto status = proc::reap(child->pidfd.get());
  if (!last) {
    const std::string how = status ? status->describe() : "it could not be waited for";
    return fail(Code::kIo, what + ": the worker ended without an answer (" + how +
                               (last.error().code == Code::kUnavailable
                                    ? ""
                                    : "; " + last.error().message) +
                               ")");
  }
  if (auto failed = last->find("failed"); failed != last->end()) {
    return withContext(errorFrom(*failed), "as uid " + std::to_string(who.uid));
  }
  const Json& done = (*last)["done"];
  Done result;
  if (done.is_object()) {
    result.files = done.value("files", int64_t{0});
    result.bytes = done.value("bytes", int64_t{0});
    result.dirs = done.value("dirs", int64_t{0});
    result.links = done.value("links", int64_t{0});
  }
  return result;
}

int accountWorkerMain() {
  // Nothing of this process is another process's to read: not while it holds the caller's
  // descriptors, not ever.
  ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  if (::getuid() == 0 || ::geteuid() == 0 || ::getgid() == 0) {
    std::fprintf(stderr, "cohort account-worker: runs as an account, never as root\n");
    return 2;
  }
  const int sock = kSocketFd;
  auto finish = [&](const Result<Done>& done) {
    Json last = done ? Json{{"done",
                             {{"files", done->files},
                              {"bytes", done->bytes},
                              {"dirs", done->dirs},
                              {"links", done->links}}}}
                     : Json{{"failed", errorJson(done.error())}};
    return sendMessage(sock, last) ? 0 : 1;
  };
  auto text = readAll(STDIN_FILENO);
  if (!text) return finish(tl::unexpected<Error>(text.error()));
  Json envelope = Json::parse(*text, nullptr, false);
  if (!envelope.is_object() || !envelope.contains("work") || !envelope["work"].is_string() ||
      !envelope.contains("stores") || !envelope["stores"].is_array()) {
    return finish(fail(Code::kInvalidArgument, "a malformed request"));
  }
  auto work = decodeWork(envelope["work"].get<std::string>());
  if (!work) return finish(tl::unexpected<Error>(work.error()));
  Channel channel(sock);
  std::vector<std::unique_ptr<RemoteStore>> remote;
  std::vector<storage::ObjectStore*> stores;
  for (const Json& s : envelope["stores"]) {
    const std::string uri = s.is_object() ? s.value("uri", "") : "";
    remote.push_back(std::make_unique<RemoteStore>(channel, static_cast<int>(remote.size()), uri));
    stores.push_back(remote.back().get());
  }
  UniqueFd archive;
  if (std::holds_alternative<Extract>(*work)) {
    auto got = receiveMessage(sock, &archive);
    if (!got || !archive.valid()) {
      return finish(fail(Code::kInvalidArgument, "no archive came with the request"));
    }
  }
  return finish(perform(*work, stores, archive.get()));
}

}  // namespace cohort::account
