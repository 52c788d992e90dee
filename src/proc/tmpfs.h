// Memory of a node's own for its ranks' /tmp and /dev/shm: a tmpfs mounted on each of their
// directories, in a mount namespace that the calling thread takes for itself on its first call,
// so that the processes it starts afterwards see the mounts and nothing else on the machine
// does. The mounts go with the last process that holds the namespace: an agent killed with its
// ranks leaves nothing behind (no directory on the machine's /dev/shm, no mount). What a process
// writes in a tmpfs is memory charged to its cgroup (memory.max, memory.limit_in_bytes), and a
// tmpfs holds no more than its size. Needs root (CAP_SYS_ADMIN). Call from the thread that
// starts the processes (the agent's loop thread), before it starts them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "util/result.h"

namespace cohort::proc {

// Mounts a tmpfs on each of `dirs` (existing directories), `bytes` at most each (0: the kernel's
// default, half of the machine's memory), its root directory mode 0700 and owned by `uid`:`gid`
// (-1: root's), no device files and no set-uid programs in it. Errors: kPermissionDenied
// without the privilege; kIo naming the directory otherwise.
Result<void> mountTmpfs(const std::vector<std::string>& dirs, int64_t bytes, int uid, int gid);

// Unmounts what mountTmpfs() mounted on `dirs` (its contents go), so that the directories can be
// removed. Quietly does nothing for a directory with no mount.
void unmountTmpfs(const std::vector<std::string>& dirs);

}  // namespace cohort::proc
