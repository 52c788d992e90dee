// `cohort cp`: the command-line face of the copy engine (storage/copy.h). Parses its flags,
// resolves store:// URIs against the data root, shows a live progress line on stderr when it is
// a terminal (else one summary line at the end), and turns errors into "cohort: error: ..." and
// an exit code. Called from the main thread only; it installs SIGINT/SIGTERM handlers for the
// duration of the copy so that Ctrl-C stops cleanly.
#pragma once

#include <string>

namespace cohort::cli {

// Runs `cohort cp` with argv[0] the program and argv[1] "cp"; flags start at argv[2]. Returns
// the exit code: 0 copied, 1 the copy failed, 2 bad usage or an invalid URI, 130 interrupted.
int cmdCp(int argc, char** argv);

// The help text of `cohort cp`.
std::string cpHelp();

}  // namespace cohort::cli
