#include "http/curl_lib.h"

#include <dlfcn.h>

#include <mutex>
#include <string>

namespace cohort::http {

namespace {

Result<CurlLib> load() {
  // The soname of libcurl 7.16 and later, whichever TLS library it was built with.
  void* handle = ::dlopen("libcurl.so.4", RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* why = ::dlerror();
    return fail(Code::kFailedPrecondition,
                std::string("libcurl (libcurl.so.4; Debian's package libcurl4): ") +
                    (why ? why : "not found"));
  }
  CurlLib lib{};
  std::string missing;
  auto find = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(::dlsym(handle, name));
    if (!fn) missing += std::string(missing.empty() ? "" : ", ") + name;
  };
  CURLcode (*global_init)(long) = nullptr;
  find(global_init, "curl_global_init");
  find(lib.easy_init, "curl_easy_init");
  find(lib.easy_cleanup, "curl_easy_cleanup");
  find(lib.easy_reset, "curl_easy_reset");
  find(lib.easy_setopt, "curl_easy_setopt");
  find(lib.easy_getinfo, "curl_easy_getinfo");
  find(lib.easy_perform, "curl_easy_perform");
  find(lib.easy_strerror, "curl_easy_strerror");
  find(lib.slist_append, "curl_slist_append");
  find(lib.slist_free_all, "curl_slist_free_all");
  find(lib.easy_send, "curl_easy_send");
  find(lib.easy_recv, "curl_easy_recv");
  if (!missing.empty()) {
    return fail(Code::kFailedPrecondition,
                "libcurl 7.75 or later; the libcurl.so.4 found lacks " + missing);
  }
  if (CURLcode code = global_init(CURL_GLOBAL_DEFAULT); code != CURLE_OK) {
    return fail(Code::kFailedPrecondition,
                std::string("libcurl, which did not start: ") + lib.easy_strerror(code));
  }
  return lib;  // the handle stays open for the process's life
}

}  // namespace

Result<const CurlLib*> curlLib() {
  static std::once_flag once;
  static Result<CurlLib> lib = fail(Code::kInternal, "libcurl not loaded");
  std::call_once(once, [] { lib = load(); });
  if (!lib) return tl::unexpected<Error>(lib.error());
  return &*lib;
}

}  // namespace cohort::http
