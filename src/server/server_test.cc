// The OpenAPI document against the routes an in-process Server registers, and the store's
// share-prefix rule. (The served answers are validated against the document by
// tests/integration/server_test.cc, against the real binary.)
#include "server/server.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "server/access.h"
#include "util/temp_dir_for_tests.h"

namespace cohort::server {
namespace {

using Json = nlohmann::json;

const std::set<std::string> kMethods = {"get", "put", "post", "delete", "patch", "head",
                                        "options", "trace"};

Json parsedDocument() {
  Json doc = Json::parse(openApiDocument(), nullptr, false);
  EXPECT_FALSE(doc.is_discarded()) << "the OpenAPI document is not valid JSON";
  return doc;
}

// Every "METHOD /path" the document describes.
std::set<std::string> documentedOperations(const Json& doc) {
  std::set<std::string> out;
  if (!doc.contains("paths")) return out;
  for (const auto& [path, item] : doc["paths"].items()) {
    for (const auto& [method, operation] : item.items()) {
      if (!kMethods.count(method)) continue;
      std::string upper = method;
      for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      out.insert(upper + " " + path);
    }
  }
  return out;
}

// Every "$ref" value anywhere under `node`, with where it was found.
void collectRefs(const Json& node, const std::string& where,
                 std::vector<std::pair<std::string, std::string>>& out) {
  if (node.is_object()) {
    for (const auto& [key, value] : node.items()) {
      if (key == "$ref" && value.is_string()) out.emplace_back(where, value.get<std::string>());
      collectRefs(value, where + "/" + key, out);
    }
  } else if (node.is_array()) {
    for (size_t i = 0; i < node.size(); ++i) {
      collectRefs(node[i], where + "/" + std::to_string(i), out);
    }
  }
}

TEST(OpenApi, DocumentIsOpenApi303WithBearerAuth) {
  Json doc = parsedDocument();
  EXPECT_EQ(doc.value("openapi", ""), "3.0.3");
  EXPECT_TRUE(doc.contains("info") && doc["info"].contains("title") &&
              doc["info"].contains("version"));
  ASSERT_TRUE(doc.contains("components"));
  const Json& scheme = doc["components"]["securitySchemes"]["bearerAuth"];
  EXPECT_EQ(scheme.value("type", ""), "http");
  EXPECT_EQ(scheme.value("scheme", ""), "bearer");
  EXPECT_EQ(doc["security"], Json::parse(R"([{"bearerAuth": []}])"));
  for (const char* name : {"Job", "Share", "Account", "Token", "Event", "Rank", "Error"}) {
    EXPECT_TRUE(doc["components"]["schemas"].contains(name)) << name;
  }
}

TEST(OpenApi, DescribesExactlyTheRoutesTheServerServes) {
  TempDir dir("cohort-server-test");
  ASSERT_FALSE(dir.path().empty());
  ServerOptions options;
  options.data_root = dir.path();
  options.port = 0;
  options.cohort_bin = "/bin/false";
  options.capacity.cpu_millis = 2000;
  auto server = Server::create(options);
  ASSERT_TRUE(server) << server.error().message;
  const std::vector<std::string>& routes = (*server)->routes();
  std::set<std::string> served(routes.begin(), routes.end());
  EXPECT_EQ(served.size(), routes.size()) << "a route is registered twice";

  std::set<std::string> documented = documentedOperations(parsedDocument());
  for (const std::string& route : served) {
    EXPECT_TRUE(documented.count(route)) << "served but not documented: " << route;
  }
  for (const std::string& operation : documented) {
    EXPECT_TRUE(served.count(operation)) << "documented but not served: " << operation;
  }
  EXPECT_FALSE(served.empty());
}

TEST(OpenApi, OnlyTheDocumentAndMetricsNeedNoToken) {
  Json doc = parsedDocument();
  std::set<std::string> open;
  for (const auto& [path, item] : doc["paths"].items()) {
    for (const auto& [method, operation] : item.items()) {
      if (!kMethods.count(method)) continue;
      if (operation.contains("security") && operation["security"].empty()) {
        open.insert(method + " " + path);
      } else {
        // Authenticated operations answer 401.
        EXPECT_TRUE(operation["responses"].contains("401")) << method << " " << path;
      }
    }
  }
  EXPECT_EQ(open, (std::set<std::string>{"get /v1/openapi.json", "get /metrics"}));
}

TEST(OpenApi, EveryReferenceResolves) {
  Json doc = parsedDocument();
  std::vector<std::pair<std::string, std::string>> refs;
  collectRefs(doc, "", refs);
  ASSERT_FALSE(refs.empty());
  for (const auto& [where, ref] : refs) {
    ASSERT_EQ(ref.rfind("#/", 0), 0u) << where << ": only local references: " << ref;
    Json::json_pointer pointer(ref.substr(1));
    EXPECT_TRUE(doc.contains(pointer)) << where << ": " << ref << " does not resolve";
  }
}

TEST(OpenApi, EveryOperationDocumentsItsSuccessAndItsErrorsUseTheErrorSchema) {
  Json doc = parsedDocument();
  const Json& shared = doc["components"]["responses"];
  for (const auto& [path, item] : doc["paths"].items()) {
    for (const auto& [method, operation] : item.items()) {
      if (!kMethods.count(method)) continue;
      bool success = false;
      for (const auto& [status, response] : operation["responses"].items()) {
        if (status[0] == '2') success = true;
        if (status[0] != '4' && status[0] != '5') continue;
        Json resolved = response;
        if (response.contains("$ref")) {
          const std::string ref = response["$ref"];
          const std::string prefix = "#/components/responses/";
          ASSERT_EQ(ref.rfind(prefix, 0), 0u) << ref;
          resolved = shared.value(ref.substr(prefix.size()), Json());
        }
        EXPECT_EQ(resolved["content"]["application/json"]["schema"],
                  Json({{"$ref", "#/components/schemas/Error"}}))
            << method << " " << path << " " << status;
      }
      EXPECT_TRUE(success) << method << " " << path << " documents no 2xx answer";
    }
  }
}

TEST(PrefixCovers, EmptyPrefixCoversEverything) {
  EXPECT_TRUE(prefixCovers("", ""));
  EXPECT_TRUE(prefixCovers("", "a/b"));
  EXPECT_TRUE(prefixCovers("/", "a"));
}

TEST(PrefixCovers, CoversItselfAndWhatIsBelowIt) {
  EXPECT_TRUE(prefixCovers("run1", "run1"));
  EXPECT_TRUE(prefixCovers("run1", "run1/model.pt"));
  EXPECT_TRUE(prefixCovers("run1/", "run1/a/b"));
  EXPECT_TRUE(prefixCovers("a/b", "a/b/c"));
}

TEST(PrefixCovers, DoesNotCoverSiblingsWithTheSameStart) {
  EXPECT_FALSE(prefixCovers("run1", "run10"));
  EXPECT_FALSE(prefixCovers("run1", "run10/model.pt"));
  EXPECT_FALSE(prefixCovers("run1/", "run2/x"));
  EXPECT_FALSE(prefixCovers("a/b", "a"));
  EXPECT_FALSE(prefixCovers("a/b", ""));
}

}  // namespace
}  // namespace cohort::server
