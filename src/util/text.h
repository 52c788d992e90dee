// Small parsing and formatting helpers for the words users type: durations ("30s", "1h30m"),
// sizes ("2Gi"), rank lists ("0,2-3"), and times. Pure functions, thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "util/result.h"

namespace cohort {

using Millis = std::chrono::milliseconds;

// The longest duration parseDuration takes (100 years): past it, milliseconds would soon overflow
// int64_t. Fields have limits of their own, far below (spec/job_spec.h).
inline constexpr Millis kMaxDuration{100LL * 365 * 86400 * 1000};

// "500ms", "30s", "15m", "2h", "1h30m", "1d"; a bare number means seconds. Errors:
// kInvalidArgument for anything else and for durations longer than kMaxDuration.
Result<Millis> parseDuration(std::string_view text);
std::string formatDuration(Millis d);  // "1.5s", "2m03s", "2h00m"
std::string formatSize(double bytes);  // "512 B", "1.5 KiB", "230 MiB"

// "512Mi", "2Gi", "1G", "1000"; a bare number means bytes. Errors: kInvalidArgument, also for
// sizes of 4 EiB or more.
Result<int64_t> parseBytes(std::string_view text);

// The highest rank a rank list may name: a job has at most 4,096 processes (spec/job_spec.h).
inline constexpr int kMaxRankNumber = 4095;

// "all" (empty set), "0", "0,2-3". Ranks must be in [0, kMaxRankNumber].
Result<std::set<int>> parseRankList(std::string_view text);

// Lower-case hex of `size` bytes.
std::string hexEncode(const unsigned char* data, size_t size);

// `bytes` random bytes from the kernel (getrandom), as lower-case hex: secrets, tokens, ids.
// Errors: kIo when the kernel gives none (getrandom fails).
Result<std::string> randomHex(size_t bytes);

// A number of CPUs: decimal digits with an optional fraction ("4", "0.5"); never negative,
// NaN or infinite.
Result<double> parseCpus(std::string_view text);

// The whole text as a decimal integer. Errors: kInvalidArgument ("'x' is not an integer",
// "'x' is out of range").
Result<int> parseInt(std::string_view text);
Result<int64_t> parseInt64(std::string_view text);

// Whether `text` is well-formed UTF-8 (no overlong forms, surrogates or code points past
// U+10FFFF): what JSON needs.
bool validUtf8(std::string_view text);

std::vector<std::string> split(std::string_view text, char sep);
std::string join(const std::vector<std::string>& parts, std::string_view sep);
bool startsWith(std::string_view text, std::string_view prefix);
// Without the spaces, tabs and line ends at either end.
std::string_view trim(std::string_view text);

// Percent-encoding (RFC 3986): every byte but the unreserved A-Z a-z 0-9 - _ . ~ (and '/' with
// `keep_slash`, for a path) as %XX. For URL paths and query values, and S3's signed requests.
std::string urlEncode(std::string_view text, bool keep_slash = false);

// Quotes a word for a POSIX shell only when it needs it.
std::string shellQuote(std::string_view word);

// Nanoseconds since the Unix epoch (CLOCK_REALTIME) and its ISO 8601 UTC form with millis.
int64_t nowUnixNanos();
std::string isoTime(int64_t unix_nanos);

// Standard base64 (with or without padding; line breaks and spaces skipped). Errors:
// kInvalidArgument.
Result<std::string> base64Decode(std::string_view text);

}  // namespace cohort
