#include "server/mhd_lib.h"

#include <dlfcn.h>

#include <mutex>
#include <string>
#include <type_traits>

namespace cohort::server::http {

namespace {

Result<MhdLib> load() {
  void* handle = ::dlopen("libmicrohttpd.so.12", RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* why = ::dlerror();
    return fail(Code::kFailedPrecondition,
                std::string("libmicrohttpd (libmicrohttpd.so.12; Debian's package "
                            "libmicrohttpd12): ") +
                    (why ? why : "not found"));
  }
  MhdLib lib{};
  std::string missing;
  auto find = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(::dlsym(handle, name));
    if (!fn) missing += std::string(missing.empty() ? "" : ", ") + name;
  };
  find(lib.start_daemon, "MHD_start_daemon");
  find(lib.stop_daemon, "MHD_stop_daemon");
  find(lib.quiesce_daemon, "MHD_quiesce_daemon");
  find(lib.get_connection_values, "MHD_get_connection_values");
  find(lib.get_connection_info, "MHD_get_connection_info");
  find(lib.suspend_connection, "MHD_suspend_connection");
  find(lib.resume_connection, "MHD_resume_connection");
  find(lib.queue_response, "MHD_queue_response");
  find(lib.destroy_response, "MHD_destroy_response");
  find(lib.create_response_from_buffer, "MHD_create_response_from_buffer");
  find(lib.create_response_from_callback, "MHD_create_response_from_callback");
  find(lib.create_response_from_fd_at_offset64, "MHD_create_response_from_fd_at_offset64");
  find(lib.add_response_header, "MHD_add_response_header");
  find(lib.is_feature_supported, "MHD_is_feature_supported");
  find(lib.create_response_for_upgrade, "MHD_create_response_for_upgrade");
  find(lib.upgrade_action, "MHD_upgrade_action");
  if (!missing.empty()) {
    return fail(Code::kFailedPrecondition,
                "libmicrohttpd 0.9.75 or later; the libmicrohttpd.so.12 found lacks " + missing);
  }
  return lib;  // the handle stays open for the process's life
}

}  // namespace

Result<const MhdLib*> mhdLib() {
  static std::once_flag once;
  static Result<MhdLib> lib = fail(Code::kInternal, "libmicrohttpd not loaded");
  std::call_once(once, [] { lib = load(); });
  if (!lib) return tl::unexpected<Error>(lib.error());
  return &*lib;
}

}  // namespace cohort::server::http
