// CRC-64/NVME (the checksum S3 keeps of every object since 2025, `x-amz-checksum-crc64nvme`):
// reflected polynomial 0x9a6c9329ac4bc9b5, initial value and final xor all ones; the CRC of
// "123456789" is 0xae8b14860a799888. Computed with carry-less multiplication where the CPU has
// it (x86-64 PCLMULQDQ, several GB/s a core), else eight bytes at a time from tables.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace cohort::storage {

// The CRC of `data` continuing one of the bytes before it (`crc` = 0 to start): crc64nvme(crc64nvme
// (0, a), b) is the CRC of a followed by b.
uint64_t crc64nvme(uint64_t crc, const void* data, size_t size);

// The CRC of a followed by b, from the CRC of a, the CRC of b and b's length: what ranges fetched
// in parallel combine into, in order.
uint64_t crc64nvmeCombine(uint64_t crc_a, uint64_t crc_b, int64_t size_b);

// For messages: 16 hex digits.
std::string crc64Hex(uint64_t crc);

}  // namespace cohort::storage
