// Limits on JSON text that crossed a trust boundary (a request body, a job file, a message),
// checked before any parser sees it: nlohmann's parser recurses once per nesting level, so deep
// nesting must be refused before the parse. Pure, thread-safe.
#pragma once

#include <cstddef>
#include <string_view>

#include "util/result.h"

namespace cohort {

inline constexpr int kMaxJsonDepth = 64;

// Scans `text` without parsing it. Errors: kInvalidArgument when objects and arrays nest deeper
// than `max_depth` ("... nested deeper than 64 levels at byte N").
Result<void> checkJsonDepth(std::string_view text, int max_depth = kMaxJsonDepth);

// The same scan: the offset of the first '[' or '{' that opens level max_depth + 1, or
// std::string_view::npos when there is none. For callers that report a line instead of a byte.
size_t jsonTooDeepAt(std::string_view text, int max_depth = kMaxJsonDepth);

}  // namespace cohort
