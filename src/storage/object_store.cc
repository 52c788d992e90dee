#include "storage/object_store.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <memory>

#include "storage/crc64.h"
#include "storage/local_files.h"
#include "util/text.h"

namespace cohort::storage {

namespace {

constexpr int kMaxParts = 10000;
constexpr size_t kReadBuffer = size_t{1} << 20;

using Md5 = std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)>;

// Feeds bytes [at, at + n) of `fd` to `md`.
Result<void> digestRange(int fd, int64_t at, int64_t n, EVP_MD_CTX* md, std::string& buffer) {
  while (n > 0) {
    const size_t want = static_cast<size_t>(std::min<int64_t>(n, buffer.size()));
    ssize_t got = ::pread(fd, buffer.data(), want, at);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return failErrno("read");
    if (got == 0) return fail(Code::kIo, "read: the file shrank while it was read");
    EVP_DigestUpdate(md, buffer.data(), static_cast<size_t>(got));
    at += got;
    n -= got;
  }
  return {};
}

}  // namespace

int64_t partSize(int64_t object_size) {
  int64_t part = kPartSize;
  const int64_t mib = int64_t{1} << 20;
  if ((object_size + part - 1) / part > kMaxParts) {
    part = ((object_size + kMaxParts - 1) / kMaxParts + mib - 1) / mib * mib;
  }
  return part;
}

Result<std::string> contentTag(int fd, int64_t size) {
  Md5 md(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  if (!md) return fail(Code::kInternal, "out of memory for a digest");
  std::string buffer(kReadBuffer, '\0');
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  if (size <= kPartSize) {
    EVP_DigestInit_ex(md.get(), EVP_md5(), nullptr);
    COHORT_TRY(digestRange(fd, 0, size, md.get(), buffer));
    EVP_DigestFinal_ex(md.get(), out, &n);
    return hexEncode(out, n);
  }
  const int64_t part = partSize(size);
  std::string digests;
  int parts = 0;
  for (int64_t at = 0; at < size; at += part, ++parts) {
    EVP_DigestInit_ex(md.get(), EVP_md5(), nullptr);
    COHORT_TRY(digestRange(fd, at, std::min(part, size - at), md.get(), buffer));
    EVP_DigestFinal_ex(md.get(), out, &n);
    digests.append(reinterpret_cast<const char*>(out), n);
  }
  EVP_Digest(digests.data(), digests.size(), out, &n, EVP_md5(), nullptr);
  return hexEncode(out, n) + "-" + std::to_string(parts);
}

bool isContentTag(const ObjectInfo& object) {
  const std::string& etag = object.etag;
  const size_t dash = etag.find('-');
  std::string_view md5 = std::string_view(etag).substr(0, dash);
  if (md5.size() != 32 ||
      !std::all_of(md5.begin(), md5.end(), [](char c) { return std::isxdigit(c); })) {
    return false;
  }
  const bool multipart = object.size > kPartSize;
  if (dash == std::string::npos) return !multipart;
  const int64_t part = partSize(object.size);
  return multipart && etag.substr(dash + 1) == std::to_string((object.size + part - 1) / part);
}

Result<std::optional<std::string>> ObjectStore::copyIn(ObjectStore&, const ObjectInfo&,
                                                       const std::string&, const std::atomic<bool>*,
                                                       const PartDone&) {
  return std::optional<std::string>();
}

Result<ObjectStore::Opened> ObjectStore::open(const std::string& key, const std::string& tmp_dir) {
  Opened opened;
  COHORT_ASSIGN(opened.info, head(key));
  COHORT_ASSIGN(opened.fd, anonymousFile(tmp_dir));
  COHORT_ASSIGN(Fetched fetched, getRange(key, opened.fd.get(), 0, opened.info.size));
  COHORT_TRY(checkFetched(*this, opened.info, opened.fd.get(), fetched));
  return opened;
}

Result<void> checkFetched(const ObjectStore& store, const ObjectInfo& object, int fd,
                          const Fetched& fetched) {
  const std::string mismatch =
      store.uri(object.key) + ": the bytes received do not match the object";
  if (auto crc = fetched.object_crc ? fetched.object_crc : object.crc64) {
    if (fetched.crc != *crc) {
      return fail(Code::kIo, mismatch + " (CRC-64/NVME " + crc64Hex(fetched.crc) + ", expected " +
                                 crc64Hex(*crc) + ")");
    }
    return {};
  }
  if (!store.checkable(object)) return {};
  COHORT_ASSIGN(std::string tag, store.etagOf(fd, object.size));
  if (tag != object.etag) {
    return fail(Code::kIo, mismatch + " (etag " + tag + ", expected " + object.etag + ")");
  }
  return {};
}

}  // namespace cohort::storage
