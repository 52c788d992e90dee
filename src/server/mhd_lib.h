// libmicrohttpd, loaded by `cohort server` when it starts rather than linked into the cohort
// binary: the library and the GnuTLS it brings (about ten shared libraries) would cost every
// cohort process, `cohort exec` and each rank's launcher included, their dynamic loading, and
// only the server speaks HTTP as a server. The pattern is http/curl_lib.h's.
#pragma once

#include <sys/types.h>

#include <cstdint>

#include <microhttpd.h>

#include "util/result.h"

namespace cohort::server::http {

// The libmicrohttpd functions the HTTP layer calls, as loaded from libmicrohttpd.so.12.
struct MhdLib {
  MHD_Daemon* (*start_daemon)(unsigned int flags, uint16_t port, MHD_AcceptPolicyCallback apc,
                              void* apc_cls, MHD_AccessHandlerCallback dh, void* dh_cls, ...);
  void (*stop_daemon)(MHD_Daemon*);
  MHD_socket (*quiesce_daemon)(MHD_Daemon*);
  int (*get_connection_values)(MHD_Connection*, enum MHD_ValueKind, MHD_KeyValueIterator,
                               void*);
  const union MHD_ConnectionInfo* (*get_connection_info)(MHD_Connection*,
                                                          enum MHD_ConnectionInfoType, ...);
  void (*suspend_connection)(MHD_Connection*);
  void (*resume_connection)(MHD_Connection*);
  enum MHD_Result (*queue_response)(MHD_Connection*, unsigned int status, MHD_Response*);
  void (*destroy_response)(MHD_Response*);
  MHD_Response* (*create_response_from_buffer)(size_t, void*, enum MHD_ResponseMemoryMode);
  MHD_Response* (*create_response_from_callback)(uint64_t, size_t, MHD_ContentReaderCallback,
                                                 void*, MHD_ContentReaderFreeCallback);
  MHD_Response* (*create_response_from_fd_at_offset64)(uint64_t, int, uint64_t);
  enum MHD_Result (*add_response_header)(MHD_Response*, const char*, const char*);
  enum MHD_Result (*is_feature_supported)(enum MHD_FEATURE);
  MHD_Response* (*create_response_for_upgrade)(MHD_UpgradeHandler, void*);
  enum MHD_Result (*upgrade_action)(MHD_UpgradeResponseHandle*, enum MHD_UpgradeAction, ...);
};

// Loads libmicrohttpd once per process (thread-safe); later calls return the same answer.
// Errors: kFailedPrecondition naming the library and the Debian package that has it.
Result<const MhdLib*> mhdLib();

}  // namespace cohort::server::http
