// The OpenAPI 3.0.3 document of the server's API (docs/server-api.md), served at
// GET /v1/openapi.json. It must describe every route Server::routes() lists, and the response
// schemas must match what server.cc sends: src/server/server_test.cc checks the first, and
// tests/integration/server_test.cc validates real answers against the schemas.
//
// Operations are built by the helpers below (one line per answer); the schemas are JSON.
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>

#include "server/server.h"
#include "store/job_store.h"

namespace cohort::server {
namespace {

using Json = nlohmann::ordered_json;

Json ref(const std::string& schema) { return {{"$ref", "#/components/schemas/" + schema}}; }
Json content(const std::string& media_type, Json schema) {
  return {{media_type, {{"schema", std::move(schema)}}}};
}
Json json(const std::string& schema) { return content("application/json", ref(schema)); }
const Json kText = {{"type", "string"}};
const Json kBytes = {{"type", "string"}, {"format", "binary"}};

// The error answers, by status: shared components, described once in components/responses.
struct ErrorAnswer {
  int status;
  const char* name;
  const char* description;
};
constexpr ErrorAnswer kErrors[] = {
    {400, "BadRequest",
     "invalid_argument: malformed JSON, an unknown or bad field (the message names it), a bad "
     "parameter"},
    {401, "Unauthenticated", "unauthenticated: no token, or one that does not exist (any more)"},
    {403, "Forbidden", "permission_denied: not allowed to this account"},
    {404, "NotFound", "not_found: no such thing, or one that belongs to another account"},
    {409, "Conflict", "already_exists or failed_precondition"},
    {413, "TooLarge",
     "too_large: the body is over the limit (4 MiB; store uploads 1 GiB; code uploads the "
     "server's --max-upload, 1 GiB by default)"},
    {500, "Internal", "internal: a bug in cohort (the message says what)"},
};

// One operation: what it does, its success answer (`body` null for none), and the statuses of
// the errors it can answer.
Json operation(const std::string& summary, const std::string& id, int status,
               const std::string& description, Json body, std::initializer_list<int> errors) {
  Json answer = {{"description", description}};
  if (!body.is_null()) answer["content"] = std::move(body);
  Json responses = {{std::to_string(status), std::move(answer)}};
  for (int e : errors) {
    for (const ErrorAnswer& known : kErrors) {
      if (known.status == e) {
        responses[std::to_string(e)] = {
            {"$ref", std::string("#/components/responses/") + known.name}};
      }
    }
  }
  return {{"summary", summary}, {"operationId", id}, {"responses", std::move(responses)}};
}

// An operation that takes this JSON schema (or these bytes) as its body.
Json withBody(Json op, Json body) {
  op["requestBody"] = {{"required", true}, {"content", std::move(body)}};
  return op;
}

// An operation anyone may call, without a token.
Json withoutToken(Json op) {
  op["security"] = Json::array();
  return op;
}

Json parameter(const std::string& in, const std::string& name, const std::string& description,
               Json schema) {
  return {{"name", name},
          {"in", in},
          {"required", in == "path"},
          {"description", description},
          {"schema", std::move(schema)}};
}
Json pathParameter(const std::string& name, const std::string& description,
                   const std::string& type = "string") {
  return parameter("path", name, description, {{"type", type}});
}
const Json kJobId = pathParameter("id", "the job id");

Json jobPaths() {
  const Json states = store::kJobStates;
  Json list = operation("The caller's jobs (an admin's: every account's), newest first", "listJobs",
                        200, "the jobs", json("JobList"), {400, 401, 500});
  Json state =
      parameter("query", "state", "only jobs in these states (repeatable, or a comma list)",
                {{"type", "array"}, {"items", {{"type", "string"}, {"enum", states}}}});
  state["style"] = "form";
  state["explode"] = true;
  list["parameters"] = {state, parameter("query", "limit", "at most this many (default 1000)",
                                         {{"type", "integer"}, {"minimum", 1}, {"default", 1000}})};

  Json logs = operation(
      "A job's log: the merged console (lines prefixed [role/rank node]) or one rank's",
      "getJobLogs", 200, "the log text; chunked, and streamed until the job ends with follow=1",
      content("text/plain", kText), {400, 401, 404, 500});
  logs["parameters"] = {
      parameter("query", "rank", "that rank's log", {{"type", "integer"}, {"minimum", 0}}),
      parameter("query", "offset", "bytes to skip", {{"type", "integer"}, {"minimum", 0}}),
      parameter("query", "follow",
                "1: stream new lines as they are written (no polling) until the job ends",
                {{"type", "string"}, {"enum", {"0", "1", "true", "false"}}})};

  Json events_content = json("EventList");
  events_content["text/event-stream"] = {
      {"schema", {{"type", "string"},
                  {"description",
                   "Server-Sent Events: each event as 'id: <seq>' and 'data: <the event as "
                   "JSON>', until the job's final state event; ': keep-alive' comments while "
                   "nothing happens"}}}};
  Json events = operation(
      "A job's events. Without parameters: every event so far, in time order. With after or "
      "wait: those after a seq, in seq order, answered at once when there are some, else as "
      "soon as one is stored or the wait is over (long-poll). With 'Accept: text/event-stream': "
      "a stream of them (Server-Sent Events), resumable with Last-Event-ID",
      "getJobEvents", 200, "the events", events_content, {400, 401, 404, 500});
  events["parameters"] = {
      parameter("query", "after", "only events with a larger seq (the submitted event is 0)",
                {{"type", "integer"}, {"minimum", 0}}),
      parameter("query", "wait",
                "long-poll: wait up to this long (like 30s; at most 5m) for an event after "
                "'after'",
                {{"type", "string"}}),
      parameter("header", "Last-Event-ID", "event streams: resume after this seq",
                {{"type", "integer"}, {"minimum", 0}})};

  return {
      {"/v1/jobs",
       {{"post", withBody(operation("Submit a job", "submitJob", 201, "the job, queued",
                                    json("Job"), {400, 401, 403, 404, 413, 500}),
                          json("SubmitRequest"))},
        {"get", list}}},
      {"/v1/uploads",
       {{"post",
         withBody(operation("Upload a job's code: a ustar archive of its workdir, extracted at "
                            "once and kept for the job that names it (\"code\" in POST "
                            "/v1/jobs). Absolute paths, '..', links that lead out, hard links, "
                            "devices and pax or GNU headers are refused, naming the entry",
                            "uploadCode", 201, "extracted", json("CodeUpload"),
                            {400, 401, 409, 413, 500}),
                  content("application/x-tar", kBytes))}}},
      {"/v1/jobs/{id}",
       {{"parameters", {kJobId}},
        {"get",
         operation("A job's record", "getJob", 200, "the job", json("Job"), {401, 404, 500})},
        {"delete", operation("Remove a finished job: its record, events, logs and outputs",
                             "deleteJob", 204, "removed", nullptr, {401, 404, 409, 500})}}},
      {"/v1/jobs/{id}/events", {{"parameters", {kJobId}}, {"get", events}}},
      {"/v1/jobs/{id}/ranks",
       {{"parameters", {kJobId}},
        {"get", operation("A job's processes (empty before it starts)", "getJobRanks", 200,
                          "the ranks", json("RankList"), {401, 404, 500})}}},
      {"/v1/jobs/{id}/metrics",
       {{"parameters", {kJobId}},
        {"get", operation("A job's training metrics (what its ranks logged with cohort.log) and "
                          "its ranks' resource samples, the latest `limit` of each (1000 by "
                          "default, at most 10000) after `after` (unix nanoseconds)",
                          "getJobMetrics", 200, "the metrics", json("MetricList"),
                          {400, 401, 404, 500})}}},
      {"/v1/jobs/{id}/stacks",
       {{"parameters", {kJobId}},
        {"get", operation("Every rank's stack, grouped: the latest the coordinator wrote on "
                          "request (with its time, unix nanoseconds; 0 when none) and those of "
                          "a hang",
                          "getJobStacks", 200, "the stacks", json("Stacks"), {401, 404, 500})},
        {"post", operation("Ask a running job for every rank's stack now; GET has them a moment "
                           "later (its time changes)",
                           "requestJobStacks", 202, "asked", json("StacksRequested"),
                           {401, 404, 409, 500})}}},
      {"/v1/jobs/{id}/debug",
       {{"parameters", {kJobId}},
        {"get", operation("The ranks of a job with debug: that wait for a debugger or have one "
                          "attached now, with where to attach (docs/debugging.md), and the "
                          "directory the ranks run in (for an IDE's path mappings)",
                          "getJobDebug", 200, "the paused ranks", json("DebugTargets"),
                          {401, 404, 500})}}},
      {"/v1/jobs/{id}/logs", {{"parameters", {kJobId}}, {"get", logs}}},
      {"/v1/jobs/{id}/report",
       {{"parameters", {kJobId}},
        {"post", withBody(operation("A job's coordinator hands over the job's record: its "
                                    "numbered events (each ingested once), its progress, its "
                                    "result. Authenticated with the job's own report token, "
                                    "never an account's",
                                    "reportJob", 200, "what the server has now",
                                    json("ReportAnswer"), {400, 401, 413, 500}),
                          json("Report"))}}},
      {"/v1/jobs/{id}/stop",
       {{"parameters", {kJobId}},
        {"post", operation("Stop a job: a queued one is stopped at once, a running one goes "
                           "stopping",
                           "stopJob", 202, "the job", json("Job"), {401, 404, 500})}}},
      {"/v1/jobs/{id}/outputs",
       {{"parameters", {kJobId}},
        {"get", operation("The files in the job's output/ directory, recursively, sorted",
                          "listJobOutputs", 200, "the files", json("FileList"), {401, 404, 500})}}},
      {"/v1/jobs/{id}/outputs/{path}",
       {{"parameters",
         {kJobId, pathParameter("path",
                                "relative to output/; may contain '/'; '..', absolute "
                                "paths and links leaving output/ are refused")}},
        {"get", operation("One output file's bytes", "getJobOutput", 200, "the file",
                          content("application/octet-stream", kBytes), {400, 401, 404, 500})}}},
  };
}

Json storePaths() {
  Json listing = json("FileList");
  listing.update(content("application/octet-stream", kBytes));
  Json get = operation("A store file's bytes, or a directory's listing", "getStoreObject", 200,
                       "the file's bytes; for a directory (or with list=1) its files, relative "
                       "to it",
                       listing, {400, 401, 404, 500});
  get["parameters"] = {parameter("query", "list", "1: list, never a file's bytes",
                                 {{"type", "string"}, {"enum", {"1"}}})};
  return {
      {"/v1/store/{bucket}/{path}",
       {{"parameters",
         {pathParameter("bucket", "the bucket"),
          pathParameter("path",
                        "a path inside the bucket; may contain '/' and may be empty (the "
                        "bucket's top); '..' is refused")}},
        {"get", get},
        {"put", withBody(operation("Upload the body as this file (claims a bucket nobody owns)",
                                   "putStoreObject", 201, "stored", json("Upload"),
                                   {400, 401, 403, 404, 409, 413, 500}),
                         content("application/octet-stream", kBytes))}}},
      {"/v1/buckets",
       {{"get", operation("The caller's own buckets", "listBuckets", 200, "the buckets",
                          json("BucketList"), {401, 500})}}},
      {"/v1/shares",
       {{"post", withBody(operation("Share a prefix of one of the caller's buckets", "createShare",
                                    201, "the share", json("Share"), {400, 401, 404, 413, 500}),
                          json("ShareRequest"))},
        {"get", operation("Shares the caller granted and those granted to it", "listShares", 200,
                          "the shares", json("ShareList"), {401, 500})}}},
      {"/v1/shares/{id}",
       {{"parameters", {pathParameter("id", "the share id", "integer")}},
        {"delete", operation("Revoke a share (its owner or an admin); works at once", "deleteShare",
                             204, "revoked", nullptr, {401, 403, 404, 500})}}},
  };
}

Json accountPaths() {
  return {
      {"/v1/whoami",
       {{"get", operation("The caller's account", "whoami", 200, "the caller", json("Whoami"),
                          {401, 500})}}},
      {"/v1/accounts",
       {{"post", withBody(operation("Create an account and its first token (admin)",
                                    "createAccount", 201, "the account and its token",
                                    json("NewAccount"), {400, 401, 403, 409, 413, 500}),
                          json("AccountRequest"))},
        {"get", operation("Every account (admin)", "listAccounts", 200, "the accounts",
                          json("AccountList"), {401, 403, 500})}}},
      {"/v1/tokens",
       {{"get", operation("The caller's tokens (an admin's: all)", "listTokens", 200, "the tokens",
                          json("TokenList"), {401, 500})},
        {"post",
         withBody(operation("Make a token; it is shown only in this answer", "createToken", 201,
                            "the token", json("NewToken"), {400, 401, 403, 404, 413, 500}),
                  json("TokenRequest"))}}},
      {"/v1/tokens/{id}",
       {{"parameters", {pathParameter("id", "the token id", "integer")}},
        {"delete", operation("Revoke a token; works at once", "deleteToken", 204, "revoked",
                             nullptr, {401, 404, 500})}}},
  };
}

Json environmentPaths() {
  const Json name = pathParameter("name", "the environment's name");
  Json log = operation("The output of the environment's build (the server's words and pip's)",
                       "getEnvironmentLog", 200,
                       "the log text; chunked, and streamed until the build is over with follow=1",
                       content("text/plain", kText), {400, 401, 404, 500});
  log["parameters"] = {
      parameter("query", "offset", "bytes to skip", {{"type", "integer"}, {"minimum", 0}}),
      parameter("query", "follow",
                "1: stream new lines as they are written (no polling) until the build is over",
                {{"type", "string"}, {"enum", {"0", "1", "true", "false"}}})};
  return {
      {"/v1/environments",
       {{"get", operation("The environments the caller's jobs may name: the presets, the "
                          "admins' (every account's), the caller's own",
                          "listEnvironments", 200, "the environments", json("EnvironmentList"),
                          {401, 500})}}},
      {"/v1/environments/{name}",
       {{"parameters", {name}},
        {"get", operation("An environment, with its lock file and its build's last lines",
                          "getEnvironment", 200, "the environment", json("Environment"),
                          {400, 401, 404, 500})},
        {"put", withBody(operation("Create or replace one of the caller's environments (an "
                                   "admin's: every account's) from its definition; it is built "
                                   "after the answer, as the account's user",
                                   "pushEnvironment", 202, "the environment, building",
                                   json("Environment"), {400, 401, 404, 409, 413, 500}),
                         json("EnvironmentRequest"))},
        {"delete",
         operation("Remove one of the caller's environments (an admin: one of the server's); "
                   "refused while a queued or running job names it, or another is built on it",
                   "deleteEnvironment", 204, "removed", nullptr, {400, 401, 403, 404, 409, 500})}}},
      {"/v1/environments/{name}/log", {{"parameters", {name}}, {"get", log}}},
  };
}

const char* const kEnvironmentSchemas = R"json(
{
  "Environment": {
    "type": "object",
    "properties": {
      "name": {"type": "string"},
      "kind": {"type": "string", "enum": ["preset", "saved"]},
      "owner": {"type": "string", "nullable": true, "description": "the account that pushed it"},
      "shared": {"type": "boolean", "description": "every account's jobs may name it"},
      "state": {"type": "string", "enum": ["building", "built", "failed", "not_built"]},
      "base": {"type": "string", "nullable": true},
      "requirements": {"type": "array", "items": {"type": "string"}},
      "hash": {"type": "string", "nullable": true, "description": "its content hash"},
      "python_version": {"type": "string"},
      "packages": {"type": "object", "additionalProperties": {"type": "string"}},
      "summary": {"type": "string"},
      "reason": {"type": "string", "description": "why its build failed"},
      "created": {"type": "string", "format": "date-time", "nullable": true},
      "updated": {"type": "string", "format": "date-time", "nullable": true},
      "lock": {"type": "string", "description": "its lock file (GET of one environment)"},
      "log": {
        "type": "array",
        "items": {"type": "string"},
        "description": "its build's last lines (GET of one environment)"
      }
    },
    "required": ["name", "kind", "owner", "shared", "state", "base", "requirements", "hash",
                 "python_version", "packages", "summary", "reason", "created", "updated"],
    "additionalProperties": false
  },
  "EnvironmentList": {
    "type": "object",
    "properties": {
      "environments": {"type": "array", "items": {"$ref": "#/components/schemas/Environment"}}
    },
    "required": ["environments"],
    "additionalProperties": false
  },
  "EnvironmentRequest": {
    "type": "object",
    "properties": {
      "base": {"type": "string", "description": "a preset or an environment the caller may use"},
      "requirements": {
        "type": "array",
        "items": {"type": "string"},
        "description": "NAME[EXTRAS][SPECIFIERS][; MARKER], at most 256; no URLs or paths"
      },
      "lock": {"type": "string", "description": "PKG==VER lines to install exactly"}
    },
    "required": ["base"],
    "additionalProperties": false
  }
}
)json";

// The response and message schemas, as JSON.
const char* const kSchemas = R"json(
{
  "Error": {
    "type": "object",
    "properties": {
      "error": {
        "type": "object",
        "properties": {
          "code": {
            "type": "string",
            "enum": [
              "invalid_argument",
              "unauthenticated",
              "permission_denied",
              "not_found",
              "already_exists",
              "failed_precondition",
              "too_large",
              "unavailable",
              "deadline_exceeded",
              "internal"
            ]
          },
          "message": {"type": "string"}
        },
        "required": ["code", "message"],
        "additionalProperties": false
      }
    },
    "required": ["error"],
    "additionalProperties": false
  },
  "Resources": {
    "type": "object",
    "properties": {
      "cpus": {"type": "number", "description": "CPUs, may be fractional"},
      "gpus": {"type": "integer"},
      "memory": {"type": "integer", "description": "bytes; 0: not limited"}
    },
    "required": ["cpus", "gpus", "memory"],
    "additionalProperties": false
  },
  "Waiting": {
    "type": "object",
    "properties": {
      "kind": {"type": "string", "enum": ["resources", "reserved", "would_delay", "quota", "never_fits"]},
      "reason": {"type": "string"}
    },
    "required": ["kind", "reason"],
    "additionalProperties": false,
    "description": "why a queued job waits (null unless queued)"
  },
  "RootCause": {
    "type": "object",
    "properties": {
      "name": {"type": "string"},
      "role": {"type": "string"},
      "rank": {"type": "integer"},
      "node": {"type": "integer"},
      "exit_code": {"type": "integer"},
      "signal": {"type": "integer"},
      "tail": {"type": "array", "items": {"type": "string"}},
      "hint": {"type": "string"}
    },
    "required": ["name", "role", "rank", "node", "exit_code", "signal", "tail", "hint"],
    "additionalProperties": false,
    "description": "the rank whose failure ended the job"
  },
  "Job": {
    "type": "object",
    "properties": {
      "id": {"type": "string"},
      "name": {"type": "string"},
      "account": {"type": "string"},
      "state": {
        "type": "string",
        "enum": [
          "queued",
          "starting",
          "staging",
          "running",
          "restarting",
          "stopping",
          "succeeded",
          "failed",
          "stopped"
        ]
      },
      "priority": {"type": "integer"},
      "framework": {"type": "string"},
      "ranks": {"type": "integer", "description": "the number of processes (WORLD_SIZE)"},
      "resources": {"$ref": "#/components/schemas/Resources"},
      "submitted": {"type": "string", "format": "date-time", "description": "ISO 8601 UTC"},
      "started": {
        "type": "string",
        "format": "date-time",
        "nullable": true,
        "description": "ISO 8601 UTC, null when not yet"
      },
      "ended": {
        "type": "string",
        "format": "date-time",
        "nullable": true,
        "description": "ISO 8601 UTC, null when not yet"
      },
      "exit_code": {"type": "integer", "nullable": true},
      "reason": {"type": "string"},
      "waiting": {"nullable": true, "allOf": [{"$ref": "#/components/schemas/Waiting"}]},
      "attempts": {"type": "integer"},
      "root_cause": {"nullable": true, "allOf": [{"$ref": "#/components/schemas/RootCause"}]},
      "startup": {
        "type": "array",
        "nullable": true,
        "description": "each node's startup phases of the last attempt, in seconds since the start (null: that phase did not happen); null until the job has ended. Only in one job's record",
        "items": {
          "type": "object",
          "properties": {
            "node": {"type": "integer"},
            "staged_s": {"type": "number", "nullable": true},
            "spawned_s": {"type": "number", "nullable": true},
            "first_output_s": {"type": "number", "nullable": true},
            "first_metric_s": {"type": "number", "nullable": true}
          }
        }
      },
      "spec": {
        "allOf": [{"$ref": "#/components/schemas/JobFile"}],
        "description": "the job file it runs, every field written out (durations in ms, memory in bytes): submitting it again runs the same job. Only in one job's record (GET /v1/jobs/{id}), not in lists"
      }
    },
    "required": [
      "id",
      "name",
      "account",
      "state",
      "priority",
      "framework",
      "ranks",
      "resources",
      "submitted",
      "started",
      "ended",
      "exit_code",
      "reason",
      "waiting",
      "attempts",
      "root_cause"
    ],
    "additionalProperties": false,
    "description": "a job record"
  },
  "JobList": {
    "type": "object",
    "properties": {"jobs": {"type": "array", "items": {"$ref": "#/components/schemas/Job"}}},
    "required": ["jobs"],
    "additionalProperties": false
  },
  "Event": {
    "type": "object",
    "required": ["time", "event"],
    "additionalProperties": true,
    "properties": {
      "time": {"type": "string", "format": "date-time", "description": "ISO 8601 UTC"},
      "event": {"type": "string", "description": "submitted, state, staged, rank_exit, output, ..."},
      "seq": {"type": "integer", "description": "its place in the job's events: 0 for submitted, then 1, 2, ..."}
    },
    "description": "one event of a job; fields beyond time and event depend on the event"
  },
  "EventList": {
    "type": "object",
    "properties": {
      "events": {"type": "array", "items": {"$ref": "#/components/schemas/Event"}},
      "last_seq": {"type": "integer", "description": "with after or wait: the last seq answered (pass it as the next after)"},
      "ended": {"type": "boolean", "description": "with after or wait: the job is final and its last event was answered"}
    },
    "required": ["events"],
    "additionalProperties": false
  },
  "Rank": {
    "type": "object",
    "properties": {
      "name": {"type": "string", "description": "role/role_rank"},
      "role": {"type": "string"},
      "role_rank": {"type": "integer"},
      "rank": {"type": "integer"},
      "node": {"type": "integer"},
      "state": {"type": "string", "enum": ["pending", "running", "exited"]},
      "exit_code": {"type": "integer", "nullable": true},
      "signal": {"type": "integer"},
      "by_cohort": {"type": "boolean", "description": "cohort ended it (stop, a failure elsewhere)"},
      "last_output": {"type": "string", "format": "date-time", "nullable": true, "description": "when it last wrote output (null: not yet), as its node agent last said"},
      "cpu_seconds": {"type": "number", "description": "CPU time of its process group so far"},
      "rss_bytes": {"type": "integer", "description": "resident memory of its process group"},
      "gpu_util": {"type": "number", "description": "percent: the busiest GPU its processes are on, where nvidia-smi shows them"},
      "gpu_memory_bytes": {"type": "integer", "description": "what its processes hold on every GPU together, where nvidia-smi shows them"}
    },
    "required": ["name", "role", "role_rank", "rank", "node", "state", "exit_code", "signal", "by_cohort"],
    "additionalProperties": false
  },
  "Report": {
    "type": "object",
    "properties": {
      "seq": {"type": "integer", "minimum": 1, "description": "the number of events[0]; events are numbered 1, 2, ... in the job's events file"},
      "events": {"type": "array", "maxItems": 4096, "items": {"type": "object"}},
      "progress": {"type": "object", "description": "{time, attempt, ranks: [{rank, name, role, node, running, last_output, cpu_seconds, rss_bytes, gpu_util?, gpu_memory_bytes?}]}"},
      "result": {"type": "object", "description": "the job's result.json; recorded once every event is in"}
    },
    "required": ["seq", "events"]
  },
  "ReportAnswer": {
    "type": "object",
    "properties": {
      "events_seq": {"type": "integer", "description": "the server has events 1..events_seq: send from events_seq + 1"},
      "result": {"type": "boolean", "description": "the job's end is recorded"}
    },
    "required": ["events_seq", "result"],
    "additionalProperties": false
  },
  "Stacks": {
    "type": "object",
    "properties": {
      "stacks": {"type": "string", "nullable": true, "description": "stacks-now.txt: the grouped stacks of the latest request"},
      "time": {"type": "integer", "description": "when they were written, unix nanoseconds; 0 when never"},
      "hang": {"type": "string", "nullable": true, "description": "stacks.txt: the stacks taken at each hang (policy.hang_timeout)"}
    },
    "required": ["stacks", "time", "hang"],
    "additionalProperties": false
  },
  "DebugTargets": {
    "type": "object",
    "properties": {
      "ranks": {"type": "array", "items": {
        "type": "object",
        "properties": {
          "name": {"type": "string", "description": "worker/1"},
          "rank": {"type": "integer"},
          "node": {"type": "integer"},
          "attempt": {"type": "integer"},
          "state": {"type": "string", "enum": ["waiting", "attached"]},
          "reason": {"type": "string", "description": "start, breakpoint, exception or pdb"},
          "where": {"type": "string", "description": "where it paused: a breakpoint() line, an exception"},
          "host": {"type": "string", "description": "the address the rank's debugger listens on, on its node (127.0.0.1: tunnel to it)"},
          "port": {"type": "integer"},
          "address": {"type": "string", "description": "host:port"},
          "since": {"type": "string", "description": "ISO 8601"}
        },
        "required": ["name", "rank", "node", "state", "reason", "host", "port", "address"]
      }},
      "workdir": {"type": "string", "description": "where the ranks run: the remoteRoot of an IDE's path mappings"}
    },
    "required": ["ranks", "workdir"],
    "additionalProperties": false
  },
  "StacksRequested": {
    "type": "object",
    "properties": {"requested": {"type": "boolean"}},
    "required": ["requested"],
    "additionalProperties": false
  },
  "MetricList": {
    "type": "object",
    "properties": {
      "metrics": {"type": "array", "items": {"type": "object", "description": "{t (unix nanos), rank, step (if logged), and each metric: a number, or null for nan/inf}"}},
      "resources": {"type": "array", "items": {"type": "object", "description": "{t, node, attempt, ranks: [{rank, cpu_seconds, rss_bytes, gpu_util?, gpu_memory_bytes?}]}: one node's sample of its running ranks"}}
    },
    "required": ["metrics", "resources"],
    "additionalProperties": false
  },
  "RankList": {
    "type": "object",
    "properties": {"ranks": {"type": "array", "items": {"$ref": "#/components/schemas/Rank"}}},
    "required": ["ranks"],
    "additionalProperties": false
  },
  "File": {
    "type": "object",
    "properties": {"path": {"type": "string"}, "size": {"type": "integer", "description": "bytes"}},
    "required": ["path", "size"],
    "additionalProperties": false
  },
  "FileList": {
    "type": "object",
    "properties": {"files": {"type": "array", "items": {"$ref": "#/components/schemas/File"}}},
    "required": ["files"],
    "additionalProperties": false
  },
  "Upload": {
    "type": "object",
    "properties": {"uri": {"type": "string", "description": "store://bucket/path"}, "size": {"type": "integer"}},
    "required": ["uri", "size"],
    "additionalProperties": false
  },
  "CodeUpload": {
    "type": "object",
    "properties": {
      "id": {"type": "string", "description": "up-<24 hex digits>: name it as \"code\" in POST /v1/jobs within an hour"},
      "files": {"type": "integer"},
      "dirs": {"type": "integer"},
      "links": {"type": "integer"},
      "bytes": {"type": "integer", "description": "the files' sizes"}
    },
    "required": ["id", "files", "dirs", "links", "bytes"],
    "additionalProperties": false
  },
  "Bucket": {
    "type": "object",
    "properties": {
      "name": {"type": "string"},
      "owner": {"type": "string"},
      "created": {
        "type": "string",
        "format": "date-time",
        "nullable": true,
        "description": "ISO 8601 UTC, null when not yet"
      }
    },
    "required": ["name", "owner", "created"],
    "additionalProperties": false
  },
  "BucketList": {
    "type": "object",
    "properties": {"buckets": {"type": "array", "items": {"$ref": "#/components/schemas/Bucket"}}},
    "required": ["buckets"],
    "additionalProperties": false
  },
  "Share": {
    "type": "object",
    "properties": {
      "id": {"type": "integer"},
      "prefix": {"type": "string", "description": "store://bucket/prefix"},
      "owner": {"type": "string"},
      "with": {"type": "string"},
      "access": {"type": "string", "enum": ["read", "write"]},
      "created": {
        "type": "string",
        "format": "date-time",
        "nullable": true,
        "description": "ISO 8601 UTC, null when not yet"
      }
    },
    "required": ["id", "prefix", "owner", "with", "access", "created"],
    "additionalProperties": false
  },
  "ShareList": {
    "type": "object",
    "properties": {"shares": {"type": "array", "items": {"$ref": "#/components/schemas/Share"}}},
    "required": ["shares"],
    "additionalProperties": false
  },
  "Whoami": {
    "type": "object",
    "properties": {"account": {"type": "string"}, "admin": {"type": "boolean"}},
    "required": ["account", "admin"],
    "additionalProperties": false
  },
  "Account": {
    "type": "object",
    "properties": {
      "name": {"type": "string"},
      "admin": {"type": "boolean"},
      "max_gpus": {"type": "integer", "nullable": true},
      "max_cpus": {"type": "number", "nullable": true},
      "created": {
        "type": "string",
        "format": "date-time",
        "nullable": true,
        "description": "ISO 8601 UTC, null when not yet"
      }
    },
    "required": ["name", "admin", "max_gpus", "max_cpus", "created"],
    "additionalProperties": false
  },
  "AccountList": {
    "type": "object",
    "properties": {"accounts": {"type": "array", "items": {"$ref": "#/components/schemas/Account"}}},
    "required": ["accounts"],
    "additionalProperties": false
  },
  "NewAccount": {
    "type": "object",
    "properties": {
      "account": {"$ref": "#/components/schemas/Account"},
      "token": {"type": "string", "description": "the account's first token, shown once"}
    },
    "required": ["account", "token"],
    "additionalProperties": false
  },
  "Token": {
    "type": "object",
    "properties": {
      "id": {"type": "integer"},
      "account": {"type": "string"},
      "label": {"type": "string"},
      "created": {
        "type": "string",
        "format": "date-time",
        "nullable": true,
        "description": "ISO 8601 UTC, null when not yet"
      }
    },
    "required": ["id", "account", "label", "created"],
    "additionalProperties": false
  },
  "TokenList": {
    "type": "object",
    "properties": {"tokens": {"type": "array", "items": {"$ref": "#/components/schemas/Token"}}},
    "required": ["tokens"],
    "additionalProperties": false
  },
  "NewToken": {
    "type": "object",
    "properties": {
      "id": {"type": "integer"},
      "account": {"type": "string"},
      "label": {"type": "string"},
      "created": {
        "type": "string",
        "format": "date-time",
        "nullable": true,
        "description": "ISO 8601 UTC, null when not yet"
      },
      "token": {"type": "string", "description": "shown once"}
    },
    "required": ["id", "account", "label", "created", "token"],
    "additionalProperties": false
  },
  "JobFile": {
    "type": "object",
    "properties": {
      "name": {"type": "string"},
      "framework": {"type": "string", "enum": ["pytorch", "mindspore", "tensorflow", "mpi", "generic"]},
      "launcher": {"type": "string", "enum": ["direct", "torchrun", "spawn", "mpirun"]},
      "mode": {"type": "string", "enum": ["dynamic_cluster", "rank_table"]},
      "rank_table_version": {"type": "string"},
      "compat": {"type": "string", "enum": ["modelarts", "none"]},
      "task_flags": {"type": "boolean", "description": "TensorFlow: append --task_name/--task_index (default: for a ps/worker job with compat modelarts)"},
      "workdir": {"type": "string", "description": "an absolute path on the server's machine"},
      "environment": {"type": "string", "description": "the environment the ranks run in: a preset (system, pytorch, tensorflow, mindspore) or one saved on the server's machine (cohort env)"},
      "preload": {"type": "array", "items": {"type": "string"}, "description": "launcher: preload: the modules imported once per node"},
      "command": {
        "description": "a list of words, or one string split on spaces",
        "oneOf": [{"type": "array", "items": {"type": "string"}}, {"type": "string"}]
      },
      "hyperparameters": {"type": "object", "additionalProperties": true, "description": "appended as --key=value"},
      "env": {"type": "object", "additionalProperties": true},
      "roles": {
        "type": "object",
        "description": "by role name",
        "additionalProperties": {
          "type": "object",
          "nullable": true,
          "additionalProperties": false,
          "properties": {
            "nodes": {"type": "integer"},
            "procs_per_node": {"description": "a number or \"auto\""},
            "resources": {
              "type": "object",
              "properties": {
                "gpus": {"type": "integer"},
                "cpus": {"description": "a number"},
                "memory": {"description": "bytes or a size like 4Gi"}
              },
              "additionalProperties": false
            }
          }
        }
      },
      "inputs": {
        "type": "array",
        "items": {
          "type": "object",
          "properties": {
            "source": {
              "type": "string",
              "description": "store://bucket/path or an absolute path outside the server's data root"
            },
            "target": {"type": "string"},
            "mode": {"type": "string", "enum": ["copy", "link"]},
            "arg": {"type": "string"}
          },
          "required": ["source"],
          "additionalProperties": false
        }
      },
      "outputs": {
        "type": "array",
        "items": {
          "type": "object",
          "properties": {
            "source": {"type": "string"},
            "target": {"type": "string", "description": "store://bucket/path; may use {job} and {name}"},
            "when": {"type": "string", "enum": ["success", "always"]}
          },
          "required": ["source", "target"],
          "additionalProperties": false
        }
      },
      "policy": {
        "type": "object",
        "properties": {
          "success": {"type": "array", "items": {"type": "string"}},
          "max_restarts": {"type": "integer"},
          "grace_period": {"description": "a duration like 30s: stop signal to SIGKILL"},
          "max_runtime": {"description": "a duration like 2h"},
          "heartbeat_timeout": {"description": "a duration like 5s: a silent node is lost"},
          "hang_timeout": {"description": "a duration like 10m: no rank made progress"},
          "startup_timeout": {"description": "a duration like 30m: until the first progress"},
          "stop_signal": {"type": "string", "enum": ["SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "TERM", "INT", "HUP", "QUIT", "USR1", "USR2"], "default": "SIGTERM", "description": "what a graceful stop sends every rank (its notice to checkpoint), SIGKILL after grace_period"}
        },
        "additionalProperties": false
      }
    },
    "required": ["command", "workdir"],
    "additionalProperties": false,
    "description": "the job file (job.yaml) as JSON; unknown fields are refused naming the field"
  },
  "SubmitRequest": {
    "type": "object",
    "properties": {
      "job": {
        "oneOf": [
          {"$ref": "#/components/schemas/JobFile"},
          {"type": "string", "description": "the job file's text, YAML or JSON, as cohort submit reads job.yaml"}
        ]
      },
      "priority": {"type": "integer"},
      "code": {"type": "string", "description": "an upload id (POST /v1/uploads): the job runs on that snapshot, which becomes its workdir (the job file's workdir is then ignored); each upload runs one job. Without it, a workdir that is an earlier job's code/ of the same account (its spec's) runs a copy of that code"}
    },
    "required": ["job"],
    "additionalProperties": false
  },
  "ShareRequest": {
    "type": "object",
    "properties": {
      "prefix": {"type": "string", "description": "store://bucket/prefix, in a bucket the caller owns"},
      "with": {"type": "string", "description": "the account shared with"},
      "access": {"type": "string", "enum": ["read", "write"], "default": "read"}
    },
    "required": ["prefix", "with"],
    "additionalProperties": false
  },
  "AccountRequest": {
    "type": "object",
    "properties": {
      "name": {"type": "string", "pattern": "^[a-z0-9][a-z0-9_-]{0,63}$"},
      "admin": {"type": "boolean"},
      "max_gpus": {"type": "integer"},
      "max_cpus": {"type": "number"}
    },
    "required": ["name"],
    "additionalProperties": false
  },
  "TokenRequest": {
    "type": "object",
    "properties": {
      "label": {"type": "string", "maxLength": 256, "description": "at most 256 bytes"},
      "account": {"type": "string", "description": "admin only: make the token for this account"}
    },
    "additionalProperties": false
  }
}
)json";

Json document() {
  Json paths = {
      {"/v1/openapi.json",
       {{"get", withoutToken(operation("This document (no token needed)", "getOpenApi", 200,
                                       "the OpenAPI document",
                                       content("application/json", {{"type", "object"}}), {}))}}},
      {"/metrics",
       {{"get", withoutToken(operation("Prometheus metrics (no token needed)", "getMetrics", 200,
                                       "Prometheus text format 0.0.4", content("text/plain", kText),
                                       {500}))}}},
      {"/v1/metrics",
       {{"get", operation("Per-job Prometheus gauges: every running or lately ended job and its "
                          "ranks' latest samples (admin)",
                          "getJobMetrics", 200, "Prometheus text format 0.0.4",
                          content("text/plain", kText), {401, 403, 500})}}},
  };
  for (const Json& part : {jobPaths(), storePaths(), accountPaths(), environmentPaths()}) {
    paths.update(part);
  }
  Json schemas = Json::parse(kSchemas);
  schemas.update(Json::parse(kEnvironmentSchemas));

  Json responses = Json::object();
  for (const ErrorAnswer& e : kErrors) {
    responses[e.name] = {{"description", e.description}, {"content", json("Error")}};
  }
  return {
      {"openapi", "3.0.3"},
      {"info",
       {{"title", "cohort server API"},
        {"version", "1"},
        {"description",
         "The cohort job server's JSON API (docs/server-api.md). Errors always "
         "answer {\"error\": {\"code\", \"message\"}}."}}},
      {"servers", {{{"url", "/"}}}},
      {"security", {{{"bearerAuth", Json::array()}}}},
      {"paths", std::move(paths)},
      {"components",
       {{"securitySchemes",
         {{"bearerAuth",
           {{"type", "http"},
            {"scheme", "bearer"},
            {"description",
             "a token from cohort server's first start, POST /v1/accounts or "
             "POST /v1/tokens"}}}}},
        {"schemas", std::move(schemas)},
        {"responses", std::move(responses)}}},
  };
}

}  // namespace

const std::string& openApiDocument() {
  static const std::string doc = document().dump(2);
  return doc;
}

}  // namespace cohort::server
