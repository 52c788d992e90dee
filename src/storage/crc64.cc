#include "storage/crc64.h"

#include <array>
#include <cstdio>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace cohort::storage {
namespace {

constexpr uint64_t kPoly = 0x9a6c9329ac4bc9b5;  // reflected; 0xad93d23594c93659 as written

using Table = std::array<std::array<uint64_t, 256>, 8>;

// tables[k][b]: the CRC state after byte b followed by k zero bytes (slicing by eight).
const Table& tables() {
  static const Table t = [] {
    Table out{};
    for (uint64_t b = 0; b < 256; ++b) {
      uint64_t c = b;
      for (int i = 0; i < 8; ++i) c = c & 1 ? (c >> 1) ^ kPoly : c >> 1;
      out[0][b] = c;
    }
    for (size_t k = 1; k < 8; ++k) {
      for (size_t b = 0; b < 256; ++b)
        out[k][b] = (out[k - 1][b] >> 8) ^ out[0][out[k - 1][b] & 0xff];
    }
    return out;
  }();
  return t;
}

uint64_t load64(const unsigned char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;  // little-endian: the reflected CRC's byte order
}

// Raw state (not inverted) through `size` bytes, eight at a time.
uint64_t updateTables(uint64_t s, const unsigned char* p, size_t size) {
  const Table& t = tables();
  for (; size >= 8; p += 8, size -= 8) {
    s ^= load64(p);
    s = t[7][s & 0xff] ^ t[6][(s >> 8) & 0xff] ^ t[5][(s >> 16) & 0xff] ^ t[4][(s >> 24) & 0xff] ^
        t[3][(s >> 32) & 0xff] ^ t[2][(s >> 40) & 0xff] ^ t[1][(s >> 48) & 0xff] ^ t[0][s >> 56];
  }
  for (; size > 0; ++p, --size) s = t[0][(s ^ *p) & 0xff] ^ (s >> 8);
  return s;
}

// x^n mod P in the reflected representation (x^0 at bit 63).
uint64_t xPowMod(unsigned n) {
  uint64_t r = 1;  // as written: x^j at bit j
  for (unsigned i = 0; i < n; ++i) r = (r << 1) ^ (r >> 63 ? 0xad93d23594c93659 : 0);
  uint64_t out = 0;
  for (int j = 0; j < 64; ++j) out |= ((r >> j) & 1) << (63 - j);
  return out;
}

#if defined(__x86_64__)
// Folding with carry-less multiplication: four 16-byte accumulators 64 bytes apart, folded
// into one, then that one through the rest 16 bytes at a time; the last 16 bytes and the tail
// go through the tables. A 16-byte chunk A that lies D bits before chunk B contributes
// A * x^D, which is A's upper-degree half (its first 8 bytes) times x^(64+D) plus its lower
// half times x^D: two 64x64 products of at most 127 bits that xor into B. The constants are
// x^(64+D-1) and x^(D-1) mod P, one power less because a reflected product comes out one bit
// short of where B's frame has it.
struct Fold {
  __m128i by512, by128;
};

const Fold& folds() {
  static const Fold f = [] {
    Fold out;
    out.by512 = _mm_set_epi64x(static_cast<long long>(xPowMod(512 - 1)),
                               static_cast<long long>(xPowMod(512 + 64 - 1)));
    out.by128 = _mm_set_epi64x(static_cast<long long>(xPowMod(128 - 1)),
                               static_cast<long long>(xPowMod(128 + 64 - 1)));
    return out;
  }();
  return f;
}

__attribute__((target("pclmul,sse2"))) inline __m128i fold(__m128i a, __m128i k, __m128i b) {
  return _mm_xor_si128(
      _mm_xor_si128(_mm_clmulepi64_si128(a, k, 0x00), _mm_clmulepi64_si128(a, k, 0x11)), b);
}

__attribute__((target("pclmul,sse2"))) uint64_t updateFolding(uint64_t s, const unsigned char* p,
                                                              size_t size) {
  const Fold& k = folds();
  auto load = [](const unsigned char* q) {
    return _mm_loadu_si128(reinterpret_cast<const __m128i*>(q));
  };
  __m128i a0 = _mm_xor_si128(load(p), _mm_set_epi64x(0, static_cast<long long>(s)));
  __m128i a1 = load(p + 16), a2 = load(p + 32), a3 = load(p + 48);
  p += 64;
  size -= 64;
  for (; size >= 64; p += 64, size -= 64) {
    a0 = fold(a0, k.by512, load(p));
    a1 = fold(a1, k.by512, load(p + 16));
    a2 = fold(a2, k.by512, load(p + 32));
    a3 = fold(a3, k.by512, load(p + 48));
  }
  __m128i a = fold(fold(fold(a0, k.by128, a1), k.by128, a2), k.by128, a3);
  for (; size >= 16; p += 16, size -= 16) a = fold(a, k.by128, load(p));
  alignas(16) unsigned char last[16];
  _mm_store_si128(reinterpret_cast<__m128i*>(last), a);
  return updateTables(updateTables(0, last, 16), p, size);
}

bool hasClmul() {
  static const bool has = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse2");
  return has;
}
#endif

// a * b mod P, both reflected.
uint64_t mulMod(uint64_t a, uint64_t b) {
  uint64_t product = 0;
  for (uint64_t m = uint64_t{1} << 63; m != 0 && a != 0; m >>= 1) {
    if (a & m) {
      product ^= b;
      a &= ~m;
    }
    b = b & 1 ? (b >> 1) ^ kPoly : b >> 1;
  }
  return product;
}

}  // namespace

uint64_t crc64nvme(uint64_t crc, const void* data, size_t size) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t s = ~crc;
#if defined(__x86_64__)
  if (size >= 64 && hasClmul()) return ~updateFolding(s, p, size);
#endif
  return ~updateTables(s, p, size);
}

uint64_t crc64nvmeCombine(uint64_t crc_a, uint64_t crc_b, int64_t size_b) {
  // x^(8 * size_b) mod P by squaring: powers[k] = x^(2^k).
  static const std::array<uint64_t, 64> powers = [] {
    std::array<uint64_t, 64> out{};
    out[0] = uint64_t{1} << 62;  // x
    for (size_t k = 1; k < out.size(); ++k) out[k] = mulMod(out[k - 1], out[k - 1]);
    return out;
  }();
  uint64_t shift = uint64_t{1} << 63;  // 1
  auto bits = static_cast<uint64_t>(size_b) * 8;
  for (size_t k = 0; bits != 0; ++k, bits >>= 1) {
    if (bits & 1) shift = mulMod(powers[k], shift);
  }
  return mulMod(shift, crc_a) ^ crc_b;
}

std::string crc64Hex(uint64_t crc) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(crc));
  return text;
}

}  // namespace cohort::storage
