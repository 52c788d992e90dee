// `cohort env exec`: runs one command in an image's root file system, in place. Every rank of a
// job whose environment is an image starts this way (plan/container.cc):
//
//   cohort env exec --image REF --layer DIR... --bind PATH... --ro-bind PATH... --unset VAR...
//       -- COMMAND [ARG...]
//
// It makes a mount namespace of its own whose root is an overlay of the image's layers (their
// directories in podman's storage, top first) with a writable layer in memory, mounts /proc, the
// host's /dev and /sys (read-only) and the host's /etc/hosts, /etc/resolv.conf and /etc/hostname
// (the network is the host's), binds each PATH in at the same path, moves its root there
// (pivot_root, the host's root detached), returns to the directory it started in, and executes
// COMMAND with the image's PATH. Executing in place keeps the process the one its parent
// started: its pid, process group, cgroup, death signal, signals and exit status are COMMAND's,
// which is what lets the node agent supervise it like any rank. The mounts live as long as the
// namespace's last process: nothing is left to clean up.
//
// Without --layer the layers are asked of podman (`cohort env exec --image REF -- python3`, for
// a person); without --bind the current directory is bound. Needs root (CAP_SYS_ADMIN) to make
// the namespace and its mounts. Call it from a single-threaded process.
#pragma once

#include <string>
#include <vector>

#include "util/result.h"

namespace cohort::env {

struct ImageExec {
  std::string image;                  // its reference, for messages (and to find its layers)
  std::vector<std::string> layers;    // directories, top first
  std::vector<std::string> binds;     // bound in read-write, at the same path
  std::vector<std::string> ro_binds;  // bound in read-only
  std::vector<std::string> unset;     // variables removed before COMMAND starts
  std::vector<std::string> argv;      // COMMAND and its arguments
};

// Parses the arguments after `cohort env exec`. Errors: kInvalidArgument naming the flag or the
// path (relative, with "..", or "/").
Result<ImageExec> parseImageExec(const std::vector<std::string>& args);

// One bind of the job's directories into the image, in the order they are made.
struct ImageBind {
  std::string path;
  bool read_only = false;
};

// The binds of `e`, parents before what lies in them; a path named twice is bound once (the
// read-write way when either asked for it).
std::vector<ImageBind> bindOrder(const ImageExec& e);

// Executes e.argv in the image; returns only when it could not, with the reason (the image's
// layer that is not on this machine, a mount the kernel refused, a command not found).
Result<void> execInImage(const ImageExec& e);

}  // namespace cohort::env
