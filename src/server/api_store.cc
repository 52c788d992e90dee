// The store's routes: files, buckets and shares.
#include "server/server_impl.h"

namespace cohort::server {

void Server::Impl::storeRoutes() {
  // The bucket as the caller spells it (its own "BUCKET", or "OWNER@BUCKET") and the normalised
  // key, as in share prefixes: "a//b/./c/" is "a/b/c".
  auto location = [](const Request& req) -> Result<storage::Location> {
    const std::string uri =
        "store://" + std::string(req.matches[0]) + "/" + std::string(req.matches[1]);
    if (!validUtf8(uri)) {
      return fail(Code::kInvalidArgument, printable(uri) + ": the path is not valid UTF-8");
    }
    if (!storage::validStoreDirName(req.matches[0]))
      return fail(Code::kNotFound, uri + ": not found");
    COHORT_ASSIGN(storage::Location where, storage::parseLocation(uri));
    COHORT_TRY(checkStorePath(storage::storeDirName(where.owner, where.bucket), where.key));
    return where;
  };
  // What the caller reached, named as it spelled it.
  auto openAs = [this](const storage::Location& where, const store::Bucket& bucket) {
    return storage::openBucket(
        site, bucket.dir, storage::storeUri(storage::storeDirName(where.owner, where.bucket), ""));
  };
  route({"GET", "/v1/store/{bucket}/{path*}", Who::kAccount, BodyKind::kNone},
        [this, location, openAs](const Request& req, Response& res,
                                 const Caller& c) -> Result<void> {
          COHORT_ASSIGN(storage::Location where, location(req));
          const std::string& key = where.key;
          COHORT_ASSIGN(store::Bucket bucket, reachBucket(*store, c, where, Access::kRead));
          COHORT_ASSIGN(auto objects, openAs(where, bucket));
          const std::string uri = objects->uri(key);
          if (!key.empty() && req.param("list") != "1") {
            auto object = objects->open(key, options.data_root + "/server");
            if (object) {
              res.status = 200;
              res.content_type = "application/octet-stream";
              res.file_size = static_cast<uint64_t>(object->info.size);
              res.file = std::make_shared<UniqueFd>(std::move(object->fd));
              return Result<void>();
            }
            if (object.error().code != Code::kNotFound) return tl::unexpected(object.error());
          }
          // A directory: the objects under it.
          const std::string prefix = key.empty() ? "" : key + "/";
          COHORT_ASSIGN(std::vector<storage::ObjectInfo> listed, objects->list(prefix));
          if (listed.empty() && !key.empty()) return fail(Code::kNotFound, uri + ": not found");
          Json files = Json::array();
          for (const storage::ObjectInfo& o : listed) {
            files.push_back({{"path", o.key.substr(prefix.size())}, {"size", o.size}});
          }
          writeJson(res, 200, {{"files", files}});
          return Result<void>();
        });
  route({"PUT", "/v1/store/{bucket}/{path*}", Who::kAccount, BodyKind::kStoreFile},
      [this, location, openAs](const Request& req, Response& res, const Caller& c) -> Result<void> {
        COHORT_ASSIGN(storage::Location where, location(req));
        const std::string& key = where.key;
        if (key.empty()) return fail(Code::kInvalidArgument, "a file upload needs a path");
        COHORT_ASSIGN(store::Bucket bucket, reachBucket(*store, c, where, Access::kWrite));
        COHORT_ASSIGN(auto objects, openAs(where, bucket));
        // The body was received into a file of the account's upload area, never held whole.
        if (!req.body_file) return fail(Code::kInternal, "the upload's body was not kept");
        const int64_t size = static_cast<int64_t>(req.body_size);
        // The file is the bucket owner's (one who shares a bucket for writing lends its quota).
        COHORT_TRY(checkDisk(bucket.owner, {size, 1}));
        COHORT_TRY(objects->put(key, req.body_file->get(), size, nullptr));
        usage.add(bucket.owner, {size, 1});
        writeJson(res, 201, {{"uri", objects->uri(key)}, {"size", size}});
        return Result<void>();
      });
  route({"GET", "/v1/buckets", Who::kAccount, BodyKind::kNone},
      [this](const Request&, Response& res, const Caller& c) -> Result<void> {
        COHORT_ASSIGN(std::vector<store::Bucket> list, store->buckets(c.account));
        Json out = Json::array();
        for (const auto& b : list) {
          out.push_back({{"name", b.name}, {"owner", b.owner}, {"created", isoOrNull(b.created)}});
        }
        writeJson(res, 200, {{"buckets", out}});
        return Result<void>();
      });
  route({"POST", "/v1/shares", Who::kAccount, BodyKind::kJson},
        [this](const Request& req, Response& res, const Caller& c) -> Result<void> {
          COHORT_ASSIGN(Json body, jsonBody(req, {"prefix", "with", "access"}));
          COHORT_ASSIGN(std::string prefix, field<std::string>(body, "prefix", ""));
          COHORT_ASSIGN(std::string with, field<std::string>(body, "with", ""));
          COHORT_ASSIGN(std::string access, field<std::string>(body, "access", "read"));
          auto where = storage::parseLocation(prefix);
          if (!where) return withContext(where.error(), "prefix");
          if (where->kind != storage::Location::Kind::kStore) {
            return fail(Code::kInvalidArgument,
                        "prefix: expected store://bucket/prefix, got '" + prefix + "'");
          }
          if (access != "read" && access != "write") {
            return fail(Code::kInvalidArgument, "access: 'read' or 'write', got '" + access + "'");
          }
          // One of the caller's own buckets (an admin may name any account's).
          const std::string owner = where->owner.empty() ? c.account : where->owner;
          COHORT_ASSIGN(std::optional<store::Bucket> bucket, store->bucket(owner, where->bucket));
          if (!bucket || (owner != c.account && !c.admin)) {
            return fail(Code::kNotFound, "bucket '" + where->bucket + "' not found among yours");
          }
          auto grantee = store->account(with);
          if (!grantee) return fail(Code::kNotFound, "with: account '" + with + "' not found");
          if (with == owner) {
            return fail(Code::kInvalidArgument, "with: '" + with + "' owns the bucket already");
          }
          store::Share share{0, where->bucket, where->key, owner, with, access, nowUnixNanos()};
          COHORT_ASSIGN(share.id, store->addShare(share));
          writeJson(res, 201, shareJson(share));
          return Result<void>();
        });
  route({"GET", "/v1/shares", Who::kAccount, BodyKind::kNone},
        [this](const Request&, Response& res, const Caller& c) -> Result<void> {
          COHORT_ASSIGN(std::vector<store::Share> list, store->shares(c.account));
          Json out = Json::array();
          for (const auto& s : list) out.push_back(shareJson(s));
          writeJson(res, 200, {{"shares", out}});
          return Result<void>();
        });
  route({"DELETE", "/v1/shares/{id}", Who::kAccount, BodyKind::kNone},
        [this](const Request& req, Response& res, const Caller& c) -> Result<void> {
          COHORT_ASSIGN(int64_t id, idParam(req.matches[0], "share"));
          auto share = store->share(id);
          if (!share || (share->owner != c.account && share->grantee != c.account && !c.admin)) {
            return fail(Code::kNotFound, "share " + std::to_string(id) + " not found");
          }
          if (share->owner != c.account && !c.admin) {
            return fail(Code::kPermissionDenied, "share " + std::to_string(id) +
                                                     " can be revoked only by its owner, '" +
                                                     share->owner + "'");
          }
          COHORT_TRY(store->deleteShare(id));
          res.status = 204;
          return Result<void>();
        });
}

}  // namespace cohort::server
