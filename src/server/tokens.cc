#include "server/tokens.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "util/text.h"

namespace cohort::server {

std::string sha256Hex(const std::string& text) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_Digest(text.data(), text.size(), digest, &length, EVP_sha256(), nullptr);
  return hexEncode(digest, length);
}

Result<std::string> newToken() {
  COHORT_ASSIGN(std::string random, randomHex(32));
  return "cohort_" + random;
}

bool sameHash(const std::string& a, const std::string& b) {
  return a.size() == b.size() && !a.empty() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace cohort::server
