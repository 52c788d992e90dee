// libcurl, loaded the first time a request needs it rather than whenever cohort starts. Linked,
// it and the ~30 libraries it pulls in cost every cohort process about 6 ms of dynamic loading
// (coordinators and node agents included), and most runs never make a request: it speaks for
// s3:// (storage/s3.h), to a Kubernetes API server (backends/kube.h) and to cohort's own server
// (http/client.h).
#pragma once

#include <curl/curl.h>

#include "util/result.h"

namespace cohort::http {

// The libcurl functions cohort calls, as loaded from libcurl.so.4 (curl_global_init done).
struct CurlLib {
  CURL* (*easy_init)();
  void (*easy_cleanup)(CURL*);
  void (*easy_reset)(CURL*);
  CURLcode (*easy_setopt)(CURL*, CURLoption, ...);
  CURLcode (*easy_getinfo)(CURL*, CURLINFO, ...);
  CURLcode (*easy_perform)(CURL*);
  const char* (*easy_strerror)(CURLcode);
  curl_slist* (*slist_append)(curl_slist*, const char*);
  void (*slist_free_all)(curl_slist*);
  CURLcode (*easy_send)(CURL*, const void*, size_t, size_t*);
  CURLcode (*easy_recv)(CURL*, void*, size_t, size_t*);
};

// Loads libcurl once per process (thread-safe); later calls return the same answer. Errors:
// kFailedPrecondition, a message that names the library and the package that has it, made to
// follow what needed it ("s3:// needs " + message).
Result<const CurlLib*> curlLib();

}  // namespace cohort::http
