#include "util/result.h"

#include <cerrno>
#include <cstring>

namespace cohort {

const char* codeName(Code code) {
  switch (code) {
    case Code::kInvalidArgument: return "invalid_argument";
    case Code::kNotFound: return "not_found";
    case Code::kAlreadyExists: return "already_exists";
    case Code::kFailedPrecondition: return "failed_precondition";
    case Code::kUnauthenticated: return "unauthenticated";
    case Code::kPermissionDenied: return "permission_denied";
    case Code::kTooLarge: return "too_large";
    case Code::kResourceExhausted: return "resource_exhausted";
    case Code::kUnavailable: return "unavailable";
    case Code::kDeadlineExceeded: return "deadline_exceeded";
    case Code::kIo: return "io";
    case Code::kInternal: return "internal";
  }
  return "internal";
}

tl::unexpected<Error> failErrno(const std::string& what, int err) {
  return fail(err == ENOENT ? Code::kNotFound : Code::kIo, what + ": " + std::strerror(err));
}

tl::unexpected<Error> failErrno(const std::string& what) { return failErrno(what, errno); }

}  // namespace cohort
