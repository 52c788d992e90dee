#include "storage/crc64.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <utility>

namespace cohort::storage {
namespace {

// Bit by bit, straight from the definition: what the fast paths must agree with.
uint64_t slow(const std::string& data) {
  uint64_t s = ~uint64_t{0};
  for (unsigned char c : data) {
    s ^= c;
    for (int i = 0; i < 8; ++i) s = s & 1 ? (s >> 1) ^ 0x9a6c9329ac4bc9b5 : s >> 1;
  }
  return ~s;
}

std::string randomBytes(std::mt19937_64& rng, size_t n) {
  std::string out(n, '\0');
  for (char& c : out) c = static_cast<char>(rng());
  return out;
}

TEST(Crc64Nvme, HasTheCatalogueCheckValue) {
  EXPECT_EQ(crc64nvme(0, "123456789", 9), 0xae8b14860a799888);
  EXPECT_EQ(crc64nvme(0, "", 0), 0u);
}

// What an S3 server (versitygw, whose CRC is Go's) answered in x-amz-checksum-crc64nvme for a PUT
// of the bytes 0, 1, ..., 255, 0, 1, ... of these lengths.
TEST(Crc64Nvme, AgreesWithAnS3Server) {
  for (auto [n, expected] :
       {std::pair<size_t, uint64_t>{1000, 0x60afad17781dc9c7}, {100000, 0x20cd3026a07a96d6}}) {
    std::string data(n, '\0');
    for (size_t i = 0; i < n; ++i) data[i] = static_cast<char>(i % 256);
    EXPECT_EQ(crc64nvme(0, data.data(), n), expected) << n;
  }
}

TEST(Crc64Nvme, AgreesWithTheDefinitionAtEveryLengthAndAlignment) {
  std::mt19937_64 rng(7);
  const std::string data = randomBytes(rng, 4096 + 64);
  for (size_t start = 0; start < 17; ++start) {
    for (size_t n : {0, 1, 7, 8, 15, 16, 63, 64, 65, 127, 128, 129, 200, 1000, 4096}) {
      const std::string piece = data.substr(start, n);
      EXPECT_EQ(crc64nvme(0, piece.data(), piece.size()), slow(piece)) << start << "+" << n;
    }
  }
}

TEST(Crc64Nvme, ContinuesAndCombinesAcrossPieces) {
  std::mt19937_64 rng(11);
  const std::string data = randomBytes(rng, 300000);
  const uint64_t whole = crc64nvme(0, data.data(), data.size());
  EXPECT_EQ(whole, slow(data));
  for (size_t cut : {size_t{0}, size_t{1}, size_t{63}, size_t{4096}, size_t{150001}, data.size()}) {
    const uint64_t a = crc64nvme(0, data.data(), cut);
    const uint64_t b = crc64nvme(0, data.data() + cut, data.size() - cut);
    EXPECT_EQ(crc64nvme(a, data.data() + cut, data.size() - cut), whole) << cut;
    EXPECT_EQ(crc64nvmeCombine(a, b, static_cast<int64_t>(data.size() - cut)), whole) << cut;
  }
  // Many ranges in order, as parallel range fetches combine.
  uint64_t combined = 0;
  for (size_t at = 0; at < data.size(); at += 7777) {
    const size_t n = std::min<size_t>(7777, data.size() - at);
    combined =
        crc64nvmeCombine(combined, crc64nvme(0, data.data() + at, n), static_cast<int64_t>(n));
  }
  EXPECT_EQ(combined, whole);
}

TEST(Crc64Nvme, ChangesWithAnyFlippedBit) {
  std::mt19937_64 rng(3);
  std::string data = randomBytes(rng, 1 << 16);
  const uint64_t before = crc64nvme(0, data.data(), data.size());
  data[12345] ^= 0x10;
  EXPECT_NE(crc64nvme(0, data.data(), data.size()), before);
}

}  // namespace
}  // namespace cohort::storage
