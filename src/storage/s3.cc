#include "storage/s3.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "http/curl_lib.h"
#include "storage/crc64.h"
#include "storage/uri.h"
#include "util/text.h"

namespace cohort::storage {

using http::CurlLib;

namespace {

constexpr std::string_view kScheme = "s3://";
constexpr int kRetries = 3;
constexpr int kPartThreads = 4;              // parts of one object in flight at once
constexpr size_t kMaxReplyBytes = 64 << 20;  // an XML answer larger than this is refused
constexpr int64_t kMaxObjectBytes = int64_t{5} << 40;  // S3's limit on one object
// Asks a HEAD or GET for the object's checksums: its CRC-64/NVME, which services that keep one
// (AWS since 2025, versitygw) give as x-amz-checksum-crc64nvme, for any object however uploaded.
constexpr const char* kChecksumMode = "x-amz-checksum-mode: ENABLED";

// ---- encoding and digests --------------------------------------------------------------------

std::string digestHex(const EVP_MD* md, std::string_view data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(data.data(), data.size(), out, &n, md, nullptr);
  return hexEncode(out, n);
}

Result<void> preadAll(int fd, char* buf, size_t n, int64_t offset, const std::string& what) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = ::pread(fd, buf + got, n - got, offset + static_cast<int64_t>(got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return failErrno("read '" + what + "'");
    if (r == 0) return fail(Code::kIo, "read '" + what + "': the file shrank while it was read");
    got += static_cast<size_t>(r);
  }
  return {};
}

// ---- XML answers (a few flat elements; entities decoded) ----------------------------------

std::string xmlDecode(std::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '&') {
      out += text[i];
      continue;
    }
    size_t semi = text.find(';', i);
    if (semi == std::string_view::npos || semi - i > 10) {
      out += text[i];
      continue;
    }
    std::string_view entity = text.substr(i + 1, semi - i - 1);
    if (entity == "amp")
      out += '&';
    else if (entity == "lt")
      out += '<';
    else if (entity == "gt")
      out += '>';
    else if (entity == "quot")
      out += '"';
    else if (entity == "apos")
      out += '\'';
    else if (entity.size() > 1 && entity[0] == '#') {
      bool hex = entity[1] == 'x' || entity[1] == 'X';
      unsigned long cp =
          std::strtoul(std::string(entity.substr(hex ? 2 : 1)).c_str(), nullptr, hex ? 16 : 10);
      // UTF-8 of the code point.
      if (cp < 0x80) {
        out += static_cast<char>(cp);
      } else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
      } else if (cp < 0x10000) {
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
      } else {
        out += static_cast<char>(0xF0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
      }
    } else {
      out.append(text.substr(i, semi - i + 1));
    }
    i = semi;
  }
  return out;
}

// The raw text of every <tag>...</tag> in `xml`, in order.
std::vector<std::string_view> xmlElements(std::string_view xml, std::string_view tag) {
  std::vector<std::string_view> out;
  const std::string open = "<" + std::string(tag) + ">", close = "</" + std::string(tag) + ">";
  size_t at = 0;
  while ((at = xml.find(open, at)) != std::string_view::npos) {
    size_t start = at + open.size();
    size_t end = xml.find(close, start);
    if (end == std::string_view::npos) break;
    out.push_back(xml.substr(start, end - start));
    at = end + close.size();
  }
  return out;
}

std::string xmlText(std::string_view xml, std::string_view tag) {
  auto all = xmlElements(xml, tag);
  return all.empty() ? "" : xmlDecode(all.front());
}

std::string unquote(std::string etag) {
  if (etag.size() >= 2 && etag.front() == '"' && etag.back() == '"') {
    etag = etag.substr(1, etag.size() - 2);
  }
  return etag;
}

// ---- configuration -------------------------------------------------------------------------

using IniFile = std::map<std::string, std::map<std::string, std::string>>;

IniFile readIni(const std::string& path) {
  IniFile ini;
  std::ifstream in(path);
  std::string line, section;
  while (std::getline(in, line)) {
    std::string t(trim(line));
    if (t.empty() || t[0] == '#' || t[0] == ';') continue;
    if (t.front() == '[' && t.back() == ']') {
      section = std::string(trim(std::string_view(t).substr(1, t.size() - 2)));
      ini[section];
      continue;
    }
    size_t eq = t.find('=');
    if (eq == std::string::npos) continue;
    ini[section][std::string(trim(std::string_view(t).substr(0, eq)))] =
        std::string(trim(std::string_view(t).substr(eq + 1)));
  }
  return ini;
}

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

std::string awsFile(const char* variable, const char* name) {
  if (std::string set = env(variable); !set.empty()) return set;
  std::string home = env("HOME");
  return home.empty() ? "" : home + "/.aws/" + name;
}

// ---- HTTP ------------------------------------------------------------------------------------

struct Request {
  const char* method = "GET";
  std::string key;    // "" = the bucket
  std::string query;  // encoded, parameters in sorted order, without '?'
  std::string_view body;
  std::string content_type;
  std::vector<std::string> headers;  // more, "name: value" (signed with the rest)
  int fd = -1;                       // GET: the body is written here, at `offset` onwards
  int64_t offset = 0;
  int64_t length = -1;  // GET: a byte range of this length at `offset`
  const std::atomic<bool>* cancel = nullptr;
};

struct Reply {
  long status = 0;
  std::string body;
  std::string etag;
  int64_t content_length = -1;
  int64_t written = 0;       // GET into fd
  uint64_t written_crc = 0;  // their CRC-64/NVME
  std::string write_error;
  std::optional<uint64_t> crc64;  // x-amz-checksum-crc64nvme: the whole object's
  bool partial = false;           // a Content-Range that is not the whole object
};

// "bytes A-B/TOTAL": whether it is less than the whole object.
bool partialRange(std::string_view value) {
  const size_t dash = value.find('-'), slash = value.find('/');
  if (value.rfind("bytes 0-", 0) != 0 || slash == std::string_view::npos || dash > slash) {
    return true;
  }
  const std::string last(value.substr(dash + 1, slash - dash - 1));
  const std::string total(value.substr(slash + 1));
  return std::atoll(last.c_str()) + 1 != std::atoll(total.c_str());
}

// The 8 big-endian bytes of a base64 x-amz-checksum-crc64nvme; none for anything else (a
// composite "....-N" checksum, say).
std::optional<uint64_t> parseCrc64(const std::string& text) {
  auto bytes = base64Decode(text);
  if (!bytes || bytes->size() != 8) return std::nullopt;
  uint64_t crc = 0;
  for (unsigned char c : *bytes) crc = crc << 8 | c;
  return crc;
}

struct Transfer {
  const Request* request;
  Reply* reply;
  size_t sent = 0;
  std::string unwritten;  // GET into fd: what arrived since the last write
};

// libcurl hands a body over 16 KiB at a time (CURL_MAX_WRITE_SIZE): written to the file a
// MiB at a time instead, a sixty-fourth of the system calls.
constexpr size_t kWriteBytes = size_t{1} << 20;

// Writes what `t` holds to the request's fd, after what is written. False on an error, in
// the reply's write_error.
bool writeOut(Transfer& t) {
  Reply& reply = *t.reply;
  const std::string& data = t.unwritten;
  for (size_t done = 0; done < data.size();) {
    ssize_t w = ::pwrite(t.request->fd, data.data() + done, data.size() - done,
                         t.request->offset + reply.written + static_cast<int64_t>(done));
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) {
      reply.write_error = std::strerror(errno);
      return false;
    }
    done += static_cast<size_t>(w);
  }
  reply.written += static_cast<int64_t>(data.size());
  t.unwritten.clear();
  return true;
}

size_t onBody(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  size_t bytes = size * n;
  Reply& reply = *t->reply;
  if (t->request->fd >= 0 && reply.status / 100 == 2) {
    if (t->unwritten.capacity() < kWriteBytes) t->unwritten.reserve(kWriteBytes);
    t->unwritten.append(data, bytes);
    reply.written_crc = crc64nvme(reply.written_crc, data, bytes);
    if (t->unwritten.size() >= kWriteBytes && !writeOut(*t)) return 0;
    return bytes;
  }
  if (reply.body.size() + bytes > kMaxReplyBytes) return 0;
  reply.body.append(data, bytes);
  return bytes;
}

size_t onHeader(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  std::string_view line(data, size * n);
  if (line.rfind("HTTP/", 0) == 0) {
    size_t sp = line.find(' ');
    if (sp != std::string_view::npos)
      t->reply->status = std::atol(std::string(line.substr(sp + 1, 3)).c_str());
    return size * n;
  }
  size_t colon = line.find(':');
  if (colon == std::string_view::npos) return size * n;
  std::string name(line.substr(0, colon));
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  std::string value(trim(line.substr(colon + 1)));
  if (name == "etag") t->reply->etag = unquote(value);
  if (name == "content-length") t->reply->content_length = std::atoll(value.c_str());
  if (name == "content-range") t->reply->partial = partialRange(value);
  if (name == "x-amz-checksum-crc64nvme") t->reply->crc64 = parseCrc64(value);
  return size * n;
}

size_t onRead(char* buffer, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  size_t room = size * n, left = t->request->body.size() - t->sent;
  size_t chunk = std::min(room, left);
  std::memcpy(buffer, t->request->body.data() + t->sent, chunk);
  t->sent += chunk;
  return chunk;
}

int onProgress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  auto* t = static_cast<Transfer*>(user);
  return t->request->cancel && t->request->cancel->load() ? 1 : 0;
}

// ---- AWS Signature Version 4 ------------------------------------------------------------------

std::string hmac(std::string_view key, std::string_view data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), out, &n);
  return std::string(reinterpret_cast<char*>(out), n);
}

// "host:port" of "scheme://host:port/path?query".
std::string authority(std::string_view url) {
  const size_t start = url.find("://") + 3;
  return std::string(url.substr(start, url.find_first_of("/?", start) - start));
}

// Now, as SigV4 writes it: "20130524T000000Z".
std::string amzDate() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  ::gmtime_r(&now, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y%m%dT%H%M%SZ", &utc);
  return text;
}

class S3Store final : public ObjectStore {
 public:
  S3Store(const CurlLib& curl, S3Config config, std::string bucket)
      : curl_(curl), config_(std::move(config)), bucket_(std::move(bucket)) {}

  ~S3Store() override {
    for (CURL* h : idle_) curl_.easy_cleanup(h);
  }

  std::string uri(const std::string& key) const override {
    return "s3://" + bucket_ + (key.empty() ? "" : "/" + key);
  }

  Result<std::vector<ObjectInfo>> list(const std::string& prefix) override {
    std::vector<ObjectInfo> out;
    std::string token;
    do {
      Request r;
      r.query = (token.empty() ? "" : "continuation-token=" + urlEncode(token, false) + "&") +
                "list-type=2&prefix=" + urlEncode(prefix, false);
      COHORT_ASSIGN(Reply reply, send(r, prefix));
      for (std::string_view item : xmlElements(reply.body, "Contents")) {
        ObjectInfo info;
        info.key = xmlText(item, "Key");
        info.size = std::atoll(xmlText(item, "Size").c_str());
        info.etag = unquote(xmlText(item, "ETag"));
        COHORT_TRY(checkSize(info));
        out.push_back(std::move(info));
      }
      if (static_cast<int64_t>(out.size()) > kMaxListed) {
        return fail(Code::kTooLarge, uri(prefix) + ": more than " + std::to_string(kMaxListed) +
                                         " objects under this prefix");
      }
      token = xmlText(reply.body, "IsTruncated") == "true"
                  ? xmlText(reply.body, "NextContinuationToken")
                  : "";
    } while (!token.empty());
    std::sort(out.begin(), out.end(),
              [](const ObjectInfo& a, const ObjectInfo& b) { return a.key < b.key; });
    return out;
  }

  Result<ObjectInfo> head(const std::string& key) override {
    Request r;
    r.method = "HEAD";
    r.key = key;
    r.headers = {kChecksumMode};
    COHORT_ASSIGN(Reply reply, send(r, key));
    ObjectInfo info{key, reply.content_length, reply.etag, reply.crc64};
    COHORT_TRY(checkSize(info));
    return info;
  }

  Result<Fetched> getRange(const std::string& key, int fd, int64_t offset,
                           int64_t length) override {
    if (length == 0) return Fetched{};
    Request r;
    r.key = key;
    r.fd = fd;
    r.offset = offset;
    r.length = length;
    r.headers = {kChecksumMode};
    COHORT_ASSIGN(Reply reply, send(r, key));
    if (reply.written != length) {
      return fail(Code::kIo, uri(key) + ": got " + std::to_string(reply.written) + " of " +
                                 std::to_string(length) + " bytes");
    }
    Fetched fetched{reply.written_crc, std::nullopt};
    if (offset == 0 && !reply.partial) fetched.object_crc = reply.crc64;
    return fetched;
  }

  Result<std::string> etagOf(int fd, int64_t size) const override { return contentTag(fd, size); }

  // An MD5 ("32 hex"), or an MD5 of part MD5s ("32 hex-N") with as many parts as cohort makes.
  bool checkable(const ObjectInfo& object) const override { return isContentTag(object); }

  Result<std::string> put(const std::string& key, int fd, int64_t size,
                          const std::atomic<bool>* cancel, const PartDone& sent) override {
    Stored stored;
    if (size <= kPartSize) {
      std::string data(static_cast<size_t>(size), '\0');
      COHORT_TRY(preadAll(fd, data.data(), data.size(), 0, "'" + key + "'"));
      Request r;
      r.method = "PUT";
      r.key = key;
      r.body = data;
      r.cancel = cancel;
      COHORT_ASSIGN(Reply reply, send(r, key));
      stored = {reply.etag, reply.crc64, crc64nvme(0, data.data(), data.size())};
    } else {
      COHORT_ASSIGN(stored, putMultipart(key, fd, size, cancel, sent));
    }
    return checkStored(key, fd, size, stored);
  }

  Result<std::optional<std::string>> copyIn(ObjectStore& from, const ObjectInfo& object,
                                            const std::string& key, const std::atomic<bool>* cancel,
                                            const PartDone& copied) override {
    auto* other = dynamic_cast<S3Store*>(&from);
    if (!other || other->config_.endpoint != config_.endpoint ||
        other->config_.region != config_.region ||
        other->config_.access_key != config_.access_key) {
      return std::optional<std::string>();
    }
    COHORT_ASSIGN(std::string etag, copyFrom(*other, object, key, cancel, copied));
    return std::optional<std::string>(std::move(etag));
  }

  // One listing of at most one key under `prefix`.
  Result<void> probe(const std::string& prefix) {
    Request r;
    r.query = "list-type=2&max-keys=1&prefix=" + urlEncode(prefix, false);
    COHORT_TRY(send(r, prefix));
    return {};
  }

 private:
  // A size the service reports is believed only within S3's own limit (5 TiB an object).
  Result<void> checkSize(const ObjectInfo& info) const {
    if (info.size < 0 || info.size > kMaxObjectBytes) {
      return fail(Code::kIo, uri(info.key) + ": the service reports a size of " +
                                 std::to_string(info.size) + " bytes, outside 0 to 5 TiB");
    }
    return {};
  }

  // What the service said it stored, and the CRC-64/NVME of the bytes sent.
  struct Stored {
    std::string etag;
    std::optional<uint64_t> crc64;  // the service's, of the whole object, where it keeps one
    uint64_t sent_crc = 0;
  };

  // put's last step: the object the service holds must be the `size` bytes of `fd` that were
  // sent. Its CRC-64/NVME where it gave one (no second read of the file), else its etag
  // against the file's MD5s where the etag has that form.
  Result<std::string> checkStored(const std::string& key, int fd, int64_t size,
                                  const Stored& stored) const {
    const std::string differs = uri(key) + ": the store holds other bytes than were sent";
    if (stored.crc64) {
      if (*stored.crc64 != stored.sent_crc) {
        return fail(Code::kIo, differs + " (CRC-64/NVME " + crc64Hex(*stored.crc64) +
                                   ", expected " + crc64Hex(stored.sent_crc) + ")");
      }
      return stored.etag;
    }
    if (!checkable(ObjectInfo{key, size, stored.etag, std::nullopt})) return stored.etag;
    COHORT_ASSIGN(std::string tag, contentTag(fd, size));
    if (tag != stored.etag) {
      return fail(Code::kIo, differs + " (etag " + stored.etag + ", expected " + tag + ")");
    }
    return stored.etag;
  }

  // Sends part `number` (from 1), bytes [at, at + n) of the object, of the multipart upload
  // `upload_id`, and returns its etag.
  using SendPart = std::function<Result<std::string>(int number, int64_t at, int64_t n,
                                                     const std::string& upload_id)>;

  Result<Stored> putMultipart(const std::string& key, int fd, int64_t size,
                              const std::atomic<bool>* cancel, const PartDone& sent) {
    const int64_t part = partSize(size);
    std::vector<uint64_t> crcs(static_cast<size_t>((size + part - 1) / part));
    COHORT_ASSIGN(
        Stored stored,
        multipart(key, size, cancel, sent,
                  [&](int number, int64_t at, int64_t n,
                      const std::string& upload_id) -> Result<std::string> {
                    thread_local std::string buf;  // one per part thread, freed when it ends
                    buf.resize(static_cast<size_t>(n));
                    COHORT_TRY(preadAll(fd, buf.data(), buf.size(), at, "'" + key + "'"));
                    crcs[static_cast<size_t>(number - 1)] = crc64nvme(0, buf.data(), buf.size());
                    Request r;
                    r.method = "PUT";
                    r.key = key;
                    r.query = partQuery(number, upload_id);
                    r.body = buf;
                    r.cancel = cancel;
                    COHORT_ASSIGN(Reply reply, send(r, key));
                    return reply.etag;
                  }));
    for (size_t i = 0; i < crcs.size(); ++i) {
      const int64_t n = std::min(part, size - static_cast<int64_t>(i) * part);
      stored.sent_crc = crc64nvmeCombine(stored.sent_crc, crcs[i], n);
    }
    return stored;
  }

  // S3's copy requests may fail after their 200: the <Error> is then in the body.
  Result<std::string> copyEtag(const Result<Reply>& reply, const std::string& key) {
    if (!reply) return tl::unexpected<Error>(reply.error());
    if (reply->body.find("<Error>") != std::string::npos) {
      return fail(Code::kIo, uri(key) + ": the copy failed: " + xmlText(reply->body, "Message"));
    }
    std::string etag = unquote(xmlText(reply->body, "ETag"));
    if (etag.empty()) return fail(Code::kIo, uri(key) + ": the service answered no copy's etag");
    return etag;
  }

  // The service copies `object` of `from` (another bucket, or this one, at this endpoint with
  // these credentials) to `key`: one CopyObject, or UploadPartCopy of put's parts.
  Result<std::string> copyFrom(const S3Store& from, const ObjectInfo& object,
                               const std::string& key, const std::atomic<bool>* cancel,
                               const PartDone& copied) {
    const std::string source =
        "x-amz-copy-source: /" + from.bucket_ + "/" + urlEncode(object.key, true);
    if (object.size <= kPartSize) {
      Request r;
      r.method = "PUT";
      r.key = key;
      r.headers = {source};
      r.cancel = cancel;
      return copyEtag(send(r, key), key);
    }
    COHORT_ASSIGN(Stored stored,
                  multipart(key, object.size, cancel, copied,
                            [&](int number, int64_t at, int64_t n, const std::string& upload_id) {
                              Request r;
                              r.method = "PUT";
                              r.key = key;
                              r.query = partQuery(number, upload_id);
                              r.headers = {source,
                                           "x-amz-copy-source-range: bytes=" + std::to_string(at) +
                                               "-" + std::to_string(at + n - 1)};
                              r.cancel = cancel;
                              return copyEtag(send(r, key), key);
                            }));
    return stored.etag;
  }

  static std::string partQuery(int number, const std::string& upload_id) {
    return "partNumber=" + std::to_string(number) + "&uploadId=" + urlEncode(upload_id, false);
  }

  // A multipart upload of `size` bytes to `key`, its parts (of partSize(size) bytes) sent by
  // `send_part`, kPartThreads at once; completed, or aborted when a part fails or `cancel`
  // turns true, so that nothing appears under the key unless whole.
  Result<Stored> multipart(const std::string& key, int64_t size, const std::atomic<bool>* cancel,
                           const PartDone& done, const SendPart& send_part) {
    Request create;
    create.method = "POST";
    create.key = key;
    create.query = "uploads=";
    COHORT_ASSIGN(Reply created, send(create, key));
    const std::string upload_id = xmlText(created.body, "UploadId");
    if (upload_id.empty()) {
      return fail(Code::kIo, uri(key) + ": the service started no multipart upload");
    }
    const int64_t part = partSize(size);
    const int parts = static_cast<int>((size + part - 1) / part);
    std::vector<std::string> etags(static_cast<size_t>(parts));
    std::atomic<int> next{0};
    std::mutex mu;
    std::optional<Error> first_error;
    auto worker = [&] {
      for (int i; (i = next.fetch_add(1)) < parts;) {
        if (cancel && cancel->load()) return;
        {
          std::lock_guard lock(mu);
          if (first_error) return;
        }
        const int64_t at = int64_t{i} * part;
        const int64_t n = std::min(part, size - at);
        auto etag = send_part(i + 1, at, n, upload_id);
        if (etag && done) done(n);
        std::lock_guard lock(mu);
        if (!etag) {
          if (!first_error) first_error = etag.error();
          return;
        }
        etags[static_cast<size_t>(i)] = *etag;
      }
    };
    std::vector<std::thread> threads;
    for (int t = 0; t < std::min(parts, kPartThreads); ++t) threads.emplace_back(worker);
    for (auto& t : threads) t.join();
    if (!first_error && cancel && cancel->load()) {
      first_error = Error{Code::kFailedPrecondition, "interrupted"};
    }

    if (!first_error) {
      std::string xml = "<CompleteMultipartUpload>";
      for (int i = 0; i < parts; ++i) {
        xml += "<Part><PartNumber>" + std::to_string(i + 1) + "</PartNumber><ETag>\"" +
               etags[static_cast<size_t>(i)] + "\"</ETag></Part>";
      }
      xml += "</CompleteMultipartUpload>";
      Request complete;
      complete.method = "POST";
      complete.key = key;
      complete.query = "uploadId=" + urlEncode(upload_id, false);
      complete.body = xml;
      complete.content_type = "application/xml";
      auto done_reply = send(complete, key);
      // S3 may answer 200 with an <Error> in the body.
      if (done_reply && done_reply->body.find("<Error>") == std::string::npos) {
        return Stored{unquote(xmlText(done_reply->body, "ETag")),
                      parseCrc64(xmlText(done_reply->body, "ChecksumCRC64NVME"))};
      }
      first_error = done_reply ? Error{Code::kIo, uri(key) + ": completing the upload failed: " +
                                                      xmlText(done_reply->body, "Message")}
                               : done_reply.error();
    }
    Request abort;
    abort.method = "DELETE";
    abort.key = key;
    abort.query = "uploadId=" + urlEncode(upload_id, false);
    (void)send(abort, key);  // best effort: the service also expires unfinished uploads
    return tl::unexpected<Error>(*first_error);
  }

  std::string url(const Request& r) const {
    std::string base;
    if (config_.endpoint.empty()) {
      base = "https://" + bucket_ + ".s3." + config_.region + ".amazonaws.com/";
    } else {
      base = config_.endpoint + "/" + bucket_ + (r.key.empty() ? "" : "/");
    }
    std::string out = base + urlEncode(r.key, true);
    if (!r.query.empty()) out += "?" + r.query;
    return out;
  }

  CURL* acquire() {
    std::lock_guard lock(mu_);
    if (idle_.empty()) return curl_.easy_init();
    CURL* h = idle_.back();
    idle_.pop_back();
    return h;
  }
  void release(CURL* h) {
    std::lock_guard lock(mu_);
    idle_.push_back(h);
  }

  // One request with retries; errors in words, naming `what` (a key or a prefix).
  Result<Reply> send(const Request& r, const std::string& what) {
    for (int attempt = 0;; ++attempt) {
      Reply reply;
      CURLcode code = perform(r, reply);
      const bool cancelled = r.cancel && r.cancel->load();
      if (cancelled) return fail(Code::kFailedPrecondition, "interrupted");
      if (!reply.write_error.empty()) {
        return fail(Code::kIo, uri(what) + ": write: " + reply.write_error);
      }
      const bool transient = code != CURLE_OK || reply.status >= 500 || reply.status == 429;
      if (transient && attempt < kRetries) {
        std::this_thread::sleep_for(std::chrono::milliseconds(200 << (2 * attempt)));
        continue;
      }
      if (code != CURLE_OK) {
        return fail(Code::kUnavailable, uri(what) + ": cannot reach the S3 service at " +
                                            endpointName() + ": " + curl_.easy_strerror(code) +
                                            " (set AWS_ENDPOINT_URL to the service)");
      }
      if (reply.status / 100 == 2) return reply;
      return failFor(r, reply, what);
    }
  }

  std::string endpointName() const {
    return config_.endpoint.empty() ? "s3." + config_.region + ".amazonaws.com" : config_.endpoint;
  }

  tl::unexpected<Error> failFor(const Request& r, const Reply& reply, const std::string& what) {
    const std::string code = xmlText(reply.body, "Code");
    const std::string message = xmlText(reply.body, "Message");
    const std::string said = code.empty() ? "HTTP " + std::to_string(reply.status)
                                          : code + (message.empty() ? "" : ": " + message);
    if (code == "NoSuchBucket") {
      return fail(Code::kNotFound, "bucket '" + bucket_ + "' does not exist at " + endpointName());
    }
    if (code == "InvalidAccessKeyId" || code == "SignatureDoesNotMatch" ||
        (reply.status == 403 && std::string_view(r.method) == "HEAD")) {
      return fail(Code::kUnauthenticated,
                  uri(what) + ": the S3 service refused the credentials (" + said +
                      "): check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or the profile "
                      "in ~/.aws/credentials");
    }
    if (reply.status == 403) {
      return fail(Code::kPermissionDenied, uri(what) + ": access denied (" + said + ")");
    }
    if (reply.status == 404) return fail(Code::kNotFound, uri(what) + ": no such object");
    return fail(Code::kIo, uri(what) + ": " + r.method + " failed: " + said);
  }

  CURLcode perform(const Request& r, Reply& reply) {
    CURL* h = acquire();
    curl_.easy_reset(h);
    Transfer t{&r, &reply};
    char error[CURL_ERROR_SIZE] = {0};
    const std::string address = url(r);
    curl_.easy_setopt(h, CURLOPT_URL, address.c_str());
    curl_.easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_.easy_setopt(h, CURLOPT_ERRORBUFFER, error);
    curl_.easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, 10000L);
    curl_.easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_.easy_setopt(h, CURLOPT_LOW_SPEED_TIME, 60L);
    if (!config_.ca_bundle.empty()) curl_.easy_setopt(h, CURLOPT_CAINFO, config_.ca_bundle.c_str());
    if (r.fd >= 0) curl_.easy_setopt(h, CURLOPT_BUFFERSIZE, 512L << 10);
    curl_.easy_setopt(h, CURLOPT_WRITEFUNCTION, onBody);
    curl_.easy_setopt(h, CURLOPT_WRITEDATA, &t);
    curl_.easy_setopt(h, CURLOPT_HEADERFUNCTION, onHeader);
    curl_.easy_setopt(h, CURLOPT_HEADERDATA, &t);
    curl_.easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    curl_.easy_setopt(h, CURLOPT_XFERINFOFUNCTION, onProgress);
    curl_.easy_setopt(h, CURLOPT_XFERINFODATA, &t);

    // Signed here rather than by libcurl's CURLOPT_AWS_SIGV4, which (7.88) orders
    // x-amz-copy-source-range before x-amz-copy-source and so fails every UploadPartCopy.
    std::vector<std::pair<std::string, std::string>> signed_headers = {
        {"host", authority(address)},
        {"x-amz-content-sha256", digestHex(EVP_sha256(), r.body)},
        {"x-amz-date", amzDate()}};
    if (!config_.session_token.empty()) {
      signed_headers.emplace_back("x-amz-security-token", config_.session_token);
    }
    if (r.length > 0) {
      signed_headers.emplace_back("range", "bytes=" + std::to_string(r.offset) + "-" +
                                               std::to_string(r.offset + r.length - 1));
    }
    for (const std::string& header : r.headers) {
      const size_t colon = header.find(':');
      signed_headers.emplace_back(header.substr(0, colon),
                                  std::string(trim(std::string_view(header).substr(colon + 1))));
    }
    curl_slist* headers = nullptr;
    for (const auto& [name, value] : signed_headers) {
      headers = curl_.slist_append(headers, (name + ": " + value).c_str());
    }
    const std::string authorization =
        "Authorization: " + signV4(config_, r.method, address, signed_headers,
                                   signed_headers[1].second, signed_headers[2].second);
    headers = curl_.slist_append(headers, authorization.c_str());
    headers = curl_.slist_append(headers, "Expect:");
    const std::string_view method = r.method;
    if (method == "HEAD") {
      curl_.easy_setopt(h, CURLOPT_NOBODY, 1L);
    } else if (method == "PUT") {
      curl_.easy_setopt(h, CURLOPT_UPLOAD, 1L);
      curl_.easy_setopt(h, CURLOPT_READFUNCTION, onRead);
      curl_.easy_setopt(h, CURLOPT_READDATA, &t);
      curl_.easy_setopt(h, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(r.body.size()));
    } else if (method == "POST") {
      curl_.easy_setopt(h, CURLOPT_POST, 1L);
      curl_.easy_setopt(h, CURLOPT_POSTFIELDS, r.body.data());
      curl_.easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(r.body.size()));
      headers = curl_.slist_append(
          headers,
          ("Content-Type: " +
           (r.content_type.empty() ? std::string("application/octet-stream") : r.content_type))
              .c_str());
    } else if (method != "GET") {
      curl_.easy_setopt(h, CURLOPT_CUSTOMREQUEST, r.method);
    }
    curl_.easy_setopt(h, CURLOPT_HTTPHEADER, headers);
    CURLcode code = curl_.easy_perform(h);
    if (!t.unwritten.empty()) writeOut(t);
    curl_.slist_free_all(headers);
    release(h);
    return code;
  }

  const CurlLib& curl_;
  const S3Config config_;
  const std::string bucket_;
  std::mutex mu_;
  std::vector<CURL*> idle_;  // handles kept with their connections, for the next request
};

}  // namespace

std::string signV4(const S3Config& config, std::string_view method, std::string_view url,
                   const std::vector<std::pair<std::string, std::string>>& headers,
                   std::string_view payload_hash, std::string_view amz_date) {
  const size_t path_at = url.find_first_of("/?", url.find("://") + 3);
  std::string_view rest = path_at == std::string_view::npos ? "" : url.substr(path_at);
  const size_t question = rest.find('?');
  std::string path(rest.substr(0, question));
  if (path.empty()) path = "/";
  const std::string query(question == std::string_view::npos ? "" : rest.substr(question + 1));
  std::vector<std::pair<std::string, std::string>> sorted;
  for (const auto& [name, value] : headers) {
    std::string lower = name;
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    sorted.emplace_back(lower, std::string(trim(value)));
  }
  std::sort(sorted.begin(), sorted.end());
  std::string canonical_headers, signed_names;
  for (const auto& [name, value] : sorted) {
    canonical_headers += name + ":" + value + "\n";
    signed_names += (signed_names.empty() ? "" : ";") + name;
  }
  const std::string canonical = std::string(method) + "\n" + path + "\n" + query + "\n" +
                                canonical_headers + "\n" + signed_names + "\n" +
                                std::string(payload_hash);
  const std::string day(amz_date.substr(0, 8));
  const std::string scope = day + "/" + config.region + "/s3/aws4_request";
  const std::string to_sign = "AWS4-HMAC-SHA256\n" + std::string(amz_date) + "\n" + scope + "\n" +
                              digestHex(EVP_sha256(), canonical);
  std::string key = hmac("AWS4" + config.secret_key, day);
  key = hmac(key, config.region);
  key = hmac(key, "s3");
  key = hmac(key, "aws4_request");
  const std::string signature = hmac(key, to_sign);
  return "AWS4-HMAC-SHA256 Credential=" + config.access_key + "/" + scope +
         ", SignedHeaders=" + signed_names + ", Signature=" +
         hexEncode(reinterpret_cast<const unsigned char*>(signature.data()),
                   static_cast<unsigned int>(signature.size()));
}

bool isS3Uri(const std::string& text) { return text.rfind(kScheme, 0) == 0; }

Result<S3Uri> parseS3Uri(const std::string& uri) {
  if (!isS3Uri(uri)) return fail(Code::kInvalidArgument, "'" + uri + "': expected s3://BUCKET/KEY");
  std::string rest = uri.substr(kScheme.size());
  S3Uri out;
  size_t slash = rest.find('/');
  out.bucket = rest.substr(0, slash);
  if (slash != std::string::npos) out.key = rest.substr(slash + 1);
  if (!validBucketName(out.bucket)) {
    return fail(Code::kInvalidArgument,
                "'" + uri + "': '" + out.bucket +
                    "' is not a valid bucket name (3 to 63 lower-case letters, digits, dots and "
                    "hyphens)");
  }
  std::string key = out.key;
  if (!key.empty() && key.back() == '/') key.pop_back();
  if (!out.key.empty()) {
    for (const std::string& part : split(key, '/')) {
      if (part.empty() || part == "." || part == "..") {
        return fail(Code::kInvalidArgument,
                    "'" + uri + "': a key may not have empty, '.' or '..' parts");
      }
    }
  }
  return out;
}

Result<S3Config> s3ConfigFromEnvironment() {
  S3Config config;
  const std::string profile = env("AWS_PROFILE").empty() ? "default" : env("AWS_PROFILE");
  const std::string credentials_file = awsFile("AWS_SHARED_CREDENTIALS_FILE", "credentials");
  const std::string config_file = awsFile("AWS_CONFIG_FILE", "config");
  IniFile credentials = credentials_file.empty() ? IniFile{} : readIni(credentials_file);
  IniFile settings = config_file.empty() ? IniFile{} : readIni(config_file);
  const auto& section = settings[profile == "default" ? "default" : "profile " + profile];

  config.access_key = env("AWS_ACCESS_KEY_ID");
  config.secret_key = env("AWS_SECRET_ACCESS_KEY");
  config.session_token = env("AWS_SESSION_TOKEN");
  if (config.access_key.empty() || config.secret_key.empty()) {
    auto found = credentials.find(profile);
    if (found == credentials.end() && !env("AWS_PROFILE").empty()) {
      return fail(Code::kInvalidArgument,
                  "AWS_PROFILE: no profile '" + profile + "' in '" + credentials_file + "'");
    }
    if (found != credentials.end()) {
      config.access_key = found->second["aws_access_key_id"];
      config.secret_key = found->second["aws_secret_access_key"];
      config.session_token = found->second["aws_session_token"];
    }
  }
  if (config.access_key.empty() || config.secret_key.empty()) {
    return fail(
        Code::kUnauthenticated,
        "no S3 credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or give the "
        "profile '" +
            profile + "' aws_access_key_id and aws_secret_access_key in " +
            (credentials_file.empty() ? "~/.aws/credentials" : "'" + credentials_file + "'"));
  }
  for (const char* name : {"AWS_REGION", "AWS_DEFAULT_REGION"}) {
    if (std::string v = env(name); !v.empty()) {
      config.region = v;
      break;
    }
  }
  if (env("AWS_REGION").empty() && env("AWS_DEFAULT_REGION").empty() && section.count("region")) {
    config.region = section.at("region");
  }
  std::string endpoint = env("AWS_ENDPOINT_URL_S3");
  if (endpoint.empty()) endpoint = env("AWS_ENDPOINT_URL");
  if (endpoint.empty() && section.count("endpoint_url")) endpoint = section.at("endpoint_url");
  while (!endpoint.empty() && endpoint.back() == '/') endpoint.pop_back();
  if (!endpoint.empty() && endpoint.rfind("http://", 0) != 0 &&
      endpoint.rfind("https://", 0) != 0) {
    return fail(Code::kInvalidArgument,
                "AWS_ENDPOINT_URL: expected http://HOST[:PORT] or https://HOST[:PORT], got '" +
                    endpoint + "'");
  }
  config.endpoint = endpoint;
  config.ca_bundle = env("AWS_CA_BUNDLE");
  if (config.ca_bundle.empty() && section.count("ca_bundle")) {
    config.ca_bundle = section.at("ca_bundle");
  }
  for (char c : config.region) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-') {
      return fail(Code::kInvalidArgument, "AWS_REGION: '" + config.region + "' is not a region");
    }
  }
  return config;
}

namespace {

Result<const CurlLib*> s3Curl() {
  auto curl = http::curlLib();
  if (!curl) return fail(curl.error().code, "s3:// needs " + curl.error().message);
  return *curl;
}

}  // namespace

Result<std::unique_ptr<ObjectStore>> makeS3Store(S3Config config, std::string bucket) {
  COHORT_ASSIGN(const CurlLib* curl, s3Curl());
  return std::make_unique<S3Store>(*curl, std::move(config), std::move(bucket));
}

Result<void> probeS3(const S3Config& config, const std::string& bucket, const std::string& prefix) {
  COHORT_ASSIGN(const CurlLib* curl, s3Curl());
  return S3Store(*curl, config, bucket).probe(prefix);
}

Result<std::unique_ptr<ObjectStore>> openS3(const S3Uri& uri) {
  COHORT_ASSIGN(S3Config config, s3ConfigFromEnvironment());
  return makeS3Store(std::move(config), uri.bucket);
}

}  // namespace cohort::storage
