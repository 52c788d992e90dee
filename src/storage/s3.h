// S3: an ObjectStore (storage/object_store.h) on any S3-compatible service, spoken over HTTP(S)
// with libcurl and AWS Signature Version 4 (signV4 below: every request is signed by cohort).
//
// Where and who, the way AWS's own tools take them (never from a command line, never logged):
//  - credentials: AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY (+ AWS_SESSION_TOKEN), else the
//    profile AWS_PROFILE (default "default") of AWS_SHARED_CREDENTIALS_FILE (~/.aws/credentials:
//    aws_access_key_id, aws_secret_access_key, aws_session_token);
//  - region: AWS_REGION, AWS_DEFAULT_REGION, the profile's `region` in AWS_CONFIG_FILE
//    (~/.aws/config, section "[profile NAME]" or "[default]"), else us-east-1;
//  - endpoint: AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, the profile's `endpoint_url`, else AWS's
//    regional endpoint; AWS_CA_BUNDLE, a file of certificates to trust for https instead of the
//    system's. A custom endpoint is addressed path-style (http://host:port/bucket/key),
//    AWS's virtual-hosted style (https://bucket.s3.REGION.amazonaws.com/key).
//
// Objects up to kPartSize bytes are stored with one PUT; larger ones with a multipart upload
// (parts of partSize(size) bytes, aborted on failure, so nothing appears under the key unless
// complete). Every request body is sent with its SHA-256 in the signed x-amz-content-sha256
// header, which the service checks. Requests that fail on the way (connection lost, 5xx,
// throttling) are retried three times with back-off. Between two stores at one endpoint with
// one access key, copyIn copies inside the service (CopyObject; UploadPartCopy in put's parts
// above kPartSize, so that the copy carries the etag an upload of its bytes would).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "storage/object_store.h"
#include "util/result.h"

namespace cohort::storage {

struct S3Config {
  std::string endpoint;  // "http://127.0.0.1:9000" (no trailing '/'); "" = AWS's
  std::string region = "us-east-1";
  std::string access_key;
  std::string secret_key;
  std::string session_token;
  std::string ca_bundle;  // "" = the system's certificates
};

// The configuration from the environment and ~/.aws, as above. Errors: kUnauthenticated when
// no credentials are found (the message says where they are looked for), kInvalidArgument for
// an endpoint that is not an http:// or https:// URL or a named profile that does not exist.
Result<S3Config> s3ConfigFromEnvironment();

// An "s3://bucket/key" URI. Errors: kInvalidArgument naming the URI for a missing or invalid
// bucket name, or a key with an empty, "." or ".." component.
struct S3Uri {
  std::string bucket;
  std::string key;  // without a leading '/'; a trailing '/' is kept (a "directory")
};
Result<S3Uri> parseS3Uri(const std::string& uri);
bool isS3Uri(const std::string& text);

// The store for one bucket. Nothing is sent until the first call. Errors: kFailedPrecondition
// when libcurl cannot be loaded (http/curl_lib.h).
Result<std::unique_ptr<ObjectStore>> makeS3Store(S3Config config, std::string bucket);

// The store of `uri`'s bucket, configured from the environment (s3ConfigFromEnvironment).
Result<std::unique_ptr<ObjectStore>> openS3(const S3Uri& uri);

// AWS Signature Version 4 of one S3 request (pure): the value of its Authorization header. `url`
// is the request's ("http://host:port/bucket/key?query", its path percent-encoded as sent, its
// query parameters encoded and in sorted order), `headers` all that are signed (names in any
// case; "host", "x-amz-date" and "x-amz-content-sha256" among them), `payload_hash` the
// body's SHA-256 in hex, `amz_date` the time ("20130524T000000Z").
std::string signV4(const S3Config& config, std::string_view method, std::string_view url,
                   const std::vector<std::pair<std::string, std::string>>& headers,
                   std::string_view payload_hash, std::string_view amz_date);

// Whether `bucket` is there and takes the credentials: one listing of at most one key under
// `prefix`. Errors: those of ObjectStore::list (kNotFound naming a missing bucket,
// kUnauthenticated for refused credentials, kUnavailable when the service cannot be reached).
Result<void> probeS3(const S3Config& config, const std::string& bucket, const std::string& prefix);

}  // namespace cohort::storage
