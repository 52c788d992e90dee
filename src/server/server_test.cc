// The OpenAPI document against the routes an in-process Server registers, and the store's
// share-prefix rule. (The served answers are validated against the document by
// tests/integration/server_test.cc, against the real binary.)
#include "server/server.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "server/access.h"
#include "store/job_store.h"
#include "util/text.h"
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

// A server in this process on a fresh data root (its routes are what the tests read).
Result<std::unique_ptr<Server>> inProcessServer(const std::string& data_root) {
  ServerOptions options;
  options.data_root = data_root;
  options.port = 0;
  options.cohort_bin = "/bin/false";
  options.capacity.cpu_millis = 2000;
  return Server::create(options);
}

TEST(OpenApi, DescribesExactlyTheRoutesTheServerServes) {
  TempDir dir("cohort-server-test");
  ASSERT_FALSE(dir.path().empty());
  auto server = inProcessServer(dir.path());
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

TEST(OpenApi, ExactlyTheRoutesTheTableOpensNeedNoToken) {
  TempDir dir("cohort-server-test");
  ASSERT_FALSE(dir.path().empty());
  auto server = inProcessServer(dir.path());
  ASSERT_TRUE(server) << server.error().message;
  std::set<std::string> table_open;
  for (const std::string& route : (*server)->routesWithoutToken()) {
    std::string lower = route;
    for (size_t i = 0; i < lower.find(' '); ++i) {
      lower[i] = static_cast<char>(std::tolower(static_cast<unsigned char>(lower[i])));
    }
    table_open.insert(lower);
  }
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
  EXPECT_EQ(open, table_open);
  // A lab ticket is its own credential (lab_proxy.h).
  EXPECT_EQ(open, (std::set<std::string>{"get /v1/openapi.json", "get /metrics",
                                         "get /v1/jobs/{id}/session/jupyter/ticket/{ticket}"}));
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
        // 101: an Upgrade's; 303: a lab ticket's redirect.
        if (status[0] == '2' || status == "101" || status == "303") success = true;
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


// The lifecycle's list of states (job/lifecycle.h) is the one every reader shows: the OpenAPI
// document's, the console's and the SDK's copies are pinned to it here.
std::string sourceFile(const std::string& relative) {
  std::ifstream in(std::string(COHORT_SOURCE_DIR) + "/" + relative);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The double-quoted words between `start` and the next `end` in `text`.
std::vector<std::string> quotedWords(const std::string& text, const std::string& start,
                                     const std::string& end) {
  std::vector<std::string> out;
  auto at = text.find(start);
  if (at == std::string::npos) return out;
  const auto stop = text.find(end, at + start.size());
  const std::string part = text.substr(at + start.size(), stop - at - start.size());
  for (size_t q = part.find('"'); q != std::string::npos; q = part.find('"', q)) {
    const auto close = part.find('"', q + 1);
    if (close == std::string::npos) break;
    out.push_back(part.substr(q + 1, close - q - 1));
    q = close + 1;
  }
  return out;
}

TEST(JobStates, EveryCopyIsTheLifecyclesList) {
  std::vector<std::string> final_states, live;
  for (const std::string& s : store::kJobStates) {
    (store::isFinalState(s) ? final_states : live).push_back(s);
  }
  Json doc = parsedDocument();
  EXPECT_EQ(doc["components"]["schemas"]["Job"]["properties"]["state"]["enum"],
            Json(store::kJobStates));
  bool listed = false;
  for (const Json& p : doc["paths"]["/v1/jobs"]["get"]["parameters"]) {
    if (p.value("name", "") != "state") continue;
    EXPECT_EQ(p["schema"]["items"]["enum"], Json(store::kJobStates));
    listed = true;
  }
  EXPECT_TRUE(listed) << "GET /v1/jobs has no state parameter";
  const std::string console = sourceFile("web/src/format.js");
  EXPECT_EQ(quotedWords(console, "FINAL = new Set([", "]"), final_states) << "web/src/format.js";
  const auto active = quotedWords(console, "ACTIVE = ", ";");
  ASSERT_EQ(active.size(), 1u) << "web/src/format.js";
  EXPECT_EQ(active[0], join(live, ",")) << "web/src/format.js";
  const std::string sdk = sourceFile("python/cohort/client.py");
  EXPECT_EQ(quotedWords(sdk, "FINAL_STATES = frozenset((", "))"), final_states)
      << "python/cohort/client.py";
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
