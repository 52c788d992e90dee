// `cohort session-host`: what a session's ranks run (session_host.cc; docs/sessions.md).
// Started by the server, never by a user.
#pragma once

namespace cohort::cli {

int cmdSessionHost(int argc, char** argv);

}  // namespace cohort::cli
