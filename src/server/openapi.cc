// The OpenAPI 3.0.3 document of the server's API (docs/server-api.md), served at
// GET /v1/openapi.json. It is a data file, src/server/openapi.json, embedded at build time
// (cmake/embed.cmake); src/server/server_test.cc checks it against the route table (every route
// and no other, the routes without a token and no others, every error its operations name)
// and its job states against the lifecycle's, and tests/integration/server_test.cc validates
// real answers against its schemas.
#include "server/server.h"

#include <cstddef>
#include <string>

namespace cohort::server {

extern const char kOpenApiJson[];
extern const std::size_t kOpenApiJsonSize;

const std::string& openApiDocument() {
  static const std::string doc(kOpenApiJson, kOpenApiJsonSize);
  return doc;
}

}  // namespace cohort::server
