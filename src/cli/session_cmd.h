// `cohort session`: interactive sessions on a server (docs/sessions.md): start, ls, stop and
// ssh (a login carried through the server's tunnel, server/tunnels.h). The sessions' own
// program, which runs in them, is session_host.h's.
#pragma once

#include <string>
#include <vector>

#include "cli/args.h"

namespace cohort::cli {

Result<int> cmdSession(int argc, char** argv);
const std::vector<FlagSpec>& sessionFlags();
std::string sessionHelp();

}  // namespace cohort::cli
