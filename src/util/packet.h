// Packets with descriptors: one message of a SOCK_SEQPACKET socket, and a file descriptor passed
// along with it (SCM_RIGHTS). What the account worker's channel (account/as_account.h) and a
// job's ports (agent/job_ports.h) speak. Thread-safe (no state).
#pragma once

#include <string>
#include <string_view>

#include "util/fd.h"
#include "util/result.h"

namespace cohort {

// One packet on `sock` (SOCK_SEQPACKET) carrying `bytes`, and descriptor `fd` with it when it
// is >= 0 (SCM_RIGHTS). Errors: kIo naming errno (EPIPE: the other side is gone).
Result<void> sendPacket(int sock, std::string_view bytes, int fd = -1);

// The next packet on `sock`, at most `max` bytes; the first descriptor that came with it goes to
// `fd` (when given and not yet holding one), every other is closed. Errors: kUnavailable when the
// other side closed, kInvalidArgument for a packet over `max`, kIo.
Result<std::string> receivePacket(int sock, size_t max, UniqueFd* fd);

}  // namespace cohort
