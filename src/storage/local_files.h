// Local-file helpers shared by the transfer engine (storage/transfer.h), the directory store
// (storage/dir_store.h), the local copy (storage/copy.h) and the code archive
// (storage/archive.h): what they write lands below a given directory and nowhere else, under a
// temporary name until it is whole. Internal to the storage module; thread-safe.
#pragma once

#include <string>
#include <string_view>

#include "util/fd.h"
#include "util/result.h"

namespace cohort::storage {

// The prefix of cohort's temporary files: never copied, never an object's name.
constexpr std::string_view kTmpPrefix = ".cohort-tmp-";

// The deepest a directory tree that cohort walks may nest.
constexpr int kMaxDepth = 128;

// Whether `path` is relative, of non-empty parts none of which is "." or ".." or starts with
// kTmpPrefix, with no NUL byte: a name that stays below the directory it is taken in.
bool containedPath(const std::string& path);

// An unlinked file to write and read back (O_TMPFILE) in `dir`. Errors: kIo.
Result<UniqueFd> anonymousFile(const std::string& dir);

// "a/b/c" -> "c", "a/b/" -> "b"; "a/b/c" -> "a/b", "c" -> ".", "/c" -> "/".
std::string baseName(const std::string& path);
std::string dirName(const std::string& path);

// The directory root/rel, each part of `rel` opened without following a symbolic link; with
// `create`, the missing ones are made (mode 0755). Errors: kInvalidArgument naming the part
// that is a link or a file, kNotFound when one is missing and not to be made, kIo.
Result<UniqueFd> openBeneath(const std::string& root, const std::string& rel, bool create);

// A new file ".cohort-tmp-<name>-<random>" in the directory `dir` (read-write, mode 0644), its
// name in `tmp`. Errors: kIo.
Result<UniqueFd> createTemporary(int dir, const std::string& name, std::string& tmp);

}  // namespace cohort::storage
