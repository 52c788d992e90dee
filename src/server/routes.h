// RouteTable: the server's routes as one declared table: method, path pattern, who may call
// the route and what body it takes, and its handler. The HTTP layer asks the table twice: once
// with a request's headers (which route, so whom to authenticate and how much body to accept,
// before any of the body is read) and once to run the handler.
//
// A pattern is literal segments and captures: `/v1/jobs/{id}/logs`. `{name}` matches one
// non-empty segment; `{name+}` the rest of the path, slashes included, at least one byte;
// `{name*}` the same or nothing, and then the slash before it may be left out too
// (`/v1/store/{bucket}/{path*}` matches `/v1/store/b`). A rest capture may be followed by
// literal segments (`/v1/environments/{name+}/log`). Matching is one pass over the path, with
// no regular expression and no recursion: its cost is linear in the path's length whatever the
// path holds. Routes are tried in the order they were added; the first that matches wins.
//
// Thread-safety: add() before the server starts; match() and routes() from any thread after.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace cohort::server {

// Who may call a route.
enum class Who {
  kAnyone,   // no token (the OpenAPI document, /metrics)
  kAccount,  // an account's token
  kAdmin,    // an admin account's token
  kJob,      // the job's own report token (its coordinator)
  kLab,      // an account's token, or the lab cookie of the session the path names
             // (server/lab_proxy.h)
};

// What a route reads after its headers.
enum class BodyKind {
  kNone,        // nothing (a body is refused unread)
  kJson,        // a JSON document, read into memory (at most 4 MiB)
  kStoreFile,   // a store file: streamed to a file of the server's, never whole in memory
  kCodeUpload,  // a code upload's archive: streamed the same way
  kProxied,     // any bytes, read into memory (at most 32 MiB), for a session's lab
};

struct RoutePattern {
  std::string method;
  std::string pattern;  // "/v1/jobs/{id}/logs"
  Who who = Who::kAccount;
  BodyKind body = BodyKind::kNone;
};

// A compiled pattern.
class PathPattern {
 public:
  // Errors are bugs in the table: the constructor aborts naming the pattern.
  explicit PathPattern(std::string_view pattern);
  // Whether `path` matches; the captures in order in `captures` (cleared first).
  bool match(std::string_view path, std::vector<std::string>& captures) const;
  // The pattern as the OpenAPI document and metrics name it: "{path+}" is "{path}".
  const std::string& name() const { return name_; }

 private:
  struct Segment {
    std::string literal;  // empty: a capture
    bool capture = false;
  };
  std::vector<Segment> head_;   // before the rest capture (or all of them)
  bool rest_ = false;           // a {x+} or {x*} capture
  bool rest_may_be_empty_ = false;
  std::vector<std::string> tail_;  // literal segments after the rest capture
  std::string name_;
};

template <class Handler>
class RouteTable {
 public:
  struct Route {
    RoutePattern spec;
    PathPattern path;
    Handler handler;
  };
  void add(RoutePattern spec, Handler handler) {
    PathPattern path(spec.pattern);
    routes_.push_back(Route{std::move(spec), std::move(path), std::move(handler)});
  }
  // The first route of `method` whose pattern matches `path`, its captures in `captures`;
  // nullptr when none. `path_known` says whether the path matched a route of another method.
  const Route* match(std::string_view method, std::string_view path,
                     std::vector<std::string>& captures, bool* path_known = nullptr) const {
    if (path_known) *path_known = false;
    for (const Route& r : routes_) {
      if (!r.path.match(path, captures)) continue;
      if (r.spec.method == method) return &r;
      if (path_known) *path_known = true;
    }
    captures.clear();
    return nullptr;
  }
  const std::vector<Route>& routes() const { return routes_; }

 private:
  std::vector<Route> routes_;
};

}  // namespace cohort::server
