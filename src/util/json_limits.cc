#include "util/json_limits.h"

#include <string>

namespace cohort {

size_t jsonTooDeepAt(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // whatever is escaped cannot end the string
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > max_depth) return i;
    } else if (c == '}' || c == ']') {
      if (depth > 0) --depth;
    }
  }
  return std::string_view::npos;
}

Result<void> checkJsonDepth(std::string_view text, int max_depth) {
  const size_t at = jsonTooDeepAt(text, max_depth);
  if (at == std::string_view::npos) return {};
  return fail(Code::kInvalidArgument, "JSON nested deeper than " + std::to_string(max_depth) +
                                          " levels at byte " + std::to_string(at));
}

}  // namespace cohort
