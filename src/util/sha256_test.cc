#include "util/sha256.h"

#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <random>
#include <string>

#include "util/text.h"

namespace cohort {
namespace {

std::string hex(const Sha256Digest& d) { return hexEncode(d.data(), d.size()); }

std::string randomBytes(std::mt19937& gen, size_t n) {
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(gen() & 0xff);
  return s;
}

TEST(Sha256, KnownAnswers) {
  // FIPS 180-4's examples, and the empty message.
  EXPECT_EQ(hex(sha256("abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(hex(sha256("")), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(hex(sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  // RFC 4231, test case 2.
  EXPECT_EQ(hex(hmacSha256("Jefe", "what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

// Every length around the block boundaries, of key and data, against OpenSSL.
TEST(Sha256, AgreesWithOpenSslForEveryLengthAroundABlock) {
  std::mt19937 gen(42);
  for (size_t n = 0; n < 200; ++n) {
    const std::string data = randomBytes(gen, n);
    unsigned char want[EVP_MAX_MD_SIZE];
    unsigned int length = 0;
    EVP_Digest(data.data(), data.size(), want, &length, EVP_sha256(), nullptr);
    ASSERT_EQ(hex(sha256(data)), hexEncode(want, length)) << "data of " << n << " bytes";
    const std::string key = randomBytes(gen, n % 150);
    HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
         reinterpret_cast<const unsigned char*>(data.data()), data.size(), want, &length);
    ASSERT_EQ(hex(hmacSha256(key, data)), hexEncode(want, length))
        << "key of " << key.size() << " bytes, data of " << n << " bytes";
  }
}

}  // namespace
}  // namespace cohort
