// Result and Error: how every cohort function reports failure.
//
// A function that can fail returns Result<T>: either a value or an Error with one of a handful
// of canonical codes and a message written for a person ("job 'x': rank 3: exec 'python4': No
// such file or directory"). Exceptions are not used; adapters around throwing libraries catch
// and convert. Safe to use from any thread.
#pragma once

#include <string>
#include <utility>

#include <tl/expected.hpp>

namespace cohort {

enum class Code {
  kInvalidArgument,     // the user's input is wrong (job file, flag, argument)
  kNotFound,            // a named file, job, account does not exist
  kAlreadyExists,       //
  kFailedPrecondition,  // the system is not in a state that allows the operation
  kUnauthenticated,     // no credentials, or credentials that are not (any more) valid
  kPermissionDenied,    // known caller, not allowed
  kTooLarge,            // a request or file over a limit
  kResourceExhausted,   // a caller holds as much of something as it may (followers, uploads)
  kUnavailable,         // a peer or service cannot be reached (yet)
  kDeadlineExceeded,    // a timeout ran out
  kIo,                  // the operating system refused (disk full, permission, ...)
  kInternal,            // a bug in cohort
};

const char* codeName(Code code);

struct Error {
  Code code = Code::kInternal;
  std::string message;
};

template <class T>
class [[nodiscard]] Result : public tl::expected<T, Error> {
 public:
  using tl::expected<T, Error>::expected;
  Result(tl::expected<T, Error> other) : tl::expected<T, Error>(std::move(other)) {}
};

inline tl::unexpected<Error> fail(Code code, std::string message) {
  return tl::unexpected<Error>(Error{code, std::move(message)});
}

// Prefixes an error's message with context: "job file 'x.yaml': " + message.
inline tl::unexpected<Error> withContext(const Error& error, const std::string& context) {
  return tl::unexpected<Error>(Error{error.code, context + ": " + error.message});
}

// errno as an Error: "<what>: <strerror(errno)>" with code kIo (kNotFound for ENOENT).
tl::unexpected<Error> failErrno(const std::string& what, int err);
tl::unexpected<Error> failErrno(const std::string& what);

}  // namespace cohort

#define COHORT_CONCAT_INNER(a, b) a##b
#define COHORT_CONCAT(a, b) COHORT_CONCAT_INNER(a, b)

// Returns the error of `expr` (a Result) from the enclosing function.
#define COHORT_TRY(expr)                                              \
  do {                                                                \
    auto cohort_try_result = (expr);                                  \
    if (!cohort_try_result) {                                         \
      return tl::unexpected<::cohort::Error>(cohort_try_result.error()); \
    }                                                                 \
  } while (0)

// Declares `lhs` from the value of `expr` or returns its error.
#define COHORT_ASSIGN(lhs, expr)                                               \
  auto COHORT_CONCAT(cohort_assign_, __LINE__) = (expr);                        \
  if (!COHORT_CONCAT(cohort_assign_, __LINE__)) {                              \
    return tl::unexpected<::cohort::Error>(COHORT_CONCAT(cohort_assign_, __LINE__).error()); \
  }                                                                            \
  lhs = std::move(*COHORT_CONCAT(cohort_assign_, __LINE__))
