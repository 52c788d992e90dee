// SHA-256 and HMAC-SHA256 (FIPS 180-4, RFC 2104) for short messages: the control channel's
// handshake proves the job's secret with HMAC-SHA256. OpenSSL's first digest in a process costs
// it about a millisecond (its providers start up), which every coordinator and agent would pay
// on the way to a job's first rank; this costs microseconds. Bulk data (S3 bodies) goes through
// OpenSSL, whose assembly is much faster per byte.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace cohort {

using Sha256Digest = std::array<uint8_t, 32>;

Sha256Digest sha256(std::string_view data);
Sha256Digest hmacSha256(std::string_view key, std::string_view data);

}  // namespace cohort
