// The OpenAPI 3.0.3 document of the server's API (docs/server-api.md), served at
// GET /v1/openapi.json. It must describe every route Server::routes() lists, and the response
// schemas must match what server.cc sends: src/server/server_test.cc checks the first, and
// tests/integration/server_test.cc validates real answers against the schemas.
#include "server/server.h"

namespace cohort::server {

const std::string& openApiDocument() {
  static const std::string doc = R"openapi({
  "openapi": "3.0.3",
  "info": {
    "title": "cohort server API",
    "version": "1",
    "description": "The cohort job server's JSON API (docs/server-api.md). Errors always answer {\"error\": {\"code\", \"message\"}}."
  },
  "servers": [
    {
      "url": "/"
    }
  ],
  "security": [
    {
      "bearerAuth": []
    }
  ],
  "paths": {
    "/v1/openapi.json": {
      "get": {
        "summary": "This document (no token needed)",
        "operationId": "getOpenApi",
        "responses": {
          "200": {
            "description": "the OpenAPI document",
            "content": {
              "application/json": {
                "schema": {
                  "type": "object"
                }
              }
            }
          }
        },
        "security": []
      }
    },
    "/metrics": {
      "get": {
        "summary": "Prometheus metrics (no token needed)",
        "operationId": "getMetrics",
        "responses": {
          "200": {
            "description": "Prometheus text format 0.0.4",
            "content": {
              "text/plain": {
                "schema": {
                  "type": "string"
                }
              }
            }
          },
          "500": {
            "$ref": "#/components/responses/Internal"
          }
        },
        "security": []
      }
    },
    "/v1/jobs": {
      "post": {
        "summary": "Submit a job",
        "operationId": "submitJob",
        "requestBody": {
          "required": true,
          "content": {
            "application/json": {
              "schema": {
                "$ref": "#/components/schemas/SubmitRequest"
              }
            }
          }
        },
        "responses": {
          "201": {
            "description": "the job, queued",
            "content": {
              "application/json": {
                "schema": {
                  "$ref": "#/components/schemas/Job"
                }
              }
            }
          },
          "400": {
            "$ref": "#/components/responses/BadRequest"
          },
          "401": {
            "$ref": "#/components/responses/Unauthenticated"
          },
          "403": {
            "$ref": "#/components/responses/Forbidden"
          },
          "404": {
            "$ref": "#/components/responses/NotFound"
          },
          "413": {
            "$ref": "#/components/responses/TooLarge"
          },
          "500": {
            "$ref": "#/components/responses/Internal"
          }
        }
      },
      "get": {
        "summary": "The caller's jobs (an admin's: every account's), newest first",
        "operationId": "listJobs",
        "parameters": [
          {
            "name": "state",
            "in": "query",
            "required": false,
            "style": "form",
            "explode": true,
            "description": "only jobs in these states (repeatable, or a comma list)",
            "schema": {
              "type": "array",
              "items": {
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
              }
            }
          },
          {
            "name": "limit",
            "in": "query",
            "required": false,
            "description": "at most this many (default 1000)",
            "schema": {
              "type": "integer",
              "minimum": 1,
              "default": 1000
            }
          }
        ],
        "responses": {
          "200": {
            "description": "the jobs",
            "content": {
              "application/json": {
                "schema": {
                  "$ref": "#/components/schemas/JobList"
                }
              }
            }
          },
          "400": {
            "$ref": "#/components/responses/BadRequest"
          },
          "401": {
            "$ref": "#/components/responses/Unauthenticated"
          },
          "500": {
            "$ref": "#/components/responses/Internal"
          }
        }
      }
    },
    "/v1/jobs/{id}": {
      "parameters": [
        {
          "name": "id",
          "in": "path",
          "required": true,
          "description": "the job id",
          "schema": {
            "type": "string"
          }
        }
      ],
      "get": {
        "summary": "A job's record",
        "operationId": "getJob",
        "responses": {
          "200": {
            "description": "the job",
            "content": {
              "application/json": {
                "schema": {
                  "$ref": "#/components/schemas/Job"
                }
              }
            }
          },
          "401": {
            "$ref": "#/components/responses/Unauthenticated"
          },
          "404": {
            "$ref": "#/components/responses/NotFound"
          },
          "500": {
            "$ref": "#/components/responses/Internal"
          }
        }
      },
      "delete": {
        "summary": "Remove a finished job: its record, events, logs and outputs",
        "operationId": "deleteJob",
        "responses": {
          "204": {
            "description": "removed"
          },
          "401": {
            "$ref": "#/components/responses/Unauthenticated"
          },
          "404": {
            "$ref": "#/components/responses/NotFound"
          },
          "409": {
            "$ref": "#/components/responses/Conflict"
          },
          "500": {
            "$ref": "#/components/responses/Internal"
          }
        }
      }
    },
    "/v1/jobs/{id}/events": {
      "parameters": [
        {
          "name": "id",
          "in": "path",
          "required": true,
          "description": "the job id",
          "schema": {
            "type": "string"
          }
        }
      ],
      "get": {
        "summary": "A job's events, in order",
        "operationId": "getJobEvents",
        "responses": {
          "200": {
            "description": "the events",
            "content": {
              "application/json": {
                "schema": {
                  "$ref": "#/components/schemas/EventList"
                }
              }
            }
          },
          "401": {
            "$ref": "#/components/responses/Unauthenticated"
          },
          "404": {
            "$ref": "#/components/responses/NotFound"
          },
          "500": {
            "$ref": "#/components/responses/Internal"
          }
        }
      }
    },
    "/v1/jobs/{id}/ranks": {
      "parameters": [
        {
          "name": "id",
          "in": "path",
          "required": true,
          "description": "the job id",
          "schema": {
            "type": "string"
          }
        }
      ],
      "get": {
        "summary": "A job's processes (empty before it starts)",
        "operationId": "getJobRanks",
        "responses": {
          "200": {
            "description": "the ranks",
            "content": {
              "application/json": {
                "schema": {
                  "$ref": "#/components/schemas/RankList"
                }
              }
            }
          },
          "401": {
            "$ref": "#/components/responses/Unauthenticated"
          },
          "404": {
            "$ref": "#/components/responses/NotFound"
          },
          "500": {
            "$ref": "#/components/responses/Internal"
          }
        }
      }
    },
    "/v1/jobs/{id}/logs": {
      "parameters": [
        {
          "name": "id",
          "in": "path",
          "required": true,
          "description": "the job id",
          "schema": {
            "type": "string"
          }
        }
      ],
      "get": {
        "summary": "A job's log: the merged console (lines prefixed [role/rank node]) or one rank's",
        "operationId": "getJobLogs",
        "parameters": [
          {
            "name": "rank",
            "in": "query",
            "required": false,
            "description": "that rank's log",
            "schema": {
              "type": "integer",
              "minimum": 0
            }
          },
          {
            "name": "offset",
            "in": "query",
            "required": false,
            "description": "bytes to skip",
            "schema": {
              "type": "integer",
              "minimum": 0
            }
          },
          {
            "name": "follow",
            "in": "query",
            "required": false,
            "description": "1: stream new lines until the job ends",
            "schema": {
              "type": "string",
              "enum": [
                "0",
                "1",
                "true",
                "false"
              ]
            }
          }
        ],
        "responses": {
          "200": {
            "description": "the log text; chunked, and streamed until the job ends with follow=1",
            "content": {
              "text/plain": {
                "schema": {
                  "type": "string"
                }
              }
            }
          },
          "400": {
            "$ref": "#/components/responses/BadRequest"
          },
          "401": {
            "$ref": "#/components/responses/Unauthenticated"
          },
          "404": {
            "$ref": "#/components/responses/NotFound"
          },
          "500": {
            "$ref": "#/components/responses/Internal"
          }
        }
      }
    },
    "/v1/jobs/{id}/stop": {
      "parameters": [
        {
          "name": "id",
          "in": "path",
          "required": true,
          "description": "the job id",
          "schema": {
            "type": "string"
          }
        }
      ],
      "post": {
        "summary": "Stop a job: a queued one is stopped at once, a running one goes stopping",
        "operationId": "stopJob",
        "responses": {
          "202": {
            "description": "the job",
            "content": {
              "application/json": {
                "schema": {
                  "$ref": "#/components/schemas/Job"
                }
              }
            }
          },
          "401": {
            "$ref": "#/components/responses/Unauthenticated"
          },
          "404": {
            "$ref": "#/components/responses/NotFound"
          },
          "500": {
            "$ref": "#/components/responses/Internal"
          }
        }
      }
    },
    "/v1/jobs/{id}/outputs": {
      "parameters": [
        {
          "name": "id",
          "in": "path",
          "required": true,
          "description": "the job id",
          "schema": {
            "type": "string"
          }
        }
      ],
      "get": {
        "summary": "The files in the job's output/ directory, recursively, sorted",
        "operationId": "listJobOutputs",
        "responses": {
          "200": {
            "description": "the files",
            "content": {
              "application/json": {
                "schema": {
                  "$ref": "#/components/schemas/FileList"
                }
              }
            }
          },
          "401": {
            "$ref": "#/components/responses/Unauthenticated"
          },
          "404": {
            "$ref": "#/components/responses/NotFound"
          },
          "500": {
            "$ref": "#/components/responses/Internal"
          }
        }
      }
    },
    "/v1/jobs/{id}/outputs/{path}": {
      "parameters": [
        {
          "name": "id",
          "in": "path",
          "required": true,
          "description": "the job id",
          "schema": {
            "type": "string"
          }
        },
        {
          "name": "path",
          "in": "path",
          "required": true,
          "schema": {
            "type": "string"
          },
          "description": "relative to output/; may contain '/'; '..', absolute paths and links leaving output/ are refused"
        }
      ],
      "get": {
        "summary": "One output file's bytes",
        "operationId": "getJobOutput",
        "responses": {
          "200": {
            "description": "the file",
            "content": {
              "application/octet-stream": {
                "schema": {
                  "type": "string",
                  "format": "binary"
                }
              }
            }
          },
          "400": {
            "$ref": "#/components/responses/BadRequest"
          },
          "401": {
            "$ref": "#/components/responses/Unauthenticated"
          },
          "404": {
            "$ref": "#/components/responses/NotFound"
          },
          "500": {
            "$ref": "#/components/responses/Internal"
          }
        }
      }
    },
    "/v1/store/{bucket}/{path}": {
      "parameters": [
        {
          "name": "bucket",
          "in": "path",
          "required": true,
          "description": "the bucket",
          "schema": {
            "type": "string"
          }
        },
        {
          "name": "path",
          "in": "path",
          "required": true,
          "schema": {
            "type": "string"
          },
          "description": "a path inside the bucket; may contain '/' and may be empty (the bucket's top); '..' is refused"
        }
      ],
      "get": {
        "summary": "A store file's bytes, or a directory's listing",
        "operationId": "getStoreObject",
        "parameters": [
          {
            "name": "list",
            "in": "query",
            "required": false,
            "description": "1: list, never a file's bytes",
            "schema": {
              "type": "string",
              "enum": [
                "1"
              ]
            }
          }
        ],
        "responses": {
          "200": {
            "description": "the file's bytes; for a directory (or with list=1) its files, relative to it",
            "content": {
              "application/octet-stream": {
                "schema": {
                  "type": "string",
                  "format": "binary"
                }
              },
              "application/json": {
                "schema": {
                  "$ref": "#/components/schemas/FileList"
                }
              }
            }
          },
          "400": {
            "$ref": "#/components/responses/BadRequest"
          },
          "401": {
            "$ref": "#/components/responses/Unauthenticated"
          },
          "404": {
            "$ref": "#/components/responses/NotFound"
          },
          "500": {
            "$ref": "#/components/responses/Internal"
          }
        }
      },
      "put": {
        "summary": "Upload the body as this file (claims a bucket nobody owns)",
        "operationId": "putStoreObject",
        "requestBody": {
          "required": true,
          "content": {
            "application/octet-stream": {
              "schema": {
                "type": "string",
                "format": "binary"
              }
            }
          }
        },
        "responses": {
          "201": {
            "description": "stored",
            "content": {
              "application/json": {
                "schema": {
                  "$ref": "#/components/schemas/Upload"
                }
              }
            }
          },
          "400": {
            "$ref": "#/components/responses/BadRequest"
          },
          "401": {
            "$ref": "#/components/responses/Unauthenticated"
          },
          "403": {
            "$ref": "#/components/responses/Forbidden"
          },
          "404": {
            "$ref": "#/components/responses/NotFound"
          },
          "409": {
            "$ref": "#/components/responses/Conflict"
          },
          "413": {
            "$ref": "#/components/responses/TooLarge"
          },
          "500": {
            "$ref": "#/components/responses/Internal"
          }
        }
      }
    },
    "/v1/buckets": {
      "get": {
        "summary": "The caller's own buckets",
        "operationId": "listBuckets",
        "responses": {
          "200": {
            "description": "the buckets",
            "content": {
              "application/json": {
                "schema": {
                  "$ref": "#/components/schemas/BucketList"
                }
              }
            }
          },
          "401": {
            "$ref": "#/components/responses/Unauthenticated"
          },
          "500": {
            "$ref": "#/components/responses/Internal"
          }
        }
      }
    },
    "/v1/shares": {
      "post": {
        "summary": "Share a prefix of one of the caller's buckets",
        "operationId": "createShare",
        "requestBody": {
          "required": true,
          "content": {
            "application/json": {
              "schema": {
                "$ref": "#/components/schemas/ShareRequest"
              }
            }
          }
        },
        "responses": {
          "201": {
            "description": "the share",
            "content": {
              "application/json": {
                "schema": {
                  "$ref": "#/components/schemas/Share"
                }
              }
            }
          },
          "400": {
            "$ref": "#/components/responses/BadRequest"
          },
          "401": {
            "$ref": "#/components/responses/Unauthenticated"
          },
          "404": {
            "$ref": "#/components/responses/NotFound"
          },
          "413": {
            "$ref": "#/components/responses/TooLarge"
          },
          "500": {
            "$ref": "#/components/responses/Internal"
          }
        }
      },
      "get": {
        "summary": "Shares the caller granted and those granted to it",
        "operationId": "listShares",
        "responses": {
          "200": {
            "description": "the shares",
            "content": {
              "application/json": {
                "schema": {
                  "$ref": "#/components/schemas/ShareList"
                }
              }
            }
          },
          "401": {
            "$ref": "#/components/responses/Unauthenticated"
          },
          "500": {
            "$ref": "#/components/responses/Internal"
          }
        }
      }
    },
    "/v1/shares/{id}": {
      "parameters": [
        {
          "name": "id",
          "in": "path",
          "required": true,
          "description": "the share id",
          "schema": {
            "type": "integer"
          }
        }
      ],
      "delete": {
        "summary": "Revoke a share (its owner or an admin); works at once",
        "operationId": "deleteShare",
        "responses": {
          "204": {
            "description": "revoked"
          },
          "401": {
            "$ref": "#/components/responses/Unauthenticated"
          },
          "403": {
            "$ref": "#/components/responses/Forbidden"
          },
          "404": {
            "$ref": "#/components/responses/NotFound"
          },
          "500": {
            "$ref": "#/components/responses/Internal"
          }
        }
      }
    },
    "/v1/whoami": {
      "get": {
        "summary": "The caller's account",
        "operationId": "whoami",
        "responses": {
          "200": {
            "description": "the caller",
            "content": {
              "application/json": {
                "schema": {
                  "$ref": "#/components/schemas/Whoami"
                }
              }
            }
          },
          "401": {
            "$ref": "#/components/responses/Unauthenticated"
          },
          "500": {
            "$ref": "#/components/responses/Internal"
          }
        }
      }
    },
    "/v1/accounts": {
      "post": {
        "summary": "Create an account and its first token (admin)",
        "operationId": "createAccount",
        "requestBody": {
          "required": true,
          "content": {
            "application/json": {
              "schema": {
                "$ref": "#/components/schemas/AccountRequest"
              }
            }
          }
        },
        "responses": {
          "201": {
            "description": "the account and its token",
            "content": {
              "application/json": {
                "schema": {
                  "$ref": "#/components/schemas/NewAccount"
                }
              }
            }
          },
          "400": {
            "$ref": "#/components/responses/BadRequest"
          },
          "401": {
            "$ref": "#/components/responses/Unauthenticated"
          },
          "403": {
            "$ref": "#/components/responses/Forbidden"
          },
          "409": {
            "$ref": "#/components/responses/Conflict"
          },
          "413": {
            "$ref": "#/components/responses/TooLarge"
          },
          "500": {
            "$ref": "#/components/responses/Internal"
          }
        }
      },
      "get": {
        "summary": "Every account (admin)",
        "operationId": "listAccounts",
        "responses": {
          "200": {
            "description": "the accounts",
            "content": {
              "application/json": {
                "schema": {
                  "$ref": "#/components/schemas/AccountList"
                }
              }
            }
          },
          "401": {
            "$ref": "#/components/responses/Unauthenticated"
          },
          "403": {
            "$ref": "#/components/responses/Forbidden"
          },
          "500": {
            "$ref": "#/components/responses/Internal"
          }
        }
      }
    },
    "/v1/tokens": {
      "get": {
        "summary": "The caller's tokens (an admin's: all)",
        "operationId": "listTokens",
        "responses": {
          "200": {
            "description": "the tokens",
            "content": {
              "application/json": {
                "schema": {
                  "$ref": "#/components/schemas/TokenList"
                }
              }
            }
          },
          "401": {
            "$ref": "#/components/responses/Unauthenticated"
          },
          "500": {
            "$ref": "#/components/responses/Internal"
          }
        }
      },
      "post": {
        "summary": "Make a token; it is shown only in this answer",
        "operationId": "createToken",
        "requestBody": {
          "required": true,
          "content": {
            "application/json": {
              "schema": {
                "$ref": "#/components/schemas/TokenRequest"
              }
            }
          }
        },
        "responses": {
          "201": {
            "description": "the token",
            "content": {
              "application/json": {
                "schema": {
                  "$ref": "#/components/schemas/NewToken"
                }
              }
            }
          },
          "400": {
            "$ref": "#/components/responses/BadRequest"
          },
          "401": {
            "$ref": "#/components/responses/Unauthenticated"
          },
          "403": {
            "$ref": "#/components/responses/Forbidden"
          },
          "404": {
            "$ref": "#/components/responses/NotFound"
          },
          "413": {
            "$ref": "#/components/responses/TooLarge"
          },
          "500": {
            "$ref": "#/components/responses/Internal"
          }
        }
      }
    },
    "/v1/tokens/{id}": {
      "parameters": [
        {
          "name": "id",
          "in": "path",
          "required": true,
          "description": "the token id",
          "schema": {
            "type": "integer"
          }
        }
      ],
      "delete": {
        "summary": "Revoke a token; works at once",
        "operationId": "deleteToken",
        "responses": {
          "204": {
            "description": "revoked"
          },
          "401": {
            "$ref": "#/components/responses/Unauthenticated"
          },
          "404": {
            "$ref": "#/components/responses/NotFound"
          },
          "500": {
            "$ref": "#/components/responses/Internal"
          }
        }
      }
    }
  },
  "components": {
    "securitySchemes": {
      "bearerAuth": {
        "type": "http",
        "scheme": "bearer",
        "description": "a token from cohort server's first start, POST /v1/accounts or POST /v1/tokens"
      }
    },
    "schemas": {
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
              "message": {
                "type": "string"
              }
            },
            "required": [
              "code",
              "message"
            ],
            "additionalProperties": false
          }
        },
        "required": [
          "error"
        ],
        "additionalProperties": false
      },
      "Resources": {
        "type": "object",
        "properties": {
          "cpus": {
            "type": "number",
            "description": "CPUs, may be fractional"
          },
          "gpus": {
            "type": "integer"
          },
          "memory": {
            "type": "integer",
            "description": "bytes; 0: not limited"
          }
        },
        "required": [
          "cpus",
          "gpus",
          "memory"
        ],
        "additionalProperties": false
      },
      "Waiting": {
        "type": "object",
        "properties": {
          "kind": {
            "type": "string",
            "enum": [
              "resources",
              "reserved",
              "would_delay",
              "quota",
              "never_fits"
            ]
          },
          "reason": {
            "type": "string"
          }
        },
        "required": [
          "kind",
          "reason"
        ],
        "additionalProperties": false,
        "description": "why a queued job waits (null unless queued)"
      },
      "RootCause": {
        "type": "object",
        "properties": {
          "name": {
            "type": "string"
          },
          "role": {
            "type": "string"
          },
          "rank": {
            "type": "integer"
          },
          "node": {
            "type": "integer"
          },
          "exit_code": {
            "type": "integer"
          },
          "signal": {
            "type": "integer"
          },
          "tail": {
            "type": "array",
            "items": {
              "type": "string"
            }
          },
          "hint": {
            "type": "string"
          }
        },
        "required": [
          "name",
          "role",
          "rank",
          "node",
          "exit_code",
          "signal",
          "tail",
          "hint"
        ],
        "additionalProperties": false,
        "description": "the rank whose failure ended the job"
      },
      "Job": {
        "type": "object",
        "properties": {
          "id": {
            "type": "string"
          },
          "name": {
            "type": "string"
          },
          "account": {
            "type": "string"
          },
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
          "priority": {
            "type": "integer"
          },
          "framework": {
            "type": "string"
          },
          "ranks": {
            "type": "integer",
            "description": "the number of processes (WORLD_SIZE)"
          },
          "resources": {
            "$ref": "#/components/schemas/Resources"
          },
          "submitted": {
            "type": "string",
            "format": "date-time",
            "description": "ISO 8601 UTC"
          },
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
          "exit_code": {
            "type": "integer",
            "nullable": true
          },
          "reason": {
            "type": "string"
          },
          "waiting": {
            "nullable": true,
            "allOf": [
              {
                "$ref": "#/components/schemas/Waiting"
              }
            ]
          },
          "attempts": {
            "type": "integer"
          },
          "root_cause": {
            "nullable": true,
            "allOf": [
              {
                "$ref": "#/components/schemas/RootCause"
              }
            ]
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
        "properties": {
          "jobs": {
            "type": "array",
            "items": {
              "$ref": "#/components/schemas/Job"
            }
          }
        },
        "required": [
          "jobs"
        ],
        "additionalProperties": false
      },
      "Event": {
        "type": "object",
        "required": [
          "time",
          "event"
        ],
        "additionalProperties": true,
        "properties": {
          "time": {
            "type": "string",
            "format": "date-time",
            "description": "ISO 8601 UTC"
          },
          "event": {
            "type": "string",
            "description": "submitted, state, staged, rank_exit, output, ..."
          }
        },
        "description": "one event of a job; fields beyond time and event depend on the event"
      },
      "EventList": {
        "type": "object",
        "properties": {
          "events": {
            "type": "array",
            "items": {
              "$ref": "#/components/schemas/Event"
            }
          }
        },
        "required": [
          "events"
        ],
        "additionalProperties": false
      },
      "Rank": {
        "type": "object",
        "properties": {
          "name": {
            "type": "string",
            "description": "role/role_rank"
          },
          "role": {
            "type": "string"
          },
          "role_rank": {
            "type": "integer"
          },
          "rank": {
            "type": "integer"
          },
          "node": {
            "type": "integer"
          },
          "state": {
            "type": "string",
            "enum": [
              "pending",
              "running",
              "exited"
            ]
          },
          "exit_code": {
            "type": "integer",
            "nullable": true
          },
          "signal": {
            "type": "integer"
          },
          "by_cohort": {
            "type": "boolean",
            "description": "cohort ended it (stop, a failure elsewhere)"
          }
        },
        "required": [
          "name",
          "role",
          "role_rank",
          "rank",
          "node",
          "state",
          "exit_code",
          "signal",
          "by_cohort"
        ],
        "additionalProperties": false
      },
      "RankList": {
        "type": "object",
        "properties": {
          "ranks": {
            "type": "array",
            "items": {
              "$ref": "#/components/schemas/Rank"
            }
          }
        },
        "required": [
          "ranks"
        ],
        "additionalProperties": false
      },
      "File": {
        "type": "object",
        "properties": {
          "path": {
            "type": "string"
          },
          "size": {
            "type": "integer",
            "description": "bytes"
          }
        },
        "required": [
          "path",
          "size"
        ],
        "additionalProperties": false
      },
      "FileList": {
        "type": "object",
        "properties": {
          "files": {
            "type": "array",
            "items": {
              "$ref": "#/components/schemas/File"
            }
          }
        },
        "required": [
          "files"
        ],
        "additionalProperties": false
      },
      "Upload": {
        "type": "object",
        "properties": {
          "uri": {
            "type": "string",
            "description": "store://bucket/path"
          },
          "size": {
            "type": "integer"
          }
        },
        "required": [
          "uri",
          "size"
        ],
        "additionalProperties": false
      },
      "Bucket": {
        "type": "object",
        "properties": {
          "name": {
            "type": "string"
          },
          "owner": {
            "type": "string"
          },
          "created": {
            "type": "string",
            "format": "date-time",
            "nullable": true,
            "description": "ISO 8601 UTC, null when not yet"
          }
        },
        "required": [
          "name",
          "owner",
          "created"
        ],
        "additionalProperties": false
      },
      "BucketList": {
        "type": "object",
        "properties": {
          "buckets": {
            "type": "array",
            "items": {
              "$ref": "#/components/schemas/Bucket"
            }
          }
        },
        "required": [
          "buckets"
        ],
        "additionalProperties": false
      },
      "Share": {
        "type": "object",
        "properties": {
          "id": {
            "type": "integer"
          },
          "prefix": {
            "type": "string",
            "description": "store://bucket/prefix"
          },
          "owner": {
            "type": "string"
          },
          "with": {
            "type": "string"
          },
          "access": {
            "type": "string",
            "enum": [
              "read",
              "write"
            ]
          },
          "created": {
            "type": "string",
            "format": "date-time",
            "nullable": true,
            "description": "ISO 8601 UTC, null when not yet"
          }
        },
        "required": [
          "id",
          "prefix",
          "owner",
          "with",
          "access",
          "created"
        ],
        "additionalProperties": false
      },
      "ShareList": {
        "type": "object",
        "properties": {
          "shares": {
            "type": "array",
            "items": {
              "$ref": "#/components/schemas/Share"
            }
          }
        },
        "required": [
          "shares"
        ],
        "additionalProperties": false
      },
      "Whoami": {
        "type": "object",
        "properties": {
          "account": {
            "type": "string"
          },
          "admin": {
            "type": "boolean"
          }
        },
        "required": [
          "account",
          "admin"
        ],
        "additionalProperties": false
      },
      "Account": {
        "type": "object",
        "properties": {
          "name": {
            "type": "string"
          },
          "admin": {
            "type": "boolean"
          },
          "max_gpus": {
            "type": "integer",
            "nullable": true
          },
          "max_cpus": {
            "type": "number",
            "nullable": true
          },
          "created": {
            "type": "string",
            "format": "date-time",
            "nullable": true,
            "description": "ISO 8601 UTC, null when not yet"
          }
        },
        "required": [
          "name",
          "admin",
          "max_gpus",
          "max_cpus",
          "created"
        ],
        "additionalProperties": false
      },
      "AccountList": {
        "type": "object",
        "properties": {
          "accounts": {
            "type": "array",
            "items": {
              "$ref": "#/components/schemas/Account"
            }
          }
        },
        "required": [
          "accounts"
        ],
        "additionalProperties": false
      },
      "NewAccount": {
        "type": "object",
        "properties": {
          "account": {
            "$ref": "#/components/schemas/Account"
          },
          "token": {
            "type": "string",
            "description": "the account's first token, shown once"
          }
        },
        "required": [
          "account",
          "token"
        ],
        "additionalProperties": false
      },
      "Token": {
        "type": "object",
        "properties": {
          "id": {
            "type": "integer"
          },
          "account": {
            "type": "string"
          },
          "label": {
            "type": "string"
          },
          "created": {
            "type": "string",
            "format": "date-time",
            "nullable": true,
            "description": "ISO 8601 UTC, null when not yet"
          }
        },
        "required": [
          "id",
          "account",
          "label",
          "created"
        ],
        "additionalProperties": false
      },
      "TokenList": {
        "type": "object",
        "properties": {
          "tokens": {
            "type": "array",
            "items": {
              "$ref": "#/components/schemas/Token"
            }
          }
        },
        "required": [
          "tokens"
        ],
        "additionalProperties": false
      },
      "NewToken": {
        "type": "object",
        "properties": {
          "id": {
            "type": "integer"
          },
          "account": {
            "type": "string"
          },
          "label": {
            "type": "string"
          },
          "created": {
            "type": "string",
            "format": "date-time",
            "nullable": true,
            "description": "ISO 8601 UTC, null when not yet"
          },
          "token": {
            "type": "string",
            "description": "shown once"
          }
        },
        "required": [
          "id",
          "account",
          "label",
          "created",
          "token"
        ],
        "additionalProperties": false
      },
      "JobFile": {
        "type": "object",
        "properties": {
          "name": {
            "type": "string"
          },
          "framework": {
            "type": "string",
            "enum": [
              "pytorch",
              "mindspore",
              "tensorflow",
              "mpi",
              "generic"
            ]
          },
          "launcher": {
            "type": "string",
            "enum": [
              "direct",
              "torchrun",
              "spawn",
              "mpirun"
            ]
          },
          "mode": {
            "type": "string",
            "enum": [
              "dynamic_cluster",
              "rank_table"
            ]
          },
          "rank_table_version": {
            "type": "string"
          },
          "compat": {
            "type": "string",
            "enum": [
              "modelarts",
              "none"
            ]
          },
          "workdir": {
            "type": "string",
            "description": "an absolute path on the server's machine"
          },
          "command": {
            "description": "a list of words, or one string split on spaces",
            "oneOf": [
              {
                "type": "array",
                "items": {
                  "type": "string"
                }
              },
              {
                "type": "string"
              }
            ]
          },
          "hyperparameters": {
            "type": "object",
            "additionalProperties": true,
            "description": "appended as --key=value"
          },
          "env": {
            "type": "object",
            "additionalProperties": true
          },
          "roles": {
            "type": "object",
            "description": "by role name",
            "additionalProperties": {
              "type": "object",
              "nullable": true,
              "additionalProperties": false,
              "properties": {
                "nodes": {
                  "type": "integer"
                },
                "procs_per_node": {
                  "description": "a number or \"auto\""
                },
                "resources": {
                  "type": "object",
                  "properties": {
                    "gpus": {
                      "type": "integer"
                    },
                    "cpus": {
                      "description": "a number"
                    },
                    "memory": {
                      "description": "bytes or a size like 4Gi"
                    }
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
                "target": {
                  "type": "string"
                },
                "mode": {
                  "type": "string",
                  "enum": [
                    "copy",
                    "link"
                  ]
                },
                "arg": {
                  "type": "string"
                }
              },
              "required": [
                "source"
              ],
              "additionalProperties": false
            }
          },
          "outputs": {
            "type": "array",
            "items": {
              "type": "object",
              "properties": {
                "source": {
                  "type": "string"
                },
                "target": {
                  "type": "string",
                  "description": "store://bucket/path; may use {job} and {name}"
                },
                "when": {
                  "type": "string",
                  "enum": [
                    "success",
                    "always"
                  ]
                }
              },
              "required": [
                "source",
                "target"
              ],
              "additionalProperties": false
            }
          },
          "policy": {
            "type": "object",
            "properties": {
              "success": {
                "type": "array",
                "items": {
                  "type": "string"
                }
              },
              "max_restarts": {
                "type": "integer"
              },
              "grace_period": {
                "description": "a duration like 30s"
              },
              "max_runtime": {
                "description": "a duration like 2h"
              }
            },
            "additionalProperties": false
          }
        },
        "required": [
          "command",
          "workdir"
        ],
        "additionalProperties": false,
        "description": "the job file (job.yaml) as JSON; unknown fields are refused naming the field"
      },
      "SubmitRequest": {
        "type": "object",
        "properties": {
          "job": {
            "$ref": "#/components/schemas/JobFile"
          },
          "priority": {
            "type": "integer"
          }
        },
        "required": [
          "job"
        ],
        "additionalProperties": false
      },
      "ShareRequest": {
        "type": "object",
        "properties": {
          "prefix": {
            "type": "string",
            "description": "store://bucket/prefix, in a bucket the caller owns"
          },
          "with": {
            "type": "string",
            "description": "the account shared with"
          },
          "access": {
            "type": "string",
            "enum": [
              "read",
              "write"
            ],
            "default": "read"
          }
        },
        "required": [
          "prefix",
          "with"
        ],
        "additionalProperties": false
      },
      "AccountRequest": {
        "type": "object",
        "properties": {
          "name": {
            "type": "string",
            "pattern": "^[a-z0-9][a-z0-9_-]{0,63}$"
          },
          "admin": {
            "type": "boolean"
          },
          "max_gpus": {
            "type": "integer"
          },
          "max_cpus": {
            "type": "number"
          }
        },
        "required": [
          "name"
        ],
        "additionalProperties": false
      },
      "TokenRequest": {
        "type": "object",
        "properties": {
          "label": {
            "type": "string"
          },
          "account": {
            "type": "string",
            "description": "admin only: make the token for this account"
          }
        },
        "additionalProperties": false
      }
    },
    "responses": {
      "BadRequest": {
        "description": "invalid_argument: malformed JSON, an unknown or bad field (the message names it), a bad parameter",
        "content": {
          "application/json": {
            "schema": {
              "$ref": "#/components/schemas/Error"
            }
          }
        }
      },
      "Unauthenticated": {
        "description": "unauthenticated: no token, or one that does not exist (any more)",
        "content": {
          "application/json": {
            "schema": {
              "$ref": "#/components/schemas/Error"
            }
          }
        }
      },
      "Forbidden": {
        "description": "permission_denied: not allowed to this account",
        "content": {
          "application/json": {
            "schema": {
              "$ref": "#/components/schemas/Error"
            }
          }
        }
      },
      "NotFound": {
        "description": "not_found: no such thing, or one that belongs to another account",
        "content": {
          "application/json": {
            "schema": {
              "$ref": "#/components/schemas/Error"
            }
          }
        }
      },
      "Conflict": {
        "description": "already_exists or failed_precondition",
        "content": {
          "application/json": {
            "schema": {
              "$ref": "#/components/schemas/Error"
            }
          }
        }
      },
      "TooLarge": {
        "description": "too_large: the body is over the limit (4 MiB; store uploads 1 GiB)",
        "content": {
          "application/json": {
            "schema": {
              "$ref": "#/components/schemas/Error"
            }
          }
        }
      },
      "Internal": {
        "description": "internal: a bug in cohort (the message says what)",
        "content": {
          "application/json": {
            "schema": {
              "$ref": "#/components/schemas/Error"
            }
          }
        }
      }
    }
  }
})openapi";
  return doc;
}

}  // namespace cohort::server
