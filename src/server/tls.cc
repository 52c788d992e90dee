#include "server/tls.h"

#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <ctime>
#include <memory>

#include "util/fd.h"
#include "util/text.h"

namespace cohort::server {

namespace {

template <class T, void (*F)(T*)>
struct Deleter {
  void operator()(T* p) const { F(p); }
};
using Bio = std::unique_ptr<BIO, Deleter<BIO, BIO_free_all>>;
using X509Ptr = std::unique_ptr<X509, Deleter<X509, X509_free>>;
using Key = std::unique_ptr<EVP_PKEY, Deleter<EVP_PKEY, EVP_PKEY_free>>;

Bio memory(const std::string& text) {
  return Bio(BIO_new_mem_buf(text.data(), static_cast<int>(text.size())));
}

std::string drain(BIO* bio) {
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio, &data);
  return n > 0 ? std::string(data, static_cast<size_t>(n)) : std::string();
}

std::string hexPairs(const unsigned char* bytes, size_t n) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    if (i) out += ':';
    out += kHex[bytes[i] >> 4];
    out += kHex[bytes[i] & 15];
  }
  return out;
}

std::string fingerprintOf(X509* cert) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  if (X509_digest(cert, EVP_sha256(), md, &n) != 1) return "";
  return hexPairs(md, n);
}

std::string pinOf(X509* cert) {
  EVP_PKEY* key = X509_get0_pubkey(cert);
  unsigned char* der = nullptr;
  const int len = key ? i2d_PUBKEY(key, &der) : -1;
  if (len <= 0) return "";
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(der, static_cast<size_t>(len), md, &n, EVP_sha256(), nullptr);
  OPENSSL_free(der);
  unsigned char b64[64];
  const int written = EVP_EncodeBlock(b64, md, static_cast<int>(n));
  return "sha256//" + std::string(reinterpret_cast<char*>(b64), static_cast<size_t>(written));
}

Result<TlsIdentity> identityOf(std::string cert_pem, std::string key_pem, const std::string& cert_name,
                               const std::string& key_name) {
  Bio cert_bio = memory(cert_pem);
  X509Ptr cert(PEM_read_bio_X509(cert_bio.get(), nullptr, nullptr, nullptr));
  if (!cert) {
    return fail(Code::kInvalidArgument,
                "'" + cert_name + "' holds no PEM certificate (-----BEGIN CERTIFICATE-----)");
  }
  Bio key_bio = memory(key_pem);
  Key key(PEM_read_bio_PrivateKey(key_bio.get(), nullptr, nullptr, nullptr));
  if (!key) {
    return fail(Code::kInvalidArgument,
                "'" + key_name + "' holds no unencrypted PEM private key");
  }
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    return fail(Code::kInvalidArgument,
                "'" + key_name + "' is not the private key of the certificate in '" + cert_name + "'");
  }
  if (X509_cmp_current_time(X509_get0_notAfter(cert.get())) <= 0) {
    return fail(Code::kInvalidArgument, "the certificate in '" + cert_name + "' has expired");
  }
  TlsIdentity id;
  id.fingerprint = fingerprintOf(cert.get());
  id.pin = pinOf(cert.get());
  id.cert_pem = std::move(cert_pem);
  id.key_pem = std::move(key_pem);
  return id;
}

bool isAddress(const std::string& name) {
  ASN1_OCTET_STRING* ip = a2i_IPADDRESS(name.c_str());
  if (!ip) return false;
  ASN1_OCTET_STRING_free(ip);
  return true;
}

}  // namespace

Result<TlsIdentity> loadTlsIdentity(const std::string& cert_path, const std::string& key_path) {
  COHORT_ASSIGN(std::string cert, readFile(cert_path));
  COHORT_ASSIGN(std::string key, readFile(key_path));
  return identityOf(std::move(cert), std::move(key), cert_path, key_path);
}

Result<TlsIdentity> selfSignedIdentity(const std::string& dir,
                                       const std::vector<std::string>& names, bool* created) {
  if (created) *created = false;
  const std::string cert_path = dir + "/cert.pem", key_path = dir + "/key.pem";
  struct stat st {};
  if (::stat(cert_path.c_str(), &st) == 0) return loadTlsIdentity(cert_path, key_path);
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return failErrno("create '" + dir + "'");

  Key key(EVP_EC_gen("P-256"));
  X509Ptr cert(X509_new());
  if (!key || !cert) return fail(Code::kInternal, "libcrypto could not make a key");
  X509_set_version(cert.get(), 2);
  unsigned char serial[16];
  RAND_bytes(serial, sizeof serial);
  serial[0] &= 0x7f;
  BIGNUM* bn = BN_bin2bn(serial, sizeof serial, nullptr);
  BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(cert.get()));
  BN_free(bn);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), 10L * 365 * 24 * 3600);
  X509_set_pubkey(cert.get(), key.get());
  X509_NAME* subject = X509_get_subject_name(cert.get());
  const std::string cn = "cohort server " + (names.empty() ? std::string("localhost") : names[0]);
  X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_UTF8,
                             reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
  X509_set_issuer_name(cert.get(), subject);
  std::string san;
  for (const std::string& name : names) {
    if (name.empty() || name.find_first_of(",\n") != std::string::npos) continue;
    san += std::string(san.empty() ? "" : ",") + (isAddress(name) ? "IP:" : "DNS:") + name;
  }
  X509V3_CTX ctx;
  X509V3_set_ctx(&ctx, cert.get(), cert.get(), nullptr, nullptr, 0);
  for (auto [nid, value] : {std::pair<int, std::string>{NID_subject_alt_name, san},
                            {NID_key_usage, "critical,digitalSignature,keyCertSign"},
                            {NID_ext_key_usage, "serverAuth"},
                            {NID_basic_constraints, "critical,CA:TRUE,pathlen:0"}}) {
    if (value.empty()) continue;
    X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str());
    if (!ext) return fail(Code::kInternal, "libcrypto refused the extension '" + value + "'");
    X509_add_ext(cert.get(), ext, -1);
    X509_EXTENSION_free(ext);
  }
  if (X509_sign(cert.get(), key.get(), EVP_sha256()) <= 0) {
    return fail(Code::kInternal, "libcrypto could not sign the certificate");
  }
  Bio cert_out(BIO_new(BIO_s_mem())), key_out(BIO_new(BIO_s_mem()));
  PEM_write_bio_X509(cert_out.get(), cert.get());
  PEM_write_bio_PrivateKey(key_out.get(), key.get(), nullptr, nullptr, 0, nullptr, nullptr);
  const std::string cert_pem = drain(cert_out.get()), key_pem = drain(key_out.get());
  COHORT_TRY(writeFileAtomic(key_path, key_pem, true, 0600));
  COHORT_TRY(writeFileAtomic(cert_path, cert_pem, true, 0644));
  if (created) *created = true;
  return identityOf(cert_pem, key_pem, cert_path, key_path);
}

Result<std::string> certificateFingerprint(const std::string& pem) {
  Bio bio = memory(pem);
  X509Ptr cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  if (!cert) return fail(Code::kInvalidArgument, "no PEM certificate");
  return fingerprintOf(cert.get());
}

Result<std::string> publicKeyPin(const std::string& pem) {
  Bio bio = memory(pem);
  X509Ptr cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  if (!cert) return fail(Code::kInvalidArgument, "no PEM certificate");
  return pinOf(cert.get());
}

std::string normalizeFingerprint(const std::string& text) {
  std::string t = text;
  for (const char* prefix : {"sha256:", "SHA256:", "sha256 ", "SHA256 ", "SHA-256:"}) {
    if (startsWith(t, prefix)) t = t.substr(std::string(prefix).size());
  }
  std::string hex;
  for (char c : t) {
    if (c == ':' || c == ' ') continue;
    if (!std::isxdigit(static_cast<unsigned char>(c))) return "";
    hex += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  }
  if (hex.size() != 64) return "";
  std::string out;
  for (size_t i = 0; i < hex.size(); i += 2) {
    if (i) out += ':';
    out += hex.substr(i, 2);
  }
  return out;
}

}  // namespace cohort::server
