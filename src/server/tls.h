// The server's TLS identity: a certificate and its private key, PEM, as libmicrohttpd (GnuTLS)
// takes them, read from the files `cohort server --tls-cert/--tls-key` name, or made once for a
// data root (`--tls-self-signed`: a self-signed certificate for this machine's names and
// addresses, kept in <data-root>/server/tls/). Its fingerprint is what a client pins when no
// certificate authority vouches for it (`cohort login --fingerprint`). libcrypto does the work
// (it is in the binary already); thread-safe.
#pragma once

#include <string>
#include <vector>

#include "util/result.h"

namespace cohort::server {

struct TlsIdentity {
  std::string cert_pem;     // the certificate chain, leaf first
  std::string key_pem;      // its private key (unencrypted)
  std::string fingerprint;  // the leaf's SHA-256, "AB:CD:..." (64 hex digits in pairs)
  std::string pin;          // its public key's, as libcurl pins one: "sha256//BASE64"
};

// Reads a certificate chain and its key. Errors: kInvalidArgument naming the file when it is
// not PEM, holds no certificate or key, the key is not the certificate's, or the certificate
// has expired; kNotFound / kIo when it cannot be read.
Result<TlsIdentity> loadTlsIdentity(const std::string& cert_path, const std::string& key_path);

// The identity kept in `dir` (cert.pem, key.pem), made there on first use (the directory 0700,
// the key 0600): a P-256 key and a self-signed certificate valid for ten years for `names`
// (host names and IP addresses, written into its subjectAltName). `created` says whether it
// was made now. Errors: those of loadTlsIdentity, kIo writing.
Result<TlsIdentity> selfSignedIdentity(const std::string& dir,
                                       const std::vector<std::string>& names, bool* created);

// The SHA-256 fingerprint of the first certificate in `pem` ("AB:CD:..."). Errors:
// kInvalidArgument when there is none.
Result<std::string> certificateFingerprint(const std::string& pem);

// The pin of the first certificate's public key in `pem`, as libcurl takes one
// ("sha256//BASE64"). Errors: kInvalidArgument when there is none.
Result<std::string> publicKeyPin(const std::string& pem);

// "ab:cd...", "ABCD..." or "sha256:AB:CD..." as "AB:CD:..."; "" when it is not 32 bytes in hex.
std::string normalizeFingerprint(const std::string& text);

}  // namespace cohort::server
