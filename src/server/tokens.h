// Bearer tokens: the server stores only their SHA-256, never a token itself. An account's tokens
// authenticate people and programs; a job's report token (one per started job) authenticates
// only that job's coordinator, for its reports. Thread-safe.
#pragma once

#include <string>

#include "util/result.h"

namespace cohort::server {

// The SHA-256 of `text` in lowercase hex.
std::string sha256Hex(const std::string& text);

// A new token: "cohort_" and 32 random bytes in hex. Errors: kIo (no randomness).
Result<std::string> newToken();

// Compares two hashes in time that does not depend on where they differ.
bool sameHash(const std::string& a, const std::string& b);

}  // namespace cohort::server
