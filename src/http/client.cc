#include "http/client.h"

#include <algorithm>

#include "http/curl_lib.h"
#include "util/text.h"

namespace cohort::http {

namespace {

constexpr size_t kMaxErrorBody = 64 * 1024;

struct Transfer {
  const Request& request;
  Response& response;
  const CurlLib& curl;
  CURL* handle;
};

size_t onBody(char* data, size_t size, size_t count, void* user) {
  auto& t = *static_cast<Transfer*>(user);
  const size_t n = size * count;
  if (t.response.status == 0) {
    long status = 0;
    t.curl.easy_getinfo(t.handle, CURLINFO_RESPONSE_CODE, &status);
    t.response.status = static_cast<int>(status);
  }
  const bool success = t.response.status >= 200 && t.response.status < 300;
  if (t.request.on_body && !success) {
    const size_t room = kMaxErrorBody - std::min(kMaxErrorBody, t.response.body.size());
    t.response.body.append(data, std::min(n, room));
    return n;
  }
  if (!t.request.on_body) {
    if (t.response.body.size() + n > t.request.max_body) {
      t.response.too_large = true;
      return 0;  // libcurl ends the transfer
    }
    t.response.body.append(data, n);
    return n;
  }
  if (!t.request.on_body(data, n)) {
    t.response.stopped = true;
    return 0;  // less than it was given: libcurl ends the transfer
  }
  return n;
}

size_t onUpload(char* buf, size_t size, size_t count, void* user) {
  auto& t = *static_cast<Transfer*>(user);
  const uint64_t left = t.request.upload_size - t.response.sent;
  if (left == 0) return 0;
  const size_t got = t.request.upload(buf, std::min<uint64_t>(size * count, left));
  if (got == 0) return CURL_READFUNC_ABORT;
  t.response.sent += got;
  return got;
}

}  // namespace

void setConnection(void* handle, const Request& request, char* error) {
  auto lib = curlLib();
  if (!lib) return;
  const CurlLib* curl = *lib;
  CURL* h = static_cast<CURL*>(handle);
  curl->easy_setopt(h, CURLOPT_URL, request.url.c_str());
  curl->easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
  if (!request.ca_file.empty()) curl->easy_setopt(h, CURLOPT_CAINFO, request.ca_file.c_str());
  if (!request.pin.empty()) {
    // The key is the identity: the name the server is reached by need not be in its certificate.
    curl->easy_setopt(h, CURLOPT_PINNEDPUBLICKEY, request.pin.c_str());
    curl->easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 0L);
    curl->easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 0L);
  }
  curl->easy_setopt(h, CURLOPT_PROXY, "");
  curl->easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl->easy_setopt(h, CURLOPT_ERRORBUFFER, error);
  curl->easy_setopt(h, CURLOPT_CONNECTTIMEOUT, static_cast<long>(request.connect_timeout_s));
}

Result<Response> perform(const Request& request) {
  COHORT_ASSIGN(const CurlLib* curl, curlLib());
  Response response;
  CURL* h = curl->easy_init();
  if (!h) return fail(Code::kFailedPrecondition, "libcurl, which could not make a handle");
  Transfer t{request, response, *curl, h};
  curl_slist* headers = nullptr;
  for (const std::string& header : request.headers) {
    headers = curl->slist_append(headers, header.c_str());
  }
  // libcurl asks for "100 Continue" before a large body and waits a second for it.
  headers = curl->slist_append(headers, "Expect:");
  char error[CURL_ERROR_SIZE] = {0};
  setConnection(h, request, error);
  curl->easy_setopt(h, CURLOPT_FORBID_REUSE, 1L);
  curl->easy_setopt(h, CURLOPT_HTTPHEADER, headers);
  if (request.stall_timeout_s > 0) {
    curl->easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl->easy_setopt(h, CURLOPT_LOW_SPEED_TIME, static_cast<long>(request.stall_timeout_s));
  }
  curl->easy_setopt(h, CURLOPT_WRITEFUNCTION, onBody);
  curl->easy_setopt(h, CURLOPT_WRITEDATA, &t);
  if (request.upload) {
    curl->easy_setopt(h, CURLOPT_UPLOAD, 1L);  // PUT, whose name CUSTOMREQUEST changes
    curl->easy_setopt(h, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(request.upload_size));
    curl->easy_setopt(h, CURLOPT_READFUNCTION, onUpload);
    curl->easy_setopt(h, CURLOPT_READDATA, &t);
  } else if (!request.body.empty() || request.method == "POST" || request.method == "PUT") {
    curl->easy_setopt(h, CURLOPT_POSTFIELDS, request.body.data());
    curl->easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(request.body.size()));
  }
  curl->easy_setopt(h, CURLOPT_CUSTOMREQUEST, request.method.c_str());
  const CURLcode code = curl->easy_perform(h);
  long status = 0;
  curl->easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
  response.status = static_cast<int>(status);
  curl_off_t connect_us = 0;
  curl->easy_getinfo(h, CURLINFO_CONNECT_TIME_T, &connect_us);
  response.connected = connect_us > 0 || response.status != 0;
  if (request.body.size() > 0 && !request.upload && response.connected) {
    curl_off_t uploaded = 0;
    curl->easy_getinfo(h, CURLINFO_SIZE_UPLOAD_T, &uploaded);
    response.sent = static_cast<uint64_t>(uploaded);
  }
  if (response.too_large) {
    response.body.clear();
    response.error = "an answer longer than " + formatSize(static_cast<double>(request.max_body)) +
                     ", more than is taken";
  } else if (code != CURLE_OK && !response.stopped) {
    response.error = error[0] ? error : curl->easy_strerror(code);
    response.timed_out = code == CURLE_OPERATION_TIMEDOUT;
  }
  curl->easy_cleanup(h);
  curl->slist_free_all(headers);
  return response;
}

Result<std::string> serverCertificate(const std::string& url) {
  COHORT_ASSIGN(const CurlLib* curl, curlLib());
  CURL* h = curl->easy_init();
  if (!h) return fail(Code::kFailedPrecondition, "libcurl, which could not make a handle");
  char error[CURL_ERROR_SIZE] = {0};
  curl->easy_setopt(h, CURLOPT_URL, url.c_str());
  curl->easy_setopt(h, CURLOPT_PROTOCOLS_STR, "https");
  curl->easy_setopt(h, CURLOPT_PROXY, "");
  curl->easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl->easy_setopt(h, CURLOPT_CONNECT_ONLY, 1L);  // the handshake, no request
  curl->easy_setopt(h, CURLOPT_CERTINFO, 1L);
  curl->easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 0L);  // only to look at it: nothing is sent
  curl->easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 0L);
  curl->easy_setopt(h, CURLOPT_CONNECTTIMEOUT, 10L);
  curl->easy_setopt(h, CURLOPT_ERRORBUFFER, error);
  const CURLcode code = curl->easy_perform(h);
  std::string pem;
  if (code == CURLE_OK) {
    curl_certinfo* info = nullptr;
    curl->easy_getinfo(h, CURLINFO_CERTINFO, &info);
    if (info && info->num_of_certs > 0) {
      for (curl_slist* field = info->certinfo[0]; field; field = field->next) {
        const std::string text = field->data ? field->data : "";
        if (startsWith(text, "Cert:")) pem = text.substr(5);
      }
    }
  }
  const std::string why = code == CURLE_OK ? "" : (error[0] ? error : curl->easy_strerror(code));
  curl->easy_cleanup(h);
  if (code != CURLE_OK) return fail(Code::kUnavailable, url + ": " + why);
  if (pem.empty()) return fail(Code::kUnavailable, url + ": the server presented no certificate");
  return pem;
}

}  // namespace cohort::http
